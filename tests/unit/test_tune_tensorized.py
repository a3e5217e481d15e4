"""Tuning an int8 GEMM: the tensorized form's outer loops are searched (UNIT §4.3).

Every candidate is the schedule's loops plus the `tensorize` action, so the winner replays from
the database and computes numpy's int32 result exactly; the result is never slower than the
default (itself tensorized), and every measurement is recorded like any other."""
import sqlite3

import numpy as np
import pytest

import loopstack as lt
from loopstack.isa import cpu
from loopstack.tune.api import TuneConfig, tune
from loopstack.tune.defaults import default_schedule
from loopstack.tune.space import Plan, realize, replay

pytestmark = pytest.mark.skipif(not {"avx2"} <= cpu.cpu_features() or lt.default_target() == "interp",
                                reason="needs an x86 vector target to compile int8 contractions natively")


def gemm(M=48, N=64, K=64, seed=0):
    rng = np.random.default_rng(seed)
    s = lt.SymbolGenerator()
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    return C, a.astype(np.int32) @ b.astype(np.int32)


def test_the_default_schedule_runs_on_the_instruction():
    C, ref = gemm()
    tree = default_schedule(C)
    assert any(a.kind == "tensorize" for a in tree.actions)
    assert tree.compile().tensorized is not None
    C.set(tree)
    np.testing.assert_array_equal(C.numpy(), ref)


def test_tensorized_plans_realize_replay_and_are_exact():
    C, ref = gemm()
    base = C.loop_tree
    lanes = lt.compile(C).target.vector_bits // 32
    for rows, order in ((4, ("n", "m", "k", "m'", "n'")), (3, ("m", "n", "k", "k'", "m'", "n'"))):
        tiles = (("m", (rows,)), ("k", (16,) if "k'" in order else ()), ("n", (lanes,)))
        tree = realize(base, Plan(tiles, order, (), "auto"))
        assert tree.actions[-2 if tree.actions[-1].kind == "annotate" else -1].kind == "tensorize"
        assert replay(base, [[a.kind, list(a.args)] for a in tree.actions]) == tree
        kernel = tree.compile()
        assert kernel.tensorized is not None
        C.set(tree)
        np.testing.assert_array_equal(C.numpy(), ref)


@pytest.mark.parametrize("mapper,cost_model", [("scripted", "measure"), ("evolutionary", "analytical")])
def test_tune_searches_the_tensorized_outer_loops(tmp_path, mapper, cost_model):
    C, ref = gemm()
    db = tmp_path / "tuning.db"
    res = tune(C, budget_s=1.0, mapper=mapper, cost_model=cost_model,
               config=TuneConfig(db_path=str(db), timeout_s=10, runs=2))
    assert res.gflops >= res.default_gflops > 0
    assert res.measured >= 2
    # every candidate measured is a tensorized schedule, recorded in the database
    assert all(any(a[0] == "tensorize" for a in h["actions"]) for h in res.history)
    with sqlite3.connect(db) as con:
        tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
        rows = sum(con.execute(f"select count(*) from {t}").fetchone()[0] for t in tables)
    assert rows >= res.measured
    tree = replay(C.loop_tree, res.actions)
    assert tree == res.tree
    C.set(tree)
    np.testing.assert_array_equal(C.numpy(), ref)
