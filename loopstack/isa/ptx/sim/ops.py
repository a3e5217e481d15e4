"""The per-thread instructions: one builder per opcode turns a parsed instruction into a function
of the mask of lanes that execute it.  Values are computed for every lane of the CTA at once
(numpy, vectorised) and stored into the lanes of the mask only; memory is touched for those lanes
alone.  Integer arithmetic wraps as the hardware's; floating point rounds once (see numeric.py).
"""
from __future__ import annotations

import numpy as np

from ....errors import SimulationError
from .numeric import (SINT, SMALLEST_NORMAL, TYPES, UINT, PType, bf16_to_f32, f32_to_bf16, flush_subnormal,
                      float_to_int, fma_odd, int_to_float, round_to, saturate01, saturate_int, two_sum)
from .parse import Imm, Pair, Reg, Sink, Vec

BUILDERS: dict = {}


def builder(*opcodes):
    def register(fn):
        for op in opcodes:
            BUILDERS[op] = fn
        return fn
    return register


def unsupported(instr, why=""):
    raise SimulationError(f"{instr.where()}: unsupported: {instr.full}{' (' + why + ')' if why else ''}")


def types_and_flags(instr):
    types = [TYPES[m] for m in instr.mods if m in TYPES]
    flags = {m for m in instr.mods if m not in TYPES}
    return types, flags


def only(instr, flags, allowed):
    extra = set(flags) - set(allowed)
    if extra:
        unsupported(instr, "modifier ." + ", .".join(sorted(extra)))


def operand_count(instr, n):
    if len(instr.operands) != n:
        raise SimulationError(f"{instr.where()}: expected {n} operands, found {len(instr.operands)}")


# ---- floats: decode to float64, compute, round once -------------------------------------------

def decode(t: PType, v):
    """Operand bits/values of float type `t` -> float64 array (packed types: two per lane, low first)."""
    v = np.asarray(v)
    if t.kind == "f":
        return v.astype(np.float64)
    if t.kind == "bf":
        return bf16_to_f32(v).astype(np.float64)
    if t.kind == "f16x2":
        return np.ascontiguousarray(np.broadcast_to(v, v.shape or (1,)).astype(np.uint32)).view(np.float16).astype(np.float64)
    if t.kind == "bf16x2":
        halves = np.ascontiguousarray(np.broadcast_to(v, v.shape or (1,)).astype(np.uint32)).view(np.uint16)
        return bf16_to_f32(halves).astype(np.float64)
    raise ValueError(t.name)


def encode(t: PType, x, mode="rn"):
    """float64 (exact or round-to-odd) -> values/bits of float type `t`."""
    if t.kind == "f":
        return round_to(x, t.name, mode)
    if t.kind == "bf":
        return round_to(x, "bf16", mode)
    if t.kind == "f16x2":
        return np.ascontiguousarray(round_to(x, "f16", mode)).view(np.uint32)
    if t.kind == "bf16x2":
        return np.ascontiguousarray(round_to(x, "bf16", mode)).view(np.uint32)
    raise ValueError(t.name)


def element_format(t: PType) -> str:
    return {"f16x2": "f16", "bf16x2": "bf16", "bf": "bf16"}.get(t.kind, t.name)


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


def float_op(instr, B, t, flags, nargs, compute):
    """A float instruction d = compute(a, b, ...) over float64, rounded once to `t`."""
    only(instr, flags, {"rn", "ftz", "sat", "approx", "full"})
    operand_count(instr, nargs + 1)
    reads = [B.ops.reader(instr, op, t) for op in instr.operands[1:]]
    write = B.ops.writer(instr, instr.operands[0], t)
    pre, post, ftz, tiny = float_post(t, flags)
    fmt = element_format(t)

    def run(mask):
        args = [pre(decode(t, r())) for r in reads]
        x = post(compute(*args))
        out = encode(t, x)
        if ftz:
            out = encode(t, flush_subnormal(decode(t, out), tiny))
        write(np.broadcast_to(out, (B.n,)) if np.ndim(out) == 0 else out, mask)
    run.fmt = fmt
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
        hi = hi - np.where(np.asarray(a) < 0, ub, 0).astype(np.uint64) - np.where(np.asarray(b) < 0, ua, 0).astype(np.uint64)
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
        if op == "div":
            return float_op(instr, B, t, flags, 2, lambda a, b: np.divide(a, b))
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
    if op == "mul" or op == "mad":
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
        w(np.broadcast_to(out, (B.n,)), mask)
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
        w(np.broadcast_to(np.asarray(p + c).astype(dt.view), (B.n,)), mask)
    return run


FLOAT_UNARY = {
    "neg": None, "abs": None,            # sign-bit operations, exact on every value incl. NaN
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
        return float_op(instr, B, t, flags, 1, FLOAT_UNARY[op])
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
            w(np.broadcast_to(out.view(t.view), (B.n,)), mask)
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
    return lambda mask: w(np.broadcast_to(np.asarray(fn(ra())).astype(t.view), (B.n,)), mask)


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


# ---- moves and conversions ---------------------------------------------------------------------

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
    return lambda mask: w(np.broadcast_to(r(), (B.n,)), mask)


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
        w(np.broadcast_to(convert(np.broadcast_to(ra(), (B.n,))), (B.n,)), mask)
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
    return lambda mask: w(np.broadcast_to(r(), (B.n,)), mask)


# ---- memory --------------------------------------------------------------------------------------

SPACES = ("global", "shared", "param")
CACHE_HINTS = {"ca", "cg", "cs", "lu", "cv", "nc", "wb", "wt", "volatile", "relaxed", "weak", "cta", "gpu", "sys",
               "L1::no_allocate", "L2::64B", "L2::128B", "L2::256B"}


def memory_access(instr, B):
    """(space, element type, vector length, the space's ByteSpace or None for param)."""
    types, flags = types_and_flags(instr)
    spaces = [m.split("::")[0] for m in instr.mods if m.split("::")[0] in SPACES + ("local", "const")]
    if len(spaces) != 1 or spaces[0] not in SPACES:
        unsupported(instr, "state space must be .global, .shared or .param")
    space = spaces[0]
    vec = 1
    for m in instr.mods:
        if m in ("v2", "v4", "v8"):
            vec = int(m[1])
    only(instr, {f for f in flags if not f.startswith(space)} - {"v2", "v4", "v8"}, CACHE_HINTS)
    if len(types) != 1:
        unsupported(instr, "one type suffix expected")
    return space, types[0], vec


@builder("ld")
def ld(instr, B):
    space, t, vec = memory_access(instr, B)
    operand_count(instr, 2)
    dests = B.ops.vector(instr, instr.operands[0], vec if vec > 1 else None)
    writes = [B.ops.writer(instr, d, t) for d in dests]
    sym_space, addr = B.ops.address(instr, instr.operands[1])
    if sym_space is not None and sym_space != space:
        raise SimulationError(f"{instr.where()}: symbol in .{sym_space} read with ld.{space}")
    mem = B.space(space)
    size = t.size * vec
    narrow = t.kind == "pred"
    if narrow:
        unsupported(instr, "predicate load")

    def run(mask):
        lanes = np.flatnonzero(mask)
        a = np.broadcast_to(addr(), (B.n,))[lanes]
        data = mem.load(instr, B.fault, lanes, a, size).view(t.view)
        for k, write in enumerate(writes):
            full = np.zeros(B.n, dtype=t.view)
            full[lanes] = data[:, k]
            write(full, mask)
    return run


@builder("st")
def st(instr, B):
    space, t, vec = memory_access(instr, B)
    if space == "param":
        unsupported(instr, "stores to .param")
    operand_count(instr, 2)
    srcs = B.ops.vector(instr, instr.operands[1], vec if vec > 1 else None)
    reads = [B.ops.reader(instr, s, t) for s in srcs]
    _, addr = B.ops.address(instr, instr.operands[0])
    mem = B.space(space)

    def run(mask):
        lanes = np.flatnonzero(mask)
        a = np.broadcast_to(addr(), (B.n,))[lanes]
        cols = np.stack([np.broadcast_to(r(), (B.n,))[lanes].astype(t.view) for r in reads], axis=1)
        mem.store(instr, B.fault, lanes, a, np.ascontiguousarray(cols).view(np.uint8))
    return run


# ---- control flow markers (the scheduler runs them) ---------------------------------------------

@builder("bra", "ret", "exit", "bar", "barrier")
def control(instr, B):
    raise AssertionError("control instructions are bound by the scheduler")


def control_kind(instr):
    """The scheduler's kind for control instructions, or None for ordinary ones."""
    if instr.opcode == "bra":
        only(instr, set(instr.mods), {"uni"})
        return "bra"
    if instr.opcode in ("ret", "exit"):
        return "exit"
    if instr.opcode in ("bar", "barrier"):
        only(instr, set(instr.mods), {"sync", "aligned", "cta"})
        if instr.opcode == "bar" and "sync" not in instr.mods and instr.mods:
            unsupported(instr)
        if len(instr.operands) != 1 or not isinstance(instr.operands[0], Imm) or int(instr.operands[0].text, 0) != 0:
            unsupported(instr, "only barrier 0 of the whole CTA")
        return "bar"
    return None


__all__ = ["BUILDERS", "control_kind", "Reg", "Sink"]
