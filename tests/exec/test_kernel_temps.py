"""A kernel's intermediates are allocated by its first call, not by its compile: a tuner's
candidates and cross-compiled kernels that never run cost no memory, and a compile spends no
time zero-filling (3 x 4 MB of packed weights for a 1024-wide MLP)."""
import tracemalloc

import numpy as np
import pytest

import loopstack as lt
from loopstack.backend import compile
from loopstack.frontend import run as frontend_run
from loopstack.isa import cpu
from loopstack.tune.defaults import default_schedule

needs_avx2 = pytest.mark.skipif("avx2" not in cpu.cpu_features() or "fma" not in cpu.cpu_features(),
                                reason="CPU lacks AVX2/FMA: x86 kernels cannot run here")


def _mlp(hidden, layers=3, seed=0):
    rng = np.random.default_rng(seed)
    s = lt.SymbolGenerator()
    syms = [s.i, s.j, s.l, s.o][:layers + 1]
    x = rng.standard_normal((8, hidden)).astype(np.float32)
    params = [((rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32),
               rng.standard_normal(hidden).astype(np.float32)) for _ in range(layers)]
    Y = lt.Tensor(x).to(s.b, syms[0])
    for i, (w, b) in enumerate(params):
        Y = lt.nn.relu(lt.nn.linear(Y, lt.Tensor(w, constant=True).to(syms[i], syms[i + 1]),
                                    lt.Tensor(b, constant=True).to(syms[i + 1])))
    ref = x
    for w, b in params:
        ref = np.maximum(ref @ w + b, 0)
    return Y, ref


@needs_avx2
def test_a_compile_allocates_no_intermediates_and_the_first_call_does():
    Y, ref = _mlp(1024)
    tree = default_schedule(Y, "avx2").lower()
    compile(tree, target="avx2")        # what a process's first compile builds once (tables) aside
    tracemalloc.start()
    try:
        kernel = compile(tree, target="avx2")
        _, compile_peak = tracemalloc.get_traced_memory()
        # (the backend's own temps: the packed weights of three 1024 x 1024 layers)
        temp_bytes = sum(t.size * 4 for t in kernel.lowered.temps)
        tracemalloc.reset_peak()
        out = np.zeros((8, 1024), np.float32)
        kernel(*[r.data for r in frontend_run.program(Y).reads], out)
        _, call_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert temp_bytes > 12 * 2**20
    assert compile_peak < temp_bytes / 4
    assert call_peak >= temp_bytes
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@needs_avx2
def test_every_way_of_calling_gets_its_intermediates():
    Y, ref = _mlp(96, layers=2)
    Y.set(default_schedule(Y, "avx2"))
    kernel = Y.compile("avx2")
    args = [r.data for r in frontend_run.program(Y).reads]
    bound_out = np.zeros(ref.shape, np.float32)
    bound = kernel.bind(*args, bound_out)             # its own intermediates, before any call
    bound()
    out = np.zeros(ref.shape, np.float32)
    kernel(*args, out)
    kernel.benchmark(*args, out, runs=1)
    for result in (bound_out, out):
        np.testing.assert_allclose(result, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(kernel.run(*args)[0], ref, rtol=1e-4, atol=1e-4)
