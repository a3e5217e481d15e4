"""Target-independent facts about a loop tree: loop ranges, index bounds, work and traffic.

The backend, the verifier, the tuner and the TUI all read these; nothing here depends
on a target.  Every function is linear in the size of the tree (loops, statements,
index terms), never in the tensor sizes.

Ranges, LoopNest style: a loop over dimension d sees the range R its enclosing loops
over d leave it (the dimension's size when there are none).  It takes offsets
0, step, 2*step, ... < R; an inner loop over d sees min(step, R - offset), so a
partial last iteration (the tail) hands the inner loops a smaller range.  The value
of d at a statement is the sum of the offsets of its enclosing loops over d.
"""
from __future__ import annotations

import functools
from typing import Sequence

from ..dtypes import dtype as _dtype
from .ir import Access, Binary, Compute, Expr, Loop, LoopTree, Unary

__all__ = [
    "loop_ranges", "dim_chains", "chain_bounds", "index_bounds", "dim_points",
    "iteration_count", "output_points", "reduction_dims", "output_dims",
    "op_count", "statement_flops", "flops", "bytes_moved", "arithmetic_intensity",
]


# ---------------------------------------------------------------------------
# ranges


def loop_ranges(tree: LoopTree) -> dict[str, tuple[int, int, int]]:
    """Each loop var -> (range, extent, tail): the full range the loop sees at its position
    (its dimension's size, or the smaller of that and the step of the nearest enclosing loop
    over the same dimension), the number of full steps, and the remainder."""
    out: dict[str, tuple[int, int, int]] = {}
    sizes = dict(tree.dims)

    def rec(nodes, seen: dict[str, int]):
        for n in nodes:
            if isinstance(n, Loop):
                r = seen.get(n.dim, sizes.get(n.dim, 0))
                out[n.var] = (r, r // n.step if n.step > 0 else 0, r % n.step if n.step > 0 else r)
                rec(n.body, {**seen, n.dim: min(r, n.step)})

    rec(tree.body, {})
    return out


def dim_chains(stack: Sequence[Loop]) -> dict[str, list[Loop]]:
    """The enclosing loops of each dimension, outermost first."""
    chains: dict[str, list[Loop]] = {}
    for lp in stack:
        chains.setdefault(lp.dim, []).append(lp)
    return chains


def chain_bounds(size: int, steps: Sequence[int], coeffs: Sequence[int]) -> tuple[int, int] | None:
    """Exact (min, max) of sum(coeff_i * offset_i) over the offsets a chain of loops over one
    dimension of `size` takes (outermost first), or None when the chain runs no iteration:
    see _chain_bounds (kept per chain: every access of a nest asks for the same few chains)."""
    return _chain_bounds(size, tuple(steps), tuple(coeffs))


@functools.lru_cache(maxsize=4096)
def _chain_bounds(size: int, steps: tuple[int, ...], coeffs: tuple[int, ...]) -> tuple[int, int] | None:
    """The bounds chain_bounds returns.

    The inner range shrinks only in the tail iteration, and a larger range reaches a superset
    of offsets, so at each level the extremes come from offset 0, the last full iteration or
    the tail: at most 3**len(steps) cases, independent of the size.
    """

    def rec(i: int, r: int) -> tuple[int, int] | None:
        if r <= 0:
            return None
        if i == len(steps):
            return (0, 0)
        s, a = steps[i], coeffs[i]
        last = (r - 1) // s * s
        cands = {0, last}
        if last >= s:
            cands.add(last - s)
        lo = hi = None
        for o in cands:
            inner = rec(i + 1, min(s, r - o))
            if inner is None:
                continue
            l, h = a * o + inner[0], a * o + inner[1]
            lo = l if lo is None else min(lo, l)
            hi = h if hi is None else max(hi, h)
        return None if lo is None else (lo, hi)

    return rec(0, size)


def dim_points(size: int, steps: Sequence[int]) -> int:
    """How many times a chain of loops over one dimension runs its innermost body."""

    def rec(i: int, r: int) -> int:
        if r <= 0:
            return 0
        if i == len(steps):
            return 1
        s = steps[i]
        full, tail = divmod(r, s)
        return (full * rec(i + 1, s) if full else 0) + (rec(i + 1, tail) if tail else 0)

    return rec(0, size)


def index_bounds(tree: LoopTree, stack: Sequence[Loop], affine) -> tuple[int, int] | None:
    """Exact (min, max) of an Affine index over the iteration domain of a statement under
    `stack`, or None when the statement never runs.  A dimension term stands for the sum of
    its loops' offsets and an `@var` term for one offset, so `m - @m0` is proven tight.
    Raises KeyError naming a dimension with no enclosing loop or an unknown `@var`."""
    chains = dim_chains(stack)
    by_var = {lp.var: lp for lp in stack}
    coeffs: dict[str, dict[str, int]] = {}   # dim -> loop var -> coefficient
    for name, c in affine.terms:
        if name.startswith("@"):
            lp = by_var[name[1:]]
            d = coeffs.setdefault(lp.dim, {})
            d[lp.var] = d.get(lp.var, 0) + c
        else:
            chain = chains[name]
            d = coeffs.setdefault(name, {})
            for lp in chain:
                d[lp.var] = d.get(lp.var, 0) + c
    lo = hi = affine.const
    for dim, cs in coeffs.items():
        chain = chains[dim]
        b = chain_bounds(tree.dim_size(dim), [lp.step for lp in chain], [cs.get(lp.var, 0) for lp in chain])
        if b is None:
            return None
        lo += b[0]
        hi += b[1]
    return lo, hi


# ---------------------------------------------------------------------------
# statement domains


def _access_dims(acc: Access, stack: Sequence[Loop]) -> set[str]:
    by_var = {lp.var: lp.dim for lp in stack}
    out = set()
    for name in acc.names():
        out.add(by_var.get(name[1:], name) if name.startswith("@") else name)
    return out


def output_dims(stack: Sequence[Loop], comp: Compute) -> set[str]:
    """Dimensions the output index uses (directly or through an `@var` of a loop over them)."""
    return _access_dims(comp.out, stack)


def reduction_dims(stack: Sequence[Loop], comp: Compute) -> list[str]:
    """Dimensions of the statement's domain that its output index does not use, in loop order."""
    used = output_dims(stack, comp)
    seen: list[str] = []
    for lp in stack:
        if lp.dim not in used and lp.dim not in seen:
            seen.append(lp.dim)
    return seen


def iteration_count(tree: LoopTree, stack: Sequence[Loop]) -> int:
    """How many times a statement under `stack` runs."""
    n = 1
    for dim, chain in dim_chains(stack).items():
        n *= dim_points(tree.dim_size(dim), [lp.step for lp in chain])
    return n


def output_points(tree: LoopTree, stack: Sequence[Loop], comp: Compute) -> int:
    """Iteration points of the statement's non-reduction dimensions (its output points)."""
    red = set(reduction_dims(stack, comp))
    n = 1
    for dim, chain in dim_chains(stack).items():
        if dim not in red:
            n *= dim_points(tree.dim_size(dim), [lp.step for lp in chain])
    return n


# ---------------------------------------------------------------------------
# work and traffic


def op_count(e: Expr | str | None) -> int:
    """Arithmetic operations in an expression (loads, constants and acc are free)."""
    if isinstance(e, Unary):
        return 1 + op_count(e.x)
    if isinstance(e, Binary):
        return 1 + op_count(e.a) + op_count(e.b)
    return 0


def statement_flops(tree: LoopTree, stack: Sequence[Loop], comp: Compute) -> int:
    """Operations of one statement: (ops in expr + 1 for the reduction) per iteration point,
    plus the init and post ops once per output point.  A copy counts 0; `+= mul(a, b)` counts 2."""
    per_point = op_count(comp.expr) + (1 if comp.reduce is not None else 0)
    total = per_point * iteration_count(tree, stack)
    extra = op_count(comp.init if not isinstance(comp.init, str) else None) + op_count(comp.post)
    if extra:
        total += extra * output_points(tree, stack, comp)
    return total


def flops(tree: LoopTree) -> int:
    """Arithmetic operations the whole tree performs (2*M*N*K for a matmul)."""
    return sum(statement_flops(tree, stack, c) for stack, c in tree.computes())


def _rmw_outputs(tree: LoopTree) -> set[str]:
    """Outputs whose initial contents are read: accumulated without init, or read by a statement."""
    outs = {b.name for b in tree.outputs}
    rmw = set()
    for _, c in tree.computes():
        if c.out.buffer in outs and c.reduce is not None and c.init is None:
            rmw.add(c.out.buffer)
        for a in c.reads():
            if a.buffer in outs:
                rmw.add(a.buffer)
    return rmw


def bytes_moved(tree: LoopTree) -> int:
    """Compulsory traffic: every input read once, every output written once (and read once
    more when its old contents are used).  Intermediates are assumed to stay in cache."""
    rmw = _rmw_outputs(tree)
    total = 0
    for b in tree.buffers:
        if b.kind == "temp":
            continue
        nbytes = b.size * _dtype(b.dtype).itemsize
        total += nbytes * (2 if b.name in rmw else 1)
    return total


def arithmetic_intensity(tree: LoopTree) -> float:
    """flops per compulsory byte (0 when nothing moves)."""
    b = bytes_moved(tree)
    return flops(tree) / b if b else 0.0
