"""One kernel object called from several Python threads at once: each call computes its own
arrays' result (compile() hands the same kernel to every caller of one program, so callers on
different threads share it without knowing)."""
import threading

import numpy as np

import loopstack as lt
from loopstack.tune.defaults import default_schedule


def test_a_kernel_called_from_two_threads_at_once_computes_each_callers_result():
    rng = np.random.default_rng(0)
    s = lt.SymbolGenerator()
    A0, B0 = rng.standard_normal((192, 256)).astype(np.float32), rng.standard_normal((256, 256)).astype(np.float32)
    C = (lt.Tensor(A0).to(s.m, s.k) * lt.Tensor(B0).to(s.k, s.n)).sum(s.k)
    C.set(default_schedule(C))            # B packed panel by panel: a temp every call writes
    kernel = C.compile()
    assert kernel.lowered.temps, "the schedule should stage B in a temp"
    wrong, errors = [], []

    def caller(seed):
        r = np.random.default_rng(seed)
        A, B = r.standard_normal((192, 256)).astype(np.float32), r.standard_normal((256, 256)).astype(np.float32)
        want = A @ B
        try:
            for i in range(60):
                out = np.zeros((192, 256), np.float32)
                kernel(A, B, out)
                if not np.allclose(out, want, rtol=1e-4, atol=1e-4):
                    wrong.append((seed, i))
        except Exception as e:     # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(seed,)) for seed in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not wrong, (errors, wrong[:5])


def test_a_forked_child_can_call_a_kernel_whose_lock_was_held_at_the_fork():
    import os
    import signal

    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((32, 48)).astype(np.float32), rng.standard_normal((48, 64)).astype(np.float32)
    s = lt.SymbolGenerator()
    kernel = (lt.Tensor(A).to(s.m, s.k) * lt.Tensor(B).to(s.k, s.n)).sum(s.k).compile()
    kernel._lock.acquire()          # a call in progress on another thread when the process forks
    try:
        pid = os.fork()
        if pid == 0:                # the child: a hang would end in SIGALRM, a wrong result in 1
            signal.alarm(20)
            out = np.zeros((32, 64), np.float32)
            kernel(A, B, out)
            os._exit(0 if np.allclose(out, A @ B, rtol=1e-4, atol=1e-4) else 1)
    finally:
        kernel._lock.release()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
