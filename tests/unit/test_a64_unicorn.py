"""Hand-assembled NEON kernels, encoded by loopstack, executed by unicorn (CPU model MAX) and
compared with numpy: fp32 fmla by element, fp16 fmla .8h (vector and by element), sdot."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

pytest.importorskip("unicorn")

import a64_kernels as K  # noqa: E402
from aarch64_unicorn import A64Fault, run_a64  # noqa: E402

from loopstack.isa.aarch64.assembler import Assembler  # noqa: E402
from loopstack.isa.aarch64.operands import Mem, V, X  # noqa: E402

_SGEMM = K.sgemm_4x8_kernel()
_HFMA = K.hfma_kernel()
_SDOT = K.sdot_kernel()


@settings(max_examples=10)
@given(st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_sgemm_fmla_by_element(k, seed):
    args, out, expected = K.sgemm_4x8_case(np.random.default_rng(seed), k)
    run_a64(_SGEMM, args)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5 * np.sqrt(k))


@settings(max_examples=10)
@given(st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_fp16_fmla_vector_and_by_element_bit_exact(n8, seed):
    args, out, expected = K.hfma_case(np.random.default_rng(seed), n8)
    run_a64(_HFMA, args)
    assert np.array_equal(out.view(np.uint16), expected.view(np.uint16)), (out, expected)


@settings(max_examples=10)
@given(st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_sdot_vector_and_by_element(n16, seed):
    args, out, expected = K.sdot_case(np.random.default_rng(seed), n16)
    run_a64(_SDOT, args)
    assert np.array_equal(out, expected)


def test_gpr_loop_returns_x0():
    args, expected = K.checksum_case(np.random.default_rng(1))
    assert run_a64(K.checksum_kernel(), args) == expected & (2**64 - 1)
    assert run_a64(K.checksum_kernel(), [np.zeros(1, np.int64), 0]) == 123456789


def test_pointer_array_argument():
    asm = Assembler()                      # void f(void **args): *args[1] = *args[0] + 1
    asm.ldp(X(1), X(2), Mem(X(0)))
    asm.ldr(X(3), Mem(X(1)))
    asm.add(X(3), X(3), 1)
    asm.str(X(3), Mem(X(2)))
    asm.ret()
    a, b = np.array([41], np.int64), np.zeros(1, np.int64)
    run_a64(asm.bytes(), [[a, b]])
    assert b[0] == 42


def test_oracle_catches_clobbered_callee_saved_registers():
    asm = Assembler()
    asm.movi(V(9).d2, 0)                   # d9 is callee-saved
    asm.ret()
    with pytest.raises(A64Fault, match="d9"):
        run_a64(asm.bytes(), [])
    asm = Assembler()
    asm.mov(X(19), X(0))
    asm.ret()
    with pytest.raises(A64Fault, match="x19"):
        run_a64(asm.bytes(), [5])


def test_oracle_catches_faults_and_runaways():
    asm = Assembler()
    asm.ldr(X(0), Mem(X(0)))               # x0 = 0: unmapped
    asm.ret()
    with pytest.raises(A64Fault, match="unicorn"):
        run_a64(asm.bytes(), [0])
    asm = Assembler()
    top = asm.label()
    asm.bind(top)
    asm.b(top)
    with pytest.raises(A64Fault, match="without returning"):
        run_a64(asm.bytes(), [], max_instructions=1000)
