"""Facts the frozen loop-tree IR computes once per object (names, reads, lookups) are the ones it
would compute afresh, and leave equality, hashing and `replace` as the fields define them."""
import pickle
from dataclasses import replace

import pytest

from loopstack.looptree.builders import matmul_tree
from loopstack.looptree.ir import Access, Affine, Binary, Compute, Load, Loop, LoopTree, Unary, statements


def test_cached_facts_match_a_fresh_computation():
    tree = matmul_tree(8, 4, 16, order=[("m", 1), ("n", 1), ("k", 1)])
    for node in tree.body:
        for s in statements(node):
            for acc in (s.out, *s.reads()):
                assert acc.names() == {n for a in acc.index for n, _ in a.terms}
                assert acc.names() is acc.names()            # computed once
            assert list(s.reads()) == list(s.reads())        # a fresh iterator each time
    assert all(tree.dim_size(d) == size for d, size in tree.dims) and len(tree.dims) == 3
    assert all(tree.buffer(b.name) is b for b in tree.buffers)
    assert tree.arguments == tree.inputs + tree.outputs
    with pytest.raises(KeyError):
        tree.dim_size("nosuch")
    with pytest.raises(KeyError):
        tree.buffer("nosuch")


def test_walk_is_the_recursive_walk_in_program_order():
    tree = matmul_tree(8, 4, 16, order=[("m", 2), ("n", 1), ("k", 1), ("m", 1)])
    two = LoopTree(tree.buffers, tree.dims, tree.body + tree.body)     # two top-level nests

    def fresh(nodes, stack=()):
        for n in nodes:
            yield stack, n
            if isinstance(n, Loop):
                yield from fresh(n.body, stack + (n,))

    want = list(fresh(two.body))
    assert len(want) == 2 * 5
    got = list(two.walk())
    assert [len(st) for st, _ in got] == [len(st) for st, _ in want]
    assert all(a is b for (sa, a), (sb, b) in zip(got, want)) and all(
        x is y for (sa, _), (sb, _) in zip(got, want) for x, y in zip(sa, sb))
    assert [(st, c) for st, c in two.computes()] == [(st, n) for st, n in want if isinstance(n, Compute)]
    assert list(two.walk()) == got                           # a fresh iterator over the kept walk
    assert two == LoopTree(tree.buffers, tree.dims, tree.body + tree.body)     # the walk kept aside


def test_cached_facts_leave_identity_alone():
    a = Access("x", (Affine.of("i", ("j", 2)),))
    b = Access("x", (Affine.of("i", ("j", 2)),))
    a.names()                                            # a has its cache, b not
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
    c = replace(a, buffer="y")
    assert c.names() == a.names() and c.buffer == "y"
    s = Compute("s", a, Binary("add", Load(b), Unary("neg", Load(c))), reduce="add", post=Unary("relu", Load(b)))
    assert [r.buffer for r in s.reads()] == ["x", "y", "x"]
    t = replace(s, post=None)
    assert [r.buffer for r in t.reads()] == ["x", "y"]         # not the cached reads of s
    assert pickle.loads(pickle.dumps(s)) == s
