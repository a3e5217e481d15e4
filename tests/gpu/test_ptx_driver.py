"""The CUDA driver path: its errors without a GPU, and (where a GPU is) the same kernels run on it."""
import cffi
import numpy as np
import pytest

import loopstack as lt
from loopstack.errors import ArgumentError, UnsupportedError
from loopstack.isa.ptx import driver

from gpu_programs import gemm

pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")


def test_a_missing_driver_library_is_unsupported_and_says_why():
    with pytest.raises(UnsupportedError, match="libcuda-missing.so.1.*PTX still compiles"):
        driver.driver("libcuda-missing.so.1")


@pytest.mark.skipif(driver.available(), reason="this host has a CUDA driver and GPU")
def test_running_without_a_gpu_raises_but_compiling_works():
    C, arrays, _ = gemm(32, 16, 16, "float16", np.random.default_rng(0))
    k = lt.compile(C, target="sm_90")
    assert "mma.sync" in k.ptx
    out = np.zeros((32, 16), np.float16)
    with pytest.raises(UnsupportedError, match="libcuda.so.1"):
        k(*arrays, out)
    with pytest.raises(UnsupportedError):
        k.benchmark()


class _FakeLib:
    """Stands in for libcuda: the JIT rejects the module and writes its log."""

    def __init__(self, ffi):
        self.ffi = ffi
        self.names = {218: b"CUDA_ERROR_INVALID_PTX"}

    def cuModuleLoadDataEx(self, module, image, n, options, values):
        assert list(options[0:n]) == [driver.CU_JIT_ERROR_LOG_BUFFER, driver.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
        log = self.ffi.cast("char *", values[0])
        text = b"ptxas application ptx input, line 7; error : Unknown symbol 'frob'"
        self.ffi.memmove(log, text + b"\0", len(text) + 1)
        return 218

    def cuGetErrorName(self, code, p):
        self._keep = self.ffi.new("char[]", self.names[code])
        p[0] = self._keep
        return 0

    def cuGetErrorString(self, code, p):
        self._keep2 = self.ffi.new("char[]", b"a PTX JIT compilation failed")
        p[0] = self._keep2
        return 0


def test_a_rejected_module_raises_with_the_jit_log():
    d = driver._Driver.__new__(driver._Driver)
    d.ffi = cffi.FFI()
    d.ffi.cdef(driver.CDEF)
    d.lib = _FakeLib(d.ffi)
    with pytest.raises(driver.CudaError) as e:
        driver.load_function(".version 8.0\n", "k", drv=d)
    assert e.value.name == "CUDA_ERROR_INVALID_PTX" and e.value.code == 218
    assert "cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX (218): a PTX JIT compilation failed" in str(e.value)
    assert "Unknown symbol 'frob'" in e.value.log and "JIT log:" in str(e.value)


class _Cai:
    def __init__(self, shape, typestr="<f2", ptr=4096, read_only=False, strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, read_only),
                                         "version": 3, "strides": strides}


@pytest.mark.parametrize("obj, is_out, message", [
    (np.zeros(4), False, "a device array"),
    (_Cai((4, 8)), False, "has shape \\(4, 8\\), expected \\(8, 4\\)"),
    (_Cai((8, 4), typestr="<f4"), False, "has type <f4"),
    (_Cai((8, 4), strides=(2, 16)), False, "not C-contiguous"),
    (_Cai((8, 4), read_only=True), True, "is an output but its device memory is read-only"),
    (_Cai((8, 4), ptr=4098), False, "not 16-byte aligned"),
])
def test_device_arrays_are_checked_before_a_launch(obj, is_out, message):
    with pytest.raises(ArgumentError, match=message):
        driver.device_pointer(obj, "A", np.float16, (8, 4), is_out)


class _Raises:
    @property
    def __cuda_array_interface__(self):
        raise TypeError("dtype bfloat16 cannot be exported")


def test_an_interface_that_fails_says_how_to_pass_bfloat16():
    assert driver.is_device_array(_Raises()) and not driver.is_device_array(np.zeros(2))
    with pytest.raises(ArgumentError, match="t.view\\(torch.int16\\)"):
        driver.device_pointer(_Raises(), "A", np.float16, (8, 4), False)


def test_a_contiguous_device_array_gives_its_pointer():
    assert driver.device_pointer(_Cai((8, 4), strides=(8, 2)), "A", np.float16, (8, 4), True) == 4096


@pytest.mark.skipif(not driver.available(), reason="no CUDA driver and GPU on this host")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8"])
def test_gemm_on_the_gpu_matches_numpy(dtype):
    rng = np.random.default_rng(3)
    C, arrays, ref = gemm(100, 72, 64, dtype, rng, bias=dtype != "int8", relu=True)
    ref = ref()
    k = lt.compile(C, target="sm_90")
    out = np.zeros(ref.shape, k.tree.outputs[0].dtype if dtype == "int8" else arrays[0].dtype)
    k(*arrays, out)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=2e-2, atol=5e-2)
