"""The quantized layers of an imported network: integer contractions built as loop trees, and
QuantizeLinear / DequantizeLinear steps.

A quantized convolution or matrix product is one loop tree (looptree.ir) that the backend
compiles like any other: its 8-bit contraction is tensorized onto the target's dot-product
instruction where the shapes allow it (`kernel.tensorized` names it), and its int32 sum is
requantized on the store (`Requant`: x float32 scale, round half to even, + zero point,
saturate) where ONNX asks for a quantized output. ONNX's zero points are folded in exactly,
in int32 (wrapping arithmetic, exact wherever the true result fits int32):

    sum_t (x - xz)(w - wz) = sum_t x*w  -  xz * sum_t w  -  wz * sum_t x  +  T * xz * wz

The weights are constant, so `- xz * sum w + T * xz * wz` (+ the bias) is a constant per output
channel (the statement's int32 init); `- wz * sum x` is a sum over each window of the input,
computed in the same tree where some weight zero point is not 0 (uint8 weights are stored as
int8 `w - 128`, their zero point moving by -128 with them). A window reaching past the input
reads `xz` (the value ONNX pads a quantized input with) from a bordered copy, so every window
sums over all its taps and the constant above stays one per channel.

QuantizeLinear and DequantizeLinear outside a fused pattern (see qdq.py) are element-wise
steps at the quantized graph's edges; they run on the host in numpy with onnxruntime's
arithmetic (x / scale in float32, round half to even, + zero point, saturate; (x - zp) * scale).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from ..errors import UnsupportedError
from ..looptree.builders import access, make_tree, nest
from ..looptree.ir import (
    Access, Affine, Binary, Buffer, Compute, Const, Load, Loop, LoopTree, Requant, map_accesses, statements,
)

QUANTIZED = ("uint8", "int8")
LANES = 16    # output channels are padded to whole 512-bit vectors of int32 lanes
DW_BLOCK = 8  # output columns of a depthwise register block (its int32 accumulators)

log = logging.getLogger("loopstack.onnx")


# ---------------------------------------------------------------------------- layer kinds
@dataclass(eq=False)
class TreeKernel:
    """A layer given as a loop tree; `args` names, per input buffer of the tree in order, the
    network buffer it reads ("buffer", name, shape) or the constant array ("const", array)."""
    tree: LoopTree
    args: list

    def compile_kernel(self, target):
        from ..backend import compile as compile_tree
        from ..isa.target import get_target

        tree = self.tree
        if get_target(target, check=False).cores > 1:
            tree = parallel_contraction(tree)
        try:
            kernel = compile_tree(tree, target)
        except UnsupportedError as e:
            # the backend requantizes a sum on its store only where one nest computes it whole
            # ("a requantized sum split over several nests": a vector loop with a remainder)
            if not any(c.requant is not None and c.reduce for _, c in self.tree.computes()):
                raise
            log.info("requantizing in a statement of its own (%s)", e)
            kernel = compile_tree(requant_apart(tree), target)
        return kernel, self.args, "int8" if kernel.tensorized is None else "int8-dot"


def parallel_contraction(tree: LoopTree) -> LoopTree:
    """`tree` with the outermost loop of its contraction annotated parallel, where that loop runs
    over the output at least twice and the nest is large enough to split between a network's
    threads (tune.defaults.AWAKE_PARALLEL_MIN_FLOPS: its workers are awake from layer to layer).
    The tensorizing rewrite keeps the annotation on the outermost loop of the block it builds."""
    from ..looptree.stats import flops
    from ..tune.defaults import AWAKE_PARALLEL_MIN_FLOPS

    body = list(tree.body)
    for i, node in enumerate(body):
        stmts = [s for s in statements(node) if s.reduce]
        if not (isinstance(node, Loop) and stmts) or node.dim not in stmts[0].out.names():
            continue
        large = flops(LoopTree(tree.buffers, tree.dims, (node,))) >= AWAKE_PARALLEL_MIN_FLOPS
        if large and tree.dim_size(node.dim) >= 2 * node.step:
            body[i] = _parallel(node)
    return LoopTree(tree.buffers, tree.dims, tuple(body))


def _parallel(node: Loop) -> Loop:
    return replace(node, annotations=frozenset(node.annotations) | {"parallel"})


def requant_apart(tree: LoopTree) -> LoopTree:
    """`tree` with its requantized sum stored in int32 and requantized by an element-wise
    statement over the output (whose last dimension is the scale's channel or column)."""
    out = tree.outputs[0]
    rq = next(c.requant for _, c in tree.computes() if c.requant is not None)

    def swap(node):
        if isinstance(node, Compute) and node.requant is not None:
            return replace(node, out=Access("S32", node.out.index), requant=None)
        if isinstance(node, Loop):
            return replace(node, body=tuple(swap(n) for n in node.body))
        return node

    names = [f"q{i}" for i in range(len(out.shape))]
    scale = rq.scale if isinstance(rq.scale, Const) else Load(access(rq.scale.access.buffer, names[-1]))
    store = Compute("requant", access(out.name, *names), Load(access("S32", *names)),
                    requant=Requant(scale, rq.zero_point))
    bufs = tree.inputs + tree.temps + (Buffer("S32", "int32", out.shape, "temp"),) + tree.outputs
    return make_tree(bufs, {**dict(tree.dims), **dict(zip(names, out.shape))}, *(swap(n) for n in tree.body),
                     nest([(d, 1) for d in names], store, tag="rq"))


class _HostKernel:
    tensorized = None
    flops = 0

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *arrays):
        self.fn(*arrays)

    def bind(self, *arrays, threads=None, scratch=None, storage=None):
        """The call on `arrays`, prepared once (a compiled model's layers are; see Kernel.bind)."""
        return partial(self.fn, *arrays)


@dataclass(eq=False)
class HostStep:
    """A layer computed by a numpy function of its input buffers and its output buffer, which it
    writes (element-wise quantization)."""
    fn: object
    args: list

    def compile_kernel(self, target):
        return _HostKernel(self.fn), self.args, "host"


@dataclass(eq=False)
class NativeOrHost:
    """An element-wise layer (a QuantizeLinear, a DequantizeLinear) given as a loop tree that runs
    as a kernel where the target compiles it, and as its host step elsewhere (AArch64 converts no
    integer reads in a float statement, nor stores a byte tail: the compile says why, and the host
    step computes the same)."""
    tree: LoopTree
    args: list
    host: HostStep

    def compile_kernel(self, target):
        from ..backend import compile as compile_tree
        from ..isa.target import get_target
        from ..tune.defaults import AWAKE_PARALLEL_MIN_ELEMENTS

        tree = self.tree
        (out,) = tree.outputs
        first = tree.body[0]        # (the trees have no loops over dimensions of one element)
        if (get_target(target, check=False).cores > 1 and int(np.prod(out.shape)) >= AWAKE_PARALLEL_MIN_ELEMENTS
                and isinstance(first, Loop)):       # a network's threads split it (onnx/model.py)
            tree = LoopTree(tree.buffers, tree.dims, (_parallel(first),))
        try:
            return compile_tree(tree, target), self.args, "native"
        except UnsupportedError as e:
            log.info("a host step instead of a kernel: %s", e)
            return self.host.compile_kernel(target)


def _per_element_tree(name: str, x_dtype: str, y_dtype: str, shape: tuple, axis: int | None, params: dict,
                      expr, requant=None) -> tuple[LoopTree, list]:
    """(loop tree, constant inputs) of `y = expr(x, *params)` over `x` of `shape` (as stored):
    each parameter a constant per tensor (`axis` None) or a 1-D constant input along the stored
    axis `axis`, in the order of `params` ({name: value})."""
    dims = [f"d{i}" for i in range(len(shape))]
    # a dimension of one element is indexed by 0, with no loop: the outermost loop is one that
    # iterates (the one a network's threads split)
    index = [d if n > 1 else Affine() for d, n in zip(dims, shape)]
    bufs, consts, terms = [Buffer("x", x_dtype, tuple(shape), "input")], [], []
    for pname, value in params.items():
        if axis is None:
            terms.append(Const(float(np.asarray(value).reshape(()))))
            continue
        bufs.append(Buffer(pname, "float32", (shape[axis],), "input", constant=True))
        consts.append(np.ascontiguousarray(np.asarray(value, np.float32).reshape(-1)))
        terms.append(Load(access(pname, index[axis])))
    bufs.append(Buffer("y", y_dtype, tuple(shape), "output"))
    stmt = Compute(name, access("y", *index), expr(Load(access("x", *index)), *terms), requant=requant)
    loops = [(d, 1) for d, n in zip(dims, shape) if n > 1]
    sizes = {d: n for d, n in zip(dims, shape) if n > 1}
    return make_tree(bufs, sizes, nest(loops, stmt)), consts


def dequantize_tree(dtype: str, shape: tuple, scale, zero_point, axis: int | None) -> tuple[LoopTree, list]:
    """(loop tree, constant inputs) of `y = (x - zero_point) * scale` over an 8-bit `x` of
    `shape` (as stored): the scale and zero point per tensor (`axis` None: scalars) or along the
    stored axis `axis` (1-D arrays). x - zero_point is exact in float32 (both 8-bit), one
    rounding follows: onnxruntime's arithmetic, bit for bit."""
    return _per_element_tree("dequantize", dtype, "float32", shape, axis, {"zp": zero_point, "scale": scale},
                             lambda x, zp, s: Binary("mul", Binary("sub", x, zp), s))


def quantize_tree(dtype: str, shape: tuple, scale, zero_point: int, axis: int | None) -> tuple[LoopTree, list]:
    """(loop tree, constant inputs) of `y = saturate(round_half_even(x / scale) + zero_point)`
    over a float32 `x` of `shape` (as stored) into `dtype` (int8 or uint8): the scale per tensor
    (`axis` None) or along the stored axis `axis`, one zero point. The division is the
    statement's float32 value, requantized as it is (Requant.of_float): onnxruntime's
    arithmetic (MLAS divides, clamps in float, rounds to nearest even), bit for bit."""
    return _per_element_tree("quantize", "float32", dtype, shape, axis, {"scale": scale},
                             lambda x, s: Binary("div", x, s),
                             requant=Requant(Const(1.0), int(zero_point), of_float=True))


# ---------------------------------------------------------------------------- quantize / dequantize
def per_axis(param: np.ndarray, shape, axis: int, block_size: int, what: str) -> np.ndarray:
    """A scale or zero point of QuantizeLinear/DequantizeLinear broadcast against a value of
    `shape`: per tensor (one element), per axis (a 1-D array along `axis`) or blocked (the
    value's shape with `axis` cut into blocks of `block_size`)."""
    param = np.asarray(param)
    rank = len(shape)
    if param.size == 1 and not block_size:
        return param.reshape(())
    if not block_size:
        if param.ndim != 1 or param.shape[0] != shape[axis]:
            raise UnsupportedError(f"{what} of shape {param.shape} is neither per tensor nor per axis {axis} "
                                   f"of a value of shape {tuple(shape)}")
        return param.reshape([shape[axis] if a == axis else 1 for a in range(rank)])
    want = tuple(-(-shape[a] // block_size) if a == axis else shape[a] for a in range(rank))
    if param.shape != want:
        raise UnsupportedError(f"{what} of shape {param.shape} does not block axis {axis} of {tuple(shape)} "
                               f"by {block_size}")
    return np.repeat(param, block_size, axis=axis)[tuple(slice(0, s) for s in shape)]


def dequantize(x, scale, zero_point=None, axis: int = 1, block_size: int = 0, out=None) -> np.ndarray:
    """(x - zero_point) * scale in float32, as onnxruntime computes it (into `out` if given)."""
    x = np.asarray(x)
    s = per_axis(np.asarray(scale, np.float32), x.shape, axis, block_size, "scale")
    z = np.zeros((), np.int32) if zero_point is None else per_axis(zero_point, x.shape, axis, block_size, "zero point")
    return dequantize_into(x, s, np.asarray(z, np.int64 if x.dtype == np.int32 else np.float32),
                           np.empty(x.shape, np.float32) if out is None else out)


def dequantize_into(x, s, z, out) -> np.ndarray:
    """`dequantize` with its scale and zero point broadcast already (z float32 for 8-bit x, in
    which x - z is exact; int64 for int32 x)."""
    if x.dtype.itemsize == 1:
        np.subtract(x, z, out=out, dtype=np.float32)
    else:
        np.copyto(out, x.astype(np.int64) - z, casting="unsafe")
    np.multiply(out, s, out=out)
    return out


def quantize(x, scale, zero_point, dtype: str, axis: int = 1, block_size: int = 0, out=None) -> np.ndarray:
    """saturate(round_half_even(x / scale) + zero_point) in `dtype` (x / scale in float32; into
    `out` if given). A NaN quantizes to an unspecified value of the range."""
    x = np.asarray(x, np.float32)
    s = per_axis(np.asarray(scale, np.float32), x.shape, axis, block_size, "scale")
    z = 0 if zero_point is None else per_axis(zero_point, x.shape, axis, block_size, "zero point")
    info = np.iinfo(dtype)
    return quantize_into(x, s, np.asarray(z, np.float32), float(info.min), float(info.max),
                         np.empty(x.shape, dtype) if out is None else out)


def quantize_into(x, s, z, lo: float, hi: float, out) -> np.ndarray:
    """`quantize` with its scale and zero point (float32) broadcast already, and the range."""
    with np.errstate(all="ignore"):
        q = np.divide(x, s, dtype=np.float32)
        np.rint(q, out=q)
        # + z is exact in float32 wherever the result is not saturated anyway (|q| < 2**24)
        np.add(q, z, out=q)
        np.clip(q, lo, hi, out=q)
        np.copyto(out, q, casting="unsafe")
    return out


# ---------------------------------------------------------------------------- the trees
def as_int8_weights(w: np.ndarray, wz: np.ndarray):
    """(int8 weights, their int32 zero point): uint8 weights move to int8 by -128, with their
    zero point, which leaves every w - wz unchanged."""
    if w.dtype == np.uint8:
        return (w.astype(np.int16) - 128).astype(np.int8), wz.astype(np.int32) - 128
    return w.astype(np.int8, copy=False), wz.astype(np.int32)


def wrap32(x) -> np.ndarray:
    """int64 values as int32 arithmetic leaves them (modulo 2**32)."""
    return ((np.asarray(x, np.int64) + 2**31) % 2**32 - 2**31).astype(np.int32)


@dataclass(frozen=True)
class Epilogue:
    """What follows the int32 sum: the bias (an int32 constant per output channel), and either
    nothing (int32 output) or a requantization by `scale` (a float, or float32 per channel) to
    `dtype` with `zero_point`."""
    bias: np.ndarray
    scale: object = None
    zero_point: int = 0
    dtype: str = "int32"


def _affine(*terms, const=0) -> Affine:
    return Affine.of(*[t for t in terms if not (isinstance(t, tuple) and t[1] == 0)], const=const)


class _Tree:
    """Buffers, dims and nests of one layer's loop tree, with the network buffers it reads."""

    def __init__(self):
        self.inputs, self.temps, self.args, self.dims, self.body = [], [], [], {}, []

    def read(self, name, dtype, shape, arg):
        self.inputs.append(Buffer(name, dtype, tuple(shape), "input", constant=arg[0] == "const"))
        self.args.append(arg)

    def const(self, name, arr):
        arr = np.ascontiguousarray(arr)
        self.read(name, arr.dtype.name, arr.shape, ("const", arr))

    def nest(self, loops, stmt):
        """`stmt` under `loops`, outermost first: dimension names, or (dimension, step) for the
        outer loop of a split (the loops inside it over that dimension cover one step)."""
        node = stmt
        for k, entry in enumerate(reversed(loops)):
            dim, step = entry if isinstance(entry, tuple) else (entry, 1)
            node = Loop(f"L{len(self.dims)}_{dim}_{len(self.body)}_{k}", dim, step, (node,))
        self.body.append(node)

    def build(self, out: Buffer) -> TreeKernel:
        tree = make_tree(self.inputs + self.temps + [out], self.dims, *self.body)
        return TreeKernel(tree, self.args)


def _padded(a: np.ndarray, size: int, axis: int, fill=0) -> np.ndarray:
    """`a` extended along `axis` to `size` with `fill`."""
    more = list(a.shape)
    more[axis] = size - a.shape[axis]
    return np.concatenate([a, np.full(more, fill, a.dtype)], axis=axis)


def _whole_vectors(n: int) -> int:
    return -(-n // LANES) * LANES


def _crop(t: "_Tree", out: str, padded: str, dims: list, size: int) -> None:
    """A copy of `padded` into `out` over `dims`, the last of them cut to `size`."""
    crop, loops = _own_dims(t, Compute("crop", access(out, *dims), Load(access(padded, *dims))), dims)
    t.dims[loops[-1]] = size
    t.nest(loops, crop)


def _own_dims(t: "_Tree", stmt: Compute, loops: list) -> tuple[Compute, list]:
    """`stmt` and its loops over dimensions of its own (each name + "_"): the rewriter may pad
    the contraction's dimensions (a reduction to whole groups of 4), which a second statement
    over the same names would then run over too."""
    names = set(loops)
    for d in loops:
        t.dims[d + "_"] = t.dims[d]

    def acc(a: Access) -> Access:
        return Access(a.buffer, tuple(Affine.of(*[(n + "_" if n in names else n, c) for n, c in x.terms],
                                                const=x.const) for x in a.index), a.zero_pad)
    return map_accesses(stmt, acc), [d + "_" for d in loops]


def conv_kernel(x_buffer: str, x_dtype: str, N: int, H: int, W: int, C: int, w: np.ndarray, wz: np.ndarray,
                xz: int, group: int, strides, dilations, pads, ep: Epilogue) -> tuple[TreeKernel, tuple]:
    """The quantized 2-D convolution of an NHWC buffer by `w` [K, C/group, R, S] (any 8-bit
    dtype; `wz` a scalar or one zero point per filter) -> (kernel, output shape N, OH, OW, K)."""
    K, CG, R, S = w.shape
    g, KG = group, K // group
    (sh, sw), (dh, dw) = strides, dilations
    (ph0, pw0, ph1, pw1) = pads
    OH = (H + ph0 + ph1 - dh * (R - 1) - 1) // sh + 1
    OW = (W + pw0 + pw1 - dw * (S - 1) - 1) // sw + 1
    w8, wz8 = as_int8_weights(w, np.broadcast_to(np.asarray(wz).reshape(-1), (K,)))
    taps = CG * R * S
    wsum = w8.reshape(K, -1).astype(np.int64).sum(1)
    # the constant per filter: bias - xz * sum w + T * xz * wz (int32, wrapping as int32 does)
    bias = wrap32(ep.bias.astype(np.int64) - xz * wsum + taps * xz * wz8.astype(np.int64))
    K0 = K
    if group == 1 and K % LANES:
        # filters of zeros up to whole vectors of lanes: the dot-product kernel then covers every
        # filter (a remainder would leave the whole layer to scalar code); the extra channels
        # are dropped by a copy into the output
        K = _whole_vectors(K)
        w8, wz8, bias = (_padded(a, K, 0) for a in (w8, wz8, bias))
        if np.ndim(ep.scale):
            ep = replace(ep, scale=_padded(np.asarray(ep.scale, np.float32).reshape(-1), K, 0, 1))
    t = _Tree()
    depthwise = CG == 1 and KG == 1 and g > 1
    # a batch of one is no axis (the kernels' inspectors look for the loops they vectorise alone)
    bn, nl, nb = (("n",), ["n"], (N,)) if N > 1 else ((), [], ())
    t.read("X", x_dtype, (*nb, H, W, C), ("buffer", x_buffer, (*nb, H, W, C)))
    if g == 1:
        t.const("Wt", np.transpose(w8, (2, 3, 1, 0)))                      # [r, s, c, k]
        wacc, och, xch = access("Wt", "r", "s", "c", "k"), "k", "c"
        t.dims.update(k=K, c=C)
    elif depthwise:
        t.const("Wt", np.transpose(w8.reshape(K, R, S), (1, 2, 0)))        # [r, s, c]
        wacc, och, xch = access("Wt", "r", "s", "c"), "c", "c"
        t.dims.update(c=C)
    else:
        t.const("Wt", np.transpose(w8.reshape(g, KG, CG, R, S), (0, 3, 4, 2, 1)))  # [g, r, s, c, kk]
        wacc = access("Wt", "g", "r", "s", "c", "kk")
        och, xch = _affine(("g", KG), ("kk", 1)), _affine(("g", CG), ("c", 1))
        t.dims.update(g=g, kk=KG, c=CG)
    t.const("bias", bias)
    t.dims.update(oh=OH, ow=OW, r=R, s=S)
    if N > 1:
        t.dims["n"] = N
    padded = any(pads)
    if padded and xz != 0:
        # a bordered copy holding xz outside the input: (x - xz) wraps into the input's dtype,
        # the zero border is added, + xz wraps back (x inside, xz on the border)
        PH, PW = (OH - 1) * sh + dh * (R - 1) + 1, (OW - 1) * sw + dw * (S - 1) + 1
        t.temps += [Buffer("T", x_dtype, (*nb, H, W, C), "temp"), Buffer("P", x_dtype, (*nb, PH, PW, C), "temp")]
        t.dims.update(h=H, w=W, ph=PH, pw=PW, cc=C)
        t.nest([*nl, "h", "w", "cc"], Compute("shift", access("T", *bn, "h", "w", "cc"),
                                              Binary("sub", Load(access("X", *bn, "h", "w", "cc")), Const(xz))))
        t.nest([*nl, "ph", "pw", "cc"], Compute("border", access("P", *bn, "ph", "pw", "cc"), Binary(
            "add", Load(access("T", *bn, _affine("ph", const=-ph0), _affine("pw", const=-pw0), "cc", zero_pad=True)),
            Const(xz))))
        src, off_h, off_w, zp_read = "P", 0, 0, False
    else:
        src, off_h, off_w, zp_read = "X", -ph0, -pw0, padded
    row, col = _affine(("oh", sh), ("r", dh), const=off_h), _affine(("ow", sw), ("s", dw), const=off_w)
    xacc = access(src, *bn, row, col, xch, zero_pad=zp_read)
    init = Load(access("bias", och))
    if np.any(wz8 != 0):
        # - wz[k] * (the sum of each window's inputs): the window sums in an int32 temp
        t.const("wz", wz8.astype(np.int32))
        grp = () if g == 1 else (("c",) if depthwise else ("g",))
        t.temps.append(Buffer("Sx", "int32", (*nb, OH, OW) + ((C,) if depthwise else (g,) if g > 1 else ()), "temp"))
        sx_out = access("Sx", *bn, "oh", "ow", *grp)
        sum_loops = [*nl, "oh", "ow", *grp, "r", "s"] + ([] if depthwise else ["c"])
        t.nest(*reversed(_own_dims(t, Compute("wsum", sx_out, Load(xacc), reduce="add", init="identity"), sum_loops)))
        init = Binary("sub", init, Binary("mul", Load(access("wz", och)), Load(sx_out)))
    requant = _requant(t, ep, och)
    out = Buffer("Y", ep.dtype, (*nb, OH, OW, K0), "output")
    dst = "Y" if K == K0 else "Yp"
    stmt = Compute("Y", access(dst, *bn, "oh", "ow", och), Binary("mul", Load(xacc), Load(wacc)), reduce="add",
                   init=init, requant=requant)
    if g == 1:
        loops = [*nl, "oh", "ow", "r", "s", "c", "k"]
    elif depthwise:
        # a register block of a vector of channels by up to DW_BLOCK output columns, over which
        # the taps run: with the taps outside the channels, every tap would load, add to and
        # store the whole row of int32 sums (MobileNetV3's 7x7x576 5x5 layers, one thread on an
        # AVX-512 Xeon: 425 -> 35 us; its 14x14x240 ones 68 -> 53 us)
        bw = max(d for d in range(1, min(OW, DW_BLOCK) + 1) if OW % d == 0)
        loops = [*nl, ("c", LANES), "oh", ("ow", bw), "r", "s", ("ow", 1), ("c", 1)]
    else:
        loops = [*nl, "g", "oh", "ow", "r", "s", "c", "kk"]
    t.nest(loops, stmt)
    if K != K0:
        t.temps.append(Buffer("Yp", ep.dtype, (*nb, OH, OW, K), "temp"))
        _crop(t, "Y", "Yp", [*nl, "oh", "ow", "k"], K0)
    return t.build(out), (N, OH, OW, K0)


def _requant(t: _Tree, ep: Epilogue, och) -> Requant | None:
    if ep.dtype == "int32":
        return None
    scale = np.asarray(ep.scale, np.float32)
    if scale.size == 1:
        return Requant(Const(float(scale.reshape(()))), int(ep.zero_point))
    t.const("scale", scale.reshape(-1))
    return Requant(Load(access("scale", och)), int(ep.zero_point))


def matmul_kernel(a_buffer: str, a_dtype: str, batch: int, M: int, Kd: int, b: np.ndarray, bz, az,
                  ep: Epilogue) -> tuple[TreeKernel, tuple]:
    """A [batch, M, K] (a buffer) x b [K, N] or [batch, K, N] (constant, any 8-bit dtype; `bz` a
    scalar or one zero point per column; `az` a scalar or one per row of A) -> (kernel, the
    output shape batch, M, N). `ep.bias` and a per-column `ep.scale` have N elements."""
    if b.ndim == 3 and b.shape[0] == 1:
        b = b[0]
    batched = b.ndim == 3
    N = b.shape[-1]
    b8, bz8 = as_int8_weights(b, np.broadcast_to(np.asarray(bz).reshape(-1), (N,)))
    az = np.asarray(az, np.int64).reshape(-1)
    colsum = b8.astype(np.int64).sum(-2)                         # [N] or [batch, N]
    # the constant: bias - az * sum_k b + K * az * bz, per column (and per row where az is)
    corr = ep.bias.astype(np.int64) - az[:, None] * colsum[..., None, :] + Kd * az[:, None] * bz8.astype(np.int64)
    corr = wrap32(corr)                                          # [M or 1, N] or [batch, M or 1, N]
    scale = None if ep.dtype == "int32" else np.asarray(ep.scale, np.float32)
    N0 = N
    if N % LANES and M % LANES and (scale is None or scale.ndim < 2):
        # columns of zeros up to whole vectors of lanes (as conv_kernel pads its filters)
        N = _whole_vectors(N)
        b8, bz8, corr = (_padded(a, N, -1) for a in (b8, bz8, corr))
        if scale is not None and scale.size > 1:
            scale = _padded(scale.reshape(-1), N, 0, 1)
    # a batch of one is no loop (the instruction's inspector looks for the m, n, k loops alone)
    bd = ("b",) if batch > 1 else ()
    t = _Tree()
    t.read("A", a_dtype, (batch,) * len(bd) + (M, Kd), ("buffer", a_buffer, (batch,) * len(bd) + (M, Kd)))
    t.dims.update(m=M, n=N, k=Kd, **({"b": batch} if bd else {}))
    t.const("B", b8)
    bacc = access("B", *(bd if batched else ()), "k", "n")
    per_row = corr.shape[-2] > 1
    idx = (bd if batched else ()) + (("m",) if per_row else ()) + ("n",)
    t.const("corr", corr.reshape([batch] * batched + [M] * per_row + [N]))
    init = Load(access("corr", *idx))
    aacc = access("A", *bd, "m", "k")
    if np.any(bz8 != 0):
        t.const("bz", bz8.astype(np.int32))
        t.temps.append(Buffer("Sa", "int32", (batch,) * len(bd) + (M,), "temp"))
        rowsum = Compute("rowsum", access("Sa", *bd, "m"), Load(aacc), reduce="add", init="identity")
        t.nest(*reversed(_own_dims(t, rowsum, [*bd, "m", "k"])))
        init = Binary("sub", init, Binary("mul", Load(access("bz", "n")), Load(access("Sa", *bd, "m"))))
    out = Buffer("C", ep.dtype, (batch,) * len(bd) + (M, N0), "output")
    product = Binary("mul", Load(aacc), Load(bacc))
    if scale is not None and scale.ndim == 2:
        # A quantized per row: a scale per (row, column), applied by a statement of its own on
        # the int32 sums (the tensorized block's store takes a scale per column)
        t.const("scale", scale)
        t.temps.append(Buffer("S32", "int32", out.shape, "temp"))
        t.nest([*bd, "m", "n", "k"], Compute("S32", access("S32", *bd, "m", "n"), product, reduce="add", init=init))
        store = Compute("C", access("C", *bd, "m", "n"), Load(access("S32", *bd, "m", "n")),
                        requant=Requant(Load(access("scale", "m", "n")), int(ep.zero_point)))
        t.nest(*reversed(_own_dims(t, store, [*bd, "m", "n"])))
        return t.build(out), (batch, M, N0)
    requant = None
    if scale is not None:
        if scale.size == 1:
            requant = Requant(Const(float(scale.reshape(()))), int(ep.zero_point))
        else:    # per column
            t.const("scale", scale.reshape(-1))
            requant = Requant(Load(access("scale", "n")), int(ep.zero_point))
    dst = "C" if N == N0 else "Cp"
    t.nest([*bd, "m", "n", "k"], Compute("C", access(dst, *bd, "m", "n"), product, reduce="add", init=init,
                                         requant=requant))
    if N != N0:
        t.temps.append(Buffer("Cp", ep.dtype, (batch,) * len(bd) + (M, N), "temp"))
        _crop(t, "C", "Cp", [*bd, "m", "n"], N0)
    return t.build(out), (batch, M, N0)
