"""`loopstack db export|import|stats`: share a tuning database within a team.

    loopstack db export team.jsonl          every measurement and best schedule, as JSON lines
    loopstack db import team.jsonl          merge them: rows held already are skipped, and an
                                            imported best wins only where it is faster
    loopstack db stats [--json FILE]        per program and machine: measurements, nodes, bests

The database is `--db PATH`, else $LOOPSTACK_TUNING_DB, else ~/.cache/loopstack/tuning.db.
"""
from __future__ import annotations

import argparse
import json
import os

HELP = "export, import (merge) or summarise the tuning database"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="PATH", help="tuning database (default: $LOOPSTACK_TUNING_DB or "
                                                      "~/.cache/loopstack/tuning.db)")
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    sub.add_parser("export", help="write every measurement and best schedule as JSON lines").add_argument(
        "file", metavar="FILE.jsonl")
    sub.add_parser("import", help="merge JSON lines written by export, without duplicates").add_argument(
        "file", metavar="FILE.jsonl")
    stats = sub.add_parser("stats", help="per program and machine: measurements, nodes and the best GFLOPS")
    stats.add_argument("--json", metavar="FILE", help="also write the rows as JSON records")


def _path(args) -> str:
    from ..errors import ArgumentError
    from .db import DEFAULT_PATH
    from .lookup import OFF, configured_db_path

    path = configured_db_path(args.db)
    if path == OFF:
        raise ArgumentError("the tuning database is turned off (LOOPSTACK_TUNING_DB=off): name one with --db")
    return os.path.expanduser(path or DEFAULT_PATH)


def run(args: argparse.Namespace) -> int:
    from ..errors import ArgumentError
    from .db import TuningDB

    path = _path(args)
    if args.action == "import" and not os.path.isfile(args.file):
        raise ArgumentError(f"db import: no such file {args.file!r}")
    if args.action in ("export", "stats") and not os.path.exists(path):
        raise ArgumentError(f"db {args.action}: no tuning database at {path}")
    with TuningDB(path) as db:
        if args.action == "export":
            print(f"exported {db.export_jsonl(args.file)} lines from {path} to {args.file}")
        elif args.action == "import":
            try:
                c = db.import_jsonl(args.file)
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ArgumentError(f"db import: {args.file} is not a loopstack database export "
                                    f"({type(e).__name__}: {e})") from None
            print(f"imported into {path}: {c['measurements']} measurements added, {c['duplicates']} "
                  f"already held, {c['best']} best schedules replaced")
        else:
            rows = db.stats()
            print(format_stats(rows, path))
            if args.json:
                with open(args.json, "w") as f:
                    json.dump([{"name": r["name"] or r["program"], **r} for r in rows], f, indent=1)
    return 0


def format_stats(rows: list, path: str) -> str:
    head = f"{'workload':<14} {'target':<48} {'rows':>6} {'ok':>6} {'nodes':>5} {'best meas.':>10} {'best':>8}"
    lines = [path, head, "-" * len(head)]
    for r in rows:
        best = f"{r['best_gflops']:8.1f}" if r["best_gflops"] is not None else f"{'-':>8}"
        lines.append(f"{(r['name'] or r['program'][:12]):<14} {r['target'][:48]:<48} {r['measurements']:6d} "
                     f"{r['ok']:6d} {r['nodes']:5d} {r['best_measured_gflops']:10.1f} {best}")
    lines.append(f"{len(rows)} program/target pairs, {sum(r['measurements'] for r in rows)} measurements")
    return "\n".join(lines)
