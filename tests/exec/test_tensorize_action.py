"""The `tensorize` schedule action: int8 contractions on the schedule's loops, natively.

Random schedules of random int8 matmuls (the lane and reduction splits whole instructions, the
other loops anything) compile for every x86 target this CPU runs, with the instruction `auto`
picks and with each named family the target has; results equal numpy's int32 arithmetic bit for
bit. Requests no instruction can satisfy are refused naming why, at the action (the default
target) and at compile (any target).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import loopstack as lt
from loopstack.backend import compile as backend_compile
from loopstack.backend.tensorize import apply
from loopstack.errors import ScheduleError
from loopstack.isa import cpu
from loopstack.isa.target import get_target
from loopstack.looptree.builders import make_tree, nest, access
from loopstack.looptree.ir import Binary, Buffer, Compute, Const, Load, replace
from int8_programs import int8_matmul, ints

FEATURES = cpu.cpu_features()
TARGETS = [t for t, need in (("avx2", "avx2"), ("avx512", "avx512f")) if need in FEATURES]
needs_x86 = pytest.mark.skipif(not TARGETS, reason="this CPU runs no x86 vector target")


def program(M, N, K, a_dt="uint8", seed=0, bias=False):
    rng = np.random.default_rng(seed)
    s = lt.SymbolGenerator()
    a, b = ints(rng, a_dt, (M, K)), ints(rng, "int8", (K, N))
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    ref = a.astype(np.int32) @ b.astype(np.int32)
    args = [a, b]
    if bias:
        c = rng.integers(-1000, 1000, N).astype(np.int32)
        C = lt.nn.relu(C + lt.Tensor(c).to(s.n))
        ref = np.maximum(ref + c, 0)
        args.append(c)
    return C, args, ref


def block_order(M, N, K, rows, panels, lanes):
    """The register-block order of a tensorized GEMM: n by panels of vectors, m by rows, all of k."""
    return [("n", N // (lanes * panels), 0), ("m", M // rows, M % rows), ("k", K, 0), ("m", rows, 0),
            ("n", panels, 0), ("n", lanes, 0)]


def scheduled(tree, order):
    for nid in tree.graph.nodes:
        if nid.op in ("binary", "reduce") and set(tree.graph.domain(nid)) == {"m", "n", "k"}:
            tree = tree.set_order(nid.id, order)
    return tree


def run(tree, target, args):
    kernel = tree.compile(target)
    out = np.zeros(kernel.tree.outputs[0].shape, np.int32)
    kernel(*args, out)
    return kernel, out


@needs_x86
@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_schedules_are_exact(target, monkeypatch, data):
    # the action checks the tree against the default target; here each target checks at compile
    monkeypatch.setattr("loopstack.frontend.run.default_target", lambda: "interp")
    lanes = get_target(target).vector_bits // 32
    M = data.draw(st.integers(1, 20), "M")
    N = lanes * data.draw(st.integers(1, 3), "N/lanes")
    K = data.draw(st.integers(1, 40), "K")
    a_dt = data.draw(st.sampled_from(["uint8", "int8"]), "a")
    C, args, ref = program(M, N, K, a_dt, seed=data.draw(st.integers(0, 99)), bias=data.draw(st.booleans()))
    rows = data.draw(st.integers(1, M), "rows")
    panels = data.draw(st.sampled_from([p for p in (1, 2, 3) if (N // lanes) % p == 0]), "panels")
    kg = data.draw(st.sampled_from([1, 2]), "k groups")
    order = [("n", N // (lanes * panels), 0), ("m", M // rows, M % rows)]
    order += [("k", K, 0)] if kg == 1 or K < 8 else [("k", K // 8, K % 8), ("k", 8, 0)]
    order += [("m", rows, 0), ("n", panels, 0), ("n", lanes, 0)]
    if data.draw(st.booleans(), "m outermost"):
        order = [order[1], order[0]] + order[2:]
    tree = scheduled(C.loop_tree, order)
    tree = tree.tensorize(tree.ref_of(next(n.id for n in tree.graph.nodes if n.op == "reduce")))
    if data.draw(st.booleans(), "parallel"):
        tree = tree.annotate(0, "parallel")
    kernel, out = run(tree, target, args)
    assert kernel.tensorized is not None
    np.testing.assert_array_equal(out, ref)


@needs_x86
@pytest.mark.parametrize("target", TARGETS)
def test_each_family_the_target_runs(target, monkeypatch):
    """Every dot-product family the target has, named in the action, computes the same."""
    t = get_target(target)
    lanes = t.vector_bits // 32
    C, args, ref = program(7, 2 * lanes, 37, "int8")
    base = scheduled(C.loop_tree, block_order(7, 2 * lanes, 37, 3, 2, lanes))
    node = base.ref_of(next(n.id for n in base.graph.nodes if n.op == "reduce"))
    families = {i.name.rsplit(".", 1)[0] for i in apply.instructions_for("x86_64", apply.target_features(t))
                if i.vector_bits == t.vector_bits and i.broadcast is not None}
    assert families
    monkeypatch.setattr("loopstack.frontend.run.default_target", lambda: "interp")  # no check at the action
    for fam in sorted(families):
        kernel, out = run(base.tensorize(node, fam), target, args)
        assert kernel.tensorized.startswith(fam), (fam, kernel.tensorized)
        np.testing.assert_array_equal(out, ref)


@needs_x86
def test_the_users_loop_order_is_kept():
    target = TARGETS[-1]
    lanes = get_target(target).vector_bits // 32
    C, args, ref = program(12, 4 * lanes, 64)
    tree = scheduled(C.loop_tree, block_order(12, 4 * lanes, 64, 6, 4, lanes))
    tree = tree.tensorize(tree.ref_of(3))
    kernel, out = run(tree, target, args)
    np.testing.assert_array_equal(out, ref)
    (stack, stmt), = [(st_, c) for st_, c in kernel.lowered.computes() if c.name == "%3"]
    # n by panels, m by rows, k by 4-byte groups, m, n by lanes: the schedule's, the innermost
    # lane loop (n'' of step 1) now steps by the instruction's lanes, its own lane loop inside
    assert [(lp.dim, lp.step) for lp in stack] == [("n", 4 * lanes), ("m", 6), ("k", 4), ("m", 1), ("n", lanes),
                                                  ("n", 1)]
    # without the action the compile chooses its own block
    default, out = run(scheduled(C.loop_tree, [("k", 64, 0), ("m", 12, 0), ("n", 4 * lanes, 0)]), target, args)
    np.testing.assert_array_equal(out, ref)
    assert default.tensorized is not None


@needs_x86
def test_refusals_name_the_loop_or_each_candidates_reason():
    target = TARGETS[-1]
    lanes = get_target(target).vector_bits // 32
    C, args, ref = program(2 * lanes, 2 * lanes, 64)
    # n and m split into steps of 8 / 4: no candidate's lanes divide them
    bad = scheduled(C.loop_tree, [("m", lanes // 4 * 2, 0), ("n", 2 * lanes // 4, 0), ("k", 64, 0),
                                  ("m", 4, 0), ("n", 4, 0)])
    node = bad.ref_of(3)
    with pytest.raises(ScheduleError, match=r"loop L1 over n steps by 4, not a multiple of .*'s \d+ lanes"):
        bad.tensorize(node)
    # a float contraction: each candidate says why not (its dtypes)
    s = lt.SymbolGenerator()
    F = (lt.Tensor(np.ones((4, 16), np.float32)).to(s.m, s.k) * lt.Tensor(np.ones((16, 32), np.float32)).to(s.k, s.n)).sum(s.k)
    with pytest.raises(ScheduleError, match=r"no instruction applies(.|\n)*accumulates int32; %out is float32"):
        F.loop_tree.tensorize(F.loop_tree.ref_of(3))
    with pytest.raises(ScheduleError, match="not a sum of products"):
        F.loop_tree.tensorize(F.loop_tree.ref_of(4))          # the write
    with pytest.raises(ScheduleError, match="no tensorized instruction 'vpdpbusd.qmm'"):
        C.loop_tree.tensorize(3, "vpdpbusd.qmm")


@needs_x86
def test_replay_serialize_and_clear():
    C, args, ref = program(8, 32, 16)
    t = C.loop_tree.tensorize(3)
    assert lt.apply_actions(C.loop_tree, t.actions) == t
    assert lt.deserialize(lt.serialize(t)) == t
    cleared = t.tensorize(3, "")
    assert cleared.node_schedule(3).tensorize == "" and cleared.actions[-1].args == (3, "")
    assert t.node_schedule(3).tensorize == "auto"


@needs_x86
@pytest.mark.parametrize("target", TARGETS)
def test_a_contraction_beside_other_statements(target):
    """The contraction of a program with more statements is tensorized where it has loops of its
    own (the default, and on request); the others run as they are."""
    M, N, K = 5, 32, 24
    bufs = [Buffer("A", "uint8", (M, K), "input"), Buffer("B", "int8", (K, N), "input"),
            Buffer("C", "int32", (M, N), "output"), Buffer("D", "int32", (M, N), "output")]
    mm = Compute("C", access("C", "m", "n"), Binary("mul", Load(access("A", "m", "k")), Load(access("B", "k", "n"))),
                 reduce="add", init="identity")
    twice = Compute("D", access("D", "m", "n"), Binary("mul", Const(3), Load(access("C", "m", "n"))))
    rng = np.random.default_rng(1)
    a, b = ints(rng, "uint8", (M, K)), ints(rng, "int8", (K, N))
    ref = a.astype(np.int32) @ b.astype(np.int32)
    for request in ("", "auto"):
        tree = make_tree(bufs, {"m": M, "n": N, "k": K},
                         (nest([("m", 1), ("n", 1), ("k", 1)], replace(mm, tensorize=request)),
                          nest([("m", 1), ("n", 1)], twice, tag="d")))
        c, d = np.zeros((M, N), np.int32), np.zeros((M, N), np.int32)
        kernel = backend_compile(tree, target=target)
        kernel(a, b, c, d)
        assert kernel.tensorized is not None
        np.testing.assert_array_equal(c, ref)
        np.testing.assert_array_equal(d, 3 * ref)


@pytest.mark.aarch64
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(M=st.integers(1, 6), panels=st.integers(1, 2), K=st.integers(1, 24), rows=st.integers(1, 3),
       a_dt=st.sampled_from(["int8", "uint8"]), seed=st.integers(0, 99))
def test_sdot_on_the_schedules_loops(M, panels, K, rows, a_dt, seed):
    """AArch64 (Apple M1 preset, run in unicorn): the schedule's block around sdot / udot."""
    from a64_run import run_kernel
    from unittest import mock

    m1 = get_target("neon", cpu="apple-m1", check=False)
    rows = min(rows, M)
    N = 4 * panels * 2
    C, args, ref = program(M, N, K, a_dt, seed)
    order = [("n", 2, 0), ("m", M // rows, M % rows), ("k", K, 0), ("m", rows, 0), ("n", panels, 0), ("n", 4, 0)]
    with mock.patch("loopstack.frontend.run.default_target", lambda: "interp"):   # checked below, for m1
        tree = scheduled(C.loop_tree, order)
        tree = tree.tensorize(tree.ref_of(3))
    kernel = tree.compile(m1)
    assert kernel.tensorized in ("sdot.4s.elem", "udot.4s.elem")
    out = np.zeros((M, N), np.int32)
    run_kernel(kernel, args + [out])
    np.testing.assert_array_equal(out, ref)


@needs_x86
@pytest.mark.parametrize("target", TARGETS)
def test_a_padded_convolution_on_its_own_loops(target, monkeypatch):
    """The frontend's padded int8 x int8 convolution: the sum tensorized in the frontend's loop
    order (channels outermost), activations shifted by 128 and compensated, exact."""
    monkeypatch.setattr("loopstack.frontend.run.default_target", lambda: "interp")
    lanes = get_target(target).vector_bits // 32
    rng = np.random.default_rng(3)
    x, w = ints(rng, "int8", (8, 6, 7)), ints(rng, "int8", (lanes, 8, 3, 3))
    s = lt.SymbolGenerator()
    X = lt.nn.pad(lt.Tensor(x).to(s.c, s.h, s.w), (s.h, 1), (s.w, 1))
    Y = lt.nn.conv(X, lt.Tensor(w).to(s.co, s.c, s.kh, s.kw), X.symbolic_shape[1:], [s.kh, s.kw])
    tree = Y.loop_tree
    tree = tree.tensorize(tree.ref_of(next(n.id for n in tree.graph.nodes if n.op == "reduce")))
    xp = np.pad(x.astype(np.int32), ((0, 0), (1, 1), (1, 1)))
    ref = sum(np.einsum("chw,oc->hwo", xp[:, i:i + 6, j:j + 7], w[:, :, i, j].astype(np.int32))
              for i in range(3) for j in range(3))
    kernel = tree.compile(target)
    assert kernel.tensorized is not None
    out = np.zeros((6, 7, lanes), np.int32)
    kernel(x, w, out)
    np.testing.assert_array_equal(out, ref)
