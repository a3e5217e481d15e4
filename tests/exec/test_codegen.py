"""The x86 code generator against numpy, on random loop trees and schedules (differential)."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from strategies import check_case, random_case

from loopstack.backend import compile
from loopstack.isa import cpu

from x86_decode import assert_decodes

pytestmark = pytest.mark.skipif("avx2" not in cpu.cpu_features() or "fma" not in cpu.cpu_features(),
                                reason="CPU lacks AVX2/FMA: x86 kernels cannot run here")

INTEGER = {"int8", "uint8", "int32"}


def _float_only(tree) -> bool:
    return not any(b.dtype in INTEGER for b in tree.buffers)


@settings(max_examples=120)
@given(random_case())
def test_random_trees_match_numpy(case):
    # integer compute arrives with the tensorized-instruction work (VNNI); the interpreter covers it
    assume(_float_only(case.tree))
    kernel = compile(case.tree)
    inputs = case.make_inputs(np.random.default_rng(0))
    check_case(case, inputs, kernel.run(*inputs))
    assert_decodes(kernel)


@settings(max_examples=40)
@given(random_case())
def test_random_trees_with_tiny_unroll_limit(case):
    """Unroll limit 0: every loop that may run at run time does; tails become specialised code."""
    assume(_float_only(case.tree))
    kernel = compile(case.tree, unroll_limit=0)
    inputs = case.make_inputs(np.random.default_rng(1))
    check_case(case, inputs, kernel.run(*inputs))


@settings(max_examples=40)
@given(random_case())
def test_random_trees_match_interpreter(case):
    assume(_float_only(case.tree))
    inputs = case.make_inputs(np.random.default_rng(2))
    want = compile(case.tree, target="interp").run(*inputs)
    got = compile(case.tree).run(*inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=case.rtol,
                                   atol=case.atol * (1 + float(np.abs(w).max(initial=0))))
