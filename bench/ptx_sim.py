"""How fast the PTX reference interpreter runs the test suite's hand-written kernels.

The interpreter is a test oracle: what matters is that the kernels the tests give it (up to
128 per dimension, a few CTAs) run in well under a second.  Rows: a vector add over many small
CTAs, a shared-memory reduction with barriers, and the tiled f16 GEMM (cp.async, ldmatrix,
mma.sync) at 128^3 and 256^3.  `instr` counts instructions as the interpreter steps them (once
per group of threads that executes one together).

    python bench/ptx_sim.py [--json FILE] [--rounds N]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))        # the hand-written kernels live with their tests

import numpy as np  # noqa: E402

import ptx_kernels as K  # noqa: E402
from loopstack.isa.ptx.sim import launch  # noqa: E402


def _vadd():
    n = 1 << 16
    a, b, c = (np.ones(n, np.float32) for _ in range(3))
    return lambda: launch(K.VADD, "vadd", grid=(n // 256,), block=(256,), args=[a, b, c, n])


def _reduce():
    n = 1 << 14
    x, out = np.ones(n, np.float32), np.zeros(n // 256, np.float32)
    return lambda: launch(K.REDUCE, "reduce", grid=(n // 256,), block=(256,), args=[x, out, n])


def _gemm(size):
    A = np.random.default_rng(0).standard_normal((size, size)).astype(np.float16)
    B = np.random.default_rng(1).standard_normal((size, size)).astype(np.float16)
    C = np.zeros((size, size), np.float32)
    return lambda: launch(K.GEMM_F16, "gemm_f16", grid=(size // 64, size // 64), block=(128,),
                          args=[A, B, C, size, size, size])


WORKLOADS = {"vadd-65536": _vadd, "reduce-16384": _reduce, "gemm-f16-128": lambda: _gemm(128),
             "gemm-f16-256": lambda: _gemm(256)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the records to this file")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    records = []
    print(f"{'kernel':16} {'ms':>9} {'instr':>8} {'kinstr/s':>9}")
    for name, make in WORKLOADS.items():
        run = make()
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            instr = run()
            times.append(time.perf_counter() - t0)
        ms = 1e3 * statistics.median(times)
        rec = {"name": name, "ms": round(ms, 2), "instr": instr, "kinstr_per_s": round(instr / ms, 1)}
        records.append(rec)
        print(f"{name:16} {rec['ms']:9.1f} {instr:8d} {rec['kinstr_per_s']:9.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
