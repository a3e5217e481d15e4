"""Measuring candidates in worker processes, so that no candidate can take the tuner down.

Each worker is a forked process holding the program's inputs and the reference output
(computed once by the interpreter).  The parent sends it a serialised loop tree and a
floor (GFLOPS); the worker compiles it, runs it once, checks the result against the
reference, then times it (warm-up, best of N) and answers with the GFLOPS.  A candidate
whose first two timed calls are below the floor is not timed further: the search has
something much faster already, and a slow kernel's full timing costs the most.  The parent
waits at most `timeout` seconds per candidate:

    crash   the worker died (segfault, abort, os._exit): recorded, the worker restarted
    timeout no answer in time: the worker is killed, recorded, restarted
    wrong   the output differs from the reference
    error   compilation or a check raised (ScheduleError, BoundsError, ...)

`workers` processes measure in parallel (each candidate's timing is taken alone in its
own process, so on a machine with fewer free cores than workers the timings get noisier).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from dataclasses import dataclass
from functools import partial

import numpy as np

from .. import backend
from ..frontend.serialize import deserialize, serialize

OK, CRASH, TIMEOUT, WRONG, ERROR = "ok", "crash", "timeout", "wrong", "error"


@dataclass
class Measurement:
    gflops: float            # 0.0 unless status == "ok"
    status: str
    compile_ms: float = 0.0
    detail: str = ""
    node: str = ""           # the machine that measured it (a cluster node; "" on this one)


def reference_output(base_tree, inputs, interp_flops_limit: float = 3e8) -> np.ndarray:
    """The program's output on `inputs`: the reference interpreter on the unscheduled tree.

    Above `interp_flops_limit` flops the interpreter is too slow for an interactive tuner;
    the unscheduled tree compiled by the default backend stands in (it has no tiling,
    staging or reordering for a candidate's bug to share).
    """
    ir = base_tree.lower()
    from ..looptree import stats

    target = "interp" if stats.flops(ir) <= interp_flops_limit else None
    kernel = backend.compile(ir, target=target)
    return kernel.run(*inputs)[0]


MIN_SECONDS = 0.02   # of timed calls per candidate (see measure_job)
QUICK_RUNS = 2       # timed calls that decide whether a candidate is below the floor


def measure_job(text: str, inputs, reference, runs: int, target, floor: float = 0.0,
                threads: int | None = None) -> Measurement:
    """Compile, check and time one serialised candidate (runs inside a worker) with `threads`
    threads for a loop annotated parallel (None: every core)."""
    tree = deserialize(text)
    kernel = tree.compile(target)
    if threads is not None and hasattr(kernel, "threads"):
        kernel.threads = threads
    outs = kernel.run(*inputs)
    if reference is not None:
        got = outs[0]
        scale = float(np.max(np.abs(reference))) or 1.0
        if got.shape != reference.shape or not np.allclose(got, reference, rtol=1e-3, atol=1e-3 * scale):
            err = float(np.max(np.abs(got - reference))) if got.shape == reference.shape else float("inf")
            return Measurement(0.0, WRONG, kernel.compile_ms, f"max error {err:.3g}")
    if floor > 0:
        quick = kernel.benchmark(*inputs, *outs, runs=QUICK_RUNS, warmup=0)
        if quick < floor:
            return Measurement(float(quick), OK, kernel.compile_ms,
                               f"timed {QUICK_RUNS} calls only: below the floor of {floor:.3g} GFLOPS")
    # at least MIN_SECONDS of calls: a candidate measured right after its compile, in a worker
    # that was idle, is otherwise judged on a cold cache and a clock still ramping up
    gflops = kernel.benchmark(*inputs, *outs, runs=runs, warmup=1, min_seconds=MIN_SECONDS)
    return Measurement(float(gflops), OK, kernel.compile_ms)


def with_threads(job, threads: int):
    """`job` measuring a loop annotated parallel on `threads` threads when it is the standard
    measure_job (a job of one's own decides for itself)."""
    return partial(measure_job, threads=max(1, threads)) if job is measure_job else job


def run_job(job, text: str, inputs, reference, runs: int, target, floor: float) -> Measurement:
    """`job` on one candidate, any exception it raises turned into an `error` Measurement."""
    try:
        return job(text, inputs, reference, runs, target, floor)
    except Exception as e:  # noqa: BLE001 - any failure of a candidate is a result, reported
        return Measurement(0.0, ERROR, 0.0, f"{type(e).__name__}: {e}".splitlines()[0][:300]
                           or traceback.format_exc(limit=1))


def _worker(conn, job, inputs, reference, runs, target):
    import faulthandler

    faulthandler.disable()    # a crashing candidate is an expected, reported result
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        text, floor = msg
        conn.send(run_job(job, text, inputs, reference, runs, target, floor))


class _Slot:
    def __init__(self, pool):
        self.pool = pool
        self.proc = None
        self.conn = None
        self.started = 0.0
        self.task = None

    def start(self):
        ctx = mp.get_context("fork")
        parent, child = ctx.Pipe()
        p = self.pool
        self.proc = ctx.Process(target=_worker, daemon=True,
                                args=(child, p.job, p.inputs, p.reference, p.runs, p.target))
        self.proc.start()
        child.close()
        self.conn = parent

    def kill(self):
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(1)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None


class WorkerPool:
    """`workers` measuring processes; `measure(trees)` returns one Measurement per tree, in order.

    `floor`: GFLOPS below which a candidate's timing stops after its first calls (0: never).
    `threads`: of a candidate's parallel loop (None: each worker's share of the cores)."""

    def __init__(self, inputs, reference, workers: int = 1, timeout: float = 20.0, runs: int = 10,
                 target=None, job=measure_job, threads: int | None = None):
        self.inputs, self.reference = list(inputs), reference
        self.workers, self.timeout, self.runs, self.target = max(1, workers), timeout, runs, target
        # the cores shared out among the workers: a parallel candidate measured beside others
        # takes its share, not every core
        self.job = with_threads(job, threads or (os.cpu_count() or 1) // self.workers)
        self.slots = [_Slot(self) for _ in range(self.workers)]

    def measure(self, trees, texts=None, floor: float = 0.0) -> list[Measurement]:
        texts = list(texts) if texts is not None else [serialize(t) for t in trees]
        results: list[Measurement | None] = [None] * len(texts)
        todo = list(range(len(texts)))[::-1]
        busy: list[_Slot] = []
        while todo or busy:
            for s in self.slots:
                if todo and s.task is None:
                    if s.proc is None or not s.proc.is_alive():
                        s.kill()
                        s.start()
                    i = todo.pop()
                    s.task, s.started = i, time.monotonic()
                    s.conn.send((texts[i], floor))
                    busy.append(s)
            for s in list(busy):
                res = None
                try:
                    if s.conn.poll(0.005):
                        res = s.conn.recv()
                except (EOFError, OSError):
                    res = Measurement(0.0, CRASH, 0.0, f"worker died (exit code {s.proc.exitcode})")
                if res is None and not s.proc.is_alive():
                    s.proc.join(0.1)
                    res = Measurement(0.0, CRASH, 0.0, f"worker died (exit code {s.proc.exitcode})")
                if res is None and time.monotonic() - s.started > self.timeout:
                    res = Measurement(0.0, TIMEOUT, 0.0, f"no result after {self.timeout:g} s")
                if res is not None:
                    if res.status in (CRASH, TIMEOUT):
                        s.kill()
                    results[s.task] = res
                    s.task = None
                    busy.remove(s)
        return results

    def close(self):
        for s in self.slots:
            if s.conn is not None and s.proc is not None and s.proc.is_alive():
                try:
                    s.conn.send(None)
                except OSError:
                    pass
            s.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
