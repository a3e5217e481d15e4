"""Threads: the default schedules (a large nest's outermost output loop runs in parallel) on one
thread and on N.

    python bench/parallel.py [--threads N] [--rounds R] [--best] [--workloads A,B,...] [--json FILE]

Per workload: GFLOPS on 1 thread and on N (default: every core), each the median (`--best`:
the best) of R interleaved rounds (best of several calls per round), the speed-up, and whether both outputs
are bit-identical (each output element is computed by one thread, in the serial order).

On a machine other tenants keep busy the wall-clock speed-up says little (a thread waits
for a core; `--best` takes the best round, and as root `chrt -f 10 python3 bench/parallel.py`
gives the benchmark the cores while it runs). Two figures do not depend on that: `cpu` is the CPU time of an N-thread call
over a one-thread call's (1.00: splitting costs no extra work), and `bound` the speed-up
the split allows when every thread has a core of its own (whole iterations of the parallel
loop per thread: 4 iterations on 3 threads allow 2x; 1024 columns in blocks of 96 on 2 threads,
5 blocks and 5 + the 64-column one, allow 1.88x).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from loopstack.backend.kernel_base import empty_aligned
from loopstack.backend.threads import split_bound
from loopstack.frontend.run import program
from loopstack.timing import best_seconds
from loopstack.tune.defaults import default_schedule
from loopstack.workloads import get_workload

WORKLOADS = "MM-256,MM-512,MM-1024,CONV-1,CONV-2,CONV-3,MLP-8x1024,MLP-64x256,MLP-64x1024"


def _build(name: str):
    """(tensor, flops): a benchmark workload, or MM-N for any N."""
    if name.startswith("MM-") and name not in ("MM-64", "MM-128", "MM-256", "MM-512"):
        import loopstack as lt

        n = int(name[3:])
        rng = np.random.default_rng(0)
        s = lt.SymbolGenerator()
        A = lt.Tensor(rng.standard_normal((n, n)).astype(np.float32)).to(s.m, s.k)
        B = lt.Tensor(rng.standard_normal((n, n)).astype(np.float32)).to(s.k, s.n)
        return (A * B).sum(s.k), 2 * n ** 3
    w = get_workload(name)
    return w.build(0)[0], w.flops


def kernel_bound(kernel, threads: int) -> float:
    """The speed-up the split of the kernel's parallel loops allows when every thread has a core
    of its own: each loop's work (a partial last iteration by its share) over its busiest
    thread's, split as the team splits it (threads.chunk_bounds); the least of its loops."""
    bounds = [split_bound(n, threads, work) for (_, n, parallel), work in zip(kernel._steps, kernel._work) if parallel]
    return min(bounds, default=1.0)


def measure(name: str, threads: int, rounds: int, best: bool = False) -> dict:
    Y, flops = _build(name)
    tree = default_schedule(Y)
    Y.set(tree)
    kernel = Y.compile()
    inputs = [r.data for r in program(Y).reads]
    out = {}
    gflops = {1: [], threads: []}
    cpu = {1: [], threads: []}
    for t in gflops:
        kernel.threads = t
        out[t] = empty_aligned(Y.shape, np.float32)
        kernel(*inputs, out[t])
    for _ in range(rounds):
        for t in gflops:
            kernel.threads = t
            calls = [0]

            def call():
                calls[0] += 1
                kernel(*inputs, out[t])

            c0 = time.process_time()
            sec = best_seconds(call, runs=5, warmup=1, min_seconds=0.05)
            cpu[t].append((time.process_time() - c0) / calls[0])
            gflops[t].append(flops / sec / 1e9)
    pick = max if best else statistics.median
    one, many = pick(gflops[1]), pick(gflops[threads])
    return {"name": f"{name}-parallel", "gflops_1_thread": one, "gflops_threads": many, "threads": threads,
            "rounds": rounds, "best_of_rounds": best,
            "speedup": many / one, "identical": bool(np.array_equal(out[1], out[threads])),
            "parallel": bool(kernel._parallel),
            "cpu_ratio": statistics.median(cpu[threads]) / statistics.median(cpu[1]),
            "speedup_bound": kernel_bound(kernel, threads)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workloads", default=WORKLOADS)
    ap.add_argument("--best", action="store_true",
                    help="the best round's GFLOPS instead of the median (on a machine others keep busy)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    n = args.threads
    records = []
    print(f"{'workload':<12} {'1 thread':>9} {f'{n} threads':>10} {'speed-up':>9} {'cpu':>6} {'bound':>6}  identical")
    for name in args.workloads.split(","):
        rec = measure(name.strip(), n, args.rounds, args.best)
        records.append(rec)
        note = "" if rec["parallel"] else "  (serial schedule: too small to split)"
        print(f"{name:<12} {rec['gflops_1_thread']:9.1f} {rec['gflops_threads']:10.1f} {rec['speedup']:8.2f}x"
              f" {rec['cpu_ratio']:6.2f} {rec['speedup_bound']:5.2f}x  {rec['identical']}{note}")
    if args.json:
        from loopstack.timing import write_records
        write_records(args.json, records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
