"""compile_native: a verified loop tree in, a Kernel of machine code for a CPU target out.

    split_padded_nests -> stage_padded_reads -> hoist_constant_packs -> split_init_post
    -> check_parallel -> one function per top-level node (backend/nest.py, with the
       target's instruction selection: backend/x86 or backend/aarch64)

Each top-level node becomes its own machine-code function `f(void **args, i64 start,
i64 end)`; the Kernel calls them in order, except that the leading nests which only pack
constant inputs run when the kernel is given arrays it did not see in the call before. A top-level loop annotated "parallel" is
split into chunks of iterations [start, end) run by a team of threads (backend/threads.py):
cffi releases the GIL during the call, and every thread gets its own copy of the
intermediates that live only inside that loop.

Code for any target can be emitted on any host (cross-compilation): a kernel for a target
this CPU cannot run has its code, listing and counts, and calling it raises UnsupportedError.
"""
from __future__ import annotations

import importlib
import os
import threading
import time
import weakref
from functools import partial
from operator import is_

import numpy as np

from ..errors import ArgumentError, LoopstackError, ScheduleError, UnsupportedError
from ..isa.target import get_target, host_arch
from ..looptree.ir import Dot, Loop, LoopTree, loop_var, statements
from .kernel_base import KernelBase, allocate_storage
from .constants import hoist_constant_packs
from .threads import EVERY_THREAD, MAX_THREADS, check_threads, copies_per_thread, parallel_call
from .nest import SegmentCompiler, max_accumulators
from .reuse import segment_shapes
from .rewrite import split_init_post, split_padded_nests, stage_padded_reads

# the instruction selection of each architecture: (module, Emitter class, Assembler factory)
_ISAS = {
    "x86_64": ("loopstack.backend.x86.emitter", "X86Emitter", "loopstack.isa.x86.assembler"),
    "aarch64": ("loopstack.backend.aarch64.emitter", "A64Emitter", "loopstack.isa.aarch64.assembler"),
}

_UNBOUND = (object(),)      # no call's arguments are these


def in_float16(tree: LoopTree) -> LoopTree:
    """The same program with every float32 buffer in float16 (what neon_fp16 computes)."""
    import dataclasses

    bufs = tuple(dataclasses.replace(b, dtype="float16") if b.dtype == "float32" else b for b in tree.buffers)
    return dataclasses.replace(tree, buffers=bufs)


def runs_here(target) -> bool:
    """Whether this process can call code for `target`: the host's architecture and features."""
    from ..isa import cpu

    return target.arch == host_arch() and target.required <= cpu.cpu_features()


def compile_native(tree: LoopTree, target=None, unroll_limit: int | None = None) -> "NativeKernel":
    t0 = time.perf_counter()
    # a CPU without the instruction set fails here, before any code; another architecture's
    # target is cross-compiled
    target = get_target(target)
    lowered, parallel, segments, once = emit_native(tree, target, unroll_limit)
    if runs_here(target):
        from ..isa.execmem import ExecutableCode

        codes = ExecutableCode.batch([asm.bytes() for asm, _ in segments]) if segments else []
    else:
        codes = [_Foreign(asm.bytes(), target) for asm, _ in segments]
    kernel = NativeKernel(tree, lowered, target, [(c, asm, node) for c, (asm, node) in zip(codes, segments)],
                          parallel, once)
    kernel.compile_ms = (time.perf_counter() - t0) * 1e3
    return kernel


def instruction_set(target):
    """(Emitter subclass, Assembler class) of the target's architecture."""
    try:
        module, cls, asm_module = _ISAS[target.arch]
    except KeyError:
        raise UnsupportedError(f"no code generator for architecture {target.arch!r} (target {target.name})") from None
    return getattr(importlib.import_module(module), cls), importlib.import_module(asm_module).Assembler


def emit_native(tree: LoopTree, target, unroll_limit: int | None = None):
    """The machine code of a tree for `target`, without making it executable.

    Returns (rewritten tree, temps private to parallel loops, [(Assembler, top-level node)],
    the number of leading segments to run once per set of arrays).
    Emitting needs no CPU support, so code for any target can be inspected and decoded here."""
    limit = unroll_limit if unroll_limit is not None else target.unroll_limit
    if limit < 0:
        raise ScheduleError(f"unroll_limit must be >= 0, got {limit}")
    isa, assembler = instruction_set(target)
    isa.check_tree(tree, target)
    if any(s.tensorize for _, s in tree.computes()) or any(b.dtype in ("int8", "uint8") for b in tree.buffers):
        # only a requested or an 8-bit contraction is tensorized: a float program's compile
        # does not load the tensorized-instruction registry
        from .tensorize.apply import tensorize_for_target

        tree, _ = tensorize_for_target(tree, target)
    lowered, once = hoist_constant_packs(stage_padded_reads(split_padded_nests(tree)))
    lowered = split_init_post(lowered, isa.lanes(target), lambda s: max_accumulators(target, s),
                              isa.vector_plan_for(target))
    parallel = check_parallel(lowered)
    slots = {b.name: i for i, b in enumerate(lowered.arguments + lowered.temps)}
    segments = []
    compiled: dict[tuple, tuple] = {}     # segment shape key -> (shape, Assembler, prologue length)
    for node, shape in zip(lowered.body, segment_shapes(lowered, lowered.body)):
        first = compiled.get(shape.key) if shape is not None else None
        asm = None
        if first is not None:
            asm = _reused(first, shape, SegmentCompiler(assembler(), target, lowered, node, slots, limit, isa))
        if asm is None:
            compiler = SegmentCompiler(assembler(), target, lowered, node, slots, limit, isa)
            compiler.compile()
            asm = compiler.em.asm
            if shape is not None:
                compiled.setdefault(shape.key, (shape, asm, compiler.body_start))
        segments.append((asm, node))
    return lowered, parallel, segments, once


def _reused(first: tuple, shape, compiler: SegmentCompiler):
    """The code of `compiler`'s node, of the same shape as one compiled before (`first`: its
    shape, Assembler and prologue length), from that code with this node's own prologue (see
    backend.reuse); None where the instruction set's assembler cannot take a new prologue."""
    first_shape, asm, start = first
    if not hasattr(asm, "with_head"):
        return None
    compiler.prologue()
    return asm.with_head(compiler.em.asm, start, shape.label_renaming(first_shape))


class _Foreign:
    """The code of a segment for a target this host cannot run: inspectable, not callable."""

    closed = False

    def __init__(self, code: bytes, target):
        self.code = code
        self.target = target

    def close(self) -> None:
        """Nothing is mapped for code this host cannot run."""

    def func(self, *args):
        raise UnsupportedError(
            f"this kernel is {self.target.name} ({self.target.arch}) code and this host "
            f"({host_arch()}) cannot run it: inspect .code / .asm(), or compile for this host's target")


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


_LIVE: "weakref.WeakSet[NativeKernel]" = weakref.WeakSet()


def _unlock_after_fork() -> None:
    """A forked child has only the forking thread: a call another thread was making holds a
    lock nobody will release."""
    for kernel in list(_LIVE):
        kernel._lock = threading.Lock()


os.register_at_fork(after_in_child=_unlock_after_fork)


class NativeKernel(KernelBase):
    """Machine code for a loop tree, callable on numpy arrays (on a host that runs its target)."""

    def __init__(self, tree: LoopTree, lowered: LoopTree, target, segments, private: set[str], once: int = 0):
        super().__init__(tree)
        self.lowered = lowered
        self.target = target
        # the tensorized instruction (backend.tensorize registry entry) its contraction runs on
        # (over the nests' statements, kept on their loops by the walk: the lowered tree's own
        # walk is not listed for this alone)
        self.tensorized = next((c.expr.instr for node in lowered.body for c in statements(node)
                                if isinstance(c.expr, Dot)), None)
        self._segments = segments
        private = set(private)
        everywhere = copies_per_thread(lowered, private, once)      # adds the temps those copies write
        self._private = private
        self._threads = min(os.cpu_count() or 1, MAX_THREADS)
        # the intermediates of calls through the kernel itself, allocated at the first such call:
        # a compile allocates nothing (a tuner's candidates and cross-compiled kernels never run,
        # and bind() gives each prepared call its own)
        self._shared: dict[str, np.ndarray] | None = None
        self._per_thread: list[dict[str, np.ndarray]] = []
        self._bound: tuple = _UNBOUND    # the arrays of the last call
        self._lock = threading.Lock()
        _LIVE.add(self)
        self._run = None
        # per segment: (function, iterations, parallel?) — fixed at compile time, so a call
        # only looks up its arguments' pointer block and calls; the first `once` pack constants
        steps = [(c.func, _iterations(lowered, node), isinstance(node, Loop) and "parallel" in node.annotations)
                 for c, _, node in segments]
        self._once, self._steps = steps[:once], steps[once:]
        self._work = [_work(lowered, node) for _, _, node in segments[once:]]    # how threads share them
        self._parallel = any(parallel for _, _, parallel in self._steps)
        self._steps = [(func, n, EVERY_THREAD if once + i in everywhere else parallel)
                       for i, (func, n, parallel) in enumerate(self._steps)]

    def per_call_reads(self) -> set[int]:
        """The arguments (indices) that the code run by every call reads: a constant that only
        the once-steps read, to pack it, is not among them (its packed copy is what runs read)."""
        names = {a.buffer for _, _, node in self._segments[len(self._once):]
                 for stmt in statements(node) for a in stmt.reads()}
        return {i for i, b in enumerate(self.lowered.arguments) if b.name in names}

    @property
    def threads(self) -> int:
        """Threads a loop annotated "parallel" is split over (default: every core)."""
        return self._threads

    @threads.setter
    def threads(self, n: int) -> None:
        if check_threads(n) != self._threads:
            self._threads = n
            self._bound = _UNBOUND     # the prebuilt call holds one pointer block per thread

    @property
    def code(self) -> bytes:
        return b"".join(c.code for c, _, _ in self._segments)

    def instruction_bytes(self) -> list[bytes]:
        """Each segment's instructions, without its constant pool (for disassemblers)."""
        # x86's assembler knows where its code ends; AArch64's counts 4-byte instruction words
        return [c.code[:asm.code_size if hasattr(asm, "code_size") else 4 * len(asm)]
                for c, asm, _ in self._segments]

    def asm(self) -> str:
        parts = []
        for i, (_, asm, node) in enumerate(self._segments):
            head = node.var if isinstance(node, Loop) else node.name
            parts.append(f"; segment {i}: {head}\n{asm.listing()}")
        return "\n".join(parts)

    def _temps(self, thread: int) -> dict[str, np.ndarray]:
        if self._shared is None:
            self._shared = {t.name: allocate_storage(t) for t in self.lowered.temps if t.name not in self._private}
        while len(self._per_thread) <= thread:
            self._per_thread.append({t.name: allocate_storage(t) for t in self.lowered.temps if t.name in self._private})
        d = dict(self._shared)
        d.update(self._per_thread[thread])
        return d

    def _pointers(self, arrays, thread: int, temps=None):
        from ..isa.execmem import pointer_array

        temps = temps[thread] if temps is not None else self._temps(thread)
        bufs = list(arrays) + [temps[t.name] for t in self.lowered.temps]
        params = self.lowered.arguments + self.lowered.temps
        return pointer_array(bufs, [b.kind != "input" for b in params], [b.name for b in params])

    def __call__(self, *arrays: np.ndarray) -> None:
        # one call at a time: the bound call, its pointer blocks and the temps are the kernel's
        # own, and compile() hands one kernel to every caller of a program, on any thread
        with self._lock:
            bound = self._bound
            if len(arrays) != len(bound) or not all(map(is_, arrays, bound)):
                self._bind(arrays, checked=False)
            self._run()

    def _execute(self, arrays, checked: bool = True) -> None:
        with self._lock:
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
        self._run = self._prepared(arrays)
        self._bound = tuple(arrays)

    def bind(self, *arrays: np.ndarray, threads: int | None = None, scratch: dict | None = None,
             storage=None):
        """A call of this kernel on `arrays` prepared once, as a function of no arguments:
        the arrays checked, their pointer block built and the constants packed, in
        intermediates of its own, so that one kernel serves many sets of arrays (the layers
        of a network with the same shapes) without redoing that work at every call. The
        returned function keeps the arrays alive; calling it runs the kernel on them, its
        parallel loops on `threads` threads (default: `kernel.threads`).

        `scratch`: a dict the caller keeps for calls that run one after the other, never at
        once; the zero-bordered copies of padded inputs (backend.padding.zero_bordered_temps)
        come from it, one buffer per border geometry shared by every call bound with it.
        `storage(shape, dtype)` makes its intermediates (default: arrays of their own; a compiled
        model passes its region's, see region.py)."""
        if self.closed:
            raise LoopstackError("this kernel was closed; its code is unmapped (compile it again)")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ArgumentError(f"threads must be a positive integer, got {threads!r}")
        self.check_arguments(arrays)
        threads = (threads or self.threads) if self._parallel else 1
        temps = []
        for _ in range(threads):
            own = {t.name: allocate_storage(t, storage) for t in self.lowered.temps if t.name in self._private}
            temps.append(own)
        shared = {t.name: allocate_storage(t, storage) for t in self.lowered.temps if t.name not in self._private}
        if scratch is not None:
            for name, key in self._zero_bordered().items():
                if name in shared:
                    shared[name] = scratch.setdefault(key, shared[name])
        for own in temps:
            own.update(shared)
        return self._prepared(tuple(arrays), temps, threads)

    def _zero_bordered(self) -> dict[str, tuple]:
        found = getattr(self, "_zero_bordered_temps", None)
        if found is None:
            from .padding import zero_bordered_temps

            found = self._zero_bordered_temps = zero_bordered_temps(self.lowered)
        return found

    def _prepared(self, arrays, temps=None, threads=None):
        threads = (threads or self.threads) if self._parallel else 1
        ptrs = [self._pointers(arrays, t, temps) for t in range(threads)]
        block = ptrs[0].cdata
        for func, n, _ in self._once:
            func(block, 0, n)
        steps = self._steps
        serial = None
        if threads > 1:
            run = parallel_call(steps, self._work, ptrs, threads)
        else:
            from ..isa.execmem import ffi

            # what a chain of calls needs to make this one from machine code (backend/chain.py);
            # code built for another machine has no address here
            at = int(ffi.cast("intptr_t", block))
            segments = [c for c, _, _ in self._segments[len(self._once):]]
            if all(hasattr(c, "address") for c in segments):
                serial = [(c.address, at, n) for c, (_, n, _) in zip(segments, steps)]
            if len(steps) == 1:
                run = partial(steps[0][0], block, 0, steps[0][1])
            else:
                def run() -> None:
                    for func, n, _ in steps:
                        func(block, 0, n)
        run.serial_steps = serial
        run.keep = ptrs         # the pointer blocks hold the arrays and temps the code addresses
        run.parts = (steps, self._work, ptrs)      # threads.Job.chain runs it within a network's job
        run.point = partial(self._point, ptrs)
        for c, _, _ in self._segments:       # the call holds the code it jumps to
            if hasattr(c, "hold"):
                c.hold(run)
        return run

    def _point(self, ptrs, index: int, array: np.ndarray) -> None:
        """`call.point(index, array)` on a prepared call: its input `index` reads `array` from now
        on (checked as a call checks it), its other arrays and packed constants unchanged. Only
        an input that is not constant: no packed copy was made of it."""
        from ..isa.execmem import array_pointer

        b = self._expected()[index][0]
        if b.kind != "input" or b.constant:
            raise ArgumentError(f"argument {index} ({b.name}) is not a plain input: only those can be re-pointed")
        self.check_argument(index, array)
        buf = array_pointer(array, writable=False, name=b.name)
        for p in ptrs:
            p.buffers[index] = buf
            p.cdata[index] = buf


def _iterations(tree: LoopTree, node) -> int:
    if not isinstance(node, Loop):
        return 1
    size = tree.dim_size(node.dim)
    return -(-size // node.step)


def _work(tree: LoopTree, node) -> float:
    """Iterations with a partial last one counted by its share (how threads.chunk_bounds balances)."""
    return tree.dim_size(node.dim) / node.step if isinstance(node, Loop) else 1.0
