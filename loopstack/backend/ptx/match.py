"""Recognise the contraction a loop tree computes: a GEMM or an NHWC convolution.

The GPU backend maps a loop tree onto the tensor cores when its one statement is

    out[m, n]           += A[m, k] * B[k, n]    (or B[n, k])                         GEMM
    out[b, m, n]        += A[b, m, k] * B[b, k, n]  (b optional on either operand)   batched GEMM
    out[b, oh, ow, n]   += X[b, oh*st + r - pad, ow*st + s - pad, c] * W[r, s, c, n] conv (b optional)

with `init identity` or a per-column `init v[n]` (a bias), and an optional epilogue `post`
built from the accumulator, constants, per-column loads and add/sub/mul/max/min/relu/neg/abs,
and on float results exp/sigmoid/tanh/gelu/erf.
As everywhere in loopstack, `post` sees the value as stored (rounded to f16/bf16, or
wrapped to int8 as C's conversion does) and its result is converted again when stored.  The convolution is an
implicit GEMM: M = b*oh*ow, N = output channels, K = r*s*c in that order.  Anything else is
an UnsupportedError naming what differs.  Staged copies of the operands (the `copy_input`
action) are read through: the kernel stages A and B in shared memory itself, so the copy is
that staging, and a schedule written for a CPU compiles for the GPU unchanged.  The loops
decide the kernel's schedule only where they bind it (`block`, `warp`: see `bind.py`);
otherwise the knobs do (`knobs.py`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...errors import UnsupportedError
from ...isa.ptx.mma import mma_for
from ...looptree.ir import Acc, Binary, Compute, Const, Load, Loop, LoopTree, Unary

INTEGER_8 = frozenset({"int8", "uint8"})   # either signedness on either side: the u8/s8 mma forms
POST_UNARY = ("relu", "neg", "abs", "exp", "sigmoid", "tanh", "gelu", "erf")     # the last five on floats only
                                                                      # (the loop tree's verifier says so)
POST_BINARY = ("add", "sub", "mul", "max", "min")


@dataclass(frozen=True)
class ConvGeometry:
    batch: int
    h: int          # input height and width (unpadded)
    w: int
    c: int          # input channels
    r: int          # filter height and width
    s: int
    oh: int
    ow: int
    stride: int
    pad: int


@dataclass(frozen=True)
class Contraction:
    """C[M, N] = A[M, K] . B[K, N] with an epilogue; `conv` set for an implicit GEMM."""
    m: int
    n: int
    k: int
    dtype: str              # of A (and of B, unless b_dtype says otherwise)
    out_dtype: str
    a: str                  # buffer names
    b: str
    out: str
    b_kmajor: bool          # B indexed [k, n] (True) or [n, k]
    post: object            # the epilogue expression over Acc, or None
    init: object = None     # the reduction's start (a Load of a bias), None for zero
    conv: ConvGeometry | None = None
    # the tree's dimensions in their GEMM roles: rows of C (m, or b oh ow), its columns (n), the
    # reduction in K's order (k, or r s c); the statement's loops (outermost first) and its
    # tensorize request
    rows: tuple[str, ...] = ()
    col: str = ""
    red: tuple[str, ...] = ()
    loops: tuple = field(default=(), compare=False)
    tensorize: str = ""
    requant: object = None  # the int32 -> int8/uint8 requantization after post (ir.Requant), or None
    # a batched GEMM: out[b, m, n] += A[b, m, k] * B[b, k, n], each operand batched or shared
    batch: int = 1
    batch_dim: str = ""
    a_batched: bool = False
    b_batched: bool = False
    b_dtype: str = ""       # B's where it differs from A's (uint8 by int8, int8 by uint8)

    @property
    def mma(self):
        """The mma.sync form that multiplies A by B."""
        return mma_for(self.dtype, self.b_dtype or None)

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k


def _dim(aff) -> str | None:
    """The dimension an index is, when it is exactly one dimension with coefficient 1."""
    if aff.const == 0 and len(aff.terms) == 1 and aff.terms[0][1] == 1 and not aff.terms[0][0].startswith("@"):
        return aff.terms[0][0]
    return None


def _no(why: str):
    raise UnsupportedError(f"the GPU backend runs GEMMs and NHWC convolutions on tensor cores; this tree {why}")


def match(tree: LoopTree) -> Contraction:
    bufs = {b.name: b for b in tree.buffers}
    loops, st = _contraction(tree, bufs)
    if st.reduce != "add" or st.init is None:
        _no(f"reduces with {st.reduce!r}, init {st.init!r} (a sum from zero or a bias expected)")
    init = None if st.init == "identity" else st.init
    e = st.expr
    if not (isinstance(e, Binary) and e.op == "mul" and isinstance(e.a, Load) and isinstance(e.b, Load)):
        _no("does not multiply two loads")
    for b in tree.buffers:
        row_major = tuple(int(x) for x in _row_major(b.shape))
        if b.strides and tuple(b.strides) != row_major:
            _no(f"has buffer {b.name} with strides {b.strides} (row-major expected)")
    dims = dict(tree.dims)
    out = bufs[st.out.buffer]
    oidx = [_dim(a) for a in st.out.index]
    if None in oidx:
        _no(f"writes {out.name} at a computed index")
    x, w = e.a.access, e.b.access
    da, db = bufs[x.buffer].dtype, bufs[w.buffer].dtype
    if da != db and not {da, db} <= INTEGER_8:
        _no(f"multiplies {da} by {db}")
    if len(oidx) == 2 or len(oidx) == 3 and 4 not in (len(x.index), len(w.index)):
        con = _gemm(st, x, w, oidx, dims, bufs, out)
    elif len(oidx) in (3, 4):
        con = _conv(st, x, w, oidx, dims, bufs, out)
    else:
        _no(f"writes a {len(oidx)}-d output")
    b_dtype = bufs[con.b].dtype
    con = replace(con, init=init, loops=loops, tensorize=st.tensorize, requant=st.requant,
                  b_dtype="" if b_dtype == con.dtype else b_dtype)
    _check_post(init, con, bufs, oidx[-1])
    _check_post(st.post, con, bufs, oidx[-1])
    if st.requant is not None:
        _check_requant(st.requant, con, bufs, oidx[-1])
    return con


def _check_requant(rq, con: Contraction, bufs, n_dim: str) -> None:
    """An 8-bit integer product requantized into int8 or uint8, by a constant or per-column float32 scale."""
    if con.dtype not in INTEGER_8 or con.out_dtype not in INTEGER_8:
        _no(f"requantizes {con.dtype} products into {con.out_dtype} (8-bit integers into int8 or uint8 expected)")
    _check_post(rq.scale, con, bufs, n_dim)
    if isinstance(rq.scale, Load) and bufs[rq.scale.access.buffer].dtype != "float32":
        _no(f"scales by {rq.scale.access.buffer} of {bufs[rq.scale.access.buffer].dtype} (float32 expected)")
    if not isinstance(rq.scale, (Load, Const)):
        _no(f"scales by {rq.scale} (a constant or a vector over the columns expected)")


def _contraction(tree: LoopTree, bufs) -> tuple[tuple[Loop, ...], Compute]:
    """The one reduction statement and its loops, its reads of staged copies replaced by what
    the copies read (a copy `T[f] = X[g]` read back as `T[f]`, at the index it was written, is
    `X[g]`)."""
    stmts = list(tree.computes())
    copies = {s.out.buffer: s for _, s in stmts if _is_copy(s, bufs)}
    rest = _fold_conversion([(loops, s) for loops, s in stmts if s.out.buffer not in copies], bufs)
    if len(rest) != 1:
        converts = any(isinstance(s.expr, Load) and bufs[s.out.buffer].dtype != bufs[s.expr.access.buffer].dtype
                       for _, s in rest)
        _no(f"has {len(rest)} statements besides staged copies (one contraction expected)"
            + ("; an astype inside the program converts into a buffer of its own: give the operands in "
               "their dtype, or cast the result (.sum(k).astype(...))" if converts else ""))
    loops, st = rest[0]
    if not copies:
        return loops, st

    def through(e):
        if isinstance(e, Load) and e.access.buffer in copies:
            copy = copies[e.access.buffer]
            if e.access.index != copy.out.index:
                _no(f"reads its copy {e.access.buffer} at [{', '.join(map(str, e.access.index))}], not where "
                    f"the copy wrote it")
            return through(copy.expr)
        if isinstance(e, Unary):
            return Unary(e.op, through(e.x))
        if isinstance(e, Binary):
            return Binary(e.op, through(e.a), through(e.b))
        return e
    init = st.init if st.init in (None, "identity") else through(st.init)
    post = None if st.post is None else through(st.post)
    rq = st.requant if st.requant is None else replace(st.requant, scale=through(st.requant.scale))
    return loops, replace(st, expr=through(st.expr), init=init, post=post, requant=rq)


def _fold_conversion(rest, bufs):
    """[contraction into T, out = T converted] -> [contraction into out]: an integer contraction's
    result cast to a float type (`.astype` on the result) is computed in int32 and then converted
    (frontend/graph.py), which the kernel does on its store of the s32 accumulators."""
    if len(rest) != 2:
        return rest
    for (loops, st), (_, conv) in (rest, rest[::-1]):
        t = st.out.buffer
        if (conv.is_copy and conv.requant is None and conv.expr.access.buffer == t
                and bufs[t].kind == "temp" and bufs[conv.out.buffer].kind == "output"
                and conv.expr.access.index == st.out.index):      # each element as it was summed
            # (T may be scoped to loops the two share, a row of out: T[m - @L0, n] -> out[m, n])
            return [(loops, replace(st, out=conv.out))]
    return rest


def _is_copy(s: Compute, bufs) -> bool:
    """A staged copy (copy_input): a temporary assigned a load of its own dtype, nothing else (a
    conversion, astype's, is an operand of its own)."""
    return (s.reduce is None and isinstance(s.expr, Load) and s.post is None and s.requant is None
            and bufs[s.out.buffer].kind == "temp" and bufs[s.out.buffer].dtype == bufs[s.expr.access.buffer].dtype)


def _row_major(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return tuple(reversed(st))


def _gemm(st, x, w, oidx, dims, bufs, out) -> Contraction:
    """out[m, n] += A[m, k] * B[k, n] (or B[n, k]); batched, out[b, m, n] += A[b, m, k] * B[b, k, n]
    where an operand without b is shared by every batch (the grid's z runs the batch)."""
    bd = oidx[0] if len(oidx) == 3 else None
    m, n = oidx[-2:]
    xi, wi = [_dim(a) for a in x.index], [_dim(a) for a in w.index]
    if None in xi or None in wi or x.zero_pad or w.zero_pad:
        _no("reads an operand at a computed index")
    if m not in xi:                     # the operand indexed by m is A
        x, w, xi, wi = w, x, wi, xi
    a_b, b_b = bd is not None and xi[:1] == [bd], bd is not None and wi[:1] == [bd]
    a2, b2 = xi[a_b:], wi[b_b:]         # the operands' matrix indices
    if len(a2) != 2 or a2[0] != m or len(b2) != 2 or bd in a2 or bd in b2:
        if bd is None:
            _no("is not a matrix product out[m, n] += A[m, k] * B[k, n]")
        _no(f"writes {out.name}[{', '.join(oidx)}] from [{', '.join(xi)}] and [{', '.join(wi)}]: a batched matrix "
            "product is out[b, m, n] += A[b, m, k] * B[b, k, n] (or B[b, n, k]), the batch first in the output "
            "and in each operand that has it")
    k = a2[1]
    if b2 not in ([k, n], [n, k]):
        _no(f"indexes B as [{', '.join(wi)}] (expected [{k}, {n}] or [{n}, {k}]"
            f"{f', after {bd}' if bd is not None else ''})")
    batch = {} if bd is None else dict(batch=dims[bd], batch_dim=bd, a_batched=a_b, b_batched=b_b)
    return Contraction(dims[m], dims[n], dims[k], bufs[x.buffer].dtype, out.dtype, x.buffer, w.buffer,
                       out.name, b2 == [k, n], st.post, rows=(m,), col=n, red=(k,), **batch)


def _conv(st, x, w, oidx, dims, bufs, out) -> Contraction:
    xb, wb = bufs[x.buffer], bufs[w.buffer]
    if len(w.index) != 4:
        x, w, xb, wb = w, x, wb, xb
    batch_dim = oidx[0] if len(oidx) == 4 else None
    oh, ow, n = oidx[-3:]
    wi = [_dim(a) for a in w.index]
    if None in wi or len(wi) != 4 or wi[3] != n or w.zero_pad:
        _no("is not a convolution with weights W[r, s, c, k]")
    r, s, c = wi[:3]
    if len(x.index) != len(oidx):
        _no("reads an input of another rank than its output")
    if batch_dim is not None and _dim(x.index[0]) != batch_dim:
        _no("does not keep the batch index of the input")
    hi, wid, ci = x.index[-3:]
    if _dim(ci) != c:
        _no("does not read the input channels innermost (NHWC expected)")
    geo = []
    for aff, o, f in ((hi, oh, r), (wid, ow, s)):
        terms = dict(aff.terms)
        if set(terms) != {o, f} or terms[f] != 1:
            _no(f"indexes the input spatially as {aff} (o*stride + r - pad expected)")
        geo.append((terms[o], -aff.const))
    (sth, ph), (stw, pw) = geo
    if sth != stw or ph != pw or ph < 0:
        _no("has different strides or paddings along h and w")
    if ph and not x.zero_pad:
        _no("reads a padded input without zero padding")
    xs = xb.shape
    batch = xs[0] if batch_dim is not None else 1
    geom = ConvGeometry(batch, xs[-3], xs[-2], xs[-1], dims[r], dims[s], dims[oh], dims[ow], sth, ph)
    if xs[-1] != dims[c]:
        _no("reads a part of the input channels")
    return Contraction(batch * dims[oh] * dims[ow], dims[n], dims[r] * dims[s] * dims[c], xb.dtype, out.dtype,
                       x.buffer, w.buffer, out.name, True, st.post, conv=geom,
                       rows=tuple(oidx[:-1]), col=n, red=(r, s, c))


def bias_loads(*exprs) -> list[Load]:
    """The loads of an init and an epilogue, in first-use order."""
    found: list[Load] = []

    def walk(e):
        if isinstance(e, Load) and e not in found:
            found.append(e)
        elif isinstance(e, Unary):
            walk(e.x)
        elif isinstance(e, Binary):
            walk(e.a)
            walk(e.b)
    for e in exprs:
        if e is not None:
            walk(e)
    return found


def _check_post(post, con: Contraction, bufs, n_dim: str) -> None:
    if post is None:
        return

    def walk(e):
        if isinstance(e, (Acc, Const)):
            return
        if isinstance(e, Unary):
            if e.op not in POST_UNARY:
                _no(f"has epilogue op {e.op} (supported: {', '.join(POST_UNARY + POST_BINARY)})")
            return walk(e.x)
        if isinstance(e, Binary):
            if e.op not in POST_BINARY:
                _no(f"has epilogue op {e.op} (supported: {', '.join(POST_UNARY + POST_BINARY)})")
            walk(e.a)
            return walk(e.b)
        if isinstance(e, Load):
            b = bufs[e.access.buffer]
            if len(b.shape) != 1 or _dim(e.access.index[0]) != n_dim or e.access.zero_pad:
                _no(f"reads {b.name}{list(b.shape)} in its epilogue (a vector over the columns expected)")
            return
        _no(f"has an epilogue node {type(e).__name__}")
    walk(post)
