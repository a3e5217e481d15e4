"""A GPU schedule written as loops: `block` and `warp` bindings, the k-step, mma tiles (backend/ptx/bind.py).

A tree whose loops are bound states the tensor-core knobs itself: the kernel it compiles to is
the kernel of those knobs given to the target (the same PTX), runs correctly in the SIMT
reference interpreter, and every loop that does not fit the form is refused naming the loop.
"""
import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopstack as lt
from loopstack.backend.ptx import GpuSchedule, GpuTarget
from loopstack.errors import ScheduleError, UnsupportedError
from loopstack.isa.ptx import ptxas
from loopstack.isa.ptx.mma import mma_for

from gpu_programs import bind, bound, bound_conv, contraction_nodes, conv, gemm

pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
has_sim = importlib.util.find_spec("loopstack.isa.ptx.sim") is not None

small = st.builds(GpuSchedule,
                  BLK_ROW_WARPS=st.sampled_from([1, 2]), BLK_COL_WARPS=st.sampled_from([1, 2]),
                  WARP_ROW_TILES=st.sampled_from([1, 2]), WARP_COL_TILES=st.sampled_from([1, 2]),
                  CHUNK=st.sampled_from([1, 2]), REORDER_INNER=st.sampled_from([0, 1]),
                  stages=st.sampled_from([1, 2, 3]))


def _simulated(kern, arrays, shape):
    out = np.zeros(shape, lt.dtypes.dtype(kern.tree.outputs[0].dtype).np)
    kern.simulate(*arrays, out)
    return out


@settings(max_examples=6, deadline=None)
@given(dtype=st.sampled_from(["float16", "bfloat16", "int8"]), more=st.tuples(*[st.integers(0, 40)] * 3),
       sched=small, arch=st.sampled_from(["sm_80", "sm_90"]), seed=st.integers(0, 99))
def test_bound_gemm_loops_state_the_knobs_and_the_kernel_agrees(dtype, more, sched, arch, seed):
    # a split is no larger than its dimension: each is at least one block, plus a tail
    m, n, k = sched.bm + more[0], sched.bn + more[1], sched.bk(mma_for(dtype)) + more[2]
    rng = np.random.default_rng(seed)
    C, arrays, ref = gemm(m, n, k, dtype, rng, bias=True, relu=True)
    by_knobs = lt.compile(C, target=GpuTarget(arch, sched))
    bound(C, sched, mma_for(dtype).k, m, n, k)
    kern = lt.compile(C, target=GpuTarget.of(arch, stages=sched.stages))
    assert kern.schedule == sched
    assert kern.ptx == by_knobs.ptx
    assert "stated by the tree's loops: L0 (" in kern.schedule_text()
    assert "stated by" not in by_knobs.schedule_text()
    if has_sim:
        _agrees(_simulated(kern, arrays, (m, n)), ref(), k)


def _agrees(got, want, k):
    """Integer outputs exactly (stores wrap as C's conversion does), floats within rounding."""
    if got.dtype.kind == "i":
        np.testing.assert_array_equal(got, want.astype(np.int64).astype(got.dtype))
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(got.dtype).astype(np.float64),
                                   rtol=5e-2, atol=0.1 * np.sqrt(k))


@settings(max_examples=4, deadline=None)
@given(dtype=st.sampled_from(["float16", "int8"]), h=st.integers(3, 7), c=st.sampled_from([64, 96]),
       more=st.integers(0, 24), sched=small, seed=st.integers(0, 99))
def test_bound_conv_channels_and_k_step_state_the_knobs(dtype, h, c, more, sched, seed):
    mk = mma_for(dtype).k
    kout = sched.bn + more
    if sched.REORDER_INNER and c % (sched.CHUNK * mk):
        sched = sched.replace(REORDER_INNER=0)
    rng = np.random.default_rng(seed)
    Y, arrays, ref = conv(2, h, c, kout, dtype, rng)
    rows = {"BLK_ROW_WARPS": sched.BLK_ROW_WARPS, "WARP_ROW_TILES": sched.WARP_ROW_TILES, "stages": sched.stages}
    by_knobs = lt.compile(Y, target=GpuTarget("sm_90", sched))
    bound_conv(Y, sched, mk, 2, h, c, kout)
    kern = lt.compile(Y, target=GpuTarget.of("sm_90", **rows))
    assert kern.schedule == sched
    assert kern.ptx == by_knobs.ptx
    if has_sim:
        _agrees(_simulated(kern, arrays, (2, h, h, kout)), ref(), 9 * c)


def test_unstated_knobs_are_the_models_completion_and_bound_kernels_assemble():
    sched = GpuSchedule(2, 2, 2, 2, 2, 0, 3)
    kernels = {"sm_80": [], "sm_90": []}
    for dtype in ("float16", "bfloat16", "int8"):
        C, _, _ = gemm(256, 256, 256, dtype, None, b_transposed=dtype == "int8")
        bound(C, sched, mma_for(dtype).k, 256, 256, 256)
        for arch, ptx in kernels.items():
            kern = lt.compile(C, target=arch)
            assert kern.schedule.replace(stages=3) == sched      # stages: the model's pick
            ptx.append(kern.ptx)
    if ptxas.ptxas_path() is None:
        pytest.skip("ptxas is not on the PATH: the bound kernels were compiled, not assembled")
    for arch, ptx in kernels.items():
        ptxas.assemble(ptx, arch)


def test_a_cpu_schedule_with_staged_copies_compiles_for_the_gpu_unchanged():
    C, arrays, ref = gemm(64, 48, 40, "float16", np.random.default_rng(1), bias=True)
    plain = lt.compile(C, target=GpuTarget("sm_90", GpuSchedule(1, 1, 2, 2, 1, 0, 2)))
    t = C.loop_tree
    product, _ = contraction_nodes(t)
    t = t.copy_input(t.ref_of(product), 0)
    t = t.copy_input(t.ref_of(product), 1)
    C.set(t)
    assert len(list(C.loop_tree.lower().computes())) == 3
    staged = lt.compile(C, target=GpuTarget("sm_90", GpuSchedule(1, 1, 2, 2, 1, 0, 2)))
    assert staged.ptx == plain.ptx
    if has_sim:
        _agrees(_simulated(staged, arrays, (64, 48)), ref(), 40)


# -- refusals, each naming the loop or knob -----------------------------------------------------

GOOD = [("m", 2, 0), ("n", 2, 0), ("m", 2, 0), ("n", 1, 0), ("k", 2, 0), ("m", 1, 0), ("n", 2, 0), ("k", 32, 0),
        ("m", 16, 0), ("n", 16, 0)]
GOOD_KINDS = ["block", "block", "warp", "warp"]


def _refusal(order, kinds, target="sm_90"):
    C, _, _ = gemm(64, 64, 64, "float16", None)
    bind(C, order, kinds)
    with pytest.raises(ScheduleError) as e:
        lt.compile(C, target=target)
    return str(e.value)


def test_the_good_order_compiles():
    C, _, _ = gemm(64, 64, 64, "float16", None)
    bind(C, GOOD, GOOD_KINDS)
    assert lt.compile(C, target="sm_90").schedule.replace(stages=1) == GpuSchedule(2, 1, 1, 2, 2, 0, 1)


@pytest.mark.parametrize("order, kinds, says", [
    (GOOD, ["block", "", "warp", "warp"], "no loop over n is bound to blocks"),
    (GOOD, ["block", "block", "block", "warp"], "more than one loop over m is bound to blocks"),
    ([GOOD[0], GOOD[2], GOOD[1]] + GOOD[3:], ["block", "warp", "block", "warp"], "is above the block loop"),
    (GOOD[:4] + [("m", 1, 0), ("k", 2, 0)] + GOOD[6:], GOOD_KINDS, "is above the k-step loop"),
    ([GOOD[4]] + GOOD[:4] + GOOD[5:], ["", "block", "block", "warp", "warp"], "above the block loops"),
    (GOOD[:2] + [("m", 4, 0), ("m", 8, 0)] + GOOD[3:8] + [("n", 16, 0)],
     ["block", "block", "warp"], "gives a warp 8 rows"),
    (GOOD[:4] + [("k", 1, 16)] + GOOD[5:7] + [("k", 48, 0)] + GOOD[8:], GOOD_KINDS, "takes 48 of it at a time"),
    (GOOD, GOOD_KINDS + ["", "", "", "", "", "vectorize"], "is vectorize"),
    (GOOD[:7] + [("k", 4, 0), ("k", 8, 0)] + GOOD[8:], GOOD_KINDS, "steps by 8"),
])
def test_loops_that_do_not_fit_are_refused_naming_them(order, kinds, says):
    assert says in _refusal(order, kinds)


def test_a_target_knob_the_loops_contradict_is_refused():
    assert "knob CHUNK: the loops state 2" in _refusal(GOOD, GOOD_KINDS, GpuTarget.of("sm_90", CHUNK=4))
    assert "knob BLK_ROW_WARPS: the loops state 2" in _refusal(GOOD, GOOD_KINDS,
                                                               GpuTarget("sm_90", GpuSchedule(1, 1, 1, 2, 2, 0, 1)))


def test_the_reduction_cannot_be_bound():
    C, _, _ = gemm(64, 64, 64, "float16", None)
    t = C.loop_tree                                    # m, k, n: L1 is the reduction
    with pytest.raises(ScheduleError, match="reduces over k"):
        t.annotate(1, "block")


def test_a_convolutions_pixels_are_not_loops_to_bind():
    Y, _, _ = conv(1, 5, 16, 16, "float16", None)
    t = Y.loop_tree                                    # b, oh, ow, r, s, c, k
    _, total = contraction_nodes(t)
    path = t.path(t.ref_of(total))
    Y.set(t.annotate(path[2], "block").annotate(path[6], "block"))
    with pytest.raises(ScheduleError, match="one dimension of the implicit GEMM"):
        lt.compile(Y, target="sm_90")


def test_a_cpu_compile_refuses_loops_bound_to_a_gpu():
    C, _, _ = gemm(64, 64, 64, "float32", np.random.default_rng(0))
    C.set(C.loop_tree.annotate(0, "block"))           # a bound tree is not checked on the CPU
    with pytest.raises(UnsupportedError, match="loop L0 over m is bound to a GPU's blocks"):
        lt.compile(C)
    assert lt.compile(C, target="interp") is not None  # the interpreter runs any schedule


F16, U8S8 = ("float16", None, "f32.f16.f16.f32"), ("uint8", "int8", "s32.u8.s8.s32")


@pytest.mark.parametrize("operands, request_, ok", [
    (F16, "auto", True), (F16, "mma.m16n8k16.f16", True), (F16, "mma", True), (F16, "mma.m16n8k16.bf16", False),
    (F16, "vpdpbusd.zmm", False),
    # uint8 activations by int8 weights: a whole name must be the form of both operands, a prefix a family
    (U8S8, "mma.m16n8k32.u8.s8", True), (U8S8, "mma.m16n8k32", True), (U8S8, "mma.m16n8k32.u8", False),
    (U8S8, "mma.m16n8k32.s8", False)])
def test_tensorize_names_the_mma_form_of_the_operands(operands, request_, ok):
    a, b, types = operands
    C, _, _ = gemm(64, 64, 64, a, None, b_dtype=b)
    if a == "float16":
        bind(C, GOOD, GOOD_KINDS)         # a GPU schedule: the request is not checked on the CPU
    t = C.loop_tree
    _, total = contraction_nodes(t)
    C.set(t.tensorize(t.ref_of(total), request_))
    if ok:
        assert types in lt.compile(C, target="sm_90").ptx
    else:
        says = "float16 operands with mma.m16n8k16.f16" if a == "float16" else \
            "uint8 by int8 operands with mma.m16n8k32.u8.s8"
        with pytest.raises(ScheduleError, match=f"multiplies {says}"):
            lt.compile(C, target="sm_90")


def test_a_bound_schedule_is_saved_and_replayed():
    sched = GpuSchedule(2, 1, 1, 2, 2, 1, 2)
    C, _, _ = gemm(96, 64, 64, "bfloat16", None)
    bound(C, sched, 16, 96, 64, 64)
    saved = lt.serialize(C.loop_tree)
    D, _, _ = gemm(96, 64, 64, "bfloat16", None)
    D.set(lt.apply_actions(D.loop_tree, lt.deserialize(saved).actions))
    target = GpuTarget.of("sm_80", stages=2)
    assert lt.compile(D, target=target).ptx == lt.compile(C, target=target).ptx
    assert lt.compile(D, target=target).schedule == sched
