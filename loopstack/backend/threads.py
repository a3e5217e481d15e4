"""The threads a kernel's parallel loops run on: one team per process, one hand-over per call.

A kernel call with a loop annotated "parallel" becomes a *job*: its steps (the top-level
segments, in order) and, per step and thread, the pointer block and the iterations
[start, end) that thread runs; a serial step gives all its iterations to thread 0, and a
copy into temps only parallel loops read runs whole on every thread (EVERY_THREAD). Threads
meet at a barrier after every step (a step reads what the one before wrote). Each output
element is computed by one thread in the serial order, so results are bit-identical to one
thread whatever the split.

On x86-64 Linux the team's workers live in machine code (backend/x86/team.py): a call hands
the whole job over with one store per worker and returns when every thread passed the last
barrier; between calls a worker spins briefly, then sleeps in futex, and a worker that wakes
too late for a step leaves its chunk to the caller (it joins the call at a later step).
Elsewhere a ThreadPoolExecutor runs each parallel step's chunks (portable, with a wake-up per
step).

The team belongs to the process that made it: a forked child (the tuner's measuring workers)
inherits its memory without its threads, and makes a team of its own when it needs one. A
call that finds the team busy (another Python thread is running a job on it) runs its chunks
one after the other on the calling thread: the same results, never a wait on another job.
"""
from __future__ import annotations

import os
import sys
import threading

import numpy as np

from ..errors import ArgumentError

# the most threads one call may use (the team's memory holds a slot per thread)
MAX_THREADS = 256
# a step's "parallel?" flag for a step every thread runs whole, on its own copies of the temps
# it writes (native.copies_per_thread)
EVERY_THREAD = "every thread"


def chunk_bounds(iterations: int, threads: int, work: float | None = None) -> list[int]:
    """[0, b1, ..., iterations]: whole iterations per thread with about equal work each.

    `work` is the loop's length in iterations with a partial last one counted by its share
    (1024 columns in steps of 96: 10.67), so the thread that gets the short iteration gets
    more of the others (6 + 4.67 becomes 5 + 5.67)."""
    t = max(1, min(threads, iterations))
    total = work if work is not None else float(iterations)
    bounds = [0]
    for k in range(1, t):
        target = round(total * k / t)
        bounds.append(min(max(target, bounds[-1] + 1), iterations - (t - k)))
    bounds.append(iterations)
    return bounds


def split_bound(iterations: int, threads: int, work: float | None = None) -> float:
    """The speed-up chunk_bounds allows `threads` threads with a core each (the longest chunk's
    work against the whole loop's)."""
    total = work if work is not None else float(iterations)
    b = chunk_bounds(iterations, threads, total)
    longest = max(hi - lo - (iterations - total if hi == iterations else 0) for lo, hi in zip(b, b[1:]))
    return total / longest


def copies_per_thread(tree, private: set[str], once: int) -> set[int]:
    """Top-level loops (by position) that every thread of a parallel call runs whole, each
    into copies of its own of the temps they write (added to `private`): loops of copies (a
    padding copy) whose temps only parallel loops read. A thread then reads only what it wrote
    (CONV-1's padded input, 0.9 MB, cost more moved from core to core than copied twice).
    A kernel without a parallel loop has none, and the first `once` loops (constant packs, run
    once per set of arrays) are never among them."""
    from ..looptree.ir import Loop, statements

    parallel = {i for i, node in enumerate(tree.body) if isinstance(node, Loop) and "parallel" in node.annotations}
    if not parallel:
        return set()
    temps = {t.name for t in tree.temps} - private
    writers: dict[str, set[int]] = {}
    readers: dict[str, set[int]] = {}
    for i, node in enumerate(tree.body):
        for st in statements(node):
            writers.setdefault(st.out.buffer, set()).add(i)
            for acc in st.reads():
                readers.setdefault(acc.buffer, set()).add(i)
    chosen = set()
    for i, node in enumerate(tree.body):
        if i < once or i in parallel or not isinstance(node, Loop):
            continue
        body = list(statements(node))
        written = {st.out.buffer for st in body}
        if all(st.is_copy for st in body) and written <= temps and all(
                writers[b] == {i} and readers.get(b, set()) <= parallel for b in written):
            chosen.add(i)
            private |= written
    return chosen


class Job:
    """One kernel call's steps split over `threads` threads, or the calls of a whole network
    one after another (Job.chain).

    `steps`: (function, iterations, parallel?) per top-level segment, `work` their lengths in
    iterations (chunk_bounds); `blocks`: the pointer block (PointerArray) of each thread."""

    def __init__(self, steps, work, blocks, threads: int):
        self.threads = threads
        self.blocks = [blocks]          # kept alive while the job can run
        # per step: (function, [(block cdata, start, end)] per thread)
        self.chunks = _chunks(steps, work, blocks, threads)
        self._encode([0] * len(self.chunks))

    @classmethod
    def chain(cls, parts, threads: int) -> "Job":
        """One job running several calls in order: `parts` holds each call's (steps, work,
        blocks) (a call prepared for fewer threads gives the others nothing to do)."""
        job = cls.__new__(cls)
        job.threads = threads
        job.blocks = [blocks for _, _, blocks in parts]
        job.chunks, calls = [], []
        for i, (steps, work, blocks) in enumerate(parts):
            job.chunks += _chunks(steps, work, blocks, threads)
            calls += [i] * len(steps)
        job._encode(calls)
        return job

    def _encode(self, calls) -> None:
        """The job's words; `calls`: the call each step belongs to."""
        from ..isa.execmem import ffi
        from .x86 import team as code

        words = [self.threads, len(self.chunks)]
        alone = [all(start >= end for _, start, end in chunks[1:]) for _, chunks in self.chunks]
        everyone = [self.threads > 1 and all(c[1:] == chunks[0][1:] and c[1] < c[2] for c in chunks)
                    for _, chunks in self.chunks]
        copied = set()                  # calls with a step of copies into each thread's temps
        for k, (func, chunks) in enumerate(self.chunks):
            # a worker may start the call here: it has not missed a copy the step reads
            join = 0 if calls[k] in copied else code.JOIN_POINT
            if everyone[k]:
                copied.add(calls[k])
            # no barrier between two steps that thread 0 runs alone, nor after a copy every
            # thread makes into its own temps when the next step is of the same call: no
            # thread reads what another wrote in it, and the call's input it reads is not
            # written before the call's last barrier
            barrier = k + 1 == len(self.chunks) or not (
                alone[k] and alone[k + 1] or everyone[k] and calls[k] == calls[k + 1])
            flags = (code.BARRIER if barrier else 0) | (code.OWN_COPIES if everyone[k] else 0) | join
            words += [int(ffi.cast("uintptr_t", func)), flags]
            for cdata, start, end in chunks:
                words += [int(ffi.cast("uintptr_t", cdata)), start, end]
        self.words = np.array(words, np.int64)
        self.address = self.words.ctypes.data

    def run_here(self) -> None:
        """Every chunk on the calling thread, in order."""
        for func, chunks in self.chunks:
            for cdata, start, end in chunks:
                if start < end:
                    func(cdata, start, end)


def _chunks(steps, work, blocks, threads: int) -> list:
    """Per step: (function, [(block cdata, start, end)] per thread). A serial step gives every
    iteration to thread 0; a call with fewer blocks than threads has no parallel step."""
    res = []
    for (func, n, parallel), length in zip(steps, work):
        if len(blocks) < threads:       # prepared for fewer threads: thread 0's block holds its temps
            parallel = False
        if parallel == EVERY_THREAD:
            spans = [(0, n)] * threads
        else:
            bounds = chunk_bounds(n, threads, length) if parallel else [0, n]
            bounds += [n] * (threads + 1 - len(bounds))
            spans = list(zip(bounds, bounds[1:]))
        res.append((func, [(blocks[min(i, len(blocks) - 1)].cdata, *spans[i]) for i in range(threads)]))
    return res


class NativeTeam:
    """Worker threads waiting in machine code for jobs (x86-64 Linux)."""

    def __init__(self):
        from ..isa.execmem import ExecutableCode
        from .kernel_base import empty_aligned
        from .x86 import team as code

        self._memory = empty_aligned(((code.FIRST + MAX_THREADS * code.SLOT) // 8,), np.int64, code.SLOT)
        self._memory[code.EPOCH // 8] = 1
        self._memory[code.BUDGET // 8] = code.SPIN_TICKS
        self._memory[code.YIELD // 8] = code.YIELD_TICKS
        self._memory[code.TIMEOUT // 8 + 1] = code.FUTEX_TIMEOUT_NS
        self._address = self._memory.ctypes.data
        self._worker = ExecutableCode(code.worker_code(), code.WORKER_CDECL)
        self._run = ExecutableCode(code.run_code(), code.RUN_CDECL)
        self._wake = ExecutableCode(code.wake_code(), code.WAKE_CDECL)
        self._started = 1               # threads of the team: the caller is thread 0
        self._home = None               # the CPU the workers keep off (see _work)
        self._cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
        self._lock = threading.Lock()

    def _grow(self, threads: int) -> None:
        with self._lock:
            if self._home is None:
                self._home = _current_cpu()
            while self._started < threads:
                i = self._started
                threading.Thread(target=self._work, args=(i, self._home), daemon=True,
                                 name=f"loopstack-{i}").start()
                self._started += 1

    def _work(self, i: int, home: int | None) -> None:
        """Worker i: kept off `home`, the CPU the caller ran on when it made the worker, then in
        the team's code for good. Unbound, the scheduler at times left a worker on the caller's
        CPU with the other one idle (both then take turns at every barrier: the MLP ran at 0.4x
        its speed for whole seconds); kept off it, the caller is the one that moves, and it is
        free to. Only one CPU is left out, so the workers of several processes (the tuner's
        measuring workers) still spread over the machine."""
        cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        if home in cpus and len(cpus) > 1:
            try:
                os.sched_setaffinity(0, cpus - {home})     # 0: this thread
            except OSError:
                pass
        self._worker.func(self._address, i)

    def wake(self, threads: int) -> None:
        """Get workers 1 .. threads-1 spinning: parallel calls are coming (see wake())."""
        if self._started < threads:
            self._grow(threads)
        self._wake.func(self._address, threads)
        self._settle(threads)

    def _settle(self, threads: int) -> None:
        """A caller found on another CPU than the home one, with a team as large as the CPUs,
        moves home: it shares a worker's CPU (the scheduler moved it there while a neighbour
        held home), and the two would take turns at every barrier for as long as the
        scheduler lets them (seconds, measured). Two system calls, only when misplaced."""
        if self._home is None or threads < self._cpus or _SCHED_GETCPU is None:
            return
        cpu = _SCHED_GETCPU()
        if cpu < 0 or cpu == self._home:
            return
        try:
            mask = os.sched_getaffinity(0)
            if self._home in mask:
                os.sched_setaffinity(0, {self._home})
                os.sched_setaffinity(0, mask)
        except OSError:
            pass

    def run(self, job: Job) -> None:
        if self._started < job.threads:
            self._grow(job.threads)
        if not self._lock.acquire(blocking=False):
            job.run_here()
            return
        try:
            self._run.func(self._address, job.address)
        finally:
            self._lock.release()


class PoolTeam:
    """The portable team: a ThreadPoolExecutor takes each parallel step's other chunks."""

    def __init__(self):
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="loopstack")

    def wake(self, threads: int) -> None:
        pass

    def run(self, job: Job) -> None:
        for func, chunks in job.chunks:
            futures = [self._pool.submit(func, *c) for c in chunks[1:] if c[1] < c[2]]
            cdata, start, end = chunks[0]
            if start < end:
                func(cdata, start, end)
            for f in futures:
                f.result()


_TEAM = None
_MAKING = threading.Lock()      # two threads' first parallel calls make one team
_TEAMS = []                     # every team made: its workers run in its code until the process ends


def team():
    """This process's team, made at its first parallel call."""
    global _TEAM
    if _TEAM is None:
        with _MAKING:
            if _TEAM is None:
                from ..isa.target import host_arch

                made = NativeTeam() if host_arch() == "x86_64" and sys.platform == "linux" else PoolTeam()
                _TEAMS.append(made)
                _TEAM = made
    return _TEAM


def _forget_team_after_fork() -> None:
    """The child has none of the team's threads (and its lock may be held): it makes its own."""
    global _TEAM, _MAKING
    _TEAM = None
    _MAKING = threading.Lock()


os.register_at_fork(after_in_child=_forget_team_after_fork)


def check_threads(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_THREADS:
        raise ArgumentError(f"kernel.threads must be an integer from 1 to {MAX_THREADS}, got {n!r}")
    return n


def _libc_sched_getcpu():
    try:
        import ctypes

        f = ctypes.CDLL(None).sched_getcpu
        f.restype, f.argtypes = ctypes.c_int, []
        return f
    except (OSError, AttributeError):
        return None


_SCHED_GETCPU = _libc_sched_getcpu() if sys.platform == "linux" else None


def _current_cpu() -> int | None:
    """The CPU the calling thread runs on (Linux), else None."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/stat") as f:
            stat = f.read()
        return int(stat[stat.rindex(")") + 2:].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def wake(threads: int) -> None:
    """A hint that calls on `threads` threads follow: the team's sleeping workers wake now and
    spin, so that the first parallel call finds them awake. A network calls it as it starts a
    run: the wake-up (50-100 us on a virtual machine) then passes during the layers before its
    first parallel one, or at worst during the first one's chunk on the calling thread."""
    if threads > 1:
        team().wake(threads)


def parallel_call(steps, work, blocks, threads: int):
    """The call that runs `steps` on `threads` threads (team() is looked up at every call, so a
    forked child uses its own)."""
    job = Job(steps, work, blocks, threads)

    def run() -> None:
        team().run(job)
    run.job = job
    return run
