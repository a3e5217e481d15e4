"""compile_x86: a verified loop tree in, an x86-64 Kernel out.

    split_padded_nests -> stage_padded_reads -> hoist_constant_packs -> split_init_post
    -> check_parallel -> one function per top-level node

Each top-level node becomes its own machine-code function `f(void **args, i64 start,
i64 end)`; the Kernel calls them in order, except that the leading nests which only pack
constant inputs run when the kernel is given arrays it did not see in the call before. A top-level loop annotated "parallel" is
split into chunks of iterations [start, end) run on a thread pool: cffi releases the
GIL during the call, and every thread gets its own copy of the intermediates that live
only inside that loop.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from operator import is_

import numpy as np

from ...errors import LoopstackError, ScheduleError, UnsupportedError
from ...isa.execmem import ExecutableCode, pointer_array
from ...isa.target import get_target
from ...isa.x86.assembler import Assembler
from ...looptree.ir import Loop, LoopTree, loop_var, statements
from ..kernel_base import KernelBase, allocate_storage
from ..constants import hoist_constant_packs
from ..rewrite import split_init_post, split_padded_nests, stage_padded_reads
from .nest import SegmentCompiler, max_accumulators

_POOL: tuple[int, ThreadPoolExecutor] | None = None    # (pid that made it, pool)
_UNBOUND = (object(),)      # no call's arguments are these


def _pool() -> ThreadPoolExecutor:
    """The worker threads of parallel loops. A forked child gets a pool of its own: the
    parent's threads do not exist there, and its pool would wait on them forever."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="loopstack"))
    return _POOL[1]


def compile_x86(tree: LoopTree, target=None, unroll_limit: int | None = None) -> "X86Kernel":
    t0 = time.perf_counter()
    target = get_target(target)          # a CPU without the instruction set fails here, before any code
    lowered, parallel, segments, once = emit_x86(tree, target, unroll_limit)
    codes = ExecutableCode.batch([asm.bytes() for asm, _ in segments]) if segments else []
    kernel = X86Kernel(tree, lowered, target, [(c, asm, node) for c, (asm, node) in zip(codes, segments)],
                       parallel, once)
    kernel.compile_ms = (time.perf_counter() - t0) * 1e3
    return kernel


def emit_x86(tree: LoopTree, target, unroll_limit: int | None = None):
    """The machine code of a tree for `target`, without making it executable.

    Returns (rewritten tree, temps private to parallel loops, [(Assembler, top-level node)],
    the number of leading segments to run once per set of arrays).
    Emitting needs no CPU support, so code for any target can be inspected and decoded here."""
    limit = unroll_limit if unroll_limit is not None else target.unroll_limit
    if limit < 0:
        raise ScheduleError(f"unroll_limit must be >= 0, got {limit}")
    for b in tree.buffers:
        if b.dtype not in ("float32", "float16"):
            raise UnsupportedError(
                f"the x86 backend computes in float32 (storage float32 or float16); buffer %{b.name} is "
                f"{b.dtype} (use target='interp' for integer programs)")
    lowered, once = hoist_constant_packs(stage_padded_reads(split_padded_nests(tree)))
    lowered = split_init_post(lowered, target.lanes("float32"), lambda s: max_accumulators(target, s))
    parallel = check_parallel(lowered)
    slots = {b.name: i for i, b in enumerate(lowered.arguments + lowered.temps)}
    segments = []
    for node in lowered.body:
        asm = Assembler()
        SegmentCompiler(asm, target, lowered, node, slots, limit).compile()
        segments.append((asm, node))
    return lowered, parallel, segments, once


def check_parallel(tree: LoopTree) -> set[str]:
    """Temps private to a parallel loop; raises if a parallel loop would race."""
    private: set[str] = set()
    users: dict[str, set[int]] = {}
    for top, node in enumerate(tree.body):
        for s in statements(node):
            for acc in (s.out, *s.reads()):
                users.setdefault(acc.buffer, set()).add(top)
    for top, node in enumerate(tree.body):
        if not (isinstance(node, Loop) and "parallel" in node.annotations):
            continue
        mine = {t.name for t in tree.temps if users.get(t.name) == {top}}
        private |= mine
        for s in statements(node):
            if s.out.buffer in mine:
                continue
            names = s.out.names()
            if node.dim not in names and loop_var(node.var) not in names:
                raise ScheduleError(
                    f"parallel loop {node.var} would race: statement '{s.name}' writes %{s.out.buffer} "
                    f"without indexing dimension {node.dim}")
    return private



class X86Kernel(KernelBase):
    """Machine code for a loop tree, callable on numpy arrays."""

    def __init__(self, tree: LoopTree, lowered: LoopTree, target, segments, private: set[str], once: int = 0):
        super().__init__(tree)
        self.lowered = lowered
        self.target = target
        self._segments = segments
        self._private = private
        self.threads = os.cpu_count() or 1
        self._shared = {t.name: allocate_storage(t) for t in lowered.temps if t.name not in private}
        self._per_thread: list[dict[str, np.ndarray]] = []
        self._bound: tuple = _UNBOUND    # the arrays of the last call
        self._run = None
        # per segment: (function, iterations, parallel?) — fixed at compile time, so a call
        # only looks up its arguments' pointer block and calls; the first `once` pack constants
        steps = [(c.func, _iterations(lowered, node), isinstance(node, Loop) and "parallel" in node.annotations)
                 for c, _, node in segments]
        self._once, self._steps = steps[:once], steps[once:]
        self._parallel = any(parallel for _, _, parallel in self._steps)

    @property
    def code(self) -> bytes:
        return b"".join(c.code for c, _, _ in self._segments)

    def instruction_bytes(self) -> list[bytes]:
        """Each segment's instructions, without its constant pool (for disassemblers)."""
        return [c.code[:asm.code_size] for c, asm, _ in self._segments]

    def asm(self) -> str:
        parts = []
        for i, (_, asm, node) in enumerate(self._segments):
            head = node.var if isinstance(node, Loop) else node.name
            parts.append(f"; segment {i}: {head}\n{asm.listing()}")
        return "\n".join(parts)

    def _temps(self, thread: int) -> dict[str, np.ndarray]:
        while len(self._per_thread) <= thread:
            self._per_thread.append({t.name: allocate_storage(t) for t in self.lowered.temps if t.name in self._private})
        d = dict(self._shared)
        d.update(self._per_thread[thread])
        return d

    def _pointers(self, arrays, thread: int):
        temps = self._temps(thread)
        bufs = list(arrays) + [temps[t.name] for t in self.lowered.temps]
        params = self.lowered.arguments + self.lowered.temps
        return pointer_array(bufs, [b.kind != "input" for b in params], [b.name for b in params])

    def __call__(self, *arrays: np.ndarray) -> None:
        bound = self._bound
        if len(arrays) != len(bound) or not all(map(is_, arrays, bound)):
            self._bind(arrays, checked=False)
        self._run()

    def _execute(self, arrays, checked: bool = True) -> None:
        bound = self._bound
        if len(arrays) != len(bound) or not all(map(is_, arrays, bound)):
            self._bind(arrays, checked)
        self._run()

    def close(self) -> None:
        """Unmap the kernel's code now (idempotent); calling it afterwards raises LoopstackError."""
        for c, _, _ in self._segments:
            c.close()
        self._bound, self._run = _UNBOUND, None

    @property
    def closed(self) -> bool:
        return any(c.closed for c, _, _ in self._segments)

    def _bind(self, arrays, checked: bool) -> None:
        """Check new arrays, build their pointer blocks (one per thread when a segment runs in
        parallel), pack their constants, and make the call that runs every step on them.

        The arrays are kept bound: while referenced, their ids cannot be reused and they cannot
        be resized, so the same objects passed again are the same memory and need no check."""
        if self.closed:
            raise LoopstackError("this kernel was closed; its code is unmapped (compile it again)")
        if not checked:
            self.check_arguments(arrays)
        threads = self.threads if self._parallel else 1
        ptrs = [self._pointers(arrays, t) for t in range(threads)]
        block = ptrs[0].cdata
        for func, n, _ in self._once:
            func(block, 0, n)
        self._bound = tuple(arrays)
        steps = self._steps
        if len(steps) == 1 and not (steps[0][2] and threads > 1):
            self._run = partial(steps[0][0], block, 0, steps[0][1])
            return

        def run() -> None:
            for func, n, parallel in steps:
                if parallel and threads > 1:
                    self._run_parallel(func, n, ptrs)
                else:
                    func(block, 0, n)
        self._run = run

    def _run_parallel(self, func, n: int, ptrs) -> None:
        t = min(self.threads, n)
        bounds = [n * i // t for i in range(t + 1)]
        futures = [_pool().submit(func, ptrs[i].cdata, bounds[i], bounds[i + 1]) for i in range(1, t)]
        func(ptrs[0].cdata, bounds[0], bounds[1])
        for f in futures:
            f.result()


def _iterations(tree: LoopTree, node) -> int:
    if not isinstance(node, Loop):
        return 1
    size = tree.dim_size(node.dim)
    return -(-size // node.step)
