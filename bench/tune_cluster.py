"""Measuring on a Ray cluster: candidates per minute with 1 and 2 nodes, and the overhead per
candidate against the local worker pool.

    python bench/tune_cluster.py [--workload MM-256] [--candidates 40] [--json FILE]

Starts a local Ray cluster on 127.0.0.1 (a head and a second node process, one CPU each, as
`ray start --head --num-cpus 1` and `ray start --address ... --num-cpus 1` would), then
measures the same candidate schedules of one workload

    local         the local pool, 1 worker process (single-threaded candidates), measured
                  before and after the cluster (the machine's load drifts)
    local x2      2 worker processes
    ray 1 node    one actor on the head node
    ray 2 nodes   one actor per node

and, with a job that returns at once, the round trip of one candidate through each (the
overhead per candidate: what the pool adds to compiling and timing). Every measurement is
single-threaded, so that the nodes' candidates do not compete for each other's core.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

# Ray replaces 127.0.0.1 in an address by this machine's outward IP unless told it runs no
# multi-machine cluster; this benchmark's cluster listens on the loopback interface only
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import numpy as np  # noqa: E402

from loopstack.frontend.serialize import serialize  # noqa: E402
from loopstack.tune.measure import OK, Measurement, WorkerPool, reference_output  # noqa: E402
from loopstack.tune.space import main_node, random_plan, realize, var_sizes  # noqa: E402
from loopstack.workloads import get_workload  # noqa: E402

LOOPBACK = {"node_ip_address": "127.0.0.1"}


def null_job(text, inputs, reference, runs, target, floor):
    """No compile, no timing: what is left is the pool's own cost per candidate."""
    return Measurement(1.0, OK)


def candidates(name: str, count: int, seed: int = 0):
    from loopstack.isa.target import host_target

    Y, _ = get_workload(name).build(seed)
    base = Y.loop_tree
    nid = main_node(base)
    sizes = var_sizes(base, nid)
    rng = random.Random(seed)
    trees, seen = [], set()
    for _ in range(count * 20):
        try:
            t = realize(base, random_plan(rng, sizes, host_target().lanes()), nid)
        except Exception:  # noqa: BLE001 - an illegal plan is skipped in a sweep
            continue
        if t.key() not in seen:
            seen.add(t.key())
            trees.append(t)
        if len(trees) == count:
            break
    ir = base.lower()
    rng_np = np.random.default_rng(seed)
    from loopstack.backend.kernel_base import random_array

    inputs = [random_array(b, rng_np) for b in ir.inputs]
    return trees, inputs, reference_output(base, inputs)


def timed(pool, texts) -> tuple[float, list]:
    t0 = time.perf_counter()
    got = pool.measure(None, texts=texts)
    return time.perf_counter() - t0, got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="MM-256")
    ap.add_argument("--candidates", type=int, default=40)
    ap.add_argument("--null", type=int, default=200, help="candidates of the null job (overhead)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    import ray
    from ray.cluster_utils import Cluster

    from loopstack.tune.cluster import Fleet

    trees, inputs, reference = candidates(args.workload, args.candidates)
    texts = [serialize(t) for t in trees]
    nulls = ["x"] * args.null
    rows = []

    def record(label, nodes, seconds, got, null_seconds):
        ok = sum(m.status == OK for m in got)
        rows.append({"name": f"tune_cluster_{label.replace(' ', '_')}", "nodes": nodes,
                     "candidates": len(got), "ok": ok, "seconds": seconds,
                     "candidates_per_min": 60 * len(got) / seconds,
                     "overhead_ms": 1e3 * null_seconds / len(nulls)})

    def local(workers, label):
        with WorkerPool(inputs, reference, workers=workers, threads=1) as pool:
            timed(pool, texts[:2])                                   # workers started
            sec, got = timed(pool, texts)
        with WorkerPool([], None, workers=workers, job=null_job) as pool:
            timed(pool, nulls[:2])
            null_sec, _ = timed(pool, nulls)
        record(label, workers, sec, got, null_sec)

    local(1, "local")
    local(2, "local x2")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, **LOOPBACK})
    try:
        ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
        for nodes in (1, 2):
            if nodes == 2:
                cluster.add_node(num_cpus=1, **LOOPBACK)
                cluster.wait_for_nodes(timeout=120)
            with Fleet(inputs, reference, runs=10, threads=1) as fleet:
                pool = fleet.kinds[0].pool
                timed(pool, texts[:2 * nodes])
                sec, got = timed(pool, texts)
            with Fleet([], None, job=null_job) as fleet:
                pool = fleet.kinds[0].pool
                timed(pool, nulls[:2 * nodes])
                null_sec, _ = timed(pool, nulls)
            record(f"ray {nodes} node" + ("s" if nodes > 1 else ""), nodes, sec, got, null_sec)
    finally:
        ray.shutdown()
        cluster.shutdown()
    local(1, "local again")      # the machine's load drifts: the baseline before and after

    base = dict(rows[0], candidates_per_min=(rows[0]["candidates_per_min"] + rows[-1]["candidates_per_min"]) / 2,
                overhead_ms=(rows[0]["overhead_ms"] + rows[-1]["overhead_ms"]) / 2)
    print(f"{args.workload}: {len(texts)} candidates, each single-threaded; machine: {os.cpu_count()} cores "
          f"(load average {os.getloadavg()[0]:.1f})")
    print(f"{'pool':<12} {'nodes':>5} {'cand/min':>9} {'vs local':>9} {'ok':>4} {'overhead ms':>12}")
    for r in rows:
        r["speedup_vs_local"] = r["candidates_per_min"] / base["candidates_per_min"]
        print(f"{r['name'][13:].replace('_', ' '):<12} {r['nodes']:5d} {r['candidates_per_min']:9.0f} "
              f"{r['speedup_vs_local']:8.2f}x {r['ok']:4d} {r['overhead_ms']:12.2f}")
    one, two = rows[2], rows[3]
    print(f"ray: 2 nodes / 1 node throughput {two['candidates_per_min'] / one['candidates_per_min']:.2f}x; "
          f"overhead per candidate over the local pool {one['overhead_ms'] - base['overhead_ms']:+.2f} ms "
          f"(vs local: against the mean of the two local runs)")
    if args.json:
        from loopstack.timing import write_records
        write_records(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
