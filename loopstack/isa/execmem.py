"""Executable memory: machine code bytes in, a callable function pointer out.

The life of a code buffer (W^X: a page is writable or executable, never both):

    mmap(RW, anonymous) --> copy the code, pad the page with traps --> mprotect(RX) --> call
                                                                            |
                          munmap  <--  close() or garbage collection  <-----+

The trap is INT3 on x86-64 and `brk #0` on AArch64. AArch64 does not keep the instruction
cache coherent with data stores, so there the written range is also cleaned to the point of
unification and invalidated before the first call: libgcc's `__clear_cache`, or, where libgcc
is missing, a JIT'd `dc cvau / dsb ish / ic ivau / dsb ish / isb` loop (`icache_flush_code`).

macOS on arm64 forbids RW -> RX flips of anonymous memory: code pages are mapped once RWX with
MAP_JIT and each thread toggles them between writable and executable with
`pthread_jit_write_protect_np`, then `sys_icache_invalidate` flushes. That path
(`_DarwinJitMapper`) is written from Apple's documentation and unit-tested for its call
sequence with a fake libc; no Mac is at hand to run it.

libc's mmap / mprotect / munmap are called through cffi in ABI mode, so no C compiler is
involved. A call through a cffi function pointer releases the GIL, so Python threads calling
JIT'd code run in parallel. The ffi is that of cffi's C core (`_cffi_backend.FFI`, the one
cffi's out-of-line modules use), which parses the C types it is given itself: the pure-Python
`cffi.FFI` would import pycparser and parse a cdef, about 10 ms of a process's first compile.
So there is no cdef: each libc function is looked up with its own C type (`_LIBC`).

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

import _cffi_backend
import numpy as np

from ..errors import ArgumentError, LoopstackError

__all__ = [
    "KERNEL_CDECL", "ExecutableCode", "PointerArray", "array_pointer", "ffi", "pointer_array",
]

# The one FFI instance the project shares: function-pointer types, buffers and libc.
ffi = _cffi_backend.FFI()

# The C functions called, by library, with their types (each looked up on first use)
_LIBC = {
    "mmap": "void *(*)(void *, size_t, int, int, int, long)",
    "mprotect": "int(*)(void *, size_t, int)",
    "munmap": "int(*)(void *, size_t)",
    "pthread_jit_write_protect_np": "void(*)(int)",                  # macOS arm64
    "sys_icache_invalidate": "void(*)(void *, size_t)",              # macOS
    "getauxval": "unsigned long(*)(unsigned long)",                  # Linux: AT_HWCAP feature bits
    "sysctlbyname": "int(*)(const char *, void *, size_t *, void *, size_t)",
}
_LIBGCC = {"__clear_cache": "void(*)(void *, void *)"}              # AArch64


class _Library:
    """A shared library's functions (of `signatures`, name -> C function pointer type), each
    loaded on first access. Raises OSError if the library is missing, AttributeError for a
    function it lacks."""

    def __init__(self, name: str | None, signatures: dict[str, str]):
        self._handle = _cffi_backend.load_library(name)
        self._signatures = signatures

    def __getattr__(self, name: str):
        signature = self.__dict__.get("_signatures", {}).get(name)
        if signature is None:
            raise AttributeError(f"no C type is declared for {name!r}")
        ctype = ffi.typeof(signature)
        func = self._handle.load_function(ctype, name)
        setattr(self, name, func)
        return func


KERNEL_CDECL = "void(*)(void **, int64_t, int64_t)"

PAGE_SIZE = mmap.PAGESIZE
PROT_READ, PROT_WRITE, PROT_EXEC = 0x1, 0x2, 0x4
MAP_PRIVATE = 0x02
# MAP_ANONYMOUS differs between Linux (0x20) and the BSDs / macOS (0x1000)
MAP_ANONYMOUS = 0x20 if sys.platform.startswith("linux") else 0x1000
MAP_FAILED = 2**64 - 1 if sys.maxsize > 2**32 else 2**32 - 1

INT3 = 0xCC                     # x86 breakpoint: stray execution into the padding traps at once
BRK0 = bytes.fromhex("000020d4")  # AArch64 `brk #0`, little-endian
BATCH_ALIGN = 64                # one cache line per kernel start inside a batch
MAP_JIT = 0x800                 # macOS: a mapping whose pages a thread may flip between W and X

_MACHINE = platform.machine().lower()
_IS_X86 = _MACHINE in ("x86_64", "amd64")
_IS_ARM64 = _MACHINE in ("aarch64", "arm64")
_IS_DARWIN = sys.platform == "darwin"
_libc = None
_clear_cache = None


def _trap_fill(n: int) -> bytes:
    """n bytes of padding that trap if executed: INT3s, or brk #0 words on AArch64."""
    if _IS_ARM64:
        return (BRK0 * (n // 4 + 1))[:n]
    return bytes([INT3]) * n


def _lib():
    """libc, opened on first use (opening it at import would tax every `import loopstack`)."""
    global _libc
    if _libc is None:
        _libc = _Library(None, _LIBC)
    return _libc


def _flush_icache(address: int, size: int) -> None:
    """AArch64 does not keep the instruction cache coherent with stores: flush after writing code.

    x86 does (SDM vol. 3, 11.6 "self-modifying code"), so there this is a no-op.
    """
    if _IS_X86 or size <= 0:
        return
    _icache_flusher()(ffi.cast("void *", address), ffi.cast("void *", address + size))


def _icache_flusher():
    """`void flush(void *begin, void *end)`: libgcc's __clear_cache, else our JIT'd loop."""
    global _clear_cache
    if _clear_cache is None:
        try:
            gcc = _Library("libgcc_s.so.1", _LIBGCC)
            _clear_cache = (gcc, gcc.__clear_cache)
        except (OSError, AttributeError):
            # A page mapped executable for the first time has its instruction cache synchronised
            # by the kernel (Linux arm64 __sync_icache_dcache when the exec pte is set), so the
            # flush loop itself is mapped without a flush (the no-op placeholder below).
            _clear_cache = (None, lambda begin, end: None)
            try:
                stub = ExecutableCode(icache_flush_code(), "void(*)(void *, void *)")
            except BaseException:
                _clear_cache = None
                raise
            _clear_cache = (stub, stub.func)
    return _clear_cache[1]


def icache_flush_code() -> bytes:
    """AArch64 `void flush(void *begin, void *end)`: clean D-cache lines to the point of
    unification, then invalidate I-cache lines, over [begin, end) (Arm ARM D7.5.9.2)."""
    from .aarch64.assembler import Assembler
    from .aarch64.operands import X
    asm = Assembler()
    asm.mrs(X(3), "ctr_el0")
    asm.movz(X(5), 4)
    for line, shift in ((X(4), 16), (X(6), 0)):       # DminLine at 19:16, IminLine at 3:0 (log2 words)
        asm.lsl(line, X(3), 60 - shift)
        asm.lsr(line, line, 60)
        asm.lsl(line, X(5), line)                     # line bytes = 4 << log2 words
    for line, op, operation in ((X(4), "dc", "cvau"), (X(6), "ic", "ivau")):
        asm.neg(X(8), line)                           # -line = ~(line - 1): the alignment mask
        asm.emit("and", X(7), X(0), X(8))
        top = asm.label()
        asm.bind(top)
        asm.emit(op, operation, X(7))
        asm.add(X(7), X(7), line)
        asm.cmp(X(7), X(1))
        asm.emit("b.lo", top)
        asm.dsb("ish")
    asm.isb()
    asm.ret()
    return asm.bytes()


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def _mmap(lib, size: int, prot: int, flags: int):
    ptr = lib.mmap(ffi.NULL, size, prot, flags, -1, 0)
    if int(ffi.cast("uintptr_t", ptr)) == MAP_FAILED:
        raise LoopstackError(f"mmap of {size} bytes for code failed (errno {ffi.errno})")
    return ptr


def _fill(ptr, size: int, image: bytes) -> None:
    buf = ffi.buffer(ptr, size)
    buf[0:len(image)] = image
    if len(image) < size:       # traps up to the end of the page
        buf[len(image):size] = _trap_fill(size - len(image))


def map_rw_then_rx(lib, image: bytes) -> tuple[int, int]:
    """Linux and the BSDs: mmap RW, write, mprotect RX, flush the written range. (address, size)."""
    size = _round_up(max(len(image), 1), PAGE_SIZE)
    ptr = _mmap(lib, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS)
    try:
        _fill(ptr, size, image)
        # W -> X: from here on the pages are read + execute only
        if lib.mprotect(ptr, size, PROT_READ | PROT_EXEC) != 0:
            raise LoopstackError(f"mprotect(PROT_READ|PROT_EXEC) failed (errno {ffi.errno})")
        _flush_icache(int(ffi.cast("uintptr_t", ptr)), len(image))
    except BaseException:
        lib.munmap(ptr, size)
        raise
    return int(ffi.cast("uintptr_t", ptr)), size


def map_darwin_jit(lib, image: bytes) -> tuple[int, int]:
    """macOS arm64: a MAP_JIT mapping, writable for this thread only between the two
    pthread_jit_write_protect_np calls, then sys_icache_invalidate over the written range."""
    size = _round_up(max(len(image), 1), PAGE_SIZE)
    ptr = _mmap(lib, size, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS | MAP_JIT)
    try:
        lib.pthread_jit_write_protect_np(0)       # this thread: the JIT pages writable, not executable
        try:
            _fill(ptr, size, image)
        finally:
            lib.pthread_jit_write_protect_np(1)   # back to executable, whatever happened
        lib.sys_icache_invalidate(ptr, len(image))
    except BaseException:
        lib.munmap(ptr, size)
        raise
    return int(ffi.cast("uintptr_t", ptr)), size


class _Mapping:
    """One anonymous mapping, shared by `users` kernels; unmapped when the last one releases it."""

    __slots__ = ("address", "size", "_users", "_lock")

    def __init__(self, image: bytes):
        mapper = map_darwin_jit if (_IS_DARWIN and _IS_ARM64) else map_rw_then_rx
        self.address, self.size = mapper(_lib(), image)
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
    except (ffi.error, TypeError) as exc:
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

        Each kernel starts on a 64-byte boundary; the gaps are traps. Closing one kernel
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
            image += _trap_fill(pad)
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
        """Length of the code in bytes (without the trap padding)."""
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

    def hold(self, owner) -> None:
        """Keep the code mapped while `owner` lives, even after close(): `owner` calls the
        code through a pointer taken while it was open (a prepared call), which would
        otherwise jump into unmapped memory. Raises if it is closed already."""
        if not self._finalizer.alive:
            raise LoopstackError("this ExecutableCode is closed; its code is unmapped")
        self._mapping.acquire()
        weakref.finalize(owner, self._mapping.release).atexit = False

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
