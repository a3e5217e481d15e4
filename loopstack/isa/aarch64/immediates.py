"""Immediate splitting as pure functions: a constant into movz/movn + movk halves.

`move_wide_sequence(value, bits)` returns the shortest list of (mnemonic, imm16, shift) that
builds `value` in a `bits`-wide register: movz + one movk per other non-zero 16-bit half, or
movn (which sets every bit it does not clear) + one movk per half that is not 0xffff,
whichever is shorter (movz on a tie). `move_wide_value` runs such a list, for the tests.
"""
from __future__ import annotations

from ...errors import EncodingError

__all__ = ["move_wide_sequence", "move_wide_value"]


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
