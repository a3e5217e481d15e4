"""An ONNX model run by PyTorch eager: each node one torch operator, in graph order, one thread.

This is how the nets bench compares against torch without a converter: the model's initializers
become torch tensors once, and a call dispatches the nodes one by one to `torch.nn.functional`
— what a `torch.nn.Module` of the same layers does in eager mode (BatchNormalization stays a
separate operator, as in `model.eval()`). Only the operators of the repository's models
(`loopstack/onnx/models.py`) and their attributes are known; anything else raises
`UnsupportedError` naming the node.

    run = torch_eager(model_proto); outputs = run({"input": x})   # {name: numpy array}
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _conv(F, x, w, b=None, group=1, kernel_shape=None, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1)):
    top, left, bottom, right = pads
    if (top, left) != (bottom, right):
        x = F.pad(x, (left, right, top, bottom))
        top = left = 0
    return F.conv2d(x, w, b, tuple(strides), (top, left), tuple(dilations), group)


def _maxpool(F, x, kernel_shape, pads=(0, 0, 0, 0), strides=None, ceil_mode=0):
    top, left, bottom, right = pads
    if (top, left) != (bottom, right):
        raise UnsupportedError(f"MaxPool with asymmetric pads {list(pads)}")
    return F.max_pool2d(x, tuple(kernel_shape), tuple(strides or kernel_shape), (top, left), ceil_mode=bool(ceil_mode))


def _gemm(torch, a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    a = a.t() if transA else a
    b = b.t() if transB else b
    if c is None:
        return alpha * (a @ b) if alpha != 1.0 else a @ b
    if alpha == 1.0 and beta == 1.0:
        return torch.addmm(c, a, b)
    return torch.addmm(c, a, b, beta=beta, alpha=alpha)


def _hardsigmoid(F, x, alpha=0.2, beta=0.5):
    if abs(alpha - 1 / 6) < 1e-7 and beta == 0.5:
        return F.hardsigmoid(x)
    return (x * alpha + beta).clamp_(0.0, 1.0)


def _layernorm(F, x, scale, bias=None, axis=-1, epsilon=1e-5):
    axis = axis % x.dim()
    return F.layer_norm(x, tuple(x.shape[axis:]), scale, bias, epsilon)


def _operators(torch):
    F = torch.nn.functional
    return {
        "Conv": lambda x, w, b=None, **k: _conv(F, x, w, b, **k),
        "BatchNormalization": lambda x, s, b, m, v, epsilon=1e-5, **k: F.batch_norm(x, m, v, s, b, False, 0.0, epsilon),
        "Relu": lambda x: F.relu(x),
        "HardSwish": lambda x: F.hardswish(x),
        "HardSigmoid": lambda x, **k: _hardsigmoid(F, x, **k),
        "GlobalAveragePool": lambda x: F.adaptive_avg_pool2d(x, 1),
        "MaxPool": lambda x, **k: _maxpool(F, x, **k),
        "Flatten": lambda x, axis=1: x.reshape(int(np.prod(x.shape[:axis])), -1),
        "Gemm": lambda a, b, c=None, **k: _gemm(torch, a, b, c, **k),
        "MatMul": lambda a, b: torch.matmul(a, b),
        "Add": lambda a, b: a + b,
        "Mul": lambda a, b: a * b,
        "Div": lambda a, b: a / b,
        "Erf": lambda x: torch.erf(x),
        "Softmax": lambda x, axis=-1: F.softmax(x, axis),
        "LayerNormalization": lambda x, s, b=None, **k: _layernorm(F, x, s, b, **k),
        "Transpose": lambda x, perm: x.permute(*perm),
        "Reshape": lambda x, shape, allowzero=0: x.reshape([x.shape[i] if int(d) == 0 and not allowzero else int(d)
                                                            for i, d in enumerate(shape.tolist())]),
        "Identity": lambda x: x,
    }


def torch_eager(model):
    """A function running ONNX `model` (a ModelProto) with torch eager on one thread:
    {input name: array} -> {output name: array}."""
    import torch
    from onnx import numpy_helper

    torch.set_num_threads(1)
    ops = _operators(torch)
    consts = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in model.graph.initializer}
    steps = []
    for position, node in enumerate(model.graph.node):
        if node.op_type == "Constant":
            consts[node.output[0]] = torch.from_numpy(numpy_helper.to_array(_attrs(node)["value"]).copy())
            continue
        if node.domain not in ("", "ai.onnx") or node.op_type not in ops:
            raise UnsupportedError(f"torch eager peer: node {node.name or position} ({node.op_type}) is not supported")
        steps.append((ops[node.op_type], list(node.input), list(node.output), _attrs(node)))
    outputs = [o.name for o in model.graph.output]

    def run(feeds: dict) -> dict:
        env = dict(consts)
        env.update({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in feeds.items()})
        with torch.no_grad():
            for fn, ins, outs, attrs in steps:
                env[outs[0]] = fn(*(env[i] if i else None for i in ins), **attrs)
        return {name: env[name].contiguous().numpy() for name in outputs}
    return run
