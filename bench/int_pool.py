"""Quantized max pooling: an int8 / uint8 3x3 max pool with zero padding, natively, beside the
same pool in float32 (the frontend's zero-padded windows, channels innermost).

Each row: the best of `--runs` calls in microseconds (a shared machine: the best is the least
disturbed), its bandwidth over the input and output bytes, and the CPU time of its compile.
Integer max and min reductions run as int32 vector lanes of widened bytes (vpmaxsd); before,
as scalar code (about 10x the float32 pool's time).

    python bench/int_pool.py [--runs 50] [--json FILE]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from loopstack.backend import compile
from loopstack.isa import cpu
from loopstack.looptree.builders import access, make_tree, nest
from loopstack.looptree.ir import Access, Affine, Buffer, Compute, Load

SHAPES = [("POOL-112x64-s2", 112, 64, 2), ("POOL-56x64-s1", 56, 64, 1), ("POOL-28x128-s2", 28, 128, 2)]


def max_pool(dtype: str, h: int, c: int, stride: int):
    """Y[oh, ow, c] = max over a 3x3 window of X (HWC, padding 1: zeros outside)."""
    oh = (h + 2 - 3) // stride + 1
    row = Affine.of(("oh", stride), ("r", 1), const=-1)
    col = Affine.of(("ow", stride), ("s", 1), const=-1)
    bufs = [Buffer("X", dtype, (h, h, c), "input"), Buffer("Y", dtype, (oh, oh, c), "output")]
    stmt = Compute("Y", access("Y", "oh", "ow", "c"), Load(Access("X", (row, col, Affine.of("c")), True)),
                   reduce="max", init="identity")
    order = [("oh", 1), ("ow", 1), ("r", 1), ("s", 1), ("c", 1)]
    return make_tree(bufs, {"oh": oh, "ow": oh, "c": c, "r": 3, "s": 3}, nest(order, stmt))


def measure(name, dtype, h, c, stride, target, runs):
    tree = max_pool(dtype, h, c, stride)
    t0 = time.process_time()
    kernel = compile(tree, target=target)
    compile_ms = (time.process_time() - t0) * 1e3
    x = np.random.default_rng(0).integers(-100, 100, tree.buffer("X").shape).astype(dtype)
    y = np.zeros(tree.buffer("Y").shape, dtype)
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        kernel(x, y)
        best = min(best, time.perf_counter() - t0)
    gbs = (x.nbytes + y.nbytes) / best / 1e9
    return {"name": f"{name}-{dtype}-{target}", "us": round(best * 1e6, 1), "gbs": round(gbs, 2),
            "compile_ms": round(compile_ms, 2)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--json", help="write the records to this file")
    args = ap.parse_args(argv)
    feats = cpu.cpu_features()
    targets = [t for t, need in (("avx2", "avx2"), ("avx512", "avx512f")) if need in feats]
    rows = [measure(n, dt, h, c, s, t, args.runs) for n, h, c, s in SHAPES for dt in ("int8", "uint8", "float32")
            for t in targets]
    print(f"{'name':34} {'us':>9} {'GB/s':>7} {'compile_ms':>10}")
    for r in rows:
        print(f"{r['name']:34} {r['us']:9.1f} {r['gbs']:7.2f} {r['compile_ms']:10.2f}")
    if args.json:
        from loopstack.timing import write_records
        write_records(args.json, rows)


if __name__ == "__main__":
    main()
