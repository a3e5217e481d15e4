"""Quantized test programs shared by the x86 and AArch64 int8 tests: loop trees of int8 matmuls
(bias, relu, requantized outputs) and convolutions, and integer arrays covering each dtype's range."""
import numpy as np

from loopstack.looptree.builders import access, conv2d_tree, make_tree, nest
from loopstack.looptree.ir import Acc, Binary, Buffer, Compute, Const, Load, LoopTree, Requant, replace


def ints(rng, dt, shape):
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, shape).astype(dt)


def int8_matmul(M, N, K, a_dt, b_dt, bias=False, relu=False, requant=None):
    out_dt = "int32" if requant is None else requant[2]
    bufs = [Buffer("A", a_dt, (M, K), "input"), Buffer("B", b_dt, (K, N), "input")]
    if bias:
        bufs.append(Buffer("bias", "int32", (N,), "input"))
    if requant is not None and np.ndim(requant[0]):
        bufs.append(Buffer("S", "float32", (N,), "input"))
    bufs.append(Buffer("C", out_dt, (M, N), "output"))
    rq = None
    if requant is not None:
        scale, zp, _ = requant
        rq = Requant(Load(access("S", "n")) if np.ndim(scale) else Const(float(scale)), zp)
    stmt = Compute("C", access("C", "m", "n"), Binary("mul", Load(access("A", "m", "k")), Load(access("B", "k", "n"))),
                   reduce="add", init=Load(access("bias", "n")) if bias else "identity",
                   post=Binary("max", Const(0), Acc()) if relu else None,
                   requant=rq)
    return make_tree(bufs, {"m": M, "n": N, "k": K}, nest([("m", 1), ("n", 1), ("k", 1)], stmt))


def int8_matmul_case(rng, M, N, K, pair, bias=False, relu=False, bias_range=50000):
    """(tree, input arrays, expected output) of a random int8 matmul: numpy's exact result."""
    A, B = ints(rng, pair[0], (M, K)), ints(rng, pair[1], (K, N))
    arrays = [A, B] + ([rng.integers(-bias_range, bias_range, N).astype(np.int32)] if bias else [])
    want = A.astype(np.int64) @ B.astype(np.int64) + (arrays[2] if bias else 0)
    if relu:
        want = np.maximum(want, 0)
    return int8_matmul(M, N, K, *pair, bias, relu), arrays, want


def int8_conv(C, H, K, R, stride, padding, layout, pair):
    base = conv2d_tree(1, C, H, H, K, R, R, stride=stride, padding=padding, layout=layout)
    return LoopTree(tuple(replace(b, dtype={"X": pair[0], "Wt": pair[1], "Y": "int32"}[b.name]) for b in base.buffers),
                    base.dims, base.body)
