"""GPU benchmark: loopstack's mma.sync kernels against torch (cuBLAS / cuDNN) in the same run.

Workloads: GEMM 4096^3 in fp16, bf16 (f32 accumulate), float32 as tf32 (against torch with
`allow_tf32`) and int8 (s32); the tensor-core paper's CONV-1..4 (3x3, stride 1, pad 1) in NHWC
fp16, batch 32.  Per kernel: TFLOPS of
loopstack and of torch (CUDA events, best of --runs, device-resident data), the ratio, the
PTX generation time (compile_ms, wall; compile_cpu_ms, this process's CPU time), ptxas's time for the same PTX when ptxas is on the PATH
(ptxas_ms, for reference) with the registers and spill bytes it reports and the CTAs an SM holds
with them (ctas_per_sm), and the driver's JIT time (jit_ms); each result is checked against
torch's.

    python bench/gpu.py [--json FILE] [--runs N] [--search | --tune] [--compile-only] [--only NAME,...]

Knobs: what `lt.compile(C, target="sm_90")` picks (the analytical model's best preset);
with --search, the diversity-aware search on the model (no GPU time); with --tune, the same
search with its candidates timed on the GPU.  --compile-only works on any host: PTX generation and ptxas times and the
model's predicted TFLOPS; without it the benchmark needs an NVIDIA GPU, its driver and torch,
and exits with a message where they are missing.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import loopstack as lt  # noqa: E402
from loopstack.backend.ptx import compile_ptx  # noqa: E402
from loopstack.backend.ptx.match import match  # noqa: E402
from loopstack.backend.ptx.model import ctas_per_sm, default_schedule  # noqa: E402
from loopstack.isa.ptx import driver, ptxas  # noqa: E402
from loopstack.timing import write_records  # noqa: E402
from loopstack.tune.gpu import predict_seconds, tune_gpu  # noqa: E402

CONVS = {"CONV-1": (64, 128, 56), "CONV-2": (128, 256, 28), "CONV-3": (256, 512, 14), "CONV-4": (512, 512, 7)}
BATCH = 32


def _np(dtype):
    if dtype == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype(dtype).type


K_CONTIGUOUS_B = ("int8", "float32")


def gemm_tree(n: int, dtype: str):
    """C = A . B; int8's and float32's B is stored [n, k] (as torch._int_mm wants it, and as
    ldmatrix reads 8- and 32-bit elements without a transpose in shared memory: k contiguous)."""
    s = lt.SymbolGenerator()
    A = lt.Tensor(np.zeros((n, n), _np(dtype))).to(s.m, s.k)
    B = lt.Tensor(np.zeros((n, n), _np(dtype)))
    B = B.to(s.n, s.k) if dtype in K_CONTIGUOUS_B else B.to(s.k, s.n)
    return (A * B).sum(s.k).loop_tree.lower()


def conv_tree(c: int, k: int, h: int, batch: int = BATCH):
    s = lt.SymbolGenerator()
    X = lt.Tensor(np.zeros((batch, h, h, c), np.float16)).to(s.b, s.h, s.w, s.c)
    W = lt.Tensor(np.zeros((3, 3, c, k), np.float16)).to(s.r, s.s, s.c, s.k)
    Xp = lt.nn.pad(X, (s.h, 1), (s.w, 1))
    hh, ww = Xp.symbolic_shape[1:3]
    Xw = Xp.to(s.b, s.oh, s.ow, s.r, s.s, s.c, constraints=[(hh, s.oh + s.r), (ww, s.ow + s.s)])
    return (Xw * W.to(s.r, s.s, s.c, s.k)).sum(s.r, s.s, s.c).loop_tree.lower()


GEMM_DTYPES = ("float16", "bfloat16", "float32", "int8")
NAMES = [f"GEMM-4096-{dt}" for dt in GEMM_DTYPES] + list(CONVS)


def workloads():
    out = [(f"GEMM-4096-{dt}", gemm_tree(4096, dt), "gemm", dt) for dt in GEMM_DTYPES]
    out += [(name, conv_tree(*shape), "conv", "float16") for name, shape in CONVS.items()]
    return out


def workloads_small():
    """Two small kernels of the same kinds (the benchmark's own test)."""
    return [("GEMM-256-float16", gemm_tree(256, "float16"), "gemm", "float16"),
            ("CONV-small", conv_tree(16, 32, 8), "conv", "float16")]


def compile_times(tree, sched, target, rounds=5):
    """Median wall and CPU milliseconds of PTX generation (the CPU time is what the compile
    costs on a machine shared with other work)."""
    wall, cpu = [], []
    for _ in range(rounds):
        c0 = time.process_time()
        k = compile_ptx(tree, target, sched, allow_tf32=True)
        cpu.append((time.process_time() - c0) * 1e3)
        wall.append(k.compile_ms)
    return k, statistics.median(wall), statistics.median(cpu)


def resources(k, target) -> dict:
    """ptxas's registers and spill bytes for the kernel, and the CTAs an SM holds with them."""
    r = ptxas.resources(k.ptx, target)[k.entry]
    return {"registers": r["registers"], "spill_bytes": r["spill_stores"] + r["spill_loads"],
            "ctas_per_sm": ctas_per_sm(k.block[0], r["registers"], k.shared_bytes)}


def _torch_case(name, kind, dtype, tree, torch):
    """Device inputs for loopstack and torch, torch's callable, and loopstack's argument list."""
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    if kind == "gemm":
        n = tree.buffers[0].shape[0]
        if dtype == "int8":
            a = torch.randint(-8, 8, (n, n), device=dev, dtype=torch.int8, generator=g)
            b = torch.randint(-8, 8, (n, n), device=dev, dtype=torch.int8, generator=g)
            out = torch.empty((n, n), device=dev, dtype=torch.int32)
            return [a, b, out], (lambda: torch._int_mm(a, b.t())), out     # b is [n, k]
        tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
        a = torch.randn((n, n), device=dev, dtype=tdt, generator=g)
        b = torch.randn((n, n), device=dev, dtype=tdt, generator=g)
        out = torch.empty((n, n), device=dev, dtype=tdt)
        if dtype in K_CONTIGUOUS_B:       # float32: cuBLAS with TF32, as loopstack's allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = True
            return [a, b, out], (lambda: a @ b.t()), out
        return [a, b, out], (lambda: a @ b), out
    xb, wb, ob = tree.buffers[0], tree.buffers[1], tree.outputs[0]
    x = torch.randn(xb.shape, device=dev, dtype=torch.float16, generator=g)
    w = torch.randn(wb.shape, device=dev, dtype=torch.float16, generator=g) * 0.05
    out = torch.empty(ob.shape, device=dev, dtype=torch.float16)
    xt = x.permute(0, 3, 1, 2)                                   # NCHW view of NHWC memory
    wt = w.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
    return [x, w, out], (lambda: torch.nn.functional.conv2d(xt, wt, padding=1)), out


def _timer(tree, target):
    """seconds(schedule): one candidate's kernel timed on the GPU (the search's measurements)."""
    def seconds(s):
        k = compile_ptx(tree, target, s, allow_tf32=True)
        return k.flops / (k.benchmark(runs=3) * 1e9)
    return seconds


def _as_device(t, torch):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def run(args):
    target = "sm_90"
    gpu = not args.compile_only
    torch = None
    if gpu:
        if not driver.available():
            sys.exit("bench/gpu.py: no CUDA driver and GPU here (the driver says: "
                     f"{_why()}); run with --compile-only for PTX generation times")
        try:
            import torch
        except ImportError:
            sys.exit("bench/gpu.py: torch is needed for the cuBLAS / cuDNN comparison")
        if not torch.cuda.is_available():
            sys.exit("bench/gpu.py: torch sees no CUDA device")
    rows = []
    for name, tree, kind, dtype in workloads():
        if args.only and name not in args.only:
            continue
        con = match(tree)
        sched = tune_gpu(tree, target, allow_tf32=True).best if args.search else default_schedule(con, target)
        if args.tune:
            sched = tune_gpu(tree, target, measure=_timer(tree, target) if gpu else None, generations=6,
                             allow_tf32=True).best
        k, gen_ms, gen_cpu_ms = compile_times(tree, sched, target)
        row = {"name": name, "compile_ms": round(gen_ms, 2), "compile_cpu_ms": round(gen_cpu_ms, 2),
               "predicted_tflops": round(k.flops / predict_seconds(k.contraction, sched) / 1e12, 1)}
        if ptxas.ptxas_path():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            row["ptxas_ms"] = round(ptxas.assemble(k.ptx, target) * 1e3, 1)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            row["ptxas_cpu_ms"] = round((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e3, 1)
            row.update(resources(k, target))
        if gpu:
            devs, ref_fn, out = _torch_case(name, kind, dtype, tree, torch)
            k.function()
            row["jit_ms"] = round(k.jit_ms, 1)
            ours = k.flops / driver.time_launches(lambda: k.launch(*[_as_device(d, torch) for d in devs]),
                                                  args.runs, 2) / 1e12
            ref = ref_fn()
            torch.cuda.synchronize()
            theirs = k.flops / driver.time_launches(ref_fn, args.runs, 2) / 1e12
            k.launch(*[_as_device(d, torch) for d in devs])
            driver.synchronize()
            got = out.float().permute(0, 3, 1, 2) if kind == "conv" else out.float()
            err = float((got - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1e-6))
            row.update(tflops=round(ours, 1), torch_tflops=round(theirs, 1), ratio=round(ours / theirs, 3),
                       max_rel_err=err)
        rows.append(row)
        if args.json:           # after every kernel: a run cut off by a time limit keeps what it measured
            write_records(args.json, rows)
        print(_line(row) + f"\n{'':<20}knobs {' '.join(f'{n}={v}' for n, v in sched.knobs().items())}", flush=True)
    return rows


def _why() -> str:
    try:
        driver.driver()
        return "ok"
    except Exception as e:          # the reason is what the user needs to read
        return str(e).splitlines()[0]


def _line(r) -> str:
    cells = [f"{r['name']:<18}", f"gen {r['compile_ms']:6.2f} ms (cpu {r['compile_cpu_ms']:5.2f})"]
    if "ptxas_ms" in r:
        cells.append(f"ptxas {r['ptxas_ms']:6.1f} ms (cpu {r['ptxas_cpu_ms']:5.1f})")
        cells.append(f"{r['registers']:3d} regs, {r['spill_bytes']} B spilled, {r['ctas_per_sm']} CTA/SM")
    if "tflops" in r:
        cells += [f"jit {r['jit_ms']:6.1f} ms", f"{r['tflops']:7.1f} TFLOPS", f"torch {r['torch_tflops']:7.1f}",
                  f"{100 * r['ratio']:5.1f}%", f"err {r['max_rel_err']:.1e}"]
    cells.append(f"model {r['predicted_tflops']:6.1f} TFLOPS")
    return "  ".join(cells)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the records to this file")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--tune", action="store_true", help="search the knobs, timing candidates on the GPU")
    ap.add_argument("--search", action="store_true", help="the diversity-aware search on the model (no GPU time)")
    ap.add_argument("--compile-only", action="store_true", help="PTX generation only (any host)")
    ap.add_argument("--only", type=lambda v: v.split(","), default=None, metavar="NAME,...",
                    help="these workloads only (GEMM-4096-float16, ..., CONV-4)")
    args = ap.parse_args()
    unknown = [n for n in args.only or () if n not in NAMES]
    if unknown:
        ap.error(f"--only: no workload {', '.join(unknown)} (there are {', '.join(NAMES)})")
    t0 = time.time()
    rows = run(args)
    if args.json:
        write_records(args.json, rows)
    print(f"{len(rows)} kernels in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
