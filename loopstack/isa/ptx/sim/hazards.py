"""Shared-memory race detection between the warps of a CTA.

The interpreter runs converged threads in lockstep, so a kernel that forgets a `bar.sync`
between one warp's store and another warp's load would still compute the right numbers here,
while on a GPU the warps run at their own pace.  So every shared-memory byte remembers which
warps wrote and read it since the last barrier, and an access that the hardware would leave
unordered raises SimulationError:

- a read of a byte another warp wrote (read after write), a write of a byte another warp read
  (write after read: the classic early overwrite of a stage still being read) or wrote (write
  after write), all within one barrier interval;
- any access to a byte that a cp.async still in flight will write (the copy may land before or
  after it).  A cp.async counts as a write of its destination from its issue, as the hardware
  may perform it at any time until its wait.

Threads of one warp are not checked against each other: the emitted kernels order them with
bar.sync like everybody else, and a warp executes one instruction for all its lanes at once.
"""
from __future__ import annotations

import numpy as np

NONE = -1
_BIG = np.iinfo(np.int32).max


class SharedHazards:
    def __init__(self, size: int):
        self.pending = np.zeros(size, dtype=np.int32)      # cp.async copies in flight per byte
        self.rmin, self.rmax = np.empty(size, np.int32), np.empty(size, np.int32)
        self.wmin, self.wmax = np.empty(size, np.int32), np.empty(size, np.int32)
        self.barrier()

    def reset(self):
        self.pending.fill(0)
        self.barrier()

    def barrier(self):
        """bar.sync orders everything before it against everything after it."""
        for a, v in ((self.rmin, _BIG), (self.rmax, NONE), (self.wmin, _BIG), (self.wmax, NONE)):
            a.fill(v)

    @staticmethod
    def _other(lo, hi, warp):
        """Bytes that a warp other than `warp` touched (lo/hi: least and greatest warp)."""
        return (hi != NONE) & ((lo != warp) | (hi != warp))

    def _raise(self, fault, instr, lanes, idx, bad, what):
        k = np.argwhere(bad)[0]
        row = int(k[0])
        fault.raise_for(instr, lanes[row], f"shared-memory race: {what} shared address {int(idx[tuple(k)]):#x}")

    def _in_flight(self, fault, instr, lanes, idx, what):
        if self.pending.any():
            inflight = self.pending[idx] > 0
            if inflight.any():
                self._raise(fault, instr, lanes, idx, inflight, f"{what} an in-flight cp.async will write, at")

    def read(self, fault, instr, lanes, idx):
        """Lanes `lanes` read the shared bytes idx (one row of byte offsets per lane)."""
        warp = np.broadcast_to((np.asarray(lanes) // 32)[:, None], idx.shape)
        self._in_flight(fault, instr, lanes, idx, "reads, before its cp.async.wait, a byte")
        raw = self._other(self.wmin[idx], self.wmax[idx], warp)
        if raw.any():
            w = int(self.wmax[idx][raw][0])
            self._raise(fault, instr, lanes, idx, raw,
                        f"reads what another warp (up to warp {w}) wrote since the last bar.sync, at")
        self._mark(self.rmin, self.rmax, lanes, idx)

    def write(self, fault, instr, lanes, idx, asynchronous=False):
        """Lanes write the shared bytes idx (a st.shared, or a cp.async issued or landing)."""
        warp = np.broadcast_to((np.asarray(lanes) // 32)[:, None], idx.shape)
        if not asynchronous:
            self._in_flight(fault, instr, lanes, idx, "stores to a byte")
        war = self._other(self.rmin[idx], self.rmax[idx], warp)
        if war.any():
            self._raise(fault, instr, lanes, idx, war,
                        "overwrites what another warp read since the last bar.sync, at")
        self._mark(self.wmin, self.wmax, lanes, idx)
        waw = self._other(self.wmin[idx], self.wmax[idx], warp)
        if waw.any():
            self._raise(fault, instr, lanes, idx, waw,
                        "overwrites what another warp wrote since the last bar.sync, at")

    @staticmethod
    def _mark(lo, hi, lanes, idx):
        """Record that the warps of `lanes` touched bytes idx: one pass per warp (lanes ascend),
        so that bytes touched by several warps in one access keep their least and greatest."""
        warps = np.asarray(lanes) // 32
        cuts = (np.flatnonzero(warps[1:] != warps[:-1]) + 1).tolist()
        for a, b in zip([0] + cuts, cuts + [len(warps)]):
            w, sub = int(warps[a]), idx[a:b]
            lo[sub] = np.minimum(lo[sub], w)
            hi[sub] = np.maximum(hi[sub], w)

    def _count(self, idx, step):
        where, times = np.unique(idx, return_counts=True)
        self.pending[where] += step * times.astype(np.int32)

    def issue_async(self, fault, instr, lanes, idx):
        self.write(fault, instr, lanes, idx, asynchronous=True)
        self._count(idx, 1)

    def land_async(self, fault, instr, lanes, idx):
        self._count(idx, -1)
        self.write(fault, instr, lanes, idx, asynchronous=True)
