"""Mutations a schedule generator applies at once: annotate_loops is annotate one loop after
another (same tree, same replayable actions), and the default schedule's trace replays."""
import numpy as np
import pytest

import loopstack as lt
from loopstack.errors import ScheduleError
from loopstack.frontend.mutate import annotate, annotate_loops, apply_actions, set_order, set_orders
from loopstack.tune.defaults import default_schedule, parallelize


def _mlp(hidden=256, layers=3):
    s = lt.SymbolGenerator()
    rng = np.random.default_rng(0)
    syms = [s.i, s.j, s.l, s.o][:layers + 1]
    Y = lt.Tensor(rng.standard_normal((8, hidden)).astype(np.float32)).to(s.b, syms[0])
    for i in range(layers):
        W = lt.Tensor((rng.standard_normal((hidden, hidden)) / 16).astype(np.float32), constant=True)
        b = lt.Tensor(rng.standard_normal(hidden).astype(np.float32), constant=True)
        Y = lt.nn.relu(lt.nn.linear(Y, W.to(syms[i], syms[i + 1]), b.to(syms[i + 1])))
    return Y


def _layers_outer_loops():
    """A default-scheduled MLP with its parallel annotations cleared, and its layers' outer loops."""
    tree = default_schedule(_mlp(1024), "avx512")
    refs = [r for r in tree.roots if tree.kind(r) == "loop" and tree.loop(r).annotation == "parallel"]
    for r in refs:
        tree = annotate(tree, r, "")
    return tree, refs


@pytest.mark.parametrize("kind", ["unroll", "parallel"])
def test_annotating_loops_at_once_is_annotating_them_one_by_one(kind):
    tree, refs = _layers_outer_loops()
    assert len(refs) == 3 and not any(tree.loop(r).annotation for r in refs)
    one_by_one = tree
    for r in refs:
        one_by_one = annotate(one_by_one, r, kind)
    at_once = annotate_loops(tree, refs, kind)
    assert at_once == one_by_one and at_once.actions == one_by_one.actions
    assert str(at_once) == str(one_by_one)
    assert [at_once.loop(r).annotation for r in refs] == [kind] * 3
    assert apply_actions(tree, at_once.actions[len(tree.actions):]) == at_once


def test_annotating_loops_at_once_refuses_what_annotate_refuses():
    tree, refs = _layers_outer_loops()
    inner = next(r for r in tree.loops if tree.loop(r).depth > 0 and not any(
        tree.loop(r).entry[0] in tree.graph.reduced(tree.graph.node(i)) for i in tree.loop(r).leaves))
    with pytest.raises(ScheduleError, match="only an outermost loop can run in parallel"):
        annotate_loops(tree, [refs[0], inner], "parallel")
    with pytest.raises(ScheduleError, match="unknown annotation"):
        annotate_loops(tree, refs[:1], "fast")


@pytest.mark.parametrize("hidden", [256, 1024])
def test_the_default_schedules_trace_replays_to_the_same_tree(hidden):
    Y = _mlp(hidden)
    unscheduled = Y.loop_tree
    tree = default_schedule(Y, "avx512")
    assert any("parallel" in str(a) for a in tree.actions) or hidden == 256
    assert apply_actions(unscheduled, tree.actions) == tree
    assert parallelize(tree) == tree                 # annotated already: nothing more to do
    Y.set(tree)
    np.testing.assert_allclose(Y.numpy(), Y.numpy("interp"), rtol=1e-4, atol=1e-4)


def test_setting_orders_at_once_is_setting_them_one_by_one():
    Y = _mlp(1024)
    unscheduled = Y.loop_tree
    scheduled = default_schedule(Y, "avx512")
    orders = [(nid, ns.order) for nid, ns in scheduled.schedule
              if nid in unscheduled._sched and ns.order != unscheduled.node_schedule(nid).order]
    assert len(orders) >= 6
    one_by_one = unscheduled
    for nid, order in orders:
        one_by_one = set_order(one_by_one, nid, order)
    at_once = set_orders(unscheduled, orders)
    assert at_once == one_by_one and at_once.actions == one_by_one.actions
    assert str(at_once) == str(one_by_one)
    nid, order = orders[0]
    with pytest.raises(ScheduleError, match="cover"):
        set_orders(unscheduled, [orders[1], (nid, order[:-1])])
    with pytest.raises(ScheduleError, match="not a scheduled node"):
        set_orders(unscheduled, [(10**6, order)])


@pytest.mark.parametrize("workload", ["MLP-8x256", "CONV-2", "DWCONV-1"])
def test_a_staging_copy_finds_again_only_the_dependencies_that_change(workload):
    from loopstack.frontend.mutate import copy_input
    from loopstack.frontend.tree import dependencies
    from loopstack.workloads import WORKLOADS

    tree = WORKLOADS[workload].build(seed=0)[0].loop_tree
    copied = 0
    for nid in [n.id for n in tree.graph.nodes if n.op == "binary"]:
        for idx in (0, 1):
            try:
                new = copy_input(tree, tree.ref_of(nid), idx)
            except ScheduleError:
                continue
            assert (new._deps, new._shifted) == dependencies(new.graph)
            tree, copied = new, copied + 1
    assert copied >= 2


def test_reordering_a_node_schedule_is_replacing_its_order_and_dropping_its_depths():
    from dataclasses import fields, replace

    from loopstack.frontend.tree import NodeSchedule

    # a field added to NodeSchedule must be carried by NodeSchedule.reordered too
    assert [f.name for f in fields(NodeSchedule)] == ["order", "priority", "layout", "disabled",
                                                      "annotations", "tensorize"]
    ns = NodeSchedule((("m", 4, 0), ("n", 8, 0)), 2.5, ("m", "n"), frozenset({1}), ((0, "parallel"),), "auto")
    order = (("n", 8, 0), ("m", 4, 0))
    assert ns.reordered(order) == replace(ns, order=order, annotations=(), disabled=frozenset())
