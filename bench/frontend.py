"""Frontend speed: Python expression -> callable kernel, and the per-call overhead of a cached program.

    python bench/frontend.py [--json FILE] [--target interp|x86]

compile_ms: median time from building the expression to a compiled kernel (unify, lower,
backend compile), with the compile cache cleared each time.  lower_ms: the frontend's
share (unify + schedule + lowering).  cached_overhead_us: median time of `T.numpy()` on a
cached program minus the kernel call itself.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import loopstack as lt
from loopstack.frontend import run as _run


def mm512():
    s = lt.SymbolGenerator()
    a = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(a).to(s.k, s.n)).sum(s.k)
    t = C.loop_tree                       # m k n -> m/6 n/16 k m'6 n'16 (vectorize n')
    t = t.split(0, 6).split(3, 16)        # m, m', k, n, n'
    t = t.swap_loops(1, 2).swap_loops(0, 1).swap_loops(1, 3) if False else t
    t = t.annotate(t.loops[-1], "vectorize")
    C.set(t)
    return C


def conv2():
    s = lt.SymbolGenerator()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 28, 28)).astype(np.float32)
    w = rng.standard_normal((128, 3, 3, 256)).astype(np.float32)
    X = lt.nn.pad(lt.Tensor(x).to(s.c, s.h, s.w), (s.h, 1), (s.w, 1))
    W = lt.Tensor(w).to(s.c, s.kh, s.kw, s.o)
    Y = lt.nn.conv(X, W, X.symbolic_shape[1:], (s.kh, s.kw))
    t = Y.loop_tree
    t = t.annotate(t.loops[-1], "vectorize")
    Y.set(t)
    return Y


def bench(name, build, target, reps):
    comp, low = [], []
    for _ in range(reps):
        _run._CACHE.clear()
        t0 = time.perf_counter()
        T = build()
        tree = T.loop_tree
        tree.lower()
        t1 = time.perf_counter()
        T.compile(target)
        t2 = time.perf_counter()
        low.append((t1 - t0) * 1e3)
        comp.append((t2 - t0) * 1e3 - 0)
    T = build()
    kernel = T.compile(target)
    args = [r.data for r in _run.program(T).reads]
    out = T.numpy(target)
    over = []
    for _ in range(reps):
        t0 = time.perf_counter()
        kernel(*args, out)
        t1 = time.perf_counter()
        T.numpy(target)
        t2 = time.perf_counter()
        over.append(((t2 - t1) - (t1 - t0)) * 1e6)
    return {"name": name, "compile_ms": statistics.median(comp), "lower_ms": statistics.median(low),
            "cached_overhead_us": statistics.median(over)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--target", default=None)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    target = a.target or lt.default_target()
    recs = [bench("mm512", mm512, target, a.reps), bench("conv2", conv2, target, max(3, a.reps // 2))]
    print(f"target: {target}")
    for r in recs:
        print(f"{r['name']:8s} compile {r['compile_ms']:8.2f} ms   lower {r['lower_ms']:7.2f} ms   "
              f"cached overhead {r['cached_overhead_us']:8.1f} us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(recs, f, indent=1)


if __name__ == "__main__":
    main()
