"""The reference interpreter: runs a loop tree with numpy, exactly as ir.py defines it.

Every other backend is tested against this one, so it favours plain semantics over speed,
but it is vectorised enough for tests (a 64x64x64 matmul in milliseconds, whatever the
schedule):

  * Loops run in Python only down to the first *perfect nest*: a chain of loops, each with
    one child, ending in one Compute.  A perfect nest is evaluated at once: its iteration
    points are expanded into numpy index arrays in execution (C) order, tails included.
    Big nests are cut into chunks of at most MAX_POINTS points along the nest's outermost loop.
  * Reductions use ufunc.at (np.add.at, np.maximum.at, ...), which applies the points one
    after another in order, so the result is the sequential one.  `init` is stored at the
    points where every reduction dimension is 0 (before that chunk accumulates) and `post`
    at the points where every reduction dimension is at its last value (after).  The first
    reduction point of an output is executed before, and the last after, all its others,
    whatever the loop order, so this is exact.
  * Types: a statement computes in its output's compute type (float16 and float32 in
    float32; int8, uint8 and int32 in int32, wrapping as C's int32 does).  Loads convert
    to the compute type; every store converts to the buffer's type (fp16 rounds, int8
    wraps), and a reduction reads the stored value back at each step.
  * Integer `div` truncates toward zero and gives 0 for a zero divisor; float errors
    (0/0, log of a negative) give nan/inf silently, as the generated code would.
  * gelu is the tanh approximation 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x**3))),
    the same definition the code generators use; sigmoid is 1/(1 + exp(-x)).

A plain assignment whose domain has dimensions its output does not use writes each
output point several times; the last write (in loop order) wins.  A statement that reads
its own output at a different point than it writes sees the values from before the chunk.
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import DTYPES
from ..looptree import stats
from ..looptree.verify import computes_in_integers
from ..looptree.ir import (
    Acc, Access, Binary, Compute, Const, Dot, Load, Loop, LoopTree, Unary, reduce_identity,
)
from .kernel_base import KernelBase

__all__ = ["InterpKernel", "MAX_POINTS", "UNARY_FUNCS", "erf", "gelu"]

MAX_POINTS = 1 << 22  # iteration points evaluated at once (bounds the index arrays' memory)

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(x):
    """The tanh approximation of GELU, in x's precision."""
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


_ERF = np.frompyfunc(math.erf, 1, 1)


def erf(x):
    """The error function, in float64 rounded to x's precision (the reference the vector code's
    rational approximation is measured against)."""
    x = np.asarray(x)
    return np.asarray(_ERF(x.astype(np.float64)), np.float64).astype(x.dtype)      # a 0-d x gives a float


def _relu(x):
    return np.maximum(x, x.dtype.type(0))


UNARY_FUNCS = {
    "neg": np.negative,
    "abs": np.abs,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "reciprocal": lambda x: 1.0 / x,
    "relu": _relu,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "gelu": gelu,
    "erf": erf,
}


def _int_div(a, b):
    """C-style int32 division: truncate toward zero; a zero divisor gives 0."""
    a, b = np.asarray(a, np.int32), np.asarray(b, np.int32)
    safe = np.where(b == 0, np.int32(1), b)
    q = np.floor_divide(a, safe)
    r = a - q * safe
    q = q + ((r != 0) & ((a < 0) != (safe < 0))).astype(np.int32)
    return np.where(b == 0, np.int32(0), q).astype(np.int32)


_FLOAT_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                 "max": np.maximum, "min": np.minimum}
_INT_BINARY = {**_FLOAT_BINARY, "div": _int_div}
_REDUCE_UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


# ---------------------------------------------------------------------------
# the plan: the tree turned into Python loops and perfect nests, with static facts cached


class _Stmt:
    """A Compute with what its evaluation needs to know about its position."""

    def __init__(self, tree: LoopTree, stack: tuple[Loop, ...], comp: Compute):
        self.comp = comp
        out = tree.buffer(comp.out.buffer)
        self.store = DTYPES[out.dtype].np
        # a requantized statement accumulates in an int32 shadow of its output (see _target)
        self.final = self.store
        if comp.requant is not None:
            self.store = np.dtype(np.int32)
        self.is_int = computes_in_integers(comp, out.dtype)
        # a requantized float assignment (Requant.of_float) writes an integer but computes in float32
        float_into_int = not self.is_int and not DTYPES[out.dtype].is_float
        self.ctype = np.dtype(np.float32 if float_into_int else DTYPES[out.dtype].compute)
        self.red_dims = stats.reduction_dims(stack, comp)
        chains = stats.dim_chains(stack)
        # the last value of each reduction dimension at this statement (post fires there)
        self.red_last = {}
        for d in self.red_dims:
            ch = chains[d]
            b = stats.chain_bounds(tree.dim_size(d), [lp.step for lp in ch], [1] * len(ch))
            self.red_last[d] = b[1] if b else 0
        # dims and loop offsets the evaluation must track through the nest
        names = set()
        for acc in (comp.out, *comp.reads()):
            names |= acc.names()
        self.dims_needed = {n for n in names if not n.startswith("@")} | set(self.red_dims)
        self.vars_needed = {n[1:] for n in names if n.startswith("@")}
        # a plain assignment repeated over dimensions its output ignores: last write wins
        self.dedupe = comp.reduce is None and any(lp.dim not in stats.output_dims(stack, comp) for lp in stack)
        if comp.reduce is not None:
            self.identity = reduce_identity(comp.reduce, self.store.name)


class _PyLoop:
    def __init__(self, loop: Loop, body: list):
        self.loop, self.body = loop, body


class _Nest:
    def __init__(self, chain: list[Loop], stmt: _Stmt, extents: list[int]):
        self.chain, self.stmt, self.extents = chain, stmt, extents


def _plan(tree: LoopTree) -> list:
    ranges = stats.loop_ranges(tree)

    def extent(lp):
        r, full, tail = ranges[lp.var]
        return full + (1 if tail else 0)

    def rec(nodes, stack):
        out = []
        for n in nodes:
            if isinstance(n, Compute):
                out.append(_Nest([], _Stmt(tree, stack, n), []))
                continue
            chain, cur = [n], n
            while len(cur.body) == 1 and isinstance(cur.body[0], Loop):
                cur = cur.body[0]
                chain.append(cur)
            if len(cur.body) == 1 and isinstance(cur.body[0], Compute):
                out.append(_Nest(chain, _Stmt(tree, stack + tuple(chain), cur.body[0]),
                                 [extent(lp) for lp in chain]))
            else:
                out.append(_PyLoop(n, rec(n.body, stack + (n,))))
        return out

    return rec(tree.body, ())


# ---------------------------------------------------------------------------
# iteration points


class _Points:
    """Iteration points in execution order: dim values, remaining ranges and loop offsets,
    each an int (the same at every point) or an int64 array with one entry per point."""

    __slots__ = ("n", "val", "rng", "off")

    def __init__(self, n, val, rng, off):
        self.n, self.val, self.rng, self.off = n, val, rng, off

    def take(self, idx) -> "_Points":
        def t(d):
            return {k: (v[idx] if isinstance(v, np.ndarray) else v) for k, v in d.items()}

        n = int(np.count_nonzero(idx)) if getattr(idx, "dtype", None) == bool else len(idx)
        return _Points(n, t(self.val), t(self.rng), t(self.off))


def _expand(pts: _Points, chain: list[Loop], sizes: dict[str, int], stmt: _Stmt,
            first_offsets: np.ndarray | None = None) -> _Points:
    """The points of `chain` (outermost first) under each point of `pts`."""
    n, val, rng, off = pts.n, dict(pts.val), dict(pts.rng), dict(pts.off)
    for li, lp in enumerate(chain):
        d, s = lp.dim, lp.step
        R = rng.get(d, sizes[d])
        if not isinstance(R, np.ndarray):
            offs = first_offsets if (li == 0 and first_offsets is not None) else np.arange(0, R, s, dtype=np.int64)
            m = len(offs)
            if m == 0 or n == 0:
                return _Points(0, {}, {}, {})

            def re(a, m=m):
                return np.repeat(a, m) if isinstance(a, np.ndarray) else a

            o = np.tile(offs, n) if n > 1 else offs
            new_rng = s if R % s == 0 else np.minimum(s, R - o)
            n *= m
        else:
            counts = (R + s - 1) // s
            total = int(counts.sum())
            if total == 0:
                return _Points(0, {}, {}, {})
            idx = np.repeat(np.arange(n), counts)
            starts = np.cumsum(counts) - counts
            o = (np.arange(total, dtype=np.int64) - starts[idx]) * s

            def re(a, idx=idx):
                return a[idx] if isinstance(a, np.ndarray) else a

            new_rng = np.minimum(s, R[idx] - o)
            n = total
        later = {x.dim for x in chain[li + 1:]}
        val = {k: re(v) for k, v in val.items()}
        rng = {k: re(v) for k, v in rng.items() if k in later}
        off = {k: re(v) for k, v in off.items()}
        if d in stmt.dims_needed:
            val[d] = val.get(d, 0) + o
        if d in later:
            rng[d] = new_rng
        if lp.var in stmt.vars_needed:
            off[lp.var] = o
    return _Points(n, val, rng, off)


# ---------------------------------------------------------------------------
# evaluation


class InterpKernel(KernelBase):
    """A Kernel that interprets its loop tree with numpy (see the module docstring)."""

    def __init__(self, tree: LoopTree, verify: bool = True):
        if verify:
            from ..looptree.verify import verify as _verify

            _verify(tree)
        super().__init__(tree)
        self._sizes = dict(tree.dims)
        self._program = _plan(tree)

    def asm(self) -> str:
        return "; the reference interpreter runs the loop tree with numpy: it has no assembly\n"

    # -- driver ----------------------------------------------------------
    def _execute(self, arrays) -> None:
        bufs = {}
        for a, b in zip(arrays, self.tree.arguments):
            bufs[b.name] = a.reshape(-1) if a.flags.c_contiguous else \
                np.lib.stride_tricks.as_strided(a, (b.size,), (a.itemsize,))
        for b in self.tree.temps:
            bufs[b.name] = np.zeros(b.size, DTYPES[b.dtype].np)
        self._bufs = bufs
        self._shadows = {}
        try:
            with np.errstate(all="ignore"):
                self._run(self._program, _Points(1, {}, {}, {}))
        finally:
            self._bufs = None

    def _run(self, program, env: _Points) -> None:
        for op in program:
            if isinstance(op, _Nest):
                self._run_nest(op.chain, op.extents, op.stmt, env)
                continue
            lp = op.loop
            R = env.rng.get(lp.dim, self._sizes[lp.dim])
            base = env.val.get(lp.dim, 0)
            for o in range(0, R, lp.step):
                self._run(op.body, _Points(1, {**env.val, lp.dim: base + o},
                                           {**env.rng, lp.dim: min(lp.step, R - o)},
                                           {**env.off, lp.var: o}))

    def _run_nest(self, chain, extents, stmt, env: _Points) -> None:
        inner = math.prod(extents[1:])
        if not chain or inner * extents[0] <= MAX_POINTS:
            pts = _expand(env, chain, self._sizes, stmt)
            if pts.n:
                self._evaluate(stmt, pts)
            return
        lp = chain[0]
        R = env.rng.get(lp.dim, self._sizes[lp.dim])
        offsets = np.arange(0, R, lp.step, dtype=np.int64)
        if inner > MAX_POINTS:       # even one iteration is too big: go one level deeper
            base = env.val.get(lp.dim, 0)
            for o in offsets.tolist():
                sub = _Points(1, {**env.val, lp.dim: base + o}, {**env.rng, lp.dim: min(lp.step, R - o)},
                              {**env.off, lp.var: o})
                self._run_nest(chain[1:], extents[1:], stmt, sub)
            return
        per = max(1, MAX_POINTS // max(inner, 1))
        for i in range(0, len(offsets), per):
            pts = _expand(env, chain, self._sizes, stmt, first_offsets=offsets[i:i + per])
            if pts.n:
                self._evaluate(stmt, pts)

    # -- one statement over a set of points --------------------------------
    def _flat_index(self, acc: Access, pts: _Points):
        """Flat element index of an access at each point, and the in-bounds mask for zero_pad."""
        b = self.tree.buffer(acc.buffer)
        flat, mask = 0, None
        for ix, size, stride in zip(acc.index, b.shape, b.strides):
            v = ix.const
            for name, c in ix.terms:
                v = v + c * (pts.off[name[1:]] if name.startswith("@") else pts.val[name])
            if acc.zero_pad:
                ok = (v >= 0) & (v < size)
                mask = ok if mask is None else (mask & ok)
                v = np.clip(v, 0, max(size - 1, 0))
            flat = flat + v * stride
        return flat, mask

    def _eval(self, e, stmt: _Stmt, pts: _Points, acc=None):
        ct = stmt.ctype
        if isinstance(e, Load):
            flat, mask = self._flat_index(e.access, pts)
            x = self._bufs[e.access.buffer][flat].astype(ct)
            if mask is not None:
                x = np.where(mask, x, ct.type(0))
            return x
        if isinstance(e, Const):
            return np.asarray(int(e.value) if stmt.is_int else e.value).astype(ct)
        if isinstance(e, Acc):
            return acc
        if isinstance(e, Unary):
            x = self._eval(e.x, stmt, pts, acc)
            return np.asarray(UNARY_FUNCS[e.op](x)).astype(ct, copy=False)
        if isinstance(e, Dot):
            total = 0
            for t in range(e.k):
                xa, xb = e.shifted(t)
                total = total + self._eval(Load(xa), stmt, pts) * self._eval(Load(xb), stmt, pts)
            return np.asarray(total).astype(ct, copy=False)
        if isinstance(e, Binary):
            a = self._eval(e.a, stmt, pts, acc)
            b = self._eval(e.b, stmt, pts, acc)
            fn = (_INT_BINARY if stmt.is_int else _FLOAT_BINARY)[e.op]
            return np.asarray(fn(a, b)).astype(ct, copy=False)
        raise TypeError(f"not an expression: {e!r}")

    def _mask_at(self, stmt: _Stmt, pts: _Points, last: bool):
        """Points where every reduction dimension is at 0 (or at its last value)."""
        m = True
        for d in stmt.red_dims:
            m = m & (pts.val[d] == (stmt.red_last[d] if last else 0))
        return np.broadcast_to(np.asarray(m), (pts.n,))

    def _target(self, stmt: _Stmt):
        """Where the statement accumulates: its output, or for a requantized statement an int32
        shadow of it (zeros, kept for the whole run), so that no partial sum is narrowed."""
        name = stmt.comp.out.buffer
        if stmt.comp.requant is None:
            return self._bufs[name]
        sh = self._shadows.get(name)
        if sh is None:
            sh = self._shadows[name] = np.zeros(self._bufs[name].shape, np.int32)
        return sh

    def _requant(self, stmt: _Stmt, pts: _Points, acc):
        """saturate(round_half_even(float32(acc) * scale) + zero_point), as onnxruntime computes it."""
        rq = stmt.comp.requant
        if isinstance(rq.scale, Load):      # _eval would convert to the int32 compute type
            flat, _ = self._flat_index(rq.scale.access, pts)
            scale = self._bufs[rq.scale.access.buffer][flat].astype(np.float32)
        else:
            scale = np.float32(rq.scale.value)
        value = np.asarray(acc, np.float32) if rq.of_float else np.asarray(acc, np.int32).astype(np.float32)
        y = np.rint(value * scale)
        info = np.iinfo(stmt.final)
        return np.clip(y + np.float32(rq.zero_point), info.min, info.max).astype(stmt.final)

    def _evaluate(self, stmt: _Stmt, pts: _Points) -> None:
        comp, n = stmt.comp, pts.n
        out = self._target(stmt)
        oi = np.broadcast_to(np.asarray(self._flat_index(comp.out, pts)[0], np.int64), (n,))
        vals = np.broadcast_to(self._eval(comp.expr, stmt, pts), (n,))
        if comp.reduce is None:
            if comp.post is not None:   # out = post(acc) with acc the stored value of expr
                acc = vals.astype(stmt.store).astype(stmt.ctype)
                vals = np.broadcast_to(self._eval(comp.post, stmt, pts, acc), (n,))
            if comp.requant is not None:
                out = self._bufs[comp.out.buffer]
                vals = np.broadcast_to(self._requant(stmt, pts, vals), (n,))
            if stmt.dedupe and n > 1:
                _, first = np.unique(oi[::-1], return_index=True)
                keep = n - 1 - first
                out[oi[keep]] = vals[keep]
            else:
                out[oi] = vals
            return
        if comp.init is not None:
            m = self._mask_at(stmt, pts, last=False)
            if m.any():
                if isinstance(comp.init, str):
                    out[oi[m]] = stmt.identity
                else:
                    sub = pts.take(m)
                    out[oi[m]] = np.broadcast_to(self._eval(comp.init, stmt, sub), (sub.n,))
        _REDUCE_UFUNC[comp.reduce].at(out, oi, vals)
        if comp.post is not None or comp.requant is not None:
            m = self._mask_at(stmt, pts, last=True)
            if m.any():
                sub = pts.take(m)
                sel = oi[m]
                acc = out[sel].astype(stmt.ctype)
                if comp.post is not None:
                    acc = np.broadcast_to(self._eval(comp.post, stmt, sub, acc), (sub.n,))
                if comp.requant is not None:
                    self._bufs[comp.out.buffer][sel] = self._requant(stmt, sub, acc)
                else:
                    out[sel] = acc
