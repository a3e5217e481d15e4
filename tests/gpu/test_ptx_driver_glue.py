"""The driver glue end to end without a GPU: a stand-in libcuda whose memory is numpy and whose
cuLaunchKernel runs the SIMT reference interpreter.  It checks what a GPU run depends on besides
the kernel: parameter marshalling (void ** to CUdeviceptr slots), grid and block order, the
dynamic shared memory opt-in, host <-> device copies, device arrays and their interface."""
import importlib.util
import threading
import time

import cffi
import numpy as np
import pytest

import loopstack as lt
from loopstack.backend.ptx import GpuSchedule, GpuTarget
from loopstack.isa.ptx import driver

from gpu_programs import gemm

pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
if importlib.util.find_spec("loopstack.isa.ptx.sim") is None:
    pytest.skip("the SIMT reference interpreter is not in this build", allow_module_level=True)


class FakeCuda:
    """Just the entry points loopstack calls, with CUDA's conventions (out-parameters, codes)."""

    def __init__(self, ffi):
        self.ffi = ffi
        self.memory = {}                 # device address -> np.uint8 array
        self.next = 1 << 32
        self.modules, self.functions, self.attributes, self.launches = {}, {}, {}, []

    def cuInit(self, flags):
        return 0

    def cuDeviceGetCount(self, n):
        n[0] = 1
        return 0

    def cuDeviceGet(self, dev, ordinal):
        dev[0] = 0
        return 0

    def cuDevicePrimaryCtxRetain(self, ctx, dev):
        ctx[0] = self.ffi.cast("CUcontext", 0x1000)
        return 0

    def cuCtxSetCurrent(self, ctx):
        return 0

    def cuCtxSynchronize(self):
        return 0

    def cuModuleLoadDataEx(self, module, image, n, options, values):
        key = len(self.modules) + 1
        self.modules[key] = self.ffi.string(self.ffi.cast("char *", image)).decode()
        module[0] = self.ffi.cast("CUmodule", key)
        return 0

    def cuModuleGetFunction(self, fn, module, name):
        key = len(self.functions) + 1
        self.functions[key] = (self.modules[int(self.ffi.cast("uintptr_t", module))],
                               name.decode() if isinstance(name, bytes) else self.ffi.string(name).decode())
        fn[0] = self.ffi.cast("CUfunction", key)
        return 0

    def cuFuncSetAttribute(self, fn, attr, value):
        self.attributes[(int(self.ffi.cast("uintptr_t", fn)), attr)] = value
        return 0

    def cuMemAlloc_v2(self, p, size):
        p[0] = self.next
        self.memory[self.next] = np.zeros(size, np.uint8)
        self.next += (size + 255) // 256 * 256 + 256
        return 0

    def cuMemFree_v2(self, ptr):
        self.memory.pop(int(ptr), None)
        return 0

    def cuMemcpyHtoD_v2(self, dst, src, n):
        self.memory[int(dst)][:n] = np.frombuffer(self.ffi.buffer(src, n), np.uint8)
        return 0

    def cuMemcpyDtoH_v2(self, dst, src, n):
        self.ffi.buffer(dst, n)[:] = self.memory[int(src)][:n].tobytes()
        return 0

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        from loopstack.isa.ptx.sim import launch
        ptx, entry = self.functions[int(self.ffi.cast("uintptr_t", fn))]
        n = ptx.split(f".entry {entry}(")[1].split(")")[0].count(".param")
        ptrs = [self.ffi.cast("CUdeviceptr *", params[i])[0] for i in range(n)]
        self.launches.append(((gx, gy, gz), (bx, by, bz), shared))
        launch(ptx, entry, grid=(gx, gy, gz), block=(bx, by, bz), args=[self.memory[p] for p in ptrs],
               dynamic_shared_bytes=shared)
        return 0

    def cuEventCreate(self, ev, flags):
        ev[0] = self.ffi.cast("CUevent", 0x2000)
        return 0

    def cuEventRecord(self, ev, stream):
        return 0

    def cuEventSynchronize(self, ev):
        return 0

    def cuEventElapsedTime(self, ms, a, b):
        ms[0] = 0.5
        return 0

    def cuEventDestroy_v2(self, ev):
        return 0


@pytest.fixture
def fake_gpu(monkeypatch):
    d = driver._Driver.__new__(driver._Driver)
    d.ffi = cffi.FFI()
    d.ffi.cdef(driver.CDEF)
    d.lib = FakeCuda(d.ffi)
    d.device, d.context, d.local = 0, d.ffi.cast("CUcontext", 0x1000), threading.local()
    monkeypatch.setattr(driver, "_DRIVER", d)
    return d.lib


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8"])
def test_a_kernel_runs_through_the_driver_calls(fake_gpu, dtype):
    C, arrays, ref = gemm(40, 24, 48, dtype, np.random.default_rng(4), bias=dtype != "int8", relu=True)
    sched = GpuSchedule(1, 2, 1, 1, 2, 0, 3)
    k = lt.compile(C, target=GpuTarget("sm_90", sched))
    out = np.zeros((40, 24), lt.dtypes.dtype(k.tree.outputs[0].dtype).np)
    k(*arrays, out)
    assert fake_gpu.launches == [((1, 3, 1), (64, 1, 1), k.shared_bytes)]
    np.testing.assert_allclose(out.astype(np.float64), ref().astype(out.dtype).astype(np.float64),
                               rtol=3e-2, atol=0.15 if dtype != "int8" else 0)


def test_device_arrays_are_passed_without_copies_and_big_tiles_opt_in(fake_gpu):
    C, arrays, ref = gemm(32, 40, 40, "float16", np.random.default_rng(5))
    k = lt.compile(C, target=GpuTarget("sm_90", GpuSchedule(1, 1, 2, 2, 8, 0, 4)))
    assert k.shared_bytes > driver.STATIC_SHARED_LIMIT
    devs = [driver.DeviceArray.from_host(a) for a in arrays] + [driver.DeviceArray((32, 40), np.float16)]
    k(*devs)                                            # device arrays: launched as they are
    assert (1, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) in fake_gpu.attributes
    got = devs[-1].numpy()
    np.testing.assert_allclose(got.astype(np.float64), ref(), rtol=2e-2, atol=0.1)
    assert k.benchmark(*arrays, np.zeros((32, 40), np.float16), runs=2) == pytest.approx(k.flops / 0.5e-3 / 1e9)
    before, t0 = len(fake_gpu.launches), time.perf_counter()
    k.benchmark(*arrays, np.zeros((32, 40), np.float16), runs=1, warmup=0, min_seconds=0.2)
    # launches until min_seconds have passed, as a CPU kernel's benchmark calls (timing.best_seconds)
    assert time.perf_counter() - t0 >= 0.2 and len(fake_gpu.launches) - before >= 2


def _fuzz_gpu():
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    import fuzz_gpu
    return fuzz_gpu


def test_the_gpu_fuzzers_device_target_runs_each_kernel_through_the_driver(fake_gpu):
    """bench/fuzz_gpu.py's `device` target: each kernel runs through the driver too, and its result
    is held against numpy and the interpreter's (here the stand-in's launches are the interpreter)."""
    fuzz_gpu = _fuzz_gpu()
    results = [fuzz_gpu.run_case(7, i, ["sm_90", "device"]) for i in range(8)]
    assert all(r["status"] in ("ok", "refused") for r in results), results
    ran = sum(r["status"] == "ok" for r in results)
    assert ran >= 4 and len(fake_gpu.launches) == ran


def test_the_gpu_fuzzer_reports_a_gpu_result_that_differs(fake_gpu, monkeypatch):
    fuzz_gpu = _fuzz_gpu()
    copy_back = fake_gpu.cuMemcpyDtoH_v2

    def off_by_one(dst, src, n):         # a "GPU" whose results come back with one byte changed
        code = copy_back(dst, src, n)
        view = fake_gpu.ffi.buffer(dst, n)
        view[n - 1] = bytes([(view[n - 1][0] + 1) % 256])
        return code
    monkeypatch.setattr(fake_gpu, "cuMemcpyDtoH_v2", off_by_one)
    results = [fuzz_gpu.run_case(7, i, ["sm_90", "device"]) for i in range(8)]
    wrong = [r for r in results if r["status"] == "wrong"]
    assert wrong and all("on the GPU" in r["detail"] or "the GPU and the interpreter differ" in r["detail"]
                         for r in wrong), results
