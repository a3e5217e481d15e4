"""`loopstack bench`: the paper's workloads, compiled with their best known schedule, checked
against numpy and timed side by side with numpy, PyTorch and Halide, single-threaded.

One table row per workload: name, shape, GFLOPS, % of peak, compile ms, max error, each peer's
GFLOPS with loopstack's ratio to it, and whether the workload's target is met. `--json FILE`
writes one record per workload (see `record()`).
"""
from __future__ import annotations

import os
import sys
import time

HELP = "benchmark the paper's workloads against numpy, PyTorch and Halide"
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
SUITE_CHOICES = ("paper", "mm", "conv", "dwconv", "mlp", "mbv3", "all", "int8", "nets")


def add_arguments(parser) -> None:
    parser.add_argument("--suite", default="paper", choices=SUITE_CHOICES, help="which workloads (default: paper)")
    parser.add_argument("--workload", "-w", action="append", default=[], metavar="NAME",
                        help="run only these workloads (repeatable)")
    parser.add_argument("--json", metavar="FILE", help="write one JSON record per workload")
    parser.add_argument("--compare", default="numpy,torch", metavar="PEERS",
                        help="comma-separated peers: numpy,torch,halide,onnxruntime,xnnpack (default "
                             "numpy,torch; '' for none); all single-threaded")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
                        help="also time loopstack's kernels on N threads (the peers stay single-threaded)")
    parser.add_argument("--runs", type=int, default=10, help="timed runs per measurement (best counts)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of (loopstack, peers) per workload; the median of the rounds' bests counts")
    parser.add_argument("--plot", metavar="FILE.png", help="also plot GFLOPS per workload (needs matplotlib)")
    parser.add_argument("--target", default=None, help="x86 target (default: the host's widest)")
    parser.add_argument("--db", metavar="PATH", default=None,
                        help="tuning database whose best schedules to use (default: $LOOPSTACK_TUNING_DB, "
                             "else ~/.cache/loopstack/tuning.db; 'off': default schedules only)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


# ---------------------------------------------------------------------------- targets (this issue)
def goals(name: str) -> list:
    """[(description, check(row) -> bool | None)] for a workload; None when unmeasurable here."""
    def ratio(peer, factor, key="gflops"):
        def f(r):
            v = (r["peer_layouts"].get("channels_last") if key == "channels_last" else r["peers"].get(peer))
            return None if not v else r["gflops"] >= factor * v
        return f

    def peak(frac):
        return lambda r: percent_of_peak(r) >= 100 * frac

    def compile_le(ms):
        return lambda r: r["compile_ms"] <= ms

    def halide_30x(r):
        h = r["peer_compile_ms"].get("halide")
        return None if not h else h >= 30 * r["compile_ms"]

    if name == "MM-64":
        return [(">=1.2x numpy", ratio("numpy", 1.2)), ("compile<=5ms", compile_le(5)), ("30x halide compile", halide_30x)]
    if name.startswith("MM-"):
        g = [(">=1.0x numpy", ratio("numpy", 1.0)), ("compile<=5ms", compile_le(5)),
             ("30x halide compile", halide_30x)]
        if name in ("MM-256", "MM-512"):
            g.append((">=90% peak", peak(0.90)))
        return g
    if name.startswith("CONV-"):
        return [(">=1.0x torch", ratio("torch", 1.0)), (">=85% peak", peak(0.85)), ("compile<=20ms", compile_le(20))]
    if name.startswith("DWCONV-"):
        return [(">=2x torch channels_last", ratio("torch", 2.0, "channels_last")), ("compile<=20ms", compile_le(20))]
    if name.startswith("MLP-"):
        return [(">=1.0x torch eager", ratio("torch", 1.0))]
    return []


def verdict(row: dict) -> tuple[str, list]:
    """("ok" | "miss" | "-", [descriptions of missed goals])."""
    missed, checked = [], 0
    for desc, check in goals(row["name"]):
        res = check(row)
        if res is None:
            continue
        checked += 1
        if not res:
            missed.append(desc)
    return ("miss" if missed else "ok" if checked else "-"), missed


# ---------------------------------------------------------------------------- measuring
def percent_of_peak(row: dict) -> float:
    """The row's share of the FMA peak: the median over its rounds of its GFLOPS against the
    peak probed just before them (rows of older records: against the one peak they carry)."""
    if row.get("peak_percent") is not None:
        return row["peak_percent"]
    return 100 * row["gflops"] / row["peak_gflops"]


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def compile_ms(tree, target=None, repeat: int = 5) -> float:
    """Median wall time of lowering + compiling `tree` (no compile cache). Call it after a first
    compile: the first one in a process also imports and warms the code generator."""
    from .. import backend

    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        ir = tree.lower()
        backend.compile(ir, target=target)
        times.append((time.perf_counter() - t0) * 1e3)
    return _median(times)


def measure_workload(w, peers=(), runs: int = 10, rounds: int = 3, target=None, seed: int = 0,
                     db_path=None, threads: int = 1) -> dict:
    """Build, schedule, compile, check and time one workload; the JSON record. Its `gflops` are
    on one thread, like the peers'; with `threads` > 1, `gflops_threads` on that many too."""
    import numpy as np

    from .. import peers as P
    from ..backend.kernel_base import empty_aligned
    from ..frontend.run import program
    from ..isa.target import host_target, measure_peak
    from ..timing import BENCH_MIN_SECONDS
    from ..tune.defaults import chosen_schedule

    tgt = host_target() if target is None else target
    Y, reference = w.build(seed)
    tree, origin = chosen_schedule(Y, tgt, db_path)
    Y.set(tree)
    kernel = Y.compile()
    kernel.threads = 1          # compared with single-threaded peers and one core's peak
    cms = compile_ms(tree, None if target is None else target)
    inputs = [r.data for r in program(Y).reads]
    out = empty_aligned(Y.shape, np.float32)
    kernel(*inputs, out)
    ref = reference()
    err = float(np.max(np.abs(out - ref))) if out.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 1.0
    arrays = w.arrays(seed)    # the same values, for the peers (aligned like the kernel's)
    mine, peaks, shares, theirs, layouts, pcompile, notes = [], [], [], {p: [] for p in peers}, {}, {}, {}
    multi = []
    for _ in range(max(1, rounds)):
        # a peak probed beside every round: on a shared machine the core's speed drifts (by a
        # third within minutes on a cloud Xeon), and a slow phase then slows both sides of the ratio
        peaks.append(measure_peak(tgt, seconds=0.05))
        mine.append(kernel.benchmark(*inputs, out, runs=runs, min_seconds=BENCH_MIN_SECONDS))
        shares.append(100 * mine[-1] / peaks[-1])
        if threads > 1:
            kernel.threads = threads
            multi.append(kernel.benchmark(*inputs, out, runs=runs, min_seconds=BENCH_MIN_SECONDS))
            kernel.threads = 1
        for p in peers:
            try:
                res = P.measure(p, w, arrays, runs=runs)
            except P.PeerSkipped as exc:
                notes[p] = str(exc)
                continue
            theirs[p].append(res.gflops)
            if res.compile_ms is not None:
                pcompile.setdefault(p, res.compile_ms)
            if p == "torch":
                for k, v in P.torch_layout_gflops(w, arrays, runs=max(3, runs // 2)).items():
                    layouts.setdefault(k, []).append(v)
    return {
        "name": w.name,
        "shape": w.shape,
        "flops": w.flops,
        "gflops": _median(mine),
        "peak_gflops": _median(peaks),
        "peak_percent": _median(shares),
        "compile_ms": cms,
        "max_abs_err": err,
        "max_abs_ref": scale,
        "correct": bool(err <= 1e-3 * max(1.0, scale)),
        "peers": {p: (_median(v) if v else None) for p, v in theirs.items()},
        "peer_compile_ms": pcompile,
        "peer_layouts": {k: _median(v) for k, v in layouts.items()},
        "skipped": notes,
        "target": tgt.name,
        "schedule": _schedule_text(tree),
        "schedule_origin": origin,
        "threads": threads,
        "gflops_threads": _median(multi) if multi else None,
        "parallel": kernel_is_parallel(kernel),
    }


def measure_fp16_workload(w, runs: int = 10, rounds: int = 3, seed: int = 0, db_path=None) -> dict:
    """One workload on `neon_fp16` (fp16 storage and arithmetic): the schedule chosen for it, the
    program's loop tree in float16, checked against the fp32 reference with fp16's tolerance
    (each output a sum of n fp16 terms: n x 2^-10 of the output's scale) and timed against the
    fp16 FMA peak. No peers: none computes fp16 on this core."""
    import numpy as np

    from ..backend import compile as compile_tree
    from ..backend.native import in_float16
    from ..frontend.run import program
    from ..isa.target import get_target, measure_peak
    from ..looptree import stats
    from ..timing import BENCH_MIN_SECONDS
    from ..tune.defaults import chosen_schedule

    tgt = get_target("neon_fp16")
    Y, reference = w.build(seed)
    tree, origin = chosen_schedule(Y, tgt, db_path)
    Y.set(tree)
    tree16 = in_float16(tree.lower())
    compile_tree(tree16, target=tgt)                        # the first compile warms the tables
    t0 = time.perf_counter()
    kernel = compile_tree(tree16, target=tgt)
    cms = (time.perf_counter() - t0) * 1e3
    kernel.threads = 1
    inputs = [np.asarray(r.data, np.float16) for r in program(Y).reads]
    out = np.zeros(Y.shape, np.float16)
    kernel(*inputs, out)
    ref = reference()
    err = float(np.max(np.abs(out.astype(np.float32) - ref))) if out.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 1.0
    terms = max(1, stats.flops(tree16) // max(1, 2 * out.size))
    mine, peaks = [], []
    for _ in range(max(1, rounds)):
        peaks.append(measure_peak(tgt, seconds=0.05))
        mine.append(kernel.benchmark(*inputs, out, runs=runs, min_seconds=BENCH_MIN_SECONDS))
    return {"name": w.name, "shape": w.shape, "flops": w.flops, "gflops": _median(mine),
            "peak_gflops": _median(peaks), "peak_percent": 100 * _median(mine) / _median(peaks),
            "compile_ms": cms, "max_abs_err": err, "max_abs_ref": scale,
            "correct": bool(err <= (terms + 2) * 2.0 ** -10 * max(1.0, scale)), "peers": {},
            "peer_compile_ms": {}, "peer_layouts": {}, "skipped": {}, "target": tgt.name,
            "schedule": _schedule_text(tree), "schedule_origin": origin, "threads": 1,
            "gflops_threads": None, "parallel": False}


def emulated() -> bool:
    """Whether this AArch64 process runs under a user-mode emulator (qemu-aarch64): the kernel
    then shows the host's /proc/cpuinfo, an x86 one."""
    from ..isa.target import host_arch

    if host_arch() != "aarch64":
        return False
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return False
    return "vendor_id" in text or "\nflags" in text


def kernel_is_parallel(kernel) -> bool:
    """Whether a kernel has a loop that runs on several threads (tune.defaults.parallelize)."""
    return bool(getattr(kernel, "_parallel", False))


def _schedule_text(tree) -> list:
    g = tree.graph
    return [f"%{i} {g.node(i).fn}: " + " ".join(f"{v}({s}{'r' + str(t) if t else ''})" for v, s, t in ns.order)
            for i, ns in tree.schedule if g.reduced(g.node(i))]


# ---------------------------------------------------------------------------- output
def _progress(i, n, label, enabled):
    if not enabled:
        return
    width = 24
    done = int(width * i / n) if n else width
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {label:<28}")
    if i == n:
        sys.stderr.write("\n")
    sys.stderr.flush()


def format_table(rows: list, peers: list) -> str:
    head = f"{'workload':<11} {'shape':<30} {'sched':<7} {'GFLOPS':>7} {'%peak':>6} {'comp ms':>8} {'max err':>9}"
    threads = max([r.get("threads", 1) for r in rows] + [1])
    if threads > 1:
        head += f" {f'{threads} thr GF':>10} {'x':>5}"
    for p in peers:
        head += f" {p + ' GF':>10} {'ratio':>6}"
    head += "  target"
    lines = [head, "-" * len(head)]
    for r in rows:
        s = (f"{r['name']:<11} {r['shape'][:30]:<30} {r['schedule_origin']:<7} {r['gflops']:7.1f} {percent_of_peak(r):5.1f}%"
             f" {r['compile_ms']:8.2f} {r['max_abs_err']:9.2e}")
        if threads > 1:
            g = r.get("gflops_threads")
            s += f" {g:10.1f} {g / r['gflops']:4.2f}x" if g else f" {'-':>10} {'':>5}"
        for p in peers:
            v = r["peers"].get(p)
            s += f" {v:10.1f} {r['gflops'] / v:5.2f}x" if v else f" {'skipped':>10} {'':>6}"
        status, missed = verdict(r)
        s += f"  {status}" + (f" ({'; '.join(missed)})" if missed else "")
        if not r["correct"]:
            s += "  WRONG RESULT"
        lines.append(s)
    return "\n".join(lines)


def record(row: dict) -> dict:
    """The JSON record of a row (the DESIGN.md convention plus the benchmark's fields)."""
    status, missed = verdict(row)
    rec = {k: row[k] for k in ("name", "gflops", "peak_gflops", "peak_percent", "compile_ms", "max_abs_err",
                               "peers", "peer_compile_ms")}
    rec.update(shape=row["shape"], flops=row["flops"], target=row["target"], peer_layouts=row["peer_layouts"],
               skipped=row["skipped"], correct=row["correct"], status=status, missed=missed,
               schedule=row["schedule"], schedule_origin=row["schedule_origin"], threads=row["threads"],
               gflops_threads=row["gflops_threads"], parallel=row["parallel"])
    return rec


def _plot(rows, peers, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from ..errors import UnsupportedError

        raise UnsupportedError("--plot needs matplotlib, which is not installed") from None
    names = [r["name"] for r in rows]
    series = [("loopstack", [r["gflops"] for r in rows])] + [(p, [r["peers"].get(p) or 0 for r in rows]) for p in peers]
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.7), 4))
    wdt = 0.8 / len(series)
    for i, (label, ys) in enumerate(series):
        ax.bar([x + i * wdt for x in range(len(rows))], ys, wdt, label=label)
    ax.set_xticks([x + 0.4 - wdt / 2 for x in range(len(rows))], names, rotation=45, ha="right")
    ax.set_ylabel("GFLOPS (1 thread)")
    ax.axhline(rows[0]["peak_gflops"], color="k", lw=0.8, ls="--", label="peak")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


# ---------------------------------------------------------------------------- the command
def parse_peers(text: str) -> list:
    from ..errors import ArgumentError
    from ..peers import PEERS

    names = [p.strip().lower() for p in (text or "").split(",") if p.strip()]
    bad = [p for p in names if p not in PEERS]
    if bad:
        raise ArgumentError(f"unknown peer(s) {', '.join(bad)}; known: {', '.join(PEERS)}")
    return list(dict.fromkeys(names))


def select(args) -> list:
    from ..workloads import get_workload, suite

    if args.workload:
        return [get_workload(n) for n in args.workload]
    return suite(args.suite)


def _reexec_single_threaded() -> None:
    """BLAS pools size themselves when numpy loads: when this process is `loopstack bench` and the
    thread variables are not set, run again with them set (before anything imports numpy)."""
    if all(os.environ.get(v) == "1" for v in _THREAD_VARS) or os.environ.get("LOOPSTACK_BENCH_CHILD"):
        return
    if sys.argv[1:2] != ["bench"]:
        for v in _THREAD_VARS:     # in-process use (tests, notebooks): best effort
            os.environ.setdefault(v, "1")
        return
    env = dict(os.environ, LOOPSTACK_BENCH_CHILD="1", **{v: "1" for v in _THREAD_VARS})
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, "-m", "loopstack", *sys.argv[1:]], env)
    except OSError:     # an interpreter the kernel cannot exec by itself (run under qemu-user)
        os.environ.update({v: "1" for v in _THREAD_VARS})


def run(args) -> int:
    from ..errors import ArgumentError

    if args.suite == "int8":            # quantized kernels and their own peers (commands/bench_int8.py)
        _reexec_single_threaded()
        from .bench_int8 import run as run_int8

        return run_int8(args)
    if args.suite == "nets":   # whole ONNX networks against onnxruntime (loopstack/onnx/netbench.py)
        from ..onnx.netbench import main as nets

        return nets([*(["--json", args.json] if args.json else []), "--rounds", str(max(args.runs, 5)),
                     "--threads", str(args.threads)])
    if args.threads < 1:
        raise ArgumentError(f"--threads {args.threads}: expected a positive thread count")
    peers = parse_peers(args.compare)
    workloads = select(args)
    _reexec_single_threaded()
    from .. import peers as P
    from ..isa.cpu import cpu_features
    from ..isa.target import get_target, host_target

    target = get_target(args.target) if args.target else None
    for p in peers:
        if not P.available(p):
            print(f"loopstack: note: peer {p} is not installed: skipped", file=sys.stderr)
    rows = []
    show = not args.no_progress
    for i, w in enumerate(workloads):
        _progress(i, len(workloads), w.name, show)
        rows.append(measure_workload(w, peers, runs=args.runs, rounds=args.rounds, target=target,
                                     db_path=args.db, threads=args.threads))
    fp16_rows = []
    if target is None and host_target().arch == "aarch64" and "asimdhp" in cpu_features():
        for i, w in enumerate(workloads):        # the same suite on neon_fp16, fp16 arithmetic
            _progress(i, len(workloads), f"{w.name} neon_fp16", show)
            fp16_rows.append(measure_fp16_workload(w, runs=args.runs, rounds=args.rounds, db_path=args.db))
    _progress(len(workloads), len(workloads), "done", show)
    if emulated():
        print("EMULATED: this AArch64 process runs under a user-mode emulator (qemu); the timings below "
              "say nothing about an ARM core (bench/aarch64.py predicts them with llvm-mca)")
    print(format_table(rows, peers))
    if fp16_rows:
        print("\nneon_fp16 (fp16 storage and arithmetic; %peak of the fp16 FMA peak):")
        print(format_table(fp16_rows, []))
        rows += fp16_rows
    met = sum(verdict(r)[0] == "ok" for r in rows)
    judged = sum(verdict(r)[0] != "-" for r in rows)
    print(f"\n{met}/{judged} workloads meet their targets; peak {_median([r['peak_gflops'] for r in rows]):.1f} GFLOPS"
          f" (median of the probes beside every round; %peak is each round's share of its own)"
          if rows else "no workloads")
    if any(w.kind != "mm" for w in workloads):
        print("(network weights and biases are constant inputs: their packed copies are built once, "
              "at the first call)")
    if args.json:
        from ..timing import write_records
        write_records(args.json, [record(r) for r in rows])
    if args.plot:
        _plot(rows, peers, args.plot)
    return 0 if all(r["correct"] for r in rows) else 1
