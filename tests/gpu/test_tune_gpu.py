"""The tensor-core knob search on the analytical GPU model (no GPU needed)."""
import numpy as np
import pytest

from loopstack.backend.ptx import GpuSchedule, compile_ptx
from loopstack.backend.ptx.match import match
from loopstack.backend.ptx.model import PRESETS, ctas_per_sm, registers_per_thread
from loopstack.isa.ptx import ptxas
from loopstack.tune.gpu import diverse_half, predict_seconds, tune_gpu, valid

from gpu_programs import conv, gemm


def _gemm(m=4096, n=4096, k=4096):
    C, _, _ = gemm(m, n, k, "float16", None)
    return C


def test_the_model_prefers_what_a_gpu_rewards():
    con = match(_gemm().loop_tree.lower())
    base = GpuSchedule()
    t = lambda **kw: predict_seconds(con, base.replace(**kw))  # noqa: E731
    assert t(stages=1) > t(stages=3)                                    # copies exposed
    assert t(WARP_ROW_TILES=1, WARP_COL_TILES=1) > t()                  # ldmatrix-bound warps
    # a 256-row GEMM fills only a few SMs with big CTAs: smaller CTAs spread it wider
    small = match(_gemm(256, 256, 4096).loop_tree.lower())
    assert predict_seconds(small, GpuSchedule(1, 1, 2, 2)) < predict_seconds(small, GpuSchedule(2, 4, 4, 2))
    # an int8 B stored [k, n] is gathered byte by byte: slower than [n, k] through ldmatrix
    kn = match(gemm(2048, 2048, 2048, "int8", None)[0].loop_tree.lower())
    nk = match(gemm(2048, 2048, 2048, "int8", None, b_transposed=True)[0].loop_tree.lower())
    assert predict_seconds(kn, base) > predict_seconds(nk, base)
    # a predicted time is never below the tensor cores' bound
    peak = 132 * 2730 * 1.755e9
    assert con.flops / peak < t()


def test_diverse_half_spreads_over_the_knobs():
    a = GpuSchedule()
    near = [a.replace(stages=s) for s in (2, 4)]
    far = a.replace(BLK_ROW_WARPS=1, WARP_COL_TILES=4, CHUNK=4)
    score = {a: 10.0, near[0]: 9.9, near[1]: 9.8, far: 9.0}
    kept = diverse_half([a, *near, far], score)
    assert kept == [a, far]          # the near-copy of the best loses to a distant candidate


def test_search_on_the_model_beats_the_default_and_keeps_valid_knobs():
    C = _gemm()
    r = tune_gpu(C, target="sm_90", generations=6, seed=1)
    con = match(C.loop_tree.lower())
    assert valid(con, r.best, "sm_90")
    assert r.predicted_tflops >= con.flops / predict_seconds(con, GpuSchedule()) / 1e12
    assert [h[0] for h in r.history] == sorted(h[0] for h in r.history)      # elitist: never worse
    assert r.evaluated > 20 and r.measured_tflops is None
    assert tune_gpu(C, target="sm_90", generations=6, seed=1).best == r.best   # seeded
    compile_ptx(C.loop_tree.lower(), "sm_90", r.best)                        # and it compiles


def test_lt_tune_with_a_gpu_target_searches_the_knobs():
    import loopstack as lt
    C, _, _ = gemm(512, 384, 256, "bfloat16", None)
    r = lt.tune(C, target="sm_80", generations=3, seed=2)
    k = lt.compile(C, target=r.target)
    assert k.schedule == r.best and k.target == "sm_80" and ".target sm_80" in k.ptx


def test_measurements_override_the_model():
    Y, _, _ = conv(32, 14, 256, 512, "float16", None)
    favourite = tune_gpu(Y, target="sm_80", generations=6, seed=0).best
    con = match(Y.loop_tree.lower())

    def measure(s):                  # a GPU on which the model's favourite is slow
        return 1.0 if s == favourite else 2 * predict_seconds(con, s)

    r = tune_gpu(Y, target="sm_80", generations=6, seed=0, measure=measure)
    assert r.best != favourite and r.measured_tflops is not None
    assert abs(r.measured_tflops - r.predicted_tflops / 2) < 1e-6 * r.predicted_tflops


def test_a_tree_with_bound_loops_is_tuned_in_the_knobs_its_loops_leave_free():
    import loopstack as lt
    from gpu_programs import bound
    stated = GpuSchedule(2, 2, 2, 2, 2, 1, 3)
    C = bound(_gemm(1024, 1024, 1024), stated, 16, 1024, 1024, 1024)
    r = tune_gpu(C, generations=3)
    assert r.best.replace(stages=3) == stated          # only `stages` is not a loop
    assert r.evaluated <= 4                             # and it has four values
    assert lt.compile(C, target=r.target).schedule == r.best


def test_float32_operands_are_tuned_as_tf32_only_when_asked():
    import pytest

    import loopstack as lt
    from loopstack.errors import UnsupportedError
    C, _, _ = gemm(1024, 1024, 1024, "float32", None)
    with pytest.raises(UnsupportedError, match="allow_tf32=True"):
        tune_gpu(C, generations=1)
    r = tune_gpu(C, generations=2, allow_tf32=True)
    assert r.target.allow_tf32 and r.predicted_tflops > 0
    kern = lt.compile(C, target=r.target)
    assert kern.schedule == r.best and "tf32" in kern.ptx
    # half the f16 rate: the same knobs are predicted about twice as slow in tf32
    f16 = match(gemm(1024, 1024, 1024, "float16", None)[0].loop_tree.lower())
    tf32 = match(C.loop_tree.lower())
    ratio = predict_seconds(tf32, r.best) / predict_seconds(f16, r.best)
    assert 1.4 < ratio < 2.6


@pytest.mark.skipif(ptxas.ptxas_path() is None, reason="ptxas is not on the PATH: no register counts to hold the estimate to")
def test_the_register_estimate_gives_the_occupancy_ptxas_counts_give():
    """The model's registers per thread (which decide how many CTAs an SM holds) against ptxas -v
    for every preset in every form: within 40 registers, and the same CTAs per SM."""
    forms = {"f16": gemm(1024, 1024, 1024, "float16", None)[0],
             "s8 [n, k]": gemm(1024, 1024, 1024, "int8", None, b_transposed=True)[0],
             "tf32 [n, k]": gemm(1024, 1024, 1024, "float32", None, b_transposed=True)[0],
             "conv f16": conv(4, 14, 64, 128, "float16", None)[0]}
    kernels = []
    for name, tensor in forms.items():
        tree = tensor.loop_tree.lower()
        for s in PRESETS:
            kernels.append((name, s, compile_ptx(tree, "sm_90", s, allow_tf32=True)))
    counts = ptxas.resources([k.ptx for _, _, k in kernels], "sm_90")
    for i, (name, s, k) in enumerate(kernels):
        real = counts[f"{k.entry}_{i}"]["registers"]
        estimate = registers_per_thread(s, k.contraction.conv is not None)
        assert abs(estimate - real) <= 40, (name, s, estimate, real)
        assert ctas_per_sm(s.threads, estimate, k.shared_bytes) == ctas_per_sm(s.threads, real, k.shared_bytes), \
            (name, s, estimate, real)
