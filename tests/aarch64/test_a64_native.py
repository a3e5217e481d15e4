"""On an aarch64 host (natively, or the whole package under qemu-aarch64 -cpu max): kernels
assembled by loopstack, made executable by execmem (W^X, instruction cache flushed), called
through cffi and compared with numpy; feature detection through getauxval."""
from __future__ import annotations

import numpy as np
import pytest

from loopstack.isa import cpu, execmem
from loopstack.isa.target import get_target, host_target, peak_gflops

import a64_kernels as K

pytestmark = [
    pytest.mark.aarch64,
    pytest.mark.skipif(not cpu.is_aarch64(), reason="needs an aarch64 host (on x86 this file runs under "
                                                    "qemu-aarch64: tests/aarch64/test_qemu_stage.py)"),
]


def _call(code: bytes, cdecl: str, args):
    """Call `code` with numpy arrays as pointers (zero copy) and ints as they are."""
    fn = execmem.ExecutableCode(code, cdecl)
    keep = [execmem.array_pointer(a, writable=a.flags.writeable) if isinstance(a, np.ndarray) else a
            for a in args]
    try:
        return fn(*keep)
    finally:
        fn.close()


def test_getauxval_names_fp16_and_dot_product():
    features = cpu.cpu_features()
    assert {"fp", "asimd"} <= features
    # qemu -cpu max, and every core this project targets for neon_fp16, have both
    assert {"asimdhp", "asimddp", "fphp"} <= features, sorted(features)
    assert host_target().name == "neon"             # float32 programs compute in fp32
    assert get_target("neon_fp16").compute_dtype == "float16"     # checked: asimdhp is there


@pytest.mark.parametrize("seed", range(3))
def test_sgemm_fmla_by_element(seed):
    args, out, expected = K.sgemm_4x8_case(np.random.default_rng(seed), k=9 + seed)
    _call(K.sgemm_4x8_kernel(), "void(*)(void *, void *, void *, int64_t)", args)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=1e-4)


@pytest.mark.parametrize("seed", range(3))
def test_fp16_fmla(seed):
    args, out, expected = K.hfma_case(np.random.default_rng(seed), n8=3 + seed)
    _call(K.hfma_kernel(), "void(*)(void *, void *, void *, int64_t, void *)", args)
    assert np.array_equal(out.view(np.uint16), expected.view(np.uint16))


@pytest.mark.parametrize("seed", range(3))
def test_sdot(seed):
    args, out, expected = K.sdot_case(np.random.default_rng(seed), n16=2 + seed)
    _call(K.sdot_kernel(), "void(*)(void *, void *, void *, int64_t)", args)
    assert np.array_equal(out, expected)


def test_return_value_and_batch():
    args, expected = K.checksum_case(np.random.default_rng(0))
    assert _call(K.checksum_kernel(), "int64_t(*)(void *, int64_t)", args) == expected
    a, b = execmem.ExecutableCode.batch([K.checksum_kernel(), K.checksum_kernel()], "int64_t(*)(void *, int64_t)")
    x = np.arange(5, dtype=np.int64)
    assert a(execmem.array_pointer(x, writable=False), 5) == b(execmem.array_pointer(x, writable=False), 5) \
        == 10 + 123456789


def test_jitted_icache_flush_runs():
    flush = execmem.ExecutableCode(execmem.icache_flush_code(), "void(*)(void *, void *)")
    target = execmem.ExecutableCode(K.checksum_kernel(), "int64_t(*)(void *, int64_t)")
    flush(execmem.ffi.cast("void *", target.address), execmem.ffi.cast("void *", target.address + target.size))
    x = np.ones(3, np.int64)
    assert target(execmem.array_pointer(x, writable=False), 3) == 3 + 123456789


def test_fma_probe_measures_something():
    assert peak_gflops(host_target(), seconds=0.01) > 0
