"""Compile cost as Python bytecodes: a count that other tenants of the machine cannot disturb.

    python bench/compile_bytecodes.py [--only DWCONV-2,MLP-8x1024] [--json FILE]

For each of the paper's operators (bench/loopnest.py's schedules, on avx2 and avx512) and each
MLP of bench/frontend.py (expression to kernel, avx512 where the CPU has it): the bytecodes one steady-state compile
executes, counted with sys.settrace opcode events after a warm-up compile. A timing on a shared
machine moves by tens of percent with the load; this count moves only when the compiler's work
does, so a change to the compile path can be judged by it, and the CPU milliseconds
(`compile_cpu_ms` of the other two benches) taken on a quiet machine. The count covers Python
only: the time of builtins and of the C code under them (memcpy, zero-filling) is not in it.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import frontend  # noqa: E402
import loopnest  # noqa: E402
from loopstack.backend import compile  # noqa: E402
from loopstack.errors import UnsupportedError  # noqa: E402
from loopstack.frontend import run as _run  # noqa: E402
from loopstack.isa.target import get_target  # noqa: E402

OPERATORS = ("MM-64", "CONV-2", "DWCONV-1", "DWCONV-2", "DWCONV-3", "DWCONV-4")
MLPS = ("MLP-8x256", "MLP-64x256", "MLP-8x1024", "MLP-64x1024")


def bytecodes(fn) -> int:
    """Bytecodes `fn()` executes, after one call to warm caches and tables."""
    fn()
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        if event == "opcode":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def targets() -> list[str]:
    """avx2 and avx512, those this CPU runs (a compile for a target the CPU lacks is refused)."""
    out = []
    for name in ("avx2", "avx512"):
        try:
            get_target(name)
        except UnsupportedError as e:
            print(f"{name}: skipped ({e})")
            continue
        out.append(name)
    return out


def cases(only: set | None):
    """(name, target name, a function compiling it once)."""
    names = targets()
    for target_name in names:
        target = get_target(target_name)
        for name in OPERATORS:
            if only is None or name in only:
                tree = loopnest.operators(target_name)[name][0]()
                yield name, target_name, lambda tree=tree, target=target: compile(tree, target=target)
    for name in MLPS:
        if names and (only is None or name in only):
            build = frontend.PROGRAMS[name]

            def once(build=build, target_name=names[-1]):
                _run._CACHE.clear()
                T = build(target_name)
                T.loop_tree.lower()
                T.compile(target_name)
            yield name, names[-1], once


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated operator or MLP names")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    print(f"{'compile':<12} {'target':<7} {'bytecodes':>10}")
    records = []
    for name, target_name, fn in cases(only):
        n = bytecodes(fn)
        records.append({"name": f"{name} {target_name}", "bytecodes": n})
        print(f"{name:<12} {target_name:<7} {n:>10}", flush=True)
    if args.json:
        from loopstack.timing import write_records
        write_records(args.json, records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
