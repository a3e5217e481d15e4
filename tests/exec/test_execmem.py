"""Executable memory: hand-assembled code runs, pages are W^X, unmapped on close and on GC."""
import gc
import platform
import threading
import time

import numpy as np
import pytest

from loopstack.errors import ArgumentError, LoopstackError
from loopstack.isa.execmem import ExecutableCode, array_pointer, ffi, pointer_array

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="runs x86-64 machine code")

RET_42 = bytes([
    0xB8, 0x2A, 0x00, 0x00, 0x00,   # mov eax, 42
    0xC3,                           # ret
])
ADD = bytes([
    0x48, 0x8D, 0x04, 0x37,         # lea rax, [rdi + rsi]
    0xC3,                           # ret
])
# void iota(void **args, int64_t start, int64_t end): ((int64_t *)args[0])[i] = i for i in [start, end)
IOTA = bytes([
    0x48, 0x8B, 0x07,               # 0:  mov rax, [rdi]          ; out = args[0]
    0x48, 0x39, 0xD6,               # 3:  cmp rsi, rdx
    0x7D, 0x09,                     # 6:  jge 17
    0x48, 0x89, 0x34, 0xF0,         # 8:  mov [rax + rsi*8], rsi
    0x48, 0xFF, 0xC6,               # 12: inc rsi
    0xEB, 0xF2,                     # 15: jmp 3
    0xC3,                           # 17: ret
])
# uint64_t spin(uint64_t n): count to n (n >= 1), return n
SPIN = bytes([
    0x31, 0xC0,                     # 0:  xor eax, eax
    0x48, 0xFF, 0xC0,               # 2:  inc rax
    0x48, 0x39, 0xF8,               # 5:  cmp rax, rdi
    0x75, 0xF8,                     # 8:  jne 2
    0xC3,                           # 10: ret
])
# uint64_t wait_flag(int64_t flag[2], uint64_t cap): set flag[1] = 1 ("running"), then
# poll flag[0]: return 1 once it is nonzero, 0 after cap polls
WAIT_FLAG = bytes([
    0x48, 0xC7, 0x47, 0x08, 0x01, 0x00, 0x00, 0x00,     # 0:  mov qword [rdi + 8], 1
    0x48, 0x8B, 0x07,                                   # 8:  mov rax, [rdi]
    0x48, 0x85, 0xC0,                                   # 11: test rax, rax
    0x75, 0x0A,                                         # 14: jne 26
    0xF3, 0x90,                                         # 16: pause
    0x48, 0xFF, 0xCE,                                   # 18: dec rsi
    0x75, 0xF1,                                         # 21: jne 8
    0x31, 0xC0,                                         # 23: xor eax, eax
    0xC3,                                               # 25: ret
    0xB8, 0x01, 0x00, 0x00, 0x00,                       # 26: mov eax, 1
    0xC3,                                               # 31: ret
])


def mappings_at(address):
    """Permissions of every /proc/self/maps entry that contains `address`."""
    perms = []
    with open("/proc/self/maps") as f:
        for line in f:
            span, perm = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= address < hi:
                perms.append(perm)
    return perms


def test_constant_and_add():
    code = ExecutableCode(RET_42, "int(*)(void)")
    assert code() == 42 and code.func() == 42
    assert code.code == RET_42 and code.size == len(RET_42) and code.address > 0
    add = ExecutableCode(ADD, "int64_t(*)(int64_t, int64_t)")
    assert add(2, 40) == 42
    assert add(-5, 3) == -2


def test_kernel_calling_convention_writes_through_args():
    out = np.full(10, -1, dtype=np.int64)
    args = pointer_array([out], [True], ["out"])
    kernel = ExecutableCode(IOTA)              # void(void **, int64_t, int64_t)
    kernel(args.cdata, 2, 7)
    assert out.tolist() == [-1, -1, 2, 3, 4, 5, 6, -1, -1, -1]


@pytest.mark.skipif(not platform.system() == "Linux", reason="reads /proc/self/maps")
def test_pages_are_read_execute_never_writable():
    code = ExecutableCode(RET_42, "int(*)(void)")
    start, end = code.region
    assert start <= code.address < end and (end - start) % 4096 == 0
    assert mappings_at(code.address) == ["r-xp"]
    with open("/proc/self/maps") as f:
        assert not any("rwx" in line.split()[1] for line in f if line.strip()
                       if int(line.split("-")[0], 16) < end and int(line.split()[0].split("-")[1], 16) > start)


def test_padding_is_int3():
    code = ExecutableCode(RET_42, "int(*)(void)")
    start, end = code.region
    page = bytes(ffi.buffer(ffi.cast("char *", start), end - start))
    assert page[:len(RET_42)] == RET_42
    assert set(page[len(RET_42):]) == {0xCC}


@pytest.mark.skipif(not platform.system() == "Linux", reason="reads /proc/self/maps")
def test_garbage_collection_unmaps():
    code = ExecutableCode(RET_42, "int(*)(void)")
    address = code.address
    assert code() == 42 and "r-xp" in mappings_at(address)
    del code
    gc.collect()
    assert not any("x" in p for p in mappings_at(address))


@pytest.mark.skipif(not platform.system() == "Linux", reason="reads /proc/self/maps")
def test_close_is_idempotent_and_call_after_close_raises():
    code = ExecutableCode(RET_42, "int(*)(void)")
    address = code.address
    code.close()
    code.close()
    assert code.closed
    assert not any("x" in p for p in mappings_at(address))
    with pytest.raises(LoopstackError, match="closed"):
        code()
    with pytest.raises(LoopstackError, match="closed"):
        code.func


@pytest.mark.skipif(not platform.system() == "Linux", reason="reads /proc/self/maps")
def test_held_code_stays_mapped_after_close_until_its_holder_goes():
    """A prepared call took the function pointer while the code was open: closing the code
    must not unmap what it jumps to while the call lives."""
    class Holder:
        pass

    code = ExecutableCode(RET_42, "int(*)(void)")
    address, func, holder = code.address, code.func, Holder()
    code.hold(holder)
    code.close()
    assert code.closed and "r-xp" in mappings_at(address)
    assert func() == 42
    del holder
    gc.collect()
    assert not any("x" in p for p in mappings_at(address))
    with pytest.raises(LoopstackError, match="closed"):
        code.hold(Holder())


def test_context_manager_closes():
    with ExecutableCode(RET_42, "int(*)(void)") as code:
        assert code() == 42
    assert code.closed


@pytest.mark.skipif(not platform.system() == "Linux", reason="reads /proc/self/maps")
def test_batch_shares_one_mapping_until_all_are_closed():
    codes = ExecutableCode.batch([RET_42, ADD, RET_42], "int64_t(*)(int64_t, int64_t)")
    assert len({c.region for c in codes}) == 1
    assert all(c.address % 64 == 0 for c in codes)
    assert [c(1, 2) for c in codes] == [42, 3, 42]
    assert mappings_at(codes[0].address) == ["r-xp"]
    codes[0].close()
    with pytest.raises(LoopstackError, match="closed"):
        codes[0](1, 2)
    assert codes[1](20, 22) == 42                 # its neighbours still run
    address = codes[1].address
    del codes
    gc.collect()
    assert not any("x" in p for p in mappings_at(address))


def test_bad_input():
    with pytest.raises(ArgumentError, match="empty"):
        ExecutableCode(b"")
    with pytest.raises(ArgumentError, match="signature"):
        ExecutableCode(RET_42, "not a type")
    with pytest.raises(ArgumentError, match="not a function pointer"):
        ExecutableCode(RET_42, "int *")


def test_array_pointer_is_zero_copy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    p = array_pointer(a, writable=True, name="A")
    assert int(ffi.cast("uintptr_t", p)) == a.ctypes.data
    args = pointer_array([a, a[1]], [False, False], ["A", "row"])
    assert int(ffi.cast("uintptr_t", args.cdata[1])) == a.ctypes.data + 16
    assert len(args) == 2


def test_array_pointer_rejects_what_a_kernel_cannot_use():
    a = np.zeros((4, 4), dtype=np.float32)
    with pytest.raises(ArgumentError, match=r"^B: array is not C-contiguous"):
        array_pointer(a[:, ::2], writable=False, name="B")
    with pytest.raises(ArgumentError, match=r"not C-contiguous"):
        array_pointer(a.T, writable=False)
    ro = np.zeros(4, dtype=np.float32)
    ro.setflags(write=False)
    array_pointer(ro, writable=False, name="C")   # reading a read-only array is fine
    with pytest.raises(ArgumentError, match=r"^C: array is read-only but the kernel writes to it"):
        array_pointer(ro, writable=True, name="C")
    with pytest.raises(ArgumentError, match=r"^x: expected a numpy.ndarray, got list"):
        array_pointer([1.0, 2.0], writable=False, name="x")
    with pytest.raises(ArgumentError, match=r"argument 1: array is read-only"):
        pointer_array([a, ro], [True, True])
    with pytest.raises(ArgumentError, match="writable flags"):
        pointer_array([a, ro], [True])


def test_threads_run_kernels_concurrently():
    spin = ExecutableCode(SPIN, "uint64_t(*)(uint64_t)")
    results = [None, None]

    def work(i):
        results[i] = spin(3_000_000 + i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [3_000_000, 3_000_001]


def test_calls_release_the_gil():
    # The kernel marks itself running, then waits for Python code to set a flag. Python sees
    # the mark and sets the flag only while the kernel runs; if the call held the GIL, Python
    # would get to run only after the kernel had given up (after `cap` polls) and returned 0.
    wait = ExecutableCode(WAIT_FLAG, "uint64_t(*)(int64_t *, uint64_t)")
    flag = np.zeros(2, dtype=np.int64)
    ptr = ffi.cast("int64_t *", array_pointer(flag, writable=True, name="flag"))
    result = []
    t = threading.Thread(target=lambda: result.append(wait(ptr, 1 << 27)))
    t.start()
    while flag[1] == 0 and t.is_alive():
        time.sleep(0)
    flag[0] = 1
    t.join()
    assert result == [1]
