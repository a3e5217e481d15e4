"""The tensor-core schedule: the knobs of the tensor-core paper, first-class and checked.

    BLK_ROW_WARPS, BLK_COL_WARPS   warps of a CTA along M and N          -> the `warp` loops
    WARP_ROW_TILES, WARP_COL_TILES 16x16 tiles one warp computes along M, N -> mma tiles (m16n8 pairs)
    CHUNK                          mma k-steps per shared-memory tile     -> BK = CHUNK * mma.k
    REORDER_INNER                  convolution: 0 runs the reduction as (r, s, c); 1 runs channel blocks
                                   outermost and the filter window inside them (BK must divide C).
                                   GEMM: 0 walks the grid with N fastest, 1 with M fastest
    stages                         shared-memory buffers filled by cp.async ahead of the mma
                                   (1: no overlap, 2: double, 3: triple buffering, 4)

A CTA computes a BM x BN block of C (BM = 16 * BLK_ROW_WARPS * WARP_ROW_TILES, BN likewise),
a warp a (16 * WARP_ROW_TILES) x (16 * WARP_COL_TILES) block held in registers.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ...errors import ScheduleError

KNOB_VALUES = {
    "BLK_ROW_WARPS": (1, 2, 4, 8),
    "BLK_COL_WARPS": (1, 2, 4, 8),
    "WARP_ROW_TILES": (1, 2, 4, 8),
    "WARP_COL_TILES": (1, 2, 4, 8),
    "CHUNK": (1, 2, 4, 8),
    "REORDER_INNER": (0, 1),
    "stages": (1, 2, 3, 4),
}
MAX_WARPS = 16                 # 512 threads: leaves registers for the accumulators
MAX_ACC_REGS = 128             # accumulator registers per thread (255 in all)
REGISTERS_PER_CTA = 65536      # the register file a CTA may use (sm_80, sm_90)
SHARED_LIMIT = {"sm_80": 163 * 1024, "sm_90": 227 * 1024}   # dynamic shared memory per CTA
SMEM_PAD = 16                  # bytes after each shared row: ldmatrix rows fall in distinct banks


@dataclass(frozen=True)
class GpuSchedule:
    BLK_ROW_WARPS: int = 2
    BLK_COL_WARPS: int = 4
    WARP_ROW_TILES: int = 4
    WARP_COL_TILES: int = 2
    CHUNK: int = 2
    REORDER_INNER: int = 0
    stages: int = 3

    @property
    def warps(self) -> int:
        return self.BLK_ROW_WARPS * self.BLK_COL_WARPS

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def bm(self) -> int:
        return 16 * self.BLK_ROW_WARPS * self.WARP_ROW_TILES

    @property
    def bn(self) -> int:
        return 16 * self.BLK_COL_WARPS * self.WARP_COL_TILES

    def bk(self, mma) -> int:
        return self.CHUNK * mma.k

    def knobs(self) -> dict:
        return asdict(self)

    def replace(self, **kw) -> "GpuSchedule":
        return GpuSchedule(**{**asdict(self), **kw})

    def stage_bytes(self, mma, b_kmajor: bool = True) -> tuple[int, int]:
        """Bytes of one stage's A tile and B tile in shared memory (rows padded)."""
        es, bk = mma.ab_bytes, self.bk(mma)
        a = self.bm * (bk * es + SMEM_PAD)
        b = bk * (self.bn * es + SMEM_PAD) if b_kmajor else self.bn * (bk * es + SMEM_PAD)
        return a, b

    def transposed_b_bytes(self, mma, b_kmajor: bool = True) -> int:
        """Bytes of the [n][k] copy of an 8- or 32-bit k-major B tile (ldmatrix transposes 16-bit
        elements only: the k-step's tile is transposed once in shared memory, see emit.py); 0
        where none is made."""
        return self.bn * (self.bk(mma) * mma.ab_bytes + SMEM_PAD) if b_kmajor and mma.ab_bytes != 2 else 0

    def shared_bytes(self, mma, b_kmajor: bool = True) -> int:
        return self.stages * sum(self.stage_bytes(mma, b_kmajor)) + self.transposed_b_bytes(mma, b_kmajor)

    def check(self, mma=None, target: str = "sm_90", b_kmajor: bool = True, conv=None) -> "GpuSchedule":
        """Raise ScheduleError naming the knob whose value cannot be compiled."""
        for name, allowed in KNOB_VALUES.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v not in allowed:
                raise ScheduleError(f"knob {name}={v!r}: must be one of {', '.join(map(str, allowed))}")
        if self.warps > MAX_WARPS:
            raise ScheduleError(f"knobs BLK_ROW_WARPS*BLK_COL_WARPS = {self.warps} warps: at most {MAX_WARPS}")
        acc = self.WARP_ROW_TILES * self.WARP_COL_TILES * 8
        if acc > MAX_ACC_REGS:
            raise ScheduleError(f"knobs WARP_ROW_TILES*WARP_COL_TILES = {acc // 8} tiles hold {acc} accumulator "
                                f"registers per thread: at most {MAX_ACC_REGS}")
        budget = min(255, REGISTERS_PER_CTA // self.threads)
        if acc + 32 > budget:        # fragments and addresses need about 32 more
            raise ScheduleError(f"knobs WARP_ROW_TILES*WARP_COL_TILES = {acc // 8} tiles ({acc} accumulator registers) "
                                f"with BLK_ROW_WARPS*BLK_COL_WARPS = {self.warps} warps: {self.threads} threads get "
                                f"{budget} registers each")
        if mma is not None:
            need, limit = self.shared_bytes(mma, b_kmajor), SHARED_LIMIT.get(target, SHARED_LIMIT["sm_80"])
            if need > limit:
                raise ScheduleError(f"knob stages={self.stages} (with CHUNK={self.CHUNK}): {need} bytes of shared "
                                    f"memory, {target} has {limit}")
            if conv is not None and self.REORDER_INNER and conv.c % self.bk(mma):
                raise ScheduleError(f"knob REORDER_INNER=1 needs CHUNK*{mma.k} = {self.bk(mma)} to divide the "
                                    f"{conv.c} input channels")
        return self


def schedule_from(knobs) -> GpuSchedule:
    """A GpuSchedule from a GpuSchedule, a dict of knobs, or None (the defaults)."""
    if knobs is None:
        return GpuSchedule()
    if isinstance(knobs, GpuSchedule):
        return knobs
    if isinstance(knobs, dict):
        unknown = set(knobs) - set(KNOB_VALUES)
        if unknown:
            raise ScheduleError(f"unknown knob {sorted(unknown)[0]!r}; knobs: {', '.join(KNOB_VALUES)}")
        return GpuSchedule(**knobs)
    raise ScheduleError(f"GPU schedule: a GpuSchedule or a dict of knobs, not {knobs!r}")
