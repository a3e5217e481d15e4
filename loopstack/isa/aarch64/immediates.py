"""Immediates as pure functions: a constant into movz/movn + movk halves; logical (bitmask)
immediates to and from their (N, immr, imms) fields; fmov's 8-bit floating-point immediates.

`move_wide_sequence(value, bits)` returns the shortest list of (mnemonic, imm16, shift) that
builds `value` in a `bits`-wide register: movz + one movk per other non-zero 16-bit half, or
movn (which sets every bit it does not clear) + one movk per half that is not 0xffff,
whichever is shorter (movz on a tie). `move_wide_value` runs such a list, for the tests.
"""
from __future__ import annotations

from ...errors import EncodingError

__all__ = ["decode_bitmask", "encode_bitmask", "encode_fp_imm8", "fp_imm8_value", "move_wide_sequence",
           "move_wide_value"]


def move_wide_sequence(value: int, bits: int = 64) -> list[tuple[str, int, int]]:
    if bits not in (32, 64):
        raise EncodingError(f"move_wide_sequence: bits {bits}, expected 32 or 64")
    if not isinstance(value, int) or isinstance(value, bool) or not -(1 << (bits - 1)) <= value < 1 << bits:
        raise EncodingError(f"mov_imm {value!r}: does not fit in {bits} bits "
                            f"({-(1 << (bits - 1))}..{(1 << bits) - 1})")
    value &= (1 << bits) - 1
    halves = [(value >> s) & 0xFFFF for s in range(0, bits, 16)]
    zero_seq = _sequence("movz", halves, 0x0000)
    ones_seq = _sequence("movn", halves, 0xFFFF)
    return zero_seq if len(zero_seq) <= len(ones_seq) else ones_seq


def _sequence(first: str, halves: list[int], background: int) -> list[tuple[str, int, int]]:
    keep = [i for i, h in enumerate(halves) if h != background] or [0]
    i0 = keep[0]
    start = halves[i0] if first == "movz" else ~halves[i0] & 0xFFFF
    seq = [(first, start, 16 * i0)]
    seq += [("movk", halves[i], 16 * i) for i in keep[1:]]
    return seq


def move_wide_value(sequence: list[tuple[str, int, int]], bits: int = 64) -> int:
    """The register value a (mnemonic, imm16, shift) sequence leaves (the Arm ARM's pseudocode)."""
    mask = (1 << bits) - 1
    reg = 0
    for mnemonic, imm16, shift in sequence:
        if mnemonic == "movz":
            reg = imm16 << shift
        elif mnemonic == "movn":
            reg = ~(imm16 << shift) & mask
        elif mnemonic == "movk":
            reg = (reg & ~(0xFFFF << shift) & mask) | imm16 << shift
        else:
            raise EncodingError(f"move_wide_value: {mnemonic} is not movz/movn/movk")
    return reg


# -- logical (bitmask) immediates: and/orr/eor/ands/tst #imm ------------------------------------
# A bitmask immediate is a run of ones, rotated right, replicated over elements of 2..64 bits
# (Arm ARM K13 "DecodeBitMasks"). The fields: N:imms give the element size and the run length,
# immr the rotation.

def decode_bitmask(n: int, immr: int, imms: int, bits: int = 64) -> int:
    """The register value of the fields (N, immr, imms); EncodingError if they encode none."""
    combined = (n << 6) | (~imms & 0x3F)
    if combined == 0:
        raise EncodingError(f"bitmask N={n} imms={imms:#x}: no element size")
    length = combined.bit_length() - 1
    esize = 1 << length
    if esize > bits or length < 1:
        raise EncodingError(f"bitmask N={n} imms={imms:#x}: element size {esize} does not fit {bits} bits")
    levels = esize - 1
    s, r = imms & levels, immr & levels
    if s == levels:
        raise EncodingError(f"bitmask imms={imms:#x}: an element of all ones is not encodable")
    welem = (1 << (s + 1)) - 1
    element = ((welem >> r) | (welem << (esize - r))) & ((1 << esize) - 1) if r else welem
    value = 0
    for k in range(bits // esize):
        value |= element << (k * esize)
    return value


def encode_bitmask(value: int, bits: int = 64) -> tuple[int, int, int] | None:
    """(N, immr, imms) for `value` as a `bits`-wide logical immediate, or None if it is not one."""
    mask = (1 << bits) - 1
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    value &= mask
    if value in (0, mask):
        return None
    esize = bits                # the smallest element the value repeats
    while esize > 2:
        half = esize // 2
        if (value & ((1 << half) - 1)) != (value >> half) & ((1 << half) - 1):
            break
        esize = half
    emask = (1 << esize) - 1
    element = value & emask
    ones = bin(element).count("1")
    # rotate the element right until its run of ones starts at bit 0: that rotation is immr
    for rot in range(esize):
        rotated = ((element >> rot) | (element << (esize - rot))) & emask if rot else element
        if rotated == (1 << ones) - 1:
            immr = (esize - rot) % esize
            imms = ((~(esize - 1) << 1) & 0x3F) | (ones - 1)
            return (1 if esize == 64 else 0), immr, imms
    return None


# -- fmov immediates: +-(16..31)/16 x 2^(-3..4), eight bits a:bcdefgh (Arm ARM VFPExpandImm) --------

def fp_imm8_value(imm8: int) -> float:
    sign = -1.0 if imm8 & 0x80 else 1.0
    bcd = (imm8 >> 4) & 0x7
    exponent = bcd + 1 if bcd < 4 else bcd - 7      # b:c:d 000..011 -> 1..4, 100..111 -> -3..0
    return sign * (16 + (imm8 & 0xF)) / 16 * 2.0 ** exponent


_FP_IMM8 = {fp_imm8_value(i): i for i in range(256)}


def encode_fp_imm8(value) -> int | None:
    """imm8 of an fmov immediate equal to `value`, or None (0.0 is not one: use movi #0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return _FP_IMM8.get(float(value))
    except OverflowError:
        return None
