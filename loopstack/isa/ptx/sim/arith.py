"""Integer and floating-point arithmetic, comparisons and selection.

Integers wrap as the hardware's do; a float result is computed exactly in float64 (or as the
round-to-odd of the exact value) and rounded once to the instruction's type, with .ftz and .sat
applied as the PTX ISA says.  The .approx functions (ex2, lg2, rcp, rsqrt) are computed exactly
and rounded once: within the hardware's error bound, not bit-equal to it.
"""
from __future__ import annotations

import numpy as np

from ....errors import SimulationError
from .numeric import (SINT, SMALLEST_NORMAL, TYPES, UINT, PType, decode, element_format, encode, flush_subnormal,
                      fma_odd, saturate01, two_sum)
from .ops import builder, only, operand_count, types_and_flags, unsupported
from .parse import Pair

def float_post(t, flags):
    """.ftz on inputs/outputs and .sat on the output of a float op, as functions of float64 arrays."""
    fmt = element_format(t)
    ftz = "ftz" in flags and fmt in SMALLEST_NORMAL
    tiny = SMALLEST_NORMAL.get(fmt, 0.0)

    def pre(x):
        return flush_subnormal(x, tiny) if ftz else x

    def post(x):
        if "sat" in flags:
            x = saturate01(x)
        return x
    return pre, post, ftz, tiny


def float_op(instr, B, t, flags, nargs, compute, allowed=("rn", "ftz", "sat")):
    """A float instruction d = compute(a, b, ...) over float64, rounded once to `t`."""
    only(instr, flags, allowed)
    operand_count(instr, nargs + 1)
    reads = [B.ops.reader(instr, op, t) for op in instr.operands[1:]]
    write = B.ops.writer(instr, instr.operands[0], t)
    pre, post, ftz, tiny = float_post(t, flags)

    def run(mask):
        args = [pre(decode(t, r())) for r in reads]
        x = post(compute(*args))
        out = encode(t, x)
        if ftz:
            out = encode(t, flush_subnormal(decode(t, out), tiny))
        write(out, mask)
    return run


FLOAT_BINARY_F64 = {"add": np.add, "sub": np.subtract}   # IEEE float64: one rounding already
FLOAT_BINARY = {
    "add": lambda a, b: two_sum(a, b),
    "sub": lambda a, b: two_sum(a, -b),
    "mul": lambda a, b: a * b,               # exact in float64 for f16/bf16/f32 inputs
    "min": lambda a, b: np.fmin(a, b),
    "max": lambda a, b: np.fmax(a, b),
}


# ---- integer helpers --------------------------------------------------------------------------

def mul_hi(a, b, t: PType):
    """The high half of the double-width product a*b, for integers of type t."""
    if t.size < 8:
        wide = (SINT if t.signed else UINT)[2 * t.size]
        return ((a.astype(wide) * b.astype(wide)) >> (8 * t.size)).astype(t.view)
    # 64 x 64 -> high 64 bits through 32-bit limbs, unsigned; then correct for signs
    ua, ub = np.asarray(a).astype(np.uint64), np.asarray(b).astype(np.uint64)
    m32 = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    al, ah, bl, bh = ua & m32, ua >> s32, ub & m32, ub >> s32
    ll, lh, hl, hh = al * bl, al * bh, ah * bl, ah * bh
    mid = (ll >> s32) + (lh & m32) + (hl & m32)
    hi = hh + (lh >> s32) + (hl >> s32) + (mid >> s32)
    if t.signed:
        # signed high half = unsigned high half - (a < 0 ? b : 0) - (b < 0 ? a : 0), mod 2**64
        hi = hi - np.where(np.asarray(a) < 0, ub, 0).astype(np.uint64) \
            - np.where(np.asarray(b) < 0, ua, 0).astype(np.uint64)
    return hi.view(t.view) if hi.ndim else t.view.type(hi)


def int_div(instr, B, a, b, t, mask, rem):
    """div/rem truncating toward zero; a zero divisor in an executing lane is a fault (the
    hardware returns an unspecified value, which no kernel should rely on)."""
    a, b = np.broadcast_to(a, (B.n,)), np.broadcast_to(b, (B.n,))
    zero = (b == 0) & mask
    if zero.any():
        B.fault.raise_for(instr, int(np.argmax(zero)), "integer division by zero")
    b = np.where(b == 0, 1, b).astype(t.view)
    if not t.signed:
        return a % b if rem else a // b
    u = UINT[t.size]
    zero_u = u.type(0)
    ua = np.where(a < 0, zero_u - a.astype(u), a.astype(u))      # magnitudes as unsigned: INT_MIN fits
    ub = np.where(b < 0, zero_u - b.astype(u), b.astype(u))
    if rem:
        r = ua % ub
        return np.where(a < 0, zero_u - r, r).astype(t.view)
    q = ua // ub
    return np.where((a < 0) != (b < 0), zero_u - q, q).astype(t.view)


def shift(a, amount, t: PType, left):
    amount = np.asarray(amount).astype(np.uint64)
    big = amount >= t.bits
    s = np.where(big, 0, amount).astype(t.view if not t.signed else UINT[t.size]).astype(t.view)
    if left:
        return np.where(big, 0, a << s).astype(t.view)
    if t.signed:
        return np.where(big, np.where(a < 0, -1, 0), a >> s).astype(t.view)
    return np.where(big, 0, a >> s).astype(t.view)


# ---- arithmetic ---------------------------------------------------------------------------------

@builder("add", "sub", "mul", "min", "max", "and", "or", "xor", "div", "rem", "shl", "shr")
def binary(instr, B):
    types, flags = types_and_flags(instr)
    if len(types) != 1:
        unsupported(instr, "one type suffix expected")
    t = types[0]
    op = instr.opcode
    if t.kind in ("f", "bf", "f16x2", "bf16x2"):
        if op == "div":   # .approx and .full are computed as .rn, within their error bounds
            return float_op(instr, B, t, flags, 2, np.divide, ("rn", "approx", "full", "ftz", "sat"))
        if op in ("min", "max"):
            return float_op(instr, B, t, flags, 2, FLOAT_BINARY[op], ("ftz",))
        if op not in FLOAT_BINARY:
            unsupported(instr)
        table = FLOAT_BINARY_F64 if t.name == "f64" and op in FLOAT_BINARY_F64 else FLOAT_BINARY
        return float_op(instr, B, t, flags, 2, table[op])
    operand_count(instr, 3)
    if t.kind == "pred":
        if op not in ("and", "or", "xor"):
            unsupported(instr)
        fn = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op]
        ra, rb = (B.ops.reader(instr, o, t) for o in instr.operands[1:])
        w = B.ops.writer(instr, instr.operands[0], t)
        return lambda mask: w(fn(ra(), rb()), mask)
    mode = "lo"
    if op == "mul":
        mode = next((m for m in ("lo", "hi", "wide") if m in flags), None)
        if mode is None:
            unsupported(instr, "mul on integers needs .lo, .hi or .wide")
        flags = flags - {mode}
    only(instr, flags, {"sat"} if op in ("add", "sub") and t.name == "s32" else set())
    dt = TYPES[f"{t.name[0]}{2 * t.bits}"] if mode == "wide" else t
    ra = B.ops.reader(instr, instr.operands[1], t)
    rb = B.ops.reader(instr, instr.operands[2], TYPES["u32"] if op in ("shl", "shr") else t)
    w = B.ops.writer(instr, instr.operands[0], dt)

    def compute(a, b, mask):
        if op == "add":
            return (np.clip(a.astype(np.int64) + b, -2**31, 2**31 - 1) if "sat" in flags else a + b)
        if op == "sub":
            return (np.clip(a.astype(np.int64) - b, -2**31, 2**31 - 1) if "sat" in flags else a - b)
        if op == "mul":
            if mode == "wide":
                return np.asarray(a).astype(dt.view) * np.asarray(b).astype(dt.view)
            return mul_hi(a, b, t) if mode == "hi" else a * b
        if op in ("div", "rem"):
            return int_div(instr, B, np.asarray(a), b, t, mask, op == "rem")
        if op in ("shl", "shr"):
            return shift(np.asarray(a), b, t, op == "shl")
        return {"min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
                "xor": np.bitwise_xor}[op](a, b)

    def run(mask):
        out = np.asarray(compute(ra(), rb(), mask)).astype(dt.view)
        w(out, mask)
    return run


@builder("prmt")
def permute(instr, B):
    """prmt.b32 d, a, b, c: byte i of d is byte c[4i+2:4i] of {b, a} (a the low word), or, where
    c[4i+3] is set, that byte's sign bit replicated (PTX ISA, prmt's default mode)."""
    types, flags = types_and_flags(instr)
    if [t.name for t in types] != ["b32"] or flags:
        unsupported(instr, "only the default mode of prmt.b32")
    operand_count(instr, 4)
    u32 = TYPES["u32"]
    ra, rb, rc = (B.ops.reader(instr, o, u32) for o in instr.operands[1:])
    w = B.ops.writer(instr, instr.operands[0], u32)

    def run(mask):
        pair = np.asarray(ra()).astype(np.uint64) | (np.asarray(rb()).astype(np.uint64) << np.uint64(32))
        sel = np.asarray(rc()).astype(np.uint64)
        out = np.zeros(pair.shape, np.uint64)
        for i in range(4):
            nib = (sel >> np.uint64(4 * i)) & np.uint64(0xF)
            byte = (pair >> (np.uint64(8) * (nib & np.uint64(7)))) & np.uint64(0xFF)
            sign = np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0))
            out |= np.where(nib & np.uint64(8), sign, byte) << np.uint64(8 * i)
        w(out.astype(np.uint32), mask)
    return run


@builder("mad", "fma")
def ternary(instr, B):
    types, flags = types_and_flags(instr)
    t = types[0]
    if t.kind in ("f", "bf", "f16x2", "bf16x2"):
        if t.name == "f64":
            unsupported(instr, "a fused f64 multiply-add is not exact in float64")
        return float_op(instr, B, t, flags, 3, fma_odd)
    mode = next((m for m in ("lo", "hi", "wide") if m in flags), None)
    if mode is None:
        unsupported(instr, "mad on integers needs .lo, .hi or .wide")
    only(instr, flags - {mode}, set())
    operand_count(instr, 4)
    dt = TYPES[f"{t.name[0]}{2 * t.bits}"] if mode == "wide" else t
    ra, rb = (B.ops.reader(instr, o, t) for o in instr.operands[1:3])
    rc = B.ops.reader(instr, instr.operands[3], dt)
    w = B.ops.writer(instr, instr.operands[0], dt)

    def run(mask):
        a, b, c = np.asarray(ra()), np.asarray(rb()), rc()
        if mode == "wide":
            p = a.astype(dt.view) * b.astype(dt.view)
        elif mode == "hi":
            p = mul_hi(a, b, t)
        else:
            p = a * b
        w(np.asarray(p + c).astype(dt.view), mask)
    return run


FLOAT_UNARY = {                          # neg and abs are sign-bit operations, exact on NaN too
    "ex2": lambda x: np.exp2(x),
    "lg2": lambda x: np.log2(x),
    "rcp": lambda x: 1.0 / x,
    "sqrt": lambda x: np.sqrt(x),
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
}


@builder("neg", "abs", "not", "ex2", "lg2", "rcp", "sqrt", "rsqrt", "cnot")
def unary(instr, B):
    types, flags = types_and_flags(instr)
    t = types[0]
    op = instr.opcode
    operand_count(instr, 2)
    if t.kind in ("f", "bf", "f16x2", "bf16x2") and op not in ("neg", "abs"):
        if op not in FLOAT_UNARY:
            unsupported(instr)
        # .approx functions are computed exactly and rounded once: within the hardware's error bound
        return float_op(instr, B, t, flags, 1, FLOAT_UNARY[op], ("rn", "approx", "ftz"))
    ra = B.ops.reader(instr, instr.operands[1], t)
    w = B.ops.writer(instr, instr.operands[0], t)
    if t.kind in ("f", "bf", "f16x2", "bf16x2"):
        only(instr, flags, {"ftz"})
        # sign-bit arithmetic on the raw bits (per half for the packed types)
        ut = UINT[t.size]
        sign = {2: 0x8000, 4: 0x80000000, 8: 0x8000000000000000}[t.size]
        if t.kind in ("f16x2", "bf16x2"):
            sign = 0x80008000
        sign = ut.type(sign)

        tiny = SMALLEST_NORMAL.get(element_format(t)) if "ftz" in flags else None

        def run(mask):
            value = np.atleast_1d(ra())
            if tiny is not None and t.kind == "f":
                value = flush_subnormal(value, tiny)
            bits = value.view(ut)
            out = bits ^ sign if op == "neg" else bits & ~sign
            w(out.view(t.view), mask)
        return run
    only(instr, flags, set())
    if t.kind == "pred":
        if op != "not":
            unsupported(instr)
        return lambda mask: w(~ra(), mask)
    fn = {"neg": np.negative, "abs": np.abs, "not": np.invert,
          "cnot": lambda a: (a == 0).astype(t.view)}[op]
    if op in ("neg", "abs") and not t.signed:
        unsupported(instr, f"{op} needs a signed type")
    return lambda mask: w(np.asarray(fn(ra())).astype(t.view), mask)


# ---- comparisons and selection ---------------------------------------------------------------

INT_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
               "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}


def float_compare(cmp, a, b):
    nan = np.isnan(a) | np.isnan(b)
    if cmp == "num":
        return ~nan
    if cmp == "nan":
        return nan
    base = cmp[:-1] if cmp.endswith("u") and cmp != "lu" else cmp
    fn = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
          "ge": np.greater_equal}[base]
    r = fn(a, b)
    return (r | nan) if base != cmp else (r & ~nan)


@builder("setp")
def setp(instr, B):
    types, flags = types_and_flags(instr)
    t = types[0]
    cmp = instr.mods[0]
    boolop = next((m for m in ("and", "or", "xor") if m in flags), None)
    only(instr, flags - {cmp, boolop}, {"ftz"})
    if len(instr.operands) != (4 if boolop else 3):
        raise SimulationError(f"{instr.where()}: setp{' with .' + boolop if boolop else ''} "
                              f"takes {4 if boolop else 3} operands")
    dest = instr.operands[0]
    first, second = (dest.first, dest.second) if isinstance(dest, Pair) else (dest, None)
    pred = TYPES["pred"]
    w1 = B.ops.writer(instr, first, pred)
    w2 = B.ops.writer(instr, second, pred) if second is not None else None
    is_float = t.kind in ("f", "bf")
    if t.kind in ("f16x2", "bf16x2"):
        unsupported(instr, "packed comparisons")
    if is_float:
        if cmp not in ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"):
            unsupported(instr, f"comparison .{cmp}")
    elif cmp not in INT_COMPARE:
        unsupported(instr, f"comparison .{cmp}")
    elif cmp in ("lo", "ls", "hi", "hs"):
        t = TYPES[f"u{t.bits}"]             # unsigned comparison of the bits
    elif cmp not in ("eq", "ne") and t.kind == "b":
        unsupported(instr, f".{cmp} on untyped bits")
    ra, rb = (B.ops.reader(instr, o, t) for o in instr.operands[1:3])
    rc = B.ops.reader(instr, instr.operands[3], pred) if boolop else None
    combine = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop)
    pre, _, _, _ = float_post(t, flags) if is_float else (None, None, None, None)

    def run(mask):
        if is_float:
            r = float_compare(cmp, pre(decode(t, ra())), pre(decode(t, rb())))
        else:
            r = INT_COMPARE[cmp](ra(), rb())
        r = np.broadcast_to(r, (B.n,))
        if combine is None:
            w1(r, mask)
            if w2 is not None:
                w2(~r, mask)
        else:
            c = rc()
            w1(combine(r, c), mask)
            if w2 is not None:
                w2(combine(~r, c), mask)
    return run


@builder("selp")
def selp(instr, B):
    types, flags = types_and_flags(instr)
    only(instr, flags, set())
    operand_count(instr, 4)
    t = types[0]
    ra, rb = (B.ops.reader(instr, o, t) for o in instr.operands[1:3])
    rc = B.ops.reader(instr, instr.operands[3], TYPES["pred"])
    w = B.ops.writer(instr, instr.operands[0], t)
    return lambda mask: w(np.where(rc(), ra(), rb()).astype(t.view), mask)
