"""GEMM and NHWC convolution programs for the GPU backend's tests (built with the frontend)."""
import numpy as np

import loopstack as lt


def bf16():
    import ml_dtypes
    return ml_dtypes.bfloat16


NP_DTYPES = {"float16": np.float16, "float32": np.float32, "int8": np.int8, "uint8": np.uint8, "int32": np.int32}
INTEGER = ("int8", "uint8")


def np_dtype(name):
    return bf16() if name == "bfloat16" else NP_DTYPES[name]


def random(shape, dtype, rng):
    if rng is None:                  # shapes only: a program that is compiled, never run
        return np.zeros(shape, np_dtype(dtype))
    if dtype in ("int8", "int32"):
        return rng.integers(-8, 8, shape).astype(np_dtype(dtype))
    if dtype == "uint8":             # the high bit set: read as int8 these would be negative
        return rng.integers(0, 256, shape).astype(np.uint8)
    return (rng.standard_normal(shape) * 0.5).astype(np_dtype(dtype))


def gemm(m, n, k, dtype, rng, b_transposed=False, bias=False, relu=False, scale=None, b_dtype=None):
    """C = post(A . B): A [m, k] of `dtype`; B [k, n] (or [n, k]) of `b_dtype` (A's by default);
    returns (tensor, arrays, numpy reference).

    The reference is computed lazily (`ref()`), so big programs cost nothing until checked."""
    s = lt.SymbolGenerator()
    a = random((m, k), dtype, rng)
    b = random((n, k) if b_transposed else (k, n), b_dtype or dtype, rng)
    A = lt.Tensor(a).to(s.m, s.k)
    B = lt.Tensor(b).to(s.n, s.k) if b_transposed else lt.Tensor(b).to(s.k, s.n)
    C = (A * B).sum(s.k)
    arrays = [a, b]
    if scale is not None:
        C = C * scale
    if bias:
        v = random((n,), "int32" if dtype in INTEGER else dtype, rng)   # an integer GEMM adds int32
        C = C + lt.Tensor(v).to(C.symbolic_shape[1])
        arrays.append(v)
    if relu:
        C = lt.nn.relu(C)

    def ref():
        r = a.astype(np.float64) @ (b.T if b_transposed else b).astype(np.float64)
        if scale is not None:
            r = r * scale
        if bias:
            r = r + arrays[2].astype(np.float64)
        return np.maximum(r, 0) if relu else r
    return C, arrays, ref


def conv(batch, h, c, k, dtype, rng, r=3, stride=1, pad=1, w_dtype=None):
    """Y = conv(X [batch, h, h, c] of `dtype`, W [r, r, c, k] of `w_dtype` (X's by default)) in
    NHWC, as the frontend spells it."""
    s = lt.SymbolGenerator()
    x = random((batch, h, h, c), dtype, rng)
    w = random((r, r, c, k), w_dtype or dtype, rng)
    X = lt.Tensor(x).to(s.b, s.h, s.w, s.c)
    if pad:
        X = lt.nn.pad(X, (s.h, pad), (s.w, pad))
    hh, ww = X.symbolic_shape[1:3]
    Xw = X.to(s.b, s.oh, s.ow, s.r, s.s, s.c, constraints=[(hh, s.oh * stride + s.r), (ww, s.ow * stride + s.s)])
    Y = (Xw * lt.Tensor(w).to(s.r, s.s, s.c, s.k)).sum(s.r, s.s, s.c)

    def ref():
        xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        o = (h + 2 * pad - r) // stride + 1
        out = np.zeros((batch, o, o, k))
        for i in range(r):
            for j in range(r):
                patch = xp[:, i:i + stride * o:stride, j:j + stride * o:stride, :]
                out += patch @ w[i, j].astype(np.float64)
        return out
    return Y, [x, w], ref


def _counts(size, block):
    return (size // block, size % block)


def bound(tensor, sched, mma_k, m, n, k):
    """`tensor` (a GEMM) with its loops bound to the grid and warps as GpuSchedule `sched` says:
    block loops over m and n (m inner for REORDER_INNER=1), warp loops, the k-step, a warp's tiles."""
    bm, bn, bk = sched.bm, sched.bn, sched.CHUNK * mma_k
    blocks = [("m", *_counts(m, bm)), ("n", *_counts(n, bn))]
    if sched.REORDER_INNER:
        blocks.reverse()
    order = blocks + [("m", sched.BLK_ROW_WARPS, 0), ("n", sched.BLK_COL_WARPS, 0), ("k", *_counts(k, bk)),
                      ("m", sched.WARP_ROW_TILES, 0), ("n", sched.WARP_COL_TILES, 0), ("k", bk, 0),
                      ("m", 16, 0), ("n", 16, 0)]
    return bind(tensor, order, ["block", "block", "warp", "warp"])


def bound_conv(tensor, sched, mma_k, batch, o, c, kout):
    """`tensor` (a conv from `conv`) with its output channels bound to the grid and warps, the
    k-step a split of c above (REORDER_INNER=1) or inside the filter window's loops."""
    bk = sched.CHUNK * mma_k
    window = [("r", 3, 0), ("s", 3, 0)]
    step = [("c", *_counts(c, bk))]
    order = ([("k", *_counts(kout, sched.bn)), ("k", sched.BLK_COL_WARPS, 0), ("b", batch, 0), ("oh", o, 0),
              ("ow", o, 0)] + (step + window if sched.REORDER_INNER else window + step)
             + [("k", sched.WARP_COL_TILES, 0), ("c", bk, 0), ("k", 16, 0)])
    return bind(tensor, order, ["block", "warp"])


def bind(tensor, order, kinds):
    """`tensor` with its contraction's loops in `order` (set_order entries), the outermost ones
    annotated `kinds` in turn ("" leaves a loop as it is)."""
    t = tensor.loop_tree
    product, total = contraction_nodes(t)
    t = t.set_order(product, order).set_order(total, order)
    path = t.path(t.ref_of(total))
    for ref, kind in zip(path, kinds):
        if kind:
            t = t.annotate(ref, kind)
    return tensor.set(t)


def contraction_nodes(tree):
    """(the product's node id, the sum's) of a frontend loop tree's one contraction."""
    total = next(g for g in tree.graph.nodes if g.op == "reduce" and g.fn == "add")
    return total.inputs[0], total.id


def requantized(m, n, k, rng, out_dtype="int8", per_channel=True, zero_point=3, relu=True, a_dtype="int8"):
    """An `a_dtype` x int8 GEMM + int32 bias (+ relu) requantized into `out_dtype`, ONNX QLinearMatMul's way:
    saturate(round_half_even(float32(acc) * scale) + zero_point). A loop tree (the DSL has no
    requantization), its arguments and the numpy reference."""
    from dataclasses import replace

    from loopstack.looptree.builders import access
    from loopstack.looptree.ir import Buffer, Compute, Const, Load, LoopTree, Requant

    C, arrays, _ = gemm(m, n, k, a_dtype, rng, bias=True, relu=relu, b_dtype="int8")
    tree = C.loop_tree.lower()
    col = next(s for _, s in tree.computes()).out.index[1].terms[0][0]
    scale = (rng.uniform(0.001, 0.1, n) if per_channel else np.array([0.0371])).astype(np.float32)
    rq = Requant(Load(access("scale", col)) if per_channel else Const(float(scale[0])), zero_point)

    def rebuild(node):
        if isinstance(node, Compute):
            return replace(node, requant=rq)
        return node.with_body(tuple(rebuild(x) for x in node.body))
    bufs = [replace(b, dtype=out_dtype) if b.kind == "output" else b for b in tree.buffers]
    if per_channel:
        bufs.insert(len(bufs) - 1, Buffer("scale", "float32", (n,), "input"))
        arrays = arrays + [scale]
    tree = LoopTree(tuple(bufs), tree.dims, tuple(rebuild(x) for x in tree.body))

    def ref():
        acc = arrays[0].astype(np.int64) @ arrays[1].astype(np.int64) + arrays[2].astype(np.int64)
        if relu:
            acc = np.maximum(acc, 0)
        y = np.rint(acc.astype(np.int32).astype(np.float32) * (scale if per_channel else scale[0]))
        info = np.iinfo(out_dtype)
        return np.clip(y + np.float32(zero_point), info.min, info.max).astype(out_dtype)
    return tree, arrays, ref


def batched(batch, m, n, k, dtype, rng, b_shared=False, b_transposed=False, bias=False):
    """C[b] = A[b] . B[b] (or . B for every b: `b_shared`); returns (tensor, arrays, reference)."""
    s = lt.SymbolGenerator()
    a = random((batch, m, k), dtype, rng)
    b = random(((n, k) if b_transposed else (k, n)) if b_shared else
               ((batch, n, k) if b_transposed else (batch, k, n)), dtype, rng)
    lead = () if b_shared else (s.b,)
    B = lt.Tensor(b).to(*lead, *((s.n, s.k) if b_transposed else (s.k, s.n)))
    C = (lt.Tensor(a).to(s.b, s.m, s.k) * B).sum(s.k)
    arrays = [a, b]
    if bias:
        v = random((n,), "int32" if dtype in INTEGER else dtype, rng)
        C = C + lt.Tensor(v).to(C.symbolic_shape[2])
        arrays.append(v)

    def ref():
        bm = np.swapaxes(b, -1, -2) if b_transposed else b
        r = np.matmul(a.astype(np.float64), bm.astype(np.float64))
        return r + arrays[2].astype(np.float64) if bias else r
    return C, arrays, ref
