"""Tuning on a real local Ray cluster: a head and a second node process on 127.0.0.1.

The cluster (ray.cluster_utils.Cluster: each node its own raylet process) is started once for
the module and stopped at its end; the node-loss test adds a third node of its own and kills
it (raylet and workers, SIGKILL) while it holds a candidate.
"""
import json
import os
import sys
import threading
import time

import numpy as np
import pytest

import loopstack as lt
from loopstack.frontend.serialize import deserialize
from loopstack.tune.api import TuneConfig, tune
from loopstack.tune.db import TuningDB
from loopstack.tune.measure import CRASH, OK, TIMEOUT, Measurement, measure_job
from loopstack.tune.space import actions_json

# Ray replaces 127.0.0.1 in an address by this machine's outward IP unless told it runs no
# multi-machine cluster; the test cluster listens on the loopback interface only
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray", reason="the cluster tests need Ray (pip install 'loopstack[cluster]')")
from ray.cluster_utils import Cluster  # noqa: E402

from loopstack.tune.cluster import Fleet  # noqa: E402

# the jobs below run in the node processes, which cannot import this test module
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

LOOPBACK = {"node_ip_address": "127.0.0.1"}
# a dead node declared dead within about a second (Ray's default takes some 15 s): the pool
# re-queues a lost node's candidate once Ray says the node is gone
FAST_HEALTH_CHECK = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 300,
                     "health_check_failure_threshold": 3}


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                      "_system_config": FAST_HEALTH_CHECK, **LOOPBACK})
    try:
        c.add_node(num_cpus=1, **LOOPBACK)
        c.wait_for_nodes(timeout=60)
        ray.init(address=c.address, log_to_driver=False, logging_level="ERROR")
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def _scripted_job(text, inputs, reference, runs, target, floor):
    """A candidate that says what it does: "crash" kills its process, "hang" never answers."""
    if text == "crash":
        os._exit(3)
    if text == "hang":
        time.sleep(3600)
    return Measurement(float(len(text)), OK)


def test_a_crash_or_a_hang_costs_that_candidate_only(cluster):
    texts = ["ok", "crash", "okk", "hang", "okkk", "okkkk"]
    # probe_s: a restarted actor on a busy machine may take a while to answer its ping
    with Fleet([], None, runs=1, timeout=4.0, job=_scripted_job, per="core", probe_s=90.0) as fleet:
        (kind,) = fleet.kinds                       # two nodes of this one machine, a CPU each
        assert len(kind.nodes) == 2 and all(n.endswith("/0") for n in kind.nodes) and kind.peak_gflops > 0
        assert kind.identity == lt.isa.target.host_target().identity
        got = kind.pool.measure(None, texts=texts)
        assert [m.status for m in got] == [OK, CRASH, OK, TIMEOUT, OK, OK]
        assert [m.gflops for m in got if m.status == OK] == [2.0, 3.0, 4.0, 5.0]
        assert kind.pool.stats == {"measured": 4, "crash": 1, "timeout": 1, "requeued": 0, "lost": 0}
        # the crashed and the killed actor were restarted: both nodes measure again
        again = kind.pool.measure(None, texts=["a" * n for n in range(1, 7)])
        assert [m.gflops for m in again] == [1, 2, 3, 4, 5, 6]
        assert {m.node for m in again} == set(kind.nodes)


def test_loopstack_tune_ray_files_measurements_per_node(cluster, tmp_path, capsys):
    from loopstack.cli import main

    db, out = str(tmp_path / "cli.db"), str(tmp_path / "r.json")
    assert main(["tune", "MM-64", "--budget", "2", "--mapper", "random", "--ray", cluster.address,
                 "--db", db, "--json", out]) == 0
    identity = lt.isa.target.host_target().identity
    assert f"{identity}: best" in capsys.readouterr().out
    (rec,) = json.loads(open(out).read())
    assert rec["target"] == identity and rec["measured"] > 2
    with TuningDB(db) as d:
        (row,) = d.stats()
        assert (row["target"], row["measurements"], row["nodes"]) == (identity, rec["measured"], 2)


class _HangOnNode:
    """measure_job, except on one node, where the first candidate is held (until the node is
    killed) after a marker file says it is in flight."""

    def __init__(self, node_id, marker):
        self.node_id, self.marker = node_id, marker

    def __call__(self, text, inputs, reference, runs, target, floor):
        if ray.get_runtime_context().get_node_id() == self.node_id:
            with open(self.marker, "w") as f:
                f.write(text)
            time.sleep(3600)
        return measure_job(text, inputs, reference, runs, target, floor)


def test_a_node_killed_mid_search_loses_no_measurement(cluster, tmp_path):
    doomed = cluster.add_node(num_cpus=1, **LOOPBACK)
    cluster.wait_for_nodes(timeout=60)
    marker = tmp_path / "in-flight"
    killed = threading.Event()

    def kill_when_in_flight():
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster.remove_node(doomed, allow_graceful=False)     # raylet and workers, SIGKILL
        killed.set()

    threading.Thread(target=kill_when_in_flight, daemon=True).start()
    s = lt.SymbolGenerator()
    A = lt.Tensor(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)).to(s.m, s.k)
    B = lt.Tensor(np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)).to(s.k, s.n)
    C = (A * B).sum(s.k)
    db_path = str(tmp_path / "team.db")
    budget = 6.0
    config = TuneConfig(db_path=db_path, timeout_s=60.0, runs=3, confirm_rounds=1)
    res = tune(C, budget_s=budget, mapper="random", config=config, cluster=cluster.address,
               job=_HangOnNode(doomed.node_id, str(marker)))
    assert killed.is_set(), "the doomed node never received a candidate"
    assert len(res.nodes) == 3
    assert res.pool_stats["lost"] == 1 and res.pool_stats["requeued"] >= 1
    # the candidate held by the killed node was measured elsewhere, like every other one
    assert res.measured > 3 and all(h["status"] == OK for h in res.history)
    held = actions_json(deserialize(marker.read_text()))
    assert held in [h["actions"] for h in res.history]
    survivors = {n for n in res.nodes if not n.endswith(doomed.node_id[:8])}
    assert {h["node"] for h in res.history} <= survivors
    # only the driver wrote, and every measurement it received is in the database, once
    with TuningDB(db_path) as db:
        rows = db.measurements(res.program, res.target)
        assert len(rows) == res.measured
        assert db.best(res.program, res.target) is not None
    # the search stopped within its budget (a candidate started before the deadline may finish)
    assert res.history[-1]["t"] <= budget + 5.0
