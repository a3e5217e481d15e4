"""A thin binding of the CUDA driver API (libcuda.so.1) through cffi in ABI mode.

No CUDA toolkit, compiler or Python CUDA package is needed: the declarations below are
copied from cuda.h (CUDA 13; the `_v2` symbols the header's macros select), and enums are
declared as the ints they are.  Only what loopstack uses is bound; every failing call raises
a `CudaError` carrying CUDA's error name and message, and a PTX the JIT rejects raises one
carrying the JIT's error log.  Where the library or a device is missing, `UnsupportedError`
says so: compiling PTX needs none of this.

    fn, jit_ms = load_function(ptx, "entry", shared_bytes)
    a = DeviceArray.from_host(np_array); launch(fn, grid, block, shared, [a.ptr, ...])
    a.copy_to_host(np_array)
"""
from __future__ import annotations

import threading
import time

import numpy as np

from ...errors import ArgumentError, LoopstackError, UnsupportedError

CDEF = """
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
typedef int CUjit_option;
typedef int CUfunction_attribute;
typedef int CUdevice_attribute;

CUresult cuGetErrorString(CUresult error, const char **pStr);
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuInit(unsigned int Flags);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options, void **optionValues);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value);
CUresult cuLaunchKernel(CUfunction f,
                        unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventSynchronize(CUevent hEvent);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuEventDestroy_v2(CUevent hEvent);
"""

CU_JIT_INFO_LOG_BUFFER = 3
CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
STATIC_SHARED_LIMIT = 48 * 1024      # above this a kernel must opt in to dynamic shared memory
LOG_BYTES = 16 * 1024


class CudaError(LoopstackError, RuntimeError):
    """A CUDA driver call failed; `name` is CUDA's error name (CUDA_ERROR_...)."""

    def __init__(self, call: str, code: int, name: str, message: str, log: str = ""):
        self.call, self.code, self.name, self.log = call, code, name, log
        text = f"{call} failed: {name} ({code}): {message}"
        super().__init__(text + (f"\nJIT log:\n{log}" if log else ""))


class _Driver:
    """The loaded library and the primary context of device 0, made current per thread."""

    def __init__(self, lib_name: str = "libcuda.so.1"):
        import cffi
        self.ffi = cffi.FFI()
        self.ffi.cdef(CDEF)
        try:
            self.lib = self.ffi.dlopen(lib_name)
        except OSError as e:
            raise UnsupportedError(f"the CUDA driver ({lib_name}) is not available here: {e}; "
                                   "PTX still compiles, but running a GPU kernel needs an NVIDIA driver and GPU") \
                from None
        self.check("cuInit", self.lib.cuInit(0))
        n = self.ffi.new("int *")
        self.check("cuDeviceGetCount", self.lib.cuDeviceGetCount(n))
        if n[0] < 1:
            raise UnsupportedError("the CUDA driver sees no GPU")
        dev = self.ffi.new("CUdevice *")
        self.check("cuDeviceGet", self.lib.cuDeviceGet(dev, 0))
        self.device = dev[0]
        ctx = self.ffi.new("CUcontext *")
        self.check("cuDevicePrimaryCtxRetain", self.lib.cuDevicePrimaryCtxRetain(ctx, self.device))
        self.context = ctx[0]
        self.local = threading.local()

    def check(self, call: str, code: int, log: str = "") -> None:
        if code == 0:
            return
        p = self.ffi.new("const char **")
        name = message = "?"
        if self.lib.cuGetErrorName(code, p) == 0 and p[0] != self.ffi.NULL:
            name = self.ffi.string(p[0]).decode()
        if self.lib.cuGetErrorString(code, p) == 0 and p[0] != self.ffi.NULL:
            message = self.ffi.string(p[0]).decode()
        raise CudaError(call, code, name, message, log)

    def current(self):
        """Make the primary context current on this thread (once per thread)."""
        if not getattr(self.local, "bound", False):
            self.check("cuCtxSetCurrent", self.lib.cuCtxSetCurrent(self.context))
            self.local.bound = True
        return self

    def capability(self) -> tuple[int, int]:
        v = self.ffi.new("int *")
        out = []
        for attr in (CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR):
            self.check("cuDeviceGetAttribute", self.lib.cuDeviceGetAttribute(v, attr, self.device))
            out.append(v[0])
        return out[0], out[1]


_DRIVER: _Driver | None = None
_DRIVER_ERROR: Exception | None = None
_LOCK = threading.Lock()


def driver(lib_name: str | None = None) -> _Driver:
    """The process's driver binding (UnsupportedError where no driver or GPU is present).

    `lib_name` loads another library (tests use it to see the missing-driver error)."""
    global _DRIVER, _DRIVER_ERROR
    if lib_name is not None:
        return _Driver(lib_name)
    with _LOCK:
        if _DRIVER is None:
            if _DRIVER_ERROR is not None:
                raise _DRIVER_ERROR
            try:
                _DRIVER = _Driver()
            except (UnsupportedError, CudaError) as e:
                _DRIVER_ERROR = e if isinstance(e, UnsupportedError) else UnsupportedError(f"no usable GPU: {e}")
                raise _DRIVER_ERROR from None
    return _DRIVER.current()


def available() -> bool:
    try:
        driver()
        return True
    except UnsupportedError:
        return False


def load_function(ptx: str, entry: str, shared_bytes: int = 0, drv: _Driver | None = None):
    """JIT-load `ptx` and return (the CUfunction of `entry`, milliseconds the JIT took)."""
    d = drv or driver()
    ffi, lib = d.ffi, d.lib
    err_log = ffi.new("char[]", LOG_BYTES)
    options = ffi.new("CUjit_option[]", [CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES])
    values = ffi.new("void *[]", [ffi.cast("void *", err_log), ffi.cast("void *", LOG_BYTES)])
    module = ffi.new("CUmodule *")
    image = ffi.new("char[]", ptx.encode())
    t0 = time.perf_counter()
    code = lib.cuModuleLoadDataEx(module, image, 2, options, values)
    jit_ms = (time.perf_counter() - t0) * 1e3
    d.check("cuModuleLoadDataEx", code, ffi.string(err_log).decode(errors="replace"))
    fn = ffi.new("CUfunction *")
    d.check("cuModuleGetFunction", lib.cuModuleGetFunction(fn, module[0], entry.encode()))
    if shared_bytes > STATIC_SHARED_LIMIT:
        d.check("cuFuncSetAttribute", lib.cuFuncSetAttribute(fn[0], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                              shared_bytes))
    d.modules = getattr(d, "modules", []) + [module[0]]    # kept loaded for the process's life
    return fn[0], jit_ms


def launch(fn, grid, block, shared_bytes: int, pointers: list[int], stream=None) -> None:
    d = driver()
    ffi = d.ffi
    slots = [ffi.new("CUdeviceptr *", p) for p in pointers]
    params = ffi.new("void *[]", [ffi.cast("void *", s) for s in slots])
    d.check("cuLaunchKernel", d.lib.cuLaunchKernel(fn, *grid, *block, shared_bytes,
                                                   ffi.NULL if stream is None else stream, params, ffi.NULL))


def synchronize() -> None:
    d = driver()
    d.check("cuCtxSynchronize", d.lib.cuCtxSynchronize())


def time_launches(call, runs: int = 10, warmup: int = 1, min_seconds: float = 0.0) -> float:
    """Best seconds of `runs` calls of `call` (launches), each timed by a pair of CUDA events;
    with `min_seconds`, calls go on until that much time has passed (as `timing.best_seconds`)."""
    d = driver()
    ffi, lib = d.ffi, d.lib
    ev = ffi.new("CUevent[2]")
    for i in range(2):
        d.check("cuEventCreate", lib.cuEventCreate(ffi.addressof(ev, i), 0))
    try:
        for _ in range(warmup):
            call()
        synchronize()
        best = float("inf")
        ms = ffi.new("float *")
        calls, start = 0, time.perf_counter()
        while calls < max(1, runs) or time.perf_counter() - start < min_seconds:
            calls += 1
            d.check("cuEventRecord", lib.cuEventRecord(ev[0], ffi.NULL))
            call()
            d.check("cuEventRecord", lib.cuEventRecord(ev[1], ffi.NULL))
            d.check("cuEventSynchronize", lib.cuEventSynchronize(ev[1]))
            d.check("cuEventElapsedTime", lib.cuEventElapsedTime(ms, ev[0], ev[1]))
            best = min(best, ms[0] / 1e3)
        return best
    finally:
        for i in range(2):
            lib.cuEventDestroy_v2(ev[i])


class DeviceArray:
    """GPU memory owned by loopstack, with numpy's shape and dtype; freed when collected.

    It exposes `__cuda_array_interface__` (version 3), so torch and cupy can view it too."""

    def __init__(self, shape, dtype):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        d = driver()
        p = d.ffi.new("CUdeviceptr *")
        d.check("cuMemAlloc_v2", d.lib.cuMemAlloc_v2(p, max(self.nbytes, 1)))
        self.ptr = int(p[0])
        self._free = d.lib.cuMemFree_v2

    @classmethod
    def from_host(cls, a: np.ndarray) -> "DeviceArray":
        a = np.ascontiguousarray(a)
        dev = cls(a.shape, a.dtype)
        d = driver()
        # as bytes: the buffer protocol does not export every dtype (ml_dtypes' bfloat16)
        d.check("cuMemcpyHtoD_v2", d.lib.cuMemcpyHtoD_v2(dev.ptr, d.ffi.from_buffer(_bytes(a)), a.nbytes))
        return dev

    def copy_to_host(self, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.empty(self.shape, self.dtype)
        if out.nbytes != self.nbytes or not out.flags.c_contiguous or not out.flags.writeable:
            raise ArgumentError(f"copy_to_host: a writable C-contiguous array of {self.nbytes} bytes is needed")
        d = driver()
        d.check("cuMemcpyDtoH_v2", d.lib.cuMemcpyDtoH_v2(d.ffi.from_buffer(_bytes(out), require_writable=True),
                                                         self.ptr, self.nbytes))
        return out

    def numpy(self) -> np.ndarray:
        return self.copy_to_host()

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None}

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if ptr:
            try:
                self._free(ptr)
            except Exception:   # the interpreter is shutting down
                pass


def _bytes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


def is_device_array(obj) -> bool:
    """Whether `obj`'s type offers `__cuda_array_interface__` (without evaluating it)."""
    return getattr(type(obj), "__cuda_array_interface__", None) is not None


def device_pointer(obj, name: str, dtype, shape, is_output: bool) -> int:
    """The device pointer of an argument, after checking its `__cuda_array_interface__`."""
    try:
        cai = getattr(obj, "__cuda_array_interface__", None)
    except Exception as e:          # torch has no typestr for bfloat16
        raise ArgumentError(f"argument {name}: its __cuda_array_interface__ failed ({e}); pass a bfloat16 "
                            "tensor as its 16-bit integer view (t.view(torch.int16))") from None
    if cai is None:
        raise ArgumentError(f"argument {name}: a device array (with __cuda_array_interface__) is needed, "
                            f"not {type(obj).__name__}")
    if tuple(cai["shape"]) != tuple(shape):
        raise ArgumentError(f"argument {name} has shape {tuple(cai['shape'])}, expected {tuple(shape)}")
    got, want = np.dtype(cai["typestr"]), np.dtype(dtype)
    # bfloat16 has no typestr of its own (torch exports none): its 16 bits come as another 2-byte type
    if got != want and not (want.name == "bfloat16" and got.itemsize == 2 and got.kind in "iuV"):
        raise ArgumentError(f"argument {name} has type {cai['typestr']}, expected {want.str}")
    strides = cai.get("strides")
    if strides is not None:
        want, acc = [], np.dtype(dtype).itemsize
        for s in reversed(shape):
            want.append(acc)
            acc *= s
        if tuple(st for st, n in zip(strides, shape) if n > 1) != \
                tuple(w for w, n in zip(reversed(want), shape) if n > 1):
            raise ArgumentError(f"argument {name} is not C-contiguous (strides {strides})")
    ptr, read_only = cai["data"]
    if is_output and read_only:
        raise ArgumentError(f"argument {name} is an output but its device memory is read-only")
    if ptr % 16:
        raise ArgumentError(f"argument {name}: device pointer {ptr:#x} is not 16-byte aligned")
    return int(ptr)
