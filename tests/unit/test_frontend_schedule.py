"""Loop trees, schedule primitives, the loop_tool bugs that must not exist, random schedules."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopstack as lt
from loopstack.frontend.mutate import apply_actions
from loopstack.frontend.tree import default_schedule

rng = np.random.default_rng(1)


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def mm(a, b):
    s = lt.SymbolGenerator()
    return (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)


def run_tree(T, tree, target="interp"):
    T.set(tree)
    return T.numpy(target=target)


def test_print_matches_loop_tool_conventions():
    C = mm(r(8, 4), r(4, 6))
    text = str(C.loop_tree)
    assert text == ("for m in 8 : L0\n for k in 4 : L1\n  for n in 6 : L2\n"
                    "   %2[m, k, n] <- multiply(%0, %1)\n   %3[m, n] <- add(%2)\n"
                    " for n in 6 : L5\n  %4[m, n] <- write(%3)")
    t = C.loop_tree.split(0, 3)
    assert "for m in 2 r 2 : L0\n for m' in 3 : L1" in str(t)
    assert "%2[m, k, n] <- multiply(%0, %1)" in str(C.ir)
    assert "digraph" in C.ir.dot()


ACTIVATIONS = {"relu": (lt.nn.relu, lambda x: np.maximum(x, 0), 1),
               # HardSwish reads its argument twice (x * clip(x / 6 + 1/2, 0, 1)): both reads are
               # the accumulator, so the whole epilogue is applied on the store
               "hardswish": (lt.nn.hardswish, lambda x: x * np.clip(x / 6 + 0.5, 0, 1), 2)}


@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_split_with_tail_and_fused_bias_activation(act):
    fn, ref, reads = ACTIVATIONS[act]
    a, b, c = r(10, 7), r(7, 9), r(9)
    s = lt.SymbolGenerator()
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    D = fn(C + lt.Tensor(c).to(s.n))
    t = D.loop_tree.split(0, 4).split(3, 4)
    ir = t.lower()
    (stmt,) = [c for _, c in ir.computes()]
    assert stmt.post is not None and stmt.out.buffer == "out"   # bias + activation on the store
    assert str(stmt.post).count("acc") == reads
    for target in ("interp", None):
        np.testing.assert_allclose(run_tree(D, t, target), ref(a @ b + c), 1e-4, 1e-4)


def test_pure_mutations_and_actions_replay():
    C = mm(r(8, 4), r(4, 6))
    t0 = C.loop_tree
    t1 = t0.split(0, 4).swap_loops(1, 2).annotate(0, "unroll")
    assert str(t0) == str(C.loop_tree)          # t0 unchanged
    assert [a.kind for a in t1.actions] == ["split", "swap_loops", "annotate"]
    assert apply_actions(t0, t1.actions) == t1
    assert lt.deserialize(lt.serialize(t1)) == t1
    assert lt.serialize(lt.deserialize(lt.serialize(t1))) == lt.serialize(t1)
    assert t1.map_ref(2, t0) in t1.loops
    assert t1.next_ref(0) == 1 and t1.previous_ref(0) is None


def test_annotations_reach_the_backend_tree():
    C = mm(r(8, 4), r(4, 8))
    t = C.loop_tree.split(2, 4).annotate(3, "vectorize").annotate(0, "parallel").annotate(1, "unroll")
    anns = {l.var: l.annotations for stack, _ in t.lower().walk() for l in stack}
    assert frozenset({"parallel"}) in anns.values() and frozenset({"vectorize"}) in anns.values()
    assert frozenset({"unroll"}) in anns.values()


def test_illegal_mutations_raise():
    C = mm(r(8, 4), r(4, 6))
    t = C.loop_tree
    with pytest.raises(lt.ScheduleError, match="cannot parallelize loop k: %3 reduces over k"):
        t.annotate(1, "parallel")
    with pytest.raises(lt.ScheduleError, match="both loops are over m"):
        t.split(0, 2).swap_loops(0, 1)
    with pytest.raises(lt.ScheduleError, match="factor 9 exceeds"):
        t.split(0, 9)
    with pytest.raises(lt.ScheduleError, match="only a loop of size 1 can be removed"):
        t.remove_loop(0)
    with pytest.raises(lt.ScheduleError, match="unknown annotation 'fast'"):
        t.annotate(0, "fast")
    with pytest.raises(lt.ScheduleError, match="ref 3 is a node"):
        t.split(3, 2)
    with pytest.raises(lt.ScheduleError, match="no loop or node with ref 99"):
        t.split(99, 2)
    with pytest.raises(lt.ScheduleError, match="one loop must directly contain the other"):
        t.swap_loops(0, 2)
    with pytest.raises(lt.ScheduleError, match="cannot swap a loop with a node"):
        t.try_swap(0, 3)
    with pytest.raises(lt.ScheduleError, match="depends on"):
        t.swap_nodes(3, 4)
    with pytest.raises(lt.ScheduleError, match="layout is the caller's"):
        t.swap_vars(4, "m", "n")


def test_reduction_loops_are_not_shared_with_consumers():
    x = r(4, 5)
    s = lt.SymbolGenerator()
    X = lt.Tensor(x).to(s.b, s.o)
    Y = X - X.max_reduce(s.o)       # the consumer needs the finished max
    text = str(Y.loop_tree)
    assert text.count("for o in 5") == 2
    np.testing.assert_allclose(Y.numpy(target="interp"), x - x.max(1, keepdims=True))


def test_staging_and_reuse_change_buffers_not_results():
    a, b = r(8, 6), r(6, 8)
    C = mm(a, b)
    t = C.loop_tree.copy_input(C.loop_tree.ref_of(2), 0)
    assert "copy(%0)" in str(t)
    assert any(buf.kind == "temp" for buf in t.lower().buffers)
    np.testing.assert_allclose(run_tree(C, t), a @ b, 1e-4, 1e-4)
    leaf = [ref for ref in t.nodes if "copy" in str(t.graph.node(t.ir_node(ref)))][0]
    t2 = t.delete_copy(leaf)
    assert "copy" not in str(t2)
    # disable reuse of the multiply inside the k loop: it gets its own loops and a bigger temp
    base = lt.LoopTree(C.ir, default_schedule(C.ir))
    u = base.disable_reuse(2, 4)
    assert len(u.loops) > len(base.loops)
    np.testing.assert_allclose(run_tree(C, u), a @ b, 1e-4, 1e-4)
    np.testing.assert_allclose(run_tree(C, u.increase_reuse(u.ref_of(3))), a @ b, 1e-4, 1e-4)


def _issue_chain(C, staging_only=False):
    """The action chain of loop_tool issues 15/16 (refs renumbered for this tree)."""
    t = C.loop_tree.split(0, 4)           # m: 64 x m' 4
    t = t.swap_loops(1, 2)                # m, k, m', n
    t = t.split(3, 16)                    # n split
    t = t.copy_input(t.ref_of(2), 0)      # stage A for the multiply (%2)
    t = t.copy_input(t.ref_of(2), 1)      # stage B
    if staging_only:
        return t
    t = t.decrease_reuse(t.ref_of(3))     # the add stops sharing n' with the multiply
    t = t.decrease_reuse(t.ref_of(3))     # ... and n
    t = t.try_swap(*t.path(t.ref_of(2))[2:4])   # m' <-> n for the multiply
    t = t.split(t.path(t.ref_of(4))[-1], 4)
    return t


def test_loop_tool_issue_15_extents_stay_correct():
    a, b = r(64, 32), r(32, 48)
    C = mm(a, b)
    t = _issue_chain(C)
    from loopstack.frontend.tree import extents

    for nid, ns in t.schedule:   # every node's loops still cover each of its dimensions exactly
        ext = extents(ns.order)
        for v in t.graph.domain(t.graph.node(nid)):
            assert ext[v] == t.graph.size(v)
    np.testing.assert_allclose(run_tree(C, t), a @ b, 1e-4, 1e-4)


@pytest.mark.parametrize("target", ["interp", "x86"])
def test_loop_tool_issue_16_staged_copy_input_compiles_and_runs(target):
    a, b = r(32, 16), r(16, 24)
    C = mm(a, b)
    t = _issue_chain(C, staging_only=True)
    assert str(t).count("copy(") == 2
    try:
        got = run_tree(C, t, target)
    except (ImportError, lt.UnsupportedError) as e:
        pytest.skip(f"{target}: {e}")
    np.testing.assert_allclose(got, a @ b, 1e-4, 1e-4)


@pytest.mark.parametrize("target", ["interp", "x86"])
def test_loop_tool_issue_17_split_matmul_with_write_in_its_own_nest(target):
    a, b = r(64, 64), r(64, 64)
    C = mm(a, b)
    t = C.loop_tree.split(0, 4).split(3, 8).swap_loops(1, 2)
    assert "write(%3)" in str(t)
    try:
        got = run_tree(C, t, target)
    except (ImportError, lt.UnsupportedError) as e:
        pytest.skip(f"{target}: {e}")
    np.testing.assert_allclose(got, a @ b, 1e-3, 1e-3)


# ---------------------------------------------------------------------------- random schedules

def _programs():
    s = lt.SymbolGenerator()
    a, b, c = r(9, 7), r(7, 10), r(10)
    mmb = lt.nn.relu((lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k) + lt.Tensor(c).to(s.n))
    yield "mm_bias_relu", mmb, np.maximum(a @ b + c, 0)
    s = lt.SymbolGenerator()
    x, w = r(3, 8, 7), r(4, 3, 3, 3)
    X = lt.nn.pad(lt.Tensor(x).to(s.c, s.h, s.w), (s.h, 1), (s.w, 1))
    W = lt.Tensor(w).to(s.o, s.c, s.kh, s.kw)
    Y = lt.nn.conv(X, W, X.symbolic_shape[1:], (s.kh, s.kw), stride=2)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    ref = np.zeros((4, 4, 4), np.float32)
    for i in range(3):
        for j in range(3):
            ref += np.einsum("oc,chw->hwo", w[:, :, i, j], xp[:, i:i + 7:2, j:j + 7:2])
    yield "conv", Y, ref
    s = lt.SymbolGenerator()
    x = r(6, 11)
    X = lt.Tensor(x).to(s.b, s.o)
    yield "softmax", lt.nn.softmax(X, s.o), np.exp(x - x.max(1, keepdims=True)) / np.exp(
        x - x.max(1, keepdims=True)).sum(1, keepdims=True)
    s = lt.SymbolGenerator()
    x, y = r(5, 13), r(13)
    Z = ((lt.Tensor(x).to(s.i, s.j) * lt.Tensor(y).to(s.j)).exp() + 1.0).sum(s.j) * 0.5
    yield "eltwise_reduce", Z, (np.exp(x * y) + 1).sum(1) * 0.5


PROGRAMS = list(_programs())


@st.composite
def actions(draw):
    return [(draw(st.sampled_from(["split", "swap", "copy", "annotate", "reuse"])),
             draw(st.integers(0, 40)), draw(st.integers(1, 6))) for _ in range(draw(st.integers(1, 6)))]


def _apply(tree, acts):
    for kind, ref, arg in acts:
        ref %= len(tree)
        try:
            if kind == "split" and tree.kind(ref) == "loop":
                tree = tree.split(ref, min(arg, tree.item(ref).entry[1]))
            elif kind == "swap" and tree.kind(ref) == "loop" and tree.children(ref) and \
                    tree.kind(tree.children(ref)[0]) == "loop":
                tree = tree.swap_loops(ref, tree.children(ref)[0])
            elif kind == "copy" and tree.kind(ref) == "node":
                tree = tree.copy_input(ref, arg % 2)
            elif kind == "annotate" and tree.kind(ref) == "loop":
                tree = tree.annotate(ref, ["unroll", "vectorize", "parallel"][arg % 3])
            elif kind == "reuse" and tree.kind(ref) == "node":
                tree = tree.decrease_reuse(ref)
        except lt.ScheduleError:
            pass     # an illegal step is refused with an error; the tree is unchanged
    return tree


@pytest.mark.parametrize("name", [p[0] for p in PROGRAMS])
@settings(max_examples=12, deadline=None)
@given(acts=actions())
def test_random_schedules_match_unscheduled(name, acts):
    _, T, ref = next(p for p in PROGRAMS if p[0] == name)
    tree = _apply(lt.LoopTree(T.ir, default_schedule(T.ir)), acts)
    T.set(tree)
    np.testing.assert_allclose(T.numpy(target="interp"), ref, 1e-3, 1e-3)
    try:
        got = T.numpy(target="x86")
    except lt.UnsupportedError as e:       # a CPU without the x86 target's features
        pytest.skip(str(e))
    # a tree the mutations accepted compiles: an annotation it cannot honour was refused earlier
    np.testing.assert_allclose(got, ref, 1e-3, 1e-3)
    assert lt.deserialize(lt.serialize(tree)) == tree
