"""PTX's scalar types and their exact arithmetic on numpy arrays.

Registers are stored as raw bits (unsigned integers of their width, bool for predicates); an
instruction's type suffix picks the view its operands are read through.  Floating-point results
are rounded once, as the hardware does: an operation is computed exactly (or as the exact value's
round-to-odd in float64, which then rounds correctly to any format with at most 51 significand
bits) and rounded to the destination format at the end.  bfloat16 has no numpy dtype: it lives as
uint16 bits and is converted through float32 bit patterns.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PType:
    name: str       # "u32", "f16x2", "pred"
    size: int       # bytes (1 for pred, which is stored as bool)
    kind: str       # "u", "s", "b", "f", "bf", "f16x2", "bf16x2", "pred"
    view: np.dtype  # the dtype an operand of this type is read as

    @property
    def bits(self) -> int:
        return 8 * self.size

    @property
    def is_int(self) -> bool:
        return self.kind in ("u", "s", "b")

    @property
    def signed(self) -> bool:
        return self.kind == "s"


def _t(name, size, kind, view):
    return PType(name, size, kind, np.dtype(view))


TYPES: dict[str, PType] = {t.name: t for t in (
    _t("pred", 1, "pred", np.bool_),
    _t("b8", 1, "b", np.uint8), _t("u8", 1, "u", np.uint8), _t("s8", 1, "s", np.int8),
    _t("b16", 2, "b", np.uint16), _t("u16", 2, "u", np.uint16), _t("s16", 2, "s", np.int16),
    _t("f16", 2, "f", np.float16), _t("bf16", 2, "bf", np.uint16),
    _t("b32", 4, "b", np.uint32), _t("u32", 4, "u", np.uint32), _t("s32", 4, "s", np.int32),
    _t("f32", 4, "f", np.float32), _t("f16x2", 4, "f16x2", np.uint32), _t("bf16x2", 4, "bf16x2", np.uint32),
    _t("tf32", 4, "tf32", np.uint32),       # a float32 bit pattern whose low 13 bits are zero
    _t("b64", 8, "b", np.uint64), _t("u64", 8, "u", np.uint64), _t("s64", 8, "s", np.int64),
    _t("f64", 8, "f", np.float64),
)}

UINT = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
SINT = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}


def storage_dtype(t: PType) -> np.dtype:
    """How a register declared with type `t` holds its bits."""
    return np.dtype(np.bool_) if t.kind == "pred" else UINT[t.size]


# ---- bfloat16 -----------------------------------------------------------------------------

def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns -> float32 (exact)."""
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(x: np.ndarray, mode: str = "rn") -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even ("rn") or toward zero ("rz"); NaN -> 0x7FFF."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    if mode == "rn":
        u = u + 0x7FFF + ((u >> 16) & 1)
    out = (u >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), out)


# ---- tf32 ------------------------------------------------------------------------------------

TF32_MASK = np.uint32(0xFFFFE000)     # sign, 8 exponent bits, 10 mantissa bits


def f32_to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 -> tf32 bits (cvt.rna.tf32.f32): the 10-bit mantissa rounded to nearest, ties away
    from zero (half an ulp added to the magnitude, then truncated; a carry may reach infinity).
    Infinities and NaNs keep their bits (a NaN's payload truncated, kept non-zero)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    finite = (u & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    rounded = (u + np.uint32(0x1000)) & TF32_MASK
    nan = ~finite & ((u & np.uint32(0x007FFFFF)) != 0)
    kept = np.where(nan, (u & TF32_MASK) | np.uint32(0x00400000), u & TF32_MASK)
    return np.where(finite, rounded, kept).astype(np.uint32)


# ---- exact rounding through float64 round-to-odd ----------------------------------------------

def odd_f64(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The round-to-odd float64 of the exact value s + e (s = RN(s + e), e its error)."""
    fix = (e != 0) & ((s.view(np.uint64) & 1) == 0) & np.isfinite(s)
    if not fix.any():
        return s
    return np.where(fix, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)


def two_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b as a round-to-odd float64 (exact inputs in float64)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return odd_f64(s, np.where(np.isfinite(s), e, 0.0))


def fma_odd(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a*b + c as a round-to-odd float64, for inputs of at most 26 significand bits (product exact)."""
    return two_sum(np.asarray(a, np.float64) * np.asarray(b, np.float64), np.asarray(c, np.float64))


def f64_to_f32_odd(x: np.ndarray) -> np.ndarray:
    f = x.astype(np.float32)
    back = f.astype(np.float64)
    fix = (back != x) & np.isfinite(back) & ((f.view(np.uint32) & 1) == 0)
    if not fix.any():
        return f
    return np.where(fix, np.nextafter(f, np.where(x > back, np.float32(np.inf), np.float32(-np.inf))), f)


def _directed(rn_bits: np.ndarray, rn_value: np.ndarray, exact: np.ndarray, mode: str) -> np.ndarray:
    """Turn a round-to-nearest result into a directed rounding (rz, rm, rp): where the nearest
    value lies on the wrong side of the exact one, step one ulp back.  On sign-magnitude bit
    patterns a step toward zero is bits - 1, away from zero bits + 1; from a zero toward the
    other sign it is the smallest subnormal of that sign."""
    if mode == "rn":
        return rn_bits
    v = np.asarray(rn_value).astype(np.float64)
    x = np.asarray(exact, dtype=np.float64)
    one = rn_bits.dtype.type(1)
    sign = rn_bits.dtype.type(1 << (8 * rn_bits.dtype.itemsize - 1))
    valid = ~np.isnan(x) & ~np.isnan(v)
    if mode == "rz":
        over = valid & (np.abs(v) > np.abs(x))
        return np.where(over, rn_bits - one, rn_bits)
    down = mode == "rm"                            # toward -inf; else rp, toward +inf
    wrong = valid & ((v > x) if down else (v < x))
    toward_zero = (v > 0) if down else (v < 0)
    at_zero = v == 0
    stepped = np.where(at_zero, (sign | one) if down else one,
                       np.where(toward_zero, rn_bits - one, rn_bits + one))
    return np.where(wrong, stepped, rn_bits).astype(rn_bits.dtype)


def round_to(x: np.ndarray, fmt: str, mode: str = "rn") -> np.ndarray:
    """float64 `x` (exact, or round-to-odd of the exact value) rounded to `fmt` ("f32", "f16",
    "bf16", "f64") by `mode` (rn, rz, rm, rp), returned as that format's value (f32, f16, f64)
    or bits (bf16).  f16 and bf16 NaN results are the canonical 0x7FFF."""
    x = np.asarray(x, dtype=np.float64)
    if fmt == "f64":
        return x
    if fmt == "f32":
        out = x.astype(np.float32)
        return _directed(out.view(np.uint32), out, x, mode).view(np.float32)
    if fmt == "f16":
        out = x.astype(np.float16)
        out = _directed(out.view(np.uint16), out, x, mode).view(np.float16)
        return np.where(np.isnan(out), np.uint16(0x7FFF).view(np.float16), out)
    if fmt == "bf16":
        bits = f32_to_bf16(f64_to_f32_odd(x))
        bits = _directed(bits, bf16_to_f32(bits), x, mode)
        return np.where(np.isnan(x), np.uint16(0x7FFF), bits)
    raise ValueError(fmt)


def flush_subnormal(v: np.ndarray, smallest_normal: float) -> np.ndarray:
    """.ftz: subnormal values become zero of the same sign."""
    return np.where(np.abs(v) < smallest_normal, np.copysign(np.zeros_like(v), v), v)


def saturate01(v: np.ndarray) -> np.ndarray:
    """.sat on a float result: clamp to [0, 1], NaN -> 0."""
    return np.where(np.isnan(v), v.dtype.type(0), np.clip(v, 0, 1)).astype(v.dtype)


SMALLEST_NORMAL = {"f32": 2.0 ** -126, "f16": 2.0 ** -14, "f64": 2.0 ** -1022}


def float_to_int(x: np.ndarray, t: PType, mode: str) -> np.ndarray:
    """cvt from float to an integer type: round by `mode` (rni/rzi/rmi/rpi), clamp to the
    destination's range (PTX saturates float-to-integer conversions), NaN -> 0."""
    x = np.asarray(x, dtype=np.float64)
    r = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[mode](x)
    info = np.iinfo(t.view)
    r = np.where(np.isnan(r), 0.0, r)
    # float64 cannot hold 2**63 - 1 or 2**64 - 1: pin the ends as integers, convert the rest
    big, small = r >= float(info.max), r <= float(info.min)
    res = np.where(big | small, 0.0, r).astype(t.view)
    return np.where(big, t.view.type(info.max), np.where(small, t.view.type(info.min), res))


def int_to_float(x: np.ndarray, fmt: str, mode: str = "rn") -> np.ndarray:
    """cvt from an integer to a float format, rounded by `mode` (rn or rz)."""
    x = np.asarray(x)
    if x.dtype.itemsize <= 4:
        return round_to(x.astype(np.float64), fmt, mode)      # exact in float64
    # 64-bit integers: the high part is exact in float64, the low 32 bits are the error term
    hi = (x.astype(np.int64 if x.dtype.kind == "i" else np.uint64) >> 32 << 32)
    lo = (x - hi.astype(x.dtype)).astype(np.float64)
    return round_to(two_sum(hi.astype(np.float64), lo), fmt, mode)


def saturate_int(v: np.ndarray, t: PType) -> np.ndarray:
    """Clamp wide integers (int64 or float64 holding integers) to the range of integer type `t`."""
    info = np.iinfo(t.view)
    return np.clip(v, info.min, info.max).astype(t.view)


# ---- operands of float types as float64, and back ------------------------------------------------

def decode(t: PType, v):
    """Operand bits/values of float type `t` -> float64 array (packed types: two per lane, low first)."""
    v = np.asarray(v)
    if t.kind == "f":
        return v.astype(np.float64)
    if t.kind == "bf":
        return bf16_to_f32(v).astype(np.float64)
    words = np.ascontiguousarray(np.atleast_1d(v), dtype=np.uint32)
    if t.kind == "f16x2":
        return words.view(np.float16).astype(np.float64)
    if t.kind == "bf16x2":
        return bf16_to_f32(words.view(np.uint16)).astype(np.float64)
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
