"""Small constructors of common loop trees, for tests, benchmarks and examples.

The core is `nest(order, body)`: an order is a list of (dim, step) pairs, outermost first,
and becomes nested loops with unique vars (`m0, n0, k0, m1, n1` for the default matmul
order).  The other builders only declare buffers and one statement and call `nest`.

    matmul_tree(64, 64, 64)                       C[m, n] += A[m, k] * B[k, n], init identity
    matmul_tree(64, 48, 32, order=[("k", 1), ("m", 1), ("n", 1)], post="relu", bias=True)
    conv2d_tree(1, 3, 8, 8, 4, 3, 3, padding=1)   zero_pad reads
    conv2d_tree(..., pad="copy")                  a staged, padded copy of the input
"""
from __future__ import annotations

from typing import Iterable, Sequence, Union

from .ir import Acc, Access, Affine, Binary, Buffer, Compute, Expr, Load, Loop, LoopTree, Node, Unary

__all__ = [
    "nest", "var_names", "access", "make_tree", "post_expr",
    "matmul_tree", "packed_matmul_tree", "conv2d_tree", "depthwise_conv2d_tree", "elementwise_tree", "transpose_tree",
    "DEFAULT_MATMUL_ORDER",
]

OrderEntry = Union[tuple[str, int], tuple[str, int, Iterable[str]]]
DEFAULT_MATMUL_ORDER = (("m", 16), ("n", 8), ("k", 1), ("m", 1), ("n", 1))


def var_names(order: Sequence[OrderEntry], tag: str = "") -> list[str]:
    """Unique loop vars for an order: each dim numbered by its occurrence (m0, n0, m1, ...)."""
    seen: dict[str, int] = {}
    out = []
    for entry in order:
        d = entry[0]
        out.append(f"{d}{seen.get(d, 0)}{tag}")
        seen[d] = seen.get(d, 0) + 1
    return out


def nest(order: Sequence[OrderEntry], body: Node | Sequence[Node], *, tag: str = "",
         names: Sequence[str] | None = None) -> Node | tuple[Node, ...]:
    """Nested loops from `order` (outermost first) around `body`.

    Entries are (dim, step) or (dim, step, annotations).  Vars come from `var_names(order, tag)`
    unless `names` gives them.  With an empty order the body itself is returned.
    """
    names = list(names) if names is not None else var_names(order, tag)
    inner: tuple[Node, ...] = tuple(body) if isinstance(body, (list, tuple)) else (body,)
    for entry, var in reversed(list(zip(order, names))):
        dim, step = entry[0], entry[1]
        ann = frozenset(entry[2]) if len(entry) > 2 else frozenset()
        inner = (Loop(var, dim, step, inner, ann),)
    return inner[0] if len(inner) == 1 else inner


def access(buffer: str, *index, zero_pad: bool = False) -> Access:
    """access("A", "m", ("h", "kh"), Affine.of(...)): a str is a dim, a tuple a sum of terms."""
    ix = []
    for i in index:
        if isinstance(i, Affine):
            ix.append(i)
        elif isinstance(i, str):
            ix.append(Affine.of(i))
        else:
            ix.append(Affine.of(*i))
    return Access(buffer, tuple(ix), zero_pad)


def make_tree(buffers: Sequence[Buffer], dims: dict[str, int] | Sequence[tuple[str, int]],
              *body: Node) -> LoopTree:
    flat: list[Node] = []
    for b in body:
        flat.extend(b if isinstance(b, tuple) else (b,))
    dims_t = tuple(dims.items()) if isinstance(dims, dict) else tuple(dims)
    return LoopTree(tuple(buffers), dims_t, tuple(flat))


def post_expr(post: str | Expr | None) -> Expr | None:
    """A unary op name becomes `op(acc)`; an Expr is kept; None stays None."""
    if post is None or not isinstance(post, str):
        return post
    return Unary(post, Acc())


# ---------------------------------------------------------------------------
# operators


def matmul_tree(M: int, N: int, K: int, order: Sequence[OrderEntry] = DEFAULT_MATMUL_ORDER, *,
                dtype: str = "float32", out_dtype: str | None = None, accumulate: bool = False,
                post: str | Expr | None = None, bias: bool = False) -> LoopTree:
    """C[m, n] (+)= sum_k A[m, k] * B[k, n], init identity (or bias[n]; none with accumulate)."""
    out_dtype = out_dtype or ("int32" if dtype in ("int8", "uint8") else dtype)
    bufs = [Buffer("A", dtype, (M, K), "input"), Buffer("B", dtype, (K, N), "input")]
    init: Expr | str | None = None if accumulate else "identity"
    if bias:
        bufs.append(Buffer("bias", out_dtype, (N,), "input"))
        init = Load(access("bias", "n"))
    bufs.append(Buffer("C", out_dtype, (M, N), "output"))
    stmt = Compute("C", access("C", "m", "n"),
                   Binary("mul", Load(access("A", "m", "k")), Load(access("B", "k", "n"))),
                   reduce="add", init=init, post=post_expr(post))
    return make_tree(bufs, {"m": M, "n": N, "k": K}, nest(order, stmt))


def conv2d_tree(N: int, C: int, H: int, W: int, K: int, R: int, S: int, *, stride: int = 1,
                padding: int = 0, dilation: int = 1, layout: str = "NCHW", pad: str = "zero_pad",
                order: Sequence[OrderEntry] | None = None, dtype: str = "float32",
                post: str | Expr | None = None) -> LoopTree:
    """Direct 2-D convolution (cross-correlation, as in deep learning).

    NCHW: X[n, c, h, w], Wt[k, c, r, s] -> Y[n, k, oh, ow];  NHWC: X[n, h, w, c],
    Wt[r, s, c, k] -> Y[n, oh, ow, k].  Input row = stride*oh + dilation*r - padding.
    pad="zero_pad" reads X with zero_pad; pad="copy" first copies X into a zero-bordered
    temp P (one copy nest over the padded extent) and reads P in bounds.
    """
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"layout {layout!r}: expected NCHW or NHWC")
    OH = (H + 2 * padding - dilation * (R - 1) - 1) // stride + 1
    OW = (W + 2 * padding - dilation * (S - 1) - 1) // stride + 1
    nchw = layout == "NCHW"

    def img(n, c, h, w):
        return (n, c, h, w) if nchw else (n, h, w, c)

    xshape = img(N, C, H, W)
    wshape = (K, C, R, S) if nchw else (R, S, C, K)
    yshape = img(N, K, OH, OW)
    dims = {"n": N, "k": K, "c": C, "oh": OH, "ow": OW, "r": R, "s": S}
    bufs = [Buffer("X", dtype, xshape, "input"), Buffer("Wt", dtype, wshape, "input"),
            Buffer("Y", dtype, yshape, "output")]
    row = Affine.of(("oh", stride), ("r", dilation), const=-padding)
    col = Affine.of(("ow", stride), ("s", dilation), const=-padding)
    body: list[Node] = []
    if pad == "copy" and padding:
        PH, PW = H + 2 * padding, W + 2 * padding
        dims.update(ph=PH, pw=PW)
        bufs.insert(2, Buffer("P", dtype, img(N, C, PH, PW), "temp"))
        src = access("X", *img("n", "c", Affine.of("ph", const=-padding), Affine.of("pw", const=-padding)),
                     zero_pad=True)
        cp = Compute("pad", access("P", *img("n", "c", "ph", "pw")), Load(src))
        body.append(nest([(d, 1) for d in img("n", "c", "ph", "pw")], cp, tag="p"))
        xin = access("P", *img("n", "c", Affine.of(("oh", stride), ("r", dilation)),
                               Affine.of(("ow", stride), ("s", dilation))))
    elif pad in ("zero_pad", "copy"):
        xin = access("X", *img("n", "c", row, col), zero_pad=bool(padding))
    else:
        raise ValueError(f"pad {pad!r}: expected 'zero_pad' or 'copy'")
    wacc = access("Wt", "k", "c", "r", "s") if nchw else access("Wt", "r", "s", "c", "k")
    stmt = Compute("Y", access("Y", *img("n", "k", "oh", "ow")),
                   Binary("mul", Load(xin), Load(wacc)), reduce="add", init="identity",
                   post=post_expr(post))
    if order is None:
        names = ("n", "k", "oh", "ow", "c", "r", "s") if nchw else ("n", "oh", "ow", "r", "s", "c", "k")
        order = [(d, 1) for d in names]
    body.append(nest(order, stmt))
    return make_tree(bufs, dims, *body)


def packed_matmul_tree(M: int, N: int, K: int, *, nb: int = 16, mb: int = 6, kb: int | None = None,
                       dtype: str = "float32") -> LoopTree:
    """C = A @ B the Goto way: each nb-wide panel of B is packed into a contiguous, aligned
    temp Bp, then swept by an mb x nb register block:

        for n0 in N/nb:  [for k0 in K/kb:]
          for k, n:           %Bp[k - @k0, n - @n0] = %B[k, n]
          for m0 in M/mb: for k: for m: for n:   %C[m, n] += %A[m, k] * %Bp[..]

    The panel's rows are nb*4 bytes apart instead of N*4, so they neither alias in L1 nor
    split cache lines, whatever the alignment of B."""
    kb = kb or K
    bufs = [Buffer("A", dtype, (M, K), "input"), Buffer("B", dtype, (K, N), "input"),
            Buffer("Bp", dtype, (min(kb, K), nb), "temp"), Buffer("C", dtype, (M, N), "output")]
    k_in = (("k", 1), ("@k0", -1)) if kb < K else "k"
    n_in = (("n", 1), ("@n0", -1))
    pack = Compute("pack", access("Bp", k_in, n_in), Load(access("B", "k", "n")))
    mm = Compute("C", access("C", "m", "n"), Binary("mul", Load(access("A", "m", "k")), Load(access("Bp", k_in, n_in))),
                 reduce="add", init="identity")
    inner = (nest([("k", 1), ("n", 1)], pack, tag="p"), nest([("m", mb), ("k", 1), ("m", 1), ("n", 1)], mm, tag="c"))
    body = (Loop("k0", "k", kb, inner),) if kb < K else inner
    return make_tree(bufs, {"m": M, "n": N, "k": K}, Loop("n0", "n", nb, body))


def depthwise_conv2d_tree(C: int, H: int, W: int, R: int, S: int, *, stride: int = 1, padding: int = 0,
                          order: Sequence[OrderEntry] | None = None, dtype: str = "float32",
                          post: str | Expr | None = None) -> LoopTree:
    """Depthwise 2-D convolution, batch 1, channels last: Y[oh, ow, c] = sum_rs X[.., .., c] * Wt[r, s, c].

    Input row = stride*oh + r - padding (reads outside X are zero)."""
    OH = (H + 2 * padding - R) // stride + 1
    OW = (W + 2 * padding - S) // stride + 1
    bufs = [Buffer("X", dtype, (H, W, C), "input"), Buffer("Wt", dtype, (R, S, C), "input"),
            Buffer("Y", dtype, (OH, OW, C), "output")]
    x = access("X", Affine.of(("oh", stride), "r", const=-padding), Affine.of(("ow", stride), "s", const=-padding),
               "c", zero_pad=bool(padding))
    stmt = Compute("Y", access("Y", "oh", "ow", "c"), Binary("mul", Load(x), Load(access("Wt", "r", "s", "c"))),
                   reduce="add", init="identity", post=post_expr(post))
    order = order if order is not None else [(d, 1) for d in ("oh", "ow", "r", "s", "c")]
    return make_tree(bufs, {"c": C, "oh": OH, "ow": OW, "r": R, "s": S}, nest(order, stmt))


_DIM_NAMES = "ijlpqtuvwxyz"   # letters no builder uses for another purpose


def elementwise_tree(shape: Sequence[int], unary: Sequence[str] = ("relu",), binary: str | None = None, *,
                     dtype: str = "float32", order: Sequence[OrderEntry] | None = None) -> LoopTree:
    """Y = unary[-1](...unary[0](binary(A, B))) (or of A alone when binary is None)."""
    dims = _DIM_NAMES[: len(shape)]
    bufs = [Buffer("A", dtype, tuple(shape), "input")]
    e: Expr = Load(access("A", *dims))
    if binary is not None:
        bufs.append(Buffer("B", dtype, tuple(shape), "input"))
        e = Binary(binary, e, Load(access("B", *dims)))
    for op in unary:
        e = Unary(op, e)
    bufs.append(Buffer("Y", dtype, tuple(shape), "output"))
    stmt = Compute("Y", access("Y", *dims), e)
    order = order if order is not None else [(d, 1) for d in dims]
    return make_tree(bufs, dict(zip(dims, shape)), nest(order, stmt))


def transpose_tree(shape: Sequence[int], perm: Sequence[int], *, dtype: str = "float32",
                   order: Sequence[OrderEntry] | None = None) -> LoopTree:
    """Y = X.transpose(perm), as a single copy statement."""
    dims = _DIM_NAMES[: len(shape)]
    yshape = tuple(shape[p] for p in perm)
    bufs = [Buffer("X", dtype, tuple(shape), "input"), Buffer("Y", dtype, yshape, "output")]
    stmt = Compute("Y", access("Y", *(dims[p] for p in perm)), Load(access("X", *dims)))
    order = order if order is not None else [(dims[p], 1) for p in perm]
    return make_tree(bufs, dict(zip(dims, shape)), nest(order, stmt))
