"""One timing policy for loopstack's kernels and the peers they are compared with, and the
one way benchmarks write their records.

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


def write_records(path: str, records) -> None:
    """A benchmark's `--json FILE`: a list of records, each with a `name` (the bench JSON
    convention of DESIGN.md; the other fields are named by their unit)."""
    import json

    records = list(records)
    bad = [r for r in records if not isinstance(r, dict) or "name" not in r]
    if bad:
        raise ValueError(f"bench records need a 'name': {bad[0]!r:.200}")
    with open(path, "w") as f:
        json.dump(records, f, indent=1)
