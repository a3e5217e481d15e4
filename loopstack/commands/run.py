"""`loopstack run MODEL.onnx`: compile an ONNX model and run it on numpy inputs.

    loopstack run model.onnx                                  # seeded random inputs
    loopstack run model.onnx --input input=x.npy --output y.npz
    loopstack run model.onnx --bench                          # latency, per-layer table, onnxruntime beside
    loopstack run model.onnx --tune 600                       # tune each distinct layer first

Prints each output's shape and a few statistics; `--bench` times the model (median of
`--runs` calls), prints the per-layer summary (schedule, GFLOPS, share of the time) and,
when onnxruntime is installed, its single-threaded latency and loopstack's max abs error
against it on the same inputs.
"""
from __future__ import annotations

import sys
import time

HELP = "compile an ONNX model and run it (--bench: time it against onnxruntime)"


def add_arguments(parser) -> None:
    parser.add_argument("model", metavar="MODEL.onnx", help="the ONNX model file")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                        help="an input array (repeatable); inputs not given are seeded random")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                        help="the shape of an input whose dimensions are symbolic")
    parser.add_argument("--output", metavar="FILE.npz", help="save the outputs")
    parser.add_argument("--bench", action="store_true", help="time the model, per layer and against onnxruntime")
    parser.add_argument("--runs", type=int, default=20, help="timed calls with --bench (the median counts)")
    parser.add_argument("--target", default=None, help="x86 target (default: the host's widest)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--tune", type=float, default=0, metavar="SECONDS",
                        help="first tune each distinct layer, sharing this budget (into the tuning database)")


def _pairs(items, what):
    from ..errors import ArgumentError

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ArgumentError(f"{what} {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


def _load_inputs(args, input_names_shapes):
    import numpy as np

    from ..errors import ArgumentError

    files = _pairs(args.input, "--input")
    unknown = sorted(set(files) - {n for n, _ in input_names_shapes})
    if unknown:
        raise ArgumentError(f"--input {unknown[0]}: the model has no input of that name (its inputs: "
                            f"{', '.join(n for n, _ in input_names_shapes)})")
    rng = np.random.default_rng(args.seed)
    feeds = {}
    for name, shape in input_names_shapes:
        if name in files:
            try:
                feeds[name] = np.load(files[name])
            except (OSError, ValueError) as e:
                raise ArgumentError(f"--input {name}={files[name]}: {e}") from None
        else:
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
            print(f"input  {name} {list(shape)}: seeded random (seed {args.seed})")
    return feeds


def _describe(name, a) -> str:
    import numpy as np

    flat = np.asarray(a).reshape(-1)
    head = ", ".join(f"{v:.4g}" for v in flat[:4])
    return (f"output {name} {list(np.shape(a))} {np.asarray(a).dtype}: min {flat.min():.4g} max {flat.max():.4g} "
            f"mean {flat.mean():.4g}  [{head}{', ...' if flat.size > 4 else ''}]")


def run(args) -> int:
    import numpy as np

    from .. import onnx as lto
    from ..errors import ArgumentError

    shapes = {k: tuple(int(d) for d in v.split(",")) for k, v in _pairs(args.shape, "--shape").items()}
    if args.tune > 0:
        for r in lto.tune(args.model, budget_s=args.tune, target=args.target, input_shapes=shapes, progress=print):
            if r.result is not None:
                print(f"  {r.result.gflops:.1f} GFLOPS (default {r.result.default_gflops:.1f})")
    t0 = time.perf_counter()
    model = lto.compile(args.model, target=args.target, input_shapes=shapes)
    feeds = _load_inputs(args, model.net.inputs)
    outs = model.run(feeds)
    first_ms = (time.perf_counter() - t0) * 1e3
    print(f"model  {args.model}: {len(model.layers)} layers, {model.flops / 1e9:.3f} GFLOP, "
          f"compiled in {model.compile_ms:.0f} ms, first result after {first_ms:.0f} ms")
    for name, a in outs.items():
        print(_describe(name, a))
    if args.output:
        np.savez(args.output, **outs)
        print(f"saved  {args.output}")
    if not args.bench:
        return 0
    if args.runs < 1:
        raise ArgumentError("--runs must be at least 1")
    model.threads = 1       # the peer below runs on one thread
    times = []
    for _ in range(args.runs):
        t = time.perf_counter()
        model.run(feeds)
        times.append(time.perf_counter() - t)
    ms = float(np.median(times)) * 1e3
    print()
    print(model.summary(feeds))
    print(f"\nloopstack    {ms:8.3f} ms per run (median of {args.runs}), {model.flops / ms / 1e6:.1f} GFLOPS, one thread")
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime  not installed: no peer timing", file=sys.stderr)
        return 0
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    times = []
    for _ in range(args.runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    oms = float(np.median(times)) * 1e3
    err = max(float(np.abs(outs[n] - ref[n]).max()) for n in outs if n in ref)
    scale = max(float(np.abs(ref[n]).max()) for n in outs if n in ref)
    print(f"onnxruntime  {oms:8.3f} ms per run (one thread): loopstack at {oms / ms:.2f}x its speed; "
          f"max abs error {err:.3g} (output scale {scale:.3g})")
    return 0
