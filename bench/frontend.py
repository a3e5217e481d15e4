"""Frontend speed: Python expression -> callable kernel, and the per-call overhead of a cached program.

    python bench/frontend.py [--json FILE] [--target interp|x86]

compile_ms: median time from building the expression to a compiled kernel (unify, lower,
backend compile), with the compile cache cleared each time.  lower_ms: the frontend's
share (build + default schedule + lowering).  cached_overhead_us: median time of
`T.numpy()` on a cached program with the kernel's own work replaced by nothing.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import loopstack as lt
from loopstack.frontend import run as _run
from loopstack.tune.defaults import default_schedule


_RNG = np.random.default_rng(0)
# the data is made once: the timings are of the frontend and the compiler, not of the RNG
MM_A = _RNG.standard_normal((512, 512)).astype(np.float32)
CONV_X = _RNG.standard_normal((28, 28, 128)).astype(np.float32)
CONV_W = _RNG.standard_normal((3, 3, 128, 256)).astype(np.float32)


def mm512():
    s = lt.SymbolGenerator()
    a = MM_A
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(a).to(s.k, s.n)).sum(s.k)
    C.set(default_schedule(C))            # packed B panels, 6x16 register block
    return C


def conv2():
    s = lt.SymbolGenerator()
    x, w = CONV_X, CONV_W
    X = lt.nn.pad(lt.Tensor(x).to(s.h, s.w, s.c), (s.h, 1), (s.w, 1))
    W = lt.Tensor(w).to(s.kh, s.kw, s.c, s.o)
    Y = lt.nn.conv(X, W, X.symbolic_shape[:2], (s.kh, s.kw))
    Y.set(default_schedule(Y))            # 6-pixel x 16-channel block, channels last
    return Y


def bench(name, build, target, reps):
    comp, low = [], []
    for _ in range(reps):
        _run._CACHE.clear()
        t0 = time.perf_counter()
        T = build()
        T.loop_tree.lower()
        t1 = time.perf_counter()
        T.compile(target)
        t2 = time.perf_counter()
        low.append((t1 - t0) * 1e3)
        comp.append((t2 - t0) * 1e3)
    # The overhead of re-running a cached program: `.numpy()` with the kernel's machine code
    # replaced by nothing, so the (millisecond, noisy) kernel time does not drown it.
    T = build()
    kernel = T.compile(target)
    T.numpy(target)
    # (x86: every step of the call but the machine code itself, i.e. the argument lookup too)
    field = "_run" if hasattr(kernel, "_run") else "_execute"
    real = getattr(kernel, field)
    setattr(kernel, field, (lambda: None) if field == "_run" else (lambda arrays, checked=True: None))
    over = []
    try:
        for _ in range(200):
            t0 = time.perf_counter()
            T.numpy(target)
            over.append((time.perf_counter() - t0) * 1e6)
    finally:
        setattr(kernel, field, real)
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
