"""The nets bench: whole networks through loopstack and onnxruntime, one thread each.

    python3 bench/nets.py [--model NAME]... [--rounds N] [--threads N] [--json FILE]
    python3 bench/nets.py --layers [--model NAME]...    where the time goes, layer by layer
    loopstack bench --suite nets [--json FILE]

Each (model, engine) first runs in a child process of its own, so that its peak memory (the
process's high-water resident set, less what it held before the engine saw the model) and
its compile time (from the ONNX file on disk to the first result, the engine's code already
imported, loopstack's bytecode cached as an installed package has it) are its own. Latency is
then measured with both engines in one process, one call of each per round, alternating, so
that both see the same phases of a shared machine: the median of `rounds` calls ("speed":
onnxruntime's median over loopstack's) and the best ("best": the same ratio of the fastest
calls, which a busy machine disturbs less); loopstack's max abs error is taken
against onnxruntime's output on the same input. onnxruntime runs with intra_op_num_threads=1,
sequential execution and every graph optimisation; loopstack's parallel loops run on one
thread (`lt.onnx.compile(..., threads=1)`). With `--threads N`, loopstack on N threads joins
the interleaved calls ("ls Nt ms", "scaling"), and both engines' N-thread speed-ups are also
measured in a steady state, in blocks of consecutive calls ("ls xN", "ort xN": steady_scaling).

Two more peers (`--peers torch,tvm`, both by default where installed): torch eager, the
graph's nodes dispatched one by one to torch operators on one thread (`peers/torch_onnx.py`;
interleaved with the others), and TVM's Relax frontend building the file untuned for this CPU
(`peers/tvm_onnx.py`; its first result includes the build, and its calls are timed in its own
process only, at most TVM_ROUNDS of them: untuned code takes seconds per image). Their errors
are taken against onnxruntime's output too.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ENGINES = ("loopstack", "onnxruntime")
PEER_ENGINES = ("torch", "tvm")          # optional peers (loopstack/peers/*_onnx.py)
TVM_ROUNDS = 3
# the modules loopstack imports on the way from an ONNX file to the first result
COMPILE_PATH = ("loopstack.onnx.model", "loopstack.onnx.ops", "loopstack.onnx.schedules", "loopstack.tune.defaults",
                "loopstack.tune.lookup", "loopstack.frontend.run", "loopstack.backend.native",
                "loopstack.backend.x86.emitter", "loopstack.isa.x86.assembler", "loopstack.isa.execmem")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TVM_NUM_THREADS")


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _rss_kib() -> int:
    return _status_kib("VmRSS")


def _peak_kib() -> int:
    # VmHWM belongs to the address space, which exec replaces (getrusage's ru_maxrss would
    # carry over the high-water mark of the parent that spawned us)
    return _status_kib("VmHWM")


def child(engine: str, path: str, input_path: str, out_path: str, rounds: int) -> dict:
    """Run one engine on one model file; write its output; return its measurements."""
    x = np.load(input_path)
    if engine == "loopstack":
        import onnx  # noqa: F401 - imports are not part of the time to the first result

        import loopstack as lt
        for module in COMPILE_PATH:    # loaded on first use; onnxruntime's import loads all of it
            importlib.import_module(module)
    elif engine in PEER_ENGINES:
        import onnx

        if engine == "torch":
            import torch  # noqa: F401

            from ..peers.torch_onnx import torch_eager as build
        else:
            from tvm.relax.frontend import onnx as _tvm_onnx  # noqa: F401

            from ..peers.tvm_onnx import tvm_relax as build
            rounds = min(rounds, TVM_ROUNDS)
    else:
        import onnxruntime  # noqa: F401
    base = _rss_kib()
    t0 = time.perf_counter()
    if engine == "loopstack":
        model = lt.onnx.compile(path, threads=1)
        y = model(x)
        run = lambda: model(x)   # noqa: E731
    elif engine in PEER_ENGINES:
        proto = onnx.load(path)
        name = proto.graph.input[0].name
        peer = build(proto)
        y = next(iter(peer({name: x}).values()))
        run = lambda: peer({name: x})   # noqa: E731
    else:
        sess = _ort_session(path)
        name = sess.get_inputs()[0].name
        y = sess.run(None, {name: x})[0]
        run = lambda: sess.run(None, {name: x})   # noqa: E731
    first_ms = (time.perf_counter() - t0) * 1e3
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    np.save(out_path, np.asarray(y))
    return {"compile_ms": first_ms, "ms": float(np.median(times)) * 1e3, "best_ms": float(np.min(times)) * 1e3,
            "peak_mib": max(_peak_kib() - base, 0) / 1024}


def _child_main(argv) -> int:
    engine, path, input_path, out_path, rounds = argv
    print(json.dumps(child(engine, path, input_path, out_path, int(rounds))))
    return 0


def _compile_bytecode() -> None:
    """loopstack's bytecode written beside its sources, as an installed package has it (pip
    compiles the .pyc files at install; the other engines' packages were installed so): a
    child's time to the first result then leaves out compiling loopstack's modules from source,
    which a checkout run under PYTHONDONTWRITEBYTECODE repeats in every process (ResNet-18:
    about 300 ms cached, 350-600 ms from source). Up-to-date files are left as they are."""
    import loopstack

    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.dirname(os.path.abspath(loopstack.__file__))],
                   env=env, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _spawn(engine, path, input_path, out_path, rounds) -> dict:
    env = dict(os.environ, **{v: "1" for v in THREAD_VARS})
    cmd = [sys.executable, "-m", "loopstack.onnx.netbench", "--child", engine, path, input_path, out_path, str(rounds)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        return {"error": (res.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def _ort_session(path, profile_prefix=None, threads: int = 1):
    from ..peers.onnxruntime_peer import session

    return session(path, profile_prefix, threads)


def interleaved(path: str, x, rounds: int, threads: int = 1, torch: bool = False) -> dict:
    """Both engines in this process, one call each per round, alternating, so that both see
    the same phases of a shared machine: {engine: (median ms, best ms)}; with `threads` > 1
    also loopstack on that many threads ("loopstack_threads"); with `torch`, torch eager too."""
    import loopstack as lt

    model = lt.onnx.compile(path, threads=1)
    sess = _ort_session(path)
    name = sess.get_inputs()[0].name
    calls = {"loopstack": lambda: model(x), "onnxruntime": lambda: sess.run(None, {name: x})}
    if torch:
        import onnx

        from ..peers.torch_onnx import torch_eager

        eager = torch_eager(onnx.load(path))
        calls["torch"] = lambda: eager({name: x})
    if threads > 1:
        many = lt.onnx.compile(path, threads=threads)
        calls["loopstack_threads"] = lambda: many(x)
    times = {k: [] for k in calls}
    for f in calls.values():
        f()
    for _ in range(rounds):
        for k, f in calls.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: (float(np.median(v)) * 1e3, float(np.min(v)) * 1e3) for k, v in times.items()}


# a steady-state block: untimed calls for at least STEADY_WARM_S (and 3 calls; another engine's
# thread pool still spins that long after its last call), then timed calls for at least
# STEADY_BLOCK_S (and 10 calls)
STEADY_WARM_S, STEADY_BLOCK_S = 0.05, 0.05


def steady_scaling(path: str, x, rounds: int, threads: int) -> dict:
    """Each engine's speed-up on `threads` threads in a steady state: {engine: (1-thread median
    ms, N-thread median ms)}, loopstack and onnxruntime (intra_op_num_threads=N) alike. Each
    configuration runs a block of consecutive calls (untimed, then timed: STEADY_WARM_S,
    STEADY_BLOCK_S), the four blocks alternating, max(3, rounds // 4) times. Interleaved call by call
    (`interleaved`), an N-thread call follows the other engines' calls: its workers have gone
    to sleep and its weights have left the caches it reads, and two engines' thread pools spin
    against each other; in blocks every engine runs as a program that calls it repeatedly."""
    import loopstack as lt

    one, many = lt.onnx.compile(path, threads=1), lt.onnx.compile(path, threads=threads)
    s1, sn = _ort_session(path), _ort_session(path, threads=threads)
    name = s1.get_inputs()[0].name
    calls = {("loopstack", 1): lambda: one(x), ("loopstack", threads): lambda: many(x),
             ("onnxruntime", 1): lambda: s1.run(None, {name: x}),
             ("onnxruntime", threads): lambda: sn.run(None, {name: x})}
    times = {k: [] for k in calls}
    for _ in range(max(3, rounds // 4)):
        for k, f in calls.items():
            _block(f, 3, STEADY_WARM_S)
            times[k] += _block(f, 10, STEADY_BLOCK_S)
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    return {e: (med[(e, 1)], med[(e, threads)]) for e in ENGINES}


def _block(f, calls: int, seconds: float) -> list[float]:
    """Call `f` at least `calls` times and for at least `seconds`: each call's seconds."""
    out, end = [], time.perf_counter() + seconds
    while len(out) < calls or time.perf_counter() < end:
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return out


def layer_times(path: str, x, rounds: int) -> tuple[list, list]:
    """Where the time goes, in one process, rounds alternating: ([(loopstack layer, best us)],
    [(onnxruntime node, op type, best us)]), onnxruntime's from its own profiler (which adds a
    few microseconds a node)."""
    import json as _json

    import loopstack as lt

    model = lt.onnx.compile(path, threads=1)
    with tempfile.TemporaryDirectory(prefix="loopstack-ortprof-") as tmp:
        sess = _ort_session(path, profile_prefix=os.path.join(tmp, "ort"))
        name = sess.get_inputs()[0].name
        best = [float("inf")] * len(model.layers)
        for _ in range(rounds):
            sess.run(None, {name: x})
            model.time_layers({model.input_names[0]: x}, rounds=1)
            best = [min(b, L.seconds) for b, L in zip(best, model.layers)]
        with open(sess.end_profiling()) as f:
            events = _json.load(f)
    nodes: dict = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            key = e["name"][:-len("_kernel_time")]
            op = e.get("args", {}).get("op_name", "")
            prev = nodes.get(key, (op, float("inf")))
            nodes[key] = (op, min(prev[1], e["dur"]))
    ours = [(L.name, b * 1e6) for L, b in zip(model.layers, best)]
    return ours, [(k, op, us) for k, (op, us) in nodes.items()]


def layer_table(ours, theirs) -> str:
    lines = [f"{'loopstack layer':<44} {'us':>8}   {'onnxruntime node':<44} {'op':<14} {'us':>8}"]
    for i in range(max(len(ours), len(theirs))):
        a = f"{ours[i][0][:44]:<44} {ours[i][1]:8.1f}" if i < len(ours) else " " * 53
        b = f"{theirs[i][0][:44]:<44} {theirs[i][1][:14]:<14} {theirs[i][2]:8.1f}" if i < len(theirs) else ""
        lines.append(f"{a}   {b}".rstrip())
    lines.append(f"{'sum':<44} {sum(u for _, u in ours):8.1f}   {'sum':<59} {sum(u for *_, u in theirs):8.1f}")
    return "\n".join(lines)


def available_peers() -> tuple[str, ...]:
    """The optional peers installed here."""
    import importlib.util

    return tuple(p for p, mod in (("torch", "torch"), ("tvm", "tvm")) if importlib.util.find_spec(mod))


def bench(names=None, rounds: int = 20, log=print, threads: int = 1, peers=None) -> list[dict]:
    import onnx

    from .models import MODELS

    names = list(names or MODELS)
    peers = tuple(available_peers() if peers is None else peers)
    _compile_bytecode()
    rows = []
    with tempfile.TemporaryDirectory(prefix="loopstack-nets-") as tmp:
        for name in names:
            m = MODELS[name]()
            path = os.path.join(tmp, f"{name}.onnx")
            onnx.save(m, path)
            shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            xin = os.path.join(tmp, f"{name}.in.npy")
            np.save(xin, x)
            row = {"name": name, "input": "x".join(map(str, shape))}
            outs = {}
            for engine in ENGINES + peers:
                out = os.path.join(tmp, f"{name}.{engine}.npy")
                res = _spawn(engine, path, xin, out, rounds)
                row[engine] = res
                if "error" not in res:
                    outs[engine] = np.load(out)
                log(f"  {name:<20} {engine:<12} " + (res.get("error") or
                    f"{res['ms']:.2f} ms, first result {res['compile_ms']:.0f} ms, {res['peak_mib']:.1f} MiB"))
            if "loopstack" in outs and "onnxruntime" in outs:
                for engine, (med, best) in interleaved(path, x, rounds, threads, "torch" in outs).items():
                    row.setdefault(engine, {}).update(ms=med, best_ms=best)
                if threads > 1:
                    row["threads"] = threads
                    for engine, (ms1, msn) in steady_scaling(path, x, rounds, threads).items():
                        row[engine].update(steady_ms=ms1, steady_threads_ms=msn)
                log(f"  {name:<20} interleaved  loopstack {row['loopstack']['ms']:.2f} ms, "
                    f"onnxruntime {row['onnxruntime']['ms']:.2f} ms (medians)")
                ref = outs["onnxruntime"]
                row["max_abs_err"] = float(np.abs(outs["loopstack"] - ref).max())
                row["output_scale"] = float(np.abs(ref).max())
                for engine in peers:
                    if engine in outs:
                        row[engine]["max_abs_err"] = float(np.abs(outs[engine].reshape(ref.shape) - ref).max())
            rows.append(row)
    return rows


def table(rows) -> str:
    head = (f"{'model':<20} {'input':<12} {'loopstack ms':>12} {'ort ms':>8} {'speed':>6} {'best':>6} {'max err':>9} "
            f"{'err/scale':>9} {'ls first':>9} {'ort first':>9} {'ls MiB':>7} {'ort MiB':>7}")
    threads = max((r.get("threads", 1) for r in rows), default=1)
    if threads > 1:
        head += f" {f'ls {threads}t ms':>9} {'scaling':>7} {f'ls x{threads}':>6} {f'ort x{threads}':>6}"
    peers = [p for p in PEER_ENGINES if any(p in r for r in rows)]
    if "torch" in peers:
        head += f" {'torch ms':>9} {'xtorch':>6}"
    if "tvm" in peers:
        head += f" {'tvm ms':>9} {'xtvm':>6} {'tvm first':>9}"
    lines = [head]
    for r in rows:
        ls, ort = r.get("loopstack", {}), r.get("onnxruntime", {})

        def f(d, k, fmt):
            return format(d[k], fmt) if k in d else "-"

        speed = f"{ort['ms'] / ls['ms']:.2f}x" if "ms" in ls and "ms" in ort else "-"
        best = f"{ort['best_ms'] / ls['best_ms']:.2f}x" if "best_ms" in ls and "best_ms" in ort else "-"
        err = r.get("max_abs_err")
        rel = err / r["output_scale"] if err is not None and r.get("output_scale") else None
        lines.append(f"{r['name']:<20} {r['input']:<12} {f(ls, 'ms', '12.2f')} {f(ort, 'ms', '8.2f')} {speed:>6} {best:>6} "
                     f"{'-' if err is None else format(err, '9.2e')} {'-' if rel is None else format(rel, '9.1e')} "
                     f"{f(ls, 'compile_ms', '9.0f')} {f(ort, 'compile_ms', '9.0f')} "
                     f"{f(ls, 'peak_mib', '7.1f')} {f(ort, 'peak_mib', '7.1f')}")
        if threads > 1:
            many = r.get("loopstack_threads", {})
            scaling = f"{ls['ms'] / many['ms']:.2f}x" if "ms" in ls and "ms" in many else "-"
            lines[-1] += f" {f(many, 'ms', '9.2f')} {scaling:>7}"
            for d in (ls, ort):
                lines[-1] += f" {d['steady_ms'] / d['steady_threads_ms']:5.2f}x" if "steady_ms" in d else f" {'-':>6}"
        for p in peers:
            d = r.get(p, {})
            ratio = f"{d['ms'] / ls['ms']:.2f}x" if "ms" in d and "ms" in ls else "-"
            lines[-1] += f" {f(d, 'ms', '9.2f')} {ratio:>6}" if "error" not in d else f" {'error':>9} {'-':>6}"
            if p == "tvm":
                lines[-1] += f" {f(d, 'compile_ms', '9.0f')}"
    errors = [f"{r['name']} {p}: {r[p]['error']}" for r in rows for p in PEER_ENGINES if "error" in r.get(p, {})]
    return "\n".join(lines + errors)


def records(rows) -> list[dict]:
    out = []
    for r in rows:
        rec = {"name": r["name"], "input": r["input"]}
        for engine in ENGINES + PEER_ENGINES:
            d = r.get(engine, {})
            for k, unit in (("ms", "latency_ms"), ("best_ms", "best_latency_ms"), ("compile_ms", "first_result_ms"),
                            ("peak_mib", "peak_mib"), ("steady_ms", "steady_latency_ms"),
                            ("steady_threads_ms", "threads_steady_latency_ms")):
                if k in d:
                    rec[f"{engine}_{unit}"] = d[k]
            if "error" in d:
                rec[f"{engine}_error"] = d["error"]
            if engine in PEER_ENGINES and "max_abs_err" in d:
                rec[f"{engine}_max_abs_err"] = d["max_abs_err"]
        many = r.get("loopstack_threads", {})
        if "ms" in many:
            rec["threads"] = r["threads"]
            rec["loopstack_threads_latency_ms"] = many["ms"]
            rec["loopstack_threads_best_latency_ms"] = many["best_ms"]
        for k in ("max_abs_err", "output_scale"):
            if k in r:
                rec[k] = r[k]
        out.append(rec)
    return out


def main(argv=None) -> int:
    import argparse

    from .models import MODELS

    ap = argparse.ArgumentParser(description="whole networks: loopstack against onnxruntime, one thread")
    ap.add_argument("--model", action="append", choices=sorted(MODELS), help="run only these models (repeatable)")
    ap.add_argument("--rounds", type=int, default=20, help="timed calls per engine (the median counts)")
    ap.add_argument("--json", metavar="FILE", help="write one JSON record per model")
    ap.add_argument("--threads", type=int, default=1,
                    help="also time loopstack with its parallel loops on N threads (a column of its own)")
    ap.add_argument("--peers", default=None, metavar="LIST",
                    help="optional peers beside onnxruntime: torch,tvm (default: those installed; '' for none)")
    ap.add_argument("--layers", action="store_true",
                    help="instead: each model's layers beside onnxruntime's nodes (best of --rounds, one process)")
    args = ap.parse_args(argv)
    if args.layers:
        import onnx

        for name in args.model or sorted(MODELS):
            m = MODELS[name]()
            shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            with tempfile.TemporaryDirectory(prefix="loopstack-nets-") as tmp:
                path = os.path.join(tmp, f"{name}.onnx")
                onnx.save(m, path)
                print(f"{name}:\n{layer_table(*layer_times(path, x, args.rounds))}\n")
        return 0
    peers = None if args.peers is None else tuple(p for p in args.peers.split(",") if p)
    unknown = [p for p in peers or () if p not in PEER_ENGINES]
    if unknown:
        ap.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEER_ENGINES)}")
    rows = bench(args.model, args.rounds, threads=args.threads, peers=peers)
    print(table(rows))
    if args.json:
        from ..timing import write_records
        write_records(args.json, records(rows))
    ok = all("max_abs_err" in r and r["max_abs_err"] <= 1e-4 * r["output_scale"] for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(_child_main(sys.argv[2:]))
    sys.exit(main())
