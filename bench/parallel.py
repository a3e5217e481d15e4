"""Parallel loops: the packed matmul with its outermost (panel) loop annotated "parallel".

    python bench/parallel.py [--json FILE]

For each size: GFLOPS with 1 thread and with every core, the speed-up, and a check that
both runs give bit-identical results (each output element is computed by one thread, in
the same order as the serial run).
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace

import numpy as np

from loopstack.backend import compile
from loopstack.looptree.builders import packed_matmul_tree

from loopnest import _best_seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    records = []
    print(f"{'operator':<10} {'1 thread':>10} {f'{cores} threads':>11} {'speed-up':>9}  identical")
    for n in (256, 512, 1024):
        tree = packed_matmul_tree(n, n, n)
        tree = replace(tree, body=(replace(tree.body[0], annotations=frozenset({"parallel"})),))
        kernel = compile(tree)
        rng = np.random.default_rng(0)
        A, B = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        C = np.zeros((n, n), np.float32)
        out, gflops = {}, {}
        for threads in (1, cores):
            kernel.threads = threads
            kernel(A, B, C)
            out[threads] = C.copy()
            gflops[threads] = kernel.flops / _best_seconds(lambda: kernel._execute((A, B, C))) / 1e9
        same = bool(np.array_equal(out[1], out[cores]))
        assert np.abs(out[1] - A @ B).max() < 1e-2 * n ** 0.5
        rec = {"name": f"MM-{n}-parallel", "gflops_1_thread": gflops[1], "gflops_all_threads": gflops[cores],
               "threads": cores, "speedup": gflops[cores] / gflops[1], "identical": same}
        records.append(rec)
        print(f"MM-{n:<7} {gflops[1]:10.1f} {gflops[cores]:11.1f} {rec['speedup']:8.2f}x  {same}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
