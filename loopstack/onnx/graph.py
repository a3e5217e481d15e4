"""ONNX graph -> a loopstack network: a list of layers, each one DSL program.

    net = load("model.onnx")          # or a ModelProto
    print(net)                        # one line per layer: its ONNX nodes, shape, reads

The importer walks the nodes in order with a converter per operator (see registry.py).
Constant inputs fold at import: with the converter's numpy form where it has one (shape
arithmetic), else by compiling and running its DSL program once (a Conv of constants).
Element-wise operators extend their input's lazy expression, so a chain of them fuses into
one kernel; see values.py for where a value is materialized into a buffer.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import ArgumentError, LoopstackError, ShapeError, UnsupportedError
from ..frontend.graph import toposort
from .registry import lookup
from .values import Dyn, const_dyn, is_const, placeholder

MAX_FUSED = 12     # ONNX nodes one lazy expression may gather before it is stored anyway


@dataclass
class Layer:
    """One kernel of the network: `tensor` (a DSL program) writes buffer `out` of `shape`."""
    name: str
    ops: tuple                 # the ONNX nodes it computes
    tensor: object             # loopstack Tensor, dimensions in the ONNX axis order
    out: str
    shape: tuple


@dataclass
class NetGraph:
    """A loaded network: its inputs, layers in execution order and outputs.

    `reads` maps each placeholder (DSL read node, by id) to the buffer it reads and the shape
    it reads it under; a buffer is a graph input ("in:NAME") or a layer's output."""
    inputs: list                 # (name, shape)
    outputs: list                # (name, ("buffer", buffer name) | ("const", array), shape)
    layers: list
    reads: dict = field(default_factory=dict)
    buffers: dict = field(default_factory=dict)   # buffer name -> shape
    opset: int = 0
    dtypes: dict = field(default_factory=dict)    # buffer name -> numpy dtype name, where not float32

    def __str__(self) -> str:
        lines = [f"inputs  {', '.join(f'{n}{list(s)}' for n, s in self.inputs)}"]
        for i, L in enumerate(self.layers):
            lines.append(f"{i:3d} {L.out:<10} {str(list(L.shape)):<22} {'+'.join(L.ops)}")
        lines.append(f"outputs {', '.join(n for n, _, _ in self.outputs)}")
        return "\n".join(lines)


class Importer:
    def __init__(self, opset: int, target=None):
        self.opset = opset
        self.target = target
        self.layers: list[Layer] = []
        self.reads: dict = {}
        self.buffers: dict = {}
        self.dtypes: dict = {}     # buffer -> dtype name where not float32 (quantized values)
        self.node_label = ""
        self.node_outputs = 1      # outputs the current node asks for (Split without sizes)

    # ------------------------------------------------------------------ buffers
    def placeholder(self, buffer: str, shape, keep=(), layout=None) -> Dyn:
        """A fresh read of `buffer`, which holds a value of ONNX `shape` with its axes in the
        order `layout` (row-major when None)."""
        base, v = placeholder(shape, keep, layout, self.dtypes.get(buffer, "float32"))
        stored = tuple(shape[a] for a in v.layout if v.dims[a] is not None)
        self.reads[id(base._node)] = (buffer, stored, base)
        v.buffer = buffer
        return v

    def materialize(self, v, keep=(), layout=None) -> Dyn:
        """`v` in a buffer (a layer computing it, unless it is one already) with its axes in
        the order `layout` (else the value's own hint, else the ONNX order), read through a
        placeholder whose axes in `keep` stay in the expression even where of size 1."""
        if is_const(v):
            return const_dyn(v, keep=keep)
        rank = len(v.shape)
        order = tuple(layout or v.layout or range(rank))
        if v.buffer is not None and tuple(v.layout or range(rank)) == order:
            if all(v.dims[a] is not None for a in keep):
                return v
            return self.placeholder(v.buffer, v.shape, keep, order)
        if _reads_only_constants(v.t):
            return const_dyn(self.evaluate(v), keep=keep)
        syms = [v.dims[a] for a in order if v.dims[a] is not None]
        t = v.t.transpose(*syms) if tuple(syms) != tuple(v.t.symbolic_shape) else v.t
        name = f"t{len(self.layers)}"
        shape = tuple(v.shape[a] for a in order if v.dims[a] is not None)
        self.layers.append(Layer("+".join(v.ops) or name, v.ops, t, name, shape))
        self.buffers[name] = shape
        dt = _dtype_of(t)
        if dt != "float32":
            self.dtypes[name] = dt
        return self.placeholder(name, v.shape, keep, order)

    def ready(self, v, keep=()) -> Dyn:
        """`v` as an operator that reads it many times wants it: in memory, or a view of memory."""
        if is_const(v):
            return const_dyn(v, keep=keep)
        if v.buffer is None and not _only_views(v.t):
            return self.materialize(v, keep)
        if any(v.dims[a] is None for a in keep):
            return self.materialize(v, keep)
        return v

    def ready_to_pad(self, v, keep=()) -> Dyn:
        """`v` as an operator that pads it wants it: a whole buffer. (The frontend checks a
        padded read against the bounds of the buffer underneath, so padding a slice of one
        would read the rest of the buffer where zeros belong.)"""
        if is_const(v):
            return const_dyn(v, keep=keep)
        if v.buffer is None and v.t._node.op != "read":
            return self.materialize(v, keep)
        return self.ready(v, keep)

    def nonnegative(self, v) -> bool:
        """Whether `v` reads, as stored, a buffer that a layer ending in a ReLU wrote (every
        value >= 0)."""
        if is_const(v) or v.buffer is None:
            return False
        layer = next((L for L in reversed(self.layers) if L.out == v.buffer), None)
        node = getattr(layer.tensor, "_node", None) if layer is not None else None
        if node is None:            # a layer built as a loop tree or a host step (onnx/qlayers.py)
            return False
        while node.op == "view":
            node = node.inputs[0]
        return node.op == "unary" and node.fn == "relu"

    def dyn(self, x, what="input") -> Dyn:
        return const_dyn(x, what) if is_const(x) else x

    def evaluate(self, v: Dyn) -> np.ndarray:
        """Run a constant-only expression now (constant folding)."""
        if v.t._node.op == "const":
            return np.full(v.shape, v.t._node.value, np.float32)
        syms = [d for d in v.dims if d is not None]
        t = v.t.transpose(*syms) if tuple(syms) != tuple(v.t.symbolic_shape) else v.t
        return np.asarray(t.numpy(self.target), np.float32).reshape(v.shape)


def _only_views(t) -> bool:
    n = t._node
    while n.op == "view":
        n = n.inputs[0]
    return n.op == "read"


def _dtype_of(t) -> str:
    """The dtype a DSL expression computes: float32 unless it reads an integer tensor."""
    if all(n.op != "read" or n.dtype in (None, "float32") for n in toposort(t._node)):
        return "float32"
    return str(t.dtype)


def _reads_only_constants(t) -> bool:
    return all(n.op != "read" or (n.constant and n.data is not None) for n in toposort(t._node))


# ---------------------------------------------------------------------------- ONNX -> values
def _attributes(node) -> dict:
    from onnx import AttributeProto, helper, numpy_helper

    out = {}
    for a in node.attribute:
        if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS, AttributeProto.SPARSE_TENSOR,
                      AttributeProto.TYPE_PROTO, AttributeProto.TYPE_PROTOS):
            raise UnsupportedError(f"attribute {a.name!r} of type {AttributeProto.AttributeType.Name(a.type)} "
                                   "is not supported")
        if a.ref_attr_name:
            raise UnsupportedError(f"attribute {a.name!r} refers to a function attribute")
        if a.type == AttributeProto.TENSOR:
            out[a.name] = numpy_helper.to_array(a.t)
            continue
        val = helper.get_attribute_value(a)
        if isinstance(val, bytes):
            val = val.decode()
        elif isinstance(val, list) and val and isinstance(val[0], bytes):
            val = [x.decode() for x in val]
        out[a.name] = val
    return out


def _static_shape(vi, given) -> tuple:
    if vi.name in given:
        return tuple(int(s) for s in given[vi.name])
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise UnsupportedError(f"input {vi.name!r} is not a tensor")
    if not tt.HasField("shape"):
        raise ShapeError(f"input {vi.name!r} has no shape: pass input_shapes={{{vi.name!r}: (...)}}")
    shape = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            shape.append(d.dim_value)
        else:
            raise ShapeError(f"input {vi.name!r}: dimension {i} ({d.dim_param or '?'}) is not static; pass "
                             f"input_shapes={{{vi.name!r}: (...)}}")
    return tuple(shape)


def _model(model):
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    try:
        return onnx.load(str(model))
    except FileNotFoundError:
        raise ArgumentError(f"no such ONNX file: {model}") from None
    except Exception as e:   # onnx raises DecodeError and friends for a bad file
        raise ArgumentError(f"{model}: not a readable ONNX model ({type(e).__name__}: {e})") from None


# TensorProto element types a graph input may have: FLOAT, UINT8, INT8, INT32
_RUN_TIME_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32"}


def opset_of(model) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 1


def load(model, input_shapes=None, constants=None, target=None, passes=True) -> NetGraph:
    """An ONNX model (a path or ModelProto) as a loopstack network with every shape inferred.

    `input_shapes` fixes inputs whose shapes are symbolic; `constants` binds inputs to arrays
    known at import (they fold like initializers); `passes=False` skips the graph rewrites
    (BatchNormalization folded into Conv and Gemm)."""
    from onnx import numpy_helper

    from . import ops  # noqa: F401 - registers the converters
    from .passes import fold_batchnorm
    from .qdq import fuse_qdq

    model = _model(model)
    opset = opset_of(model)
    graph = model.graph
    given = dict(input_shapes or {})
    constants = {k: np.asarray(v) for k, v in (constants or {}).items()}
    imp = Importer(opset, target)
    values: dict = {"": None}
    for init in graph.initializer:
        values[init.name] = numpy_helper.to_array(init)
    for init in graph.sparse_initializer:
        raise UnsupportedError(f"sparse initializer {init.values.name!r} is not supported")
    inputs = []
    for vi in graph.input:
        if vi.name in values:
            continue
        if vi.name in constants:
            values[vi.name] = constants[vi.name]
            continue
        elem = vi.type.tensor_type.elem_type
        if elem not in _RUN_TIME_DTYPES:
            from onnx import TensorProto

            raise UnsupportedError(f"input {vi.name!r}: dtype {TensorProto.DataType.Name(elem).lower()} is "
                                   "not supported at run time (float32, and uint8/int8/int32 for quantized graphs)")
        shape = _static_shape(vi, given)
        if 0 in shape:
            raise UnsupportedError(f"input {vi.name!r}: empty tensors (shape {shape}) are not supported")
        buf = f"in:{vi.name}"
        imp.buffers[buf] = shape
        if elem != 1:
            imp.dtypes[buf] = _RUN_TIME_DTYPES[elem]
        values[vi.name] = imp.placeholder(buf, shape)
        inputs.append((vi.name, shape))
    nodes = list(graph.node)
    if passes:
        consts = {k: v for k, v in values.items() if isinstance(v, np.ndarray)}
        nodes = fold_batchnorm(nodes, consts, [o.name for o in graph.output])
        nodes = fuse_qdq(nodes, consts, [o.name for o in graph.output])
        values.update(consts)
    uses = Counter(n for node in nodes for n in node.input if n)
    uses.update(o.name for o in graph.output)
    for pos, node in enumerate(nodes):
        label = node.name or f"{node.op_type}_{pos}"
        try:
            conv = lookup(node.op_type, opset, node.domain)
            args = []
            for i, name in enumerate(node.input):
                if name not in values:
                    raise ShapeError(f"input {name!r} is not produced by any earlier node")
                args.append(values[name])
            for i, a in enumerate(args):
                if i in conv.const and a is not None and not is_const(a):
                    raise UnsupportedError(f"input {i} ({node.input[i]!r}) must be a constant")
                if not conv.integer and isinstance(a, Dyn) and a.buffer in imp.dtypes:
                    raise UnsupportedError(f"input {i} ({node.input[i]!r}): dtype {imp.dtypes[a.buffer]} is not "
                                           f"supported at run time by {node.op_type} (float32 only)")
            attrs = _attributes(node)
            imp.node_label = label
            imp.node_outputs = len(node.output)
            results = _convert(imp, conv, args, attrs)
        except LoopstackError as e:
            raise type(e)(f"node {pos} {label!r} ({node.op_type}): {e}") from e
        outs = [o for o in node.output]
        if sum(1 for o in outs if o) > len(results) or any(o and i >= len(results) for i, o in enumerate(outs)):
            raise UnsupportedError(f"node {pos} {label!r} ({node.op_type}): output {len(results)} "
                                   f"({outs[len(results)]!r}) is not supported")
        for name, val in zip(outs, results):
            if not name:
                continue
            if isinstance(val, Dyn):
                if val.buffer is None and label not in val.ops:   # a buffer read as is computes nothing
                    val = val.with_(val.t, op=label)
                if val.buffer is None and (uses[name] > 1 or len(val.ops) >= MAX_FUSED):
                    val = imp.materialize(val)
            values[name] = val
    outputs = []
    for o in graph.output:
        if o.name not in values:
            raise ShapeError(f"graph output {o.name!r} is not produced by any node")
        v = values[o.name]
        if is_const(v):
            outputs.append((o.name, ("const", v), v.shape))
            continue
        v = imp.materialize(v, layout=tuple(range(len(v.shape))))
        outputs.append((o.name, ("buffer", v.buffer), v.shape))
    return NetGraph(inputs, outputs, imp.layers, imp.reads, imp.buffers, opset, imp.dtypes)


def _convert(imp: Importer, conv, args, attrs) -> list:
    if conv.fold is not None and all(a is None or is_const(a) for a in args) and \
            any(a is not None for a in args):
        res = conv.fold_constants(args, attrs)
    else:
        res = conv(imp, args, attrs)
    res = list(res) if isinstance(res, (tuple, list)) else [res]
    out = []
    for r in res:
        if isinstance(r, Dyn) and r.buffer is None and _reads_only_constants(r.t):
            r = imp.evaluate(r)   # constant folding through the DSL
        elif r is not None and not isinstance(r, Dyn):
            r = np.asarray(r)
        out.append(r)
    return out
