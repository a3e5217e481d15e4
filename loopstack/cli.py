"""The `loopstack` command: `loopstack <subcommand> [options]`.

Each subcommand is a module (or object) with
    HELP: str                       one line for `loopstack --help`
    add_arguments(parser) -> None   its options
    run(args) -> int                the exit status
registered by name in SUBCOMMANDS and imported only when its subcommand runs (building
the parser imports each one to read its options; keep their imports light).

Errors derived from LoopstackError print one line `loopstack: error: ...` and exit 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from .errors import LoopstackError

# name -> "module" or "module:attribute" holding HELP, add_arguments and run
SUBCOMMANDS: dict[str, str] = {
    "info": "loopstack.cli:InfoCommand",
    "bench": "loopstack.commands.bench",
    "asm": "loopstack.commands.asm:AsmCommand",
    "show": "loopstack.commands.asm:ShowCommand",
    "tui": "tui.command",
    "tune": "loopstack.tune.command",
    "db": "loopstack.tune.db_command",
    "run": "loopstack.commands.run",
}


def _load(spec: str):
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


class InfoCommand:
    """`loopstack info`: this CPU, the chosen target and its measured FMA peak."""

    HELP = "show the CPU, its instruction sets and caches, the target and its measured peak GFLOPS"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--target", default=None, help="target to describe (default: the host's widest)")
        parser.add_argument("--seconds", type=float, default=0.05, help="time spent measuring the peak")
        parser.add_argument("--no-peak", action="store_true", help="skip the peak measurement")
        parser.add_argument("--json", metavar="FILE", help="also write the measured peak as JSON records")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from .isa import cpu
        from .isa.target import TARGETS, get_target, peak_gflops

        def size(n):
            return f"{n // 2**20} MiB" if n >= 2**20 and n % 2**20 == 0 else f"{n // 1024} KiB"

        target = get_target(args.target)   # UnsupportedError before anything runs
        features = cpu.cpu_features()
        caches = cpu.cache_sizes()
        runnable = [name for name, t in TARGETS.items() if t.required <= features]
        print(f"cpu            {cpu.cpu_brand()}")
        print(f"isa            {' '.join(sorted(features)) or '(none detected)'}")
        print(f"caches         l1d {size(caches['l1d'])}, l2 {size(caches['l2'])}, l3 {size(caches['l3'])}")
        print(f"targets        {', '.join(runnable) or '(none)'} run here")
        print(f"gpu            {_gpu_line()}")
        print(f"target         {target.name}")
        for field, value in target.describe()[1:]:
            print(f"  {field:<20} {value}")
        print(f"  {'identity':<20} {target.identity}")
        records = []
        from .isa.target import host_arch

        if not args.no_peak and target.arch != host_arch():
            print(f"peak           not measured: {target.name} is {target.arch} code and this host is "
                  f"{host_arch()} (bench/aarch64.py predicts its speed with llvm-mca)")
        elif not args.no_peak:
            gflops = peak_gflops(target, seconds=args.seconds)
            print(f"peak           {gflops:.1f} GFLOPS fp32 FMA, one core ({target.name}, "
                  f"{gflops / (2 * target.lanes()):.2f} G vfmadd231ps/s)")
            records.append({"name": f"peak_fp32_fma_{target.name}", "target": target.name,
                            "cpu": cpu.cpu_brand(), "peak_gflops": gflops})
        if args.json:
            from .timing import write_records
            write_records(args.json, records)
        return 0


def _gpu_line() -> str:
    """What the GPU backend can do here: PTX always compiles; running needs the CUDA driver."""
    from .backend.ptx import TARGETS as GPU_TARGETS
    from .isa.ptx import driver, ptxas
    try:
        major, minor = driver.driver().capability()
        runs = f"kernels run on the GPU (compute capability {major}.{minor})"
    except LoopstackError as e:
        runs = f"no GPU to run on ({str(e).splitlines()[0].split(':')[0]}): kernels run in the interpreter"
    checks = "ptxas checks them" if ptxas.ptxas_path() else "no ptxas to check them"
    return f"{', '.join(GPU_TARGETS)} compile here, {checks}; {runs}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loopstack", description="A tensor compiler that emits machine code.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, spec in SUBCOMMANDS.items():
        command = _load(spec)
        p = sub.add_parser(name, help=command.HELP, description=command.HELP)
        command.add_arguments(p)
        p.set_defaults(_run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:   # --help or a usage error: argparse has printed it already
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return int(args._run(args) or 0)
    except LoopstackError as exc:
        print(f"loopstack: error: {exc}", file=sys.stderr)
        return 2
