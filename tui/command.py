"""`loopstack tui WORKLOAD`: tune a benchmark workload's schedule by hand (paper §6.2).

On `q` the final loop tree and its action trace are printed (and written to --save),
and the scheduled kernel is checked against the workload's numpy reference.
"""
from __future__ import annotations

import argparse
import os
import sys

HELP = "interactive scheduling: the loop tree, every key a schedule change, compiled and benchmarked at once"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="a benchmark workload, e.g. MM-256 or CONV-1")
    parser.add_argument("--load", metavar="FILE", help="start from a schedule saved with `w`")
    parser.add_argument("--save", metavar="FILE", help="write the final schedule here on quit")
    parser.add_argument("--no-color", action="store_true", help="attributes only, no colours")
    parser.add_argument("--seed", type=int, default=0, help="seed of the workload's inputs")
    parser.add_argument("--target", default=None, help="avx2, avx512, neon (cross-compiled where the host "
                                                       "cannot run it: listing only), or a GPU's sm_80, sm_90 "
                                                       "(timed where a GPU is, else the model's prediction); "
                                                       "default: the host's")
    parser.add_argument("--allow-tf32", action="store_true",
                        help="a GPU target multiplies float32 operands as TF32 (10-bit mantissas, f32 sums)")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    import loopstack as lt
    from loopstack.backend import is_gpu_target
    from loopstack.workloads import get_workload

    from .app import run as run_tui

    target = _target(args)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise lt.UnsupportedError("the TUI needs a terminal on stdin and stdout")
    w = get_workload(args.workload)
    tensor, reference = w.build(seed=args.seed)
    tree = tensor.loop_tree
    path = args.save or args.load or f"{w.name}.schedule.json"
    if args.load:
        try:
            with open(args.load) as f:
                loaded = lt.deserialize(f.read())
        except OSError as e:
            raise lt.ArgumentError(f"cannot read {args.load}: {e.strerror or e}") from None
        tree = lt.apply_actions(tree, loaded.actions)
    colors = not args.no_color and "NO_COLOR" not in os.environ
    session = run_tui(tree, name=w.name, path=path, colors=colors, target=target)
    final = session.tree
    tensor.set(final)
    print(final)
    print("actions:", ", ".join(str(a) for a in final.actions) or "(none)")
    m = session.measurement
    if not m.error:
        print(f"{w.name}: {m.rate()}, {m.of_peak:.1f}% of the {m.target} peak ({m.peak / m.scale:.1f})")
    if args.save:
        with open(args.save, "w") as f:
            f.write(lt.serialize(final))
        print(f"schedule written to {args.save}")
    try:
        if is_gpu_target(target):
            from .gpu import gpu_result
            got, how = gpu_result(tensor, target)
        else:
            got, how = tensor.numpy(), ""
        err = float(np.max(np.abs(got - reference())))
        print(f"checked against numpy{how}: max abs error {err:.3g}")
    except lt.LoopstackError as e:
        print(f"not checked against numpy: {e}")
    return 0


def _target(args):
    """--target as compile takes it: a name, or for sm_80 / sm_90 a GpuTarget with --allow-tf32."""
    import loopstack as lt
    from loopstack.backend import is_gpu_target

    if not is_gpu_target(args.target):
        if args.allow_tf32:
            raise lt.ArgumentError("--allow-tf32 is for a GPU target (--target sm_80 or sm_90)")
        return args.target
    from loopstack.backend.ptx import TARGETS, GpuTarget

    if args.target not in TARGETS:
        raise lt.ArgumentError(f"--target {args.target}: the GPU targets are {', '.join(TARGETS)}")
    return GpuTarget(args.target, allow_tf32=args.allow_tf32)
