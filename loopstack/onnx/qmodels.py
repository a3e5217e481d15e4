"""Quantized models built in the repository (random weights; no model can be downloaded here).

    qdq_cnn()                 a small int8 CNN in the QDQ format, written with onnx.helper:
                              Conv+Relu, depthwise Conv, strided 1x1 Conv, Flatten, MatMul
    quantize(model, inputs)   an fp32 model of models.py quantized by onnxruntime.quantization
                              (QDQ, per-channel int8 weights, uint8 activations), calibrated on `inputs`
    resnet18_int8()           ResNet-18 and MobileNetV3-Small (batch 1, 224x224) quantized so:
    mobilenet_v3_small_int8()     the nets bench's int8 rows
"""
from __future__ import annotations

import numpy as np


def _q(rng, shape, dt=np.int8):
    info = np.iinfo(dt)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dt)


def qdq_cnn(resolution: int = 16, channels: int = 16, classes: int = 10, seed: int = 0):
    """x [1, 3, R, R] float -> QuantizeLinear -> (DequantizeLinear -> op -> QuantizeLinear)* ->
    DequantizeLinear -> y [1, classes] float. Activations uint8, weights int8 per output channel,
    biases int32 at scale x_scale * w_scale."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def dq(src, scale, zp, out, axis=None):
        kw = {} if axis is None else {"axis": axis}
        nodes.append(helper.make_node("DequantizeLinear", [src, scale, zp], [out], **kw))
        return out

    def q(src, scale, zp, out):
        nodes.append(helper.make_node("QuantizeLinear", [src, scale, zp], [out]))
        return out

    act = {"s": const("s0", np.float32(0.03)), "zp": const("z0", np.uint8(128)), "v": 0.03}
    cur = q("x", act["s"], act["zp"], "x_q")

    def conv(i, x_q, c_in, c_out, k, group=1, stride=1, relu=False):
        nonlocal act
        w = _q(rng, (c_out, c_in // group, k, k))
        w_s = rng.uniform(0.002, 0.01, c_out).astype(np.float32)
        b = rng.integers(-2000, 2000, c_out).astype(np.int32)
        x_f = dq(x_q, act["s"], act["zp"], f"x{i}_f")
        w_f = dq(const(f"w{i}", w), const(f"ws{i}", w_s), const(f"wz{i}", np.zeros(c_out, np.int8)), f"w{i}_f", 0)
        bs = (np.float32(act["v"]) * w_s).astype(np.float32)
        b_f = dq(const(f"b{i}", b), const(f"bs{i}", bs), const(f"bz{i}", np.zeros(c_out, np.int32)), f"b{i}_f", 0)
        y = f"y{i}"
        nodes.append(helper.make_node("Conv", [x_f, w_f, b_f], [y], kernel_shape=[k, k], pads=[k // 2] * 4,
                                      strides=[stride] * 2, group=group))
        if relu:
            nodes.append(helper.make_node("Relu", [y], [y + "_r"]))
            y += "_r"
        v = 0.05 + 0.01 * i
        act = {"s": const(f"s{i}", np.float32(v)), "zp": const(f"z{i}", np.uint8(0 if relu else 128)), "v": v}
        return q(y, act["s"], act["zp"], f"y{i}_q")

    cur = conv(1, cur, 3, channels, 3, relu=True)
    cur = conv(2, cur, channels, channels, 3, group=channels, relu=True)
    cur = conv(3, cur, channels, 2 * channels, 1, stride=2)
    side = (resolution + 1) // 2
    feat = 2 * channels * side * side
    f = dq(cur, act["s"], act["zp"], "flat_in")
    nodes.append(helper.make_node("Flatten", [f], ["flat"]))
    cur = q("flat", act["s"], act["zp"], "flat_q")
    a_f = dq(cur, act["s"], act["zp"], "fc_in")
    w = _q(rng, (feat, classes))
    w_f = dq(const("wfc", w), const("wsfc", np.float32(0.004)), const("wzfc", np.int8(0)), "wfc_f")
    nodes.append(helper.make_node("MatMul", [a_f, w_f], ["logits"]))
    cur = q("logits", const("sfc", np.float32(0.25)), const("zfc", np.uint8(128)), "logits_q")
    dq(cur, "sfc", "zfc", "y")
    g = helper.make_graph(nodes, "qdq_cnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, resolution, resolution))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, classes))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def quantize(model, inputs: list, per_channel: bool = True):
    """`model` (an fp32 ModelProto) quantized statically in the QDQ format by onnxruntime,
    calibrated on `inputs` (a list of {input name: array})."""
    import os
    import tempfile

    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(inputs)

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "fp32.onnx"), os.path.join(d, "int8.onnx")
        onnx.save(model, src)
        # onnxruntime's pre-processing folds BatchNormalization into the convolutions first, as
        # its quantization tools ask
        quant_pre_process(src, src, skip_symbolic_shape=True)
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return onnx.load(dst)


def _statically_quantized(build, resolution: int, calibration: int, seed: int):
    """`build(resolution)` quantized statically (QDQ) on `calibration` standard-normal inputs,
    the distribution the nets bench feeds it."""
    rng = np.random.default_rng(seed)
    shape = (1, 3, resolution, resolution)
    return quantize(build(resolution), [{"input": rng.standard_normal(shape, np.float32)}
                                        for _ in range(calibration)])


def resnet18_int8(resolution: int = 224, calibration: int = 2, seed: int = 0):
    from .models import resnet18

    return _statically_quantized(resnet18, resolution, calibration, seed)


def mobilenet_v3_small_int8(resolution: int = 224, calibration: int = 2, seed: int = 0):
    from .models import mobilenet_v3_small

    return _statically_quantized(mobilenet_v3_small, resolution, calibration, seed)
