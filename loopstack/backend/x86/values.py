"""x86 vector registers by number and width."""
from __future__ import annotations

from ...isa.x86.operands import XMM, YMM, ZMM, Vec

_REGISTERS = {128: XMM, 256: YMM, 512: ZMM}


def vreg(num: int, bits: int) -> Vec:
    """The shared register object: the assembler caches encodings by register identity."""
    return _REGISTERS[bits][num]
