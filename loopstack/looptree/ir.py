"""The loop tree: the one contract between the frontend and every backend.

A loop tree is immutable data. It names buffers (inputs, outputs, intermediates),
dimensions with their sizes, and a body of nodes:

    Loop(var, dim, step, body)   iterates dimension `dim` over the range its enclosing
                                 loops over `dim` leave it (the whole dimension if none),
                                 `step` elements at a time; the last iteration may be
                                 partial, and then the inner loops over `dim` see the
                                 smaller remainder (this is how split tails work).
    Compute(out, expr, ...)      one statement executed at every point of the loops
                                 that enclose it.

Semantics, LoopNest style (paper §5): a dimension's value at a statement is the sum of
the offsets of the enclosing loops over it; `LoopVar(var)` terms in an index give one
loop's offset alone, which is how an intermediate sized to a loop's scope is addressed
(index `m - m0` inside loop m0 walks a block buffer).  Every dimension a statement
reads or writes must be iterated down to step 1 by its enclosing loops.

A statement's iteration domain is the set of dimensions of its enclosing loops; its
reduction dimensions are those of the domain that its output index does not use.
For each output point p:

    out[p] = post( init(p)  <reduce>  expr(p, r)  for every reduction point r )

`init` is applied at the first reduction point (every reduction dimension at 0)
and `post` at the last (every reduction dimension at its size - 1), whatever the
loop order; with `init=None` the reduction continues from out's current value.
With `reduce=None` the statement is a plain assignment `out[p] = expr(p)`.
A statement whose expression is a single Load is a copy (transpose, pack, pad,
broadcast); a Load with `zero_pad=True` reads zero wherever its index leaves the
buffer, so padding needs no special node.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterator, Union

import numpy as np

from ..dtypes import dtype as _dtype


class _derived:  # noqa: N801 - a decorator, like functools.cached_property (which takes a lock in 3.11)
    """A fact computed from a frozen IR object on its first read and kept in the object's
    __dict__, outside the dataclass fields (so equality, hashing, repr and `replace` are
    unchanged): a code generator asks for the same facts thousands of times."""

    __slots__ = ("fn", "name")

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__name__

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


# ---------------------------------------------------------------------------
# operator vocabularies (the backend's instruction selection keys on these names)

UNARY_OPS = ("neg", "abs", "exp", "log", "sqrt", "reciprocal", "relu", "sigmoid", "tanh", "gelu", "erf")
BINARY_OPS = ("add", "sub", "mul", "div", "max", "min")
REDUCE_OPS = ("add", "mul", "max", "min")
# "block" and "warp" bind a loop to a GPU's CTAs and to the warps of a CTA (backend/ptx/bind.py);
# a CPU compile refuses them
GPU_BINDINGS = ("block", "warp")
ANNOTATIONS = ("unroll", "vectorize", "parallel") + GPU_BINDINGS

# identity element of each reduction, used by init="identity"
REDUCE_IDENTITY = {"add": 0.0, "mul": 1.0, "max": float("-inf"), "min": float("inf")}


def reduce_identity(reduce: str, dtype: str) -> float | int:
    """The identity as a value of `dtype`: an integer max starts from the type's lowest value, not
    from -inf (which clamps to int32's, and an int8 buffer would keep its low byte: 0)."""
    if _dtype(dtype).is_float:
        return REDUCE_IDENTITY[reduce]
    info = np.iinfo(dtype)
    return {"add": 0, "mul": 1, "max": int(info.min), "min": int(info.max)}[reduce]


# ---------------------------------------------------------------------------
# affine index expressions


@dataclass(frozen=True)
class Affine:
    """const + sum(coeff * name). A name is a dimension, or `@var` for one loop's offset."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(*terms: tuple[str, int] | str, const: int = 0) -> "Affine":
        """Affine.of("m") is m; Affine.of(("h", 1), ("kh", 2), const=-1) is h + 2*kh - 1."""
        acc: dict[str, int] = {}
        for t in terms:
            name, coeff = (t, 1) if isinstance(t, str) else t
            acc[name] = acc.get(name, 0) + coeff
        return Affine(tuple(sorted((n, c) for n, c in acc.items() if c != 0)), const)

    def names(self) -> tuple[str, ...]:
        return self._names

    @_derived
    def _names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.terms)

    def coeff(self, name: str) -> int:
        for n, c in self.terms:
            if n == name:
                return c
        return 0

    def __str__(self) -> str:
        parts = []
        for n, c in self.terms:
            parts.append(n if c == 1 else f"-{n}" if c == -1 else f"{c}*{n}")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


def loop_var(var: str) -> str:
    """The name under which an Affine term refers to one loop's offset (not the whole dimension)."""
    return "@" + var


# ---------------------------------------------------------------------------
# buffers and accesses


BUFFER_KINDS = ("input", "output", "temp")


@dataclass(frozen=True)
class Buffer:
    name: str
    dtype: str                   # a name from loopstack.dtypes.DTYPES
    shape: tuple[int, ...]
    kind: str                    # "input", "output" or "temp"
    strides: tuple[int, ...] = ()  # in elements; row-major when empty
    # an input whose values a kernel may treat as fixed (a network's weights): what the kernel
    # derives from it alone, such as a packed copy, is computed once per array, not per call
    constant: bool = False

    def __post_init__(self):
        _dtype(self.dtype)
        if not self.strides:
            st, acc = [], 1
            for s in reversed(self.shape):
                st.append(acc)
                acc *= s
            object.__setattr__(self, "strides", tuple(reversed(st)))

    @property
    def size(self) -> int:
        """Elements spanned (the allocation needed for these strides)."""
        if any(s == 0 for s in self.shape):
            return 0
        return 1 + sum((s - 1) * st for s, st in zip(self.shape, self.strides))


@dataclass(frozen=True)
class Access:
    buffer: str
    index: tuple[Affine, ...]
    zero_pad: bool = False  # reads outside the buffer give 0 (only for reads)

    def names(self) -> frozenset[str]:
        return self._names

    @_derived
    def _names(self) -> frozenset[str]:
        return frozenset(n for a in self.index for n in a.names())

    def __str__(self) -> str:
        pad = "pad " if self.zero_pad else ""
        return f"{pad}%{self.buffer}[{', '.join(str(a) for a in self.index)}]"


# ---------------------------------------------------------------------------
# expressions (small trees evaluated at every point)


@dataclass(frozen=True)
class Load:
    access: Access

    def __str__(self) -> str:
        return str(self.access)


@dataclass(frozen=True)
class Const:
    value: float

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class Acc:
    """In `post`: the accumulated value of the output point."""

    def __str__(self) -> str:
        return "acc"


@dataclass(frozen=True)
class Unary:
    op: str
    x: "Expr"

    def __str__(self) -> str:
        return f"{self.op}({self.x})"


@dataclass(frozen=True)
class Binary:
    op: str
    a: "Expr"
    b: "Expr"

    def __str__(self) -> str:
        return f"{self.op}({self.a}, {self.b})"


@dataclass(frozen=True)
class Dot(Binary):
    """The k-term dot product that one lane of a tensorized instruction computes:

        sum over t < k of a[..., i + t] * b[..., j + t]

    (`t` added to each operand's last index: k consecutive elements). `a` and `b` are Loads of
    8-bit buffers; `instr` names the registry entry (backend.tensorize) the rewriter matched,
    which the code generators emit. A Dot is only ever the whole expression of an int32 `+=`
    statement: the rewriter's output, never the frontend's."""

    k: int = 4
    instr: str = ""

    def shifted(self, t: int) -> tuple["Access", "Access"]:
        """The accesses of term `t`."""
        return tuple(Access(x.access.buffer, x.access.index[:-1] + (replace(x.access.index[-1],
                     const=x.access.index[-1].const + t),), x.access.zero_pad) for x in (self.a, self.b))

    def __str__(self) -> str:
        return f"dot{self.k}({self.a}, {self.b})"


Expr = Union[Load, Const, Acc, Unary, Binary]


def substitute_acc(e: Expr, value: Expr) -> Expr:
    """`e` with every Acc() replaced by `value` (a post-op applied to a stored value)."""
    if isinstance(e, Acc):
        return value
    if isinstance(e, Unary):
        return Unary(e.op, substitute_acc(e.x, value))
    if isinstance(e, Binary):
        return replace(e, a=substitute_acc(e.a, value), b=substitute_acc(e.b, value))
    return e


def expr_loads(e: Expr) -> Iterator[Access]:
    """Every Access an expression reads, left to right."""
    return iter(_loads(e))


def _loads(e) -> tuple[Access, ...]:
    # kept on each Unary and Binary node (in its __dict__, as _derived keeps facts): code
    # generation asks every statement instance for its loads
    if isinstance(e, Load):
        return (e.access,)
    if isinstance(e, (Unary, Binary)):
        d = e.__dict__
        hit = d.get("_loads")
        if hit is None:
            hit = d["_loads"] = _loads(e.x) if isinstance(e, Unary) else _loads(e.a) + _loads(e.b)
        return hit
    return ()


# ---------------------------------------------------------------------------
# nodes


@dataclass(frozen=True)
class Requant:
    """The int32 -> int8/uint8 epilogue of a quantized contraction, as ONNX QLinearConv /
    QLinearMatMul define it and onnxruntime computes it:

        out = saturate(round_half_even(float32(acc) * scale) + zero_point)

    `acc` is the int32 value after `post`; `scale` (a Const, or a Load of a float32 buffer over
    output dimensions for per-channel scales) is multiplied in float32, once; the saturation is
    to the output buffer's dtype. The statement accumulates in int32 whatever its output's
    dtype, so no partial sum is ever narrowed.

    `of_float`: the statement is an assignment computed in float32 (ONNX QuantizeLinear: its
    expression is x / y_scale), and `acc` is that float value, not converted from int32.

        out = saturate(round_half_even(value * scale) + zero_point)"""

    scale: "Expr"
    zero_point: int = 0
    of_float: bool = False

    def __str__(self) -> str:
        return f"requant({'float ' if self.of_float else ''}* {self.scale} + {self.zero_point})"


@dataclass(frozen=True)
class Compute:
    name: str
    out: Access
    expr: Expr
    reduce: str | None = None              # None (plain assignment) or one of REDUCE_OPS
    init: Expr | str | None = None         # None, "identity", or an Expr over output dims (bias)
    post: Expr | None = None               # an Expr using Acc(), over output dims
    requant: Requant | None = None         # int32 -> int8/uint8 after post (quantized outputs)
    # the schedule asks for this contraction on a tensorized instruction: "auto" (the widest the
    # target runs) or a registry entry (backend.tensorize), its loops above the instruction's kept
    tensorize: str = ""

    def reads(self) -> Iterator[Access]:
        yield from expr_loads(self.expr)
        if isinstance(self.init, (Load, Unary, Binary)):
            yield from expr_loads(self.init)
        if self.post is not None:
            yield from expr_loads(self.post)
        if self.requant is not None:
            yield from expr_loads(self.requant.scale)

    @property
    def is_copy(self) -> bool:
        return self.reduce is None and self.post is None and isinstance(self.expr, Load)


def map_accesses(stmt: Compute, f) -> Compute:
    """`stmt` with every access (its output and every read) replaced by `f(access)`."""

    # built by the constructors, not dataclasses.replace: the backend's passes map the
    # statements of every nest they change, on every compile
    def expr(e):
        t = type(e)
        if t is Load:
            return Load(f(e.access))
        if t is Binary:
            return Binary(e.op, expr(e.a), expr(e.b))
        if t is Unary:
            return Unary(e.op, expr(e.x))
        if isinstance(e, Binary):
            return replace(e, a=expr(e.a), b=expr(e.b))     # a Dot stays a Dot
        return e

    init = stmt.init if isinstance(stmt.init, (str, type(None))) else expr(stmt.init)
    post = None if stmt.post is None else expr(stmt.post)
    requant = None if stmt.requant is None else replace(stmt.requant, scale=expr(stmt.requant.scale))
    return Compute(stmt.name, f(stmt.out), expr(stmt.expr), stmt.reduce, init, post, requant, stmt.tensorize)


@dataclass(frozen=True)
class Loop:
    var: str                               # unique in the tree
    dim: str
    step: int
    body: tuple["Node", ...]
    annotations: frozenset[str] = field(default_factory=frozenset)

    def with_body(self, body: tuple) -> "Loop":
        """This loop over another body: dataclasses.replace without its per-field work (the
        backend's passes rebuild the loops of every nest they change, on every compile)."""
        return Loop(self.var, self.dim, self.step, body, self.annotations)


Node = Union[Loop, Compute]


def statements(node: Node) -> Iterator[Compute]:
    """Every statement in a subtree, in program order."""
    return iter(_statements(node))


def _statements(node: Node) -> tuple[Compute, ...]:
    if isinstance(node, Compute):
        return (node,)
    d = node.__dict__                      # kept on the Loop, as _loads keeps loads
    hit = d.get("_statements")
    if hit is None:
        hit = d["_statements"] = tuple(s for n in node.body for s in _statements(n))
    return hit


@dataclass(frozen=True)
class LoopTree:
    buffers: tuple[Buffer, ...]
    dims: tuple[tuple[str, int], ...]      # (dimension, size)
    body: tuple[Node, ...]

    # -- lookups ---------------------------------------------------------
    def buffer(self, name: str) -> Buffer:
        try:
            return self._buffer_by_name[name]
        except KeyError:
            raise KeyError(name) from None

    def dim_size(self, dim: str) -> int:
        try:
            return self._dim_sizes[dim]
        except KeyError:
            raise KeyError(dim) from None

    # the lookups above and the buffer lists below are built once per tree (see _derived)
    @_derived
    def _buffer_by_name(self) -> dict[str, Buffer]:
        out: dict[str, Buffer] = {}
        for b in self.buffers:
            out.setdefault(b.name, b)          # the first of a name, as a scan would find
        return out

    @_derived
    def _dim_sizes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for d, s in self.dims:
            out.setdefault(d, s)
        return out

    @_derived
    def inputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.kind == "input")

    @_derived
    def outputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.kind == "output")

    @_derived
    def temps(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.kind == "temp")

    @_derived
    def arguments(self) -> tuple[Buffer, ...]:
        """The order in which a kernel takes its arrays: inputs, then outputs."""
        return self.inputs + self.outputs

    def walk(self) -> Iterator[tuple[tuple[Loop, ...], Node]]:
        """Every node with the loops enclosing it, outermost first, in program order."""
        return iter(self._walked)

    def computes(self) -> Iterator[tuple[tuple[Loop, ...], Compute]]:
        return iter(self._computes)

    # the walk is listed once per tree (see _derived), by a plain recursion: nested generators
    # would pass every node up through one frame per enclosing loop
    @_derived
    def _walked(self) -> tuple:
        out: list = []

        def rec(nodes, stack):
            for n in nodes:
                out.append((stack, n))
                if isinstance(n, Loop):
                    rec(n.body, stack + (n,))

        rec(self.body, ())
        return tuple(out)

    @_derived
    def _computes(self) -> tuple:
        return tuple(pair for pair in self._walked if isinstance(pair[1], Compute))

    def __str__(self) -> str:
        from .printer import format_tree

        return format_tree(self)
