"""One timing policy for loopstack's kernels and the peers they are compared with.

Best of `runs` timed calls after `warmup` untimed ones; with `min_seconds`, short calls are
repeated until they fill that much time, so a 5 µs kernel is judged on thousands of calls
rather than ten (the best of a few is mostly timer and cache noise at that size).
"""
from __future__ import annotations

import time

BENCH_MIN_SECONDS = 0.05    # what `loopstack bench` gives each measurement, ours and the peers'


def best_seconds(fn, runs: int = 10, warmup: int = 1, min_seconds: float = 0.0) -> float:
    for _ in range(warmup):
        fn()
    clock = time.perf_counter
    best = float("inf")
    calls, runs = 0, max(1, runs)
    start = clock()
    while calls < runs or clock() - start < min_seconds:
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
        calls += 1
    return best
