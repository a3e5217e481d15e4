"""Networks built with `onnx.helper`, random weights, batch 1: the models of the nets bench.

    m = mlp()                              # onnx.ModelProto
    m = resnet18()                         # 224x224, 3.6 GFLOP
    m = mobilenet_v3_small()               # 224x224
    m = bert_layer()                       # one BERT-base encoder layer, sequence 128
    m = resnet18(resolution=32, width=8, blocks=(1, 1, 1, 1))   # the reduced form the tests run

Convolutions are followed by BatchNormalization (with random statistics) as exported
networks are, so the import's folding is exercised; every model's input is "input" and its
output "output".
"""
from __future__ import annotations

import math

import numpy as np

OPSET = 17


class Builder:
    """A graph under construction: `node` appends and returns its output name."""

    def __init__(self, seed: int = 0):
        from onnx import helper

        self.helper = helper
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, arr, base="w") -> str:
        from onnx import numpy_helper

        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(self, shape, fan_in, base="w") -> str:
        return self.const((self.rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32), base)

    def node(self, op, inputs, n_out=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(self.helper.make_node(op, list(inputs), outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, input_shape, output, name: str, opset: int = OPSET):
        from onnx import TensorProto

        h = self.helper
        self.nodes.append(h.make_node("Identity", [output], ["output"], name="output"))
        g = h.make_graph(self.nodes, name, [h.make_tensor_value_info("input", TensorProto.FLOAT, list(input_shape))],
                         [h.make_tensor_value_info("output", TensorProto.FLOAT, None)], self.inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="loopstack.onnx.models")
        m.ir_version = 8
        return m

    # ------------------------------------------------------------------ layers
    def conv(self, x, cin, cout, k, stride=1, groups=1, bn=True, act=None):
        w = self.weight((cout, cin // groups, k, k), cin // groups * k * k)
        ins = [x, w] if bn else [x, w, self.const(np.zeros(cout, np.float32), "b")]
        y = self.node("Conv", ins, kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=groups)
        if bn:
            y = self.batchnorm(y, cout)
        return self.act(y, act)

    def batchnorm(self, x, c):
        r = self.rng
        return self.node("BatchNormalization", [
            x, self.const((1 + 0.1 * r.standard_normal(c)).astype(np.float32), "gamma"),
            self.const((0.1 * r.standard_normal(c)).astype(np.float32), "beta"),
            self.const((0.1 * r.standard_normal(c)).astype(np.float32), "mean"),
            self.const((1 + 0.1 * r.random(c)).astype(np.float32), "var")], epsilon=1e-5)

    def act(self, x, act):
        if act is None:
            return x
        return self.node({"relu": "Relu", "hswish": "HardSwish", "hsigmoid": "HardSigmoid"}[act], [x],
                         **({"alpha": 1 / 6, "beta": 0.5} if act == "hsigmoid" else {}))

    def linear(self, x, cin, cout, act=None):
        y = self.node("Gemm", [x, self.weight((cin, cout), cin), self.const(
            (0.1 * self.rng.standard_normal(cout)).astype(np.float32), "b")])
        return self.act(y, act)


# ---------------------------------------------------------------------------- the networks
def mlp(batch: int = 1, sizes=(784, 512, 512, 10), seed: int = 0):
    """Gemm + Relu layers, a Softmax at the end."""
    b = Builder(seed)
    x = "input"
    for i, (cin, cout) in enumerate(zip(sizes, sizes[1:])):
        x = b.linear(x, cin, cout, act="relu" if i < len(sizes) - 2 else None)
    return b.model((batch, sizes[0]), b.node("Softmax", [x], axis=-1), "mlp")


def resnet18(resolution: int = 224, width: int = 64, blocks=(2, 2, 2, 2), classes: int = 1000, seed: int = 0):
    """ResNet-18 (basic blocks; BatchNormalization after every convolution)."""
    b = Builder(seed)
    x = b.conv("input", 3, width, 7, stride=2, act="relu")
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage, n in enumerate(blocks):
        cout = width * 2 ** stage
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            y = b.conv(x, cin, cout, 3, stride, act="relu")
            y = b.conv(y, cout, cout, 3)
            short = b.conv(x, cin, cout, 1, stride) if stride != 1 or cin != cout else x
            x = b.act(b.node("Add", [y, short]), "relu")
            cin = cout
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model((1, 3, resolution, resolution), b.linear(x, cin, classes), "resnet18")


# kernel, expansion, output channels, squeeze-excite, activation, stride (torchvision's table)
_MBV3_SMALL = [(3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2), (3, 88, 24, False, "relu", 1),
               (5, 96, 40, True, "hswish", 2), (5, 240, 40, True, "hswish", 1), (5, 240, 40, True, "hswish", 1),
               (5, 120, 48, True, "hswish", 1), (5, 144, 48, True, "hswish", 1), (5, 288, 96, True, "hswish", 2),
               (5, 576, 96, True, "hswish", 1), (5, 576, 96, True, "hswish", 1)]


def _divisible(v, d=8):
    return max(d, int(v + d / 2) // d * d)


def mobilenet_v3_small(resolution: int = 224, width: float = 1.0, classes: int = 1000, seed: int = 0):
    """MobileNetV3-Small: inverted residuals with depthwise convolutions, squeeze-excite."""
    b = Builder(seed)
    c = _divisible(16 * width)
    x = b.conv("input", 3, c, 3, stride=2, act="hswish")
    for k, exp, out, se, act, stride in _MBV3_SMALL:
        e, o = _divisible(exp * width), _divisible(out * width)
        y = b.conv(x, c, e, 1, act=act) if e != c else x
        y = b.conv(y, e, e, k, stride, groups=e, act=act)
        if se:
            s = b.node("GlobalAveragePool", [y])
            mid = _divisible(e // 4)
            s = b.conv(s, e, mid, 1, bn=False, act="relu")
            s = b.conv(s, mid, e, 1, bn=False, act="hsigmoid")
            y = b.node("Mul", [y, s])
        y = b.conv(y, e, o, 1)
        x = b.node("Add", [y, x]) if stride == 1 and c == o else y
        c = o
    last = _divisible(576 * width)
    x = b.conv(x, c, last, 1, act="hswish")
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    x = b.linear(x, last, 1024, act="hswish")
    return b.model((1, 3, resolution, resolution), b.linear(x, 1024, classes), "mobilenet_v3_small")


def bert_layer(seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072, seed: int = 0):
    """One BERT encoder layer: self-attention, residual + LayerNormalization, GELU feed-forward."""
    b = Builder(seed)
    hd = hidden // heads

    def dense(x, cin, cout):
        return b.node("Add", [b.node("MatMul", [x, b.weight((cin, cout), cin)]),
                              b.const((0.02 * b.rng.standard_normal(cout)).astype(np.float32), "b")])

    def heads_of(x, perm):
        r = b.node("Reshape", [x, b.const(np.array([1, seq, heads, hd], np.int64), "shape")])
        return b.node("Transpose", [r], perm=perm)

    def layer_norm(x):
        return b.node("LayerNormalization", [x, b.const(np.ones(hidden, np.float32), "ln_g"),
                                             b.const(np.zeros(hidden, np.float32), "ln_b")], axis=-1, epsilon=1e-12)

    x = "input"
    q = heads_of(dense(x, hidden, hidden), [0, 2, 1, 3])
    k = heads_of(dense(x, hidden, hidden), [0, 2, 3, 1])
    v = heads_of(dense(x, hidden, hidden), [0, 2, 1, 3])
    scores = b.node("Mul", [b.node("MatMul", [q, k]), b.const(np.array(1 / math.sqrt(hd), np.float32), "scale")])
    ctx = b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])
    ctx = b.node("Reshape", [b.node("Transpose", [ctx], perm=[0, 2, 1, 3]),
                             b.const(np.array([1, seq, hidden], np.int64), "shape")])
    x = layer_norm(b.node("Add", [dense(ctx, hidden, hidden), x]))
    h = dense(x, hidden, ffn)
    erf = b.node("Erf", [b.node("Div", [h, b.const(np.array(math.sqrt(2), np.float32), "sqrt2")])])
    gelu = b.node("Mul", [b.node("Mul", [h, b.node("Add", [erf, b.const(np.array(1, np.float32), "one")])]),
                          b.const(np.array(0.5, np.float32), "half")])
    out = layer_norm(b.node("Add", [dense(gelu, ffn, hidden), x]))
    return b.model((1, seq, hidden), out, "bert_layer")


MODELS = {"mlp": mlp, "mobilenet_v3_small": mobilenet_v3_small, "resnet18": resnet18, "bert_layer": bert_layer}

from .qmodels import mobilenet_v3_small_int8, resnet18_int8  # noqa: E402 - int8 rows (onnxruntime.quantization)

MODELS.update(resnet18_int8=resnet18_int8, mobilenetv3_int8=mobilenet_v3_small_int8)
