"""Quantized kernels on AArch64: `sdot` / `udot` by element (asimddp), bit-exact against numpy.

Kernels are compiled for `neon` on the Apple M1 preset (which has the dot product); on an x86 host
they run in unicorn (CPU model MAX, tests/a64_run.py), on an aarch64 host — the qemu stage —
natively through the kernel's own call. uint8 x int8 products run on `sdot` with the activations
shifted by -128 and 128 x the weights' sum added back; widths that are no whole vector of 4 run
as exact scalar integer code.
"""
import numpy as np
import pytest
from a64_run import run_kernel
from hypothesis import HealthCheck, given, settings, strategies as st
from int8_programs import int8_conv, int8_matmul, int8_matmul_case, ints

from loopstack.backend import compile
from loopstack.isa.target import get_target

M1 = get_target("neon", cpu="apple-m1", check=False)
SOME = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
PAIRS = [("int8", "int8"), ("uint8", "uint8"), ("uint8", "int8")]


def _run(tree, arrays):
    kernel = compile(tree, target=M1)
    out = np.zeros(tree.outputs[0].shape, tree.outputs[0].dtype)
    run_kernel(kernel, list(arrays) + [out])
    return kernel, out


@pytest.mark.aarch64
@SOME
@given(M=st.integers(1, 7), n_vec=st.integers(1, 3), n_extra=st.sampled_from([0, 0, 0, 2]), K=st.integers(1, 40),
       pair=st.sampled_from(PAIRS), bias=st.booleans(), relu=st.booleans(), seed=st.integers(0, 2**31))
def test_int8_matmuls_on_sdot_are_exact(M, n_vec, n_extra, K, pair, bias, relu, seed):
    N = 4 * n_vec + n_extra
    tree, arrays, want = int8_matmul_case(np.random.default_rng(seed), M, N, K, pair, bias, relu)
    kernel, got = _run(tree, arrays)
    np.testing.assert_array_equal(got, want)
    if not n_extra:
        assert kernel.tensorized == ("udot.4s.elem" if pair == ("uint8", "uint8") else "sdot.4s.elem")


@pytest.mark.aarch64
@SOME
@given(M=st.integers(1, 5), n_vec=st.integers(1, 2), K=st.integers(1, 30), out_dt=st.sampled_from(["int8", "uint8"]),
       per_channel=st.booleans(), seed=st.integers(0, 2**31))
def test_requantized_matmuls_on_sdot_match_the_interpreter(M, n_vec, K, out_dt, per_channel, seed):
    N = 4 * n_vec
    rng = np.random.default_rng(seed)
    scale = rng.uniform(1e-4, 2e-2, N).astype(np.float32) if per_channel else np.float32(rng.uniform(1e-4, 2e-2))
    tree = int8_matmul(M, N, K, "uint8", "int8", bias=True, requant=(scale, int(ints(rng, out_dt, ())), out_dt))
    A, B = ints(rng, "uint8", (M, K)), ints(rng, "int8", (K, N))
    arrays = [A, B, rng.integers(-5000, 5000, N).astype(np.int32)] + ([scale] if per_channel else [])
    want = np.zeros((M, N), out_dt)
    compile(tree, target="interp")(*arrays, want)
    kernel, got = _run(tree, arrays)
    assert kernel.tensorized == "sdot.4s.elem"
    np.testing.assert_array_equal(got, want)


@pytest.mark.aarch64
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(C=st.integers(1, 6), H=st.integers(3, 5), stride=st.integers(1, 2), padding=st.integers(0, 1),
       layout=st.sampled_from(["NCHW", "NHWC"]), pair=st.sampled_from(PAIRS), seed=st.integers(0, 2**31))
def test_int8_convolutions_on_sdot_are_exact(C, H, stride, padding, layout, pair, seed):
    tree = int8_conv(C, H, 8, 3, stride, padding, layout, pair)
    rng = np.random.default_rng(seed)
    X, W = ints(rng, pair[0], tree.buffer("X").shape), ints(rng, pair[1], tree.buffer("Wt").shape)
    want = np.zeros(tree.buffer("Y").shape, np.int32)
    compile(tree, target="interp")(X, W, want)
    kernel, got = _run(tree, [X, W])
    assert kernel.tensorized is not None
    np.testing.assert_array_equal(got, want)


def test_a_core_without_the_dot_product_runs_exact_scalar_code():
    a57 = get_target("neon", cpu="cortex-a57", check=False)
    tree = int8_matmul(3, 8, 12, "int8", "int8")
    rng = np.random.default_rng(1)
    A, B = ints(rng, "int8", (3, 12)), ints(rng, "int8", (12, 8))
    kernel = compile(tree, target=a57)
    assert kernel.tensorized is None and "sdot" not in kernel.asm()
    out = np.zeros((3, 8), np.int32)
    run_kernel(kernel, [A, B, out])
    np.testing.assert_array_equal(out, A.astype(np.int32) @ B.astype(np.int32))


@pytest.mark.aarch64
@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8"])
@pytest.mark.parametrize("binary, unary", [("add", ()), ("sub", ("relu",)), ("mul", ()), ("max", ("neg",)),
                                           ("min", ("abs",)), (None, ("relu",))])
def test_integer_element_wise_code_runs_on_neon(dtype, binary, unary):
    from loopstack.looptree.builders import elementwise_tree

    tree = elementwise_tree((3, 7), unary=unary, binary=binary, dtype=dtype)
    rng = np.random.default_rng(2)
    ins = [ints(rng, dtype, (3, 7)) for _ in tree.inputs]
    want = np.zeros((3, 7), dtype)
    compile(tree, target="interp")(*ins, want)
    kernel = compile(tree, target=M1)
    out = np.zeros((3, 7), dtype)
    run_kernel(kernel, ins + [out])
    np.testing.assert_array_equal(out, want)
