"""The reference interpreter against numpy: random trees (hypothesis) and hand-written cases."""
import math

import numpy as np
import pytest
from hypothesis import given, settings

import loopstack.backend.interp as interp
from loopstack.backend import compile as ls_compile
from loopstack.backend.interp import InterpKernel
from loopstack.errors import ArgumentError, BoundsError
from loopstack.looptree.builders import (
    access, conv2d_tree, elementwise_tree, make_tree, matmul_tree, nest, transpose_tree,
)
from loopstack.looptree.ir import Acc, Access, Affine, Binary, Buffer, Compute, Const, Load, Loop, Unary
from strategies import check_case, random_case

RNG = np.random.default_rng(1234)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def ref_conv_nchw(X, Wt, stride, padding, dilation):
    X = np.pad(X.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    N, C, H, W = X.shape
    K, _, R, S = Wt.shape
    OH = (H - dilation * (R - 1) - 1) // stride + 1
    OW = (W - dilation * (S - 1) - 1) // stride + 1
    Y = np.zeros((N, K, OH, OW))
    for r in range(R):
        for s in range(S):
            patch = X[:, :, r * dilation: r * dilation + stride * (OH - 1) + 1: stride,
                      s * dilation: s * dilation + stride * (OW - 1) + 1: stride]
            Y += np.einsum("nchw,kc->nkhw", patch, Wt[:, :, r, s])
    return Y


# ---------------------------------------------------------------------------
# random trees


@settings(max_examples=200)
@given(random_case())
def test_interp_matches_numpy_on_random_trees(case):
    inputs = case.make_inputs(np.random.default_rng(0))
    check_case(case, inputs, InterpKernel(case.tree).run(*inputs))


@given(random_case())
def test_interp_chunked_evaluation_is_the_same(case):
    # a tiny chunk size forces the chunked and the loop-by-loop paths of every nest
    old = interp.MAX_POINTS
    interp.MAX_POINTS = 5
    try:
        inputs = case.make_inputs(np.random.default_rng(1))
        check_case(case, inputs, InterpKernel(case.tree).run(*inputs))
    finally:
        interp.MAX_POINTS = old


# ---------------------------------------------------------------------------
# hand-written cases


@pytest.mark.parametrize("order", [
    [("m", 16), ("n", 8), ("k", 1), ("m", 1), ("n", 1)],
    [("k", 1), ("m", 1), ("n", 1)],
    # tails at several levels: 23 = 2*10 + 3, inner 10 = 3*3 + 1 and so on
    [("m", 10), ("n", 7), ("k", 6), ("m", 3), ("n", 4), ("k", 4), ("m", 1), ("k", 1), ("n", 1)],
    [("n", 32), ("m", 5), ("k", 1), ("n", 1), ("m", 1)],
])
def test_matmul_schedules_with_tails(order):
    A, B = f32(23, 19), f32(19, 17)
    (C,) = InterpKernel(matmul_tree(23, 17, 19, order=order)).run(A, B)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5)


def test_init_and_post_with_reduction_loop_outermost():
    order = [("k", 3), ("m", 4), ("k", 1), ("n", 1), ("m", 1)]
    t = matmul_tree(9, 6, 10, order=order, bias=True, post="relu")
    A, B, bias = f32(9, 10), f32(10, 6), f32(6)
    C = np.full((9, 6), 123.0, np.float32)       # init overwrites whatever was there
    InterpKernel(t)(A, B, bias, C)
    np.testing.assert_allclose(C, np.maximum(A.astype(np.float64) @ B + bias, 0), rtol=1e-5, atol=1e-5)


def test_accumulate_without_init_continues_from_output():
    t = matmul_tree(5, 4, 3, order=[("k", 1), ("m", 1), ("n", 1)], accumulate=True)
    A, B = f32(5, 3), f32(3, 4)
    C = f32(5, 4)
    want = C + A @ B
    InterpKernel(t)(A, B, C)
    np.testing.assert_allclose(C, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, ref", [("max", np.max), ("min", np.min), ("mul", np.prod)])
def test_max_min_mul_reduce(op, ref):
    stmt = Compute("Y", access("Y", "i"), Load(access("X", "j", "i")), reduce=op, init="identity")
    t = make_tree([Buffer("X", "float32", (7, 5), "input"), Buffer("Y", "float32", (5,), "output")],
                  {"i": 5, "j": 7}, nest([("j", 3), ("i", 1), ("j", 1)], stmt))
    X = f32(7, 5)
    (Y,) = InterpKernel(t).run(X)
    np.testing.assert_allclose(Y, ref(X, axis=0), rtol=1e-6)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("pad", ["zero_pad", "copy"])
def test_conv2d_with_padding(layout, pad):
    t = conv2d_tree(2, 3, 9, 8, 4, 3, 3, stride=2, padding=1, dilation=1, layout=layout, pad=pad)
    k = InterpKernel(t)
    X, Wt, Y = k.random_arguments(seed=5)
    k(X, Wt, Y)
    if layout == "NHWC":
        X, Wt, Y = X.transpose(0, 3, 1, 2), Wt.transpose(3, 2, 0, 1), Y.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(Y, ref_conv_nchw(X, Wt, 2, 1, 1), rtol=1e-5, atol=1e-5)


def test_scoped_temp_block_under_shared_loop():
    # T holds a 4-row block of relu(A); 10 rows leave a 2-row tail block
    M, N, K = 10, 6, 5
    idx = (Affine.of("m", ("@m0", -1)), Affine.of("k"))
    prod = Compute("T", Access("T", idx), Unary("relu", Load(access("A", "m", "k"))))
    cons = Compute("C", access("C", "m", "n"), Binary("mul", Load(Access("T", idx)), Load(access("B", "k", "n"))),
                   reduce="add", init="identity")
    body = Loop("m0", "m", 4, (nest([("k", 1), ("m", 1)], prod, tag="p"),
                               nest([("n", 1), ("k", 1), ("m", 1)], cons, tag="c")))
    t = make_tree([Buffer("A", "float32", (M, K), "input"), Buffer("B", "float32", (K, N), "input"),
                   Buffer("T", "float32", (4, K), "temp"), Buffer("C", "float32", (M, N), "output")],
                  {"m": M, "n": N, "k": K}, body)
    A, B = f32(M, K), f32(K, N)
    (C,) = ls_compile(t, target="interp").run(A, B)
    np.testing.assert_allclose(C, np.maximum(A, 0).astype(np.float64) @ B, rtol=1e-5, atol=1e-5)



def test_fp16_storage_computes_in_fp32():
    t = matmul_tree(8, 8, 16, dtype="float16", post="gelu")
    A, B = f32(8, 16).astype(np.float16), f32(16, 8).astype(np.float16)
    (C,) = InterpKernel(t).run(A, B)
    assert C.dtype == np.float16
    x = A.astype(np.float64) @ B
    want = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(C.astype(np.float64), want, rtol=2e-2, atol=2e-2)


def test_int8_inputs_accumulate_in_int32():
    t = matmul_tree(6, 5, 40, dtype="int8")      # out_dtype int32
    A = RNG.integers(-128, 128, (6, 40)).astype(np.int8)
    B = RNG.integers(-128, 128, (40, 5)).astype(np.int8)
    (C,) = InterpKernel(t).run(A, B)
    assert C.dtype == np.int32
    np.testing.assert_array_equal(C, A.astype(np.int64) @ B.astype(np.int64))


def test_int_arithmetic_wraps_and_truncates():
    t = elementwise_tree((4,), (), "mul", dtype="int32")
    A = np.array([2**30, -2**31, 7, -7], np.int32)
    B = np.array([4, -1, 3, 3], np.int32)
    (Y,) = InterpKernel(t).run(A, B)
    np.testing.assert_array_equal(Y, (A.astype(np.int64) * B).astype(np.int32))   # C int32 wrap
    (Y,) = InterpKernel(elementwise_tree((4,), (), "div", dtype="int32")).run(A, np.array([3, 1, 2, 0], np.int32))
    np.testing.assert_array_equal(Y, [2**30 // 3, -2**31, 3, 0])                    # toward zero; /0 gives 0
    (Y,) = InterpKernel(elementwise_tree((2,), (), "div", dtype="int32")).run(
        np.array([-7, 7], np.int32), np.array([2, -2], np.int32))
    np.testing.assert_array_equal(Y, [-3, -3])
    # int8 output of int8 * int8 wraps when stored
    (Y,) = InterpKernel(elementwise_tree((1,), (), "mul", dtype="int8")).run(
        np.array([100], np.int8), np.array([3], np.int8))
    assert Y[0] == np.int8(np.int32(300).astype(np.int8))


def test_unary_ops_and_gelu_definition():
    x = np.linspace(-3, 3, 13, dtype=np.float32)
    for op, ref in [("gelu", lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))),
                    ("sigmoid", lambda v: 1 / (1 + np.exp(-v))), ("relu", lambda v: np.maximum(v, 0)),
                    ("abs", np.abs), ("neg", np.negative), ("tanh", np.tanh), ("exp", np.exp),
                    ("erf", np.vectorize(math.erf))]:
        (Y,) = InterpKernel(elementwise_tree((13,), (op,))).run(x)
        np.testing.assert_allclose(Y, ref(x.astype(np.float64)), rtol=1e-5, atol=1e-6, err_msg=op)


def test_transpose_and_broadcast_copy():
    X = f32(3, 4, 5)
    (Y,) = InterpKernel(transpose_tree((3, 4, 5), (2, 0, 1), order=[("j", 2), ("i", 1), ("l", 1), ("j", 1)])).run(X)
    np.testing.assert_array_equal(Y, X.transpose(2, 0, 1))
    # broadcast a row over i; a plain assignment inside a loop over a dim its output ignores
    stmt = Compute("Y", access("Y", "i", "j"), Load(access("R", "j")))
    last = Compute("Z", access("Z", "j"), Load(access("X2", "i", "j")))       # last write (i = 2) wins
    t = make_tree([Buffer("R", "float32", (4,), "input"), Buffer("X2", "float32", (3, 4), "input"),
                   Buffer("Y", "float32", (3, 4), "output"), Buffer("Z", "float32", (4,), "output")],
                  {"i": 3, "j": 4}, nest([("i", 1), ("j", 1)], stmt, tag="a"), nest([("i", 1), ("j", 1)], last))
    R, X2 = f32(4), f32(3, 4)
    Y, Z = InterpKernel(t).run(R, X2)
    np.testing.assert_array_equal(Y, np.broadcast_to(R, (3, 4)))
    np.testing.assert_array_equal(Z, X2[2])


def test_post_on_plain_assignment_and_consts():
    stmt = Compute("Y", access("Y", "i"), Binary("add", Load(access("X", "i")), Const(2.0)),
                   post=Binary("mul", Acc(), Const(3.0)))
    t = make_tree([Buffer("X", "float32", (6,), "input"), Buffer("Y", "float32", (6,), "output")],
                  {"i": 6}, nest([("i", 4), ("i", 1)], stmt))
    X = f32(6)
    (Y,) = InterpKernel(t).run(X)
    np.testing.assert_allclose(Y, (X + 2) * 3, rtol=1e-6)


def test_large_nest_is_chunked(monkeypatch):
    monkeypatch.setattr(interp, "MAX_POINTS", 1000)
    A, B = f32(20, 30), f32(30, 10)
    (C,) = InterpKernel(matmul_tree(20, 10, 30, order=[("m", 1), ("n", 1), ("k", 1)])).run(A, B)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# the Kernel interface


def test_kernel_interface():
    t = matmul_tree(8, 8, 8)
    k = ls_compile(t, target="interp")
    assert isinstance(k, InterpKernel) and k.tree is t
    assert k.flops == 2 * 8 ** 3 and k.bytes_moved == k.bytes == 3 * 64 * 4
    assert k.compile_ms >= 0 and "no assembly" in k.asm()
    assert k.benchmark(runs=2) > 0
    A, B = f32(8, 8), f32(8, 8)
    (C,) = k.run(A, B)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("args, msg", [
    (lambda A, B, C: (A, B), r"takes 3 array\(s\) \(A, B, C\), got 2"),
    (lambda A, B, C: (A.astype(np.float64), B, C), r"argument 0 \(A\) has dtype float64, expected float32"),
    (lambda A, B, C: (A, B[:, :4].copy(), C), r"argument 1 \(B\) has shape \(8, 4\), expected \(8, 8\)"),
    (lambda A, B, C: (A.T, B, C), r"argument 0 \(A\) is not laid out as C-contiguous"),
    (lambda A, B, C: (A, B, A), r"argument 2 \(C\) is an output and overlaps argument 0 \(A\)"),
    (lambda A, B, C: (A, B, [[0.0]]), r"argument 2 \(C\) is a list, expected a numpy array"),
])
def test_argument_errors(args, msg):
    k = InterpKernel(matmul_tree(8, 8, 8))
    A, B, C = f32(8, 8), f32(8, 8), np.zeros((8, 8), np.float32)
    with pytest.raises(ArgumentError, match=msg):
        k(*args(A, B, C))


def test_read_only_output_and_bounds_checked_on_construction():
    k = InterpKernel(matmul_tree(4, 4, 4))
    C = np.zeros((4, 4), np.float32)
    C.flags.writeable = False
    with pytest.raises(ArgumentError, match="is an output but is not writable"):
        k(f32(4, 4), f32(4, 4), C)
    bad = make_tree([Buffer("X", "float32", (3,), "input"), Buffer("Y", "float32", (4,), "output")], {"i": 4},
                    nest([("i", 1)], Compute("Y", access("Y", "i"), Load(access("X", "i")))))
    with pytest.raises(BoundsError, match=r"index 0 \(i\) reaches 3 but X has size 3"):
        InterpKernel(bad)


def test_64_cube_matmul_any_schedule_is_quick():
    import time
    A, B = f32(64, 64), f32(64, 64)
    for order in ([("m", 16), ("n", 8), ("k", 1), ("m", 1), ("n", 1)],
                  [("k", 7), ("n", 5), ("m", 3), ("k", 1), ("m", 1), ("n", 1)]):
        k = InterpKernel(matmul_tree(64, 64, 64, order=order))
        t0 = time.perf_counter()
        (C,) = k.run(A, B)
        assert time.perf_counter() - t0 < 5.0    # generous: a sanity bound, not a benchmark
        np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
