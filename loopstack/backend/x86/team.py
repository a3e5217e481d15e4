"""The machine code of a thread team on x86-64 Linux: worker threads that wait for work in
native code, and the call that hands a kernel's steps to them (backend/threads.py drives both).

Handing work to a thread costs a wake-up; on a virtual machine an idle core's wake-up takes
50 us to 1.5 ms, as long as a whole MLP layer or longer. So a worker that finished waits by spinning (`pause`,
the GIL released: it is in a cffi call) for SPIN_TICKS of the time-stamp counter before it
sleeps in futex(FUTEX_WAIT), and a call finds it awake whenever calls follow each other. Past
YIELD_TICKS a waiter yields its core between checks (sched_yield): on a machine with more
runnable threads than cores, the thread it waits for may be queued behind it. A sleeper that
a FUTEX_WAKE wakes spins a budget again, even when its word has not changed: `wake_code` wakes
the workers that way when a network starts a run, so that they are spinning by the time its
first parallel layer hands them work.

Team memory (int64 words; SLOT bytes per thread so that no two threads write one cache line
or its prefetched neighbour):

    [EPOCH]                 the next call's epoch (the main thread alone writes it)
    [BUDGET]                spin budget in TSC ticks before a wait sleeps
    [TIMEOUT, +8]           a futex wait's timespec: a sleeper wakes at least this often
    [YIELD]                 TSC ticks of spinning after which a waiter yields between checks
    thread j at FIRST + j*SLOT:
      +ARRIVED              the last barrier epoch thread j reached (thread j writes)
      +SLEEPING             1 while thread j is (about to be) asleep in futex (thread j writes)
      +GO                   epoch of the call handed to worker j (the main thread writes)
      +JOB                  the job of that call (written before GO)
      +JOINED               worker j's place in the call: its gate (below); both write it,
                            with compare-and-exchange
      +TAKEN                the last barrier whose step the main thread ran for worker j
                            (the main thread writes and reads it)

A job (int64 words): [threads t, steps S] then per step [function, flags, t x (args, start,
end)]: thread i calls function(args_i, start_i, end_i) when start_i < end_i, then, when the
step's flags hold BARRIER, the threads meet (the last step always has one; a step run by
thread 0 alone followed by another needs none: thread 0 runs them in order). A call of epoch
E with B barriers numbers them E+1 .. E+B; the next call's epoch is E+B+1, so every thread's
ARRIVED only grows. At a barrier the workers arrive, the main thread waits for them and then
arrives itself: the workers' release. Workers do not wait at the last barrier (the main
thread does, and then returns).

Late workers. A sleeping worker's wake-up takes 0.5-1.5 ms on a virtual machine, longer than
a whole network on two threads; a call must not wait for it. So a worker takes part in a call
only from the step it claims: its JOINED word holds the call's epoch, a gate (the first step
it may still run), OPEN when it may start there, and CLAIMED once it has. The main thread
offers the call open at step 0; at each barrier it moves the gate of every worker that has
not claimed the call past the step (compare-and-exchange), and runs that worker's chunk of
the step itself, with its own pointer block (not a copy each thread makes into its own temps,
OWN_COPIES: it has made its own). A worker claims at the gate it finds (compare-and-exchange:
it or the main thread wins, never both), skips to that step, waits for the release of the
barrier before it and goes on as usual; a gate is closed (JOIN_POINT not set on the step)
where the step reads copies of the call that the worker did not make. A worker that finds
the call over waits for the next. Which thread runs a chunk changes nothing in its results.

Sleeping without losing a wake-up (Dekker's pattern, both sides with a full barrier):
a waiter sets its SLEEPING with `xchg`, then reads the word it waits on again, and sleeps
only on the value it read (futex compares atomically); a thread that changes a word does so
with `xchg`, then wakes the word's sleepers if any SLEEPING is set. Either the waiter sees the
new value or the changer sees the flag.
"""
from __future__ import annotations

from ...isa.x86.assembler import Assembler
from ...isa.x86.operands import (Mem, eax, edx, esi, r8, r9, r10, r12, r13, r14, r15, rax, rbp,
                                 rbx, rcx, rdi, rdx, rsi, rsp)

EPOCH, BUDGET, TIMEOUT, YIELD = 0, 8, 16, 32
FIRST = 256
SLOT = 256
ARRIVED, SLEEPING, GO, JOB, JOINED, TAKEN = 0, 8, 128, 136, 144, 152
# a step's flags word: threads meet after it; each thread runs it whole into its own temps; a
# worker may start a call there (no step of its call before it made copies it reads)
BARRIER, OWN_COPIES, JOIN_POINT = 1, 2, 4
# a JOINED word: epoch << GATE_SHIFT | gate step << 2 | OPEN | CLAIMED (the epoch's low 40 bits:
# a worker's call is at most one behind the main thread's, never 2**40 epochs)
CLAIMED, OPEN = 1, 2
GATE_SHIFT = 24
GATE_MASK = (1 << (GATE_SHIFT - 2)) - 1
# ~0.8 ms at a 2.6 GHz time-stamp counter: longer than the gap between a benchmark's calls and
# between a model's layers, and than one call of a small network beside another engine's
# (the nets bench alternates them: an MLP's 2-thread calls came ~0.3 ms apart), short enough
# that an idle process gives its cores back soon (past YIELD_TICKS the spinner yields anyway)
SPIN_TICKS = 1 << 21
# after ~12 us a waiter yields its core between checks: on a machine with more runnable threads
# than cores the thread it waits for may be queued behind it
YIELD_TICKS = 1 << 15
FUTEX_TIMEOUT_NS = 50_000_000       # a lost wake-up (there should be none) costs 50 ms, not a hang

_SYS_SCHED_YIELD = 24
_SYS_FUTEX = 202
_FUTEX_WAIT_PRIVATE = 128
_FUTEX_WAKE_PRIVATE = 129
_CALLEE_SAVED = (rbx, rbp, r12, r13, r14, r15)

WORKER_CDECL = "void(*)(intptr_t, int64_t)"      # (team address, thread number)
RUN_CDECL = "void(*)(intptr_t, intptr_t)"        # (team address, job address)
WAKE_CDECL = "void(*)(intptr_t, int64_t)"        # (team address, threads)


def _slot(asm, j, field: int) -> Mem:
    """[team + FIRST + j*SLOT + field] for thread number j in a register (rcx is clobbered)."""
    asm.emit("mov", rcx, j)
    asm.emit("shl", rcx, 8)                     # SLOT == 1 << 8
    return Mem(rbx, rcx, 1, FIRST + field)


def _futex(asm, op: int, value=None) -> None:
    """futex(rdi, op, edx or value, timeout) — the syscall clobbers rax, rcx, r11."""
    if value is not None:
        asm.emit("mov", edx, value)
    asm.emit("mov", esi, op)
    asm.emit("lea", r10, Mem(rbx, None, 1, TIMEOUT))
    asm.emit("mov", eax, _SYS_FUTEX)
    asm.emit("syscall")


def _read_tsc(asm) -> None:
    asm.emit("rdtsc")
    asm.emit("shl", rdx, 32)
    asm.emit("or", rax, rdx)


def _wait_at_least(asm, me) -> None:
    """Wait until [rdi] >= r8 (signed): spin for the budget, then sleep on the word.
    `me`: the register holding the waiting thread's number. Uses rax, rcx, rdx, rsi, r10, r11."""
    done, top, spin, sleep, woke = (asm.label() for _ in range(5))
    asm.bind(top)
    asm.emit("cmp", Mem(rdi), r8)
    asm.emit("jge", done)
    _read_tsc(asm)
    asm.emit("mov", r10, rax)
    asm.bind(spin)
    asm.emit("pause")
    asm.emit("cmp", Mem(rdi), r8)
    asm.emit("jge", done)
    _read_tsc(asm)
    asm.emit("sub", rax, r10)
    asm.emit("cmp", rax, Mem(rbx, None, 1, BUDGET))
    asm.emit("jae", sleep)
    asm.emit("cmp", rax, Mem(rbx, None, 1, YIELD))
    asm.emit("jb", spin)
    asm.emit("mov", eax, _SYS_SCHED_YIELD)      # the thread waited for may be queued behind us
    asm.emit("syscall")
    asm.emit("jmp", spin)
    asm.bind(sleep)
    asm.emit("mov", eax, 1)
    asm.emit("xchg", _slot(asm, me, SLEEPING), rax)
    asm.emit("mov", rdx, Mem(rdi))
    asm.emit("cmp", rdx, r8)
    asm.emit("jge", woke)
    _futex(asm, _FUTEX_WAIT_PRIVATE)            # sleeps only while [rdi] still holds edx
    asm.emit("test", rax, rax)                  # -ETIMEDOUT, -EAGAIN: look again, sleep again
    asm.emit("jne", sleep)
    # woken (FUTEX_WAKE returns 0): by a change of the word, or by wake_code, whose caller has
    # work coming; either way spin a budget again before the next sleep
    slot = _slot(asm, me, SLEEPING)
    asm.emit("mov", Mem(slot.base, slot.index, 1, slot.disp, bits=64), 0)
    asm.emit("jmp", top)
    asm.bind(woke)
    slot = _slot(asm, me, SLEEPING)
    asm.emit("mov", Mem(slot.base, slot.index, 1, slot.disp, bits=64), 0)
    asm.bind(done)


def _wake_sleepers(asm, word: Mem, threads) -> None:
    """After `word` changed: futex-wake it when any of the first `threads` threads sleeps.
    `word` must not use rcx; `threads` is a register other than rax, rcx, rdx, rsi, rdi, r10, r11."""
    scan, wake, done = asm.label(), asm.label(), asm.label()
    asm.emit("xor", eax, eax)
    asm.bind(scan)
    asm.emit("cmp", rax, threads)
    asm.emit("jge", done)
    asm.emit("mov", rcx, rax)
    asm.emit("shl", rcx, 8)
    asm.emit("cmp", Mem(rbx, rcx, 1, FIRST + SLEEPING, bits=64), 0)
    asm.emit("jne", wake)
    asm.emit("add", rax, 1)
    asm.emit("jmp", scan)
    asm.bind(wake)
    asm.emit("lea", rdi, word)
    _futex(asm, _FUTEX_WAKE_PRIVATE, 0x7FFFFFFF)
    asm.bind(done)


def _prologue(asm, frame: int = 8) -> None:
    """Save the callee-saved registers and reserve `frame` bytes (8 mod 16: the stack is
    16-byte aligned at the kernels' calls)."""
    for r in _CALLEE_SAVED:
        asm.emit("push", r)
    asm.emit("sub", rsp, frame)


def _epilogue(asm, frame: int = 8) -> None:
    asm.emit("add", rsp, frame)
    for r in reversed(_CALLEE_SAVED):
        asm.emit("pop", r)
    asm.emit("ret")


def _call_chunk(asm, thread, args_of=None) -> None:
    """Call step r14's function on the chunk of `thread` (an int or a register) when it is not
    empty, with the pointer block of `args_of` (default: the same thread). Uses rax, rdi, rsi, rdx."""
    skip = asm.label()

    def record(t):                  # rax = step + 16 + 24*t: thread t's (args, start, end)
        if isinstance(t, int):
            asm.emit("lea", rax, Mem(r14, None, 1, 16 + 24 * t))
        else:
            asm.emit("lea", rax, Mem(t, t, 2))
            asm.emit("lea", rax, Mem(r14, rax, 8, 16))
    if args_of is not None:
        record(args_of)
        asm.emit("mov", rdi, Mem(rax))
    record(thread)
    if args_of is None:
        asm.emit("mov", rdi, Mem(rax))
    asm.emit("mov", rsi, Mem(rax, None, 1, 8))
    asm.emit("mov", rdx, Mem(rax, None, 1, 16))
    asm.emit("cmp", rsi, rdx)
    asm.emit("jge", skip)
    asm.emit("call", Mem(r14, bits=64))
    asm.bind(skip)


def _next_step(asm) -> None:
    """r14 to the next step: t is [rbp], a step 16 + 24*t bytes (lea leaves the flags alone)."""
    asm.emit("mov", r9, Mem(rbp))
    asm.emit("lea", rax, Mem(r9, r9, 2))
    asm.emit("lea", r14, Mem(r14, rax, 8, 16))


def _arrive(asm) -> None:
    """Publish this thread's (r12) arrival at barrier r13 and wake its sleeping waiters
    (r9: the threads to look at)."""
    asm.emit("mov", rax, r13)
    asm.emit("xchg", _slot(asm, r12, ARRIVED), rax)
    asm.emit("mov", rcx, r12)                   # _wake_sleepers' word must not use rcx
    asm.emit("shl", rcx, 8)
    asm.emit("lea", r10, Mem(rbx, rcx, 1, FIRST + ARRIVED))
    _wake_sleepers(asm, Mem(r10), r9)


def _worker_steps(asm, entry) -> None:
    """Worker r12 runs job rbp of epoch r13 on team rbx from step r14 (r15: steps left; the
    code enters at the label `entry`). At a barrier it arrives, then waits for the main
    thread's arrival: the release (the main thread arrives once every thread it waits for
    has). It does not wait at the last barrier, and does not read the job after arriving
    there (the main thread may return and free it)."""
    step, no_barrier, done = asm.label(), asm.label(), asm.label()
    asm.bind(step)
    asm.bind(entry)
    _call_chunk(asm, r12)
    asm.emit("test", Mem(r14, None, 1, 8, bits=64), BARRIER)
    _next_step(asm)
    asm.emit("je", no_barrier)
    asm.emit("add", r13, 1)
    _arrive(asm)
    asm.emit("sub", r15, 1)
    asm.emit("je", done)
    asm.emit("lea", rdi, Mem(rbx, None, 1, FIRST + ARRIVED))        # thread 0's
    asm.emit("mov", r8, r13)
    _wait_at_least(asm, r12)
    asm.emit("jmp", step)
    asm.bind(no_barrier)                        # never the last step (Job gives that a barrier)
    asm.emit("sub", r15, 1)
    asm.emit("jne", step)
    asm.bind(done)


def _gate(asm, reg, epoch, step) -> None:
    """reg = the JOINED word of call `epoch` with its gate, closed, at `step` (a register):
    epoch << GATE_SHIFT | step << 2."""
    asm.emit("mov", reg, epoch)
    asm.emit("shl", reg, GATE_SHIFT)
    asm.emit("lea", reg, Mem(reg, step, 4))


# the main thread's frame in run_code: the call's epoch, the next gate (a JOINED word), the
# worker whose chunk it looks at
_CALL, _NEXT_GATE, _TAKEN = 0, 8, 16
_RUN_FRAME = 24


def _main_steps(asm) -> None:
    """The main thread (r12 = 0) runs job rbp of epoch r13 on team rbx (r14: the step, r15:
    steps left). At each barrier it moves every worker's gate past the step (_move_gates); a
    worker still outside the call has its chunk of the step run by the main thread, with the
    main thread's own pointer block (but not a copy each thread makes into its own temps: the
    main thread has made its own). Then it waits for the workers inside the call, and arrives:
    their release."""
    step, no_barrier, wait, waited, done = (asm.label() for _ in range(5))
    asm.emit("lea", r14, Mem(rbp, None, 1, 16))
    asm.emit("mov", r15, Mem(rbp, None, 1, 8))
    asm.bind(step)
    _call_chunk(asm, 0)
    asm.emit("test", Mem(r14, None, 1, 8, bits=64), BARRIER)
    asm.emit("je", no_barrier)
    asm.emit("add", r13, 1)
    _move_gates(asm)
    # wait for each worker inside the call, j = t-1 .. 1, to arrive at barrier r13
    asm.emit("mov", r9, Mem(rbp))
    asm.bind(wait)
    asm.emit("sub", r9, 1)
    asm.emit("jle", waited)
    asm.emit("mov", rcx, r9)
    asm.emit("shl", rcx, 8)
    asm.emit("cmp", Mem(rbx, rcx, 1, FIRST + TAKEN), r13)
    asm.emit("je", wait)
    asm.emit("lea", rdi, Mem(rbx, rcx, 1, FIRST + ARRIVED))
    asm.emit("mov", r8, r13)
    _wait_at_least(asm, r12)
    asm.emit("jmp", wait)
    asm.bind(waited)
    asm.emit("mov", r9, Mem(rbp))
    _arrive(asm)
    _next_step(asm)
    asm.emit("sub", r15, 1)
    asm.emit("jne", step)
    asm.emit("jmp", done)
    asm.bind(no_barrier)                        # never the last step (Job gives that a barrier)
    _next_step(asm)
    asm.emit("sub", r15, 1)
    asm.emit("jne", step)
    asm.bind(done)


def _move_gates(asm) -> None:
    """At barrier r13, after step r14 (r15 steps left, this one included): for each worker
    j = 1 .. t-1 that has not claimed the call, move its gate to the next step (JOINED: the
    gate, open when a worker may start there, see Job) with a compare-and-exchange. Moved:
    the step's chunk of j is the main thread's to run (TAKEN = the barrier); failed: j has
    claimed the call, and runs its chunk. A worker woken late (a core's wake-up on a virtual
    machine takes 0.5-1.5 ms) then costs the call its help until it comes, not a wait."""
    closed, scan, inside, done = (asm.label() for _ in range(4))
    asm.emit("mov", rax, Mem(rbp, None, 1, 8))
    asm.emit("sub", rax, r15)
    asm.emit("lea", rdx, Mem(rax, None, 1, 1))          # the next step's index
    _gate(asm, rcx, Mem(rsp, None, 1, _CALL), rdx)
    asm.emit("cmp", r15, 1)
    asm.emit("je", closed)                              # the last step: no next one
    asm.emit("mov", r9, Mem(rbp))
    asm.emit("lea", rax, Mem(r9, r9, 2))
    asm.emit("test", Mem(r14, rax, 8, 16 + 8, bits=64), JOIN_POINT)    # the next step's flags
    asm.emit("je", closed)
    asm.emit("or", rcx, OPEN)
    asm.bind(closed)
    asm.emit("mov", Mem(rsp, None, 1, _NEXT_GATE), rcx)
    asm.emit("mov", Mem(rsp, None, 1, _TAKEN, bits=64), 1)
    asm.bind(scan)
    asm.emit("mov", rcx, Mem(rsp, None, 1, _TAKEN))
    asm.emit("cmp", rcx, Mem(rbp))
    asm.emit("jge", done)
    asm.emit("shl", rcx, 8)
    asm.emit("mov", rax, Mem(rbx, rcx, 1, FIRST + JOINED))
    asm.emit("test", rax, CLAIMED)
    asm.emit("jne", inside)
    asm.emit("mov", rdx, Mem(rsp, None, 1, _NEXT_GATE))
    asm.emit("cmpxchg", Mem(rbx, rcx, 1, FIRST + JOINED, bits=64), rdx)
    asm.emit("jne", inside)                             # claimed just now
    asm.emit("mov", Mem(rbx, rcx, 1, FIRST + TAKEN), r13)
    asm.emit("test", Mem(r14, None, 1, 8, bits=64), OWN_COPIES)
    asm.emit("jne", inside)
    asm.emit("mov", rcx, Mem(rsp, None, 1, _TAKEN))
    _call_chunk(asm, rcx, args_of=0)
    asm.bind(inside)
    asm.emit("add", Mem(rsp, None, 1, _TAKEN, bits=64), 1)
    asm.emit("jmp", scan)
    asm.bind(done)


def _claim(asm, entry, late) -> None:
    """Worker r12 (rcx: its slot offset) claims call r13 of job rbp at its gate, then enters
    _worker_steps at `entry` with the gate's step; `late` when the call ends first. A closed
    gate (the next step reads copies the worker did not make) is waited out."""
    look, wait, count, no_barrier, counted, enter = (asm.label() for _ in range(6))
    asm.bind(look)
    asm.emit("cmp", Mem(rbx, None, 1, EPOCH), r13)
    asm.emit("jg", late)                                # the call is over
    asm.emit("mov", rax, Mem(rbx, rcx, 1, FIRST + JOINED))
    asm.emit("mov", rdx, r13)                           # the epochs as the word holds them: their
    asm.emit("shl", rdx, GATE_SHIFT)                    # low 64 - GATE_SHIFT bits, so that no
    asm.emit("xor", rdx, rax)                           # number of calls overflows the test
    asm.emit("shr", rdx, GATE_SHIFT)
    asm.emit("jne", late)                               # another call's word: this one is over
    asm.emit("test", rax, OPEN)
    asm.emit("je", wait)
    asm.emit("lea", rdx, Mem(rax, None, 1, CLAIMED))
    asm.emit("cmpxchg", Mem(rbx, rcx, 1, FIRST + JOINED, bits=64), rdx)
    asm.emit("je", enter)
    asm.bind(wait)                                      # closed, or moved meanwhile: look again
    asm.emit("pause")
    asm.emit("jmp", look)
    asm.bind(enter)
    # from step 0 to the gate's: r14 to it, r13 past the barriers before it
    asm.emit("shr", rax, 2)
    asm.emit("and", eax, GATE_MASK)
    asm.emit("lea", r14, Mem(rbp, None, 1, 16))
    asm.emit("mov", r15, Mem(rbp, None, 1, 8))
    asm.emit("mov", r9, Mem(rbp))
    asm.emit("lea", r9, Mem(r9, r9, 2))
    asm.emit("shl", r9, 3)
    asm.emit("add", r9, 16)                             # a step's size: 16 + 24 t
    asm.emit("mov", r8, r13)
    asm.bind(count)
    asm.emit("sub", rax, 1)
    asm.emit("jl", counted)
    asm.emit("test", Mem(r14, None, 1, 8, bits=64), BARRIER)
    asm.emit("je", no_barrier)
    asm.emit("add", r13, 1)
    asm.bind(no_barrier)
    asm.emit("add", r14, r9)
    asm.emit("sub", r15, 1)
    asm.emit("jmp", count)
    asm.bind(counted)
    asm.emit("cmp", r13, r8)
    asm.emit("je", entry)                               # at step 0: nothing to wait for
    asm.emit("lea", rdi, Mem(rbx, None, 1, FIRST + ARRIVED))      # the release of the barrier before
    asm.emit("mov", r8, r13)
    _wait_at_least(asm, r12)
    asm.emit("jmp", entry)


def worker_code() -> bytes:
    """void worker(int64_t *team, int64_t i): run every job handed to thread i, forever."""
    asm = Assembler()
    _prologue(asm)
    asm.emit("mov", rbx, rdi)
    asm.emit("mov", r12, rsi)
    top, late, entry = asm.label(), asm.label(), asm.label()
    asm.bind(top)
    # wait for GO(i) beyond the last epoch this thread ran (r13; 0 before the first)
    asm.emit("mov", rcx, r12)
    asm.emit("shl", rcx, 8)
    asm.emit("mov", r13, Mem(rbx, rcx, 1, FIRST + ARRIVED))
    asm.emit("lea", rdi, Mem(rbx, rcx, 1, FIRST + GO))
    asm.emit("lea", r8, Mem(r13, None, 1, 1))
    _wait_at_least(asm, r12)
    asm.emit("mov", rcx, r12)
    asm.emit("shl", rcx, 8)
    asm.emit("mov", r13, Mem(rbx, rcx, 1, FIRST + GO))
    asm.emit("mov", rbp, Mem(rbx, rcx, 1, FIRST + JOB))
    _claim(asm, entry, late)
    _worker_steps(asm, entry)
    asm.emit("jmp", top)
    asm.bind(late)                              # the call is done without it: wait for a later one
    asm.emit("mov", rcx, r12)
    asm.emit("shl", rcx, 8)
    asm.emit("mov", rax, r13)
    asm.emit("xchg", Mem(rbx, rcx, 1, FIRST + ARRIVED), rax)
    asm.emit("jmp", top)
    _epilogue(asm)          # never reached: the thread ends with the process
    return asm.bytes()


def run_code() -> bytes:
    """void run(int64_t *team, int64_t *job): hand the job to its workers, run thread 0's share
    (and that of any worker still outside the call), and return when every step is done."""
    asm = Assembler()
    _prologue(asm, _RUN_FRAME)
    asm.emit("mov", rbx, rdi)
    asm.emit("mov", rbp, rsi)
    asm.emit("xor", r12, r12)
    asm.emit("mov", r13, Mem(rbx, None, 1, EPOCH))
    asm.emit("mov", Mem(rsp, None, 1, _CALL), r13)
    # offer the call to w = t-1 .. 1 (JOB, JOINED: the gate open at step 0, then GO = E),
    # each woken when asleep
    asm.emit("mov", r9, Mem(rbp))

    def hand_over(asm):
        asm.emit("mov", Mem(rbx, rcx, 1, FIRST + JOB), rbp)
        asm.emit("mov", rax, r13)
        asm.emit("shl", rax, GATE_SHIFT)
        asm.emit("or", rax, OPEN)
        asm.emit("mov", Mem(rbx, rcx, 1, FIRST + JOINED), rax)
        asm.emit("mov", rax, r13)
        asm.emit("xchg", Mem(rbx, rcx, 1, FIRST + GO), rax)
    _wake_workers(asm, hand_over)
    _main_steps(asm)
    asm.emit("add", r13, 1)                     # above every barrier of this call
    asm.emit("mov", Mem(rbx, None, 1, EPOCH), r13)
    _epilogue(asm, _RUN_FRAME)
    return asm.bytes()


def wake_code() -> bytes:
    """void wake(int64_t *team, int64_t t): futex-wake each of workers 1 .. t-1 that sleeps, so
    that it spins (a budget) for the call its caller is about to make: a model's first
    parallel layer then finds its workers awake instead of paying a core's wake-up. A hint
    only, with no fence: a worker that falls asleep just after it was looked at is woken, as
    always, by the call itself."""
    asm = Assembler()
    _prologue(asm)
    asm.emit("mov", rbx, rdi)
    asm.emit("mov", r9, rsi)
    _wake_workers(asm)
    _epilogue(asm)
    return asm.bytes()


def _wake_workers(asm, before=None) -> None:
    """For each worker w = r9-1 .. 1 of team rbx: `before(asm)` (rcx holds w's slot offset),
    then futex-wake w's GO word if w sleeps. Uses rax, rcx, rdx, rsi, rdi, r10, r11 and r9."""
    scan, done = asm.label(), asm.label()
    asm.bind(scan)
    asm.emit("sub", r9, 1)
    asm.emit("jle", done)
    asm.emit("mov", rcx, r9)
    asm.emit("shl", rcx, 8)
    if before is not None:
        before(asm)
    asm.emit("cmp", Mem(rbx, rcx, 1, FIRST + SLEEPING, bits=64), 0)
    asm.emit("je", scan)
    asm.emit("lea", rdi, Mem(rbx, rcx, 1, FIRST + GO))
    _futex(asm, _FUTEX_WAKE_PRIVATE, 1)
    asm.emit("jmp", scan)
    asm.bind(done)
