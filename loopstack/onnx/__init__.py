"""ONNX models in loopstack: import, whole-model compile, the ONNX backend API.

    import loopstack as lt
    net = lt.onnx.load("model.onnx")               # a loopstack network, shapes inferred
    model = lt.onnx.compile("model.onnx")          # compiled, layer by layer
    y = model(x)                                   # or model.run({"input": x}) -> {name: array}
    print(model.compile_ms); print(model.summary())

Needs the `onnx` package (`pip install loopstack[onnx]`); it is imported on first use.
"""
from __future__ import annotations

from ..errors import UnsupportedError  # noqa: F401


def load(model, input_shapes=None, constants=None, target=None, passes=True):
    """An ONNX model (path or ModelProto) as a loopstack network (see graph.load)."""
    from .graph import load as _load

    return _load(model, input_shapes=input_shapes, constants=constants, target=target, passes=passes)


def compile(model, target=None, input_shapes=None, constants=None, passes=True, threads=None,  # noqa: A001
            borders=True):
    """A callable compiled model of an ONNX model (path, ModelProto or loaded network); its
    parallel loops run on `threads` threads (default: every core). `borders=False`: padded
    activations are copied into zero-bordered temps at every call (see model.py)."""
    from .model import compile_model

    return compile_model(model, target=target, input_shapes=input_shapes, constants=constants, passes=passes,
                         threads=threads, borders=borders)


def tune(model, budget_s: float = 60, mapper: str = "scripted", cost_model: str = "measure", target=None,
         input_shapes=None, progress=None):
    """Tune each distinct layer program of a model once (see tuning.tune_model)."""
    from .tuning import tune_model

    return tune_model(model, budget_s=budget_s, mapper=mapper, cost_model=cost_model, target=target,
                      input_shapes=input_shapes, progress=progress)
