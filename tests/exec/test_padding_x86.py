"""Padded convolutions on x86 with their nests split at the borders: the interior reads the
input in place, the borders read small staged temps, and every output point is right."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from strategies import check_case, conv_cases, copy_cases, depthwise_cases

from loopstack.backend import compile
from loopstack.backend.padding import split_padded_nests
from loopstack.isa import cpu
from loopstack.looptree.ir import statements

pytestmark = pytest.mark.skipif("avx2" not in cpu.cpu_features() or "fma" not in cpu.cpu_features(),
                                reason="CPU lacks AVX2/FMA: x86 kernels cannot run here")


@settings(max_examples=80)
@given(st.one_of(conv_cases(), depthwise_cases(), copy_cases()))
def test_split_trees_match_numpy(case):
    assume(all(b.dtype.startswith("float") for b in case.tree.buffers))   # x86 computes floats
    kernel = compile(split_padded_nests(case.tree, always=True))
    inputs = case.make_inputs(np.random.default_rng(0))
    check_case(case, inputs, kernel.run(*inputs))


@settings(max_examples=30)
@given(st.one_of(conv_cases(), depthwise_cases()))
def test_split_trees_with_every_loop_at_run_time(case):
    kernel = compile(split_padded_nests(case.tree, always=True), unroll_limit=0)
    inputs = case.make_inputs(np.random.default_rng(1))
    check_case(case, inputs, kernel.run(*inputs))


@pytest.mark.parametrize("h, w, r, stride", [(9, 9, 3, 1), (10, 7, 3, 1), (11, 11, 3, 2), (12, 13, 3, 2),
                                             (14, 14, 5, 1), (13, 9, 5, 2), (8, 8, 3, 3)])
def test_default_schedules_of_depthwise_layers_split_at_every_border(h, w, r, stride):
    """The frontend's depthwise layer under its default schedule (channel tiles, row blocks with
    tails), every nest split whatever it costs: odd and even sizes, strides 1 to 3."""
    import loopstack as lt
    from loopstack.frontend.run import program
    from loopstack.tune.defaults import default_schedule
    from loopstack.workloads import conv_tensor, dwconv_reference

    rng = np.random.default_rng(3)
    x = rng.standard_normal((h, w, 24)).astype(np.float32)
    wt = rng.standard_normal((r, r, 24)).astype(np.float32)
    s = lt.SymbolGenerator()
    Y = conv_tensor(lt.Tensor(x).to(s.h, s.w, s.c), lt.Tensor(wt).to(s.kr, s.ks, s.c), s.c,
                    pad=r // 2, stride=stride, depthwise=True)
    tree = split_padded_nests(default_schedule(Y).lower(), always=True)
    assert len(tree.body) > 1
    got = compile(tree).run(*[a.data for a in program(Y).reads])[0]
    np.testing.assert_allclose(got, dwconv_reference(x, wt, stride, r // 2), rtol=1e-5, atol=1e-5)


def test_a_large_depthwise_layer_reads_its_input_in_place():
    from loopstack.tune.defaults import schedule_for
    from loopstack.workloads import get_workload

    w = get_workload("DWCONV-1")
    Y, reference = w.build(0)
    Y.set(schedule_for(Y))
    kernel = Y.compile()
    convolutions = [[a for s in statements(n) for a in s.reads() if a.buffer.startswith("in0")]
                    for n in kernel.lowered.body if any(s.out.buffer == "out" for s in statements(n))]
    # the top row and the left column read staged temps, the rest the input itself
    assert sorted(reads[0].buffer for reads in convolutions) == ["in0", "in0_pad0", "in0_pad1"]
    staged = sum(int(np.prod(b.shape)) for b in kernel.lowered.temps)
    assert staged < 0.06 * 112 * 112 * 16
    np.testing.assert_allclose(Y.numpy(), reference(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("parallel", ["oh", "c"])
def test_split_of_a_parallel_nest(parallel):
    from loopstack.looptree.builders import depthwise_conv2d_tree

    order = [(d, 1, {"parallel"}) if d == parallel else (d, 1) for d in ("c", "oh", "ow", "r", "s")]
    order.sort(key=lambda e: e[0] != parallel)              # the parallel loop outermost
    tree = depthwise_conv2d_tree(8, 9, 10, 3, 3, padding=1, order=order)
    split = split_padded_nests(tree, always=True)
    assert len(split.body) > 1
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((9, 10, 8)).astype(np.float32), rng.standard_normal((3, 3, 8)).astype(np.float32)
    want = compile(tree, target="interp").run(x, w)[0]
    np.testing.assert_allclose(compile(split).run(x, w)[0], want, rtol=1e-5, atol=1e-5)
