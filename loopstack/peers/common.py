"""What every peer module gives the benchmark: `prepare(workload, arrays) -> Prepared`."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..timing import BENCH_MIN_SECONDS, best_seconds


class PeerSkipped(Exception):
    """A peer that cannot run here (not installed, no implementation of this workload, or a
    result that differs from numpy's)."""


@dataclass
class PeerResult:
    gflops: float
    compile_ms: float | None = None
    note: str = ""


@dataclass
class Prepared:
    """A peer's implementations of one workload on the benchmark's arrays.

    `fns`: implementation name -> a call computing the workload (the fastest counts; e.g. torch's
    NCHW and channels-last). `result`: where given, a function returning the last call's output in
    the workload's reference layout, which the benchmark checks against numpy before timing —
    a peer fed a graph of its own (onnxruntime, XNNPACK) is timed only once it computes the same
    thing. `compile_ms`: the peer's own build time, where it has one."""
    fns: dict[str, Callable]
    compile_ms: float | None = None
    result: Callable[[], np.ndarray] | None = None
    notes: dict[str, str] = field(default_factory=dict)


def single_thread_env() -> None:
    """Pin BLAS/OpenMP pools to one thread (effective only before numpy/torch load them)."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                "NUMEXPR_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def best(fn, runs: int, warmup: int = 2) -> float:
    return best_seconds(fn, runs, warmup, BENCH_MIN_SECONDS)


def conv_geometry(w) -> tuple[int, int, int, int]:
    """(stride, pad, r, output size) of a conv/dwconv/mbv3 workload (square, NHWC)."""
    p = w.p
    if w.kind == "mbv3":
        stride, pad, r = 1, 1, 3
    else:
        stride, pad, r = p.get("stride", 1), p.get("pad", 1), p.get("r", 3)
    return stride, pad, r, (p["h"] + 2 * pad - r) // stride + 1
