"""Halide (JIT-compiled, scheduled by hand) as a peer."""
from __future__ import annotations

import time

import numpy as np

from .common import PeerSkipped, Prepared


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



def prepare(w, a) -> Prepared:
    try:
        fn, ms = _halide_fn(w, a)
    except PeerSkipped:
        raise
    except Exception as exc:   # a Halide build that rejects the pipeline: reported, not fatal
        raise PeerSkipped(f"halide failed: {type(exc).__name__}: {str(exc).strip()[:200]}") from None
    return Prepared({"halide": fn}, compile_ms=ms)
