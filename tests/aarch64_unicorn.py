"""Execution oracle for AArch64 code on any host: unicorn (QEMU's CPU core), CPU model MAX.

    x0 = run_a64(code, [a, b, 16])            # a, b numpy arrays (written back in place), 16 an int
    x0 = run_a64(code, [[a, b, c], 0, n])     # a list of arrays: x0 points at an array of pointers
                                              # (the project's `void kernel(void **args, start, end)`)

Arguments go in x0..x7 per AAPCS64; the code runs from its first byte until it returns to the
link register. Callee-saved state (x19-x28, the low halves d8-d15 of v8-v15, sp) is filled with
known values beforehand and must come back unchanged: a kernel that clobbers it fails here as it
would crash its caller on hardware. Only the MAX model executes fp16 arithmetic and sdot (the
default Cortex-A72 model faults on them).
"""
from __future__ import annotations

import numpy as np
from unicorn import UC_ARCH_ARM64, UC_MODE_ARM, Uc, UcError
from unicorn import arm64_const as A

__all__ = ["A64Fault", "run_a64"]

CODE_BASE = 0x0010_0000
DATA_BASE = 0x1000_0000
STACK_BASE = 0x7000_0000
STACK_SIZE = 1 << 20
RETURN_ADDRESS = 0x0F00_0000          # a mapped page the code returns to; emulation stops there
PAGE = 0x1000
_CALLEE_SAVED_X = [getattr(A, f"UC_ARM64_REG_X{i}") for i in range(19, 29)]
_CALLEE_SAVED_D = [getattr(A, f"UC_ARM64_REG_D{i}") for i in range(8, 16)]


class A64Fault(AssertionError):
    """The code faulted, ran away, or broke the calling convention."""


def _round_up(n: int, m: int = PAGE) -> int:
    return (n + m - 1) // m * m


def run_a64(code: bytes, args, *, max_instructions: int = 50_000_000) -> int:
    if len(args) > 8:
        raise ValueError("AAPCS64 passes at most 8 integer/pointer arguments in registers")
    uc = Uc(UC_ARCH_ARM64, UC_MODE_ARM)
    uc.ctl_set_cpu_model(A.UC_CPU_ARM64_MAX)
    uc.reg_write(A.UC_ARM64_REG_CPACR_EL1, 0x3 << 20)        # FP/SIMD on at EL0/EL1
    uc.mem_map(CODE_BASE, _round_up(max(len(code), 1)))
    uc.mem_write(CODE_BASE, bytes(code))
    uc.mem_map(RETURN_ADDRESS, PAGE)
    uc.mem_map(STACK_BASE, STACK_SIZE)

    arrays: list[tuple[int, np.ndarray]] = []
    cursor = DATA_BASE

    def place(a: np.ndarray) -> int:
        nonlocal cursor
        if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
            raise ValueError("arrays passed to run_a64 must be C-contiguous numpy arrays")
        size = _round_up(max(a.nbytes, 1))
        uc.mem_map(cursor, size + PAGE)        # a page of slack: a stray read past the end is caught below
        uc.mem_write(cursor, a.tobytes())
        address = cursor
        arrays.append((address, a))
        cursor += size + 2 * PAGE              # and an unmapped page between arrays
        return address

    values = []
    for arg in args:
        if isinstance(arg, np.ndarray):
            values.append(place(arg))
        elif isinstance(arg, (list, tuple)):
            pointers = np.array([place(a) for a in arg], dtype=np.uint64)
            values.append(place(pointers))
            arrays.pop()                       # the pointer array is not copied back
        else:
            values.append(int(arg) & (2**64 - 1))
    for i, v in enumerate(values):
        uc.reg_write(getattr(A, f"UC_ARM64_REG_X{i}"), v)

    sp = STACK_BASE + STACK_SIZE - 256
    uc.reg_write(A.UC_ARM64_REG_SP, sp)
    uc.reg_write(A.UC_ARM64_REG_LR, RETURN_ADDRESS)
    saved_x = [0x1919_0000_0000_0000 + i * 0x1111 for i in range(len(_CALLEE_SAVED_X))]
    saved_d = [0x3FF0_0000_0000_0000 + i for i in range(len(_CALLEE_SAVED_D))]
    for reg, v in zip(_CALLEE_SAVED_X, saved_x):
        uc.reg_write(reg, v)
    for reg, v in zip(_CALLEE_SAVED_D, saved_d):
        uc.reg_write(reg, v)

    try:
        uc.emu_start(CODE_BASE, RETURN_ADDRESS, count=max_instructions)
    except UcError as exc:
        pc = uc.reg_read(A.UC_ARM64_REG_PC)
        raise A64Fault(f"unicorn: {exc} at pc {pc:#x} (code offset {pc - CODE_BASE:#x})") from None
    pc = uc.reg_read(A.UC_ARM64_REG_PC)
    if pc != RETURN_ADDRESS:
        raise A64Fault(f"stopped at pc {pc:#x} after {max_instructions} instructions without returning")

    broken = [f"x{19 + i}" for i, (reg, v) in enumerate(zip(_CALLEE_SAVED_X, saved_x)) if uc.reg_read(reg) != v]
    broken += [f"d{8 + i}" for i, (reg, v) in enumerate(zip(_CALLEE_SAVED_D, saved_d)) if uc.reg_read(reg) != v]
    if uc.reg_read(A.UC_ARM64_REG_SP) != sp:
        broken.append("sp")
    if broken:
        raise A64Fault(f"callee-saved registers not preserved: {', '.join(broken)}")

    for address, a in arrays:
        if a.flags.writeable:
            a[...] = np.frombuffer(bytes(uc.mem_read(address, a.nbytes)), dtype=a.dtype).reshape(a.shape)
    return uc.reg_read(A.UC_ARM64_REG_X0)
