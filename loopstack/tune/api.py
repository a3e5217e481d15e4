"""`tune(tensor, ...)`: search schedules for a tensor's program and remember the best.

    result = lt.tune(C, budget_s=60, mapper="scripted", cost_model="measure", workers=1)
    result.gflops, result.default_gflops, result.actions, result.tree, result.history
    result = lt.tune(C, budget_s=60, cluster="auto")     # measured on a Ray cluster (tune.cluster)

Configuration is an explicit frozen `TuneConfig`; `TuneConfig.from_env()` reads
`LOOPSTACK_TUNING_DB` (through `lookup.configured_db_path`, which the schedule lookup of
`.numpy()` shares), and only `tune()` (when given no config) and the CLI call it.
The best schedule found is recorded in the database, and tensors without a schedule of their
own compile with it from then on (`frontend.run.schedules_changed` drops stale lookups).
"""
from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import ArgumentError, LoopstackError
from .cost import Machine, make_cost_model
from .db import TuningDB, describe_program, program_key
from .lookup import OFF, configured_db_path
from .measure import OK, WorkerPool, reference_output
from .space import Plan, actions_json, exact_plan, main_node, plan_of, realize, stage_node, var_sizes


@dataclass(frozen=True)
class TuneConfig:
    db_path: str | None = None        # None: ~/.cache/loopstack/tuning.db
    use_db: bool = True
    timeout_s: float = 20.0           # per candidate (compile + check + timing)
    runs: int = 10                    # timed runs per candidate (best counts), after one warm-up
    measure_fraction: float = 0.25    # with a predictive cost model: share of each batch measured
    cutoff: float = 1 / 3             # candidates whose first timed calls are below this share of
                                      # the best so far are not timed further (0: time them all)
    finalists: int = 3                # the search's best few, re-measured against the start (and
    confirm_rounds: int = 5           # the database's best) in interleaved rounds (at least 1)
    min_gain: float = 0.02            # ... and replace the start only when their median beats its
                                      # by this share (less is within a shared machine's noise)
    threads: int | None = None        # of a candidate's parallel loop (None: each measuring
                                      # worker's share of its machine's cores; 1: single-threaded)
    seed: int = 0

    @staticmethod
    def from_env(db_path: str | None = None, **kw) -> "TuneConfig":
        path = configured_db_path(db_path)
        if path == OFF:
            return TuneConfig(db_path=None, use_db=False, **kw)
        return TuneConfig(db_path=path, **kw)


@dataclass
class TuneResult:
    name: str
    gflops: float
    default_gflops: float
    peak_gflops: float
    actions: list                    # JSON-ready [[kind, [args]], ...]; replay with lt.apply_actions
    tree: object                     # the best frontend LoopTree
    history: list = field(default_factory=list)   # one dict per measured candidate
    measured: int = 0
    failed: int = 0
    seconds: float = 0.0
    program: str = ""
    start: str = "default"           # where the search began (see tune's `start`)
    start_gflops: float = 0.0        # the starting schedule's GFLOPS (the default's, by default),
                                     # re-measured beside the winner (see `confirm`)
    target: str = ""                 # the identity of the machines measured on
    nodes: list = field(default_factory=list)        # on a cluster: the actors that measured
    pool_stats: dict = field(default_factory=dict)   # ... what happened to them (ClusterPool.stats)
    by_target: dict = field(default_factory=dict)    # ... every kind's result, by identity

    def record(self) -> dict:
        return {"name": self.name, "best_gflops": self.gflops, "default_gflops": self.default_gflops,
                "peak_gflops": self.peak_gflops, "measured": self.measured, "failed": self.failed,
                "seconds": self.seconds, "start": self.start, "start_gflops": self.start_gflops,
                "target": self.target}


class Session:
    """What a mapper sees: the program's main loop nest, a budget and a cost model."""

    def __init__(self, base, target, machine, cost, pool, budget_s, config, workers, db=None,
                 program="", mapper="", progress=None, name="", identity: str | None = None):
        self.base, self.target, self.machine, self.cost, self.pool = base, target, machine, cost, pool
        self.config, self.workers, self.db, self.program, self.mapper_name = config, workers, db, program, mapper
        self.name = name
        self.identity = identity or target.identity     # the machines the pool measures on
        self.seed = config.seed
        self.nid = main_node(base)
        self.sizes = var_sizes(base, self.nid)
        self.output_vars = tuple(base.graph.node(self.nid).vars)
        self.lanes = target.lanes(base.graph.node(self.nid).dtype)
        self.n_stage_inputs = len(base.graph.node(stage_node(base, self.nid)).inputs)
        self.start_plan = plan_of(base, self.nid)
        self.start_best = (-1.0, self.start_plan)   # (GFLOPS, plan) once the start is measured
        self.t0 = time.monotonic()
        self.deadline = self.t0 + budget_s
        self.history: list[dict] = []
        self.results: dict = {}          # tree key -> GFLOPS (0: failed)
        self.trees: dict = {}            # tree key -> the measured tree
        self._built: dict = {}
        self.best = (-1.0, None)
        self.failed = 0
        self.progress = progress
        self.rng = random.Random(config.seed)
        if db is not None:
            self.shapes, self.dtypes = describe_program(base.graph)

    def exhausted(self) -> bool:
        return time.monotonic() >= self.deadline

    def build(self, plan: Plan):
        if plan not in self._built:
            try:
                self._built[plan] = realize(self.base, plan, self.nid)
            except LoopstackError:
                self._built[plan] = None
        return self._built[plan]

    def predict(self, trees) -> list[float]:
        return list(self.cost.predict(trees))

    def measure(self, trees) -> list[float]:
        todo = []
        for t in trees:
            if t.key() not in self.results and t.key() not in {x.key() for x in todo}:
                todo.append(t)
        if todo and not self.exhausted():
            res = self.pool.measure(todo, floor=self.config.cutoff * max(self.best[0], 0.0))
            for t, m in zip(todo, res):
                g = m.gflops if m.status == OK else 0.0
                self.results[t.key()] = g
                self.trees[t.key()] = t
                if m.status != OK:
                    self.failed += 1
                if g > self.best[0]:
                    self.best = (g, t)
                actions = actions_json(t)
                self.history.append({"t": time.monotonic() - self.t0, "gflops": g, "status": m.status,
                                     "best": max(self.best[0], 0.0), "detail": m.detail,
                                     "actions": actions, "node": m.node})
                if self.db is not None:
                    self.db.record(self.program, self.identity, actions, g, m.status,
                                   self.name, self.shapes, self.dtypes, self.mapper_name, m.node)
                if self.progress is not None:
                    self.progress(self)
            self.cost.observe(todo, [self.results[t.key()] for t in todo])
        return [self.results.get(t.key(), 0.0) for t in trees]

    def leaders(self, n: int) -> list:
        """The `n` fastest trees measured (by their search measurement)."""
        keys = sorted((k for k, g in self.results.items() if g > 0), key=lambda k: -self.results[k])
        return [self.trees[k] for k in keys[:n]]

    def evaluate(self, trees) -> list:
        """The cost model ranks `trees`; the measured share is measured. None: not measured."""
        if self.cost.measured:
            return self.measure(trees)
        pred = self.predict(trees)
        k = max(1, math.ceil(len(trees) * self.config.measure_fraction))
        order = sorted(range(len(trees)), key=lambda i: -pred[i])[:k]
        got = self.measure([trees[i] for i in order])
        out: list = [None] * len(trees)
        for i, g in zip(order, got):
            out[i] = g
        return out


STARTS = ("default", "unscheduled")


def _inputs(ir, seed: int):
    from ..backend.kernel_base import random_array

    rng = np.random.default_rng(seed)
    return [random_array(b, rng) for b in ir.inputs]


def tune(tensor, budget_s: float = 60, mapper: str = "scripted", cost_model: str = "measure",
         workers: int = 1, config: TuneConfig | None = None, name: str = "", progress=None,
         target=None, job=None, start: str = "default", cluster: str | None = None,
         per: str = "node") -> TuneResult:
    """Search schedules of `tensor`'s program for `budget_s` seconds; record them in the
    tuning database; return the best (never slower than the starting schedule).

    `start` is where the search begins: "default" (loopstack's default schedule, the
    usual choice) or "unscheduled" (the program's loops as written, which is how two
    searches are compared without the head start a good default gives both).

    `cluster`: measure on a Ray cluster instead of local worker processes ("auto",
    "HOST:PORT" as `ray start --head` prints it, or "ray://HOST:PORT"), with one actor per
    node, or per CPU with `per="core"` (see tune.cluster). Each kind of machine among the
    nodes (its Target identity) gets a search of its own, run side by side within the
    budget, and its results filed under its identity; the result returned is the largest
    kind's, every kind's is in `result.by_target`."""
    from ..frontend.run import program, schedules_changed
    from ..frontend.tree import LoopTree, default_schedule
    from ..isa.target import get_target, measure_peak, peak_gflops
    from .mappers import MAPPERS

    if mapper not in MAPPERS:
        raise ArgumentError(f"unknown mapper {mapper!r}; known: {', '.join(MAPPERS)}")
    if start not in STARTS:
        raise ArgumentError(f"unknown start {start!r}; known: {', '.join(STARTS)}")
    if per not in ("node", "core"):
        raise ArgumentError(f"unknown per {per!r}; known: node (one measuring actor per node), core")
    config = config or TuneConfig.from_env()
    graph = program(tensor).graph
    base = LoopTree(graph, default_schedule(graph))
    ir = base.lower()
    inputs = _inputs(ir, config.seed)
    problem = _Problem(tensor, base, program_key(graph), budget_s, mapper, cost_model, config, name,
                       progress, start, inputs, reference_output(base, inputs))
    kw = {} if job is None else {"job": job}
    try:
        if cluster is None:
            tgt = get_target(target)
            with WorkerPool(inputs, problem.reference, workers=workers, timeout=config.timeout_s,
                            runs=config.runs, threads=config.threads, **kw) as pool:
                # the cost models' peak (the reported one: see confirm)
                return _search(problem, pool, tgt, tgt.identity, peak_gflops(tgt, seconds=0.3),
                               lambda: measure_peak(tgt))
        return _tune_on_cluster(problem, cluster, per, target, kw)
    finally:
        if config.use_db:
            schedules_changed()


@dataclass
class _Problem:
    """What every search of one tune call shares, whichever machine it measures on."""
    tensor: object
    base: object                     # the unscheduled frontend LoopTree
    key: str                         # the program's key in the database
    budget_s: float
    mapper: str
    cost_model: str
    config: TuneConfig
    name: str
    progress: object
    start: str
    inputs: list
    reference: object


def _tune_on_cluster(problem: _Problem, address: str, per: str, target, job_kw: dict) -> TuneResult:
    """One search per kind of machine of the cluster, side by side (tune.cluster)."""
    from concurrent.futures import ThreadPoolExecutor

    from .cluster import Fleet, connected

    cfg = problem.config
    with connected(address), Fleet(problem.inputs, problem.reference, runs=cfg.runs, timeout=cfg.timeout_s,
                                   per=per, target=target, threads=cfg.threads, **job_kw) as fleet:
        def search(kind):
            return _search(problem, kind.pool, kind.target, kind.identity, kind.peak_gflops, kind.pool.peak)

        with ThreadPoolExecutor(len(fleet.kinds)) as ex:
            results = list(ex.map(search, fleet.kinds))
    for kind, res in zip(fleet.kinds, results):
        res.nodes = list(kind.nodes)
        res.pool_stats = dict(kind.pool.stats)
    main = results[0]
    main.by_target = {k.identity: r for k, r in zip(fleet.kinds, results)}
    return main


def _search(problem: _Problem, pool, tgt, identity: str, peak: float, probe) -> TuneResult:
    """One search on `pool`, whose measurements are taken on machines of `identity` (`tgt`
    as they describe themselves, `peak` their FMA peak, `probe()` measuring it again)."""
    from .mappers import MAPPERS

    config, base, key = problem.config, problem.base, problem.key
    machine = Machine.of(tgt, peak)
    cost = make_cost_model(problem.cost_model, machine)
    default_tree = _default_tree(problem.tensor, base, tgt)
    start_tree = default_tree if problem.start == "default" else base
    db = TuningDB(config.db_path) if config.use_db else None
    # an earlier session's winner, read before this search records its own fastest measurements
    stored = _stored(db, base, key, identity) if db is not None else None
    t_start = time.monotonic()
    try:
        s = Session(base, tgt, machine, cost, pool, problem.budget_s, config, pool.workers, db, key,
                    problem.mapper, problem.progress, problem.name, identity)
        if start_tree is not base:
            s.start_plan = exact_plan(base, start_tree, s.nid) or s.start_plan
        start_gflops = s.measure([start_tree])[0]
        rebuilt = s.build(s.start_plan)
        if rebuilt is not None and rebuilt.key() == start_tree.key():
            s.start_best = (start_gflops, s.start_plan)
        MAPPERS[problem.mapper](s)
        finalists = s.leaders(config.finalists) + [start_tree] + ([stored] if stored is not None else [])
        medians, peaks = confirm(pool, finalists, config.confirm_rounds, probe=probe)
        peak = statistics.median(peaks)     # the peak as it was beside the winner's measurements
        best_tree = keep_start_unless_faster(finalists, start_tree, medians, config.min_gain)
        best_g = medians[best_tree.key()]
        if best_g <= 0:                     # every finalist failed its re-measurement
            best_g, best_tree = start_gflops, start_tree
        else:                               # measured beside the winner: comparable
            start_gflops = medians[start_tree.key()]
        if db is not None and best_g > 0:
            db.set_best(key, identity, actions_json(best_tree), best_g)
        seconds = time.monotonic() - t_start
        if problem.start == "default":
            default_gflops = start_gflops
        else:   # for the record only: measured outside the search's history and budget
            res = pool.measure([default_tree])[0]
            default_gflops = res.gflops if res.status == OK else 0.0
    finally:
        if db is not None:
            db.close()
    return TuneResult(name=problem.name, gflops=max(best_g, 0.0), default_gflops=default_gflops,
                      peak_gflops=peak, actions=actions_json(best_tree), tree=best_tree,
                      history=s.history, measured=len(s.history), failed=s.failed,
                      seconds=seconds, program=key, start=problem.start, start_gflops=start_gflops,
                      target=identity)


def _stored(db, base, key: str, identity: str):
    """The database's best schedule of the program on `identity`, or None (none, or its trace
    no longer replays)."""
    from ..frontend.mutate import apply_actions

    hit = db.best(key, identity)
    if hit is None:
        return None
    try:
        return apply_actions(base, hit[0])
    except LoopstackError:
        return None


def keep_start_unless_faster(finalists, start_tree, medians: dict, min_gain: float):
    """The finalist of the best median, unless it beats the start's by less than `min_gain`:
    then the start (on a busy machine a winner a percent or two ahead in its confirmation can
    read several percent behind the default in the next benchmark's rounds)."""
    best = max(finalists, key=lambda t: medians[t.key()])
    if medians[best.key()] < medians[start_tree.key()] * (1 + min_gain):
        return start_tree
    return best


def confirm(pool, finalists, rounds: int, probe=None) -> tuple[dict, list]:
    """(tree key -> the finalist's median GFLOPS over `rounds` interleaved re-measurements,
    the FMA peak `probe()` measured before each round).

    The best of hundreds of measurements on a shared machine is partly luck (a candidate
    measured in a quiet moment beats an equal one by 10 % or more), so the search's maximum
    overstates its winner and can crown a schedule slower than the start.  The few best are
    measured again side by side with the start (a failed measurement counts 0), and the peak
    beside them (one probed at the start of a long search rates the winner against the machine
    as it was then: 163 % of it once, on a cloud Xeon)."""
    uniq = list({t.key(): t for t in finalists}.values())
    got: dict = {t.key(): [] for t in uniq}
    peaks = []
    for _ in range(max(1, rounds)):
        if probe is not None:
            peaks.append(probe())
        for t, m in zip(uniq, pool.measure(uniq)):
            got[t.key()].append(m.gflops if m.status == OK else 0.0)
    return {k: statistics.median(v) for k, v in got.items()}, peaks


def _default_tree(tensor, base, target):
    """The tuner's starting point: tune.defaults when present, else the unscheduled tree."""
    try:
        from .defaults import default_schedule
    except ImportError:
        return base
    try:
        tree = default_schedule(tensor, target)
    except LoopstackError:
        return base
    return tree if tree.graph == base.graph or tree.actions else base
