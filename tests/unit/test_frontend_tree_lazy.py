"""A frontend LoopTree builds its loops and refs on first use: a tree nobody looks at (an
intermediate of a mutation chain) costs only its checks, and a tree looked at is the one built
eagerly."""
import numpy as np
import pytest

import loopstack as lt
from loopstack.errors import ScheduleError
from loopstack.frontend.tree import LoopTree


def _mlp_layer():
    s = lt.SymbolGenerator()
    rng = np.random.default_rng(0)
    X = lt.Tensor(rng.standard_normal((8, 32)).astype(np.float32)).to(s.b, s.i)
    W = lt.Tensor(rng.standard_normal((32, 48)).astype(np.float32), constant=True).to(s.i, s.j)
    b = lt.Tensor(rng.standard_normal(48).astype(np.float32), constant=True).to(s.j)
    return lt.nn.relu(lt.nn.linear(X, W, b))


def test_a_tree_is_built_when_looked_at_and_equals_the_eager_one():
    Y = _mlp_layer()
    tree = Y.loop_tree          # (default_schedule looks at its loops: it picks one to run in parallel)
    assert "items" not in vars(tree)                  # nothing asked for the loops yet
    eager = LoopTree(tree.graph, tree.schedule, tree.actions)
    eager._build()
    assert str(tree) == str(eager)                    # printing builds it
    assert [(i.ref, i.kind, i.parent, i.depth, i.children, i.entry, i.node) for i in tree.items] == \
           [(i.ref, i.kind, i.parent, i.depth, i.children, i.entry, i.node) for i in eager.items]
    assert tree.sequence == eager.sequence and tree.roots == eager.roots
    Y.set(tree)
    np.testing.assert_allclose(Y.numpy(), Y.numpy("interp"), rtol=1e-5, atol=1e-5)


def test_an_illegal_schedule_is_refused_at_construction_not_on_first_use():
    Y = _mlp_layer()
    tree = Y.loop_tree
    nid = tree.ir_node(tree.nodes[0])
    order = tree.node_schedule(nid).order
    bad = tree.replace_node_schedule(nid, order=order[:-1] + ((order[-1][0], order[-1][1] + 1, 0),))
    with pytest.raises(ScheduleError, match="cover"):
        LoopTree(tree.graph, tuple(bad.items()))
