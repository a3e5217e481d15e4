"""Frontend speed: Python expression -> callable kernel, and the per-call overhead of a cached program.

    python bench/frontend.py [--json FILE] [--target avx512|avx2|interp|x86] [--reps N] [--first-runs N]

Programs: a 512^3 matmul, the paper's CONV-2, and the paper's four MLPs (3 x (linear + bias +
relu), constant weights), each with its generated default schedule for the target it compiles for
(`--target avx2` schedules as an AVX2 machine would; the host's target when none is named).
compile_ms: median time from building the expression to a compiled kernel (unify, lower,
backend compile), with the compile cache cleared each time; compile_cpu_ms: the same in this
thread's CPU time (what other tenants of a shared machine disturb far less).  lower_ms: the frontend's
share (build + default schedule + lowering).  cached_overhead_us: median time of
`T.numpy()` on a cached program with the kernel's own work replaced by nothing.
first_call_ms (mm512 and MLP-8x256 only): building the program, scheduling it and its first
`T.numpy()` in a fresh Python process (after `import loopstack`, the data made), minus the same
once warm with the compile cache cleared: what a process pays once for imports, tables and
first-time set-up beyond the steady-state compile (first_call_cpu_ms: in the process's CPU time).
import_ms: `import loopstack` in that process.

The first call is measured with every module's bytecode cached, as an installed package has it
(pip compiles the .pyc files at install), whatever the environment says: the children run with a
pycache prefix of their own (PYTHONPYCACHEPREFIX, a temporary directory), filled before they are
timed by `compileall` of the package and one untimed child (which caches what else the first
call imports: numpy's and the standard library's modules). first_call_nocache_ms is the same
with loopstack's own modules compiled from source in every child (a checkout run with
PYTHONDONTWRITEBYTECODE, or its first run), the other modules' bytecode still cached
(first_call_nocache_cpu_ms: its CPU time).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import loopstack as lt
from loopstack.frontend import run as _run
from loopstack.tune.defaults import default_schedule


_RNG = np.random.default_rng(0)
# the data is made once: the timings are of the frontend and the compiler, not of the RNG
MM_A = _RNG.standard_normal((512, 512)).astype(np.float32)
CONV_X = _RNG.standard_normal((28, 28, 128)).astype(np.float32)
CONV_W = _RNG.standard_normal((3, 3, 128, 256)).astype(np.float32)


def mm512(target=None):
    s = lt.SymbolGenerator()
    a = MM_A
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(a).to(s.k, s.n)).sum(s.k)
    C.set(default_schedule(C, target))    # packed B panels, 6x16 register block
    return C


def conv2(target=None):
    s = lt.SymbolGenerator()
    x, w = CONV_X, CONV_W
    X = lt.nn.pad(lt.Tensor(x).to(s.h, s.w, s.c), (s.h, 1), (s.w, 1))
    W = lt.Tensor(w).to(s.kh, s.kw, s.c, s.o)
    Y = lt.nn.conv(X, W, X.symbolic_shape[:2], (s.kh, s.kw))
    Y.set(default_schedule(Y, target))    # 6-pixel x 16-channel block, channels last
    return Y


def mlp(batch, hidden):
    """The paper's MLP (workloads.py): 3 x relu(linear(Y, W, bias)) with constant weights."""
    def build(target=None):
        s = lt.SymbolGenerator()
        hs = [s.i, s.j, s.l, s.o]
        Y = lt.Tensor(MLP_DATA[batch, hidden][0]).to(s.b, hs[0])
        for i, (w, b) in enumerate(MLP_DATA[batch, hidden][1]):
            W = lt.Tensor(w, constant=True).to(hs[i], hs[i + 1])
            bias = lt.Tensor(b, constant=True).to(hs[i + 1])
            Y = lt.nn.relu(lt.nn.linear(Y, W, bias))
        Y.set(default_schedule(Y, target))
        return Y
    return build


MLPS = ((8, 256), (64, 256), (8, 1024), (64, 1024))
MLP_DATA = {(b, h): (_RNG.standard_normal((b, h)).astype(np.float32),
                     [((_RNG.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32),
                       _RNG.standard_normal(h).astype(np.float32)) for _ in range(3)]) for b, h in MLPS}

# The child of `first_call`: a fresh interpreter times building, scheduling and running one
# program the first time, then the same warm (compile cache cleared, best of several).
_FIRST_CALL = """
import sys, time
sys.path[:0] = [{bench!r}, {root!r}]       # this script, and the loopstack the parent imported
t0 = time.perf_counter()
import loopstack
t1 = time.perf_counter()
import frontend as f
t2, c2 = time.perf_counter(), time.process_time()
f.PROGRAMS[{name!r}]({target!r}).numpy({target!r})
t3, c3 = time.perf_counter(), time.process_time()
warm, warm_cpu = [], []
for _ in range(5):
    f._run._CACHE.clear()
    a, b = time.perf_counter(), time.process_time()
    f.PROGRAMS[{name!r}]({target!r}).numpy({target!r})
    warm.append(time.perf_counter() - a)
    warm_cpu.append(time.process_time() - b)
print((t1 - t0) * 1e3, (t3 - t2) * 1e3, min(warm) * 1e3, (c3 - c2) * 1e3, min(warm_cpu) * 1e3)
"""


def _child_code(name, target) -> str:
    return _FIRST_CALL.format(bench=os.path.dirname(os.path.abspath(__file__)), name=name, target=target,
                              root=os.path.dirname(os.path.dirname(os.path.abspath(lt.__file__))))


def first_call(name, target, runs=3, cache=None):
    """(import_ms, first_call_ms, first_call_cpu_ms): medians over `runs` fresh processes (see
    the module docstring), reading and writing no bytecode but that under the pycache prefix
    `cache` (default: the environment's)."""
    code = _child_code(name, target)
    env = None if cache is None else dict(os.environ, PYTHONPYCACHEPREFIX=cache, PYTHONDONTWRITEBYTECODE="1")
    imports, extra, extra_cpu = [], [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env=env).stdout
        imp, first, warm, first_cpu, warm_cpu = map(float, out.split()[-5:])
        imports.append(imp)
        extra.append(first - warm)
        extra_cpu.append(first_cpu - warm_cpu)
    return statistics.median(imports), statistics.median(extra), statistics.median(extra_cpu)


def bytecode_caches(names, target, root):
    """(a pycache prefix holding the bytecode of loopstack, of this script and of every module
    the first calls of `names` import; the same without loopstack's), made under `root`."""
    package = os.path.dirname(os.path.abspath(lt.__file__))
    warm, cold = os.path.join(root, "warm"), os.path.join(root, "cold")
    env = dict(os.environ, PYTHONPYCACHEPREFIX=warm)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    for name in names:          # one untimed child each: caches numpy's and the stdlib's modules too
        code = _child_code(name, target)
        subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    shutil.copytree(warm, cold)
    # the prefix mirrors absolute source paths
    shutil.rmtree(os.path.join(cold, os.path.relpath(package, os.path.abspath(os.sep))))
    return warm, cold


def bench(name, build, target, reps):
    comp, low, cpu = [], [], []
    for _ in range(reps):
        _run._CACHE.clear()
        t0, c0 = time.perf_counter(), time.thread_time()
        T = build(target)
        T.loop_tree.lower()
        t1 = time.perf_counter()
        T.compile(target)
        t2, c2 = time.perf_counter(), time.thread_time()
        low.append((t1 - t0) * 1e3)
        comp.append((t2 - t0) * 1e3)
        cpu.append((c2 - c0) * 1e3)
    # The overhead of re-running a cached program: `.numpy()` with the kernel's machine code
    # replaced by nothing, so the (millisecond, noisy) kernel time does not drown it.
    T = build(target)
    kernel = T.compile(target)
    T.numpy(target)
    # (x86: every step of the call but the machine code itself, i.e. the argument lookup too)
    field = "_run" if hasattr(kernel, "_run") else "_execute"
    real = getattr(kernel, field)
    setattr(kernel, field, (lambda: None) if field == "_run" else (lambda arrays, checked=True: None))
    over = []
    try:
        for _ in range(200):
            t0 = time.perf_counter()
            T.numpy(target)
            over.append((time.perf_counter() - t0) * 1e6)
    finally:
        setattr(kernel, field, real)
    return {"name": name, "compile_ms": statistics.median(comp), "compile_cpu_ms": statistics.median(cpu),
            "lower_ms": statistics.median(low),
            "cached_overhead_us": statistics.median(over)}


PROGRAMS = {"mm512": mm512, "conv2": conv2, **{f"MLP-{b}x{h}": mlp(b, h) for b, h in MLPS}}
FIRST_CALL = ("mm512", "MLP-8x256")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--target", default=None)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--first-runs", type=int, default=5, help="fresh processes per first-call figure")
    a = ap.parse_args()
    target = a.target or lt.default_target()
    recs = [bench(name, build, target, max(3, a.reps // 2) if name == "conv2" else a.reps)
            for name, build in PROGRAMS.items()]
    with tempfile.TemporaryDirectory(prefix="loopstack-pycache-") as root:
        warm, cold = bytecode_caches(FIRST_CALL, target, root)
        for r in recs:
            if r["name"] in FIRST_CALL:
                r["import_ms"], r["first_call_ms"], r["first_call_cpu_ms"] = first_call(
                    r["name"], target, a.first_runs, warm)
                _, r["first_call_nocache_ms"], r["first_call_nocache_cpu_ms"] = first_call(
                    r["name"], target, a.first_runs, cold)
    print(f"target: {target}")
    for r in recs:
        first = (f"   first call +{r['first_call_ms']:6.1f} ms (cpu +{r['first_call_cpu_ms']:5.1f}, "
                 f"import {r['import_ms']:5.1f} ms; loopstack's bytecode not cached: "
                 f"+{r['first_call_nocache_ms']:6.1f} ms, cpu +{r['first_call_nocache_cpu_ms']:5.1f})" if "first_call_ms" in r else "")
        print(f"{r['name']:11s} compile {r['compile_ms']:8.2f} ms (cpu {r['compile_cpu_ms']:6.2f})   "
              f"lower {r['lower_ms']:7.2f} ms   "
              f"cached overhead {r['cached_overhead_us']:8.1f} us{first}")
    if a.json:
        from loopstack.timing import write_records
        write_records(a.json, recs)


if __name__ == "__main__":
    main()
