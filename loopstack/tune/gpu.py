"""Tuning the tensor-core knobs: an analytical GPU cost model and the diversity-aware search.

    result = tune_gpu(tensor_or_tree, target="sm_90", generations=8, measure=None)
    result.best (a GpuSchedule), result.predicted_tflops, result.history

The search is the tensor-core paper's (§3.4): each parent candidate yields two mutants (one
random knob changed each); half of all mutants are kept, picked greedily for predicted speed
times their distance (differing knobs) to those already kept, so that the batch is not a
cloud of near-copies of the best; the kept mutants then compete with the parents for the
next population.  Without a GPU the candidates are ranked by `predict_seconds`, an
analytical model of an H100-class GPU (below); with `measure` (e.g. timing on the GPU) the
top of each generation is measured and the measurements decide.

The model, per kernel: CTAs per SM from shared memory, threads and registers; waves of CTAs
over the SMs; per CTA the mma work at the SM's mma.sync rate, derated when a warp issues
many ldmatrix per mma (small warp tiles) and when fewer than 2 stages leave the copies
exposed; the global traffic (each CTA reads BM x K of A and K x BN of B) against L2 and DRAM
bandwidth; zero-filled tails count as work done.  It ranks knobs; it is not a simulator.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from ..backend.ptx import GpuSchedule
from ..backend.ptx.knobs import KNOB_VALUES
from ..backend.ptx.match import Contraction, match
from ..errors import ScheduleError
from ..isa.ptx.mma import mma_for
from .mappers import _diverse


@dataclass(frozen=True)
class GpuModel:
    """Figures of the modelled GPU (defaults: H100 SXM; mma.sync rates, not wgmma's)."""
    sms: int = 132
    clock_ghz: float = 1.755
    # dense tensor-core flops per SM per cycle through mma.sync: about two thirds of the 4096
    # (f16) that wgmma reaches, as mma.sync kernels measure on Hopper
    mma_flops_per_sm_cycle: dict = field(default_factory=lambda: {"f16": 2730, "bf16": 2730, "s8": 5460})
    smem_per_sm: int = 228 * 1024
    regs_per_sm: int = 65536
    threads_per_sm: int = 2048
    max_ctas_per_sm: int = 32
    dram_gbs: float = 3350.0
    l2_gbs: float = 10000.0
    l2_bytes: int = 50 * 1024 * 1024


H100 = GpuModel()


def registers_per_thread(s: GpuSchedule) -> int:
    """Accumulators, the A and B fragments of one k-step, and addressing (an estimate)."""
    acc = 8 * s.WARP_ROW_TILES * s.WARP_COL_TILES
    frags = 4 * s.WARP_ROW_TILES + 4 * s.WARP_COL_TILES
    return min(255, acc + frags + 40)


def predict_seconds(con: Contraction, s: GpuSchedule, model: GpuModel = H100) -> float:
    mma = mma_for(con.dtype)
    smem = s.shared_bytes(mma, con.b_kmajor)
    regs = registers_per_thread(s) * s.threads
    per_sm = min(model.smem_per_sm // max(smem, 1), model.regs_per_sm // regs,
                 model.threads_per_sm // s.threads, model.max_ctas_per_sm)
    if per_sm < 1:
        return math.inf
    tiles_m, tiles_n = -(-con.m // s.bm), -(-con.n // s.bn)
    bk = s.bk(mma)
    k_steps = -(-con.k // bk)
    ctas = tiles_m * tiles_n
    waves = -(-ctas // (model.sms * per_sm))
    # one CTA's mma work at the SM rate it shares with the other resident CTAs
    flops_cta = 2 * s.bm * s.bn * k_steps * bk
    rate = model.mma_flops_per_sm_cycle[mma.ab] * model.clock_ghz * 1e9
    # ldmatrix per mma: a warp tile of r x c 16x16 tiles loads r + c fragments for 2rc mmas
    issue = 1.0 + 0.5 * (s.WARP_ROW_TILES + s.WARP_COL_TILES) / (2 * s.WARP_ROW_TILES * s.WARP_COL_TILES)
    if mma.ab == "s8" and con.b_kmajor:
        issue += 1.5     # B gathered byte by byte: 16 shared loads per 32x8 fragment instead of one ldmatrix
    resident_warps = per_sm * s.warps
    latency = 1.0 if resident_warps >= 8 else 1.0 + (8 - resident_warps) / 8
    overlap = {1: 1.6, 2: 1.1, 3: 1.0, 4: 1.0}[s.stages]
    compute = waves * per_sm * flops_cta / rate * issue * latency * overlap
    # global traffic: every CTA reads its A rows and B columns once per k-step
    es = mma.ab_bytes
    traffic = ctas * k_steps * bk * (s.bm + s.bn) * es
    unique = (con.m * con.k + con.k * con.n) * es
    dram = unique if unique < model.l2_bytes else traffic / 2
    memory = max(traffic / (model.l2_gbs * 1e9), dram / (model.dram_gbs * 1e9))
    return max(compute, memory) + 3e-6        # plus a launch


def valid(con: Contraction, s: GpuSchedule, target: str) -> bool:
    try:
        s.check(mma_for(con.dtype), target, con.b_kmajor, con.conv)
        return True
    except ScheduleError:
        return False


def _mutate(s: GpuSchedule, rng: random.Random) -> GpuSchedule:
    name = rng.choice(sorted(KNOB_VALUES))
    choices = [v for v in KNOB_VALUES[name] if v != getattr(s, name)]
    return s.replace(**{name: rng.choice(choices)})


def _distance(a: GpuSchedule, b: GpuSchedule) -> int:
    """Knobs that differ: the paper's measure of configuration diversity."""
    return sum(getattr(a, n) != getattr(b, n) for n in KNOB_VALUES)


def diverse_half(cands: list, score: dict) -> list:
    """Half of `cands`, picked greedily by score times (1 + knobs differing from those picked)."""
    return _diverse(list(dict.fromkeys(cands)), score, max(1, len(cands) // 2), distance=_distance)


@dataclass
class GpuTuneResult:
    best: GpuSchedule
    predicted_tflops: float
    measured_tflops: float | None
    history: list                  # per generation: (best predicted TFLOPS, distinct candidates seen)
    evaluated: int
    arch: str = "sm_90"

    @property
    def target(self):
        """The GpuTarget to compile with: `lt.compile(C, target=result.target)`."""
        from ..backend.ptx import GpuTarget
        return GpuTarget(self.arch, self.best)


def tune_gpu(tensor_or_tree, target: str = "sm_90", population: int = 12, generations: int = 8,
             seed: int = 0, measure=None, model: GpuModel = H100) -> GpuTuneResult:
    """Diversity-aware evolutionary search over the tensor-core knobs (see the module doc).

    `measure(schedule) -> seconds`, when given, times the predicted-best few of each
    generation on the GPU; their measurements then replace the predictions."""
    tree = tensor_or_tree
    if hasattr(tree, "loop_tree"):
        tree = tree.loop_tree
    if hasattr(tree, "lower"):
        tree = tree.lower()
    con = match(tree)
    rng = random.Random(seed)
    score: dict = {}
    measured: dict = {}

    def rate(s):
        if s not in score:
            score[s] = con.flops / predict_seconds(con, s, model) / 1e12 if valid(con, s, target) else 0.0
        return measured.get(s, score[s])

    pop = {GpuSchedule()}
    while len(pop) < population:
        s = GpuSchedule(**{n: rng.choice(v) for n, v in KNOB_VALUES.items()})
        if valid(con, s, target):
            pop.add(s)
    pop = list(pop)
    history = []
    for _ in range(generations):
        mutants = [_mutate(p, rng) for p in pop for _ in range(2)]
        mutants = [m for m in mutants if rate(m) > 0]
        for m in mutants:
            rate(m)
        chosen = diverse_half(mutants, {m: rate(m) for m in mutants}) if mutants else []
        pool = list(dict.fromkeys(pop + chosen))
        if measure is not None:
            for s in sorted(pool, key=lambda c: -rate(c))[:2]:
                if s not in measured:
                    measured[s] = con.flops / measure(s) / 1e12
        pop = sorted(pool, key=lambda c: -rate(c))[:population]
        history.append((rate(pop[0]), len(score)))
    while measure is not None and pop[0] not in measured:     # the winner is always a measured one
        measured[pop[0]] = con.flops / measure(pop[0]) / 1e12
        pop.sort(key=lambda c: -rate(c))
    best = pop[0]
    return GpuTuneResult(best, score[best], measured.get(best), history, len(score), target)
