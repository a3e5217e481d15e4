"""Vector values and the vector register file of one kernel.

A statement instance is evaluated into `Val`s: a register the expression owns (free to
overwrite), a register shared through the load cache (read only), or a memory operand
that the consuming instruction can take directly. Registers are never spilled: when
the file is full, a cached load gives its register back and is loaded again when next
needed (paper §5.1, "no spills").
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import LoopstackError
from ...isa.x86.operands import XMM, YMM, ZMM, Mem, Vec


@dataclass
class Val:
    reg: int | None = None      # register number, or None for a memory operand
    mem: Mem | None = None
    owned: bool = False         # an owned register may be overwritten and must be freed
    key: tuple | None = None    # load-cache key of a shared register


class PinCounts(dict):
    """Registers that must not be evicted, counted: nested operands pin the same register."""

    def add(self, reg: int) -> None:
        self[reg] = self.get(reg, 0) + 1

    def discard(self, reg: int) -> None:
        n = self.get(reg, 0) - 1
        if n > 0:
            self[reg] = n
        else:
            self.pop(reg, None)


class RegisterFile:
    """Vector register numbers in use; a cache of loaded values keyed by address."""

    def __init__(self, count: int):
        self.free = list(range(count - 1, -1, -1))
        self.cache: dict[tuple, int] = {}      # load key -> register
        self.uses: dict[tuple, int] = {}       # load key -> remaining uses in this region
        self.pinned = PinCounts()

    def alloc(self) -> int:
        if not self.free:
            self._evict()
        return self.free.pop()

    def release(self, reg: int) -> None:
        self.free.append(reg)

    def _evict(self) -> None:
        for key, reg in list(self.cache.items()):
            if reg not in self.pinned:
                del self.cache[key]
                self.free.append(reg)
                return
        raise LoopstackError("internal: vector register file exhausted (register block too large)")

    def flush_cache(self) -> None:
        """Forget every cached load (control flow or a store ends a straight-line region)."""
        for reg in self.cache.values():
            self.free.append(reg)
        self.cache.clear()
        self.uses.clear()
        self.pinned.clear()


_REGISTERS = {128: XMM, 256: YMM, 512: ZMM}


def vreg(num: int, bits: int) -> Vec:
    """The shared register object: the assembler caches encodings by register identity."""
    return _REGISTERS[bits][num]
