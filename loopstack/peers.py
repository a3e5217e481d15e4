"""The comparison peers of the benchmark: numpy, PyTorch (eager, single thread) and Halide.

Each peer runs the workload on the same arrays the loopstack kernel reads and is timed the same
way (`timing.best_seconds`: best of `runs`, at least `BENCH_MIN_SECONDS` of calls, after a warm-up). A peer that is not installed, or that has no
implementation of a workload, is reported as skipped (`None`), never estimated.

    measure("torch", workload, arrays) -> PeerResult(gflops, compile_ms, note) | raises PeerSkipped
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from .timing import BENCH_MIN_SECONDS, best_seconds

PEERS = ("numpy", "torch", "halide")


class PeerSkipped(Exception):
    """A peer that cannot run here (not installed, or no implementation of this workload)."""


@dataclass
class PeerResult:
    gflops: float
    compile_ms: float | None = None
    note: str = ""


def single_thread_env() -> None:
    """Pin BLAS/OpenMP pools to one thread (effective only before numpy/torch load them)."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                "NUMEXPR_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def available(name: str) -> bool:
    if name == "numpy":
        return True
    import importlib.util

    mod = {"torch": "torch", "halide": "halide"}.get(name)
    return mod is not None and importlib.util.find_spec(mod) is not None


def _best(fn, runs: int, warmup: int = 2) -> float:
    return best_seconds(fn, runs, warmup, BENCH_MIN_SECONDS)


# ---------------------------------------------------------------------------- numpy
def _numpy_fn(w, a):
    from .workloads import conv_reference, dwconv_reference

    p = w.p
    if w.kind == "mm":
        A, B = a["A"], a["B"]
        out = np.empty((A.shape[0], B.shape[1]), np.float32)
        return lambda: np.matmul(A, B, out=out)
    if w.kind == "mlp":
        def f():
            y = a["X"]
            for i in range(3):
                y = np.maximum(y @ a[f"W{i}"] + a[f"b{i}"], 0)
            return y
        return f
    if w.kind == "conv":
        return lambda: conv_reference(a["X"], a["W"], p["stride"], p["pad"])
    if w.kind == "dwconv":
        return lambda: dwconv_reference(a["X"], a["W"], p["stride"], p["pad"])
    if w.kind == "mbv3":
        def g():
            d = np.maximum(dwconv_reference(a["X"], a["Wd"], 1, 1), 0)
            return np.maximum(d.reshape(-1, d.shape[2]) @ a["Wp"], 0)
        return g
    raise PeerSkipped(f"numpy has no {w.kind}")


# ---------------------------------------------------------------------------- torch
def _torch():
    import torch

    torch.set_num_threads(1)
    return torch


def _torch_fns(w, a):
    """Candidate torch implementations (the best counts): name -> callable."""
    torch = _torch()
    F = torch.nn.functional
    p = w.p
    t = {k: torch.from_numpy(v) for k, v in a.items()}
    fns = {}
    if w.kind == "mm":
        out = torch.empty(t["A"].shape[0], t["B"].shape[1])
        fns["mm"] = lambda: torch.mm(t["A"], t["B"], out=out)
    elif w.kind == "mlp":
        Ws = [t[f"W{i}"].t().contiguous() for i in range(3)]   # nn.Linear keeps W as [out, in]

        def f():
            y = t["X"]
            for i in range(3):
                y = F.relu(F.linear(y, Ws[i], t[f"b{i}"]))
            return y
        fns["eager"] = f
    elif w.kind in ("conv", "dwconv", "mbv3"):
        x = t["X"].permute(2, 0, 1).unsqueeze(0).contiguous()          # NCHW
        if w.kind == "conv":
            wt = t["W"].permute(3, 2, 0, 1).contiguous()                # [k, c, r, s]
            groups, stride, pad = 1, p["stride"], p["pad"]
        else:
            wd = t["W"] if w.kind == "dwconv" else t["Wd"]
            wt = wd.permute(2, 0, 1).unsqueeze(1).contiguous()          # [c, 1, r, s]
            groups, stride, pad = wt.shape[0], p.get("stride", 1), p.get("pad", 1)
        wp = t["Wp"].t().contiguous()[:, :, None, None] if w.kind == "mbv3" else None
        for layout in ("nchw", "channels_last"):
            xx, ww = x, wt
            wpp = wp
            if layout == "channels_last":
                xx = x.contiguous(memory_format=torch.channels_last)
                ww = wt.contiguous(memory_format=torch.channels_last)
                wpp = wp.contiguous(memory_format=torch.channels_last) if wp is not None else None

            def f(xx=xx, ww=ww, wpp=wpp):
                with torch.no_grad():
                    y = F.conv2d(xx, ww, None, stride, pad, 1, groups)
                    if wpp is not None:
                        y = F.relu(F.conv2d(F.relu(y), wpp))
                    return y
            fns[layout] = f
    else:
        raise PeerSkipped(f"torch has no {w.kind}")
    return fns


# ---------------------------------------------------------------------------- halide
def _halide_fn(w, a):
    """A scheduled Halide pipeline for matmul-like and conv workloads; (callable, compile_ms)."""
    import halide as hl

    if w.kind == "mm":
        A, B = a["A"], a["B"]
        M, K = A.shape
        N = B.shape[1]
        bA, bB = hl.Buffer(np.ascontiguousarray(A)), hl.Buffer(np.ascontiguousarray(B))
        i, j = hl.Var("i"), hl.Var("j")
        r = hl.RDom([(0, K)])
        f = hl.Func("mm")
        # halide buffers index with the first dimension innermost: bA(k, m), bB(n, k)
        f[j, i] = 0.0
        f[j, i] += bA[r.x, i] * bB[j, r.x]
        xo, yo, xi, yi = hl.Var("xo"), hl.Var("yo"), hl.Var("xi"), hl.Var("yi")
        f.update().tile(j, i, xo, yo, xi, yi, 16, 4).reorder(xi, yi, r.x, xo, yo).vectorize(xi, 8).unroll(yi)
        f.compute_root()
        out = hl.Buffer(hl.Float(32), [N, M])
        target = hl.get_jit_target_from_environment()
        t0 = time.perf_counter()
        f.compile_jit(target)
        ms = (time.perf_counter() - t0) * 1e3
        return (lambda: f.realize(out)), ms
    raise PeerSkipped(f"no halide pipeline for {w.kind}")


# ---------------------------------------------------------------------------- entry point
def measure(name: str, workload, arrays: dict, runs: int = 10) -> PeerResult:
    """GFLOPS of peer `name` on `workload` with `arrays`; PeerSkipped when it cannot run."""
    if name not in PEERS:
        raise PeerSkipped(f"unknown peer {name!r} (known: {', '.join(PEERS)})")
    if not available(name):
        raise PeerSkipped(f"{name} is not installed")
    flops = workload.flops
    if name == "numpy":
        fn = _numpy_fn(workload, arrays)
        return PeerResult(flops / _best(fn, runs) / 1e9)
    if name == "torch":
        fns = _torch_fns(workload, arrays)
        best_name, best_t = None, float("inf")
        for k, fn in fns.items():
            t = _best(fn, runs)
            if t < best_t:
                best_name, best_t = k, t
        return PeerResult(flops / best_t / 1e9, note=best_name)
    try:
        fn, ms = _halide_fn(workload, arrays)
        return PeerResult(flops / _best(fn, runs) / 1e9, compile_ms=ms)
    except PeerSkipped:
        raise
    except Exception as exc:   # a Halide build that rejects the pipeline: reported, not fatal
        raise PeerSkipped(f"halide failed: {type(exc).__name__}: {str(exc).strip()[:200]}") from None


def torch_layout_gflops(workload, arrays: dict, runs: int = 10) -> dict:
    """GFLOPS of each torch implementation (e.g. {"nchw": .., "channels_last": ..})."""
    return {k: workload.flops / _best(fn, runs) / 1e9 for k, fn in _torch_fns(workload, arrays).items()}
