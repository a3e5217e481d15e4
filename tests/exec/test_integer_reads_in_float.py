"""Float statements that read integers (a uint8 image scaled to float, an int32 accumulator
dequantized): every integer dtype is converted as numpy's astype(float32) does, natively on every
x86 target this CPU runs and in the interpreter; AArch64 converts int32 (scvtf) and refuses the
narrower ones, naming the read; an integer statement reading a float is refused."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from loopstack.backend import compile
from loopstack.backend.interp import InterpKernel
from loopstack.errors import DTypeError, UnsupportedError
from loopstack.isa import cpu
from loopstack.looptree.builders import access, make_tree, nest
from loopstack.looptree.ir import Binary, Buffer, Compute, Load
from loopstack.looptree.verify import verify

FEATURES = cpu.cpu_features()
TARGETS = [t for t, need in (("avx2", "avx2"), ("avx512", "avx512f")) if need in FEATURES]
INT_DTYPES = ["uint8", "int8", "int16", "int32"]


def ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def scaled_tree(dtype, m, n, form):
    """Y[m, n] = A[m, n] * S[n] (`elementwise`), A[n, m] * S[n] read across (`transposed`, scalar
    reads), Y[m] += A[m, n] * S[n] (`sum`, a reduction along the vector)."""
    a_ix = ("n", "m") if form == "transposed" else ("m", "n")
    bufs = [Buffer("A", dtype, (n, m) if form == "transposed" else (m, n), "input"),
            Buffer("S", "float32", (n,), "input"),
            Buffer("Y", "float32", (m,) if form == "sum" else (m, n), "output")]
    e = Binary("mul", Load(access("A", *a_ix)), Load(access("S", "n")))
    if form == "sum":
        stmt = Compute("Y", access("Y", "m"), e, reduce="add", init="identity")
    else:
        stmt = Compute("Y", access("Y", "m", "n"), e)
    return make_tree(bufs, {"m": m, "n": n}, nest([("m", 1), ("n", 1)], stmt))


def want(a, s, form):
    x = (a.T if form == "transposed" else a).astype(np.float32) * s
    return x.sum(axis=1, dtype=np.float32) if form == "sum" else x


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from(INT_DTYPES), m=st.integers(1, 5), n=st.integers(1, 40),
       form=st.sampled_from(["elementwise", "transposed", "sum"]), seed=st.integers(0, 2**31))
def test_integer_reads_convert_like_numpy(dtype, m, n, form, seed):
    rng = np.random.default_rng(seed)
    tree = scaled_tree(dtype, m, n, form)
    a = ints(rng, dtype, tree.buffer("A").shape)
    s = rng.standard_normal(n).astype(np.float32)
    ref = want(a, s, form)
    kernels = [("interp", InterpKernel(tree))] + [(t, compile(tree, target=t)) for t in TARGETS]
    for name, k in kernels:
        y = np.zeros(tree.buffer("Y").shape, np.float32)
        k(a, s, y)
        if form == "sum":       # float sums in another order
            np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6 * np.abs(a).max() * n, err_msg=name)
        else:                   # one rounding each: exact
            np.testing.assert_array_equal(y, ref, err_msg=name)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_extremes_of_every_integer_dtype(target, dtype):
    """The ends of each range (sign extension vs zero extension; int32 beyond 2**24 rounds)."""
    info = np.iinfo(dtype)
    vals = np.array([info.min, info.min + 1, -1 if info.min else 1, 0, 1, info.max - 1, info.max], dtype)
    a = np.resize(vals, (1, 37)).astype(dtype)
    tree = scaled_tree(dtype, 1, 37, "elementwise")
    y = np.zeros((1, 37), np.float32)
    compile(tree, target=target)(a, np.ones(37, np.float32), y)
    np.testing.assert_array_equal(y, a.astype(np.float32))


def test_an_integer_statement_reading_a_float_is_refused():
    bufs = [Buffer("A", "float32", (8,), "input"), Buffer("Y", "int32", (8,), "output")]
    tree = make_tree(bufs, {"i": 8}, nest([("i", 1)], Compute("Y", access("Y", "i"), Load(access("A", "i")))))
    with pytest.raises(DTypeError, match="reads %A.*float32.*integer statement reads integers"):
        verify(tree)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_aarch64_refuses_narrow_integer_reads_in_float_statements(dtype):
    """8-bit integers are not widened there: a clear error, not float bits of integers."""
    with pytest.raises(UnsupportedError, match=f"converts int32 reads into a float32 statement, not {dtype}"):
        compile(scaled_tree(dtype, 2, 9, "elementwise"), target="neon")


@pytest.mark.aarch64
@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 5), n=st.integers(1, 40), form=st.sampled_from(["elementwise", "transposed", "sum"]),
       seed=st.integers(0, 2**31))
def test_aarch64_converts_int32_reads_like_numpy(m, n, form, seed):
    from a64_run import run_kernel

    rng = np.random.default_rng(seed)
    tree = scaled_tree("int32", m, n, form)
    a = ints(rng, "int32", tree.buffer("A").shape)
    a.flat[:2] = [np.iinfo(np.int32).min, np.iinfo(np.int32).max][:a.size]      # beyond 2**24: rounded
    s = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(tree.buffer("Y").shape, np.float32)
    run_kernel(compile(tree, target="neon"), [a, s, y])
    ref = want(a, s, form)
    if form == "sum":
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6 * np.abs(a.astype(np.float64)).max() * n)
    else:
        np.testing.assert_array_equal(y, ref)
