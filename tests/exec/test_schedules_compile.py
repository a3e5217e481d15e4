"""A schedule the API accepts always compiles: random mutation sequences on random programs
(bench/fuzz.py's generators); every tree the mutations accept compiles for the host target and
computes the numpy result.  And the seeded 500-case slice of the fuzzer itself, each case in
a child process, on every target this CPU runs, with guard pages around the arrays."""
import os
import random
import re
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopstack as lt
from loopstack.frontend.run import default_target
from loopstack.frontend.tree import default_schedule

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import fuzz  # noqa: E402

pytestmark = pytest.mark.skipif(default_target() == "interp", reason="needs the x86 backend on this CPU")


def _close(got, ref):
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3 * scale)


@settings(deadline=None)
@given(program=st.integers(0, 2 ** 32 - 1), schedule=st.integers(0, 2 ** 32 - 1), steps=st.integers(1, 12),
       generated=st.booleans())
def test_every_accepted_tree_compiles_and_computes_numpys_result(program, schedule, steps, generated):
    name, T, ref = fuzz.random_program(random.Random(program))
    tree = lt.LoopTree(T.ir, default_schedule(T.ir))
    if generated:                         # from loopstack's own default schedule
        tree = fuzz.tuned_default(tree)
    rnd = random.Random(schedule)
    for _ in range(steps):
        kind, args = fuzz.random_action(rnd, tree)
        try:
            tree = getattr(tree, kind)(*args)
        except lt.ScheduleError:
            continue                      # refused by the mutation itself, with its reason
        T.set(tree)
        _close(T.numpy(), ref)            # compiles (no late ScheduleError) and is right


def _mm():
    s = lt.SymbolGenerator()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((24, 20)).astype(np.float32), rng.standard_normal((20, 16)).astype(np.float32)
    return (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k), a @ b


def test_split_moves_vectorize_to_the_new_inner_loop():
    C, ref = _mm()
    t = C.loop_tree
    inner = max(t.loops, key=lambda r: t.item(r).depth)       # n, innermost
    t = t.annotate(inner, "vectorize").split(inner, 5)
    anns = {t.loop_name(r): t.item(r).annotation for r in t.loops}
    assert anns["n"] == "" and anns["n'"] == "vectorize", str(t)
    C.set(t)
    _close(C.numpy(), ref)


def test_vectorize_on_a_strided_loop_is_refused_when_annotated():
    s = lt.SymbolGenerator()
    a, b = np.ones((4, 3), np.float32), np.ones((5, 3), np.float32)
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.n, s.k)).sum(s.k)    # B read as [n, k]
    t = C.loop_tree
    with pytest.raises(lt.ScheduleError, match="annotate L2 'vectorize': refused, .*cannot be vectorized"):
        t.annotate(2, "vectorize")


def test_a_parallel_loop_cannot_be_swapped_inward():
    C, ref = _mm()
    t = C.loop_tree.annotate(0, "parallel")
    with pytest.raises(lt.ScheduleError, match="runs in parallel and only an outermost loop can"):
        t.swap_loops(0, 1)
    C.set(t)
    _close(C.numpy(), ref)


def test_merge_keeps_the_annotation_of_the_merged_loop():
    C, ref = _mm()
    t = C.loop_tree
    inner = max(t.loops, key=lambda r: t.item(r).depth)
    t = t.split(inner, 4)                                     # n(5), n'(4)
    inner = max(t.loops, key=lambda r: t.item(r).depth)
    t = t.annotate(inner, "vectorize").merge(inner)
    assert [t.item(r).annotation for r in t.loops if t.item(r).entry[0] == "n"][0] == "vectorize", str(t)
    C.set(t)
    _close(C.numpy(), ref)


def test_fuzz_slice_500_cases():
    """The seeded CI slice of bench/fuzz.py: 500 cases, each in a forked child."""
    targets = fuzz.host_targets()
    results = fuzz.run_cases(2026, range(500), targets, jobs=max(1, min(2, os.cpu_count() or 1)), timeout=120)
    bad = [r for r in results if r["status"] != "ok"]
    assert len(results) == 500
    assert not bad, fuzz.summary(results, 2026, targets) + "\n" + "\n".join(
        f"case {r['case']} ({r['family']}): {r['status']}: {r['detail']}" for r in bad[:10])
    assert re.search(r"500 cases .*: 0 wrong, 0 crashes, 0 hangs, 0 non-loopstack exceptions, 0 late",
                     fuzz.summary(results, 2026, targets))


def test_a_parallel_kernel_runs_in_a_forked_child():
    """The parent's worker threads do not survive fork(): the child must not wait on them."""
    C, ref = _mm()
    C.set(C.loop_tree.annotate(0, "parallel"))
    _close(C.numpy(), ref)                      # the parent's pool now exists
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if np.allclose(C.numpy(), ref, 1e-3, 1e-3) else 2
        finally:
            os._exit(code)
    import time
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung running a parallel kernel")


def test_an_intermediate_is_not_shrunk_inside_a_loop_over_another_variable():
    """Fuzz case 496 at seed 30: a flatten writes t1[a, 17 b + c] under `for a / for b / for a'`
    and an add reads t1[a, all b_c] in every iteration of b. Shrunk to one row at a' (inside the
    loop over b), the row held parts of three rows at once; the buffer keeps the rows of a's
    outer loop (3), and every target computes numpy's result."""
    from loopstack.frontend import run as _run

    name, T, ref, tree, _ = fuzz.build_case(30, 496)
    T.set(tree)
    for target in ("interp", default_target()):
        kernel, reads, (shape, dt) = _run.compiled(T, target)
        (temp,) = [b for b in kernel.tree.buffers if b.kind == "temp"]
        assert temp.shape == (3, 102), temp
        out = np.zeros(shape, dt)
        kernel(*[r.data for r in reads], out)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_stored_int8_products_stay_exact():
    """Found by bench/fuzz.py's int8 casts: a schedule that stores an int8 matmul's products in a
    buffer of their own (the sum no longer reusing the product's n loop). An int8 node, the
    products wrapped to 8 bits before the int32 sum (max error 57088); a product only an int32 sum
    reads is int32, as the fused product is."""
    import loopstack as lt
    from loopstack.frontend import run as _run

    rng = np.random.default_rng(0)
    q, w = rng.integers(-128, 128, (24, 12)).astype(np.int8), rng.integers(-128, 128, (12, 31)).astype(np.int8)
    s = lt.SymbolGenerator()
    T = (lt.Tensor(q).to(s.m, s.k) * lt.Tensor(w).to(s.k, s.n)).sum(s.k).astype("float32")
    tree = T.loop_tree
    total = next(it.ref for it in tree.items if it.kind == "node" and tree.graph.node(it.node).op == "reduce")
    T.set(tree.decrease_reuse(total))
    ref = (q.astype(np.int64) @ w.astype(np.int64)).astype(np.float32)
    for target in ("interp", default_target()):
        kernel, reads, (shape, dt) = _run.compiled(T, target)
        products = [b for b in kernel.tree.buffers if b.kind == "temp" and len(b.shape) == 3]
        assert [b.dtype for b in products] == ["int32"], kernel.tree.buffers
        out = np.zeros(shape, dt)
        kernel(*[r.data for r in reads], out)
        np.testing.assert_array_equal(out, ref)
