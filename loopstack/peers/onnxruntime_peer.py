"""onnxruntime (one thread, sequential, every graph optimisation on) as a peer.

Each workload becomes the ONNX graph a user would hand onnxruntime: MatMul for the matmuls, Gemm +
Relu layers for the MLPs (weights and biases initializers, as loopstack's are constant inputs),
Conv on NCHW tensors for the convolutions (group = channels for depthwise). The input is
transposed to NCHW once, outside the timing; inputs and the output are bound once with an
IOBinding, so a timed call is `run_with_iobinding` alone.
"""
from __future__ import annotations

import time

import numpy as np

from .common import PeerSkipped, Prepared, conv_geometry


def _graph(w, a):
    """(ModelProto, feeds {name: array}, output shape)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, feeds = [], [], {}

    def init(name, value):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value, np.float32), name))
        return name

    def inp(name, value):
        feeds[name] = np.ascontiguousarray(value, np.float32)
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(value.shape))

    if w.kind == "mm":
        inputs = [inp("A", a["A"]), inp("B", a["B"])]
        nodes.append(helper.make_node("MatMul", ["A", "B"], ["Y"]))
        out_shape = (a["A"].shape[0], a["B"].shape[1])
    elif w.kind == "mlp":
        inputs = [inp("X", a["X"])]
        y = "X"
        for i in range(3):
            nodes.append(helper.make_node("Gemm", [y, init(f"W{i}", a[f"W{i}"]), init(f"b{i}", a[f"b{i}"])], [f"g{i}"]))
            y = "Y" if i == 2 else f"r{i}"
            nodes.append(helper.make_node("Relu", [f"g{i}"], [y]))
        out_shape = a["X"].shape
    elif w.kind in ("conv", "dwconv", "mbv3"):
        stride, pad, r, o = conv_geometry(w)
        x = a["X"]
        c = x.shape[2]
        inputs = [inp("X", x.transpose(2, 0, 1)[None])]                  # NCHW
        if w.kind == "conv":
            weight, group = a["W"].transpose(3, 2, 0, 1), 1                # [k, c, r, s]
        else:
            wd = a["W"] if w.kind == "dwconv" else a["Wd"]
            weight, group = wd.transpose(2, 0, 1)[:, None], c             # [c, 1, r, s]
        k = weight.shape[0]
        conv_out = "Y" if w.kind != "mbv3" else "d"
        nodes.append(helper.make_node("Conv", ["X", init("W", weight)], [conv_out], group=group,
                                      kernel_shape=[r, r], strides=[stride, stride], pads=[pad] * 4))
        if w.kind == "mbv3":
            wp = a["Wp"].T[:, :, None, None]                               # [k, c, 1, 1]
            k = wp.shape[0]
            nodes += [helper.make_node("Relu", ["d"], ["dr"]),
                      helper.make_node("Conv", ["dr", init("Wp", wp)], ["p"]),
                      helper.make_node("Relu", ["p"], ["Y"])]
        out_shape = (1, k, o, o)
    else:
        raise PeerSkipped(f"onnxruntime has no {w.kind}")
    graph = helper.make_graph(nodes, w.name, inputs,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, list(out_shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, feeds, out_shape


def _reference_layout(w, y: np.ndarray) -> np.ndarray:
    """NCHW convolution outputs back in the workload's [oh, ow, k] (mbv3: [oh * ow, k])."""
    if w.kind in ("conv", "dwconv"):
        return y[0].transpose(1, 2, 0)
    if w.kind == "mbv3":
        return y[0].transpose(1, 2, 0).reshape(-1, y.shape[1])
    return y


def session(model, profile_prefix: str | None = None, threads: int = 1):
    """An onnxruntime session on one thread (or `threads` for its operators), sequential, all
    graph optimisations on, for a ModelProto or a model file's path (with `profile_prefix`, its
    profiler on)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if profile_prefix is not None:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])


def prepare(w, a) -> Prepared:
    model, feeds, out_shape = _graph(w, a)
    t0 = time.perf_counter()
    sess = session(model)
    ms = (time.perf_counter() - t0) * 1e3
    out = np.empty(out_shape, np.float32)
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    binding.bind_output("Y", "cpu", element_type=np.float32, shape=out.shape, buffer_ptr=out.ctypes.data)
    return Prepared({"onnxruntime": lambda: sess.run_with_iobinding(binding)}, compile_ms=ms,
                    result=lambda: _reference_layout(w, out))
