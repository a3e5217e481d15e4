"""A tensorized contraction whose reduction is padded (k to a multiple of the instruction's k)
pads it as a dimension of its own: another statement of the same program that also sums over k
sums over k's own size, natively on every target and instruction family this CPU runs."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from loopstack.backend import compile
from loopstack.isa import cpu
from loopstack.isa.target import get_target
from loopstack.looptree.builders import access, make_tree, nest
from loopstack.looptree.ir import Binary, Buffer, Compute, Load
from int8_programs import ints

FEATURES = cpu.cpu_features()
TARGETS = [t for t, need in (("avx2", "avx2"), ("avx512", "avx512f")) if need in FEATURES]


def matmul_and_row_sums(M, N, K, a_dt, tensorize=None):
    """C[m, n] += A[m, k] * B[k, n] and R[m] += A[m, k], both over the dimension k."""
    bufs = [Buffer("A", a_dt, (M, K), "input"), Buffer("B", "int8", (K, N), "input"),
            Buffer("C", "int32", (M, N), "output"), Buffer("R", "int32", (M,), "output")]
    c = Compute("C", access("C", "m", "n"), Binary("mul", Load(access("A", "m", "k")), Load(access("B", "k", "n"))),
                reduce="add", init="identity", tensorize=tensorize)
    r = Compute("R", access("R", "m"), Load(access("A", "m", "k")), reduce="add", init="identity")
    return make_tree(bufs, {"m": M, "n": N, "k": K},
                     nest([("m", 1), ("n", 1), ("k", 1)], c, tag="c"), nest([("m", 1), ("k", 1)], r, tag="r"))


@pytest.fixture(params=["chosen", "widening"])
def family(request):
    """`widening`: as on a CPU without VNNI or tiles (the exact 16-bit pairs path, k of 2)."""
    return request.param


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(M=st.integers(1, 7), n_vec=st.integers(1, 3), K=st.integers(1, 23), a_dt=st.sampled_from(["uint8", "int8"]),
       requested=st.booleans(), seed=st.integers(0, 2**31))
def test_a_second_statement_sums_over_the_unpadded_dimension(target, family, M, n_vec, K, a_dt, requested, seed):
    t = get_target(target)
    if family == "widening":
        t = dataclasses.replace(t, extensions=frozenset())
    N = n_vec * t.vector_bits // 32
    tree = matmul_and_row_sums(M, N, K, a_dt, "auto" if requested else None)
    rng = np.random.default_rng(seed)
    A, B = ints(rng, a_dt, (M, K)), ints(rng, "int8", (K, N))
    C, R = np.zeros((M, N), np.int32), np.zeros(M, np.int32)
    kernel = compile(tree, target=t)
    kernel(A, B, C, R)
    assert kernel.tensorized is not None
    np.testing.assert_array_equal(C, A.astype(np.int64) @ B.astype(np.int64))
    np.testing.assert_array_equal(R, A.astype(np.int64).sum(axis=1))
