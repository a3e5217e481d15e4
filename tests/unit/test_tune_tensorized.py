"""Tuning an int8 GEMM: the tensorized form's outer loops are searched (UNIT §4.3).

Every candidate is the schedule's loops plus the `tensorize` action, so the winner replays from
the database and computes numpy's int32 result exactly; the result is never slower than the
default (itself tensorized), and every measurement is recorded like any other."""
import sqlite3

import numpy as np
import pytest

import loopstack as lt
from loopstack.isa import cpu
from loopstack.isa.target import get_target
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
    # on tile blocks where the CPU has them (the start among them), and only there
    on_tiles = [h for h in res.history if any(a[0] == "tensorize" and a[1][1] == "amx" for a in h["actions"])]
    assert bool(on_tiles) == tiles_granted()
    if on_tiles:
        assert any(a[0] == "tensorize" and a[1][1] == "amx" for a in res.history[0]["actions"])
    with sqlite3.connect(db) as con:
        tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
        rows = sum(con.execute(f"select count(*) from {t}").fetchone()[0] for t in tables)
    assert rows >= res.measured
    tree = replay(C.loop_tree, res.actions)
    assert tree == res.tree
    C.set(tree)
    np.testing.assert_array_equal(C.numpy(), ref)


def space(C, target=None):
    """What the tuner's session of C knows about its main node (tune.api.Session)."""
    from types import SimpleNamespace

    from loopstack.isa.target import get_target
    from loopstack.tune.space import main_node, var_sizes

    base = C.loop_tree
    nid = main_node(base)
    return SimpleNamespace(base=base, nid=nid, sizes=var_sizes(base, nid), target=get_target(target),
                           output_vars=tuple(base.graph.node(nid).vars))


def tiles_granted():
    return {"amx_tile", "amx_int8"} <= cpu.cpu_features() and cpu.amx_permission()[0] \
        and lt.default_target() != "interp" and get_target().name == "avx512"


def without_amx(monkeypatch):
    """This CPU as one without AMX (the tuner gates on the CPU's features, not on a machine)."""
    feats = frozenset(f for f in cpu.cpu_features() if not f.startswith("amx"))
    monkeypatch.setattr(cpu, "cpu_features", lambda: feats)


def test_the_search_space_has_tile_blocks_only_where_the_cpu_has_them(monkeypatch):
    from loopstack.tune.tensorized import tile_plans

    C, ref = gemm(M=80, N=64, K=100)
    base = C.loop_tree
    if tiles_granted():
        found = tile_plans(space(C))
        assert found and all(p.tensorize == "amx" for p in found)
        shapes = {tuple(dict(p.tiles)[v] for v in ("m", "n")) for p in found}
        # the rewriter's own blocks, and every block the tile registers hold, either order
        assert {((), ()), ((32,), (32,)), ((16,), (32,)), ((32,), (16,)), ((16,), (16,))} <= shapes
        assert len({p.order[:2] for p in found if dict(p.tiles)["m"]}) == 2
        for p in found[:3]:                           # each realizes, on tiles, exactly
            tree = realize(base, p)
            assert tree.compile().tensorized == "amx.tdpbusd"
            C.set(tree)
            np.testing.assert_array_equal(C.numpy(), ref)
    without_amx(monkeypatch)
    C.set(base)
    assert tile_plans(space(C)) == []
    tree = default_schedule(C)
    assert tree.compile().tensorized.startswith("vpdpbusd")


def test_on_tiles_the_default_is_the_compiles_own_code():
    """The tuner starts from (and keeps, unless beaten) the untuned compile's tile blocks, so
    its result is never the vector code that runs several times slower."""
    if not tiles_granted():
        pytest.skip("needs AMX tiles granted by Linux and an avx512 default target")
    C, ref = gemm(M=100, N=48, K=96)
    plain = lt.compile(C)
    tuned_start = default_schedule(C).compile()
    assert plain.tensorized == tuned_start.tensorized == "amx.tdpbusd"

    def loops(kernel):
        (stack, _), = [(s_, c) for s_, c in kernel.lowered.computes() if c.reduce == "add"]
        return [(lp.dim, lp.step) for lp in stack]
    assert loops(plain) == loops(tuned_start)


def test_a_contraction_tiles_cannot_take_keeps_the_planned_vector_default():
    """An int8 convolution of channels outermost (no tile form): the default schedule is the
    planned loop order on the vector instruction, on an AMX CPU as on any other."""
    from int8_programs import ints

    rng = np.random.default_rng(3)
    x, w = ints(rng, "int8", (8, 6, 7)), ints(rng, "int8", (16, 8, 3, 3))
    s = lt.SymbolGenerator()
    X = lt.nn.pad(lt.Tensor(x).to(s.c, s.h, s.w), (s.h, 1), (s.w, 1))
    Y = lt.nn.conv(X, lt.Tensor(w).to(s.co, s.c, s.kh, s.kw), X.symbolic_shape[1:], [s.kh, s.kw])
    tree = default_schedule(Y)
    assert [a.kind for a in tree.actions].count("set_order") >= 1
    kernel = tree.compile()
    assert kernel.tensorized is not None and not kernel.tensorized.startswith("amx")
    xp = np.pad(x.astype(np.int32), ((0, 0), (1, 1), (1, 1)))
    ref = sum(np.einsum("chw,oc->hwo", xp[:, i:i + 6, j:j + 7], w[:, :, i, j].astype(np.int32))
              for i in range(3) for j in range(3))
    Y.set(tree)
    np.testing.assert_array_equal(Y.numpy(), ref)
