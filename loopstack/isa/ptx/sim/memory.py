"""The simulated state spaces: global memory over the caller's numpy arrays, a CTA's shared
memory and the kernel parameters, each a byte space whose every access is bounds- and
alignment-checked (a fault raises SimulationError naming the instruction, thread and address)."""
from __future__ import annotations

import numpy as np

from ....errors import SimulationError
from .hazards import Hazards, SharedHazards

# Global arrays are placed far above the shared window (which starts at 0), so that a shared
# address used as a global one, or the reverse, faults instead of reading something.
GLOBAL_BASE = 1 << 32
_GAP = 4096

# Fresh shared memory holds this byte: 0xFFFF.. is NaN as f16, bf16 and f32, and -1 as an integer,
# so a kernel that reads shared memory it never wrote computes visible garbage.
SHARED_POISON = 0xFF


class Fault:
    """Builds the error for an access by some lanes of a CTA (the executor fills in who)."""

    def __init__(self, describe_thread):
        self.describe_thread = describe_thread   # lane index -> "thread (x,y,z) of CTA (x,y,z)"

    def raise_for(self, instr, lane, msg):
        raise SimulationError(f"{instr.where()}: {self.describe_thread(lane)}: {msg}")


class ByteSpace:
    """A flat byte space of one or more regions; `regions` are (base, uint8 array, label, writable)."""

    space = "memory"
    cta_hazards = None   # per region, where accesses by different CTAs are checked (global memory)
    cta = 0              # the linear index of the CTA running

    def __init__(self, regions):
        self.regions = sorted(regions, key=lambda r: r[0])
        self.bases = np.array([r[0] for r in self.regions], dtype=np.uint64)
        self.ends = np.array([r[0] + r[1].size for r in self.regions], dtype=np.uint64)

    def _locate(self, instr, fault, lanes, addr, size, writing, align=None):
        """Region index per address, after checking bounds, alignment and writability; `size`
        is the bytes accessed, one for all or one per address."""
        addr = np.asarray(addr, dtype=np.uint64)
        align = align or min(size, 16)
        bad = (addr % np.uint64(align)) != 0
        if bad.any():
            k = int(np.argmax(bad))
            fault.raise_for(instr, lanes[k], f"{self.space} address {int(addr[k]):#x} is not aligned to "
                            f"{align} bytes")
        region = np.searchsorted(self.bases, addr, side="right").astype(np.int64) - 1
        ok = region >= 0
        safe = np.where(ok, region, 0)
        size = np.asarray(size, dtype=np.uint64)
        ok &= addr + size <= self.ends[safe] if len(self.regions) else False
        if not np.all(ok):
            k = int(np.argmin(ok))
            nbytes = int(np.broadcast_to(size, addr.shape)[k])
            fault.raise_for(instr, lanes[k], f"{self.space} address {int(addr[k]):#x} ({nbytes} bytes) is "
                            f"outside {self._near(int(addr[k]))}")
        if writing:
            for r in np.unique(safe):
                if not self.regions[r][3]:
                    k = int(np.argmax(safe == r))
                    fault.raise_for(instr, lanes[k], f"store to read-only {self.regions[r][2]}")
        return safe

    def _near(self, a):
        if not self.regions:
            return f"the {self.space} space, which is empty"
        best = min(self.regions, key=lambda r: min(abs(a - r[0]), abs(a - (r[0] + r[1].size))))
        base, buf, label, _ = best
        if a >= base + buf.size:
            where = f"{a - (base + buf.size)} bytes past the end of"
        elif a < base:
            where = f"{base - a} bytes before"
        else:
            where = "overlapping the end of"
        return f"every {self.space} array: {where} {label} at {base:#x} ({buf.size} bytes)"

    def check(self, instr, fault, lanes, addr, size, align=None, writing=False):
        self._locate(instr, fault, lanes, addr, size, writing, align)

    def load_partial(self, instr, fault, lanes, addr, width, nbytes) -> np.ndarray:
        """The first `nbytes` (per address) of `width` bytes at each address, zeros after them."""
        region = self._locate(instr, fault, lanes, addr, nbytes, False, align=width)
        addr = np.asarray(addr, dtype=np.uint64)
        step = np.arange(width, dtype=np.int64)
        valid = step < np.asarray(nbytes, dtype=np.int64)[:, None]
        out = np.zeros((len(addr), width), dtype=np.uint8)
        for r in np.unique(region):
            sel = region == r
            base, buf = self.regions[r][0], self.regions[r][1]
            idx = np.where(valid[sel], (addr[sel] - np.uint64(base)).astype(np.int64)[:, None] + step, 0)
            out[sel] = np.where(valid[sel], buf[idx], 0)
            if self.cta_hazards:               # only the bytes read: a row per byte, its lane beside it
                rows = np.repeat(np.asarray(lanes)[sel], valid[sel].sum(axis=1))
                self._hazards(r).read(fault, instr, rows, self.cta, idx[valid[sel]][:, None])
        return out

    def load(self, instr, fault, lanes, addr, size, noncoherent=False) -> np.ndarray:
        """`size` bytes at each address -> uint8 array (len(addr), size); `noncoherent`: through
        the read-only cache (ld.global.nc), so none of the bytes may be written during the launch."""
        region = self._locate(instr, fault, lanes, addr, size, False)
        addr = np.asarray(addr, dtype=np.uint64)
        out = np.empty((len(addr), size), dtype=np.uint8)
        step = np.arange(size, dtype=np.int64)
        for r in np.unique(region):
            sel = region == r
            base, buf = self.regions[r][0], self.regions[r][1]
            idx = (addr[sel] - np.uint64(base)).astype(np.int64)[:, None] + step
            out[sel] = buf[idx]
            if self.cta_hazards:
                if noncoherent:
                    self._hazards(r).unwritten(fault, instr, np.asarray(lanes)[sel], idx)
                self._hazards(r).read(fault, instr, np.asarray(lanes)[sel], self.cta, idx)
        return out

    def store(self, instr, fault, lanes, addr, data: np.ndarray):
        """Write uint8 rows `data` (len(addr), size) at the addresses; the last lane wins a tie."""
        size = data.shape[1]
        region = self._locate(instr, fault, lanes, addr, size, True)
        addr = np.asarray(addr, dtype=np.uint64)
        step = np.arange(size, dtype=np.int64)
        for r in np.unique(region):
            sel = region == r
            base, buf = self.regions[r][0], self.regions[r][1]
            idx = (addr[sel] - np.uint64(base)).astype(np.int64)[:, None] + step
            if self.cta_hazards:
                self._hazards(r).write(fault, instr, np.asarray(lanes)[sel], self.cta, idx)
            buf[idx] = data[sel]


class GlobalMemory(ByteSpace):
    space = "global"

    def __init__(self, arrays):
        """`arrays`: (label, contiguous numpy array) pairs; each gets an address of its own."""
        regions, base, self.addresses = [], GLOBAL_BASE, []
        for label, arr in arrays:
            buf = arr.reshape(-1).view(np.uint8)
            regions.append((base, buf, label, bool(arr.flags.writeable)))
            self.addresses.append(base)
            base += (buf.size + _GAP + 255) // 256 * 256
        super().__init__(regions)
        self.cta_hazards = [None] * len(self.regions)      # made when a region is first touched

    def _hazards(self, r):
        if self.cta_hazards[r] is None:
            base, buf = self.regions[r][0], self.regions[r][1]
            self.cta_hazards[r] = Hazards(buf.size, "global", "CTA", "the launch began", base)
        return self.cta_hazards[r]


class SharedMemory(ByteSpace):
    """A CTA's shared memory (addresses from 0), with race detection between its warps."""

    space = "shared"

    def __init__(self, size, banks=None):
        self.buf = np.full(size, SHARED_POISON, dtype=np.uint8)
        self.hazards = SharedHazards(size)
        self.banks = banks            # a banks.BankCounter, or None: conflicts not counted
        super().__init__([(0, self.buf, "the CTA's shared memory", True)] if size else [])

    def reset(self):
        self.buf.fill(SHARED_POISON)
        self.hazards.reset()

    @staticmethod
    def _bytes(addr, size):
        return np.asarray(addr, dtype=np.uint64).astype(np.int64)[:, None] + np.arange(size, dtype=np.int64)

    def load(self, instr, fault, lanes, addr, size, noncoherent=False) -> np.ndarray:
        self._locate(instr, fault, lanes, addr, size, False)
        idx = self._bytes(addr, size)
        self.hazards.read(fault, instr, lanes, idx)
        if self.banks is not None:
            self.banks.count(instr, lanes, addr, size)
        return self.buf[idx]

    def store(self, instr, fault, lanes, addr, data, asynchronous=False):
        """Write rows `data`; `asynchronous`: a cp.async landing (its issue was checked already)."""
        self._locate(instr, fault, lanes, addr, data.shape[1], True)
        idx = self._bytes(addr, data.shape[1])
        (self.hazards.land_async if asynchronous else self.hazards.write)(fault, instr, lanes, idx)
        if self.banks is not None and not asynchronous:      # a cp.async was counted at its issue
            self.banks.count(instr, lanes, addr, data.shape[1])
        self.buf[idx] = data

    def issue_async(self, instr, fault, lanes, addr, size):
        """A cp.async into these bytes is in flight from now until its wait."""
        self._locate(instr, fault, lanes, addr, size, True)
        self.hazards.issue_async(fault, instr, lanes, self._bytes(addr, size))
        if self.banks is not None:
            self.banks.count(instr, lanes, addr, size)
