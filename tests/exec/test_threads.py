"""The thread team of parallel kernels (backend/threads.py, backend/x86/team.py): balanced
chunks, barriers between steps, workers that sleep and wake, a busy team, the portable team.
Every result is compared bit for bit with the same kernel on one thread."""
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopstack.backend import threads
from loopstack.backend.kernel_base import empty_aligned
from loopstack.backend.threads import chunk_bounds
from loopstack.frontend.run import program
from loopstack.tune.defaults import default_schedule
from loopstack.workloads import get_workload


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 300), t=st.integers(1, 40), tail=st.integers(1, 16))
def test_chunk_bounds_cover_the_loop_in_balanced_whole_iterations(n, t, tail):
    work = n - 1 + tail / 16                     # the last iteration is `tail` sixteenths long
    b = chunk_bounds(n, t, work)
    assert b[0] == 0 and b[-1] == n and len(b) == min(n, t) + 1
    assert all(lo < hi for lo, hi in zip(b, b[1:])), b
    chunks = [(hi - lo) - (1 - tail / 16 if hi == n else 0) for lo, hi in zip(b, b[1:])]
    assert max(chunks) <= work / len(chunks) + 1, (b, chunks)


def test_a_short_last_iteration_gives_its_thread_more_of_the_others():
    assert chunk_bounds(11, 2, 1024 / 96) == [0, 5, 11]       # 5 | 5.67 iterations, not 6 | 4.67
    assert chunk_bounds(16, 2) == [0, 8, 16]
    assert chunk_bounds(4, 3) == [0, 1, 3, 4]


def _kernel(name):
    Y, _ = get_workload(name).build(seed=1)
    Y.set(default_schedule(Y))
    kernel = Y.compile()
    assert kernel._parallel
    return kernel, [r.data for r in program(Y).reads], Y.shape


def _serial(kernel, inputs, shape):
    """The kernel's result on one thread (its thread count is left at 1)."""
    kernel.threads = 1
    out = empty_aligned(shape, np.float32)
    kernel(*inputs, out)
    return out


@pytest.mark.parametrize("count", [2, 3, 4])
def test_layers_meet_at_a_barrier_call_after_call(count):
    """MLP-8x1024: three parallel layers, each reading all of the layer before. A thread that
    ran ahead of a barrier would read a stale row of the previous call's layer."""
    kernel, inputs, shape = _kernel("MLP-8x1024")
    x = inputs[0]
    rng = np.random.default_rng(count)
    out = empty_aligned(shape, np.float32)
    for _ in range(6):
        x[...] = rng.standard_normal(x.shape).astype(np.float32)
        want = _serial(kernel, inputs, shape)
        kernel.threads = count
        for _ in range(5):
            kernel(*inputs, out)
            np.testing.assert_array_equal(out, want)


def _with_deadline(fn, seconds=60):
    failure = []

    def body():
        try:
            fn()
        except BaseException as exc:      # noqa: BLE001 - reported to the test below
            failure.append(exc)
    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"a parallel call did not finish in {seconds} s"
    if failure:
        raise failure[0]


def test_sleeping_workers_wake_for_the_next_call():
    """Calls 20 ms apart: every worker has left its spin and sleeps in futex by then."""
    kernel, inputs, shape = _kernel("MM-256")
    want = _serial(kernel, inputs, shape)
    kernel.threads = 2

    def calls():
        out = empty_aligned(shape, np.float32)
        for _ in range(5):
            time.sleep(0.02)
            out[...] = 0
            kernel(*inputs, out)
            np.testing.assert_array_equal(out, want)
    _with_deadline(calls)


def test_a_wake_gets_a_sleeping_worker_spinning_again():
    """threads.wake (a network calls it as a run starts): a worker asleep in futex wakes and
    spins, its SLEEPING flag cleared, instead of going straight back to sleep on the unchanged
    word; the next call still gets its results."""
    from loopstack.backend.x86 import team as code

    kernel, inputs, shape = _kernel("MM-256")
    want = _serial(kernel, inputs, shape)
    kernel.threads = 2
    out = empty_aligned(shape, np.float32)
    kernel(*inputs, out)
    team = threads.team()
    if not isinstance(team, threads.NativeTeam):
        pytest.skip("the portable team has no sleeping workers (not x86-64 Linux)")
    sleeping = (code.FIRST + code.SLOT + code.SLEEPING) // 8        # worker 1's flag

    def woken():
        deadline = time.perf_counter() + 10
        while team._memory[sleeping] == 0:         # it goes to sleep after its spin
            assert time.perf_counter() < deadline, "the worker never went to sleep"
            time.sleep(0.001)
        for _ in range(500):                        # each wake gives a spin of ~0.8 ms
            threads.wake(2)
            until = time.perf_counter() + 0.002
            while time.perf_counter() < until:
                if team._memory[sleeping] == 0:
                    return
        raise AssertionError("a woken worker went straight back to sleep")
    _with_deadline(woken)
    kernel(*inputs, out)
    np.testing.assert_array_equal(out, want)


def test_workers_keep_off_the_cpu_of_the_thread_that_made_them():
    """Each worker may run on every CPU of the process but one: the one its maker ran on."""
    import os

    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if len(cpus) < 2 or not isinstance(threads.team(), threads.NativeTeam):
        pytest.skip("needs two CPUs and the native team (x86-64 Linux)")
    threads.wake(2)
    deadline = time.perf_counter() + 10
    workers = [t for t in threading.enumerate() if t.name == "loopstack-1"]
    assert workers
    for w in workers:
        while len(os.sched_getaffinity(w.native_id)) != len(cpus) - 1:
            assert time.perf_counter() < deadline, os.sched_getaffinity(w.native_id)
            time.sleep(0.001)


def test_a_caller_moved_onto_a_workers_cpu_goes_home_when_the_team_fills_the_machine():
    import os

    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    team = threads.team()
    if len(cpus) < 2 or not isinstance(team, threads.NativeTeam) or threads._SCHED_GETCPU is None:
        pytest.skip("needs two CPUs, the native team (x86-64 Linux) and sched_getcpu")
    threads.wake(len(cpus))
    home = team._home
    other = min(cpus - {home})
    went = []
    try:
        for _ in range(20):     # (the scheduler may move the thread too, between two lines)
            os.sched_setaffinity(0, {other})       # the scheduler's move, made by hand
            os.sched_setaffinity(0, cpus)
            if threads._SCHED_GETCPU() != other:
                continue
            threads.wake(len(cpus))
            went.append(threads._SCHED_GETCPU())
            assert os.sched_getaffinity(0) == cpus
            if went[-1] == home:
                break
    finally:
        os.sched_setaffinity(0, cpus)
    assert went and went[-1] == home, (home, other, went)


def test_two_callers_at_once_get_their_own_results():
    """A call that finds the team busy runs its chunks on its own thread. (Two kernels: one
    kernel object is not to be called from two threads at once, its pointer blocks are its own.)"""
    names = ["MM-256", "MLP-8x1024"]
    kernels = [_kernel(name) for name in names]
    wants = [_serial(*k) for k in kernels]
    bad = []

    def calls(kernel, inputs, shape, want):
        kernel.threads = 2
        for _ in range(30):
            out = empty_aligned(shape, np.float32)     # new arrays: every call binds anew
            kernel(*inputs, out)
            if not np.array_equal(out, want):
                bad.append(out)

    def both():
        callers = [threading.Thread(target=calls, args=(*k, w)) for k, w in zip(kernels, wants)]
        for c in callers:
            c.start()
        for c in callers:
            c.join()
    _with_deadline(both)
    assert not bad


def test_the_portable_team_gives_the_same_results(monkeypatch):
    monkeypatch.setattr(threads, "_TEAM", threads.PoolTeam())
    kernel, inputs, shape = _kernel("MLP-8x1024")
    want = _serial(kernel, inputs, shape)
    kernel.threads = 3
    out = empty_aligned(shape, np.float32)
    kernel(*inputs, out)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("bad", [threads.MAX_THREADS + 1, 10 ** 6])
def test_more_threads_than_the_team_holds_is_an_error(bad):
    kernel, _, _ = _kernel("MM-256")
    with pytest.raises(threads.ArgumentError, match=f"1 to {threads.MAX_THREADS}"):
        kernel.threads = bad


def test_a_padding_copy_runs_whole_on_every_thread_into_its_own_buffer():
    """CONV-2's padded input is copied by every thread into a buffer of its own (no thread reads
    rows another wrote); a new input is copied again at every call."""
    kernel, inputs, shape = _kernel("CONV-2")
    assert [parallel for _, _, parallel in kernel._steps] == [threads.EVERY_THREAD, True]
    x = inputs[0]
    rng = np.random.default_rng(5)
    out = empty_aligned(shape, np.float32)
    for _ in range(3):
        x[...] = rng.standard_normal(x.shape).astype(np.float32)
        want = _serial(kernel, inputs, shape)
        kernel.threads = 2
        kernel(*inputs, out)
        np.testing.assert_array_equal(out, want)


def test_the_parallel_benchmark_records_identical_results_and_its_bound(tmp_path):
    """bench/parallel.py in one round (its timings are not checked: only what it records)."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "parallel.py"
    spec = importlib.util.spec_from_file_location("bench_parallel", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "parallel.json"
    assert bench.main(["--threads", "2", "--rounds", "1", "--workloads", "MM-256,MLP-8x1024",
                       "--json", str(out)]) == 0
    records = {r["name"]: r for r in json.loads(out.read_text())}
    assert set(records) == {"MM-256-parallel", "MLP-8x1024-parallel"}
    assert all(r["identical"] and r["parallel"] and r["gflops_threads"] > 0 for r in records.values())
    assert records["MM-256-parallel"]["speedup_bound"] == 2.0          # 4 panels, 2 each
    assert records["MLP-8x1024-parallel"]["speedup_bound"] == pytest.approx((1024 / 96) / (5 + 64 / 96))


def test_two_first_parallel_calls_at_once_make_one_team(monkeypatch):
    """A team dropped by a racing second one would leave its workers running unmapped code."""
    kernels = [_kernel(name) for name in ("MM-256", "MLP-8x1024")]
    for k, inputs, shape in kernels:
        k.threads = 2
    for _ in range(5):
        monkeypatch.setattr(threads, "_TEAM", None)
        made = len(threads._TEAMS)
        start = threading.Barrier(2)

        def first_call(kernel, inputs, shape):
            start.wait()
            kernel(*inputs, empty_aligned(shape, np.float32))

        def both():
            callers = [threading.Thread(target=first_call, args=k) for k in kernels]
            for c in callers:
                c.start()
            for c in callers:
                c.join()
        _with_deadline(both)
        assert len(threads._TEAMS) == made + 1


@pytest.mark.parametrize("name", ["MLP-8x1024", "CONV-2"])
def test_a_worker_too_late_to_join_leaves_its_chunks_to_the_caller(monkeypatch, name):
    """A worker that has not claimed a call by a barrier (asleep: a core's wake-up takes
    0.5-1.5 ms on a virtual machine) is left out of the step before it: the caller runs its
    chunk with its own pointer block (CONV-2: not the padding copy, which it has made itself)
    instead of waiting. Here the worker starts only after three calls; once running, it joins."""
    from loopstack.backend.x86 import team as code

    if not isinstance(threads.team(), threads.NativeTeam):
        pytest.skip("the portable team has no late workers (not x86-64 Linux)")
    team = threads.NativeTeam()
    threads._TEAMS.append(team)                 # its memory outlives the worker started below
    monkeypatch.setattr(threads, "_TEAM", team)
    team._started = 2                           # a worker 1 that is not running yet
    kernel, inputs, shape = _kernel(name)
    want = _serial(kernel, inputs, shape)
    kernel.threads = 2
    taken = (code.FIRST + code.SLOT + code.TAKEN) // 8     # the last barrier it was left out at
    arrived = (code.FIRST + code.SLOT + code.ARRIVED) // 8
    out = empty_aligned(shape, np.float32)

    def calls():
        for _ in range(3):
            out[...] = 0
            epoch = int(team._memory[code.EPOCH // 8])
            kernel(*inputs, out)
            np.testing.assert_array_equal(out, want)
            assert team._memory[taken] > epoch          # left out of this very call
        team._started = 1
        team._grow(2)
        deadline = time.perf_counter() + 10
        while team._memory[arrived] == 0:           # it finds the last call done without it
            assert time.perf_counter() < deadline, "the worker never ran"
            time.sleep(0.001)
        for _ in range(20):
            out[...] = 0
            kernel(*inputs, out)
            np.testing.assert_array_equal(out, want)
        for _ in range(1000):                       # running, it joins (unless descheduled)
            epoch = int(team._memory[code.EPOCH // 8])
            kernel(*inputs, out)
            if team._memory[taken] < epoch:
                assert team._memory[arrived] > epoch    # it ran the call's steps
                break
        else:
            raise AssertionError("the running worker never joined a call")
    _with_deadline(calls)


def test_calls_past_the_epochs_a_joined_word_holds_still_share_their_work(monkeypatch):
    """A JOINED word keeps an epoch's low 40 bits (the gate below them): after 2**40 epochs (a
    network's 60-odd barriers a call, for months) a worker must still recognise its call."""
    from loopstack.backend.x86 import team as code

    if not isinstance(threads.team(), threads.NativeTeam):
        pytest.skip("the portable team has no JOINED words (not x86-64 Linux)")
    team = threads.NativeTeam()
    threads._TEAMS.append(team)
    monkeypatch.setattr(threads, "_TEAM", team)
    team._memory[code.EPOCH // 8] = (1 << (64 - code.GATE_SHIFT)) - 3     # a few calls from the wrap
    kernel, inputs, shape = _kernel("MLP-8x1024")
    want = _serial(kernel, inputs, shape)
    kernel.threads = 2
    out = empty_aligned(shape, np.float32)
    arrived = (code.FIRST + code.SLOT + code.ARRIVED) // 8

    def calls():
        joined = 0
        for _ in range(200):
            epoch = int(team._memory[code.EPOCH // 8])
            out[...] = 0
            kernel(*inputs, out)
            np.testing.assert_array_equal(out, want)
            joined += team._memory[arrived] > epoch
        assert team._memory[code.EPOCH // 8] > 1 << (64 - code.GATE_SHIFT)
        assert joined >= 10, joined                 # spinning between calls, it joins them
    _with_deadline(calls)
