"""Race detection: accesses the hardware leaves unordered raise SimulationError.

The interpreter runs converged threads in lockstep and CTAs one after another, so a kernel that
forgets a `bar.sync` between one warp's store and another warp's load, or whose CTAs write each
other's output, would still compute the right numbers here, while on a GPU warps and CTAs run at
their own pace.  So every byte remembers which units touched it since the last point that orders
them, and raises on

- a read of a byte another unit wrote (read after write), a write of a byte another unit read
  (write after read: the classic early overwrite of a stage still being read) or wrote (write
  after write);
- a load through the non-coherent read-only cache (ld.global.nc) of a byte written during the
  launch, by any CTA (that cache may return the byte as it was);
- in shared memory, any access to a byte that a cp.async still in flight will write (the copy
  may land before or after it).  A cp.async counts as a write of its destination from its issue,
  as the hardware may perform it at any time until its wait.

Units are the warps of a CTA in shared memory, ordered by `bar.sync`; and the CTAs of the grid
in global memory, which nothing in the supported subset orders (no atomics, no grid sync).
Threads of one warp are not checked against each other (a warp executes an instruction for all
its lanes at once), nor the warps of one CTA in global memory (bar.sync orders those too).
"""
from __future__ import annotations

import numpy as np

NONE = -1
_BIG = np.iinfo(np.int32).max


class Hazards:
    """Per byte of one memory region: the least and greatest unit that read and that wrote it."""

    def __init__(self, size: int, space: str, unit: str, since: str, base: int = 0):
        self.space, self.unit, self.since, self.base = space, unit, since, base
        self.rmin, self.rmax = np.empty(size, np.int32), np.empty(size, np.int32)
        self.wmin, self.wmax = np.empty(size, np.int32), np.empty(size, np.int32)
        self.clear()

    def clear(self):
        """A point that orders everything before it against everything after it."""
        for a, v in ((self.rmin, _BIG), (self.rmax, NONE), (self.wmin, _BIG), (self.wmax, NONE)):
            a.fill(v)

    @staticmethod
    def _other(lo, hi, unit):
        """Bytes that a unit other than `unit` touched (lo/hi: least and greatest unit)."""
        return (hi != NONE) & ((lo != unit) | (hi != unit))

    def _raise(self, fault, instr, lanes, idx, bad, what):
        k = np.argwhere(bad)[0]
        fault.raise_for(instr, lanes[int(k[0])], f"{self.space}-memory race: {what} {self.space} address "
                        f"{self.base + int(idx[tuple(k)]):#x}")

    def read(self, fault, instr, lanes, units, idx):
        """The threads `lanes`, of `units` (one per lane, or one for all), read the bytes idx (a
        row of byte offsets per lane)."""
        u = _per_row(units, idx)
        raw = self._other(self.wmin[idx], self.wmax[idx], u)
        if raw.any():
            w = int(self.wmax[idx][raw][0])
            self._raise(fault, instr, lanes, idx, raw,
                        f"reads what another {self.unit} (up to {self.unit} {w}) wrote since {self.since}, at")
        _mark(self.rmin, self.rmax, units, idx)

    def unwritten(self, fault, instr, lanes, idx):
        """A read through the non-coherent cache: no unit may have written these bytes."""
        written = self.wmax[idx] != NONE
        if written.any():
            self._raise(fault, instr, lanes, idx, written,
                        f"reads through the non-coherent cache (.nc) a byte written since {self.since}, at")

    def write(self, fault, instr, lanes, units, idx):
        u = _per_row(units, idx)
        war = self._other(self.rmin[idx], self.rmax[idx], u)
        if war.any():
            self._raise(fault, instr, lanes, idx, war,
                        f"overwrites what another {self.unit} read since {self.since}, at")
        _mark(self.wmin, self.wmax, units, idx)
        waw = self._other(self.wmin[idx], self.wmax[idx], u)
        if waw.any():
            self._raise(fault, instr, lanes, idx, waw,
                        f"overwrites what another {self.unit} wrote since {self.since}, at")


def _per_row(units, idx):
    return units if np.ndim(units) == 0 else np.broadcast_to(np.asarray(units)[:, None], idx.shape)


def _mark(lo, hi, units, idx):
    """Record that `units` touched bytes idx, one pass per run of equal units (lanes ascend), so
    that bytes touched by several units in one access keep their least and greatest."""
    if np.ndim(units) == 0:
        runs = [(int(units), idx)]
    else:
        cuts = (np.flatnonzero(units[1:] != units[:-1]) + 1).tolist()
        runs = [(int(units[a]), idx[a:b]) for a, b in zip([0] + cuts, cuts + [len(units)])]
    for u, sub in runs:
        lo[sub] = np.minimum(lo[sub], u)
        hi[sub] = np.maximum(hi[sub], u)


class SharedHazards(Hazards):
    """Shared memory: warps, ordered by bar.sync, plus the bytes of cp.async copies in flight."""

    def __init__(self, size: int):
        self.pending = np.zeros(size, dtype=np.int32)      # cp.async copies in flight per byte
        super().__init__(size, "shared", "warp", "the last bar.sync")

    def reset(self):
        self.pending.fill(0)
        self.clear()

    def _in_flight(self, fault, instr, lanes, idx, what):
        if self.pending.any():
            inflight = self.pending[idx] > 0
            if inflight.any():
                self._raise(fault, instr, lanes, idx, inflight, f"{what} an in-flight cp.async will write, at")

    def read(self, fault, instr, lanes, idx):
        self._in_flight(fault, instr, lanes, idx, "reads, before its cp.async.wait, a byte")
        super().read(fault, instr, lanes, np.asarray(lanes) // 32, idx)

    def write(self, fault, instr, lanes, idx, asynchronous=False):
        """A st.shared (or, `asynchronous`, a cp.async issued or landing) writes bytes idx."""
        if not asynchronous:
            self._in_flight(fault, instr, lanes, idx, "stores to a byte")
        super().write(fault, instr, lanes, np.asarray(lanes) // 32, idx)

    def _count(self, idx, step):
        where, times = np.unique(idx, return_counts=True)
        self.pending[where] += step * times.astype(np.int32)

    def issue_async(self, fault, instr, lanes, idx):
        self.write(fault, instr, lanes, idx, asynchronous=True)
        self._count(idx, 1)

    def land_async(self, fault, instr, lanes, idx):
        self._count(idx, -1)
        self.write(fault, instr, lanes, idx, asynchronous=True)
