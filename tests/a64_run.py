"""Run a cross-compiled AArch64 kernel: natively on an aarch64 host (the normal call path), else
every segment of it in unicorn (CPU model MAX), with its arguments and temps mapped into the
emulator's memory behind a pointer block, as the kernel's own call builds it.

    run_kernel(kernel, arrays)       outputs written in place, as kernel(*arrays) would
    run_kernel(kernel, arrays, parts=3)   a parallel segment runs as 3 calls on [start, end) parts

After each segment the callee-saved registers (x19-x28, d8-d15) and sp must be as they were.
"""
from __future__ import annotations

import numpy as np

from loopstack.backend.native import _iterations, runs_here

CODE, BLOCK, STACK_TOP, DATA = 0x100000, 0x800000, 0x7F0000, 0x1000000
PAGE = 0x1000


def _page(n: int) -> int:
    return (n + PAGE - 1) & ~(PAGE - 1)


def run_kernel(kernel, arrays, parts: int = 1) -> None:
    if runs_here(kernel.target):
        kernel(*arrays)
        return
    kernel.check_arguments(arrays)
    from unicorn import UC_ARCH_ARM64, UC_MODE_ARM, Uc
    from unicorn import arm64_const as A

    mu = Uc(UC_ARCH_ARM64, UC_MODE_ARM)
    mu.ctl_set_cpu_model(A.UC_CPU_ARM64_MAX)
    temps = kernel._temps(0)
    bufs = [np.ascontiguousarray(a) for a in arrays] + [temps[t.name] for t in kernel.lowered.temps]
    addrs, at = [], DATA
    for b in bufs:
        size = _page(max(b.nbytes, 1)) + PAGE          # a page of slack: reads past the end fault
        mu.mem_map(at, size)
        mu.mem_write(at, b.tobytes())
        addrs.append(at)
        at += size + 0x10000                           # and an unmapped gap between buffers
    mu.mem_map(BLOCK, PAGE)
    mu.mem_write(BLOCK, np.array(addrs, np.uint64).tobytes())
    mu.mem_map(STACK_TOP - 0x100000, 0x100000 + PAGE)
    # every segment at its own address: unicorn keeps translated code by address
    starts, at = [], CODE
    for c, _, _ in kernel._segments:
        starts.append(at)
        at += _page(len(c.code) + 4)
    mu.mem_map(CODE, at - CODE)
    saved_x = {r: getattr(A, f"UC_ARM64_REG_X{r}") for r in range(19, 29)}
    saved_d = {r: getattr(A, f"UC_ARM64_REG_D{r}") for r in range(8, 16)}
    steps = kernel._once + kernel._steps
    calls = []
    for (code, _, node), (_, n, parallel), start in zip(kernel._segments, steps, starts):
        k = parts if parallel else 1
        calls += [(code, start, n * i // k, n * (i + 1) // k) for i in range(k)]
    for code, start, first, last in calls:
        end = start + _page(len(code.code) + 4) - 4
        mu.mem_write(start, code.code)
        for r, reg in saved_x.items():
            mu.reg_write(reg, 0x1000 + r)
        for r, reg in saved_d.items():
            mu.reg_write(reg, 0x2000 + r)
        mu.reg_write(A.UC_ARM64_REG_X0, BLOCK)
        mu.reg_write(A.UC_ARM64_REG_X1, first)
        mu.reg_write(A.UC_ARM64_REG_X2, last)
        mu.reg_write(A.UC_ARM64_REG_SP, STACK_TOP)
        mu.reg_write(A.UC_ARM64_REG_X30, end)          # ret lands on the segment's last word
        mu.emu_start(start, end)
        for r, reg in saved_x.items():
            assert mu.reg_read(reg) == 0x1000 + r, f"x{r} not preserved"
        for r, reg in saved_d.items():
            assert mu.reg_read(reg) == 0x2000 + r, f"d{r} not preserved"
        assert mu.reg_read(A.UC_ARM64_REG_SP) == STACK_TOP, "sp not preserved"
    for a, b, addr, param in zip(arrays, bufs, addrs, kernel.tree.arguments):
        if param.kind == "output":
            a[...] = np.frombuffer(bytes(mu.mem_read(addr, b.nbytes)), b.dtype).reshape(b.shape)
