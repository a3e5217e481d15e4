"""Executable memory: machine code bytes in, a callable function pointer out.

The life of a code buffer (W^X: a page is writable or executable, never both):

    mmap(RW, anonymous) --> copy the code, pad the page with INT3 --> mprotect(RX) --> call
                                                                            |
                          munmap  <--  close() or garbage collection  <-----+

libc's mmap / mprotect / munmap are called through cffi in ABI mode (`ffi.dlopen(None)`),
so no C compiler is involved. A call through a cffi function pointer releases the GIL,
so Python threads calling JIT'd code run in parallel.

Every kernel of the project has the signature

    void kernel(void **args, int64_t start, int64_t end)     # System V: rdi, rsi, rdx

`args` is built by `pointer_array` from numpy arrays without copying them.

Two ways to make code executable:
  * `ExecutableCode(code)` gives the code its own mapping (about 15 us; one mmap + one mprotect).
  * `ExecutableCode.batch([code, ...])` packs many kernels into one mapping, 64-byte aligned,
    filled entirely while RW and flipped to RX once (a few us per kernel). The mapping is
    unmapped when the last kernel in it is closed or collected. Packing kernels into pages
    that are already executable would need them writable again, so there is no growing
    arena shared across calls.
"""
from __future__ import annotations

import mmap
import platform
import sys
import threading
import weakref

import cffi
import numpy as np

from ..errors import ArgumentError, LoopstackError, UnsupportedError

__all__ = [
    "KERNEL_CDECL", "ExecutableCode", "PointerArray", "array_pointer", "ffi", "pointer_array",
]

# The one FFI instance the project shares: function-pointer types, buffers and libc.
ffi = cffi.FFI()
ffi.cdef("""
    void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);
    int mprotect(void *addr, size_t len, int prot);
    int munmap(void *addr, size_t length);
""")

KERNEL_CDECL = "void(*)(void **, int64_t, int64_t)"

PAGE_SIZE = mmap.PAGESIZE
PROT_READ, PROT_WRITE, PROT_EXEC = 0x1, 0x2, 0x4
MAP_PRIVATE = 0x02
# MAP_ANONYMOUS differs between Linux (0x20) and the BSDs / macOS (0x1000)
MAP_ANONYMOUS = 0x20 if sys.platform.startswith("linux") else 0x1000
MAP_FAILED = 2**64 - 1 if sys.maxsize > 2**32 else 2**32 - 1

INT3 = 0xCC                     # x86 breakpoint: stray execution into the padding traps at once
BATCH_ALIGN = 64                # one cache line per kernel start inside a batch

_IS_X86 = platform.machine().lower() in ("x86_64", "amd64")
_libc = None
_clear_cache = None


def _lib():
    """libc, opened on first use (opening it at import would tax every `import loopstack`)."""
    global _libc
    if _libc is None:
        _libc = ffi.dlopen(None)
    return _libc


def _flush_icache(address: int, size: int) -> None:
    """AArch64 does not keep the instruction cache coherent with stores: flush after writing code.

    x86 does (SDM vol. 3, 11.6 "self-modifying code"), so there this is a no-op.
    """
    global _clear_cache
    if _IS_X86:
        return
    if _clear_cache is None:
        gcc = cffi.FFI()
        gcc.cdef("void __clear_cache(void *begin, void *end);")
        try:
            _clear_cache = (gcc, gcc.dlopen("libgcc_s.so.1"))
        except OSError as exc:
            raise UnsupportedError(
                "cannot flush the instruction cache on this machine: libgcc_s.so.1 not found") from exc
    gcc, lib = _clear_cache
    lib.__clear_cache(gcc.cast("void *", address), gcc.cast("void *", address + size))


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


class _Mapping:
    """One anonymous mapping, shared by `users` kernels; unmapped when the last one releases it."""

    __slots__ = ("address", "size", "_users", "_lock")

    def __init__(self, image: bytes):
        size = _round_up(max(len(image), 1), PAGE_SIZE)
        lib = _lib()
        ptr = lib.mmap(ffi.NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        address = int(ffi.cast("uintptr_t", ptr))
        if address == MAP_FAILED:
            raise LoopstackError(f"mmap of {size} bytes for code failed (errno {ffi.errno})")
        try:
            buf = ffi.buffer(ptr, size)
            buf[0:len(image)] = image
            if len(image) < size:   # INT3 up to the end of the page
                buf[len(image):size] = bytes([INT3]) * (size - len(image))
            # W -> X: from here on the pages are read + execute only
            if lib.mprotect(ptr, size, PROT_READ | PROT_EXEC) != 0:
                raise LoopstackError(f"mprotect(PROT_READ|PROT_EXEC) failed (errno {ffi.errno})")
            _flush_icache(address, size)
        except BaseException:
            lib.munmap(ptr, size)
            raise
        self.address = address
        self.size = size
        self._users = 0
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        """Called once per user (from close() or a finalizer); the last one unmaps."""
        with self._lock:
            self._users -= 1
            if self._users != 0 or self.address == 0:
                return
            address, self.address = self.address, 0
        if _lib().munmap(ffi.cast("void *", address), self.size) != 0:
            raise LoopstackError(f"munmap of code at {address:#x} failed (errno {ffi.errno})")


def _check_cdecl(cdecl: str):
    if not isinstance(cdecl, str) or not cdecl.strip():
        raise ArgumentError(f"bad function signature {cdecl!r}: expected a C type string such as {KERNEL_CDECL!r}")
    try:
        ctype = ffi.typeof(cdecl)
    except (cffi.CDefError, cffi.FFIError, TypeError) as exc:
        raise ArgumentError(f"bad function signature {cdecl!r}: {exc}") from exc
    if ctype.kind != "function" and not (ctype.kind == "pointer" and ctype.item.kind == "function"):
        raise ArgumentError(f"signature {cdecl!r} is not a function pointer type such as {KERNEL_CDECL!r}")
    return ctype


class ExecutableCode:
    """Machine code mapped read + execute, callable through `.func` or by calling the object.

    `.func` is a cffi function pointer of type `cdecl`: valid while this object is alive and
    not closed (keep the ExecutableCode, not only `.func`). Calling the object itself checks
    that it is still open. The memory is unmapped by `close()` (idempotent) or when the
    object is garbage-collected.
    """

    __slots__ = ("_code", "_cdecl", "_func", "_address", "_mapping", "_finalizer", "__weakref__")

    def __init__(self, code: bytes, cdecl: str = KERNEL_CDECL):
        code = bytes(code)
        if not code:
            raise ArgumentError("cannot make empty code executable")
        ctype = _check_cdecl(cdecl)
        mapping = _Mapping(code)
        self._attach(code, cdecl, ctype, mapping, mapping.address)

    def _attach(self, code, cdecl, ctype, mapping: _Mapping, address: int) -> None:
        self._code = code
        self._cdecl = cdecl
        self._address = address
        self._func = ffi.cast(ctype, address)
        self._mapping = mapping
        mapping.acquire()
        self._finalizer = weakref.finalize(self, mapping.release)
        # At interpreter exit another thread may still be running this code; the OS frees it then.
        self._finalizer.atexit = False

    @classmethod
    def batch(cls, codes, cdecl: str = KERNEL_CDECL) -> list["ExecutableCode"]:
        """Make many kernels executable with one mmap + one mprotect; they share the mapping.

        Each kernel starts on a 64-byte boundary; the gaps are INT3. Closing one kernel
        makes only that one uncallable; the mapping goes when all of them are closed or collected.
        """
        codes = [bytes(c) for c in codes]
        if not codes:
            return []
        if any(not c for c in codes):
            raise ArgumentError("cannot make empty code executable")
        ctype = _check_cdecl(cdecl)
        image = bytearray()
        offsets = []
        for c in codes:
            pad = _round_up(len(image), BATCH_ALIGN) - len(image)
            image += bytes([INT3]) * pad
            offsets.append(len(image))
            image += c
        mapping = _Mapping(bytes(image))
        out = []
        for c, off in zip(codes, offsets):
            obj = cls.__new__(cls)
            obj._attach(c, cdecl, ctype, mapping, mapping.address + off)
            out.append(obj)
        return out

    # -- properties -------------------------------------------------------------------------
    @property
    def func(self):
        if not self._finalizer.alive:
            raise LoopstackError("this ExecutableCode is closed; its code is unmapped")
        return self._func

    @property
    def address(self) -> int:
        """Address of the first instruction."""
        return self._address

    @property
    def size(self) -> int:
        """Length of the code in bytes (without the INT3 padding)."""
        return len(self._code)

    @property
    def code(self) -> bytes:
        return self._code

    @property
    def cdecl(self) -> str:
        return self._cdecl

    @property
    def region(self) -> tuple[int, int]:
        """(start, end) of the whole page-aligned mapping that holds this code."""
        return (self._mapping.address, self._mapping.address + self._mapping.size)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __call__(self, *args):
        if not self._finalizer.alive:
            raise LoopstackError("this ExecutableCode is closed; its code is unmapped")
        return self._func(*args)

    def close(self) -> None:
        """Unmap now (for a batch: once every kernel of the batch is closed). Idempotent."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"at {self._address:#x}"
        return f"<ExecutableCode {len(self._code)} bytes {state} {self._cdecl}>"


# -- numpy arrays as kernel arguments ---------------------------------------------------------

def array_pointer(arr, *, writable: bool, name: str = "array"):
    """A zero-copy cffi pointer to the data of `arr`, which the returned cdata keeps alive.

    Rejects what a kernel could not use safely: a non-ndarray, a non C-contiguous array (a
    strided view's base pointer would make the kernel read the wrong elements), and a
    read-only array where the kernel writes.
    """
    if not isinstance(arr, np.ndarray):
        raise ArgumentError(f"{name}: expected a numpy.ndarray, got {type(arr).__name__}")
    if not arr.flags.c_contiguous:
        raise ArgumentError(
            f"{name}: array is not C-contiguous (shape {arr.shape}, strides {arr.strides}); "
            f"pass numpy.ascontiguousarray({name})")
    if writable and not arr.flags.writeable:
        raise ArgumentError(f"{name}: array is read-only but the kernel writes to it")
    if arr.dtype.hasobject:
        raise ArgumentError(f"{name}: arrays of Python objects (dtype {arr.dtype}) cannot be passed to a kernel")
    return ffi.from_buffer("char[]", arr, require_writable=writable)


class PointerArray:
    """The `void **args` of a kernel call, holding the arrays' buffers alive while it lives.

    Pass `.cdata` as the first argument of a kernel.
    """

    __slots__ = ("cdata", "buffers")

    def __init__(self, cdata, buffers):
        self.cdata = cdata
        self.buffers = buffers

    def __len__(self) -> int:
        return len(self.buffers)


def pointer_array(arrays, writable_flags, names=None) -> PointerArray:
    """Build `void *args[]` from numpy arrays (zero copy), checking each like `array_pointer`."""
    arrays = list(arrays)
    writable_flags = list(writable_flags)
    if len(writable_flags) != len(arrays):
        raise ArgumentError(f"{len(arrays)} arrays but {len(writable_flags)} writable flags")
    names = list(names) if names is not None else [f"argument {i}" for i in range(len(arrays))]
    if len(names) != len(arrays):
        raise ArgumentError(f"{len(arrays)} arrays but {len(names)} names")
    buffers = [array_pointer(a, writable=w, name=n) for a, w, n in zip(arrays, writable_flags, names)]
    cdata = ffi.new("void *[]", max(len(buffers), 1))
    for i, b in enumerate(buffers):
        cdata[i] = b
    return PointerArray(cdata, buffers)
