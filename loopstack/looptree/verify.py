"""The loop-tree verifier: structure, dtypes and bounds, before any backend sees a tree.

    verify(tree) -> None      raises a loopstack error naming the statement, buffer and number

Checks, in order:
  structure   dims known and sized, loop vars unique, steps >= 1, known annotations,
              buffers unique with consistent shapes and strides, one index per buffer dim,
              known operator names, `Acc` only in `post`, init/post over output dims only,
              every referenced dimension iterated down to step 1, no writes to inputs,
              no zero_pad on writes.
  dtypes      float-only unary ops (exp, log, ...) never in an integer statement, nor reads of
              floats (but a requantization's scale); a float statement may read integers.
  bounds      every index of every access provably in [0, size) over the iteration domain
              (zero_pad reads excepted).  The proof is exact interval arithmetic on the
              decomposition dim = sum of its loops' offsets (see stats.chain_bounds), so it
              costs a few operations per index term whatever the tensor sizes.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..dtypes import DTYPES
from ..errors import BoundsError, DTypeError, ScheduleError, ShapeError, SymbolError, UnsupportedError
from .ir import (
    ANNOTATIONS, BINARY_OPS, BUFFER_KINDS, REDUCE_OPS, UNARY_OPS,
    Acc, Access, Affine, Binary, Compute, Const, Dot, Load, Loop, LoopTree, Unary,
)
from .stats import index_bounds

__all__ = ["verify", "FLOAT_ONLY_UNARY", "computes_in_integers"]

# unary ops with no integer meaning; an integer statement may not use them
FLOAT_ONLY_UNARY = frozenset({"exp", "log", "sqrt", "reciprocal", "sigmoid", "tanh", "gelu", "erf"})


def verify(tree: LoopTree) -> None:
    """Raise a LoopstackError if the tree is malformed or any access may leave its buffer."""
    sizes = _check_dims(tree)
    bufs = _check_buffers(tree)
    _check_loops(tree, sizes)
    for stack, comp in tree.computes():
        _check_compute(tree, stack, comp, bufs)


# ---------------------------------------------------------------------------
# tree-level structure


def _check_dims(tree: LoopTree) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for d, s in tree.dims:
        if d in sizes:
            raise SymbolError(f"dimension {d} is declared twice")
        if not isinstance(s, int) or isinstance(s, bool) or s < 0:
            raise ShapeError(f"dimension {d} has size {s!r}; sizes are integers >= 0")
        sizes[d] = s
    return sizes


def _check_buffers(tree: LoopTree) -> dict:
    bufs = {}
    for b in tree.buffers:
        if b.name in bufs:
            raise SymbolError(f"buffer {b.name} is declared twice")
        if b.kind not in BUFFER_KINDS:
            raise ShapeError(f"buffer {b.name} has kind {b.kind!r}; expected one of {', '.join(BUFFER_KINDS)}")
        if b.constant and b.kind != "input":
            raise ShapeError(f"buffer {b.name} is a {b.kind} marked constant; only inputs can be constant")
        if b.dtype not in DTYPES:
            raise DTypeError(f"buffer {b.name} has dtype {b.dtype}, not supported ({', '.join(DTYPES)})")
        if any(not isinstance(s, int) or s < 0 for s in b.shape):
            raise ShapeError(f"buffer {b.name} has shape {list(b.shape)}; sizes are integers >= 0")
        if len(b.strides) != len(b.shape):
            raise ShapeError(f"buffer {b.name} has {len(b.shape)} dimensions but {len(b.strides)} strides")
        if any(not isinstance(s, int) or s < 0 for s in b.strides):
            raise ShapeError(f"buffer {b.name} has strides {list(b.strides)}; strides are integers >= 0")
        bufs[b.name] = b
    return bufs


def _check_loops(tree: LoopTree, sizes: dict[str, int]) -> None:
    seen: set[str] = set()
    for stack, node in tree.walk():
        if isinstance(node, Loop):
            if node.var in seen:
                raise ScheduleError(f"loop var {node.var} is used by two loops; loop vars must be unique")
            seen.add(node.var)
            if node.dim not in sizes:
                raise SymbolError(f"loop {node.var} iterates unknown dimension {node.dim}")
            if not isinstance(node.step, int) or node.step < 1:
                raise ScheduleError(f"loop {node.var} has step {node.step!r}; steps are integers >= 1")
            bad = set(node.annotations) - set(ANNOTATIONS)
            if bad:
                raise ScheduleError(f"loop {node.var} has unknown annotation(s) {', '.join(sorted(bad))}"
                                    f" (known: {', '.join(ANNOTATIONS)})")
        elif not isinstance(node, Compute):
            raise ScheduleError(f"unexpected node {type(node).__name__} in the loop tree")


# ---------------------------------------------------------------------------
# statements


def _check_expr(e, where: str, allow_acc: bool, is_int: bool) -> None:
    if isinstance(e, (Load, Const)):
        return
    if isinstance(e, Acc):
        if not allow_acc:
            raise ScheduleError(f"{where}: acc may only appear in post")
        return
    if isinstance(e, Unary):
        if e.op not in UNARY_OPS:
            raise UnsupportedError(f"{where}: unknown unary op {e.op!r} (known: {', '.join(UNARY_OPS)})")
        if is_int and e.op in FLOAT_ONLY_UNARY:
            raise DTypeError(f"{where}: unary op {e.op} needs a floating-point statement")
        _check_expr(e.x, where, allow_acc, is_int)
        return
    if isinstance(e, Dot):
        raise ScheduleError(f"{where}: a dot product is only ever a whole `+=` statement's expression")
    if isinstance(e, Binary):
        if e.op not in BINARY_OPS:
            raise UnsupportedError(f"{where}: unknown binary op {e.op!r} (known: {', '.join(BINARY_OPS)})")
        _check_expr(e.a, where, allow_acc, is_int)
        _check_expr(e.b, where, allow_acc, is_int)
        return
    raise ScheduleError(f"{where}: {type(e).__name__} is not an expression node")


def _loads(e) -> list[Access]:
    if isinstance(e, Load):
        return [e.access]
    if isinstance(e, Unary):
        return _loads(e.x)
    if isinstance(e, Binary):
        return _loads(e.a) + _loads(e.b)
    return []


def _check_compute(tree: LoopTree, stack: Sequence[Loop], comp: Compute, bufs: dict) -> None:
    st = f"statement {comp.name!r}"
    if not isinstance(comp.out, Access):
        raise ScheduleError(f"{st}: its output is not an Access")
    out = bufs.get(comp.out.buffer)
    if out is None:
        raise SymbolError(f"{st} writes unknown buffer {comp.out.buffer}")
    if out.kind == "input":
        raise ScheduleError(f"{st} writes {comp.out}, but {out.name} is an input")
    if comp.out.zero_pad:
        raise ScheduleError(f"{st} writes {comp.out} with zero_pad; zero_pad is for reads only")
    is_int = computes_in_integers(comp, out.dtype)

    # operators and expression shapes
    if comp.reduce is not None and comp.reduce not in REDUCE_OPS:
        raise UnsupportedError(f"{st}: unknown reduction {comp.reduce!r} (known: {', '.join(REDUCE_OPS)})")
    if isinstance(comp.expr, Dot):
        _check_dot(comp, st, out, bufs)
    else:
        _check_expr(comp.expr, st, allow_acc=False, is_int=is_int)
    if comp.init is not None:
        if comp.reduce is None:
            raise ScheduleError(f"{st} has an init but no reduction")
        if isinstance(comp.init, str):
            if comp.init != "identity":
                raise ScheduleError(f"{st}: init {comp.init!r} is not 'identity' or an expression")
        else:
            _check_expr(comp.init, f"{st} (init)", allow_acc=False, is_int=is_int)
    if comp.post is not None:
        _check_expr(comp.post, f"{st} (post)", allow_acc=True, is_int=is_int)
    if comp.requant is not None:
        _check_requant(comp, st, out, bufs)
    if is_int:
        _check_integer_reads(comp, st, bufs)
    if comp.tensorize:
        _check_tensorize_request(comp, st)

    # every name an index uses must be a dimension iterated down to step 1, or an enclosing loop
    chains: dict[str, list[Loop]] = {}
    for lp in stack:
        chains.setdefault(lp.dim, []).append(lp)
    by_var = {lp.var: lp for lp in stack}
    sizes = dict(tree.dims)

    def dims_of(acc: Access, what: str) -> set[str]:
        ds = set()
        for name in acc.names():
            if name.startswith("@"):
                lp = by_var.get(name[1:])
                if lp is None:
                    raise SymbolError(f"{st} {what} {acc}: {name} is not a loop enclosing the statement")
                ds.add(lp.dim)
            else:
                if name not in sizes:
                    raise SymbolError(f"{st} {what} {acc}: unknown dimension {name}")
                ch = chains.get(name)
                if not ch or ch[-1].step != 1:
                    raise ScheduleError(f"dimension {name} of statement {comp.name!r} is not iterated down to step 1"
                                        f" (its innermost enclosing loop is "
                                        f"{'missing' if not ch else f'{ch[-1].var} with step {ch[-1].step}'})")
                ds.add(name)
        return ds

    out_dims = dims_of(comp.out, "writes")
    for acc in _loads(comp.expr):
        dims_of(acc, "reads")
    for part, e in (("init", comp.init), ("post", comp.post),
                    ("requant scale", comp.requant.scale if comp.requant is not None else None)):
        if e is None or isinstance(e, str):
            continue
        for acc in _loads(e):
            extra = dims_of(acc, "reads") - out_dims
            if extra:
                raise ScheduleError(f"{st}: its {part} reads {acc}, which uses {', '.join(sorted(extra))},"
                                    f" not a dimension of the output {comp.out}")

    # buffers, index counts and bounds
    _check_access(tree, stack, st, "writes", comp.out, bufs)
    reads = list(comp.reads())
    if isinstance(comp.expr, Dot):     # its last term reads k - 1 elements past each access
        reads += list(comp.expr.shifted(comp.expr.k - 1))
    for acc in reads:
        if acc.buffer not in bufs:
            raise SymbolError(f"{st} reads unknown buffer {acc.buffer}")
        _check_access(tree, stack, st, "reads", acc, bufs)


def computes_in_integers(comp: Compute, out_dtype: str) -> bool:
    """Whether `comp` computes in int32: its output is an integer, and it is no requantized float
    assignment (Requant.of_float, a QuantizeLinear)."""
    return not DTYPES[out_dtype].is_float and not (comp.requant is not None and comp.requant.of_float)


def _check_integer_reads(comp: Compute, st: str, bufs: dict) -> None:
    """An integer statement reads integers: how a float would become one (truncate? round?
    saturate?) is no part of its meaning. Only a requantization's scale is a float."""
    for e in (comp.expr, comp.init, comp.post):
        if e is None or isinstance(e, (str, Dot)):
            continue
        for acc in _loads(e):
            b = bufs.get(acc.buffer)
            if b is not None and DTYPES[b.dtype].is_float:
                raise DTypeError(f"{st} computes in {bufs[comp.out.buffer].dtype} but reads {acc}, which is"
                                 f" {b.dtype}; an integer statement reads integers only (a float value is"
                                 " converted by a requantization, or by a float statement)")


def _check_dot(comp: Compute, st: str, out, bufs: dict) -> None:
    d = comp.expr
    if comp.reduce != "add" or (out.dtype != "int32" and comp.requant is None):
        raise ScheduleError(f"{st}: a dot product accumulates with += into int32 (here {comp.reduce} into {out.dtype})")
    if not (isinstance(d.a, Load) and isinstance(d.b, Load)):
        raise ScheduleError(f"{st}: a dot product multiplies two loads")
    if not isinstance(d.k, int) or d.k < 1:
        raise ShapeError(f"{st}: a dot product sums k >= 1 terms, not {d.k!r}")
    for x in (d.a, d.b):
        b = bufs.get(x.access.buffer)
        if b is not None and b.dtype not in ("int8", "uint8", "int16"):
            raise DTypeError(f"{st}: a dot product reads 8- or 16-bit integers; {b.name} is {b.dtype}")


def _check_tensorize_request(comp: Compute, st: str) -> None:
    from ..backend.tensorize.registry import family

    if comp.reduce != "add":
        raise ScheduleError(f"{st}: tensorize asks for a sum of products, not a {comp.reduce} statement")
    if comp.tensorize != "auto":
        family(comp.tensorize)      # raises naming the known entries


def _check_requant(comp: Compute, st: str, out, bufs: dict) -> None:
    rq = comp.requant
    if out.dtype not in ("int8", "uint8"):
        raise DTypeError(f"{st}: requant writes int8 or uint8; its output {out.name} is {out.dtype}")
    if comp.reduce not in (None, "add"):
        raise ScheduleError(f"{st}: requant follows a sum (+=) or an assignment, not a {comp.reduce} reduction")
    if comp.reduce is not None and comp.init is None:
        raise ScheduleError(f"{st}: a requantized sum needs an init (identity or a bias): its int32 partial "
                            "sums cannot continue from the int8 values in the output")
    if not isinstance(rq.zero_point, int) or isinstance(rq.zero_point, bool):
        raise DTypeError(f"{st}: requant zero point {rq.zero_point!r} is not an integer")
    if rq.of_float and (comp.reduce is not None or comp.post is not None):
        raise ScheduleError(f"{st}: a requantized float value is an assignment (QuantizeLinear), not a "
                            f"{comp.reduce or 'post-operated'} statement")
    info = DTYPES[out.dtype].np
    lo, hi = np.iinfo(info).min, np.iinfo(info).max
    if not lo <= rq.zero_point <= hi:
        raise ShapeError(f"{st}: requant zero point {rq.zero_point} is outside {out.dtype} [{lo}, {hi}]")
    if isinstance(rq.scale, Load):
        sb = bufs.get(rq.scale.access.buffer)
        if sb is not None and sb.dtype != "float32":
            raise DTypeError(f"{st}: requant scale {rq.scale} must be float32, not {sb.dtype}")
    elif not isinstance(rq.scale, Const):
        raise UnsupportedError(f"{st}: requant scale must be a constant or a float32 buffer read, not {rq.scale}")


def _check_access(tree, stack, st: str, verb: str, acc: Access, bufs: dict) -> None:
    b = bufs[acc.buffer]
    if len(acc.index) != len(b.shape):
        raise ShapeError(f"{st} {verb} {acc}: {b.name} has {len(b.shape)} dimension(s)"
                         f" but the access has {len(acc.index)} index(es)")
    if acc.zero_pad:
        return
    for i, (ix, size) in enumerate(zip(acc.index, b.shape)):
        if not isinstance(ix, Affine):
            raise ScheduleError(f"{st} {verb} {acc}: index {i} is not an Affine")
        bounds = index_bounds(tree, stack, ix)
        if bounds is None:      # the statement never runs (a dimension of size 0)
            return
        lo, hi = bounds
        if hi >= size:
            raise BoundsError(f"{st} {verb} {acc}: index {i} ({ix}) reaches {hi}"
                              f" but {b.name} has size {size} in dimension {i}")
        if lo < 0:
            raise BoundsError(f"{st} {verb} {acc}: index {i} ({ix}) reaches {lo}"
                              f" but {b.name} starts at 0 in dimension {i}")
