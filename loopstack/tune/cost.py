"""Cost models: score candidate loop trees; any mapper works with any of them.

    measure     measured GFLOPS of the compiled kernel (ground truth; warm-up, best of N),
                in worker processes (measure.py)
    analytical  roofline of the target's FMA peak and cache bandwidths, with the traffic of
                each cache level from a reuse estimate: the working set of the loops at and
                inside depth d, the outermost depth whose working set fits a level being
                where that level's reuse starts (Zhang et al., direct convolution, §4.1.1)
    learned     gradient-boosted trees correcting the analytical estimate from loop-tree
                features (the analytical model's terms among them), refitted as the
                search measures

A model's `predict(trees)` returns estimated GFLOPS (higher is better) and
`observe(trees, gflops)` feeds it measurements; only `measure` is ground truth, and the
tuner measures the candidates the others rank highest (api.py).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..dtypes import dtype as _dtype
from ..looptree import stats
from ..looptree.ir import Loop
from .boost import GradientBoostedTrees

LINE = 64                 # bytes per cache line
PAGE = 4096               # bytes per (small) page


@dataclass(frozen=True)
class Machine:
    """What the analytical model reads from a Target (one source of truth: isa/target.py)."""
    peak_gflops: float
    lanes: int
    fma_chains: float          # accumulators that hide the FMA latency: pipes x (latency plus
                               # half a cycle: a block of exactly latency x pipes waits on any
                               # late load, and measures 5-10 % below one with a few more)
    accumulators: int          # register-block limit
    caches: tuple[int, ...]    # l1d, l2, l3 bytes
    bandwidth: tuple[float, ...]   # GB/s out of l1, l2, l3, memory
    tlbs: tuple[tuple[int, float], ...] = ()   # per TLB level: (pages it maps, seconds per miss)

    @staticmethod
    def of(target, peak: float) -> "Machine":
        ghz = peak / (2 * target.lanes() * target.fma_units)
        vec = target.vector_bits // 8
        # loads per cycle: 2 vectors from L1, one line every 2 cycles from L2, a quarter from L3
        bw = (2 * vec * ghz, LINE / 2 * ghz, LINE / 4 * ghz, 12.0)
        return Machine(peak, target.lanes(), target.fma_units * (target.fma_latency + 0.5),
                       target.block_registers, (target.l1d, target.l2, target.l3), bw,
                       ((target.dtlb_entries, target.dtlb_miss_cycles / (ghz * 1e9)),
                        (target.stlb_entries, target.stlb_miss_cycles / (ghz * 1e9))))


def _statements(ir):
    """(stack, compute) pairs that do arithmetic (copies counted as traffic only)."""
    return [(s, c) for s, c in ir.computes()]


def _dim_extent_inside(stack, ranges, d: int) -> dict[str, int]:
    """Extent of each dimension covered by the loops stack[d:] (outer loops held fixed)."""
    ext: dict[str, int] = {}
    for lp in stack[d:]:
        if lp.dim not in ext:
            ext[lp.dim] = ranges[lp.var][0]
    return ext


def _swept(stack, ranges, d: int) -> dict[str, int]:
    """What the loops stack[d:] sweep, by index term: each dimension's extent, and under
    "@var" a loop's own value, which sweeps its dimension's extent when the loop is inside
    (the loops outside hold theirs fixed: a packed panel's `c - @L0` spans one tile)."""
    ext = _dim_extent_inside(stack, ranges, d)
    return {**ext, **{"@" + lp.var: ext[lp.dim] for lp in stack[d:]}}


def _footprint(acc, swept: dict[str, int], itemsize: int, strides: tuple[int, ...],
               line: int = LINE) -> int:
    """Bytes of the cache lines (or pages: `line`) of `acc`'s buffer touched while the loops
    of `swept` run.  Inner dimensions swept whole join the contiguous run of the next one out
    (a packed panel's rows are one run of lines, a strided panel's rows a run each)."""
    spans = [1 + sum(abs(c) * (swept.get(name, 1) - 1) for name, c in a.terms) for a in acc.index]
    if not spans:
        return line
    dims = sorted(zip(strides or (1,) * len(spans), spans), reverse=True)   # outermost first
    stride, span = dims[-1]
    if stride * itemsize >= line:          # a line per element
        return int(np.prod([n for _, n in dims], dtype=np.float64)) * line
    run, k = (span - 1) * stride + 1, len(dims) - 1
    while k > 0 and (run >= dims[k - 1][0] or dims[k - 1][0] * itemsize <= line):   # rows share lines
        run += (dims[k - 1][1] - 1) * dims[k - 1][0]
        k -= 1
    outer = float(np.prod([n for _, n in dims[:k]], dtype=np.float64)) if k else 1.0
    return int(outer * math.ceil(run * itemsize / line) * line)


def _new_share(acc, strides, loop, itemsize: int, line: int = LINE) -> float:
    """Share of an access's lines that one step of `loop` brings in: its byte step over a line
    when that is less than a line and along the contiguous dimension, else all of them."""
    if loop is None:
        return 1.0
    step = 0
    for a, st in zip(acc.index, strides):
        for name, c in a.terms:
            if name == "@" + loop.var or name == loop.dim:
                step += c * loop.step * st
    step = abs(step) * itemsize
    return step / line if 0 < step < line and min(strides, default=1) * itemsize < line else 1.0


def _trips(stack, ranges, d: int) -> float:
    n = 1.0
    for lp in stack[:d]:
        r, e, t = ranges[lp.var]
        n *= e + (1 if t else 0)
    return n


def analyze(ir, machine: Machine) -> dict[str, float]:
    """Features and the roofline estimate of one lowered loop tree."""
    ranges = stats.loop_ranges(ir)
    buffers = {b.name: b for b in ir.buffers}
    total_flops = max(1, stats.flops(ir))
    compute_s, seconds = 0.0, 0.0
    mem_s = [0.0] * len(machine.caches)        # time to fill L1, L2, L3 from the next level
    tlb_s = 0.0
    feats = {"acc_vectors": 0.0, "vector_ok": 0.0, "inner_extent": 0.0, "depth": 0.0, "copies": 0.0}
    for stack, comp in _statements(ir):
        f = stats.statement_flops(ir, stack, comp)
        isz = _dtype(buffers[comp.out.buffer].dtype).itemsize
        if comp.is_copy:
            feats["copies"] += 1
        in_registers = len(stack) + 1          # depth from which the output block stays in registers
        stmt_compute = 0.0
        if f and stack:
            eff, vec_eff, acc_vecs, vec_ok, inner_ext, in_registers = _in_core(stack, comp, ranges, machine)
            stmt_compute = f / (machine.peak_gflops * 1e9 * max(1e-3, eff * vec_eff))
            feats["acc_vectors"] = max(feats["acc_vectors"], float(acc_vecs))
            feats["vector_ok"] = max(feats["vector_ok"], float(vec_ok))
            feats["inner_extent"] = max(feats["inner_extent"], float(inner_ext))
            feats["depth"] = max(feats["depth"], float(len(stack)))
        # fills per level: the working set of the outermost depth that fits the level, once
        # per trip of the loops outside it (the working sets shrink inwards; computed once each)
        accs = [(a, buffers[a.buffer].strides) for a in [comp.out] + list(comp.reads())]
        swept = [_swept(stack, ranges, d) for d in range(len(stack) + 1)]
        fps = [[_footprint(a, sw, isz, st) if i > 0 or d <= in_registers else 0   # per depth, access
                for i, (a, st) in enumerate(accs)] for d, sw in enumerate(swept)]
        stmt_mem = []
        for lvl, size in enumerate(machine.caches):
            d_fit = next((d for d, fp in enumerate(fps) if sum(fp) <= 0.5 * size), len(stack))
            # the next trip of the loop outside shares the lines of an access it moves by less
            # than a line (a matmul's A column moving along k): only the moved part is new
            outer = stack[d_fit - 1] if d_fit else None
            fill = _trips(stack, ranges, d_fit) * sum(
                fp * _new_share(a, st, outer, isz) for fp, (a, st) in zip(fps[d_fit], accs))
            # what fills a level comes out of the next one (L1's own load rate: _in_core)
            stmt_mem.append(fill / (machine.bandwidth[lvl + 1] * 1e9))
        # TLB misses, as the fills of a cache whose lines are pages (a weight panel read with a
        # stride of a page or more per row misses on every row)
        pages = [[_footprint(a, sw, isz, st, PAGE) / PAGE for a, st in accs] for sw in swept]
        stmt_tlb = 0.0
        for entries, miss_s in machine.tlbs:
            d = next((d for d, n in enumerate(pages) if sum(n) <= entries), len(stack))
            if d:
                new = sum(n * _new_share(a, st, stack[d - 1], isz, PAGE) for n, (a, st) in zip(pages[d], accs))
                stmt_tlb += new * _trips(stack, ranges, d) * miss_s
        # a statement's compute and its cache fills overlap (the fills are prefetched), its
        # TLB misses stall the loads that miss; statements (a packing copy and the nest that
        # reads the packed panel) run one after the other
        seconds += max([stmt_compute] + stmt_mem) + stmt_tlb
        compute_s += stmt_compute
        tlb_s += stmt_tlb
        mem_s = [t + m for t, m in zip(mem_s, stmt_mem)]
    feats["tlb_s"] = tlb_s
    feats.update({"flops": float(total_flops), "compute_s": compute_s, "seconds": seconds,
                  "gflops": total_flops / seconds / 1e9 if seconds > 0 else 0.0})
    for i, s in enumerate(mem_s):
        feats[f"mem{i}_s"] = s
    return feats


def _in_core(stack, comp, ranges, machine: Machine):
    """(FMA efficiency of the register block, vector efficiency, accumulator vectors, whether
    the innermost loop vectorises, its extent, the depth from which the output block stays in
    registers: inside the run of reduction loops right above the block, when it fits)."""
    inner = stack[-1]
    out_dims = stats.output_dims(stack, comp)
    last = comp.out.index[-1] if comp.out.index else None
    vec_ok = last is not None and any(
        (n == inner.dim or n == "@" + inner.var) and c == 1 for n, c in last.terms)
    inner_ext = ranges[inner.var][0]
    lanes = machine.lanes
    vec_eff = min(1.0, inner_ext / (lanes * math.ceil(inner_ext / lanes))) if vec_ok else 1.0 / lanes
    red = [i for i, lp in enumerate(stack) if lp.dim not in out_dims]
    below = stack[red[-1] + 1:] if red else stack
    ext = _dim_extent_inside(below, ranges, 0) if below else {}
    block = 1
    for e in ext.values():
        block *= e
    acc_vecs = math.ceil(block / lanes) if vec_ok else block
    in_registers = len(stack) + 1
    if red and acc_vecs <= machine.accumulators:
        eff = _edge_efficiency(stack[:red[-1] + 1], ext, inner.dim, vec_ok, ranges, machine)
        in_registers = red[-1]
        while in_registers > 0 and stack[in_registers - 1].dim not in out_dims:
            in_registers -= 1
    else:
        eff = 0.3                     # the output accumulates in memory (load + store per FMA)
    return eff, vec_eff, acc_vecs, vec_ok, inner_ext, in_registers


def _block_efficiency(rows: int, vecs: int, machine: Machine) -> float:
    """Share of the FMA peak a rows x vecs register block sustains: enough independent
    accumulators to hide the FMA latency, and few enough loads (a broadcast per row, a
    vector per column) per FMA."""
    acc = rows * vecs
    return min(1.0, acc / machine.fma_chains) * min(1.0, 2 * acc / (acc + rows + vecs))


def _edge_efficiency(outer, ext: dict[str, int], vec_dim: str, vec_ok: bool, ranges,
                     machine: Machine) -> float:
    """The register block's efficiency over the whole nest, its edges included: where the
    loop stepping a block dimension leaves a remainder (a 128-wide matmul in panels of 24
    columns ends in a panel of 8), that share of the work runs the smaller block of the
    remainder, and the times of the full and the edge blocks add."""
    lanes = machine.lanes
    parts = {}                  # dim -> [(share of the work, extent of the block there)]
    for dim, e in ext.items():
        parts[dim] = [(1.0, e)]
        lp = next((lp for lp in reversed(outer) if lp.dim == dim), None)
        if lp is None or lp.step != e:
            continue
        r, full, tail = ranges[lp.var]
        if tail and r:
            parts[dim] = [(full * e / r, e), (tail / r, tail)]
    seconds = 0.0
    for combo in itertools.product(*parts.values()):
        share = math.prod(s for s, _ in combo)
        sizes = dict(zip(parts, (x for _, x in combo)))
        cols = sizes.get(vec_dim, 1)
        vecs = math.ceil(cols / lanes) if vec_ok else cols
        rows = max(1, math.prod(x for d, x in sizes.items() if d != vec_dim))
        seconds += share / max(1e-3, _block_efficiency(rows, vecs, machine))
    return 1.0 / seconds if seconds > 0 else 1.0


class CostModel:
    name = "base"
    measured = False        # True: predict() is ground truth and needs no measuring

    def predict(self, trees) -> list[float]:
        raise NotImplementedError

    def observe(self, trees, gflops) -> None:
        """Learn from measured GFLOPS (0 for a failed candidate)."""


class MeasuredCost(CostModel):
    """Ground truth: the tuner measures every candidate (predict is not used)."""
    name = "measure"
    measured = True

    def predict(self, trees) -> list[float]:
        return [0.0 for _ in trees]


class AnalyticalCost(CostModel):
    name = "analytical"

    def __init__(self, machine: Machine):
        self.machine = machine
        self._memo: dict = {}

    def features(self, tree) -> dict:
        """analyze()'s features, and "inner_steps": the steps of the innermost loops of the
        statement with the most flops (lowering is the costly part: done once per tree)."""
        key = tree.key()
        hit = self._memo.get(key)
        if hit is None:
            ir = tree.lower()
            hit = analyze(ir, self.machine)
            hit["inner_steps"] = tuple(lp.step for lp in _innermost_stack(ir)[-6:])
            self._memo[key] = hit
        return hit

    def predict(self, trees) -> list[float]:
        return [self.features(t)["gflops"] for t in trees]


class LearnedCost(CostModel):
    """Gradient-boosted trees (boost.py) fitted to what the analytical model gets wrong: the
    log of measured over estimated GFLOPS, from loop-tree features.  The estimate times the
    learned correction is the prediction, so the model starts from the roofline's ranking
    and bends it where measurements disagree (refitted as measurements accumulate; below
    `min_samples` it is the analytical estimate).  On the tuner's own search histories this
    ranks held-out candidates better than ridge regression did, by far with few samples."""
    name = "learned"

    def __init__(self, machine: Machine, min_samples: int = 8, refit_growth: float = 1.1):
        self.analytical = AnalyticalCost(machine)
        self.min_samples, self.refit_growth = min_samples, refit_growth
        self.X: list[np.ndarray] = []
        self.y: list[float] = []
        self.model = None
        self._fitted_on = 0

    def vector(self, tree) -> np.ndarray:
        f = self.analytical.features(tree)
        m = self.analytical.machine
        steps = f["inner_steps"]
        ext = [math.log2(1 + s) for s in steps] + [0.0] * (6 - len(steps))
        acc = f["acc_vectors"]
        return np.array([
            1.0, math.log(max(f["gflops"], 1e-3)), math.log(max(f["compute_s"], 1e-12) / max(f["seconds"], 1e-12)),
            min(acc, 20) / m.accumulators, float(acc > m.accumulators), min(1.0, acc / m.fma_chains),
            f["vector_ok"], math.log2(1 + f["inner_extent"]), f["depth"] / 10, f["copies"],
            *[math.log(max(f[f"mem{i}_s"], 1e-12) / max(f["seconds"], 1e-12)) for i in range(3)],
            *ext])

    def observe(self, trees, gflops) -> None:
        for t, g in zip(trees, gflops):
            v = self.vector(t)
            self.X.append(v)
            self.y.append(math.log(max(g, 0.05)) - v[1])     # v[1]: log of the estimate
        n = len(self.y)
        # a refit costs tens of milliseconds at hundreds of samples: refit as the data grow
        if n >= self.min_samples and n >= self.refit_growth * self._fitted_on:
            self.model = GradientBoostedTrees().fit(np.array(self.X), np.array(self.y))
            self._fitted_on = n

    def predict(self, trees) -> list[float]:
        if self.model is None or not trees:
            return self.analytical.predict(trees)
        X = np.array([self.vector(t) for t in trees])
        return [float(math.exp(x[1] + c)) for x, c in zip(X, self.model.predict(X))]


def _innermost_stack(ir):
    """The loop stack of the statement with the most flops."""
    best, key = (), -1
    for stack, comp in ir.computes():
        f = stats.statement_flops(ir, stack, comp)
        if f > key:
            best, key = stack, f
    return [lp for lp in best if isinstance(lp, Loop)]


def make_cost_model(name: str, machine: Machine) -> CostModel:
    if name == "measure":
        return MeasuredCost()
    if name == "analytical":
        return AnalyticalCost(machine)
    if name == "learned":
        return LearnedCost(machine)
    from ..errors import ArgumentError

    raise ArgumentError(f"unknown cost model {name!r}; known: measure, analytical, learned")


def _average_ranks(values) -> np.ndarray:
    """1-based ranks, tied values sharing the mean of the ranks they span."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    sx = x[order]
    start = 0
    for end in range(1, len(x) + 1):
        if end == len(x) or sx[end] != sx[start]:
            ranks[order[start:end]] = (start + end + 1) / 2     # mean of start+1 .. end
            start = end
    return ranks


def spearman(a, b) -> float:
    """Spearman rank correlation (average ranks for ties); nan when either side is constant."""
    ra, rb = _average_ranks(a), _average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return float(ra @ rb) / den if den > 0 else float("nan")
