"""Backends: compile a loop tree into a Kernel.

    compile(tree, target=None, unroll_limit=None) -> Kernel

`target` is None (the best target of this CPU), a target name ("avx2", "avx512", "neon",
"neon_fp16"), a `loopstack.isa.target.Target`, "interp" for the reference interpreter, or an
NVIDIA GPU ("sm_80", "sm_90", or a `loopstack.backend.ptx.GpuTarget` carrying the tensor-core
knobs). Code for another architecture compiles on any host (`.code`, `.asm()`, `.flops`);
calling it where it cannot run raises UnsupportedError. Every
Kernel is called with numpy arrays in `tree.arguments` order (inputs, then outputs);
outputs are written in place. The tree's accesses are verified to be in bounds before
anything is compiled.
"""
from __future__ import annotations

import gc
import sys


def compile(tree, target=None, unroll_limit=None):  # noqa: A001 - the natural name
    from ..looptree.verify import verify

    verify(tree)
    if target == "interp":
        from .interp import InterpKernel

        return InterpKernel(tree)
    if is_gpu_target(target):
        from .ptx import compile_gpu

        return compile_gpu(tree, target)
    _refuse_gpu_bindings(tree)
    from .native import compile_native

    # A compile allocates tens of thousands of small, acyclic objects (operands, addresses,
    # keys); the cycle collector's passes over them were up to a third of the compile time.
    # Whatever cycles a compile leaves are collected after it.
    paused = gc.isenabled()
    gc.disable()
    try:
        return compile_native(tree, target=target, unroll_limit=unroll_limit)
    finally:
        if paused:
            gc.enable()


def is_gpu_target(target) -> bool:
    """ptx.is_gpu_target without importing the GPU backend for a CPU compile (a GpuTarget object
    exists only once that module is loaded)."""
    if isinstance(target, str):
        return target.startswith("sm_")
    ptx = sys.modules.get(__name__ + ".ptx")
    return ptx is not None and ptx.is_gpu_target(target)


def _refuse_gpu_bindings(tree) -> None:
    """A loop bound to a GPU's CTAs or warps has no meaning on a CPU: say so rather than drop it."""
    from ..errors import UnsupportedError
    from ..looptree.ir import GPU_BINDINGS, Loop

    for _, node in tree.walk():
        if isinstance(node, Loop) and node.annotations and not node.annotations.isdisjoint(GPU_BINDINGS):
            kind = next(a for a in GPU_BINDINGS if a in node.annotations)
            raise UnsupportedError(f"loop {node.var} over {node.dim} is bound to a GPU's {kind}s: compile it "
                                   "for sm_80 or sm_90, or clear the annotation for a CPU")
