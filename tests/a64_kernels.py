"""Hand-assembled AArch64 kernels and their numpy references, run by unicorn on x86 hosts
(tests/unit/test_a64_unicorn.py) and natively on aarch64 (tests/aarch64/test_a64_native.py).

Each `*_kernel()` returns machine code from loopstack's Assembler; each `*_case(rng)` returns
(arguments, expected) where the arguments are the kernel's, in order.
"""
from __future__ import annotations

import numpy as np

from loopstack.isa.aarch64.assembler import Assembler
from loopstack.isa.aarch64.operands import SP, Mem, V, X

# void sgemm_4x8(const float *at, const float *b, float *c, int64_t k)
#   c[4][8] = alpha * at[k][4]^T @ b[k][8]; alpha a literal-pool constant
SGEMM_ALPHA = np.float32(0.5)


def sgemm_4x8_kernel() -> bytes:
    asm = Assembler()
    # accumulators v8-v15: their low halves are callee-saved (AAPCS64), so save d8-d15
    asm.stp(V(8).d, V(9).d, Mem.pre(SP, -64))
    asm.stp(V(10).d, V(11).d, Mem(SP, 16))
    asm.stp(V(12).d, V(13).d, Mem(SP, 32))
    asm.stp(V(14).d, V(15).d, Mem(SP, 48))
    for i in range(8, 16):
        asm.movi(V(i).d2, 0)
    top = asm.label("k")
    asm.bind(top)
    asm.ldr(V(0).q, Mem.post(X(0), 16))                   # at[k][0:4]
    asm.ld1([V(1).s4, V(2).s4], Mem.post(X(1), 32))       # b[k][0:8]
    for i in range(4):
        asm.fmla(V(8 + 2 * i).s4, V(1).s4, V(0).s[i])
        asm.fmla(V(9 + 2 * i).s4, V(2).s4, V(0).s[i])
    asm.subs(X(3), X(3), 1)
    asm.b_ne(top)
    alpha = asm.const(np.full(4, SGEMM_ALPHA, np.float32))
    asm.ldr(V(31).q, alpha)
    for i in range(8, 16):
        asm.fmul(V(i).s4, V(i).s4, V(31).s[0])
    asm.st1([V(8).s4, V(9).s4, V(10).s4, V(11).s4], Mem.post(X(2), 64))
    asm.st1([V(12).s4, V(13).s4, V(14).s4, V(15).s4], Mem(X(2)))
    asm.ldp(V(14).d, V(15).d, Mem(SP, 48))
    asm.ldp(V(12).d, V(13).d, Mem(SP, 32))
    asm.ldp(V(10).d, V(11).d, Mem(SP, 16))
    asm.ldp(V(8).d, V(9).d, Mem.post(SP, 64))
    asm.ret()
    return asm.bytes()


def sgemm_4x8_case(rng: np.random.Generator, k: int = 13):
    at = rng.standard_normal((k, 4)).astype(np.float32)
    b = rng.standard_normal((k, 8)).astype(np.float32)
    c = np.zeros((4, 8), np.float32)
    expected = (SGEMM_ALPHA * (at.T.astype(np.float64) @ b.astype(np.float64))).astype(np.float32)
    return [at, b, c, k], c, expected


# void hfma(const half *a, const half *b, half *y, int64_t n8, const half *s)
#   y = (y + a * b) + a * s[0], fused per step, 8 lanes a step (fmla .8h vector, then by element)
def hfma_kernel() -> bytes:
    asm = Assembler()
    asm.ld1([V(3).h[5]], Mem(X(4)))                       # one lane: s[0] into v3.h[5]
    top = asm.label("n")
    asm.bind(top)
    asm.ldr(V(0).q, Mem.post(X(0), 16))
    asm.ldr(V(1).q, Mem.post(X(1), 16))
    asm.ldr(V(2).q, Mem(X(2)))
    asm.fmla(V(2).h8, V(0).h8, V(1).h8)
    asm.fmla(V(2).h8, V(0).h8, V(3).h[5])                 # by element: Vm must be v0..v15
    asm.str(V(2).q, Mem.post(X(2), 16))
    asm.subs(X(3), X(3), 1)
    asm.cbnz(X(3), top)
    asm.ret()
    return asm.bytes()


def _f16_fma(acc, a, b):
    """One fused multiply-add, rounded once to fp16: exact in float64 for these magnitudes."""
    return (acc.astype(np.float64) + a.astype(np.float64) * b.astype(np.float64)).astype(np.float16)


def hfma_case(rng: np.random.Generator, n8: int = 5):
    n = 8 * n8
    a = rng.uniform(-2, 2, n).astype(np.float16)
    b = rng.uniform(-2, 2, n).astype(np.float16)
    y = rng.uniform(-2, 2, n).astype(np.float16)
    s = rng.uniform(-2, 2, 8).astype(np.float16)
    expected = _f16_fma(_f16_fma(y, a, b), a, np.full(n, s[0], np.float16))   # the lane load reads s[0]
    return [a, b, y, n8, s], y, expected


# void dot_s8(const int8 *a, const int8 *b, int32 *c, int64_t n16)
#   c[4] += per lane j: sum_k a[16i + 4j + k] * b[16i + 4j + k]  (sdot vector)
#   c[4] += per lane j: sum_k a[16i + 4j + k] * b[16i + 4*1 + k] (sdot by element [1], last chunk)
def sdot_kernel() -> bytes:
    asm = Assembler()
    asm.ldr(V(0).q, Mem(X(2)))
    top = asm.label("n")
    asm.bind(top)
    asm.ldr(V(1).q, Mem.post(X(0), 16))
    asm.ldr(V(2).q, Mem.post(X(1), 16))
    asm.sdot(V(0).s4, V(1).b16, V(2).b16)
    asm.subs(X(3), X(3), 1)
    asm.b_ne(top)
    asm.sdot(V(0).s4, V(1).b16, V(2).b4[1])
    asm.str(V(0).q, Mem(X(2)))
    asm.ret()
    return asm.bytes()


def sdot_case(rng: np.random.Generator, n16: int = 6):
    a = rng.integers(-128, 128, 16 * n16).astype(np.int8)
    b = rng.integers(-128, 128, 16 * n16).astype(np.int8)
    c = rng.integers(-1000, 1000, 4).astype(np.int32)
    prod = a.astype(np.int32) * b.astype(np.int32)
    expected = c + prod.reshape(n16, 4, 4).sum(axis=(0, 2)).astype(np.int32)
    last_a = a[-16:].astype(np.int32).reshape(4, 4)
    last_b = b[-16:].astype(np.int32).reshape(4, 4)[1]
    expected = expected + (last_a * last_b).sum(axis=1).astype(np.int32)
    return [a, b, c, n16], c, expected


# int64_t checksum(const int64_t *x, int64_t n): sum(x) + 123456789 (GPR loop, mov_imm, cbz)
def checksum_kernel() -> bytes:
    asm = Assembler()
    done = asm.label("done")
    asm.mov(X(2), X(0))
    asm.mov_imm(X(0), 123456789)
    asm.cbz(X(1), done)
    top = asm.label("loop")
    asm.bind(top)
    asm.ldr(X(3), Mem.post(X(2), 8))
    asm.add(X(0), X(0), X(3))
    asm.sub(X(1), X(1), 1)
    asm.cbnz(X(1), top)
    asm.bind(done)
    asm.ret()
    return asm.bytes()


def checksum_case(rng: np.random.Generator, n: int = 17):
    x = rng.integers(-2**40, 2**40, n).astype(np.int64)
    return [x, n], int(x.sum()) + 123456789
