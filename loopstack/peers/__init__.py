"""The comparison peers of the benchmark: numpy, PyTorch eager, Halide, onnxruntime and XNNPACK
(through LiteRT), each on one thread.

Each peer module (`<name>_peer.py`) turns a workload and the arrays the loopstack kernel reads into
its own implementation (`prepare(workload, arrays) -> Prepared`); the peers given a graph of their
own (onnxruntime, XNNPACK) are checked against numpy before they are timed. Every peer is timed
the same way (`timing.best_seconds`: best of `runs`, at least `BENCH_MIN_SECONDS` of calls, after a
warm-up). A peer that is not installed, or that has no implementation of a workload, is reported
as skipped (`PeerSkipped`, with the reason), never estimated.

    measure("onnxruntime", workload, arrays) -> PeerResult(gflops, compile_ms, note)
"""
from __future__ import annotations

import importlib
import importlib.util

import numpy as np

from .common import PeerResult, PeerSkipped, Prepared, best, single_thread_env

PEERS = ("numpy", "torch", "halide", "onnxruntime", "xnnpack")
_PACKAGES = {"numpy": "numpy", "torch": "torch", "halide": "halide", "onnxruntime": "onnxruntime",
             "xnnpack": "ai_edge_litert"}

__all__ = ["PEERS", "PeerResult", "PeerSkipped", "Prepared", "available", "measure", "prepare",
           "single_thread_env", "torch_layout_gflops"]


def available(name: str) -> bool:
    mod = _PACKAGES.get(name)
    return mod is not None and importlib.util.find_spec(mod) is not None


def prepare(name: str, workload, arrays: dict) -> Prepared:
    """Peer `name`'s implementation of `workload` on `arrays`, its result checked against numpy."""
    if name not in PEERS:
        raise PeerSkipped(f"unknown peer {name!r} (known: {', '.join(PEERS)})")
    if not available(name):
        raise PeerSkipped(f"{name} is not installed")
    impl = importlib.import_module(f".{name}_peer", __name__)
    prepared = impl.prepare(workload, arrays)
    if prepared.result is not None:
        _check(name, workload, arrays, prepared)
    return prepared


def _check(name: str, workload, arrays: dict, prepared: Prepared) -> None:
    from .numpy_peer import reference

    next(iter(prepared.fns.values()))()
    got, want = np.asarray(prepared.result(), np.float64), reference(workload, arrays).astype(np.float64)
    if got.shape != want.shape:
        raise PeerSkipped(f"{name} computed shape {got.shape}, numpy {want.shape}")
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    if err > 1e-3 * scale:
        raise PeerSkipped(f"{name} computed a different result (max abs error {err:.3g}, output scale {scale:.3g})")


def measure(name: str, workload, arrays: dict, runs: int = 10) -> PeerResult:
    """GFLOPS of peer `name` on `workload` with `arrays` (its fastest implementation); PeerSkipped
    when it cannot run."""
    prepared = prepare(name, workload, arrays)
    times = {impl: best(fn, runs) for impl, fn in prepared.fns.items()}
    fastest = min(times, key=times.get)
    note = fastest if len(times) > 1 else ""
    return PeerResult(workload.flops / times[fastest] / 1e9, compile_ms=prepared.compile_ms, note=note)


def torch_layout_gflops(workload, arrays: dict, runs: int = 10) -> dict:
    """GFLOPS of each torch implementation (e.g. {"nchw": .., "channels_last": ..})."""
    return {k: workload.flops / best(fn, runs) / 1e9 for k, fn in prepare("torch", workload, arrays).fns.items()}
