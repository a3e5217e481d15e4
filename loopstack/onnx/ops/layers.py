"""The operators that reduce: convolution, matrix products, pooling, normalisations, softmax.

Their inputs are read many times, so each is in a buffer (or a view of one) first; element-
wise work after them (bias, activation, residual add) fuses into their store.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import ShapeError, UnsupportedError
from ..registry import converter
from ..values import Dyn, const_dyn, declare, fresh, is_const, norm_axis, reduce, slice_axis
from .common import binary, scale, versions
from .shapes import _regroup

_LOWEST = -3.4028234663852886e38


# ---------------------------------------------------------------------------- windows
@dataclass(frozen=True)
class Window:
    """One spatial axis of a sliding window: explicit pads, stride, dilation, taps, outputs,
    and `end`: the padding after the input that the last window reaches (below `pe` when the
    last rows are never read, above it for ceil_mode's partial window, negative to crop)."""
    pb: int
    pe: int
    s: int
    d: int
    k: int
    o: int
    end: int


def _spatial(nsp, kernel, strides, pads, dilations, auto_pad, extents, what, ceil_mode=0,
             crop: bool = False) -> list:
    """The windows along each spatial axis; `crop` lets the end padding be negative."""
    strides = list(strides or [1] * nsp)
    dilations = list(dilations or [1] * nsp)
    if len(kernel) != nsp or len(strides) != nsp or len(dilations) != nsp:
        raise ShapeError(f"{what}: kernel {kernel}, strides {strides} or dilations {dilations} do not match "
                         f"{nsp} spatial axes")
    out = []
    for i in range(nsp):
        n, k, s, d = extents[i], kernel[i], strides[i], dilations[i]
        span = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-n // s)
            total = max((o - 1) * s + span - n, 0)
            pb = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            pe = total - pb
        elif auto_pad in ("NOTSET", "VALID"):
            pb, pe = (0, 0) if auto_pad == "VALID" or not pads else (pads[i], pads[i + nsp])
            if ceil_mode:
                o = -(-(n + pb + pe - span) // s) + 1
                if (o - 1) * s >= n + pb:
                    o -= 1
            else:
                o = (n + pb + pe - span) // s + 1
        else:
            raise UnsupportedError(f"{what}: auto_pad {auto_pad!r}")
        if o < 1 or pb < 0 or (pe < 0 and not crop):
            raise ShapeError(f"{what}: the window does not fit spatial axis {i} (extent {n}, span {span}, "
                             f"pads {pb}, {pe})")
        out.append(Window(pb, pe, s, d, k, o, (o - 1) * s + span - n - pb))
    return out


def _windowed(ctx, x: Dyn, first: int, geo, taps):
    """x padded (or cropped) to exactly what its windows read, then viewed through them:
    (tensor [.., outputs.., taps..], output symbols, the value viewed: x, or x stored anew
    when it had to be cropped and padded, whose other axes are then named afresh)."""
    v = x
    for i, w in enumerate(geo):
        if w.end < 0:   # the last input rows are never read
            if x.shape[first + i] + w.end < 1:
                raise UnsupportedError(f"the windows along spatial axis {i} read only padding")
            v = slice_axis(v, first + i, 0, x.shape[first + i] + w.end, keep=True)
    if any(w.pb or w.end > 0 for w in geo):
        v = ctx.ready_to_pad(v, keep=tuple(range(first, first + len(geo))))
    t = v.t
    syms = []
    for i, w in enumerate(geo):
        sym = v.dims[first + i]
        if w.pb or w.end > 0:
            at = list(t.symbolic_shape).index(sym)
            t = t.pad(sym, w.pb, max(w.end, 0))
            sym = t.symbolic_shape[at]
        syms.append(sym)
    outs = [fresh("o") for _ in geo]
    cons = []
    for sym, o, r, w in zip(syms, outs, taps, geo):
        cons.append((sym, o * w.s + r * w.d if r is not None else o * w.s))
    # the other axes and the window counts in the order x is stored: the reduction's output is
    # then ordered as its consumers store it, and its innermost axis is the one to vectorise
    # The taps go right after the last window count, before the axes stored inside it: a
    # channels-last convolution then reduces taps, then channels (r s c, as the convolution
    # schedules expect: the channels innermost, read contiguously, and the channel tile is
    # the innermost reduced axis), where taps last would walk a pixel's neighbours innermost
    spatial = dict(zip(range(first, first + len(geo)), outs))
    order = []
    for a in (v.layout or range(len(v.shape))):
        if a in spatial:
            order.append(spatial[a])
            if len(order) and all(o in order for o in outs):
                order += [r for r in taps if r is not None]
        elif v.dims[a] is not None:
            order.append(v.dims[a])
    view = t.to(*order, constraints=cons)
    for o, w in zip(outs, geo):
        declare(view, o, w.o, "window count")
    return view, outs, v


# ---------------------------------------------------------------------------- convolution
@converter("Conv", 1, *versions("Conv", 11), const=(1, 2))
def conv(ctx, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
         strides=None):
    if not is_const(X) and len(X.shape) < 3:
        raise ShapeError(f"Conv: input of rank {len(X.shape)}; expected N, C and spatial axes")
    N, C, *sp = X.shape
    K, CG, *ks = W.shape
    nsp = len(sp)
    if kernel_shape is not None and list(kernel_shape) != ks:
        raise ShapeError(f"Conv: kernel_shape {list(kernel_shape)} differs from the weights' {ks}")
    g = int(group)
    if C != CG * g or K % g:
        raise ShapeError(f"Conv: {C} input channels, {K} filters of {CG} channels and {g} groups do not agree")
    return _convolve(ctx, X, W, B, g, _spatial(nsp, ks, strides, pads, dilations, auto_pad, sp, "Conv"))


def _convolve(ctx, X, W, B, g: int, geo) -> Dyn:
    """The convolution of X [N, C, spatial..] by W [K, C/g, taps..] in `g` groups over the
    windows `geo`, plus the bias B."""
    N, C, *sp = X.shape
    K, CG, *ks = W.shape
    nsp, KG = len(sp), K // g
    # activations channels-last (N, spatial.., C) in memory, the order loopstack's convolution
    # schedules are built for; the weights (spatial.., group, channel, filter) likewise
    last = channels_last(2 + nsp)
    # a few channels already in memory as they are (the network's image): the kernel reads one
    # value per channel and tap as a broadcast whatever the layout, so a copy into
    # channels-last would cost a pass over the image and win nothing
    as_is = not is_const(X) and X.buffer is not None and g == 1 and C <= FEW_CHANNELS and \
        tuple(X.layout or range(2 + nsp)) == tuple(range(2 + nsp))
    xs = X if as_is else ctx.materialize(X, layout=last) if not is_const(X) else const_dyn(X)
    # channels as (group, channel of group): a free regrouping of the buffer
    sp_axes = tuple(range(3, 3 + nsp))
    grouped = tuple(range(3 + nsp)) if as_is else (0, *sp_axes, 1, 2)
    x = ctx.placeholder(xs.buffer, (N, g, CG, *sp), keep=sp_axes, layout=grouped) if xs.buffer else \
        const_dyn(np.asarray(X).reshape(N, g, CG, *sp), keep=sp_axes)
    w = const_dyn(W.reshape(g, KG, CG, *ks), "Conv weights", layout=(*range(3, 3 + nsp), 0, 2, 1))
    taps = [w.dims[3 + i] for i in range(nsp)]
    view, outs, x = _windowed(ctx, x, 3, geo, taps)
    # join the group and channel axes of x and the weights by name
    mapping = {}
    for wa, xa in ((0, 1), (2, 2)):
        if w.dims[wa] is not None:
            mapping[w.dims[wa]] = x.dims[xa]
    wt = w.t.to(*[mapping.get(s, s) for s in w.t.symbolic_shape])
    red = [d for d in (x.dims[2], *taps) if d is not None]
    y = (view * wt).sum(*red) if red else view * wt
    dims = (x.dims[0], x.dims[1], w.dims[1], *outs)
    out = Dyn(y, dims, (N, g, KG, *[w_.o for w_ in geo]), x.ops + (ctx.node_label,))
    if B is not None:
        out = binary("add", out, const_dyn(np.asarray(B, np.float32).reshape(1, g, KG, *[1] * nsp), "Conv bias"),
                     "Conv")
    out = _regroup(ctx, out, (N, K, *out.shape[3:]))
    out.layout = last
    return out


FEW_CHANNELS = 4     # input channels a convolution reads in the layout they arrive in


def channels_last(rank: int) -> tuple:
    """The layout (N, spatial.., C) of an (N, C, spatial..) value."""
    return (0, *range(2, rank), 1)


# ---------------------------------------------------------------------------- matrix products
def _read_unit_batch_at_zero(v: Dyn, off: int, batch) -> object:
    """v's tensor with the unit batch axes it names, which broadcast against longer ones of
    the other operand, read at index 0."""
    t = v.t
    for i in range(v.rank - 2):
        if v.dims[i] is not None and v.shape[i] == 1 and batch[off + i] != 1:
            t = t[tuple(0 if s is v.dims[i] else s for s in t.symbolic_shape)]
    return t


def _matmul(a: Dyn, b: Dyn, what: str) -> Dyn:
    """a [..., m, k] x b [..., k, n] with numpy's batch broadcasting and 1-D promotion."""
    squeeze = []
    if a.rank == 1:
        a = Dyn(a.t, (None, *a.dims), (1, *a.shape), a.ops)
        squeeze.append(-2)
    if b.rank == 1:
        b = Dyn(b.t, (*b.dims, None), (*b.shape, 1), b.ops)
        squeeze.append(-1)
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"{what}: inner extents differ: {tuple(a.shape)} x {tuple(b.shape)}")
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    m, n = a.shape[-2], b.shape[-1]
    # rename b's axes to a's where they meet: k always, batch axes by position
    mapping = {}
    taken = set(d for d in a.dims if d is not None)
    out_batch = []
    for i in range(len(batch)):
        ai, bi = i - (len(batch) - (a.rank - 2)), i - (len(batch) - (b.rank - 2))
        da = a.dims[ai] if ai >= 0 and a.shape[ai] == batch[i] and batch[i] != 1 else None
        db = b.dims[bi] if bi >= 0 and b.shape[bi] == batch[i] and batch[i] != 1 else None
        if da is not None:
            out_batch.append(da)
            if db is not None:
                mapping[db] = da
        elif db is not None:
            sym = db if db not in taken else fresh("b")
            mapping[db] = sym
            out_batch.append(sym)
            taken.add(sym)
        else:
            out_batch.append(None)
    ta = _read_unit_batch_at_zero(a, len(batch) - (a.rank - 2), batch)
    tb = _read_unit_batch_at_zero(b, len(batch) - (b.rank - 2), batch)
    ka, kb = a.dims[-1], b.dims[-2]
    if kb is not None:
        mapping[kb] = ka
    nb = b.dims[-1]
    if nb is not None:
        mapping[nb] = nb if nb not in taken else fresh("n")
    tb = tb.to(*[mapping.get(s, s) for s in tb.symbolic_shape])
    prod = ta * tb
    y = prod.sum(ka) if ka is not None else prod
    dims = [*out_batch, a.dims[-2], mapping.get(nb, nb)]
    shape = [*batch, m, n]
    for ax in sorted(squeeze):
        del dims[ax]
        del shape[ax]
    ops = tuple(dict.fromkeys(a.ops + b.ops))
    return Dyn(y, dims, shape, ops)


def _row_major(ctx, x) -> Dyn:
    """x in memory in its own axis order: a matrix product's operand read through a
    transposing view would make its unit-stride loop a strided one (attention's K^T)."""
    if is_const(x):
        return const_dyn(x)
    rank = len(x.shape)
    if x.buffer is not None and tuple(x.layout or range(rank)) == tuple(range(rank)):
        return x
    return ctx.materialize(x, layout=tuple(range(rank)))


@converter("MatMul", *versions("MatMul", 1))
def matmul(ctx, A, B):
    return _matmul(_row_major(ctx, A), _row_major(ctx, B), "MatMul")


@converter("Gemm", 7, 9, 11, 13, const=(2,))
def gemm(ctx, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    a, b = _row_major(ctx, A), _row_major(ctx, B)
    for v, name in ((a, "A"), (b, "B")):
        if v.rank != 2:
            raise ShapeError(f"Gemm: {name} has rank {v.rank}, not 2")
    if transA:
        a = Dyn(a.t, a.dims[::-1], a.shape[::-1], a.ops)
    if transB:
        b = Dyn(b.t, b.dims[::-1], b.shape[::-1], b.ops)
    y = scale(_matmul(a, b, "Gemm"), alpha)
    if C is not None and beta != 0.0:
        c = np.asarray(C, np.float32) * np.float32(beta)
        try:
            np.broadcast_shapes(c.shape, tuple(y.shape))
        except ValueError:
            raise ShapeError(f"Gemm: C of shape {c.shape} does not broadcast to {tuple(y.shape)}") from None
        y = binary("add", y, const_dyn(c, "Gemm C"), "Gemm")
    return y


# ---------------------------------------------------------------------------- pooling
def _pool_input(ctx, X, what):
    if len(X.shape) < 3:
        raise ShapeError(f"{what}: input of rank {len(X.shape)}; expected N, C and spatial axes")
    nsp = len(X.shape) - 2
    return ctx.ready(X, keep=tuple(range(2, 2 + nsp))), nsp


@converter("MaxPool", 1, 8, 10, 11, 12, *versions("MaxPool", 22))
def max_pool(ctx, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, pads=None,
             storage_order=0, strides=None):
    x, nsp = _pool_input(ctx, X, "MaxPool")
    geo = _spatial(nsp, list(kernel_shape), strides, pads, dilations, auto_pad, x.shape[2:], "MaxPool", ceil_mode)
    taps = [fresh("r") for _ in range(nsp)]
    view, outs, x = _windowed(ctx, x, 2, geo, taps)
    for r, k in zip(taps, kernel_shape):
        declare(view, r, k, "pooling window")
    # zero padding is right for a max of values >= 0 (a ReLU's) when every window holds a value
    # of the input; otherwise the lowest float is added on the border
    padded = any(w.pb or w.end > 0 for w in geo)
    if padded and ctx.nonnegative(x) and all(w.d == 1 and w.pb < w.k and max(w.end, 0) < w.k for w in geo):
        padded = False
    if padded:
        # the border is viewed through the same windows, so that the sum is part of the max's
        # own expression (the padded input is then split into border and interior nests, or
        # staged by a vector copy) rather than a padded image stored beforehand
        ext = [(w.o - 1) * w.s + (w.k - 1) * w.d + 1 for w in geo]
        border = np.full(ext, _LOWEST, np.float32)
        border[tuple(slice(w.pb, w.pb + x.shape[2 + i]) for i, w in enumerate(geo))] = 0.0
        m = const_dyn(border, "MaxPool border", keep=tuple(range(nsp)))
        syms = [m.dims[i] for i in range(nsp)]
        cons = [(sym, o * w.s + r * w.d) for sym, o, r, w in zip(syms, outs, taps, geo)]
        view = view + m.t.to(*outs, *taps, constraints=cons)
    y = view.max_reduce(*taps)
    return Dyn(y, (*x.dims[:2], *outs), (*x.shape[:2], *[w.o for w in geo]), x.ops, layout=x.layout)


@converter("AveragePool", 7, 10, 11, 19, *versions("AveragePool", 22))
def average_pool(ctx, X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                 kernel_shape, pads=None, strides=None):
    x, nsp = _pool_input(ctx, X, "AveragePool")
    geo = _spatial(nsp, list(kernel_shape), strides, pads, dilations, auto_pad, x.shape[2:], "AveragePool",
                   ceil_mode)
    taps = [fresh("r") for _ in range(nsp)]
    view, outs, xv = _windowed(ctx, x, 2, geo, taps)
    for r, k in zip(taps, kernel_shape):
        declare(view, r, k, "pooling window")
    # the divisor per output position: the taps inside the input (or inside the explicit pads)
    counts = np.ones((), np.float32)
    for i, w in enumerate(geo):
        n = x.shape[2 + i]
        lo, hi = (-w.pb, n + w.pe) if count_include_pad else (0, n)
        pos = np.arange(w.o)[:, None] * w.s - w.pb + np.arange(w.k)[None, :] * w.d
        c = ((pos >= lo) & (pos < hi)).sum(1).astype(np.float32)
        counts = np.multiply.outer(counts, c)
    inv = const_dyn((1.0 / counts).astype(np.float32), "AveragePool divisors", keep=tuple(range(nsp)))
    y = view.sum(*taps) * inv.t.to(*outs)
    return Dyn(y, (*xv.dims[:2], *outs), (*x.shape[:2], *[w.o for w in geo]), x.ops, layout=xv.layout)


def _global(ctx, X, fn, what):
    x, nsp = _pool_input(ctx, X, what)
    axes = tuple(range(2, 2 + nsp))
    y = reduce(x, axes, fn, keepdims=True)
    if fn == "add":
        y = scale(y, 1.0 / math.prod(x.shape[2:]))
    return y


@converter("GlobalAveragePool", *versions("GlobalAveragePool", 1))
def global_average_pool(ctx, X):
    return _global(ctx, X, "add", "GlobalAveragePool")


@converter("GlobalMaxPool", *versions("GlobalMaxPool", 1))
def global_max_pool(ctx, X):
    return _global(ctx, X, "max", "GlobalMaxPool")


# ---------------------------------------------------------------------------- normalisation
def _channel(v, rank):
    return np.asarray(v, np.float32).reshape([1, -1] + [1] * (rank - 2))


@converter("BatchNormalization", 9, 14, 15, const=(1, 2, 3, 4))
def batch_norm(ctx, X, scale_, B, mean, var, *, epsilon=1e-5, momentum=0.9, training_mode=0):
    if training_mode:
        raise UnsupportedError("BatchNormalization in training mode")
    x = ctx.dyn(X)
    s = np.asarray(scale_, np.float32) / np.sqrt(np.asarray(var, np.float32) + np.float32(epsilon))
    shift = np.asarray(B, np.float32) - np.asarray(mean, np.float32) * s
    rank = x.rank
    if rank < 2:
        raise ShapeError(f"BatchNormalization: input of rank {rank}")
    y = binary("mul", x, const_dyn(_channel(s, rank), "BatchNormalization scale"), "BatchNormalization")
    return binary("add", y, const_dyn(_channel(shift, rank), "BatchNormalization shift"), "BatchNormalization")


def _moments(ctx, x: Dyn, axes):
    count = math.prod(x.shape[a] for a in axes)
    mean = scale(reduce(x, axes, "add", True), 1.0 / count)
    d = binary("sub", x, mean, "normalisation")
    var = scale(reduce(d.with_(d.t * d.t), axes, "add", True), 1.0 / count)
    return mean, d, var


@converter("LayerNormalization", *versions("LayerNormalization", 17))
def layer_norm(ctx, X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    x = ctx.ready(X)
    a = norm_axis(axis, x.rank, "LayerNormalization")
    axes = tuple(range(a, x.rank))
    mean, d, var = _moments(ctx, x, axes)
    inv = var.with_((var.t + float(epsilon)).sqrt().reciprocal())
    y = binary("mul", binary("mul", d, inv, "LayerNormalization"), ctx.dyn(Scale, "LayerNormalization scale"),
               "LayerNormalization")
    if B is not None:
        y = binary("add", y, ctx.dyn(B, "LayerNormalization bias"), "LayerNormalization")
    return y, mean, inv


# ---------------------------------------------------------------------------- softmax
def _softmax_axes(x, axis, legacy, what):
    a = norm_axis(axis, x.rank, what)
    return tuple(range(a, x.rank)) if legacy else (a,)


def _softmax(ctx, X, axis, legacy, log):
    what = "LogSoftmax" if log else "Softmax"
    x = ctx.ready(X)
    axes = _softmax_axes(x, axis, legacy, what)
    shifted = binary("sub", x, reduce(x, axes, "max", True), what)
    e = shifted.with_(shifted.t.exp())
    total = reduce(e, axes, "add", True)
    if log:
        return binary("sub", shifted, total.with_(total.t.log()), what)
    return binary("div", e, total, what)


def _register_softmax(op: str, log: bool) -> None:
    """Before opset 13 the input is coerced to 2-D at `axis` (default 1): a reduction over
    every axis from `axis` on; from 13 the reduction is over `axis` alone (default -1)."""
    def legacy(ctx, input, *, axis=1):  # noqa: A002
        return _softmax(ctx, input, axis, True, log)

    def current(ctx, input, *, axis=-1):  # noqa: A002
        return _softmax(ctx, input, axis, False, log)

    name = "log_softmax" if log else "softmax"
    legacy.__name__, current.__name__ = f"{name}_1", name
    converter(op, 1, 11)(legacy)
    converter(op, *versions(op, 13))(current)


_register_softmax("Softmax", False)
_register_softmax("LogSoftmax", True)


# ---------------------------------------------------------------------------- more normalisations
def _normalise(ctx, x: Dyn, axes, epsilon: float, what: str) -> Dyn:
    """(x - mean) / sqrt(var + epsilon) over `axes`."""
    _, d, var = _moments(ctx, x, axes)
    return binary("mul", d, var.with_((var.t + float(epsilon)).sqrt().reciprocal()), what)


def _per_channel(v, rank, what):
    return const_dyn(_channel(v, rank), what)


@converter("InstanceNormalization", *versions("InstanceNormalization", 6), const=(1, 2))
def instance_norm(ctx, input, scale_, B, *, epsilon=1e-5):  # noqa: A002
    x = ctx.ready(input)
    y = _normalise(ctx, x, tuple(range(2, x.rank)), epsilon, "InstanceNormalization")
    y = binary("mul", y, _per_channel(scale_, x.rank, "InstanceNormalization scale"), "InstanceNormalization")
    return binary("add", y, _per_channel(B, x.rank, "InstanceNormalization bias"), "InstanceNormalization")


@converter("MeanVarianceNormalization", *versions("MeanVarianceNormalization", 9))
def mean_variance_norm(ctx, X, *, axes=(0, 2, 3)):
    x = ctx.ready(X)
    axes = tuple(sorted({norm_axis(a, x.rank, "MeanVarianceNormalization") for a in axes}))
    return _normalise(ctx, x, axes, 1e-9, "MeanVarianceNormalization")


@converter("RMSNormalization", *versions("RMSNormalization", 23))
def rms_norm(ctx, X, scale_, *, axis=-1, epsilon=1e-5, stash_type=1):
    x = ctx.ready(X)
    a = norm_axis(axis, x.rank, "RMSNormalization")
    axes = tuple(range(a, x.rank))
    ms = scale(reduce(x.with_(x.t * x.t), axes, "add", True), 1.0 / math.prod(x.shape[i] for i in axes))
    y = binary("mul", x, ms.with_((ms.t + float(epsilon)).sqrt().reciprocal()), "RMSNormalization")
    return binary("mul", y, ctx.dyn(scale_, "RMSNormalization scale"), "RMSNormalization")


@converter("LpNormalization", *versions("LpNormalization", 1))
def lp_norm(ctx, input, *, axis=-1, p=2):  # noqa: A002
    if p not in (1, 2):
        raise UnsupportedError(f"LpNormalization: p={p} is not supported (1 or 2)")
    x = ctx.ready(input)
    a = (norm_axis(axis, x.rank, "LpNormalization"),)
    norm = reduce(x.with_(x.t.abs() if p == 1 else x.t * x.t), a, "add", True)
    if p == 2:
        norm = norm.with_(norm.t.sqrt())
    # a zero norm has only zeros to divide: 0 / FLT_MIN is the 0 ONNX defines there, not 0 / 0
    return binary("div", x, norm.with_(norm.t.max(1.1754943508222875e-38)), "LpNormalization")


@converter("GroupNormalization", *versions("GroupNormalization", 21), const=(1, 2))
def group_norm(ctx, X, scale_, bias, *, num_groups, epsilon=1e-5, stash_type=1):
    from .shapes import _regroup

    N, C, *sp = X.shape
    g = int(num_groups)
    if g < 1 or C % g:
        raise ShapeError(f"GroupNormalization: {C} channels do not split into {g} groups")
    x = _regroup(ctx, ctx.dyn(X), (N, g, C // g, *sp))
    y = _normalise(ctx, x, tuple(range(2, x.rank)), epsilon, "GroupNormalization")
    y = _regroup(ctx, y, (N, C, *sp))
    y = binary("mul", y, _per_channel(scale_, y.rank, "GroupNormalization scale"), "GroupNormalization")
    return binary("add", y, _per_channel(bias, y.rank, "GroupNormalization bias"), "GroupNormalization")


@converter("ConvTranspose", *versions("ConvTranspose", 1), const=(1, 2))
def conv_transpose(ctx, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    """A convolution of the input with zeros inserted between its elements (stride - 1 of them),
    padded by the kernel's span less the pads, by the flipped kernel with its channel axes
    swapped: Y[o] = sum over x, r with o = x*s + r*d - pad of X[x] W[r]."""
    if not is_const(X) and len(X.shape) < 3:
        raise ShapeError(f"ConvTranspose: input of rank {len(X.shape)}; expected N, C and spatial axes")
    N, C, *sp = X.shape
    Cw, KG, *ks = W.shape
    nsp, g = len(sp), int(group)
    if kernel_shape is not None and list(kernel_shape) != ks:
        raise ShapeError(f"ConvTranspose: kernel_shape {list(kernel_shape)} differs from the weights' {ks}")
    if Cw != C or C % g:
        raise ShapeError(f"ConvTranspose: {C} input channels, weights for {Cw} and {g} groups do not agree")
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise UnsupportedError(f"ConvTranspose: auto_pad {auto_pad!r} is not supported")
    strides = list(strides or [1] * nsp)
    dil = list(dilations or [1] * nsp)
    extra = list(output_padding or [0] * nsp)
    pads = [0] * (2 * nsp) if auto_pad == "VALID" or pads is None else list(pads)
    span = [(k - 1) * d for k, d in zip(ks, dil)]
    if output_shape is not None or auto_pad.startswith("SAME"):
        # the pads that give the requested output (SAME: the input times the stride); the odd
        # one goes after the input unless SAME_UPPER asks for it before
        want = list(output_shape)[-nsp:] if output_shape is not None else [e * s for e, s in zip(sp, strides)]
        pads = [0] * (2 * nsp)
        for i in range(nsp):
            total = strides[i] * (sp[i] - 1) + extra[i] + span[i] + 1 - want[i]   # < 0: zeros after
            first = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            pads[i], pads[i + nsp] = first, total - first
    before = [sp_ - p for sp_, p in zip(span, pads[:nsp])]
    after = [sp_ - p + e - (s - 1) for sp_, p, e, s in zip(span, pads[nsp:], extra, strides)]
    if any(b < 0 for b in before):
        raise UnsupportedError("ConvTranspose: pads wider than the kernel's span are not supported")
    # zeros between the elements: X read as [N, C, x, 1, ...] with each unit axis padded to the
    # stride, then each (x, unit) pair flattened into one axis of x * stride
    x = ctx.materialize(ctx.dyn(X), layout=tuple(range(2 + nsp)))
    shape = (N, C, *[d for e in sp for d in (e, 1)])
    units = tuple(3 + 2 * i for i in range(nsp))
    v = ctx.placeholder(x.buffer, shape, keep=tuple(range(2, 2 + 2 * nsp)))
    t = v.t
    for a, s in zip(units, strides):
        if s > 1:
            at = list(t.symbolic_shape).index(v.dims[a])
            t = t.pad(v.dims[a], 0, s - 1)
            v.dims = v.dims[:a] + (t.symbolic_shape[at],) + v.dims[a + 1:]
    dims = list(v.dims[:2])
    for i in range(nsp):
        pair = (v.dims[2 + 2 * i], v.dims[3 + 2 * i])
        t = t.flatten(*pair)
        dims.append(next(d for d in t.symbolic_shape if d not in dims and d not in v.dims))
    zeros = Dyn(t, dims, (N, C, *[e * s for e, s in zip(sp, strides)]), x.ops)
    # the flipped kernel, as a convolution's [K, C/g, taps..]
    w = np.asarray(W, np.float32).reshape(g, C // g, KG, *ks).swapaxes(1, 2)
    w = np.ascontiguousarray(np.flip(w, axis=tuple(range(3, 3 + nsp)))).reshape(g * KG, C // g, *ks)
    geo = _spatial(nsp, ks, [1] * nsp, before + after, dil, "NOTSET", zeros.shape[2:], "ConvTranspose", crop=True)
    return _convolve(ctx, zeros, w, B, g, geo)
