"""Vector values and the vector register file of one kernel.

A statement instance is evaluated into `Val`s: a register the expression owns (free to
overwrite), a register shared through the load cache (read only), or a memory operand
that the consuming instruction can take directly (where the instruction set has them).
Registers are never spilled: when the file is full, a cached load gives its register back
and is loaded again when next needed (paper §5.1, "no spills"). Register numbers are the
instruction selection's own: it maps them to architectural registers.
"""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from itertools import chain

from ..errors import LoopstackError


@dataclass(frozen=True)
class Shape:
    """How an instance is laid out: `lanes` used of a `width`-lane vector, or scalar."""

    vector: bool          # False: scalar code on lane 0 of a vector register
    lanes: int            # elements this instance covers (1 for scalar)
    width: int            # lanes of a full vector
    dim: str | None       # the vectorised dimension

    @property
    def masked(self) -> bool:
        return self.vector and self.lanes < self.width


# A Shape per (vector, lanes, width, dim), made once: the walk asks for one per statement
# instance, and a frozen dataclass is slow to build (one object.__setattr__ per field)
shape_of = functools.lru_cache(maxsize=1024)(Shape)


@dataclass(slots=True)
class Val:
    reg: int | None = None      # register number, or None for a memory operand
    mem: object | None = None   # the instruction set's memory operand (where instructions take one)
    owned: bool = False         # an owned register may be overwritten and must be freed
    key: tuple | None = None    # load-cache key of a shared register


class PinCounts(dict):
    """Registers that must not be evicted, counted: nested operands pin the same register."""

    def add(self, reg: int) -> None:
        self[reg] = self.get(reg, 0) + 1

    def discard(self, *regs: int | None) -> None:
        """One pin less on each register given (None, an operand in memory, is skipped)."""
        for reg in regs:
            if reg is not None:
                n = self.get(reg, 0) - 1
                if n > 0:
                    self[reg] = n
                else:
                    self.pop(reg, None)


class RegisterFile:
    """Vector register numbers in use; a cache of loaded values keyed by address.

    The uses of every cached value in the current straight-line region are known before it is
    emitted (their positions: statement instances in emission order), so a full file gives
    up the value used farthest in the future (Belady's rule)."""

    def __init__(self, count: int):
        self.free = list(range(count - 1, -1, -1))
        self.cache: dict[tuple, int] = {}      # load key -> register
        self.uses: dict[tuple, int] = {}       # load key -> remaining uses in this region
        self.positions: dict[tuple, list[int]] = {}   # load key -> positions of all its uses
        # a run's load keys, per position, whose positions are noted only when one is asked for
        # (while registers are free, no position is): see note_uses
        self._deferred: list | None = None
        self.pinned = PinCounts()

    def note_use(self, key: tuple, position: int) -> None:
        self.uses[key] = self.uses.get(key, 0) + 1
        self.positions.setdefault(key, []).append(position)

    def note_uses(self, keys_per_position: list) -> None:
        """note_use for each load key of a region, by position (each a sequence of keys, in
        order): the uses counted at once, the positions noted when first needed."""
        counts = Counter(chain.from_iterable(keys_per_position))
        uses = self.uses
        if uses:
            for key, n in counts.items():
                uses[key] = uses.get(key, 0) + n
        else:               # a region after a flush: every count is new
            uses.update(counts)
        self._deferred = keys_per_position

    def _note_deferred(self) -> None:
        positions = self.positions
        for position, keys in enumerate(self._deferred):
            for key in keys:
                positions.setdefault(key, []).append(position)
        self._deferred = None

    def next_use(self, key: tuple, remaining: int | None = None) -> float:
        """Position of the next use of `key` with `remaining` uses left (default: as counted);
        inf when none is left, -1 when its uses were not counted (taken as imminent)."""
        if self._deferred is not None:
            self._note_deferred()
        left = self.uses.get(key, 0) if remaining is None else remaining
        seq = self.positions.get(key)
        if seq is None:
            return -1
        return seq[len(seq) - left] if 0 < left <= len(seq) else float("inf")

    def alloc(self) -> int:
        if not self.free:
            self._evict()
        return self.free.pop()

    def release(self, reg: int) -> None:
        self.free.append(reg)

    def _victim(self) -> tuple | None:
        """The unpinned cached value used farthest in the future (the oldest among equals)."""
        best, farthest = None, -2.0
        for key, reg in self.cache.items():
            if reg not in self.pinned:
                n = self.next_use(key)
                if n > farthest:
                    best, farthest = key, n
        return best

    def keep_in_memory(self, key: tuple, remaining: int) -> bool:
        """Whether a value about to be loaded, with `remaining` uses after this one, should be
        read from memory each time rather than take a register: no register is free and every
        cached value is needed again before it."""
        if self.free or remaining <= 0:
            return remaining <= 0
        victim = self._victim()
        return victim is None or self.next_use(key, remaining) >= self.next_use(victim)

    def _evict(self) -> None:
        key = self._victim()
        if key is None:
            raise LoopstackError("internal: vector register file exhausted (register block too large)")
        self.free.append(self.cache.pop(key))

    def flush_cache(self) -> None:
        """Forget every cached load (control flow or a store ends a straight-line region)."""
        for reg in self.cache.values():
            self.free.append(reg)
        self.cache.clear()
        self.uses.clear()
        self.positions.clear()
        self._deferred = None
        self.pinned.clear()

