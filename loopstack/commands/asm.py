"""`loopstack asm WORKLOAD` (the generated assembly) and `loopstack show WORKLOAD` (its loop tree),
with the schedule the benchmark would use."""
from __future__ import annotations

import sys


def _add(parser) -> None:
    parser.add_argument("workload", help="workload name, e.g. MM-256 or CONV-1 (case-insensitive)")
    parser.add_argument("--target", default=None,
                        help="avx2, avx512, neon or neon_fp16 (default: the host's widest); code for another "
                             "architecture is cross-compiled, neon_fp16 computes the workload in float16")
    parser.add_argument("--default", action="store_true", help="the unscheduled program (no default schedule)")


def _scheduled(args):
    from ..backend.native import foreign_target
    from ..isa.target import get_target
    from ..tune.defaults import schedule_for
    from ..workloads import get_workload

    w = get_workload(args.workload)          # LoopstackError naming the known workloads
    # UnsupportedError on a CPU without it, unless it is another architecture's (cross-compiled)
    target = foreign_target(args.target) or get_target(args.target)
    Y, _ = w.build()
    if not args.default:
        Y.set(schedule_for(Y, target))
    return w, Y, target


class AsmCommand:
    HELP = "print the generated assembly of a benchmark workload"

    @staticmethod
    def add_arguments(parser) -> None:
        _add(parser)

    @staticmethod
    def run(args) -> int:
        from .. import backend
        from ..backend.native import in_float16

        w, Y, target = _scheduled(args)
        tree = Y.loop_tree.lower()
        if target.name == "neon_fp16":
            tree = in_float16(tree)
        kernel = backend.compile(tree, target=None if args.target is None else target)
        sys.stdout.write(f"; {w.name} {w.shape}  target {target.name}  compile {kernel.compile_ms:.2f} ms\n")
        sys.stdout.write(kernel.asm().rstrip("\n") + "\n")
        return 0


class ShowCommand:
    HELP = "print the scheduled loop tree of a benchmark workload"

    @staticmethod
    def add_arguments(parser) -> None:
        _add(parser)
        parser.add_argument("--ir", action="store_true", help="the lowered backend loop tree instead")

    @staticmethod
    def run(args) -> int:
        w, Y, target = _scheduled(args)
        print(f"# {w.name} {w.shape}  ({w.flops / 1e6:.1f} MFLOP)  target {target.name}")
        print(Y.loop_tree.lower() if args.ir else Y.loop_tree)
        return 0
