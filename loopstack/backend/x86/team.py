"""The machine code of a thread team on x86-64 Linux: worker threads that wait for work in
native code, and the call that hands a kernel's steps to them (backend/threads.py drives both).

Handing work to a thread costs a wake-up; on a virtual machine an idle core's wake-up takes
50-100 us, as long as a whole MLP layer. So a worker that finished waits by spinning (`pause`,
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

A job (int64 words): [threads t, steps S] then per step [function, barrier, t x (args, start,
end)]: thread i calls function(args_i, start_i, end_i) when start_i < end_i, then, when the
step's barrier word is not 0, every thread meets at a barrier (the last step always has one;
a step run by thread 0 alone followed by another needs none: thread 0 runs them in order).
A call of epoch E with B barriers numbers them E+1 .. E+B; the next call's epoch is E+B+1,
so every thread's ARRIVED only grows and a barrier is "every ARRIVED >= its number".
Workers do not wait at the last barrier (the main thread does, and then returns).

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
ARRIVED, SLEEPING, GO, JOB = 0, 8, 128, 136
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


def _prologue(asm) -> None:
    for r in _CALLEE_SAVED:
        asm.emit("push", r)
    asm.emit("sub", rsp, 8)                     # 16-byte aligned stack at the kernels' calls


def _epilogue(asm) -> None:
    asm.emit("add", rsp, 8)
    for r in reversed(_CALLEE_SAVED):
        asm.emit("pop", r)
    asm.emit("ret")


def _run_steps(asm) -> None:
    """Thread r12 runs job rbp of epoch r13 on team rbx (r14: the step, r15: steps left)."""
    step, skip, next_step, no_barrier, done = (asm.label() for _ in range(5))
    asm.emit("lea", r14, Mem(rbp, None, 1, 16))
    asm.emit("mov", r15, Mem(rbp, None, 1, 8))
    asm.bind(step)
    # this thread's (args, start, end) at step + 16 + 24*i
    asm.emit("lea", rax, Mem(r12, r12, 2))
    asm.emit("lea", rax, Mem(r14, rax, 8, 16))
    asm.emit("mov", rdi, Mem(rax))
    asm.emit("mov", rsi, Mem(rax, None, 1, 8))
    asm.emit("mov", rdx, Mem(rax, None, 1, 16))
    asm.emit("cmp", rsi, rdx)
    asm.emit("jge", skip)
    asm.emit("call", Mem(r14, bits=64))
    asm.bind(skip)
    # arrive at barrier E + (barriers passed): the job is not read after this on the last step
    # (the main thread may return and free it), so t, the step's stride and its barrier flag
    # are read first (lea and mov leave the flags of the cmp alone)
    asm.emit("mov", r9, Mem(rbp))
    asm.emit("cmp", Mem(r14, None, 1, 8, bits=64), 0)
    asm.emit("lea", rax, Mem(r9, r9, 2))
    asm.emit("lea", r14, Mem(r14, rax, 8, 16))
    asm.emit("je", no_barrier)
    asm.emit("add", r13, 1)
    asm.emit("mov", r8, r13)
    asm.emit("mov", rax, r13)
    asm.emit("xchg", _slot(asm, r12, ARRIVED), rax)
    asm.emit("mov", rcx, r12)                   # _wake_sleepers' word must not use rcx
    asm.emit("shl", rcx, 8)
    asm.emit("lea", rdi, Mem(rbx, rcx, 1, FIRST + ARRIVED))
    asm.emit("mov", r10, rdi)
    _wake_sleepers(asm, Mem(r10), r9)
    asm.emit("sub", r15, 1)
    asm.emit("jne", next_step)
    asm.emit("test", r12, r12)                  # the last barrier: workers leave, the main thread waits
    asm.emit("jne", done)
    asm.bind(next_step)
    # wait until every other thread arrived: j from r9-1 down to 0
    wait, after = asm.label(), asm.label()
    asm.bind(wait)
    asm.emit("sub", r9, 1)
    asm.emit("jl", after)
    asm.emit("cmp", r9, r12)
    asm.emit("je", wait)
    asm.emit("mov", rcx, r9)
    asm.emit("shl", rcx, 8)
    asm.emit("lea", rdi, Mem(rbx, rcx, 1, FIRST + ARRIVED))
    _wait_at_least(asm, r12)
    asm.emit("jmp", wait)
    asm.bind(after)
    asm.emit("test", r15, r15)
    asm.emit("jne", step)
    asm.emit("jmp", done)
    asm.bind(no_barrier)                        # never the last step (Job gives that a barrier)
    asm.emit("sub", r15, 1)
    asm.emit("jne", step)
    asm.bind(done)


def worker_code() -> bytes:
    """void worker(int64_t *team, int64_t i): run every job handed to thread i, forever."""
    asm = Assembler()
    _prologue(asm)
    asm.emit("mov", rbx, rdi)
    asm.emit("mov", r12, rsi)
    top = asm.label()
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
    _run_steps(asm)
    asm.emit("jmp", top)
    _epilogue(asm)          # never reached: the thread ends with the process
    return asm.bytes()


def run_code() -> bytes:
    """void run(int64_t *team, int64_t *job): hand the job to its workers, run thread 0's share,
    and return when every thread has finished every step."""
    asm = Assembler()
    _prologue(asm)
    asm.emit("mov", rbx, rdi)
    asm.emit("mov", rbp, rsi)
    asm.emit("xor", r12, r12)
    asm.emit("mov", r13, Mem(rbx, None, 1, EPOCH))
    # GO(w) = E for w = t-1 .. 1, each woken when asleep
    asm.emit("mov", r9, Mem(rbp))

    def hand_over(asm):
        asm.emit("mov", Mem(rbx, rcx, 1, FIRST + JOB), rbp)
        asm.emit("mov", rax, r13)
        asm.emit("xchg", Mem(rbx, rcx, 1, FIRST + GO), rax)
    _wake_workers(asm, hand_over)
    _run_steps(asm)
    asm.emit("add", r13, 1)                     # above every barrier of this call
    asm.emit("mov", Mem(rbx, None, 1, EPOCH), r13)
    _epilogue(asm)
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
