"""A contraction's result in another dtype on the tensor cores: `.astype` on the result is the
epilogue's conversion of the f32 / s32 accumulators (no rounding to the operands' type first),
checked in the SIMT interpreter against numpy; a conversion inside the program is refused."""
import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopstack as lt
from loopstack.backend.ptx import GpuTarget
from loopstack.errors import UnsupportedError

from gpu_programs import conv, gemm

pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
if importlib.util.find_spec("loopstack.isa.ptx.sim") is None:
    pytest.skip("the PTX interpreter is not available", allow_module_level=True)

TF32 = GpuTarget("sm_90", allow_tf32=True)
# (operands, result dtype): the accumulator stored in another type than the operands'
CASES = [("float16", "float32"), ("bfloat16", "float32"), ("float16", "bfloat16"), ("float32", "float16"),
         ("int8", "float32"), ("int8", "float16"), ("int8", "int8"), ("uint8", "float32")]


def _run(kernel, arrays, shape, dtype):
    out = np.zeros(shape, lt.dtypes.dtype(dtype).np)
    kernel.simulate(*arrays, out)
    return out


def _expected(acc, dtype, operands):
    """numpy's astype of the exact sums (integers: s32 accumulators, wrapped into int8)."""
    if operands in ("int8", "uint8"):
        return acc.astype(np.int64).astype(np.int32).astype(lt.dtypes.dtype(dtype).np)
    return acc


@settings(max_examples=8, deadline=None)
@given(case=st.sampled_from(CASES), more=st.tuples(st.integers(0, 40), st.integers(0, 24)),
       seed=st.integers(0, 99))
def test_a_gemm_result_in_another_dtype(case, more, seed):
    src, dst = case
    m, n, k = 32 + more[0], 24 + more[1], 64
    b_dtype = "int8" if src == "uint8" else None
    C, arrays, ref = gemm(m, n, k, src, np.random.default_rng(seed), b_transposed=src == "float32", b_dtype=b_dtype)
    kernel = lt.compile(C.astype(dst), target=TF32)
    assert kernel.tree.outputs[0].dtype == dst
    got = _run(kernel, arrays, (m, n), dst).astype(np.float64)
    want = _expected(ref(), dst, src).astype(np.float64)
    if dst in ("int8",):
        np.testing.assert_array_equal(got, want)
    else:
        # the f32 sums rounded once to dst (tf32 operands: 10-bit mantissas, about 1e-3 each)
        eps = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}[dst] + (2e-3 if src == "float32" else 0)
        np.testing.assert_allclose(got, want, rtol=eps, atol=eps * np.sqrt(k) * 4)


def test_float32_sums_of_float16_operands_never_pass_through_float16():
    C, arrays, ref = gemm(48, 40, 256, "float16", np.random.default_rng(3))
    wide = _run(lt.compile(C.astype("float32"), target="sm_90"), arrays, (48, 40), "float32")
    narrow = _run(lt.compile(C, target="sm_90"), arrays, (48, 40), "float16").astype(np.float64)
    exact = ref()
    assert np.abs(wide - exact).max() < 2e-4 < np.abs(narrow - exact).max()


def test_a_convolution_stores_float32():
    Y, arrays, ref = conv(2, 6, 32, 24, "float16", np.random.default_rng(1))
    kernel = lt.compile(Y.astype("float32"), target="sm_90")
    got = _run(kernel, arrays, (2, 6, 6, 24), "float32")
    np.testing.assert_allclose(got, ref(), rtol=1e-5, atol=1e-4)


def test_a_conversion_inside_the_program_is_refused_with_the_way_out():
    rng = np.random.default_rng(0)
    s = lt.SymbolGenerator()
    A = lt.Tensor(rng.standard_normal((32, 32)).astype(np.float32)).to(s.m, s.k)
    B = lt.Tensor(rng.standard_normal((32, 32)).astype(np.float32)).to(s.k, s.n)
    C = (A.astype("float16") * B.astype("float16")).sum(s.k)
    with pytest.raises(UnsupportedError, match=r"an astype inside the program converts into a buffer of its own: "
                                               r"give the operands in their dtype, or cast the result"):
        lt.compile(C, target="sm_90")


@pytest.mark.parametrize("a_dtype", ["int8", "uint8"])
def test_an_integer_gemm_with_bias_and_relu_converts_on_the_store(a_dtype):
    """relu(A.B + bias) in s32, then float32: the epilogue's integer bias and relu, then cvt."""
    C, arrays, ref = gemm(40, 56, 96, a_dtype, np.random.default_rng(2), bias=True, relu=True, b_dtype="int8")
    kernel = lt.compile(C.astype("float32"), target="sm_90")
    got = _run(kernel, arrays, (40, 56), "float32")
    np.testing.assert_array_equal(got, ref().astype(np.int32).astype(np.float32))
