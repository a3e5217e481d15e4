"""A small writer of TensorFlow Lite flatbuffers, for the XNNPACK peer.

LiteRT (`ai-edge-litert`) runs `.tflite` models and hands the operators XNNPACK supports to its
XNNPACK delegate; no converter is needed to compare against it, only a model file. This module
writes one from the schema's own generated object API (`ai_edge_litert.schema_py_generated`):

    g = TfliteGraph()
    x = g.input("x", (1, 56, 56, 64))
    w = g.const("w", filter_ohwi)
    y = g.op("CONV_2D", [x, w, g.const("b", bias)], (1, 56, 56, 128), "Conv2DOptions",
             padding="SAME", strideH=1, strideW=1)
    g.output(y); model_bytes = g.finish()

Only float32 tensors (and int32 constants such as PAD's paddings) are written.
"""
from __future__ import annotations

import numpy as np

_TYPES = {np.dtype(np.float32): "FLOAT32", np.dtype(np.int32): "INT32"}


def _schema():
    from ai_edge_litert import schema_py_generated as schema

    return schema


class TfliteGraph:
    def __init__(self):
        s = self.s = _schema()
        self.buffers = [s.BufferT()]          # buffer 0: the empty buffer of every non-constant tensor
        self.tensors: list = []
        self.ops: list = []
        self.opcodes: dict[int, int] = {}     # builtin code -> index in `codes`
        self.codes: list = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    def _tensor(self, name: str, shape, dtype, buffer: int = 0) -> int:
        t = self.s.TensorT()
        t.name = name
        t.shape = [int(d) for d in shape]
        t.type = getattr(self.s.TensorType, _TYPES[np.dtype(dtype)])
        t.buffer = buffer
        self.tensors.append(t)
        return len(self.tensors) - 1

    def input(self, name: str, shape, dtype=np.float32) -> int:
        self.inputs.append(self._tensor(name, shape, dtype))
        return self.inputs[-1]

    def const(self, name: str, value: np.ndarray) -> int:
        value = np.ascontiguousarray(value)
        buf = self.s.BufferT()
        buf.data = np.frombuffer(value.tobytes(), np.uint8)
        self.buffers.append(buf)
        return self._tensor(name, value.shape, value.dtype, len(self.buffers) - 1)

    def op(self, kind: str, inputs: list[int], out_shape, options: str | None = None, **fields) -> int:
        """Append builtin operator `kind` ("CONV_2D", ...) reading `inputs`; its options table is
        `options` ("Conv2DOptions") with `fields` set by their schema names (activations as
        `fusedActivationFunction="RELU"`, paddings as `padding="SAME"`)."""
        s = self.s
        code = getattr(s.BuiltinOperator, kind)
        if code not in self.opcodes:
            oc = s.OperatorCodeT()
            oc.builtinCode = code
            oc.deprecatedBuiltinCode = min(code, 127)
            oc.version = 1
            self.opcodes[code] = len(self.codes)
            self.codes.append(oc)
        out = self._tensor(f"{kind.lower()}_{len(self.ops)}", out_shape, np.float32)
        o = s.OperatorT()
        o.opcodeIndex = self.opcodes[code]
        o.inputs, o.outputs = list(inputs), [out]
        if options is not None:
            opts = getattr(s, options + "T")()
            for key, value in fields.items():
                if key == "fusedActivationFunction":
                    value = getattr(s.ActivationFunctionType, value)
                elif key == "padding":
                    value = getattr(s.Padding, value)
                if not hasattr(opts, key):
                    raise AttributeError(f"{options} has no field {key!r}")
                setattr(opts, key, value)
            o.builtinOptionsType = getattr(s.BuiltinOptions, options)
            o.builtinOptions = opts
        self.ops.append(o)
        return out

    def output(self, tensor: int) -> None:
        self.outputs.append(tensor)

    def finish(self) -> bytes:
        import flatbuffers

        s = self.s
        sub = s.SubGraphT()
        sub.tensors, sub.operators = self.tensors, self.ops
        sub.inputs, sub.outputs = self.inputs, self.outputs
        sub.name = "main"
        model = s.ModelT()
        model.version = 3
        model.operatorCodes = self.codes
        model.subgraphs = [sub]
        model.buffers = self.buffers
        model.description = "loopstack bench peer"
        b = flatbuffers.Builder(1024)
        b.Finish(model.Pack(b), file_identifier=b"TFL3")
        return bytes(b.Output())
