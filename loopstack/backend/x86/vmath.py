"""Element-wise functions as straight-line AVX2/AVX-512 code (no calls, no tables): the algorithms
and accuracy of backend/vmath.py. Every function works on full vectors and, with xmm registers,
on scalars (lane 0).
"""
from __future__ import annotations

import math

from ...errors import UnsupportedError
from ...isa.x86.operands import Vec
from ..vmath import (
    ERF_CLAMP, ERF_P, ERF_Q, EXP_CLAMP, EXP_POLY, GELU_CUBIC, GELU_K, LN2_HI, LN2_LO, LOG2E, LOG_SERIES,
)
from .values import vreg


def unary(e, op: str, d: int, x: int, shape) -> None:
    """d = op(x). d may equal x; x is not modified otherwise."""
    fn = _OPS.get(op)
    if fn is None:
        raise UnsupportedError(f"unary op {op!r} has no x86 implementation")
    fn(_Ctx(e, shape), d, x)


class _Ctx:
    """Registers of the right width and constants as memory operands of that width."""

    def __init__(self, e, shape):
        self.e = e
        self.a = e.asm
        self.bits = e.bits if shape.vector else 128

    def r(self, n: int) -> Vec:
        return vreg(n, self.bits)

    def c(self, value: float):
        return self.e.sized(self.e.const(value), self.bits)

    def cb(self, pattern: int):
        return self.e.const_bits(pattern).with_bits(self.bits)

    def tmp(self) -> int:
        return self.e.regs.alloc()

    def free(self, *regs: int) -> None:
        for n in regs:
            self.e.regs.release(n)

    def emit(self, op, *args):
        self.a.emit(op, *args)


def _neg(c, d, x):
    c.emit("vxorps", c.r(d), c.r(x), c.cb(0x80000000))


def _abs(c, d, x):
    c.emit("vandps", c.r(d), c.r(x), c.cb(0x7FFFFFFF))


def _relu(c, d, x):
    c.emit("vmaxps", c.r(d), c.r(x), c.c(0.0))


def _sqrt(c, d, x):
    c.emit("vsqrtps", c.r(d), c.r(x))


def _reciprocal(c, d, x):
    t = c.tmp()
    c.emit("vmovups", c.r(t), c.c(1.0))
    c.emit("vdivps", c.r(d), c.r(t), c.r(x))
    c.free(t)


def _exp(c, d, x):
    n, i = c.tmp(), c.tmp()
    c.emit("vminps", c.r(d), c.r(x), c.c(EXP_CLAMP[1]))
    c.emit("vmaxps", c.r(d), c.r(d), c.c(EXP_CLAMP[0]))
    c.emit("vmulps", c.r(n), c.r(d), c.c(LOG2E))
    c.emit("vcvtps2dq", c.r(i), c.r(n))          # round to nearest (MXCSR default)
    c.emit("vcvtdq2ps", c.r(n), c.r(i))
    c.emit("vfnmadd231ps", c.r(d), c.r(n), c.c(LN2_HI))   # r = x - n ln2, in two parts
    c.emit("vfnmadd231ps", c.r(d), c.r(n), c.c(LN2_LO))
    _horner(c, n, d, EXP_POLY)
    # 2^n as 2^h * 2^(n-h), h = n >> 1: h added to p's exponent field, 2^(n-h) built as a float
    # and multiplied in, so that the product overflows to inf and underflows gradually
    c.emit("vpsrad", c.r(d), c.r(i), 1)
    c.emit("vpsubd", c.r(i), c.r(i), c.r(d))
    c.emit("vpslld", c.r(d), c.r(d), 23)
    c.emit("vpaddd", c.r(n), c.r(n), c.r(d))
    c.emit("vpslld", c.r(i), c.r(i), 23)
    c.emit("vpaddd", c.r(i), c.r(i), c.cb(0x3F800000))
    c.emit("vmulps", c.r(d), c.r(n), c.r(i))
    c.free(n, i)


def _horner(c, acc, x, coeffs) -> None:
    """acc = the polynomial of `coeffs` (lowest degree first) at x."""
    c.emit("vmovups", c.r(acc), c.c(coeffs[-1]))
    for coeff in reversed(coeffs[:-1]):
        c.emit("vfmadd213ps", c.r(acc), c.r(x), c.c(coeff))


def _log(c, d, x):
    ex, m, t, p = c.tmp(), c.tmp(), c.tmp(), c.tmp()
    c.emit("vpsrld", c.r(ex), c.r(x), 23)
    c.emit("vpsubd", c.r(ex), c.r(ex), c.cb(127))
    c.emit("vcvtdq2ps", c.r(ex), c.r(ex))
    c.emit("vandps", c.r(m), c.r(x), c.cb(0x007FFFFF))
    c.emit("vorps", c.r(m), c.r(m), c.cb(0x3F800000))   # mantissa in [1, 2)
    c.emit("vaddps", c.r(t), c.r(m), c.c(1.0))
    c.emit("vsubps", c.r(m), c.r(m), c.c(1.0))
    c.emit("vdivps", c.r(t), c.r(m), c.r(t))             # t = (m-1)/(m+1) in [0, 1/3)
    c.emit("vmulps", c.r(m), c.r(t), c.r(t))
    _horner(c, p, m, LOG_SERIES)
    c.emit("vmulps", c.r(p), c.r(p), c.r(t))
    c.emit("vaddps", c.r(p), c.r(p), c.r(p))             # log m = 2 atanh(t)
    c.emit("vfmadd231ps", c.r(p), c.r(ex), c.c(math.log(2)))
    c.emit("vmovaps", c.r(d), c.r(p))
    c.free(ex, m, t, p)


def _sigmoid(c, d, x):
    _neg(c, d, x)
    _exp(c, d, d)
    c.emit("vaddps", c.r(d), c.r(d), c.c(1.0))
    _reciprocal(c, d, d)


def _tanh(c, d, x):
    c.emit("vaddps", c.r(d), c.r(x), c.r(x))
    _exp(c, d, d)
    c.emit("vaddps", c.r(d), c.r(d), c.c(1.0))
    t = c.tmp()
    c.emit("vmovups", c.r(t), c.c(-2.0))
    c.emit("vdivps", c.r(d), c.r(t), c.r(d))
    c.emit("vaddps", c.r(d), c.r(d), c.c(1.0))
    c.free(t)


def _gelu(c, d, x):
    t = c.tmp()
    c.emit("vmulps", c.r(t), c.r(x), c.r(x))
    c.emit("vmulps", c.r(t), c.r(t), c.c(GELU_CUBIC))
    c.emit("vfmadd213ps", c.r(t), c.r(x), c.r(x))        # x + 0.044715 x^3
    c.emit("vmulps", c.r(t), c.r(t), c.c(GELU_K))
    _sigmoid(c, t, t)
    c.emit("vmulps", c.r(d), c.r(x), c.r(t))
    c.free(t)


def _erf(c, d, x):
    t, p, q = c.tmp(), c.tmp(), c.tmp()
    c.emit("vminps", c.r(d), c.r(x), c.c(ERF_CLAMP))
    c.emit("vmaxps", c.r(d), c.r(d), c.c(-ERF_CLAMP))
    c.emit("vmulps", c.r(t), c.r(d), c.r(d))
    _horner(c, p, t, ERF_P)                             # in t = x^2
    _horner(c, q, t, ERF_Q)
    c.emit("vmulps", c.r(p), c.r(p), c.r(d))
    c.emit("vdivps", c.r(d), c.r(p), c.r(q))
    c.free(t, p, q)


_OPS = {"neg": _neg, "abs": _abs, "relu": _relu, "sqrt": _sqrt, "reciprocal": _reciprocal,
        "exp": _exp, "log": _log, "sigmoid": _sigmoid, "tanh": _tanh, "gelu": _gelu,
        "erf": _erf}
