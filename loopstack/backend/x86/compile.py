"""The x86 names of the native compile pipeline (backend/native.py), kept for callers."""
from __future__ import annotations

from ...isa.target import get_target
from ..native import NativeKernel, check_parallel, compile_native, emit_native

X86Kernel = NativeKernel

__all__ = ["X86Kernel", "check_parallel", "compile_x86", "emit_x86"]


def compile_x86(tree, target=None, unroll_limit: int | None = None) -> NativeKernel:
    return compile_native(tree, get_target(target), unroll_limit)


def emit_x86(tree, target, unroll_limit: int | None = None):
    return emit_native(tree, target, unroll_limit)
