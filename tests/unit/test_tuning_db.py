"""The tuning database shared by a team: concurrent writers, `loopstack db`, merging, and
searches of several kinds of machines filed each under its own identity."""
import json
import os
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

import loopstack as lt
from loopstack.cli import main
from loopstack.errors import ArgumentError, ClusterError, UnsupportedError
from loopstack.isa import cpu
from loopstack.isa.target import get_target
from loopstack.tune import cluster as tcluster
from loopstack.tune.api import TuneConfig, tune
from loopstack.tune.db import TuningDB
from loopstack.tune.measure import WorkerPool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env():
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_two_tuning_processes_writing_one_database_lose_no_rows(tmp_path):
    db = str(tmp_path / "shared.db")
    procs = []
    for i, workload in enumerate(("MM-64", "MM-128")):
        out = tmp_path / f"r{i}.json"
        cmd = [sys.executable, "-m", "loopstack", "tune", workload, "--budget", "2", "--mapper", "random",
               "--seed", str(i), "--db", db, "--json", str(out)]
        procs.append((subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True), out))
    measured = []
    for p, out in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        measured.append(json.loads(out.read_text())[0]["measured"])
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name, count(*) FROM measurements GROUP BY name").fetchall()
    assert dict(rows) == {"MM-64": measured[0], "MM-128": measured[1]}
    assert min(measured) > 2


def _fill(path, rows, node="a"):
    with TuningDB(path) as db:
        for i in range(rows):
            db.record("prog", "tgt", [["split", [0, i + 1]]], float(i), "ok", "W", node=node, created=1000.0 + i)
        db.set_best("prog", "tgt", [["split", [0, 1]]], 0.5)


def test_db_command_exports_imports_without_duplicates_and_reports(tmp_path, capsys):
    mine, theirs = str(tmp_path / "mine.db"), str(tmp_path / "theirs.db")
    _fill(mine, 5)
    _fill(theirs, 8)          # holds my five rows and three more, and a faster best
    with TuningDB(theirs) as db:
        db.set_best("prog", "tgt", [["split", [0, 7]]], 7.0)
    exported = str(tmp_path / "theirs.jsonl")
    assert main(["db", "--db", theirs, "export", exported]) == 0
    assert main(["db", "--db", mine, "import", exported]) == 0
    assert "3 measurements added, 5 already held, 1 best schedules replaced" in capsys.readouterr().out
    assert main(["db", "--db", mine, "import", exported]) == 0      # twice: nothing new
    assert "0 measurements added, 8 already held, 0 best" in capsys.readouterr().out
    with TuningDB(mine) as db:
        assert len(db.measurements("prog", "tgt")) == 8
        assert db.best("prog", "tgt") == ([["split", [0, 7]]], 7.0)
    stats_json = str(tmp_path / "stats.json")
    assert main(["db", "--db", mine, "stats", "--json", stats_json]) == 0
    out = capsys.readouterr().out
    assert "1 program/target pairs, 8 measurements" in out
    (rec,) = json.loads(open(stats_json).read())
    assert (rec["name"], rec["measurements"], rec["ok"], rec["best_gflops"]) == ("W", 8, 8, 7.0)


def test_db_command_errors_name_the_problem(tmp_path, capsys):
    assert main(["db", "--db", str(tmp_path / "none.db"), "stats"]) == 2
    assert "no tuning database at" in capsys.readouterr().err
    assert main(["db", "--db", str(tmp_path / "x.db"), "import", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"program": 1}\n')
    assert main(["db", "--db", str(tmp_path / "x.db"), "import", str(bad)]) == 2
    assert "not a loopstack database export" in capsys.readouterr().err


def test_an_older_database_gains_the_node_column(tmp_path):
    path = str(tmp_path / "old.db")
    with sqlite3.connect(path) as conn:
        conn.executescript("""CREATE TABLE measurements (program TEXT NOT NULL, target TEXT NOT NULL, name TEXT,
            shapes TEXT, dtypes TEXT, actions TEXT NOT NULL, gflops REAL NOT NULL, status TEXT NOT NULL,
            mapper TEXT, created REAL NOT NULL);""")
        row = ("p", "t", "", "", "", "[]", 1.0, "ok", "", 5.0)
        conn.executemany("INSERT INTO measurements VALUES (?,?,?,?,?,?,?,?,?,?)", [row, row])   # a duplicate
    with TuningDB(path) as db:
        assert len(db.measurements("p", "t")) == 1
        assert db.record("p", "t", [], 1.0, created=5.0) is False
        assert db.record("p", "t", [], 1.0, created=5.0, node="n2") is True


class _KindPool(WorkerPool):
    """A local pool standing in for a kind of cluster machine."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.stats = {"measured": 0}

    def peak(self):
        return 100.0


def test_each_kind_of_machine_gets_its_own_search_and_its_own_rows(tmp_path, monkeypatch):
    """A cluster of two kinds (as the nodes describe themselves): a search per kind, side by
    side, each planned for its target and filed under its identity (Ray stood in for)."""
    wide = "avx512" if get_target("avx512", check=False).required <= cpu.cpu_features() else "avx2"
    made = []

    class TwoKinds:
        def __init__(self, inputs, reference, runs, timeout, per, target, **kw):
            self.kinds = []
            for identity, name, nodes in ((f"{wide}/fake-a", wide, ["a:1", "a:2"]), ("avx2/fake-b", "avx2", ["b:1"])):
                pool = _KindPool(inputs, reference, runs=runs, timeout=timeout, target=name)
                made.append(pool)
                self.kinds.append(tcluster.Kind(identity, get_target(name), 100.0, nodes, pool))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            for p in made:
                p.close()

    monkeypatch.setattr(tcluster, "connected", lambda address: _null())
    monkeypatch.setattr(tcluster, "Fleet", TwoKinds)
    s = lt.SymbolGenerator()
    A = lt.Tensor(np.random.default_rng(0).standard_normal((48, 32)).astype(np.float32)).to(s.m, s.k)
    B = lt.Tensor(np.random.default_rng(1).standard_normal((32, 64)).astype(np.float32)).to(s.k, s.n)
    C = (A * B).sum(s.k)
    db_path = str(tmp_path / "kinds.db")
    res = tune(C, budget_s=1.5, mapper="random", config=TuneConfig(db_path=db_path, confirm_rounds=1),
               cluster="127.0.0.1:1")
    assert res.target == f"{wide}/fake-a" and res.nodes == ["a:1", "a:2"]
    assert set(res.by_target) == {f"{wide}/fake-a", "avx2/fake-b"}
    with TuningDB(db_path) as db:
        for identity, r in res.by_target.items():
            assert r.measured > 0 and len(db.measurements(r.program, identity)) == r.measured
            assert db.best(r.program, identity) is not None


def test_nodes_are_grouped_into_kinds_by_their_target_identity():
    zen3 = {"identity": "avx2/zen3", "target": get_target("avx2", check=False), "peak_gflops": 100.0}
    xeon = {"identity": "avx512/xeon", "target": get_target("avx512", check=False), "peak_gflops": 160.0}
    described = [("s1", dict(zen3, label="a")), ("s2", dict(xeon, label="b")),
                 ("s3", dict(zen3, label="c", peak_gflops=104.0))]
    kinds = tcluster.group_kinds(described, make_pool=tuple)
    assert [(k.identity, k.nodes, k.pool, k.peak_gflops) for k in kinds] == [
        ("avx2/zen3", ["a", "c"], ("s1", "s3"), 104.0), ("avx512/xeon", ["b"], ("s2",), 160.0)]
    assert kinds[1].target.vector_bits == 512


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_cluster_arguments_are_checked(monkeypatch):
    s = lt.SymbolGenerator()
    X = lt.Tensor(np.ones((8, 8), np.float32)).to(s.m, s.k)
    with pytest.raises(ArgumentError, match="unknown per 'gpu'"):
        tune(X.sum(s.k), budget_s=1, cluster="auto", per="gpu")
    with pytest.raises(ArgumentError, match="cluster: expected"):
        with tcluster.connected(""):
            pass
    monkeypatch.setitem(sys.modules, "ray", None)         # Ray not installed
    with pytest.raises(UnsupportedError, match=r"pip install 'loopstack\[cluster\]'"):
        with tcluster.connected("auto"):
            pass


def test_an_address_nothing_answers_at_fails_at_once():
    """Ray would retry a wrong address for minutes."""
    import socket

    pytest.importorskip("ray", reason="the cluster extra (Ray) is not installed")
    with pytest.raises(ArgumentError, match="cluster: expected"):
        with tcluster.connected("head-without-port"):
            pass
    with socket.socket() as sock:           # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ClusterError, match="no Ray cluster answers at '127.0.0.1:"):
        with tcluster.connected(f"127.0.0.1:{port}"):
            pass


def test_connections_opening_one_new_database_at_once_all_set_it_up(tmp_path):
    """Tuners started side by side (a cluster's kinds, two processes) open one new file at the
    same moment: SQLite answers some of the set-up races "database is locked" at once rather
    than after its busy timeout; every connection still opens the database and records."""
    import threading

    from loopstack.tune.db import TuningDB

    errors = []
    for trial in range(60):
        path = str(tmp_path / f"race{trial}.db")
        start = threading.Barrier(8)

        def open_and_record(i):
            start.wait()
            try:
                with TuningDB(path) as db:
                    db.record(f"program{i}", "avx2", [["split", i]], float(i))
            except Exception as e:  # noqa: BLE001 - every failure is the finding
                errors.append(repr(e))

        threads = [threading.Thread(target=open_and_record, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with TuningDB(path) as db:
            assert sum(len(db.measurements(f"program{i}", "avx2")) for i in range(8)) == 8
    assert errors == []
