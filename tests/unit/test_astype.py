"""Tensor.astype: numpy's conversions, on a program's result (the store converts) and inside it
(a buffer of its own), on this host's CPU backend and in the loop-tree interpreter."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopstack as lt
from loopstack.errors import DTypeError, ScheduleError

FLOATS = ["float32", "float16"]          # bfloat16 computes on the GPU only (tests/gpu)
INTS = ["int8", "uint8", "int32"]


def values(dtype, rng, shape):
    if dtype in FLOATS:
        return (rng.standard_normal(shape) * 30).astype(dtype)
    lo, hi = {"int8": (-128, 128), "uint8": (0, 256), "int32": (-(1 << 24), 1 << 24)}[dtype]
    return rng.integers(lo, hi, shape).astype(dtype)    # int32 within 2^24: exact in float32


pairs = st.sampled_from([(a, b) for a in FLOATS + INTS for b in FLOATS + INTS
                         if a != b and not (a in FLOATS and b in INTS)])


@settings(max_examples=25, deadline=None)
@given(pair=pairs, seed=st.integers(0, 99), target=st.sampled_from([None, "interp"]))
def test_a_result_converts_as_numpy_does(pair, seed, target):
    src, dst = pair
    x = values(src, np.random.default_rng(seed), (5, 19))
    s = lt.SymbolGenerator()
    got = lt.Tensor(x).to(s.m, s.n).astype(dst).numpy(target)
    assert got.dtype == np.dtype(dst)
    with np.errstate(over="ignore"):            # int32 beyond float16's range: inf, as numpy's
        np.testing.assert_array_equal(got, x.astype(dst))


@settings(max_examples=25, deadline=None)
@given(pair=pairs, seed=st.integers(0, 99), target=st.sampled_from([None, "interp"]))
def test_inside_a_program_the_converted_values_are_what_follows_reads(pair, seed, target):
    """x.astype(d) + y.astype(d): each conversion rounds (or wraps) before the sum, as in numpy,
    and the sum is d's (integers wrap in d)."""
    src, dst = pair
    rng = np.random.default_rng(seed)
    x, y = values(src, rng, (7, 9)), values(src, rng, (7, 9))
    s = lt.SymbolGenerator()
    T = lt.Tensor(x).to(s.m, s.n).astype(dst) + lt.Tensor(y).to(s.m, s.n).astype(dst)
    assert "cast(%" in str(T.loop_tree)
    got = T.numpy(target)
    with np.errstate(over="ignore", invalid="ignore"):     # float16 infinities, as ours
        want = x.astype(dst) + y.astype(dst)
    assert got.dtype == want.dtype
    if dst in INTS:
        np.testing.assert_array_equal(got, want)
    else:       # the sum computes in float32 and rounds once to dst; numpy's float16 sum does the same
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-3)


def test_a_float16_gemm_accumulates_into_a_float32_result():
    """The result's cast is the store's: float32 sums that never pass through float16."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((40, 64)).astype(np.float16), rng.standard_normal((64, 24)).astype(np.float16)
    s = lt.SymbolGenerator()
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    wide = C.astype("float32")
    assert "cast" not in str(wide.loop_tree) and wide.numpy().dtype == np.float32
    assert np.abs(wide.numpy() - exact).max() < 1e-5          # float32 sums
    assert np.abs(C.numpy().astype(np.float64) - exact).max() > 1e-4      # float16 results


def test_what_astype_refuses():
    s = lt.SymbolGenerator()
    X = lt.Tensor(np.ones((4, 4), np.float32)).to(s.m, s.n)
    with pytest.raises(DTypeError, match="astype: float32 to int8 is not supported: a float to integer"):
        X.astype("int8").numpy()
    with pytest.raises(DTypeError, match="not supported"):
        X.astype("float64")
    with pytest.raises(DTypeError, match="not a dtype"):
        X.astype(object())
    # a conversion is part of the program, not a staging copy a schedule may drop
    T = X.astype("float16") * 2.0
    tree = T.loop_tree
    ref = next(it.ref for it in tree.items if it.kind == "node" and tree.graph.node(it.node).fn == "cast")
    with pytest.raises(ScheduleError, match="is an astype's conversion"):
        tree.delete_copy(ref)
    # and a schedule of the program without it is not this program's
    with pytest.raises(ScheduleError, match="schedules a different program"):
        T.set((X * 2.0).loop_tree)


def test_same_dtype_is_no_conversion():
    s = lt.SymbolGenerator()
    X = lt.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).to(s.m, s.n)
    assert str(X.astype("float32").exp().loop_tree) == str(X.exp().loop_tree)


@pytest.mark.parametrize("target", [None, "interp"])
def test_an_integer_result_is_biased_in_integers_then_converted(target):
    """relu(A.B + bias) of int8 operands and an int32 bias, cast to float32: the bias and relu
    stay int32 arithmetic (not fused into the float conversion), and sums beyond 2**24 round
    once, as numpy's astype of the int32 result."""
    rng = np.random.default_rng(5)
    a = rng.integers(100, 128, (9, 2048)).astype(np.int8)
    b = rng.integers(100, 128, (2048, 11)).astype(np.int8)
    v = rng.integers(-3, 3, 11).astype(np.int32)
    s = lt.SymbolGenerator()
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    T = lt.nn.relu(C + lt.Tensor(v).to(s.n)).astype("float32")
    want = np.maximum(a.astype(np.int64) @ b.astype(np.int64) + v, 0).astype(np.int32).astype(np.float32)
    assert want.max() > 2 ** 24
    np.testing.assert_array_equal(T.numpy(target), want)


def test_an_int8_gemm_cast_to_float_runs_on_the_dot_product_instructions():
    """The conversion has loops of its own (by default, and in the generated default schedule),
    so the contraction is one the backend tensorizes as it does without the cast, and the int32
    sums are converted after."""
    from loopstack.tune.defaults import default_schedule

    rng = np.random.default_rng(1)
    a, b = rng.integers(-128, 128, (48, 64)).astype(np.int8), rng.integers(-128, 128, (64, 40)).astype(np.int8)
    v = rng.integers(-99, 99, 40).astype(np.int32)
    s = lt.SymbolGenerator()
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    T = lt.nn.relu(C + lt.Tensor(v).to(s.n)).astype("float32")
    plain = lt.compile(C).tensorized
    assert plain is not None          # every x86 target has an 8-bit dot product (VNNI, or AVX2's pairs)
    for tree in (T.loop_tree, default_schedule(T)):
        kernel = tree.compile(None)
        assert kernel.tensorized == plain, tree
        out = np.zeros((48, 40), np.float32)
        kernel(a, b, v, out)
        np.testing.assert_array_equal(out, np.maximum(a.astype(np.int64) @ b.astype(np.int64) + v, 0).astype(np.float32))
