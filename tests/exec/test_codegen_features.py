"""The x86 code generator feature by feature: register blocks, tails, math, parallel loops,
float16 storage, annotations, argument checks, AVX-512 emission."""
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from strategies import random_case

from loopstack.backend import compile
from loopstack.backend.kernel_base import empty_aligned
from loopstack.backend.x86.compile import emit_x86
from loopstack.errors import ArgumentError, ScheduleError, UnsupportedError
from loopstack.isa import cpu
from loopstack.isa.target import get_target
from loopstack.looptree.builders import access, elementwise_tree, make_tree, matmul_tree, nest
from loopstack.looptree.ir import Binary, Buffer, Compute, Load, Loop, LoopTree, Unary

from x86_decode import assert_decodes, decode_all

FEATURES = cpu.cpu_features()
pytestmark = pytest.mark.skipif(not {"avx2", "fma", "f16c"} <= FEATURES,
                                reason="CPU lacks AVX2/FMA/F16C: x86 kernels cannot run here")
needs_avx512 = pytest.mark.skipif(not {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= FEATURES,
                                  reason="CPU lacks AVX-512 (F/BW/VL/DQ): AVX-512 kernels cannot run here")

BLOCK_6x16 = (("n", 16), ("m", 6), ("k", 1), ("m", 1), ("n", 1))


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def matmul_args(M, N, K, dtype=np.float32):
    return rand(M, K, seed=1, dtype=dtype), rand(K, N, seed=2, dtype=dtype)


# -- register blocking ------------------------------------------------------------------


def _loop_body(listing: str, label: str) -> list[str]:
    lines = listing.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(label))
    end = next(i for i in range(start, len(lines)) if re.search(rf"\bjne {label[:-1]}\b", lines[i]))
    return lines[start + 1:end]


def test_6x16_block_keeps_twelve_accumulators_in_registers():
    kernel = compile(matmul_tree(96, 96, 96, BLOCK_6x16))
    body = _loop_body(kernel.asm(), "k0_top:")
    fmas = [line for line in body if "vfmadd231ps" in line]
    assert len(fmas) == 12                                     # 6 rows x 2 vectors of 8
    stores = [line for line in body if re.search(r"vmovups \w+ ptr \[", line)]
    assert stores == []                                         # C is stored once, after the k loop
    assert not any("rsp" in line for line in body)              # nothing spilled to the stack
    A, B = matmul_args(96, 96, 96)
    np.testing.assert_allclose(kernel.run(A, B)[0], A @ B, rtol=1e-4, atol=1e-4)


def test_compile_cost_follows_instructions_not_sizes():
    small = compile(matmul_tree(96, 96, 96, BLOCK_6x16))
    large = compile(matmul_tree(1536, 1536, 96, BLOCK_6x16))
    assert len(small._segments[0][1]) == len(large._segments[0][1])


def test_unroll_limit_changes_code_not_results():
    tree = matmul_tree(20, 19, 13, (("m", 4), ("n", 8), ("k", 1), ("m", 1), ("n", 1)))
    rolled, unrolled = compile(tree, unroll_limit=0), compile(tree, unroll_limit=100000)
    assert len(unrolled._segments[0][1]) > len(rolled._segments[0][1])
    A, B = matmul_args(20, 19, 13)
    np.testing.assert_allclose(rolled.run(A, B)[0], unrolled.run(A, B)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ScheduleError, match="unroll_limit"):
        compile(tree, unroll_limit=-1)


@pytest.mark.parametrize("M,N,K", [(7, 13, 5), (1, 1, 1), (13, 29, 31), (6, 16, 1)])
def test_tails_everywhere(M, N, K):
    kernel = compile(matmul_tree(M, N, K, (("n", 16), ("m", 6), ("k", 4), ("k", 1), ("m", 1), ("n", 1))))
    A, B = matmul_args(M, N, K)
    np.testing.assert_allclose(kernel.run(A, B)[0], A @ B, rtol=1e-4, atol=1e-4)


def test_bias_and_post_ops_are_fused_into_the_block_store():
    tree = matmul_tree(12, 24, 16, BLOCK_6x16, bias=True, post="relu")
    kernel = compile(tree)
    A, B = matmul_args(12, 24, 16)
    bias = rand(24, seed=3)
    np.testing.assert_allclose(kernel.run(A, B, bias)[0], np.maximum(A @ B + bias, 0), rtol=1e-4, atol=1e-4)
    body = _loop_body(kernel.asm(), "k0_top:")
    assert not any("vmaxps" in line for line in body)          # relu after the reduction, not inside


# -- element-wise math ------------------------------------------------------------------

MATH = {
    # op: (input sampler, numpy reference, rtol, atol)
    "exp": (lambda r: r.uniform(-80, 80, 4099), np.exp, 1e-6, 0),
    "log": (lambda r: np.exp(r.uniform(-80, 80, 4099)), np.log, 1e-6, 3e-7),
    "sigmoid": (lambda r: r.uniform(-30, 30, 4099), lambda x: 1 / (1 + np.exp(-x)), 2e-6, 0),
    "tanh": (lambda r: r.uniform(-12, 12, 4099), np.tanh, 0, 3e-7),
    "gelu": (lambda r: r.uniform(-12, 12, 4099),
             lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), 3e-6, 1e-7),
    "sqrt": (lambda r: r.uniform(0, 1e6, 4099), np.sqrt, 1e-7, 0),
    "reciprocal": (lambda r: r.uniform(0.01, 100, 4099), lambda x: 1 / x, 1e-7, 0),
    "abs": (lambda r: r.standard_normal(4099), np.abs, 0, 0),
    "neg": (lambda r: r.standard_normal(4099), np.negative, 0, 0),
    "relu": (lambda r: r.standard_normal(4099), lambda x: np.maximum(x, 0), 0, 0),
}


@pytest.mark.parametrize("op", sorted(MATH))
def test_vector_math_accuracy(op):
    sample, ref, rtol, atol = MATH[op]
    x = sample(np.random.default_rng(4)).astype(np.float32)
    kernel = compile(elementwise_tree(x.shape, unary=(op,)))
    got = kernel.run(x)[0].astype(np.float64)
    want = ref(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# -- float16 storage ---------------------------------------------------------------------


@pytest.mark.parametrize("M,N,K", [(12, 32, 16), (7, 13, 9)])
def test_float16_storage_computes_in_float32(M, N, K):
    A, B = matmul_args(M, N, K, np.float16)
    C = compile(matmul_tree(M, N, K, BLOCK_6x16, dtype="float16")).run(A, B)[0]
    assert C.dtype == np.float16
    want = (A.astype(np.float32) @ B.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(C.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)


# -- parallel loops ----------------------------------------------------------------------


def _parallel_matmul(M, N, K):
    tree = matmul_tree(M, N, K, (("m", 6), ("n", 16), ("k", 1), ("m", 1), ("n", 1)))
    top = tree.body[0]
    return LoopTree(tree.buffers, tree.dims, (Loop(top.var, top.dim, top.step, top.body, frozenset({"parallel"})),))


def test_parallel_loop_matches_serial_exactly():
    kernel = compile(_parallel_matmul(61, 40, 33))
    A, B = matmul_args(61, 40, 33)
    C = np.zeros((61, 40), np.float32)
    kernel.threads = 1
    kernel(A, B, C)
    serial = C.copy()
    kernel.threads = 2              # the same arrays again: the argument cache must follow
    C[...] = 0
    kernel(A, B, C)
    parallel = C
    np.testing.assert_array_equal(serial, parallel)
    np.testing.assert_allclose(parallel, A @ B, rtol=1e-4, atol=1e-4)


def test_parallel_reduction_loop_is_a_race_error():
    tree = matmul_tree(8, 8, 8, (("k", 1), ("m", 1), ("n", 1)))
    top = tree.body[0]
    racy = LoopTree(tree.buffers, tree.dims, (Loop(top.var, top.dim, top.step, top.body, frozenset({"parallel"})),))
    with pytest.raises(ScheduleError, match="would race"):
        compile(racy)


def test_parallel_inner_loop_is_an_error():
    tree = matmul_tree(8, 8, 8, (("m", 1), ("n", 1), ("k", 1)))
    top = tree.body[0]
    inner = top.body[0]
    bad = LoopTree(tree.buffers, tree.dims, (Loop(top.var, top.dim, top.step, (
        Loop(inner.var, inner.dim, inner.step, inner.body, frozenset({"parallel"})),)),))
    with pytest.raises(ScheduleError, match="outermost"):
        compile(bad)


def test_parallel_loop_gets_private_temps():
    """A temp used only inside the parallel loop is per thread: threads do not overwrite each other."""
    M, N = 64, 24
    bufs = [Buffer("X", "float32", (M, N), "input"), Buffer("T", "float32", (1, N), "temp"),
            Buffer("Y", "float32", (M, N), "output")]
    t_idx = (("m", 1), ("@m0", -1))
    produce = Compute("T", access("T", t_idx, "n"), Unary("exp", Load(access("X", "m", "n"))))
    consume = Compute("Y", access("Y", "m", "n"), Binary("mul", Load(access("T", t_idx, "n")),
                                                         Load(access("X", "m", "n"))))
    body = (nest([("n", 1)], produce, tag="a"), nest([("n", 1)], consume, tag="b"))
    tree = make_tree(bufs, {"m": M, "n": N}, Loop("m0", "m", 1, body, frozenset({"parallel"})))
    kernel = compile(tree)
    kernel.threads = 2
    X = rand(M, N)
    for _ in range(5):
        np.testing.assert_allclose(kernel.run(X)[0], np.exp(X) * X, rtol=1e-5, atol=1e-6)


# -- annotations and errors ------------------------------------------------------------------


def test_vectorize_annotation_on_a_strided_loop_is_an_error():
    tree = matmul_tree(8, 8, 8, (("m", 1), ("n", 1), ("k", 1)))
    m, n, k = tree.body[0], tree.body[0].body[0], tree.body[0].body[0].body[0]
    bad = LoopTree(tree.buffers, tree.dims, (Loop(m.var, m.dim, m.step, (Loop(n.var, n.dim, n.step, (
        Loop(k.var, k.dim, k.step, k.body, frozenset({"vectorize"})),)),)),))
    # k is innermost and A is unit-stride along it, but B is strided (stride 8) along k
    with pytest.raises(ScheduleError, match="cannot be vectorized"):
        compile(bad)


def test_bad_arrays_are_clear_errors():
    kernel = compile(matmul_tree(8, 8, 8))
    A, B = matmul_args(8, 8, 8)
    C = np.zeros((8, 8), np.float32)
    with pytest.raises(ArgumentError, match="dtype float64"):
        kernel(A.astype(np.float64), B, C)
    with pytest.raises(ArgumentError, match="shape"):
        kernel(A[:4], B, C)
    with pytest.raises(ArgumentError, match="not laid out"):
        kernel(np.asfortranarray(A), B, C)
    with pytest.raises(ArgumentError, match="not writable"):
        C.flags.writeable = False
        kernel(A, B, C)
    with pytest.raises(ArgumentError, match="overlaps"):
        kernel(A, B, A)
    with pytest.raises(ArgumentError, match="takes 3"):
        kernel(A, B)


def test_integer_programs_name_the_buffer():
    with pytest.raises(UnsupportedError, match=r"%A is int8"):
        compile(matmul_tree(4, 4, 4, dtype="int8"))


def test_a_target_the_cpu_lacks_fails_before_any_code_runs():
    if "avx512f" in FEATURES:
        pytest.skip("this CPU has AVX-512")
    with pytest.raises(UnsupportedError, match="avx512f"):
        compile(matmul_tree(8, 8, 8), target="avx512")


def test_aligned_buffers():
    a = empty_aligned((3, 5), np.float32)
    assert a.ctypes.data % 64 == 0 and a.flags.c_contiguous and not a.any()


# -- AVX-512 --------------------------------------------------------------------------------

AVX512 = get_target("avx512", check=False)


@settings(max_examples=60)
@given(random_case())
def test_avx512_code_decodes(case):
    """Emitted for AVX-512 (no execution needed): every instruction decodes with iced-x86."""
    assume(not any(b.dtype in ("int8", "uint8", "int32") for b in case.tree.buffers))
    _, _, segments = emit_x86(case.tree, AVX512)
    for asm, _ in segments:
        decode_all(asm.bytes()[:asm.code_size])


def test_avx512_block_uses_zmm_and_masks():
    _, _, segments = emit_x86(matmul_tree(24, 40, 16, (("n", 32), ("m", 12), ("k", 1), ("m", 1), ("n", 1))), AVX512)
    text = segments[0][0].listing()
    assert "zmm2" in text and "vfmadd231ps zmm" in text
    assert "{k" in text                                       # the 40 = 32 + 8 tail uses an opmask
    assert len(re.findall(r"vfmadd231ps zmm\d+, zmm\d+, (zmm\d+|zmmword)", text)) >= 24


@needs_avx512
@settings(max_examples=80)
@given(random_case())
def test_avx512_random_trees_match_numpy(case):
    from strategies import check_case
    assume(not any(b.dtype in ("int8", "uint8", "int32") for b in case.tree.buffers))
    kernel = compile(case.tree, target="avx512")
    inputs = case.make_inputs(np.random.default_rng(0))
    check_case(case, inputs, kernel.run(*inputs))
    assert_decodes(kernel)


@needs_avx512
def test_avx512_matmul_and_math():
    A, B = matmul_args(37, 45, 29)
    kernel = compile(matmul_tree(37, 45, 29, (("n", 32), ("m", 12), ("k", 1), ("m", 1), ("n", 1)), post="gelu"),
                     target="avx512")
    x = A @ B
    want = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(kernel.run(A, B)[0], want, rtol=1e-4, atol=1e-4)
