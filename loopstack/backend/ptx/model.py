"""An analytical model of a GPU running these kernels: it ranks knobs without a GPU.

Per kernel: CTAs per SM from shared memory, threads and registers; the CTAs of the busiest SM
(ceil(CTAs / SMs)) one after another, each its mma work at the SM's mma.sync rate, derated
when a warp issues many ldmatrix per mma (small warp tiles), when few warps are resident, and
when fewer than 2 stages leave the copies exposed; the global traffic (each CTA reads BM x K
of A and K x BN of B) against L2 and DRAM bandwidth; zero-filled tails count as work done.
It ranks knobs; it is not a simulator.  The tuner (`loopstack.tune.gpu`) searches with it, and
`default_schedule` picks a compile's knobs from a few presets with it when none are given.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .knobs import GpuSchedule
from .match import Contraction

@dataclass(frozen=True)
class GpuModel:
    """Figures of the modelled GPU (defaults: H100 SXM; mma.sync rates, not wgmma's)."""
    sms: int = 132
    clock_ghz: float = 1.755
    # dense tensor-core flops per SM per cycle through mma.sync: about two thirds of the 4096
    # (f16) that wgmma reaches, as mma.sync kernels measure on Hopper
    mma_flops_per_sm_cycle: dict = field(default_factory=lambda: {"f16": 2730, "bf16": 2730, "tf32": 1365, "s8": 5460,
                                                                     "u8": 5460})
    smem_per_sm: int = 228 * 1024
    regs_per_sm: int = 65536
    threads_per_sm: int = 2048
    max_ctas_per_sm: int = 32
    dram_gbs: float = 3350.0
    l2_gbs: float = 10000.0
    l2_bytes: int = 50 * 1024 * 1024

    def mma_rate(self, ab: str) -> float:
        """The GPU's dense mma.sync flops per second for operands `ab` ("f16", "s8", ...)."""
        return self.mma_flops_per_sm_cycle[ab] * self.sms * self.clock_ghz * 1e9


H100 = GpuModel()


def registers_per_thread(s: GpuSchedule, conv: bool = False) -> int:
    """Accumulators, the A and B fragments of one k-step, the addresses of the 16-byte copies a
    thread issues each k-step beyond four (ptxas keeps their global and shared addresses across
    the loop, about 4 registers each; a k-step row is 32 * CHUNK bytes in every mma form), 24
    for the rest, and 8 more for a convolution's pixel coordinates.  An estimate fitted to what
    ptxas reports: within 40 registers, and the same CTAs per SM, for the presets in every form
    (tests/gpu/test_tune_gpu.py holds it to that)."""
    acc = 8 * s.WARP_ROW_TILES * s.WARP_COL_TILES
    frags = 4 * s.WARP_ROW_TILES + 4 * s.WARP_COL_TILES
    copies = -(-(s.bm + s.bn) * s.CHUNK * 2 // s.threads)
    return min(255, acc + frags + 4 * max(0, copies - 4) + 24 + (8 if conv else 0))


def ctas_per_sm(threads: int, regs_per_thread: int, smem: int, model: GpuModel = H100) -> int:
    """CTAs resident on one SM, as shared memory, registers and threads allow."""
    return min(model.smem_per_sm // max(smem, 1), model.regs_per_sm // (regs_per_thread * threads),
               model.threads_per_sm // threads, model.max_ctas_per_sm)


def predict_seconds(con: Contraction, s: GpuSchedule, model: GpuModel = H100) -> float:
    mma = con.mma
    per_sm = ctas_per_sm(s.threads, registers_per_thread(s, con.conv is not None), s.shared_bytes(mma, con.b_kmajor),
                         model)
    if per_sm < 1:
        return math.inf
    tiles_m, tiles_n = -(-con.m // s.bm), -(-con.n // s.bn)
    bk = s.bk(mma)
    k_steps = -(-con.k // bk)
    ctas = tiles_m * tiles_n * con.batch
    # the busiest SM's CTAs, one after another at its whole rate: resident CTAs share the rate,
    # and a CTA that ends frees its slot for the next, so an SM runs ceil(ctas / SMs) of them
    # however many are resident at once (which decides only how well latency is hidden)
    per_busiest_sm = -(-ctas // model.sms)
    flops_cta = 2 * s.bm * s.bn * k_steps * bk
    rate = model.mma_rate(mma.ab) / model.sms       # one SM's
    # ldmatrix per mma: a warp tile of r x c 16x16 tiles loads r + c fragments for 2rc mmas
    issue = 1.0 + 0.5 * (s.WARP_ROW_TILES + s.WARP_COL_TILES) / (2 * s.WARP_ROW_TILES * s.WARP_COL_TILES)
    mmas = 2 * s.WARP_ROW_TILES * s.WARP_COL_TILES       # per warp per mma k-step
    if s.transposed_b_bytes(mma, con.b_kmajor):
        # a k-major 8- or 32-bit B is transposed in shared memory each k-step, at a quarter of an
        # ldmatrix's weight per instruction: about 20 per 4x4 bytes (4 loads, 8 prmt, 4 stores,
        # addressing), 8 per 4 float32 (4 loads, one v4 store, addressing)
        per_block, elements = (20, 16) if mma.ab_bytes == 1 else (8, 4)
        per_thread = per_block * (s.bk(mma) * s.bn // elements) / s.threads
        issue += 0.25 * per_thread / (mmas * s.CHUNK)
    if mma.ab == "tf32":      # each fragment register rounded to tf32 (cvt.rna) after ldmatrix
        issue += 0.25 * 4 * (s.WARP_ROW_TILES + s.WARP_COL_TILES) / mmas
    resident_warps = per_sm * s.warps
    latency = 1.0 if resident_warps >= 8 else 1.0 + (8 - resident_warps) / 8
    overlap = {1: 1.6, 2: 1.1, 3: 1.0, 4: 1.0}[s.stages]
    compute = per_busiest_sm * flops_cta / rate * issue * latency * overlap
    # global traffic: every CTA reads its A rows and B columns once per k-step
    es = mma.ab_bytes
    traffic = ctas * k_steps * bk * (s.bm + s.bn) * es
    a_copies, b_copies = (con.batch if con.a_batched else 1), (con.batch if con.b_batched else 1)
    unique = (con.m * con.k * a_copies + con.k * con.n * b_copies) * es
    dram = unique if unique < model.l2_bytes else traffic / 2
    memory = max(traffic / (model.l2_gbs * 1e9), dram / (model.dram_gbs * 1e9))
    return max(compute, memory) + 3e-6        # plus a launch


# presets `default_schedule` chooses from: CTA blocks of 128x256 down to 32x32, warp tiles of
# 64x64 (smem bandwidth keeps up with mma.sync) down to 32x32 for small problems
PRESETS = (GpuSchedule(2, 4, 4, 4, 2, 0, 3), GpuSchedule(2, 2, 4, 4, 2, 0, 3), GpuSchedule(2, 4, 4, 2, 2, 0, 3),
           GpuSchedule(2, 2, 2, 2, 2, 0, 3), GpuSchedule(1, 2, 2, 2, 4, 0, 3), GpuSchedule(1, 1, 2, 2, 4, 0, 4),
           GpuSchedule(1, 1, 1, 1, 4, 0, 4))


def default_schedule(con: Contraction, target: str, model: GpuModel = H100) -> GpuSchedule:
    """The preset (or its REORDER_INNER=1 twin) the model predicts fastest for `con`."""
    twins = (s for base in PRESETS for s in (base, base.replace(REORDER_INNER=1)))
    return fastest(con, target, twins, model) or PRESETS[-1]


def fastest(con: Contraction, target: str, candidates, model: GpuModel = H100) -> GpuSchedule | None:
    """The candidate that compiles for `con` on `target` and that the model predicts fastest (the
    first of equals), or None where none compiles in a finite time."""
    from ...errors import ScheduleError
    mma = con.mma
    best, best_t = None, math.inf
    for s in candidates:
        try:
            s.check(mma, target, con.b_kmajor, con.conv)
        except ScheduleError:
            continue
        t = predict_seconds(con, s, model)
        if t < best_t:
            best, best_t = s, t
    return best
