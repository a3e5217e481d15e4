"""One native call for a run of prepared kernel calls (a compiled model's layers, in order).

A compiled model runs a kernel per layer, and each layer's prepared call is a Python call into
cffi that passes the layer's pointer block and iteration count to its code: the interpreter's
loop, the call and its return between every two layers, more than the smallest layers compute
(MobileNetV3-Small, 63 layers, one thread, AVX-512 Xeon under load, the same model chained and
not in alternating calls: 1.50 -> 1.41 ms and 1.47 -> 1.38 ms median). Here the calls are
machine code instead: for each step of each call,

    mov rdi, <pointer block>;  xor esi, esi;  mov rdx, <iterations>;  mov rax, <code>;  call rax

between a push and a pop of rbx that keep the stack 16-byte aligned at every call (System V:
the step's code may save and restore any callee-saved register itself). Only serial steps are
chained, on x86-64: a step that runs on a thread team keeps its Python call, as does a layer
computed by numpy.
"""
from __future__ import annotations

__all__ = ["chain", "chainable"]


def chainable(call) -> bool:
    """Whether a prepared call (NativeKernel.bind) can run inside a chain: it exposes its serial
    steps as (code address, pointer block address, iterations) and runs on this host."""
    from ..isa.target import host_arch

    return getattr(call, "serial_steps", None) is not None and host_arch() == "x86_64"


def chain(calls):
    """A function of no arguments that runs the chainable `calls` in order, in one native call
    (it keeps them, and so the code and pointer blocks it jumps to, alive)."""
    from ..isa.execmem import ExecutableCode
    from ..isa.x86.assembler import Assembler
    from ..isa.x86.operands import esi, rax, rbx, rdi, rdx

    asm = Assembler()
    asm.emit("push", rbx)
    for call in calls:
        for code, block, n in call.serial_steps:
            asm.emit("mov", rdi, block)
            asm.emit("xor", esi, esi)
            asm.emit("mov", rdx, n)
            asm.emit("mov", rax, code)
            asm.emit("call", rax)
    asm.emit("pop", rbx)
    asm.emit("ret")
    code = ExecutableCode(asm.bytes(), "void(*)(void)")
    func = code.func

    def run() -> None:
        func()

    run.keep = (code, tuple(calls))
    return run
