"""The paper's Table 1 operators through the LoopNest backend, with hand-written schedules.

For each operator: compile ms (median of 20 compiles; cpu ms: the same compiles in this
thread's CPU time, which other tenants of a shared machine disturb far less), GFLOPS (best of several timed runs
on plain numpy arrays), % of this CPU's measured FMA peak, the max abs error against
numpy, and numpy's GFLOPS for the matmuls measured in the same run on the same arrays.

    python bench/loopnest.py [--only MM-256,CONV-1] [--target avx2] [--json FILE]

Targets on an AVX2 or AVX-512 machine (single thread): MM-256 and MM-512 >= 90% of peak and >= numpy;
compile <= 5 ms median for every MM schedule and <= 20 ms for every conv schedule.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")          # numpy's BLAS on one core, like us
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from loopstack.backend import compile  # noqa: E402
from loopstack.isa.target import get_target, measure_peak  # noqa: E402
from loopstack.looptree.builders import conv2d_tree, depthwise_conv2d_tree, packed_matmul_tree  # noqa: E402
from loopstack.workloads import conv_reference, dwconv_reference  # noqa: E402


def _mm(n: int):
    return packed_matmul_tree(n, n, n)


def _mm_ref(A, B):
    return A @ B


def _conv(C, K, H, order):
    return conv2d_tree(1, C, H, H, K, 3, 3, padding=1, layout="NHWC", order=order)


def _conv_ref(X, Wt):
    return conv_reference(X[0], Wt)[None]          # batch 1


def _dw(C, H, R, stride, order):
    return depthwise_conv2d_tree(C, H, H, R, R, stride=stride, padding=R // 2, order=order)


def _dw_ref(stride, R):
    return lambda X, Wt: dwconv_reference(X, Wt, stride=stride, pad=R // 2)


# Schedules: (dim, step) outermost first, with a register block per target: rows x columns
# (fp32 elements). Matmuls pack a panel of B as wide as the block, then sweep it with the block
# (packed_matmul_tree): AVX2's 6 x 16 keeps 12 accumulators in its 16 ymm registers with room
# for two B vectors and the A broadcast; AVX-512's 14 x 32 keeps 28 of its 32 zmm registers.
# Convolutions are direct, channels last, with an output-pixels x channels block; the padded
# input is staged by the backend. Depthwise blocks reuse no loaded vector: 12 accumulators.
BLOCKS = {
    "avx2": {"mm": (6, 16), "conv": (6, 16), "dw": (6, 16)},
    "avx512": {"mm": (14, 32), "conv": (14, 32), "dw": (6, 32)},
}


def _conv_order(block, width, small):
    rows, cols = block
    ow = min(rows, width)
    outer = [("n", 1), ("oh", 1), ("k", cols)] if small else [("n", 1), ("k", cols), ("oh", 1)]
    return outer + [("ow", ow), ("r", 1), ("s", 1), ("c", 1), ("ow", 1), ("k", 1)]


def _dw_order(block, channels):
    rows, cols = block
    return [("oh", 1), ("ow", rows), ("c", min(cols, channels)), ("r", 1), ("s", 1), ("ow", 1), ("c", 1)]


def operators(target_name: str) -> dict:
    """name -> (tree builder, numpy reference), with the register blocks of `target_name`."""
    b = BLOCKS.get(target_name, BLOCKS["avx2"])
    mm = lambda n: packed_matmul_tree(n, n, n, mb=b["mm"][0], nb=b["mm"][1])  # noqa: E731
    conv = lambda c, k, h, small: _conv(c, k, h, _conv_order(b["conv"], h, small))  # noqa: E731
    dw = lambda c, h, r, stride: _dw(c, h, r, stride, _dw_order(b["dw"], c))  # noqa: E731
    return {
        "MM-64": (lambda: mm(64), _mm_ref),
        "MM-128": (lambda: mm(128), _mm_ref),
        "MM-256": (lambda: mm(256), _mm_ref),
        "MM-512": (lambda: mm(512), _mm_ref),
        "CONV-1": (lambda: conv(64, 128, 56, False), _conv_ref),
        "CONV-2": (lambda: conv(128, 256, 28, True), _conv_ref),
        "CONV-3": (lambda: conv(256, 512, 14, True), _conv_ref),
        "CONV-4": (lambda: conv(512, 512, 7, True), _conv_ref),
        "DWCONV-1": (lambda: dw(16, 112, 3, 2), _dw_ref(2, 3)),
        "DWCONV-2": (lambda: dw(72, 56, 3, 2), _dw_ref(2, 3)),
        "DWCONV-3": (lambda: dw(88, 28, 3, 1), _dw_ref(1, 3)),
        "DWCONV-4": (lambda: dw(240, 14, 5, 1), _dw_ref(1, 5)),
    }


OPERATORS = operators("avx2")


def _best_seconds(fn, min_time=0.2, rounds=5) -> float:
    fn()
    n, t = 1, 0.0
    while True:                       # calls per round so a round lasts about min_time / rounds
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= min_time / rounds:
            break
        n *= 2
    best = t / n
    for _ in range(rounds - 1):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def run(name: str, target, peak: float) -> dict:
    build, ref = operators(target.name)[name]
    tree = build()
    times, cpu = [], []
    for _ in range(20):
        t0, c0 = time.perf_counter(), time.thread_time()
        kernel = compile(tree, target=target)
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.thread_time() - c0) * 1e3)
    rng = np.random.default_rng(0)
    # plain numpy arrays, as a user passes them (16-byte aligned); schedules pack what they need
    args = [rng.standard_normal(b.shape).astype(np.float32) if b.kind == "input" else np.zeros(b.shape, np.float32)
            for b in tree.arguments]
    kernel(*args)
    inputs = [a for a, b in zip(args, tree.arguments) if b.kind == "input"]
    err = float(np.abs(args[-1] - ref(*inputs)).max())
    seconds = _best_seconds(lambda: kernel._execute(tuple(args)))
    rec = {"name": name, "gflops": kernel.flops / seconds / 1e9, "peak_gflops": peak,
           "compile_ms": statistics.median(times), "compile_cpu_ms": statistics.median(cpu), "max_abs_err": err}
    if name.startswith("MM"):
        A, B = inputs
        rec["numpy_gflops"] = kernel.flops / _best_seconds(lambda: A @ B) / 1e9
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated operator names")
    ap.add_argument("--target", default=None)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    target = get_target(args.target)
    names = args.only.split(",") if args.only else list(OPERATORS)
    print(f"target {target.name}; % peak: of the fp32 FMA peak of one core, probed before each operator")
    print(f"{'operator':<10} {'compile ms':>10} {'cpu ms':>7} {'GFLOPS':>8} {'% peak':>7} {'numpy':>8} {'ratio':>6} "
          f"{'max err':>9}")
    records = []
    for name in names:
        r = run(name, target, measure_peak(target, seconds=0.1))
        records.append(r)
        npg = r.get("numpy_gflops")
        extra = f"{npg:8.1f} {r['gflops'] / npg:6.2f}" if npg else f"{'':8} {'':6}"
        print(f"{name:<10} {r['compile_ms']:10.2f} {r['compile_cpu_ms']:7.2f} {r['gflops']:8.1f} {100 * r['gflops'] / r['peak_gflops']:6.1f}% "
              f"{extra} {r['max_abs_err']:9.1e}", flush=True)
    if args.json:
        from loopstack.timing import write_records
        write_records(args.json, records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
