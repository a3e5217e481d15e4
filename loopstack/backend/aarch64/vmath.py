"""Element-wise functions as straight-line AdvSIMD code: the algorithms, constants and float32
error bounds of backend/vmath.py, in AArch64 instructions.

On neon_fp16 the light functions (neg, abs, relu, sqrt, reciprocal) run on the 8 fp16 lanes;
exp, log, sigmoid, tanh, gelu and erf widen each half to float32 (fcvtl/fcvtl2), evaluate there and
narrow the result (fcvtn/fcvtn2), so their error is the float32 bound plus one fp16 rounding.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedError
from ...isa.aarch64.operands import V
from ..vmath import (
    ERF_CLAMP, ERF_P, ERF_Q, EXP_CLAMP, EXP_POLY, GELU_CUBIC, GELU_K, LN2_HI, LN2_LO, LOG2E, LOG_SERIES,
)


def unary(em, op: str, d: int, x: int) -> None:
    """Register number d = op(x); d may equal x."""
    if op not in _LIGHT and op not in _HEAVY:
        raise UnsupportedError(f"unary op {op!r} has no AArch64 implementation")
    c = _Ctx(em)
    if op in _LIGHT:
        _LIGHT[op](c, c.r(d, em.arr), c.r(x, em.arr), em.arr)
        em.out(d)
        return
    fn = _HEAVY[op]
    if not em.fp16:
        em.out(d)
        fn(c, c.P(d), c.P(x))
        return
    lo, hi = c.tmp(), c.tmp()
    c.emit("fcvtl", c.P(lo).s4, c.P(x).h4)
    c.emit("fcvtl2", c.P(hi).s4, c.P(x).h8)
    fn(c, c.P(lo), c.P(lo))
    fn(c, c.P(hi), c.P(hi))
    em.out(d)
    c.emit("fcvtn", c.P(d).h4, c.P(lo).s4)
    c.emit("fcvtn2", c.P(d).h8, c.P(hi).s4)
    c.free(lo, hi)


class _Ctx:
    def __init__(self, em):
        self.em = em
        self.a = em.asm

    def P(self, n: int):
        return V(self.em.phys[n])

    def r(self, n: int, arr: str):
        return getattr(self.P(n), arr)

    def tmp(self) -> int:
        return self.em.regs.alloc()

    def free(self, *regs: int) -> None:
        for n in regs:
            self.em.regs.release(n)

    def emit(self, op, *args):
        self.a.emit(op, *args)

    def const(self, v, value: float, arr: str = "s4"):
        """Load a vector of `value` into register view v."""
        dt = np.float16 if arr == "h8" else np.float32
        self.a.emit("ldr", v.q, self.a.const(np.full(16 // np.dtype(dt).itemsize, value, dt), align=16))

    def bits(self, v, pattern: int):
        self.a.emit("ldr", v.q, self.a.const(np.full(4, pattern, np.uint32), align=16))


# -- on the target's own lanes -------------------------------------------------------------
def _relu(c, d, x, arr):
    t = c.tmp()
    c.emit("movi", c.P(t).d2, 0)
    c.emit("fmax", d, x, getattr(c.P(t), arr))
    c.free(t)


def _reciprocal(c, d, x, arr):
    t = c.tmp()
    c.const(c.P(t), 1.0, arr)
    c.emit("fdiv", d, getattr(c.P(t), arr), x)
    c.free(t)


_LIGHT = {
    "neg": lambda c, d, x, arr: c.emit("fneg", d, x),
    "abs": lambda c, d, x, arr: c.emit("fabs", d, x),
    "sqrt": lambda c, d, x, arr: c.emit("fsqrt", d, x),
    "relu": _relu,
    "reciprocal": _reciprocal,
}


# -- float32, on whole registers (v views) ---------------------------------------------------
def _exp(c, d, x):
    n, i, k = c.P(c.tmp()), c.P(c.tmp()), c.P(c.tmp())
    c.const(k, EXP_CLAMP[1])
    c.emit("fmin", d.s4, x.s4, k.s4)
    c.const(k, EXP_CLAMP[0])
    c.emit("fmax", d.s4, d.s4, k.s4)
    c.const(k, LOG2E)
    c.emit("fmul", n.s4, d.s4, k.s4)
    c.emit("fcvtns", i.s4, n.s4)                 # round to nearest
    c.emit("scvtf", n.s4, i.s4)
    c.const(k, LN2_HI)
    c.emit("fmls", d.s4, n.s4, k.s4)             # r = x - n ln2, in two parts
    c.const(k, LN2_LO)
    c.emit("fmls", d.s4, n.s4, k.s4)
    _horner(c, n, d, EXP_POLY, k)
    # 2^n as 2^h * 2^(n-h), h = n >> 1 (backend/vmath.py)
    c.emit("sshr", d.s4, i.s4, 1)
    c.emit("sub", i.s4, i.s4, d.s4)
    c.emit("shl", d.s4, d.s4, 23)
    c.emit("add", n.s4, n.s4, d.s4)
    c.emit("shl", i.s4, i.s4, 23)
    c.const(k, 1.0)                              # the bits of 1.0: 2^(n-h) = (n-h) << 23 + them
    c.emit("add", i.s4, i.s4, k.s4)
    c.emit("fmul", d.s4, n.s4, i.s4)
    c.free(_num(c, n), _num(c, i), _num(c, k))


def _horner(c, acc, x, coeffs, k) -> None:
    """acc = the polynomial of `coeffs` (lowest degree first) at x; k is a scratch register
    (fmla accumulates into its destination: each step is k = coeff + acc * x, then acc = k)."""
    c.const(acc, coeffs[-1])
    for coeff in reversed(coeffs[:-1]):
        c.const(k, coeff)
        c.emit("fmla", k.s4, acc.s4, x.s4)
        c.emit("mov", acc.b16, k.b16)


def _num(c, v) -> int:
    """The register file's number of v register `v`."""
    return c.em.phys.index(v.num)


def _log(c, d, x):
    ex, m, t, p, k = (c.P(c.tmp()) for _ in range(5))
    c.emit("ushr", ex.s4, x.s4, 23)
    c.bits(k, 127)
    c.emit("sub", ex.s4, ex.s4, k.s4)
    c.emit("scvtf", ex.s4, ex.s4)
    c.bits(k, 0x007FFFFF)
    c.emit("and", m.b16, x.b16, k.b16)
    c.bits(k, 0x3F800000)
    c.emit("orr", m.b16, m.b16, k.b16)           # mantissa in [1, 2)
    c.const(k, 1.0)
    c.emit("fadd", t.s4, m.s4, k.s4)
    c.emit("fsub", m.s4, m.s4, k.s4)
    c.emit("fdiv", t.s4, m.s4, t.s4)             # t = (m-1)/(m+1) in [0, 1/3)
    c.emit("fmul", m.s4, t.s4, t.s4)
    _horner(c, p, m, LOG_SERIES, k)
    c.emit("fmul", p.s4, p.s4, t.s4)
    c.emit("fadd", p.s4, p.s4, p.s4)             # log m = 2 atanh(t)
    c.const(k, math.log(2))
    c.emit("fmla", p.s4, ex.s4, k.s4)
    c.emit("mov", d.b16, p.b16)
    c.free(*(_num(c, v) for v in (ex, m, t, p, k)))


def _sigmoid(c, d, x):
    c.emit("fneg", d.s4, x.s4)
    _exp(c, d, d)
    k = c.P(c.tmp())
    c.const(k, 1.0)
    c.emit("fadd", d.s4, d.s4, k.s4)
    c.emit("fdiv", d.s4, k.s4, d.s4)
    c.free(_num(c, k))


def _tanh(c, d, x):
    c.emit("fadd", d.s4, x.s4, x.s4)
    _exp(c, d, d)
    k = c.P(c.tmp())
    c.const(k, 1.0)
    c.emit("fadd", d.s4, d.s4, k.s4)
    c.const(k, -2.0)
    c.emit("fdiv", d.s4, k.s4, d.s4)
    c.const(k, 1.0)
    c.emit("fadd", d.s4, d.s4, k.s4)
    c.free(_num(c, k))


def _gelu(c, d, x):
    t, k = c.P(c.tmp()), c.P(c.tmp())
    c.emit("fmul", t.s4, x.s4, x.s4)
    c.const(k, GELU_CUBIC)
    c.emit("fmul", t.s4, t.s4, k.s4)
    c.emit("mov", k.b16, x.b16)
    c.emit("fmla", k.s4, t.s4, x.s4)             # x + 0.044715 x^3
    c.const(t, GELU_K)
    c.emit("fmul", t.s4, t.s4, k.s4)
    c.free(_num(c, k))
    _sigmoid(c, t, t)
    c.emit("fmul", d.s4, x.s4, t.s4)
    c.free(_num(c, t))


def _erf(c, d, x):
    t, p, q = c.P(c.tmp()), c.P(c.tmp()), c.P(c.tmp())
    c.const(q, ERF_CLAMP)
    c.emit("fmin", d.s4, x.s4, q.s4)
    c.const(q, -ERF_CLAMP)
    c.emit("fmax", d.s4, d.s4, q.s4)
    c.emit("fmul", t.s4, d.s4, d.s4)
    k = c.P(c.tmp())
    _horner(c, p, t, ERF_P, k)                   # in t = x^2
    _horner(c, q, t, ERF_Q, k)
    c.emit("fmul", p.s4, p.s4, d.s4)
    c.emit("fdiv", d.s4, p.s4, q.s4)
    c.free(*(_num(c, v) for v in (t, p, q, k)))


_HEAVY = {"exp": _exp, "log": _log, "sigmoid": _sigmoid, "tanh": _tanh, "gelu": _gelu, "erf": _erf}
