"""x86 instruction selection for statements that compute in int32 (see backend/emitter.py).

Integer statements come in two kinds: tensorized contractions (a `Dot` per int32 lane, the
rewriter's output, vectorised along the instruction's lanes) and element-wise statements — the
copies that stage and shift 8-bit operands, element-wise integer arithmetic — vectorised in
int32 lanes where every access is unit-stride along the loop (analysis.vector_plan), scalar
otherwise (the weights' pack, a transpose; reductions such as the weight sums). Scalar integers
live in lane 0 of an xmm register, so that one set of vector instructions (vpaddd, vpmulld,
vpmaxsd, ...) serves both. 8-bit loads are widened to int32 (zero- or sign-extended by dtype:
`vpmovzxbd` / `vpmovsxbd`, a "widen" load) and 8-bit stores keep the low byte, as C's
conversions do (`vpmovdb`; on AVX2 a mask and two packs). int16 (the widened operands of the
exact AVX2 dot path) moves the same way: `vpmovsxwd` in, the low 16 bits out (`vpmovdw`; on
AVX2 a sign-extension of the low word and one pack). A vector tail is masked on AVX-512; AVX2
has no masked byte or word moves, so its tail's elements are inserted (`vpinsrb` / `vpinsrw`)
and extracted (`vpextrb` / `vpextrw`) one by one, never touching memory past the tail.
"""
from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...isa.x86.operands import GPR8, Mem, eax
from ...looptree.ir import Load
from ..values import Shape, Val
from .dot import emit_dot
from .values import vreg

INT_DTYPES = frozenset({"int32", "int16", "int8", "uint8"})
ARITH = {"add": "vpaddd", "sub": "vpsubd", "mul": "vpmulld", "max": "vpmaxsd", "min": "vpminsd"}
al = GPR8[0]
# per narrow dtype: (sign- or zero-extending load to int32, bytes per element)
WIDEN = {"int8": ("vpmovsxbd", 1), "uint8": ("vpmovzxbd", 1), "int16": ("vpmovsxwd", 2)}


def vec_move(em) -> str:
    """The whole-register move of integer lanes at the emitter's width."""
    return "vmovdqu32" if em.avx512 else "vmovdqu"


def const(em, value) -> Mem:
    """A vector of the int32 `value` in the constant pool (infinite reduction identities clamp)."""
    v = float(value)
    if v in (float("inf"), float("-inf")):
        v = np.iinfo(np.int32).max if v > 0 else np.iinfo(np.int32).min
    return em.const_bits(int(v))


def load_const(em, reg: int, value, shape: Shape) -> None:
    r = em.v(reg, shape)
    if float(value) == 0.0:
        em.asm.emit("vpxor" if not em.avx512 else "vpxord", r, r, r)
    else:
        em.asm.emit(vec_move(em) if shape.vector else "vmovd", r,
                    const(em, value).with_bits(em.bits if shape.vector else 32))


def load_into(em, reg: int, m: Mem, kind: str, shape: Shape, dtype: str) -> None:
    a = em.asm
    r = em.v(reg, shape)
    if kind == "bcast":                       # an int32, or a Dot operand's 4-byte group
        a.emit("vpbroadcastd", r, m.with_bits(32))
        return
    if kind == "scalar":
        if dtype == "int32":
            a.emit("vmovd", vreg(reg, 128), m.with_bits(32))
        else:
            a.emit("movzx" if dtype == "uint8" else "movsx", eax, m.with_bits(8 * WIDEN[dtype][1]))
            a.emit("vmovd", vreg(reg, 128), eax)
        return
    if kind == "widen":                       # bytes or words, one per int32 lane
        widen, size = WIDEN[dtype]
        narrow = em.bits // 4 * size          # the lanes' bytes, in bits
        if not shape.masked:
            a.emit(widen, r, m.with_bits(narrow))
        elif em.avx512:                       # a byte-masked load suppresses faults past the tail
            move = "vmovdqu8" if size == 1 else "vmovdqu16"
            a.emit(move, vreg(reg, narrow).masked(em.mask(shape.lanes), zero=True), m.with_bits(narrow))
            a.emit(widen, r, vreg(reg, narrow))
        else:                                 # AVX2: the tail's elements one by one, nothing past it
            x = vreg(reg, 128)
            a.emit("vpxor", x, x, x)
            for i in range(shape.lanes):
                a.emit("vpinsrb" if size == 1 else "vpinsrw", x, x, (m + i * size).with_bits(8 * size), i)
            a.emit(widen, r, x)
        return
    if shape.masked:
        if dtype != "int32":
            raise UnsupportedError("8-bit vector operands are loaded whole (a tensorized statement has no lane tail)")
        if em.avx512:
            a.emit("vmovdqu32", vreg(reg, 512).masked(em.mask(shape.lanes), zero=True), m.with_bits(512))
        else:
            a.emit("vmaskmovps", vreg(reg, 256), em.mask(shape.lanes), m.with_bits(256))
        return
    a.emit(vec_move(em), r, m.with_bits(em.bits))      # int32 lanes, or a Dot operand's bytes


def load_as_float(em, reg: int, m: Mem, kind: str, shape: Shape, dtype: str) -> None:
    """An integer read of a float32 statement: its int32 value(s), converted exactly as numpy's
    astype(float32) does (vcvtdq2ps rounds an int32 beyond 2**24 to nearest even)."""
    r = em.v(reg, shape)
    if kind == "bcast" and dtype != "int32":      # one narrow element, not four bytes' worth
        load_into(em, reg, m, "scalar", shape, dtype)
        em.asm.emit("vpbroadcastd", r, vreg(reg, 128))
    else:
        load_into(em, reg, m, kind, shape, dtype)
    em.asm.emit("vcvtdq2ps", r, r)


def store(em, reg: int, m: Mem, dtype: str, shape: Shape) -> None:
    a = em.asm
    if not shape.vector:
        if dtype == "int32":
            a.emit("vmovd", m.with_bits(32), vreg(reg, 128))
        elif dtype == "int16":
            a.emit("vpextrw", m.with_bits(16), vreg(reg, 128), 0)
        else:
            a.emit("vmovd", eax, vreg(reg, 128))
            a.emit("mov", m.with_bits(8), al)
        return
    if dtype == "int32":
        if not shape.masked:
            a.emit(vec_move(em), m.with_bits(em.bits), em.v(reg, shape))
        elif em.avx512:
            a.emit("vmovdqu32", m.with_bits(512).masked(em.mask(shape.lanes)), vreg(reg, 512))
        else:
            a.emit("vmaskmovps", m.with_bits(256), em.mask(shape.lanes), em.v(reg, shape))
        return
    # int32 lanes to their low bytes (words), as the scalar store does
    size = WIDEN[dtype][1]
    if em.avx512:                                             # vpmovdb / vpmovdw truncate
        dst = m.with_bits(em.bits // 4 * size)
        if shape.masked:
            dst = dst.masked(em.mask(shape.lanes))
        a.emit("vpmovdb" if size == 1 else "vpmovdw", dst, vreg(reg, 512))
        return
    # AVX2 packs saturate: bring each lane first into the range they pass unchanged (its low byte,
    # 0..255, or its low word sign-extended)
    t = vreg(em.regs.alloc(), 256)
    if size == 1:
        a.emit("vpand", t, vreg(reg, 256), em.const_bits(0xFF).with_bits(256))
    else:
        a.emit("vpslld", t, vreg(reg, 256), 16)
        a.emit("vpsrad", t, t, 16)
    a.emit("vpackssdw", t, t, t)                              # words 0-3 | 4-7, in each 128-bit half
    a.emit("vpermq", t, t, 0x08)                              # words 0-7 in the low half
    if size == 1:
        a.emit("vpackuswb", t.x, t.x, t.x)                    # bytes 0-7
    if not shape.masked:
        a.emit("vmovq" if size == 1 else "vmovdqu", m.with_bits(64 * size), t.x)
    else:                                                     # a tail: its elements one by one
        for i in range(shape.lanes):
            a.emit("vpextrb" if size == 1 else "vpextrw", (m + i * size).with_bits(8 * size), t.x, i)
    em.regs.release(t.num)


def arith(em, op: str, d: int, a: int, b: Val, shape: Shape) -> None:
    if op not in ARITH:
        raise UnsupportedError(f"integer {op} is not vectorised on x86 (add, sub, mul, max and min are)")
    em.asm.emit(ARITH[op], em.v(d, shape), em.v(a, shape), em.operand(b, shape))


def fma(em, acc: int, a: int, b: Val, shape: Shape) -> None:
    t = em.regs.alloc()
    em.asm.emit("vpmulld", em.v(t, shape), em.v(a, shape), em.operand(b, shape))
    em.asm.emit("vpaddd", em.v(acc, shape), em.v(acc, shape), em.v(t, shape))
    em.regs.release(t)


def unary(em, op: str, d: int, x: int, shape: Shape) -> None:
    a = em.asm
    if op == "relu":
        a.emit("vpmaxsd", em.v(d, shape), em.v(x, shape), const(em, 0).with_bits(em.bits if shape.vector else 128))
    elif op == "abs":
        a.emit("vpabsd", em.v(d, shape), em.v(x, shape))
    elif op == "neg":
        t = em.regs.alloc()
        load_const(em, t, 0, shape)
        a.emit("vpsubd", em.v(d, shape), em.v(t, shape), em.v(x, shape))
        em.regs.release(t)
    else:
        raise UnsupportedError(f"unary {op} has no integer meaning on x86 (relu, abs and neg do)")


def dot(em, acc: int, e, a: int, b: Val, shape: Shape) -> None:
    from ..tensorize.registry import instruction

    instr = instruction(e.instr)
    if not shape.vector or shape.masked:
        raise UnsupportedError(f"{instr.name} runs on whole vectors of its {instr.lanes} lanes: vectorise the "
                               "loop over them (the tensorize rewrite places it innermost)")
    if instr.isa != "x86_64" or instr.vector_bits != em.bits:
        raise UnsupportedError(f"{instr.name} is no {em.bits}-bit x86 instruction")
    loaded = None
    # the byte-widening path reads registers; vpmaddwd has no embedded broadcast
    if b.reg is None and instr.mnemonic == "vpmaddwd" and (instr.k == 4 or b.mem.broadcast):
        b = loaded = em.to_reg(b, shape)
    scratch = [em.regs.alloc() for _ in range(instr.scratch)]
    mask = em.const_bits(0x00FF00FF).with_bits(em.bits)
    emit_dot(em.asm, instr, em.v(acc, shape), em.v(a, shape), em.operand(b, shape),
             [em.v(r, shape) for r in scratch], mask)
    for r in scratch:
        em.regs.release(r)
    if loaded is not None:
        em.free(loaded)


def requant(em, reg: int, stmt, static: dict, shape: Shape) -> None:
    """saturate(round_half_even(float32(acc) * scale) + zero_point), clamped in float before the
    conversion (as MLAS does: equal for integer bounds, and never out of int32's range); a float
    value (Requant.of_float) as it is."""
    a = em.asm
    rq = stmt.requant
    v = em.v(reg, shape)
    info = np.iinfo(em.tree.buffer(stmt.out.buffer).dtype)
    bits = em.bits if shape.vector else 128
    if not rq.of_float:
        a.emit("vcvtdq2ps", v, v)
    if isinstance(rq.scale, Load):
        s = em.load(rq.scale.access, static, shape, foldable=False)
        a.emit("vmulps", v, v, em.v(s.reg, shape))
        em.free(s)
    elif float(rq.scale.value) != 1.0:      # (a QuantizeLinear divides in its expression)
        a.emit("vmulps", v, v, em.const(float(rq.scale.value)).with_bits(bits))
    a.emit("vmaxps", v, v, em.const(float(info.min - rq.zero_point)).with_bits(bits))
    a.emit("vminps", v, v, em.const(float(info.max - rq.zero_point)).with_bits(bits))
    a.emit("vcvtps2dq", v, v)                # rounds half to even (MXCSR's default mode)
    if rq.zero_point:
        a.emit("vpaddd", v, v, const(em, rq.zero_point).with_bits(bits))
