"""AArch64 instruction selection for statements that compute in int32 (see backend/emitter.py
and backend/x86/integer.py, its x86 counterpart).

Tensorized contractions (a `Dot` per int32 lane) run on `sdot` / `udot` by element: the
activations' 4-byte group is a scalar `ldr s` read as `v.4b[0]`, the packed weights a whole `ldr q`
of 4 lanes x 4 bytes. Everything else integer (the packing and staging copies, weight sums,
element-wise integer arithmetic) is scalar: lane 0 of a vector register, so that the same
AdvSIMD instructions (add, mul, smax, ...) serve both. 8-bit loads are widened to int32 in lane 0
(`ldr b` clears the rest; int8 is sign-extended by a shift pair), 8-bit stores keep the low byte.
Integer arithmetic runs on `neon` only: `neon_fp16`'s 8 lanes are fp16 lanes.
"""
from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...isa.aarch64.operands import V
from ...looptree.ir import Load
from ..tensorize.registry import instruction
from ..values import Shape, Val

INT_DTYPES = frozenset({"int32", "int8", "uint8"})
ARITH = {"add": "add", "sub": "sub", "mul": "mul", "max": "smax", "min": "smin"}


def _v(em, reg: int):
    return V(em.phys[reg])


def load_into(em, reg: int, m, kind: str, shape: Shape, dtype: str) -> None:
    a = em.asm
    v = _v(em, reg)
    em._lane0.discard(reg)
    if kind == "bcast":                      # an int32, or a Dot operand's 4-byte group
        a.emit("ldr", v.s, em._mem(m, 4))
        em._lane0.add(reg)
        return
    if kind == "scalar":
        if dtype == "int32":
            a.emit("ldr", v.s, em._mem(m, 4))
        else:
            a.emit("ldr", v.b, em._mem(m, 1))
            if dtype == "int8":
                a.emit("shl", v.s4, v.s4, 24)
                a.emit("sshr", v.s4, v.s4, 24)
        return
    if shape.masked:
        if dtype != "int32":
            raise UnsupportedError("8-bit vector operands are loaded whole (a tensorized statement has no lane tail)")
        em._tail("ldr", "ld1", v, m, shape.lanes, 4)
        return
    a.emit("ldr", v.q, em._mem(m, 16))       # int32 lanes, or a Dot operand's bytes


def store(em, reg: int, m, dtype: str, shape: Shape) -> None:
    a = em.asm
    if shape.vector:
        em.vec(reg)
    v = _v(em, reg)
    if not shape.vector:
        a.emit("str", v.s if dtype == "int32" else v.b, em._mem(m, 4 if dtype == "int32" else 1))
        return
    if dtype == "int32":
        if shape.masked:
            em._tail("str", "st1", v, m, shape.lanes, 4)
        else:
            a.emit("str", v.q, em._mem(m, 16))
        return
    if shape.masked:
        raise UnsupportedError("an 8-bit vector store has no lane tail (the tensorize rewrite leaves none)")
    t = em.regs.alloc()                       # the low byte of each int32 lane (already in range)
    vt = _v(em, t)
    a.emit("uzp1", vt.h8, v.h8, v.h8)
    a.emit("uzp1", vt.b16, vt.b16, vt.b16)
    a.emit("str", vt.s, em._mem(m, 4))
    em.regs.release(t)


def load_const(em, reg: int, value, shape: Shape) -> None:
    v = _v(em, reg)
    em._lane0.discard(reg)
    value = float(value)
    if value in (float("inf"), float("-inf")):
        value = np.iinfo(np.int32).max if value > 0 else np.iinfo(np.int32).min
    if value == 0:
        em.asm.emit("movi", v.d2, 0)
    else:
        em.asm.emit("ldr", v.q, em.asm.const(np.full(4, int(value), np.int32), align=16))


def arith(em, op: str, d: int, a: int, b: Val, shape: Shape) -> None:
    if op not in ARITH:
        raise UnsupportedError(f"integer {op} is not vectorised on AArch64 (add, sub, mul, max and min are)")
    x, y = em.vec(a), em.vec(b.reg)
    em.asm.emit(ARITH[op], em.out(d), x, y)


def fma(em, acc: int, a: int, b: Val, shape: Shape) -> None:
    t = em.regs.alloc()
    em.asm.emit("mul", em.out(t), em.vec(a), em.vec(b.reg))
    em.asm.emit("add", em.vec(acc), em.vec(acc), em.vec(t))
    em.regs.release(t)


def unary(em, op: str, d: int, x: int, shape: Shape) -> None:
    if op in ("neg", "abs"):
        em.asm.emit(op, em.out(d) if d != x else em.vec(d), em.vec(x))
        return
    if op != "relu":
        raise UnsupportedError(f"unary {op} has no integer meaning on AArch64 (relu, abs and neg do)")
    zero = em.regs.alloc()
    load_const(em, zero, 0, shape)
    xv = em.vec(x)
    em.asm.emit("smax", em.out(d) if d != x else em.vec(d), xv, em.vec(zero))
    em.regs.release(zero)


def dot(em, acc: int, e, a: int, b: Val, shape: Shape) -> None:
    instr = instruction(e.instr)
    if not shape.vector or shape.masked:
        raise UnsupportedError(f"{instr.name} runs on whole vectors of its {instr.lanes} lanes")
    if instr.isa != "aarch64":
        raise UnsupportedError(f"{instr.name} is no AArch64 instruction")
    em.vec(a)                                # a lane-0 value spread first (a vector operand)
    if instr.broadcast == "b":               # the 4-byte group in lane 0, read by element
        src2 = _v(em, b.reg).b4[0]
    else:
        em.vec(b.reg)
        src2 = _v(em, b.reg).b16
    em.asm.emit(instr.mnemonic, em.vec(acc), _v(em, a).b16, src2)


def requant(em, reg: int, stmt, static: dict, shape: Shape) -> None:
    """saturate(round_half_even(float32(acc) * scale) + zero_point), clamped in float first; a
    float value (Requant.of_float) as it is."""
    a = em.asm
    rq = stmt.requant
    v = em.vec(reg)
    info = np.iinfo(em.tree.buffer(stmt.out.buffer).dtype)
    if not rq.of_float:
        a.emit("scvtf", v, v)
    t = em.regs.alloc()
    vt = _v(em, t).s4
    if isinstance(rq.scale, Load):
        s = em.load(rq.scale.access, static, shape, foldable=False)
        a.emit("fmul", v, v, em.vec(s.reg))
        em.free(s)
    elif float(rq.scale.value) != 1.0:      # (a QuantizeLinear divides in its expression)
        a.emit("ldr", _v(em, t).q, em.asm.const(np.full(4, rq.scale.value, np.float32), align=16))
        a.emit("fmul", v, v, vt)
    a.emit("ldr", _v(em, t).q, em.asm.const(np.full(4, info.min - rq.zero_point, np.float32), align=16))
    a.emit("fmax", v, v, vt)
    a.emit("ldr", _v(em, t).q, em.asm.const(np.full(4, info.max - rq.zero_point, np.float32), align=16))
    a.emit("fmin", v, v, vt)
    a.emit("fcvtns", v, v)                   # to nearest, ties to even
    if rq.zero_point:
        a.emit("ldr", _v(em, t).q, em.asm.const(np.full(4, rq.zero_point, np.int32), align=16))
        a.emit("add", v, v, vt)
    em.regs.release(t)
