"""Moves (with packing and unpacking), conversions between types, and address conversion."""
from __future__ import annotations

import numpy as np

from ....errors import SimulationError
from .numeric import (SMALLEST_NORMAL, TYPES, decode, element_format, encode, f32_to_tf32, flush_subnormal,
                      float_to_int, int_to_float, round_to, saturate01, saturate_int)
from .ops import builder, only, operand_count, types_and_flags, unsupported
from .parse import Vec


@builder("mov")
def mov(instr, B):
    types, flags = types_and_flags(instr)
    only(instr, flags, set())
    operand_count(instr, 2)
    t = types[0]
    dst, src = instr.operands
    if isinstance(src, Vec) or isinstance(dst, Vec):
        return pack(instr, B, t, dst, src)
    r = B.ops.reader(instr, src, t)
    w = B.ops.writer(instr, dst, t)
    return lambda mask: w(r(), mask)


def pack(instr, B, t, dst, src):
    """mov.b32 %r, {%h0, %h1} packs (the first element in the low bits); the reverse unpacks."""
    if t.kind != "b" or t.size < 4:
        unsupported(instr, "pack/unpack needs .b32 or .b64")
    vec, whole = (src, dst) if isinstance(src, Vec) else (dst, src)
    k = len(vec.items)
    if t.size % k or k < 2:
        raise SimulationError(f"{instr.where()}: {k} parts do not pack into .{t.name}")
    part = TYPES[f"b{t.bits // k}"]
    shift_bits = [t.view.type(part.bits * i) for i in range(k)]
    if isinstance(src, Vec):
        reads = [B.ops.reader(instr, o, part) for o in vec.items]
        w = B.ops.writer(instr, whole, t)

        def run(mask):
            acc = np.zeros(B.n, dtype=t.view)
            for read, s in zip(reads, shift_bits):
                acc |= np.asarray(read()).astype(t.view) << s
            w(acc, mask)
        return run
    read = B.ops.reader(instr, whole, t)
    writes = [B.ops.writer(instr, o, part) for o in vec.items]

    def run(mask):
        v = np.broadcast_to(read(), (B.n,))
        for write, s in zip(writes, shift_bits):
            write((v >> s).astype(part.view), mask)
    return run


@builder("cvt")
def cvt(instr, B):
    types, flags = types_and_flags(instr)
    if len(types) != 2:
        unsupported(instr, "cvt needs a destination and a source type")
    dt, st = types
    if dt.kind == "tf32":
        return _to_tf32(instr, B, st, flags)
    rounding = next((m for m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi") if m in flags), None)
    only(instr, flags - {rounding}, {"sat", "ftz", "relu"})
    d_float = dt.kind in ("f", "bf", "f16x2", "bf16x2")
    s_float = st.kind in ("f", "bf")
    sat = "sat" in flags
    w = B.ops.writer(instr, instr.operands[0], dt)
    if dt.kind in ("f16x2", "bf16x2"):
        # cvt.rn.f16x2.f32 d, a, b: a goes to the upper half, b to the lower
        operand_count(instr, 3)
        if st.name != "f32" or rounding != "rn":
            unsupported(instr)
        ra, rb = (B.ops.reader(instr, o, st) for o in instr.operands[1:])
        fmt = "f16" if dt.kind == "f16x2" else "bf16"

        def run_pack(mask):
            a, b = (np.broadcast_to(r(), (B.n,)).astype(np.float64) for r in (ra, rb))
            if "relu" in flags:
                a, b = np.where(a < 0, 0.0, a), np.where(b < 0, 0.0, b)
            lo = np.asarray(round_to(b, fmt)).view(np.uint16).astype(np.uint32)
            hi = np.asarray(round_to(a, fmt)).view(np.uint16).astype(np.uint32)
            w(lo | (hi << np.uint32(16)), mask)
        return run_pack
    operand_count(instr, 2)
    ra = B.ops.reader(instr, instr.operands[1], st)
    ftz = "ftz" in flags

    def convert(v):
        v = np.asarray(v)
        if d_float and s_float:
            x = decode(st, v)
            if ftz and element_format(st) in SMALLEST_NORMAL:
                x = flush_subnormal(x, SMALLEST_NORMAL[element_format(st)])
            if rounding in ("rni", "rzi", "rmi", "rpi"):
                x = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[rounding](x)
            elif dt.size < st.size and rounding is None:
                unsupported(instr, "a narrowing float conversion needs a rounding modifier")
            if "relu" in flags:
                x = np.where(x < 0, 0.0, x)
            if sat:
                x = saturate01(x)
            out = encode(dt, x, rounding if rounding in ("rz", "rm", "rp") else "rn")
            if ftz and element_format(dt) in SMALLEST_NORMAL:
                out = encode(dt, flush_subnormal(decode(dt, out), SMALLEST_NORMAL[element_format(dt)]))
            return out
        if s_float:                       # float -> integer: rounds, saturates
            if rounding not in ("rni", "rzi", "rmi", "rpi"):
                unsupported(instr, "float to integer needs .rni/.rzi/.rmi/.rpi")
            x = decode(st, v)
            if ftz:
                x = flush_subnormal(x, SMALLEST_NORMAL.get(element_format(st), 0.0))
            return float_to_int(x, dt, rounding)
        if d_float:                       # integer -> float
            if rounding not in ("rn", "rz", "rm", "rp"):
                unsupported(instr, "integer to float needs .rn, .rz, .rm or .rp")
            x = int_to_float(v, element_format(dt), rounding)
            if sat:
                x = encode(dt, saturate01(decode(dt, x)))
            return x
        # integer -> integer: truncate or extend; .sat clamps to the destination's range
        if sat:
            return saturate_int(v.astype(np.float64) if v.dtype.itemsize == 8 else v.astype(np.int64), dt)
        return v.astype(dt.view)

    def run(mask):
        w(convert(np.broadcast_to(ra(), (B.n,))), mask)
    return run


def _to_tf32(instr, B, st, flags):
    """cvt.rna.tf32.f32 d, a: a rounded to tf32 (numeric.f32_to_tf32), as float32 bits."""
    operand_count(instr, 2)
    if st.name != "f32" or flags != {"rna"}:
        unsupported(instr, "cvt.rna.tf32.f32 (no other rounding or source)")
    w = B.ops.writer(instr, instr.operands[0], TYPES["b32"])
    ra = B.ops.reader(instr, instr.operands[1], st)

    def run(mask):
        w(f32_to_tf32(np.broadcast_to(ra(), (B.n,))), mask)
    return run


@builder("cvta")
def cvta(instr, B):
    if instr.mods[:1] == ("to",):
        space = instr.mods[1]
    else:
        space = instr.mods[0]
    if space != "global":
        unsupported(instr, "only global addresses convert (the interpreter's generic space is global)")
    t = TYPES[instr.mods[-1]]
    r = B.ops.reader(instr, instr.operands[1], t)
    w = B.ops.writer(instr, instr.operands[0], t)
    return lambda mask: w(r(), mask)
