"""The values an imported graph carries between nodes, and the DSL helpers on them.

Every ONNX value is either a constant (a numpy array: an initializer, a Constant, or anything
folded from them at import) or a `Dyn`: a DSL tensor expression computed at run time.

A Dyn names its DSL dimension per ONNX axis (`dims`): a Symbol, or None for an axis of size 1
that the expression does not carry at all. Dropping unit axes makes broadcasting a matter of
names (an absent axis broadcasts) and makes Squeeze, Unsqueeze and unit-only Reshapes free.
Within one Dyn the symbols are distinct; two Dyns share a symbol only for the same axis
extent, so a binary op joins them by name after renaming the second where they differ.

A Dyn stays lazy while element-wise operators extend it, so that a chain of them fuses into
one kernel (and into its producer's store where the frontend can fold it). It is
*materialized* (a layer of the model: a kernel writing a buffer in the ONNX axis order) where
it has several users, where an operator needs its input in memory, or at a graph output; what
follows reads the buffer through a fresh placeholder tensor, possibly under another shape
(Reshape, Flatten and channel groups are free that way).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..frontend.symbols import Expr, Symbol
from ..frontend.tensor import Tensor, as_tensor

def fresh(name: str = "d") -> Symbol:
    """A new dimension. Its name is not numbered: the canonical graph numbers repeated names
    by first appearance, so two layers built alike get equal graphs, whatever was imported
    before (one compiled kernel for both, one tuning database entry)."""
    return Symbol(name)


@dataclass(eq=False)
class Dyn:
    t: Tensor                 # the DSL expression
    dims: tuple               # per ONNX axis: its Symbol in t, or None (size 1, not in t)
    shape: tuple              # the ONNX shape
    ops: tuple = ()           # names of the ONNX nodes fused into this expression
    buffer: str | None = None  # set on a placeholder: the buffer it reads, unchanged
    layout: tuple | None = None  # the ONNX axes in the order a buffer of this value holds them
                                 # (a placeholder's buffer; a hint for a value not stored yet)

    def __post_init__(self):
        named = [d for d in self.dims if d is not None]
        if len(self.dims) != len(self.shape) or set(named) != set(self.t.symbolic_shape) \
                or len(set(named)) != len(named):
            raise ShapeError(f"internal: dims {self.dims} do not name the expression's "
                             f"[{', '.join(v.name for v in self.t.symbolic_shape)}] for shape {self.shape}")
        if any(d is None and s != 1 for d, s in zip(self.dims, self.shape)):
            raise ShapeError(f"internal: an axis left out of the expression has size > 1 in {self.shape}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    def with_(self, t, dims=None, shape=None, op=None) -> "Dyn":
        same = dims is None and shape is None
        return Dyn(t, self.dims if dims is None else tuple(dims), self.shape if shape is None else tuple(shape),
                   self.ops + ((op,) if op else ()), layout=self.layout if same else None)


def is_const(x) -> bool:
    return isinstance(x, np.ndarray)


def check_float(arr: np.ndarray, what: str) -> np.ndarray:
    if arr.dtype != np.float32:
        raise UnsupportedError(f"{what}: dtype {arr.dtype} is not supported at run time (float32 only)")
    return arr


TRANSPOSE_BLOCK = 32    # elements per side of the tiles a large transposition copies


def transposed(arr: np.ndarray, axes: tuple, block: int = TRANSPOSE_BLOCK) -> np.ndarray:
    """`np.transpose(arr, axes)` as a new C-contiguous array. A transposition that moves the
    innermost axis copies tile by tile, so that both the rows it reads and the rows it writes
    stay in cache (ResNet-18's convolution weights, 45 MB: 46 ms of CPU copied directly, 13 ms
    by tiles of 32, 24 ms by tiles of 64; before, most of the import's time)."""
    view = np.transpose(arr, axes)
    if arr.ndim < 2 or axes[-1] == arr.ndim - 1 or arr.size < block * block:
        return np.ascontiguousarray(view)
    out = np.empty(view.shape, arr.dtype)
    src_inner = axes.index(arr.ndim - 1)       # where the source's rows run in the result
    b = block
    for i in range(0, view.shape[src_inner], b):
        for j in range(0, view.shape[-1], b):
            tile = [slice(None)] * arr.ndim
            tile[src_inner], tile[-1] = slice(i, i + b), slice(j, j + b)
            out[tuple(tile)] = view[tuple(tile)]
    return out


def const_dyn(arr: np.ndarray, what: str = "constant", keep=(), layout=None) -> Dyn:
    """A constant array as a DSL input declared constant (weights: packed once); unit axes are
    left out of the expression except those in `keep`; the data is stored with its axes in
    the order `layout` (a permutation of the ONNX axes)."""
    arr = check_float(np.asarray(arr), what)
    if 0 in arr.shape:
        raise UnsupportedError(f"{what}: empty tensors (shape {arr.shape}) are not supported")
    dims = tuple(None if (s == 1 and i not in keep) else fresh("k") for i, s in enumerate(arr.shape))
    order = [a for a in (layout or range(arr.ndim)) if dims[a] is not None]
    kept = transposed(arr, tuple(layout or range(arr.ndim))).reshape([arr.shape[a] for a in order])
    if kept.ndim == 0:
        return Dyn(as_tensor(float(kept)), dims, arr.shape)
    t = Tensor(kept, constant=True).to(*[dims[a] for a in order])
    return Dyn(t, dims, arr.shape)


def placeholder(shape, keep=(), layout=None, dtype="float32") -> tuple[Tensor, Dyn]:
    """An input tensor of the DSL for a buffer holding a value of ONNX shape `shape` with its
    axes in the order `layout` (row-major when None); unit axes are left out of the expression
    except those in `keep`."""
    shape = tuple(int(s) for s in shape)
    layout = tuple(layout) if layout is not None else tuple(range(len(shape)))
    dims = tuple(fresh("a") if (s != 1 or i in keep) else None for i, s in enumerate(shape))
    order = [a for a in layout if dims[a] is not None]
    t = Tensor(*[shape[a] for a in order], dtype=dtype) if order else Tensor(dtype=dtype)
    named = t.to(*[dims[a] for a in order]) if order else t
    return t, Dyn(named, dims, shape, layout=layout)


def rename(t: Tensor, mapping: dict) -> Tensor:
    """`t` with its symbols renamed by `mapping` (a view; nothing when nothing changes)."""
    syms = t.symbolic_shape
    new = tuple(mapping.get(s, s) for s in syms)
    return t if new == syms else t.to(*new)


def drop_axis(v: Dyn, axis: int, index: int = 0) -> Tensor:
    """`v.t` read at `index` along `axis` (the axis leaves the expression)."""
    sym = v.dims[axis]
    if sym is None:
        return v.t
    key = tuple(Expr(const=index) if s is sym else s for s in v.t.symbolic_shape)
    return v.t[key]


def slice_axis(v: Dyn, axis: int, start: int, size: int, step: int = 1, keep: bool = False) -> Dyn:
    """The view `v[..., start : start + size*step : step, ...]` along `axis` (which leaves the
    expression when it is one long, unless `keep`)."""
    if size == 1 and not keep:
        dims = list(v.dims)
        dims[axis] = None
        shape = list(v.shape)
        shape[axis] = 1
        return Dyn(drop_axis(v, axis, start), dims, shape, v.ops)
    sym = v.dims[axis]
    new = fresh("s")
    if start == 0 and step == 1:
        # size unification reads `x[n]` as a renaming (equal sizes), so a prefix is written as
        # two reversals, which compose back to `x[n]` when lowered
        rev = fresh("s")
        t = v.t[tuple(rev * -1 + (size - 1) if s is sym else s for s in v.t.symbolic_shape)]
        declare(t, rev, size, f"prefix of {sym.name}")
        t = t[tuple(new * -1 + (size - 1) if s is rev else s for s in t.symbolic_shape)]
    else:
        t = v.t[tuple(new * step + start if s is sym else s for s in v.t.symbolic_shape)]
    # the slice's extent is not implied by the index (unlike a window that runs to the end)
    declare(t, new, size, f"slice of {sym.name} from {start} by {step}")
    dims = [new if d is sym else d for d in v.dims]
    shape = list(v.shape)
    shape[axis] = size
    return Dyn(t, dims, shape, v.ops)


def broadcast(vals: list, what: str):
    """Tensors of `vals` (Dyns) renamed so that each output axis has one symbol; the output's
    (tensors, dims, shape) under numpy broadcasting."""
    try:
        shape = tuple(np.broadcast_shapes(*[v.shape for v in vals]))
    except ValueError:
        raise ShapeError(f"{what}: shapes {' and '.join(str(tuple(v.shape)) for v in vals)} do not "
                         f"broadcast") from None
    rank = len(shape)
    out_dims: list = [None] * rank
    tensors = []
    for v in vals:
        off = rank - v.rank
        t = v.t
        # unit axes of this operand that broadcast against a longer one are read at index 0
        for a in range(v.rank):
            if v.dims[a] is not None and v.shape[a] == 1 and shape[off + a] != 1:
                t = drop_axis(Dyn(t, v.dims, v.shape), a)
                v = Dyn(t, tuple(None if i == a else d for i, d in enumerate(v.dims)), v.shape)
        mapping = {}
        taken = {d for d in out_dims if d is not None}
        for a, d in enumerate(v.dims):
            if d is None:
                continue
            o = off + a
            if out_dims[o] is None:
                out_dims[o] = d if d not in taken else fresh("b")
                taken.add(out_dims[o])
            if out_dims[o] is not d:
                mapping[d] = out_dims[o]
        tensors.append(rename(t, mapping))
    return tensors, tuple(out_dims), shape


def reduce(v: Dyn, axes, fn: str, keepdims: bool) -> Dyn:
    """Reduce `v` over `axes` with "add" | "max" | "min" | "mul"."""
    syms = [v.dims[a] for a in axes if v.dims[a] is not None]
    method = {"add": "sum", "max": "max_reduce", "min": "min_reduce", "mul": "prod"}[fn]
    t = getattr(v.t, method)(*syms) if syms else v.t
    if keepdims:
        dims = [None if a in axes else d for a, d in enumerate(v.dims)]
        shape = [1 if a in axes else s for a, s in enumerate(v.shape)]
    else:
        dims = [d for a, d in enumerate(v.dims) if a not in axes]
        shape = [s for a, s in enumerate(v.shape) if a not in axes]
    return Dyn(t, dims, shape, v.ops)


def norm_axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{what}: axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def declare(t: Tensor, sym: Symbol, size: int, why: str) -> Tensor:
    """Tell size unification the extent of `sym`, which an index alone does not fix (a slice,
    a pooling window)."""
    t._node.known.append((sym, int(size), why))
    return t
