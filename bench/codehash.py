"""The sha256 of the machine code loopstack generates for every benchmark program on every x86 target.

    python bench/codehash.py                      print one hash per (program, target)
    python bench/codehash.py --write FILE         record them (JSON: {"MM-64/avx2": "ab12...", ...})
    python bench/codehash.py --check FILE         compare with a record; exit 1 naming what differs

A change meant to make compiling faster must leave these hashes as they were. The programs are
every workload of `loopstack.workloads` with its generated default schedule, and every operator of
bench/loopnest.py with its hand-written schedule, each emitted for avx2 and for avx512. The
targets are the host-independent descriptions (`TARGETS`, default cache sizes), and code is
emitted without running it, so the hashes are the same on any machine, with or without AVX-512.
The hash covers each function's instructions and its constant pool, function after function.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # bench/loopnest.py's operators

from loopstack.backend.x86.compile import emit_x86  # noqa: E402
from loopstack.isa.target import TARGETS  # noqa: E402
from loopstack.looptree.verify import verify  # noqa: E402

TARGET_NAMES = ("avx2", "avx512")


def code_digest(tree, target) -> str:
    """sha256 over the bytes of every function emitted for a backend loop tree."""
    verify(tree)
    _, _, segments, _ = emit_x86(tree, target)
    h = hashlib.sha256()
    for asm, _ in segments:
        code = asm.bytes()
        h.update(len(code).to_bytes(8, "little"))
        h.update(code)
    return h.hexdigest()


def programs(target):
    """(name, backend loop tree) for every workload and every bench/loopnest.py operator on `target`."""
    from loopnest import operators

    from loopstack.tune.defaults import default_schedule
    from loopstack.workloads import WORKLOADS

    for name, w in WORKLOADS.items():
        Y, _ = w.build(seed=0)
        yield name, default_schedule(Y, target).lower()
    for name, (build, _) in operators(target.name).items():
        yield f"loopnest:{name}", build()


def digests(names=TARGET_NAMES) -> dict[str, str]:
    """{"<program>/<target>": sha256 hex} over every program and target."""
    out = {}
    for tname in names:
        target = TARGETS[tname]
        for name, tree in programs(target):
            out[f"{name}/{tname}"] = code_digest(tree, target)
    return out


def compare(recorded: dict, now: dict) -> list[str]:
    """One line per program whose code differs from the record, or that is missing from either."""
    lines = []
    for key in sorted(set(recorded) | set(now)):
        if key not in now:
            lines.append(f"{key}: recorded, not generated now")
        elif key not in recorded:
            lines.append(f"{key}: generated now, not recorded")
        elif recorded[key] != now[key]:
            lines.append(f"{key}: code differs ({recorded[key][:12]} recorded, {now[key][:12]} now)")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", metavar="FILE", help="record the hashes in FILE")
    ap.add_argument("--check", metavar="FILE", help="compare with the hashes recorded in FILE")
    args = ap.parse_args(argv)
    now = digests()
    if args.write:
        with open(args.write, "w") as f:
            json.dump(now, f, indent=1, sort_keys=True)
            f.write("\n")
    if args.check:
        with open(args.check) as f:
            diff = compare(json.load(f), now)
        for line in diff:
            print(line)
        print(f"{len(now)} programs, {len(diff)} differ")
        return 1 if diff else 0
    if not args.write:
        for key, digest in now.items():
            print(f"{digest}  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
