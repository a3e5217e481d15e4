"""Tuning the tensor-core knobs: an analytical GPU cost model and the diversity-aware search.

    result = tune_gpu(tensor_or_tree, target="sm_90", generations=8, measure=None)
    result.best (a GpuSchedule), result.predicted_tflops, result.history

The search is the tensor-core paper's (§3.4): each parent candidate yields two mutants (one
random knob changed each); half of all mutants are kept, picked greedily for predicted speed
times their distance (differing knobs) to those already kept, so that the batch is not a
cloud of near-copies of the best; the kept mutants then compete with the parents for the
next population.  Without a GPU the candidates are ranked by `predict_seconds`, an
analytical model of an H100-class GPU; with `measure` (e.g. timing on the GPU) the
top of each generation is measured and the measurements decide.

The model lives with the backend (`loopstack.backend.ptx.model`), which also picks a
compile's default knobs with it.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..backend.ptx import GpuSchedule
from ..backend.ptx.bind import check_request, stated_knobs
from ..backend.ptx.knobs import KNOB_VALUES
from ..backend.ptx.match import Contraction, match
from ..backend.ptx.model import H100, GpuModel, predict_seconds
from ..errors import ScheduleError
from .mappers import _diverse


def valid(con: Contraction, s: GpuSchedule, target: str) -> bool:
    try:
        s.check(con.mma, target, con.b_kmajor, con.conv)
        return True
    except ScheduleError:
        return False


def _mutate(s: GpuSchedule, rng: random.Random, names=tuple(sorted(KNOB_VALUES))) -> GpuSchedule:
    """`s` with one of the knobs `names` changed at random."""
    name = rng.choice(names)
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
    allow_tf32: bool = False

    @property
    def target(self):
        """The GpuTarget to compile with: `lt.compile(C, target=result.target)`."""
        from ..backend.ptx import GpuTarget
        return GpuTarget(self.arch, self.best, allow_tf32=self.allow_tf32)


def tune_gpu(tensor_or_tree, target: str = "sm_90", population: int = 12, generations: int = 8,
             seed: int = 0, measure=None, model: GpuModel = H100, allow_tf32: bool = False) -> GpuTuneResult:
    """Diversity-aware evolutionary search over the tensor-core knobs (see the module doc).

    `measure(schedule) -> seconds`, when given, times the predicted-best few of each
    generation on the GPU; their measurements then replace the predictions.  `allow_tf32`: as
    GpuTarget's (float32 operands), and carried by the result's `target`."""
    tree = tensor_or_tree
    if hasattr(tree, "loop_tree"):
        tree = tree.loop_tree
    if hasattr(tree, "lower"):
        tree = tree.lower()
    con = match(tree)
    check_request(con, allow_tf32, target)
    fixed = stated_knobs(con, con.mma)     # a tree's bound loops keep their knobs

    def pin(s: GpuSchedule) -> GpuSchedule:
        return s.replace(**fixed) if fixed else s
    free = tuple(n for n in sorted(KNOB_VALUES) if n not in fixed)
    rng = random.Random(seed)
    score: dict = {}
    measured: dict = {}

    def rate(s):
        if s not in score:
            score[s] = con.flops / predict_seconds(con, s, model) / 1e12 if valid(con, s, target) else 0.0
        return measured.get(s, score[s])

    pop = {pin(GpuSchedule())}
    candidates = math.prod(len(KNOB_VALUES[n]) for n in free)
    for _ in range(50 * population):
        if len(pop) >= min(population, candidates):
            break
        s = pin(GpuSchedule(**{n: rng.choice(v) for n, v in KNOB_VALUES.items()}))
        if valid(con, s, target):
            pop.add(s)
    pop = list(pop)
    history = []
    for _ in range(generations):
        mutants = [_mutate(p, rng, free) for p in pop for _ in range(2)]
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
    return GpuTuneResult(best, score[best], measured.get(best), history, len(score), target, allow_tf32)
