"""Tuning int8 GEMMs: the tuner's result against the untuned compile and the vector-only default.

    python3 bench/tune_int8.py [--sizes 256,512,1024] [--budget 20] [--rounds 5] [--runs 5] [--threads 1]
                               [--json FILE]

For each u8 x s8 -> s32 GEMM: the untuned compile (`lt.compile` with no schedule: tile blocks
where the CPU has AMX), the vector default (the default schedule on the widest vpdpbusd, what
the tuner started from before tile blocks were a family of its own), and the tuner's result
after `--budget` seconds (`lt.tune`, scripted mapper, measured), re-measured side by side in
`--rounds` interleaved rounds (medians of the best of `--runs` each) beside a probe of the
int8 peak (a chain of the instruction the untuned compile used). Every kernel's output is
checked against numpy's int32 product. Every kernel, and every candidate the tuner measures,
runs a parallel loop on `--threads` threads (1: the per-core figures of `loopstack bench --suite
int8`; the untuned compile has no parallel loop). Columns: GOPS of each, the tuned/untuned ratio (the
tuner must never fall below 1.0 beyond noise), how many tile candidates the search measured,
and the winning schedule's tensorize request and block.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402

import loopstack as lt  # noqa: E402
from loopstack.backend.tensorize import instruction  # noqa: E402
from loopstack.commands.bench_int8 import int8_peak  # noqa: E402
from loopstack.timing import best_seconds  # noqa: E402
from loopstack.tune.api import TuneConfig, tune  # noqa: E402
from loopstack.tune.defaults import default_schedule  # noqa: E402


def gemm(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    s = lt.SymbolGenerator()
    a = rng.integers(0, 256, (n, n)).astype(np.uint8)
    b = rng.integers(-128, 128, (n, n)).astype(np.int8)
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    return C, (a, b), a.astype(np.int32) @ b.astype(np.int32)


def vector_default(C):
    """The default schedule as if the CPU had no tile unit: the vector instruction's block."""
    with mock.patch("loopstack.tune.tensorized.has_tiles", lambda target: False):
        return default_schedule(C)


def block_of(tree) -> str:
    """The winner's tensorize request and the splits of its main loops ("" where none)."""
    asked = [a.args[1] for a in tree.actions if a.kind == "tensorize"]
    splits = [f"{a.args[1]}" for a in tree.actions if a.kind == "split"]
    return (asked[-1] if asked else "-") + (" split " + "x".join(splits) if splits else "")


def run_size(n: int, budget: float, rounds: int, runs: int, threads: int, db_dir: str) -> dict:
    C, args, ref = gemm(n)
    base = C.loop_tree
    untuned = lt.compile(C)
    vector = vector_default(C).compile()
    res = tune(C, budget_s=budget, config=TuneConfig(db_path=os.path.join(db_dir, f"gemm{n}.db"), timeout_s=60,
                                                     runs=3, threads=threads))
    C.set(base)
    tuned = res.tree.compile()
    kernels = {"untuned": untuned, "vector_default": vector, "tuned": tuned}
    for kern in kernels.values():
        kern.threads = threads
    outs = {k: np.zeros((n, n), np.int32) for k in kernels}
    exact = True
    for k, kern in kernels.items():
        kern(*args, outs[k])
        exact &= bool(np.array_equal(outs[k], ref))
    ops = 2 * n ** 3
    got = {k: [] for k in kernels}
    peaks = []
    peak_instr = instruction(untuned.tensorized) if untuned.tensorized else None
    for _ in range(rounds):
        if peak_instr is not None:
            peaks.append(int8_peak(peak_instr))
        for k, kern in kernels.items():
            got[k].append(ops / best_seconds(lambda kern=kern, o=outs[k]: kern(*args, o), runs) / 1e9)
    med = {k: statistics.median(v) for k, v in got.items()}
    tiles = sum(1 for h in res.history if any(a[0] == "tensorize" and a[1][1].startswith("amx")
                                              for a in h["actions"]))
    return {"name": f"GEMM-{n}", "untuned_gops": med["untuned"], "vector_default_gops": med["vector_default"],
            "tuned_gops": med["tuned"], "tuned_over_untuned": med["tuned"] / med["untuned"],
            "peak_gops": statistics.median(peaks) if peaks else float("nan"),
            "measured": res.measured, "tile_candidates": tiles, "exact": exact,
            "untuned_instr": untuned.tensorized or "-", "winner": block_of(res.tree), "budget_s": budget,
            "threads": threads}


def format_table(rows) -> str:
    head = (f"{'workload':<10} {'untuned':>8} {'vecdef':>8} {'tuned':>8} {'t/u':>5} {'peak':>8} "
            f"{'meas':>5} {'tiles':>5} {'exact':>5}  {'untuned instr':<14} winner")
    lines = [head]
    for r in rows:
        lines.append(f"{r['name']:<10} {r['untuned_gops']:8.1f} {r['vector_default_gops']:8.1f} {r['tuned_gops']:8.1f} "
                     f"{r['tuned_over_untuned']:5.2f} {r['peak_gops']:8.1f} {r['measured']:5d} "
                     f"{r['tile_candidates']:5d} {str(r['exact']):>5}  {r['untuned_instr']:<14} {r['winner']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,512,1024")
    ap.add_argument("--budget", type=float, default=20.0, help="tuning seconds per GEMM")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="threads of a parallel loop")
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as db_dir:     # never the user's tuning database
        for n in (int(x) for x in a.sizes.split(",")):
            rows.append(run_size(n, a.budget, a.rounds, a.runs, a.threads, db_dir))
            print(format_table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(format_table(rows))
    if a.json:
        from loopstack.timing import write_records
        write_records(a.json, rows)
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
