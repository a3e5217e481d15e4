"""The int8 operators: QLinearConv, QLinearMatMul, ConvInteger and MatMulInteger run as loop
trees on the target's 8-bit dot-product kernels, requantized on the store (see ../qlayers.py);
QuantizeLinear and DequantizeLinear fold on constants and otherwise are host steps (a QDQ
pattern around a Conv or MatMul becomes a QLinear* node first: ../qdq.py).

Weights, scales and zero points must be constants (initializers, or inputs bound as constants
by the ONNX backend); the activations are 8-bit tensors in buffers.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError, UnsupportedError
from ..graph import Layer
from ..qlayers import (
    QUANTIZED, Epilogue, HostStep, NativeOrHost, conv_kernel, dequantize, dequantize_into, dequantize_tree,
    matmul_kernel, per_axis, quantize, quantize_into, quantize_tree,
)
from ..registry import converter
from ..values import Dyn, is_const, norm_axis
from .common import versions
from .layers import _spatial, channels_last

# TensorProto element types an output_dtype attribute may name
_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8"}


# ---------------------------------------------------------------------------- helpers
def _dtype(ctx, v) -> str:
    """The element type of a value: a constant's, or the buffer's a Dyn reads (computed
    values are float32 unless they read an integer buffer)."""
    if is_const(v):
        return np.asarray(v).dtype.name
    from ..graph import _dtype_of

    return ctx.dtypes.get(v.buffer, "float32") if v.buffer is not None else _dtype_of(v.t)


def _quantized(dt: str, what: str) -> str:
    if dt not in QUANTIZED:
        raise UnsupportedError(f"{what}: dtype {dt} is not supported (uint8 and int8)")
    return dt


def _scalar(arr, what: str):
    arr = np.asarray(arr)
    if arr.size != 1:
        raise UnsupportedError(f"{what} of shape {arr.shape}: only a per-tensor (one-element) value is supported")
    return arr.reshape(())


def _scale(arr, what: str) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.dtype not in (np.float32, np.float16):
        raise UnsupportedError(f"{what}: dtype {arr.dtype} is not supported (float32, float16)")
    return arr.astype(np.float32)


def _zero_point(arr, dt: str, what: str) -> np.ndarray:
    """A zero point (0 when omitted) checked against the dtype of the value it belongs to."""
    if arr is None:
        return np.zeros((), np.int32)
    arr = np.asarray(arr)
    if arr.dtype.name != dt:
        raise UnsupportedError(f"{what}: dtype {arr.dtype} differs from its tensor's {dt}")
    return arr.astype(np.int32)


def _per(arr, n: int, what: str) -> np.ndarray:
    """A scalar, or n values (per output channel / column / row)."""
    arr = np.asarray(arr)
    if arr.size == 1:
        return arr.reshape(())
    if arr.size != n:
        raise ShapeError(f"{what} has {arr.size} elements; expected 1 or {n}")
    return arr.reshape(n)


def _emit(ctx, kernel, stored: tuple, dtype: str, shape: tuple, layout=None) -> Dyn:
    """Add `kernel` as a layer writing a new buffer of `stored` shape (the ONNX `shape`'s axes in
    the order `layout`); the value it computes, read from that buffer."""
    name = f"t{len(ctx.layers)}"
    ctx.layers.append(Layer(ctx.node_label, (ctx.node_label,), kernel, name, tuple(stored)))
    ctx.buffers[name] = tuple(stored)
    if dtype != "float32":
        ctx.dtypes[name] = dtype
    return ctx.placeholder(name, tuple(shape), layout=layout)


def _activation(ctx, X, layout, what: str):
    """(buffer, dtype) of a quantized activation stored with its axes in `layout`."""
    if is_const(X):
        raise UnsupportedError(f"{what}: a constant quantized input is not supported (only weights are constant)")
    v = ctx.materialize(X, layout=tuple(layout))
    return v.buffer, _quantized(_dtype(ctx, v), what)


# ---------------------------------------------------------------------------- convolution
def _conv(ctx, X, W, x_zp, w_zp, ep_of, what, auto_pad, dilations, group, kernel_shape, pads, strides) -> Dyn:
    if len(X.shape) not in (3, 4):
        raise UnsupportedError(f"{what}: input of rank {len(X.shape)} (only 1-D and 2-D convolutions are supported)")
    W = np.asarray(W)
    _quantized(W.dtype.name, f"{what} weights")
    N, C, *sp = X.shape
    K, CG, *ks = W.shape
    if kernel_shape is not None and list(kernel_shape) != ks:
        raise ShapeError(f"{what}: kernel_shape {list(kernel_shape)} differs from the weights' {ks}")
    g = int(group)
    if C != CG * g or K % g:
        raise ShapeError(f"{what}: {C} input channels, {K} filters of {CG} channels and {g} groups do not agree")
    geo = _spatial(len(sp), ks, strides, pads, dilations, auto_pad, sp, what)
    rank = len(X.shape)
    buf, x_dt = _activation(ctx, X, channels_last(rank), what)
    xz = int(_scalar(_zero_point(x_zp, x_dt, f"{what} x_zero_point"), f"{what} x_zero_point"))
    wz = _per(_zero_point(w_zp, W.dtype.name, f"{what} w_zero_point"), K, f"{what} w_zero_point")
    if rank == 3:      # 1-D: a 2-D convolution of height one
        sp, ks, geo = [1, *sp], [1, *ks], [None, *geo]
        W = W.reshape(K, CG, 1, ks[1])
    hw = [(0, 0, 1, 1) if w is None else (w.pb, w.pe, w.s, w.d) for w in geo]
    kernel, out = conv_kernel(buf, x_dt, N, sp[0], sp[1], C, W, wz, xz, g, (hw[0][2], hw[1][2]),
                              (hw[0][3], hw[1][3]), (hw[0][0], hw[1][0], hw[0][1], hw[1][1]), ep_of(K))
    n, oh, ow, k = out
    shape = (n, k, ow) if rank == 3 else (n, k, oh, ow)
    stored = kernel.tree.outputs[0]
    return _emit(ctx, kernel, stored.shape, stored.dtype, shape, channels_last(rank))


@converter("QLinearConv", 10, const=(1, 2, 3, 4, 5, 6, 7, 8), integer=True)
def qlinear_conv(ctx, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    y_dt = _quantized(np.asarray(y_zero_point).dtype.name, "QLinearConv y_zero_point")
    xs = _scalar(_scale(x_scale, "QLinearConv x_scale"), "QLinearConv x_scale")
    ys = _scalar(_scale(y_scale, "QLinearConv y_scale"), "QLinearConv y_scale")
    yz = int(_scalar(y_zero_point, "QLinearConv y_zero_point"))

    def epilogue(K):
        ws = _per(_scale(w_scale, "QLinearConv w_scale"), K, "QLinearConv w_scale")
        bias = np.zeros(K, np.int32) if B is None else np.asarray(B)
        if bias.dtype != np.int32 or bias.shape != (K,):
            raise UnsupportedError(f"QLinearConv bias {bias.dtype}{bias.shape}: expected int32 of shape ({K},)")
        return Epilogue(bias, (xs * ws) / ys, yz, y_dt)

    return _conv(ctx, x, w, x_zero_point, w_zero_point, epilogue, "QLinearConv", auto_pad, dilations, group,
                 kernel_shape, pads, strides)


@converter("ConvInteger", 10, const=(1, 2, 3), integer=True)
def conv_integer(ctx, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    return _conv(ctx, x, w, x_zero_point, w_zero_point, lambda K: Epilogue(np.zeros(K, np.int32)), "ConvInteger",
                 auto_pad, dilations, group, kernel_shape, pads, strides)


# ---------------------------------------------------------------------------- matrix products
def _matmul(ctx, A, Bw, a_zp, b_zp, ep_of, what) -> Dyn:
    if is_const(A):
        raise UnsupportedError(f"{what}: a constant input A is not supported (only B is constant)")
    Bw = np.asarray(Bw)
    _quantized(Bw.dtype.name, f"{what} B")
    if A.rank < 1 or Bw.ndim < 2:
        raise UnsupportedError(f"{what}: shapes {tuple(A.shape)} x {Bw.shape} (B must have rank >= 2)")
    a_shape = (1, *A.shape) if A.rank == 1 else tuple(A.shape)
    M, Kd = a_shape[-2:]
    if Bw.shape[-2] != Kd:
        raise ShapeError(f"{what}: inner extents differ: {tuple(A.shape)} x {Bw.shape}")
    N = Bw.shape[-1]
    try:
        batch = tuple(np.broadcast_shapes(a_shape[:-2], Bw.shape[:-2]))
    except ValueError:
        raise ShapeError(f"{what}: batch shapes {a_shape[:-2]} and {Bw.shape[:-2]} do not broadcast") from None
    buf, a_dt = _activation(ctx, A, range(A.rank), what)
    az = _per(_zero_point(a_zp, a_dt, f"{what} a_zero_point"), M, f"{what} a_zero_point")
    bz = _per(_zero_point(b_zp, Bw.dtype.name, f"{what} b_zero_point"), N, f"{what} b_zero_point")
    nb = int(np.prod(batch, dtype=np.int64))
    if int(np.prod(Bw.shape[:-2], dtype=np.int64)) == 1:
        # one B for every batch: the batch folds into A's rows
        rows, b, bt = nb * M, Bw.reshape(Kd, N), 1
        tile = nb
    else:
        if tuple(a_shape[:-2]) != batch:
            raise UnsupportedError(f"{what}: A {tuple(A.shape)} broadcast against a batched B {Bw.shape}")
        rows, b, bt, tile = M, np.broadcast_to(Bw, (*batch, Kd, N)).reshape(nb, Kd, N), nb, 1
    if np.ndim(az):
        az = np.tile(az, tile)
    ep = ep_of(rows, N, tile)
    kernel, _ = matmul_kernel(buf, a_dt, bt, rows, Kd, b, bz, az, ep)
    out_shape = (*batch, M, N) if A.rank > 1 else (*batch, N)
    stored = kernel.tree.outputs[0].shape
    return _emit(ctx, kernel, stored, ep.dtype, out_shape)


@converter("QLinearMatMul", *versions("QLinearMatMul", 10), const=(1, 2, 3, 4, 5, 6, 7), integer=True)
def qlinear_matmul(ctx, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    y_dt = _quantized(np.asarray(y_zero_point).dtype.name, "QLinearMatMul y_zero_point")
    ys = _scalar(_scale(y_scale, "QLinearMatMul y_scale"), "QLinearMatMul y_scale")
    yz = int(_scalar(y_zero_point, "QLinearMatMul y_zero_point"))
    M = 1 if is_const(a) or a.rank == 1 else a.shape[-2]

    def epilogue(rows, N, tile):
        as_ = _per(_scale(a_scale, "QLinearMatMul a_scale"), M, "QLinearMatMul a_scale")
        bs = _per(_scale(b_scale, "QLinearMatMul b_scale"), N, "QLinearMatMul b_scale")
        if np.ndim(as_):        # per row of A: a table over (row, column)
            scale = (np.tile(as_, tile)[:, None] * np.broadcast_to(bs, (N,))[None, :]) / ys
        else:
            scale = (as_ * bs) / ys
        return Epilogue(np.zeros(N, np.int32), scale.astype(np.float32), yz, y_dt)

    return _matmul(ctx, a, b, a_zero_point, b_zero_point, epilogue, "QLinearMatMul")


@converter("MatMulInteger", 10, const=(1, 2, 3), integer=True)
def matmul_integer(ctx, A, B, a_zero_point=None, b_zero_point=None):
    return _matmul(ctx, A, B, a_zero_point, b_zero_point, lambda rows, N, tile: Epilogue(np.zeros(N, np.int32)),
                   "MatMulInteger")


# ---------------------------------------------------------------------------- quantize / dequantize
def _q_params(x_shape, scale, zero_point, axis, block_size, what):
    """The axis a per-axis or blocked scale runs along (any, for a per-tensor one)."""
    rank = len(x_shape)
    per_tensor = np.asarray(scale).size == 1 and not block_size
    axis = 0 if per_tensor or not rank else norm_axis(axis, rank, what)
    if block_size and block_size < 0:
        raise ShapeError(f"{what}: block_size {block_size} is negative")
    return axis


def _q_out_dtype(zero_point, output_dtype) -> str:
    if output_dtype:
        dt = _ONNX_DTYPES.get(output_dtype)
        if dt is None or dt == "float32":
            from onnx import TensorProto

            raise UnsupportedError(f"QuantizeLinear output_dtype {TensorProto.DataType.Name(output_dtype).lower()} "
                                   "is not supported (uint8 and int8)")
        if zero_point is not None and np.asarray(zero_point).dtype.name != dt:
            raise ShapeError(f"QuantizeLinear: output_dtype {dt} differs from the zero point's "
                             f"{np.asarray(zero_point).dtype}")
        return dt
    return "uint8" if zero_point is None else _quantized(np.asarray(zero_point).dtype.name, "QuantizeLinear zero point")


def _check_float_io(scale, output_dtype, precision, what):
    _scale_dtype = np.asarray(scale).dtype
    if _scale_dtype != np.float32:
        raise UnsupportedError(f"{what}: scale dtype {_scale_dtype} is not supported (float32)")
    if output_dtype and what == "DequantizeLinear" and output_dtype != 1:
        raise UnsupportedError(f"DequantizeLinear output_dtype {output_dtype} is not supported (float32)")
    if precision not in (0, 1):
        raise UnsupportedError(f"{what}: precision {precision} is not supported (float32)")


def _quantize_fold(x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0,
                   precision=0):
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise UnsupportedError(f"QuantizeLinear: input dtype {x.dtype} is not supported (float32)")
    _check_float_io(y_scale, 0, precision, "QuantizeLinear")
    ax = _q_params(x.shape, y_scale, y_zero_point, axis, block_size, "QuantizeLinear")
    return quantize(x, y_scale, y_zero_point, _q_out_dtype(y_zero_point, output_dtype), ax, block_size)


def _dequantizable(dt: str) -> str:
    """DequantizeLinear reads 8-bit tensors, and int32 ones (biases, zero point 0)."""
    if dt not in QUANTIZED + ("int32",):
        raise UnsupportedError(f"DequantizeLinear input: dtype {dt} is not supported (uint8, int8 and int32)")
    return dt


def _dequantize_fold(x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    x = np.asarray(x)
    _dequantizable(x.dtype.name)
    _check_float_io(x_scale, output_dtype, 0, "DequantizeLinear")
    if x_zero_point is not None:
        _zero_point(x_zero_point, x.dtype.name, "DequantizeLinear zero point")
    ax = _q_params(x.shape, x_scale, x_zero_point, axis, block_size, "DequantizeLinear")
    return dequantize(x, x_scale, x_zero_point, ax, block_size)


def _elementwise_host(ctx, X, fn, out_dtype: str, per_tensor: bool, native=None) -> Dyn:
    """`fn(x, out)` (numpy, on the value in ONNX axis order, or on the flat buffers where
    `per_tensor`) as a host step over X's buffer, writing a buffer in the same axis order as X's;
    with `native(held shape, layout)` -> (loop tree, constants), a kernel of that tree where the
    target compiles it (NativeOrHost), the host step elsewhere."""
    v = ctx.materialize(X)
    shape = tuple(v.shape)
    layout = tuple(v.layout or range(len(shape)))
    held = tuple(shape[a] for a in layout)
    back = tuple(np.argsort(layout))

    def step(arr, out):
        if per_tensor:
            fn(arr.reshape(-1), out.reshape(-1))
        else:
            fn(np.transpose(arr.reshape(held), back), np.transpose(out.reshape(held), back))

    host = HostStep(step, [("buffer", v.buffer, held)])
    if native is not None:
        tree, consts = native(held, layout)
        host = NativeOrHost(tree, host.args + [("const", c) for c in consts], host)
    return _emit(ctx, host, held, out_dtype, shape, layout)


@converter("QuantizeLinear", *versions("QuantizeLinear", 10), const=(1, 2), fold=_quantize_fold, integer=True)
def quantize_linear(ctx, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0,
                    precision=0):
    if _dtype(ctx, x) != "float32":
        raise UnsupportedError(f"QuantizeLinear: input dtype {_dtype(ctx, x)} is not supported (float32)")
    _check_float_io(y_scale, 0, precision, "QuantizeLinear")
    ax = _q_params(x.shape, y_scale, y_zero_point, axis, block_size, "QuantizeLinear")
    dt = _q_out_dtype(y_zero_point, output_dtype)
    # the parameters broadcast once, against the value (flat where per tensor)
    per_tensor = np.asarray(y_scale).size == 1 and not block_size
    shape = () if per_tensor else x.shape
    s = per_axis(np.asarray(y_scale, np.float32), shape, ax, block_size, "scale")
    z = np.asarray(0 if y_zero_point is None else per_axis(y_zero_point, shape, ax, block_size, "zero point"),
                   np.float32)
    lo, hi = (float(v) for v in (np.iinfo(dt).min, np.iinfo(dt).max))
    native = None
    if dt in QUANTIZED and not block_size and np.unique(z).size == 1:   # Requant: one zero point
        def native(held, layout):
            return quantize_tree(dt, held, s, int(z.reshape(-1)[0]), None if per_tensor else list(layout).index(ax))
    return _elementwise_host(ctx, x, lambda a, out: quantize_into(a, s, z, lo, hi, out), dt, per_tensor, native)


@converter("DequantizeLinear", *versions("DequantizeLinear", 10), const=(1, 2), fold=_dequantize_fold, integer=True)
def dequantize_linear(ctx, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    dt = _dequantizable(_dtype(ctx, x))
    _check_float_io(x_scale, output_dtype, 0, "DequantizeLinear")
    if x_zero_point is not None:
        _zero_point(x_zero_point, dt, "DequantizeLinear zero point")
    ax = _q_params(x.shape, x_scale, x_zero_point, axis, block_size, "DequantizeLinear")
    per_tensor = np.asarray(x_scale).size == 1 and not block_size
    shape = () if per_tensor else x.shape
    s = per_axis(np.asarray(x_scale, np.float32), shape, ax, block_size, "scale")
    z = np.asarray(0 if x_zero_point is None else per_axis(x_zero_point, shape, ax, block_size, "zero point"),
                   np.int64 if dt == "int32" else np.float32)
    native = None
    if dt in QUANTIZED and not block_size:    # int32's x - zp is not exact in float32: numpy's int64
        def native(held, layout):
            return dequantize_tree(dt, held, s, z, None if per_tensor else list(layout).index(ax))
    return _elementwise_host(ctx, x, lambda a, out: dequantize_into(a, s, z, out), "float32", per_tensor, native)
