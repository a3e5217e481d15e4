"""`loopstack tune WORKLOAD`: tune a benchmark workload's schedule and store it in the database."""
from __future__ import annotations

import argparse
import json
import sys

HELP = "search schedules for a workload (scripted, exhaustive, random, evolutionary) and store the best"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="a workload name such as MM-256 or CONV-1")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of search")
    parser.add_argument("--mapper", default="scripted", choices=("scripted", "exhaustive", "random", "evolutionary"))
    parser.add_argument("--cost-model", default="measure", choices=("measure", "analytical", "learned"))
    parser.add_argument("--workers", type=int, default=1, help="measurement processes")
    parser.add_argument("--ray", metavar="ADDRESS", help="measure on a Ray cluster: 'auto', HOST:PORT as "
                                                          "`ray start --head` prints it, or ray://HOST:PORT")
    parser.add_argument("--per", default="node", choices=("node", "core"),
                        help="with --ray: one measuring actor per node (all its CPUs) or per CPU")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="threads of a candidate's parallel loop (default: each measuring worker's "
                             "share of its machine's cores; 1 tunes for one thread)")
    parser.add_argument("--from", dest="start", default="default", choices=("default", "unscheduled"),
                        help="start the search from the default schedule or the unscheduled program")
    parser.add_argument("--db", metavar="PATH", help="tuning database (default: $LOOPSTACK_TUNING_DB or "
                                                      "~/.cache/loopstack/tuning.db)")
    parser.add_argument("--no-db", action="store_true", help="do not read or write the database")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", metavar="FILE.png", help="plot best-so-far GFLOPS per measured candidate")
    parser.add_argument("--json", metavar="FILE", help="write the result as JSON records")
    parser.add_argument("--export", metavar="FILE.jsonl", help="export the whole database as JSON lines")
    parser.add_argument("--import", dest="import_", metavar="FILE.jsonl", help="import JSON lines first")


def _bar(session) -> None:
    h = session.history[-1]
    frac = min(1.0, h["t"] / max(1e-9, session.deadline - session.t0))
    n = int(30 * frac)
    sys.stderr.write(f"\r[{'#' * n}{'.' * (30 - n)}] {len(session.history):4d} measured, "
                     f"best {h['best']:6.1f} GFLOPS ")
    sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    from ..workloads import get_workload
    from ..errors import ArgumentError
    from .api import TuneConfig, tune
    from .db import TuningDB

    if args.threads is not None and args.threads < 1:
        raise ArgumentError(f"--threads {args.threads}: expected a positive thread count")
    config = TuneConfig.from_env(args.db, use_db=not args.no_db, seed=args.seed, threads=args.threads)
    if args.import_:
        with TuningDB(config.db_path) as db:
            c = db.import_jsonl(args.import_)
            print(f"imported {c['measurements']} measurements ({c['duplicates']} already held)")
    w = get_workload(args.workload)
    tensor, _ = w.build(args.seed)
    res = tune(tensor, budget_s=args.budget, mapper=args.mapper, cost_model=args.cost_model,
               workers=args.workers, config=config, name=w.name, progress=_bar, start=args.start,
               cluster=args.ray, per=args.per)
    sys.stderr.write("\n")
    pct = 100 * res.gflops / res.peak_gflops if res.peak_gflops else 0.0
    print(f"{w.name}: best {res.gflops:.1f} GFLOPS ({pct:.0f}% of {res.peak_gflops:.1f} peak), "
          f"default {res.default_gflops:.1f}; {res.measured} measured, {res.failed} failed, "
          f"{res.seconds:.1f} s")
    for identity, other in res.by_target.items():
        print(f"  {identity}: best {other.gflops:.1f} GFLOPS, default {other.default_gflops:.1f}; "
              f"{other.measured} measured on {', '.join(other.nodes)}")
    print(res.tree)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([res.record()], f, indent=2)
    if args.plot:
        plot_curves({f"{args.mapper}/{args.cost_model}": res.history}, args.plot, title=w.name)
    if args.export:
        with TuningDB(config.db_path) as db:
            print(f"exported {db.export_jsonl(args.export)} measurements to {args.export}")
    return 0


def plot_curves(curves: dict, path: str, title: str = "") -> None:
    """Best-so-far GFLOPS against measured candidates, one line per search."""
    try:
        import matplotlib
    except ImportError:
        return _png_plot(curves, path)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, hist in curves.items():
        ax.plot(range(1, len(hist) + 1), [h["best"] for h in hist], label=label)
    ax.set_xlabel("measured candidates")
    ax.set_ylabel("best GFLOPS")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _png_plot(curves: dict, path: str, w: int = 480, h: int = 320) -> None:
    """The same plot without matplotlib: lines rasterised with numpy, written as a PNG."""
    import struct
    import zlib

    import numpy as np

    img = np.full((h, w, 3), 255, np.uint8)
    img[h - 20, 20:w - 10] = img[10:h - 20, 20] = 0                        # axes
    colours = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40)]
    top = max([hh["best"] for hist in curves.values() for hh in hist] + [1e-9])
    n = max([len(hist) for hist in curves.values()] + [2])
    for c, hist in zip(colours * 4, curves.values()):
        xs = 20 + (w - 31) * np.arange(len(hist)) / (n - 1)
        ys = (h - 20) - (h - 31) * np.array([hh["best"] for hh in hist]) / top
        for x0, y0, x1, y1 in zip(xs, ys, xs[1:], ys[1:]):
            for t in np.linspace(0, 1, 2 + int(abs(x1 - x0) + abs(y1 - y0))):
                img[int(y0 + t * (y1 - y0)), int(x0 + t * (x1 - x0))] = c
    raw = b"".join(b"\0" + row.tobytes() for row in img)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
