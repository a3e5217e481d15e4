"""The ONNX backend API (`onnx.backend.base.Backend`) on loopstack, so that ONNX's own test
cases run against it:

    from loopstack.onnx import backend
    outputs = backend.prepare(model).run([x, ...])     # or run({name: array})

A graph input that an operator needs at import (a Reshape's shape, a Conv's weights, a Clip's
bounds) is bound as a constant from the arrays given to `run`, which therefore compiles the
model for those values (each `run` of a model with such inputs compiles it again).
"""
from __future__ import annotations

import numpy as np
from onnx.backend.base import Backend, BackendRep, namedtupledict

from ..errors import ArgumentError, UnsupportedError
from .graph import opset_of
from .registry import const_inputs


def constant_slots(model) -> set:
    """Names of graph inputs that feed an input some operator needs to be constant."""
    from . import ops  # noqa: F401 - registers the converters

    opset = opset_of(model)
    names = set()
    for node in model.graph.node:
        for i in const_inputs(node.op_type, opset):
            if i < len(node.input) and node.input[i]:
                names.add(node.input[i])
    return names


class LoopstackRep(BackendRep):
    def __init__(self, model, target=None):
        self.model = model
        self.target = target
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in inits]
        self.output_names = [o.name for o in model.graph.output]
        self.const_names = constant_slots(model)
        self._compiled = None

    def run(self, inputs, **kwargs):
        from . import compile as compile_model

        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
            if len(inputs) > len(self.input_names):
                raise ArgumentError(f"{len(inputs)} inputs given, the model takes {len(self.input_names)}")
            feeds = dict(zip(self.input_names, inputs))
        for k, v in feeds.items():
            if type(v).__name__ == "TensorProto":    # a dtype numpy lacks (float8, int4, ...)
                from onnx import TensorProto

                raise UnsupportedError(f"input {k!r}: dtype {TensorProto.DataType.Name(v.data_type).lower()} "
                                       "is not supported")
            if not isinstance(v, np.ndarray) and not np.isscalar(v):
                raise UnsupportedError(f"input {k!r}: a {type(v).__name__} (sequences and maps are not supported)")
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        consts = {k: v for k, v in feeds.items() if k in self.const_names}
        dynamic = {k: v for k, v in feeds.items() if k not in consts}
        shapes = {k: v.shape for k, v in dynamic.items()}
        if self._compiled is None or consts:
            self._compiled = compile_model(self.model, target=self.target, input_shapes=shapes, constants=consts)
        out = self._compiled.run(dynamic)
        return namedtupledict("Outputs", self.output_names)(*[out[n] for n in self.output_names])


class LoopstackBackend(Backend):
    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")

    @classmethod
    def prepare(cls, model, device: str = "CPU", target=None, **kwargs):
        super().prepare(model, device, **kwargs)
        return LoopstackRep(model, target)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)


prepare = LoopstackBackend.prepare
run_model = LoopstackBackend.run_model
supports_device = LoopstackBackend.supports_device
