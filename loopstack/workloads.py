"""The benchmark workloads of the paper (§7): matmul, convolution, depthwise convolution, MLP and
MobileNetV3 depthwise-separable blocks, batch 1, fp32, built with the frontend.

    w = get_workload("CONV-1")
    Y, reference = w.build(seed=0)     # Y: the output Tensor, inputs bound to aligned random arrays
    Y.set(default_schedule(Y)); np.testing.assert_allclose(Y.numpy(), reference(), ...)

Convolutions are NHWC (channels innermost): X[h, w, c], W[r, s, c, k] -> Y[oh, ow, k], padding as a
zero-padded view that the backend stages into a bordered temp. Every input is a 64-byte aligned
array (`empty_aligned`) so that the kernel and the peers read the same memory. The weights and
biases of the network layers are constant inputs (`Tensor(..., constant=True)`), as in inference:
a packed copy of them is built once per array, not in every call. The matmuls' operands are not.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import LoopstackError


def _aligned(rng, shape, scale=1.0):
    from .backend.kernel_base import empty_aligned

    a = empty_aligned(tuple(shape), np.float32)
    a[...] = (rng.standard_normal(shape) * scale).astype(np.float32)
    return a


@dataclass(frozen=True)
class Workload:
    name: str                    # "MM-256", "CONV-1", "DWCONV-3", "MLP-8x256", "MBV3-C64"
    suites: tuple                # e.g. ("paper", "mm")
    shape: str                   # "256x256x256", "64->128 56x56 3x3 s1"
    flops: int
    kind: str = "mm"             # "mm" | "conv" | "dwconv" | "mlp" | "mbv3"
    params: tuple = field(default=(), compare=False)   # (key, value) pairs the builder reads

    @property
    def p(self) -> dict:
        return dict(self.params)

    def build(self, seed: int = 0):
        """The output tensor (inputs bound to seeded random, 64-byte aligned arrays), and a function
        computing the numpy reference."""
        return _BUILDERS[self.kind](self, np.random.default_rng(seed))

    def arrays(self, seed: int = 0) -> dict:
        """The named input arrays `build(seed)` binds (what the peers run on)."""
        return _ARRAYS[self.kind](self, np.random.default_rng(seed))


# ---------------------------------------------------------------------------- inputs
def _mm_arrays(w, rng):
    m, k, n = w.p["m"], w.p["k"], w.p["n"]
    return {"A": _aligned(rng, (m, k)), "B": _aligned(rng, (k, n))}


def _conv_arrays(w, rng):
    p = w.p
    c, k, h, r = p["c"], p["k"], p["h"], p["r"]
    return {"X": _aligned(rng, (h, h, c)), "W": _aligned(rng, (r, r, c, k), 1.0 / np.sqrt(c * r * r))}


def _dw_arrays(w, rng):
    p = w.p
    c, h, r = p["c"], p["h"], p["r"]
    return {"X": _aligned(rng, (h, h, c)), "W": _aligned(rng, (r, r, c), 1.0 / r)}


def _mlp_arrays(w, rng):
    b, h = w.p["batch"], w.p["hidden"]
    out = {"X": _aligned(rng, (b, h))}
    for i in range(3):
        out[f"W{i}"] = _aligned(rng, (h, h), 1.0 / np.sqrt(h))
        out[f"b{i}"] = _aligned(rng, (h,), 0.1)
    return out


def _mbv3_arrays(w, rng):
    c, h = w.p["c"], w.p["h"]
    return {"X": _aligned(rng, (h, h, c)), "Wd": _aligned(rng, (3, 3, c), 1.0 / 3),
            "Wp": _aligned(rng, (c, c), 1.0 / np.sqrt(c))}


# ---------------------------------------------------------------------------- numpy references
def _windows(x, r, stride, pad):
    """(a, b, patch) for every tap of an r x r window over zero-padded NHWC `x`:
    patch[oh, ow, c] = x_padded[stride*oh + a, stride*ow + b, c]."""
    xp = np.pad(x, ((pad, pad), (pad, pad), (0, 0)))
    oh = (xp.shape[0] - r) // stride + 1
    ow = (xp.shape[1] - r) // stride + 1
    for a in range(r):
        for b in range(r):
            yield a, b, xp[a: a + stride * (oh - 1) + 1: stride, b: b + stride * (ow - 1) + 1: stride]


def conv_reference(x, wt, stride=1, pad=1):
    """NHWC direct convolution: x [h, w, c], wt [r, s, c, k] -> [oh, ow, k]."""
    out = 0
    for a, b, patch in _windows(x, wt.shape[0], stride, pad):
        out = out + (patch.reshape(-1, patch.shape[2]) @ wt[a, b]).reshape(*patch.shape[:2], -1)
    return np.asarray(out, np.float32)


def dwconv_reference(x, wt, stride=1, pad=1):
    """NHWC depthwise convolution: x [h, w, c], wt [r, s, c] -> [oh, ow, c]."""
    out = 0
    for a, b, patch in _windows(x, wt.shape[0], stride, pad):
        out = out + patch * wt[a, b]
    return np.asarray(out, np.float32)


# ---------------------------------------------------------------------------- frontend builders
def _lt():
    import loopstack as lt

    return lt


def _window(lt, X, sp, stride, r, tail):
    """X[h, w, ...] -> a view [oh, ow, r, s, *tail] with h = oh*stride + r (padded X)."""
    s = lt.SymbolGenerator()
    h, w = sp
    oh, ow, kr, ks = s.oh, s.ow, s.r, s.s
    return X.to(oh, ow, kr, ks, *tail, constraints=[(h, oh * stride + kr), (w, ow * stride + ks)]), (oh, ow, kr, ks)


def conv_tensor(X, W, c, pad=1, stride=1, depthwise=False):
    """NHWC convolution on the frontend: X [h, w, c] (symbols of X), W [r, s, c(, k)]."""
    lt = _lt()
    h, w = X.symbolic_shape[:2]
    if pad:
        X = lt.nn.pad(X, (h, pad), (w, pad))
        h, w = X.symbolic_shape[:2]
    Xw, (oh, ow, kr, ks) = _window(lt, X, (h, w), stride, None, (c,))
    if depthwise:
        Wt = W.to(kr, ks, c)
        return (Xw * Wt).sum(kr, ks)
    k = W.symbolic_shape[3]
    Wt = W.to(kr, ks, c, k)
    return (Xw * Wt).sum(kr, ks, c)


def _build_mm(w, rng):
    lt = _lt()
    a = _mm_arrays(w, rng)
    s = lt.SymbolGenerator()
    C = (lt.Tensor(a["A"]).to(s.m, s.k) * lt.Tensor(a["B"]).to(s.k, s.n)).sum(s.k)
    return C, lambda: a["A"] @ a["B"]


def _build_conv(w, rng):
    lt = _lt()
    a = _conv_arrays(w, rng)
    p = w.p
    s = lt.SymbolGenerator()
    X = lt.Tensor(a["X"]).to(s.h, s.w, s.c)
    W = lt.Tensor(a["W"], constant=True).to(s.kr, s.ks, s.c, s.k)
    Y = conv_tensor(X, W, s.c, pad=p["pad"], stride=p["stride"])
    return Y, lambda: conv_reference(a["X"], a["W"], p["stride"], p["pad"])


def _build_dw(w, rng):
    lt = _lt()
    a = _dw_arrays(w, rng)
    p = w.p
    s = lt.SymbolGenerator()
    X = lt.Tensor(a["X"]).to(s.h, s.w, s.c)
    W = lt.Tensor(a["W"], constant=True).to(s.kr, s.ks, s.c)
    Y = conv_tensor(X, W, s.c, pad=p["pad"], stride=p["stride"], depthwise=True)
    return Y, lambda: dwconv_reference(a["X"], a["W"], p["stride"], p["pad"])


def _build_mlp(w, rng):
    lt = _lt()
    a = _mlp_arrays(w, rng)
    s = lt.SymbolGenerator()
    hs = [s.i, s.j, s.l, s.o]
    Y = lt.Tensor(a["X"]).to(s.b, hs[0])
    for i in range(3):
        W = lt.Tensor(a[f"W{i}"], constant=True).to(hs[i], hs[i + 1])
        bias = lt.Tensor(a[f"b{i}"], constant=True).to(hs[i + 1])
        Y = lt.nn.relu(lt.nn.linear(Y, W, bias))

    def ref():
        y = a["X"]
        for i in range(3):
            y = np.maximum(y @ a[f"W{i}"] + a[f"b{i}"], 0)
        return y

    return Y, ref


def _build_mbv3(w, rng):
    lt = _lt()
    a = _mbv3_arrays(w, rng)
    s = lt.SymbolGenerator()
    X = lt.Tensor(a["X"]).to(s.h, s.w, s.c)
    Wd = lt.Tensor(a["Wd"], constant=True).to(s.kr, s.ks, s.c)
    D = lt.nn.relu(conv_tensor(X, Wd, s.c, pad=1, stride=1, depthwise=True))
    oh, ow, c = D.symbolic_shape
    Y = lt.nn.relu((D * lt.Tensor(a["Wp"], constant=True).to(c, s.k)).sum(c))

    def ref():
        d = np.maximum(dwconv_reference(a["X"], a["Wd"], 1, 1), 0)
        return np.maximum((d.reshape(-1, d.shape[2]) @ a["Wp"]).reshape(d.shape[0], d.shape[1], -1), 0)

    return Y, ref


_BUILDERS = {"mm": _build_mm, "conv": _build_conv, "dwconv": _build_dw, "mlp": _build_mlp, "mbv3": _build_mbv3}
_ARRAYS = {"mm": _mm_arrays, "conv": _conv_arrays, "dwconv": _dw_arrays, "mlp": _mlp_arrays, "mbv3": _mbv3_arrays}


# ---------------------------------------------------------------------------- the registry
def _out(h, r, stride, pad):
    return (h + 2 * pad - r) // stride + 1


def _mm(n):
    return Workload(f"MM-{n}", ("paper", "mm"), f"{n}x{n}x{n}", 2 * n ** 3, "mm",
                    (("m", n), ("k", n), ("n", n)))


def _conv(i, c, k, h):
    o = _out(h, 3, 1, 1)
    return Workload(f"CONV-{i}", ("paper", "conv"), f"{c}->{k} {h}x{h} 3x3 s1", 2 * o * o * k * c * 9, "conv",
                    (("c", c), ("k", k), ("h", h), ("r", 3), ("stride", 1), ("pad", 1)))


def _dw(i, c, h, stride, r=3):
    pad = r // 2
    o = _out(h, r, stride, pad)
    return Workload(f"DWCONV-{i}", ("paper", "dwconv"), f"{c} ch {h}x{h} {r}x{r} s{stride}",
                    2 * o * o * c * r * r, "dwconv",
                    (("c", c), ("h", h), ("r", r), ("stride", stride), ("pad", pad)))


def _mlp(b, h):
    return Workload(f"MLP-{b}x{h}", ("paper", "mlp"), f"3x({b}x{h} . {h}x{h} +b relu)", 3 * 2 * b * h * h, "mlp",
                    (("batch", b), ("hidden", h)))


def _mbv3(c, h=12):
    return Workload(f"MBV3-C{c}", ("paper", "mbv3"), f"{c} ch {h}x{h} dw3x3+relu, 1x1 {c}->{c}+relu",
                    2 * h * h * c * 9 + 2 * h * h * c * c, "mbv3", (("c", c), ("h", h)))


_ALL = ([_mm(n) for n in (64, 128, 256, 512)]
        + [_conv(1, 64, 128, 56), _conv(2, 128, 256, 28), _conv(3, 256, 512, 14), _conv(4, 512, 512, 7)]
        + [_dw(1, 16, 112, 2), _dw(2, 72, 56, 2), _dw(3, 88, 28, 1), _dw(4, 240, 14, 1, r=5)]
        + [_mlp(b, h) for b in (8, 64) for h in (256, 1024)]
        + [_mbv3(c) for c in (64, 128, 256)])

WORKLOADS: dict[str, Workload] = {w.name: w for w in _ALL}
SUITES = ("paper", "mm", "conv", "dwconv", "mlp", "mbv3", "all")


def get_workload(name: str) -> Workload:
    """The workload called `name` (case-insensitive)."""
    for key, w in WORKLOADS.items():
        if key.lower() == str(name).lower():
            return w
    raise LoopstackError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")


def suite(name: str) -> list[Workload]:
    """The workloads of a suite ("paper", "mm", "conv", "dwconv", "mlp", "mbv3" or "all")."""
    key = str(name).lower()
    if key == "all":
        return list(WORKLOADS.values())
    if key not in SUITES:
        raise LoopstackError(f"unknown suite {name!r}; known: {', '.join(SUITES)}")
    return [w for w in WORKLOADS.values() if key in w.suites]
