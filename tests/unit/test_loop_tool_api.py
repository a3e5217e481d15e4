"""loop_tool's Python API, spelled as loop_tool spells it, against numpy."""
import numpy as np
import pytest

import loopstack as lt

rng = np.random.default_rng(26)


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


TARGETS = ["interp", "x86"]


def run(T, target):
    try:
        return T.numpy(target=target)
    except lt.UnsupportedError as e:       # a CPU without the x86 target's features
        pytest.skip(f"{target}: {e}")


@pytest.mark.parametrize("target", TARGETS)
def test_expr_integer_constant_in_an_index(target):
    ho, kh = lt.symbols("ho kh")
    x, w = r(17), r(3)
    X = lt.Tensor(x)
    Y = (X[lt.Expr(2) * ho + kh] * lt.Tensor(w).to(kh)).sum(kh)
    ref = np.array([x[2 * i:2 * i + 3] @ w for i in range(8)], np.float32)
    np.testing.assert_allclose(run(Y, target), ref, 1e-5, 1e-5)
    assert repr(lt.Expr(3)) == "3" and repr(lt.Expr(2) * ho + kh) == "2*ho + kh"


def test_expr_refuses_what_is_not_an_index():
    m, n = lt.symbols("m n")
    with pytest.raises(lt.ShapeError, match="not an index expression: 2.5"):
        lt.Expr(2.5)
    with pytest.raises(lt.ShapeError, match="index expressions are affine: cannot multiply m by n"):
        lt.Expr(m) * n
    with pytest.raises(lt.ShapeError, match="cannot multiply Size\\(m\\) by Size\\(n\\)"):
        lt.Size(m) * lt.Size(n)


@pytest.mark.parametrize("target", TARGETS)
def test_size_terms_reshape_24_into_6_by_4(target):
    N, I, J = lt.symbols("N I J")
    a = r(24)
    X = lt.Tensor(a).to(N)
    Y = X.to(I, J, constraints=[(N, I * lt.Size(J) + J), (lt.Size(J), lt.Expr(4))])
    assert Y.shape == (6, 4)                          # size(I) inferred from 24 = 6 * 4
    np.testing.assert_array_equal(run(Y + 0.0, target), a.reshape(6, 4))
    # and back: a flatten written as a constraint, sizes flowing the other way
    K = lt.Symbol("K")
    Z = (Y + 1.0).to(K, constraints=[(I, lt.Expr(0)), (J, K)])
    assert Z.shape == (4,)
    np.testing.assert_allclose(run(Z * 1.0, target), a[:4] + 1, 1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_lazy_concat_1d_as_loop_tool_writes_it(target):
    N, M, NM = lt.symbols("N M NM")
    a, b = r(8), r(5)
    A, B = lt.Tensor(a).to(N), lt.Tensor(b).to(M)
    A_ = A.to(NM, constraints=[(NM, N), (lt.Size(NM), lt.Size(N) + lt.Size(M))])
    B_ = B.to(NM, constraints=[(NM, M + lt.Size(N))])
    C = A_ + B_
    assert C.shape == (13,)
    np.testing.assert_array_equal(run(C, target), np.concatenate([a, b]))
    np.testing.assert_array_equal(run(A | B, target), np.concatenate([a, b]))


def test_constraints_name_what_is_wrong():
    N, M, I, Q = lt.symbols("N M I Q")
    X = lt.Tensor(r(6, 4)).to(N, M)
    with pytest.raises(lt.ShapeError, match="a constraint is a pair"):
        X.to(I, M, constraints=[(N,)])
    with pytest.raises(lt.ShapeError, match=r"size\(I\) = I: a size is an expression of sizes"):
        X.to(I, M, constraints=[(lt.Size(I), I)])
    with pytest.raises(lt.SymbolError, match="constraint on Q, which is neither a dimension"):
        X.to(I, M, constraints=[(Q, I)])
    with pytest.raises(lt.ShapeError, match="must hold exactly one dimension of the tensor"):
        X.to(I, constraints=[(I, N + M)])
    with pytest.raises(lt.SymbolError, match="N is constrained twice"):
        X.to(I, M, constraints=[(N, I), (N, I + 1)])
    with pytest.raises(lt.ShapeError, match=r"left side of a constraint is a dimension or lt.Size"):
        X.to(I, M, constraints=[(N + 1, I)])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("k,stride", [(2, 2), (3, 1), (3, 2)])
def test_maxpool_with_an_int_window(target, k, stride):
    s = lt.SymbolGenerator()
    x = r(3, 9, 8)
    P = lt.nn.maxpool(lt.Tensor(x).to(s.c, s.h, s.w), [s.h, s.w], k, stride)
    ho, wo = (9 - k) // stride + 1, (8 - k) // stride + 1
    ref = np.full((3, ho, wo), -np.inf, np.float32)
    for i in range(k):
        for j in range(k):
            ref = np.maximum(ref, x[:, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride])
    assert P.shape == ref.shape
    np.testing.assert_array_equal(run(P, target), ref)
    with pytest.raises(lt.ShapeError, match="window size must be a positive int, got 0"):
        lt.nn.maxpool(lt.Tensor(x).to(s.c, s.h, s.w), [s.h, s.w], 0, 1)


@pytest.mark.parametrize("target", TARGETS)
def test_nn_as_loop_tool_python_nn(target):
    """mean, sigmoid, swish, relu, relu6, hardswish, tanh, linear, pad, conv, batch_norm."""
    s = lt.SymbolGenerator()
    x = r(4, 6)
    X = lt.Tensor(x).to(s.b, s.i)
    checks = [
        (lt.nn.mean(X, [s.i]), x.mean(1)),
        (lt.nn.sigmoid(X), 1 / (1 + np.exp(-x))),
        (lt.nn.swish(X), x / (1 + np.exp(-x))),
        (lt.nn.relu(X), np.maximum(x, 0)),
        (lt.nn.relu6(X * 4.0), np.clip(x * 4, 0, 6)),
        (lt.nn.hardswish(X), x * np.clip(x + 3, 0, 6) / 6),
        (lt.nn.tanh(X), np.tanh(x)),
        (lt.nn.pad(X, (s.i, (1, 2))) + 0.0, np.pad(x, ((0, 0), (1, 2)))),
    ]
    w, bias = r(6, 3), r(3)
    checks.append((lt.nn.linear(X, lt.Tensor(w).to(s.i, s.o), lt.Tensor(bias).to(s.o)), x @ w + bias))
    mu, var, g, b = r(6), np.abs(r(6)) + 0.5, r(6), r(6)
    T = [lt.Tensor(v).to(s.i) for v in (mu, var, g, b)]
    checks.append((lt.nn.batch_norm(X, *T), (x - mu) * g / np.sqrt(var + 1e-5) + b))
    for got, ref in checks:
        np.testing.assert_allclose(run(got, target), ref, 2e-3, 2e-3)


@pytest.mark.parametrize("target", TARGETS)
def test_loop_tool_mean_broadcasts_a_scalar_with_constraints(target):
    """loop_tool's python/nn.py: one = Tensor().set(1).to(*dims, constraints=[(d, Expr(0))])."""
    s = lt.SymbolGenerator()
    x = r(4, 6)
    X = lt.Tensor(x).to(s.b, s.i)
    one = lt.Tensor().set(np.float32(1)).to(s.i, constraints=[(s.i, lt.Expr(0))])
    M = X.sum(s.i) / one.sum(s.i)
    np.testing.assert_allclose(run(M, target), x.mean(1), 1e-5, 1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_remove_and_add_loop_in_loop_tools_two_argument_form(target):
    """add_loop(node, loop) puts a staged copy under the m-block loop (built once per block);
    remove_loop(node, loop) takes it out again; both keep the result."""
    s = lt.SymbolGenerator()
    a, b = r(8, 5), r(5, 6)
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    t = C.loop_tree.split(0, 4)
    t = t.copy_input(t.ref_of(2), 1)                 # %5 <- copy(B), in its own nest
    copy = t.ref_of(5)
    mloop = next(r for r in t.loops if t.loop_name(r) == "m")
    t2 = t.add_loop(copy, mloop)
    assert t2.path(t2.ref_of(5))[0] == t2.path(t2.ref_of(2))[0]      # shares the m loop now
    assert "for m in 2" in str(t2).splitlines()[0]
    C.set(t2)
    np.testing.assert_allclose(run(C, target), a @ b, 1e-4, 1e-4)
    t3 = t2.remove_loop(t2.ref_of(5), t2.path(t2.ref_of(5))[0])
    assert len(t3.path(t3.ref_of(5))) == 2
    C.set(t3)
    np.testing.assert_allclose(run(C, target), a @ b, 1e-4, 1e-4)
    assert lt.apply_actions(C.loop_tree.__class__(t.graph, t.schedule), t3.actions[len(t.actions):]) == t3
    # a loop of any size the node does not need; never one it needs, nor a reduction
    m2 = t2.path(t2.ref_of(2))[0]
    with pytest.raises(lt.ScheduleError, match="needs loop m"):
        t2.remove_loop(t2.ref_of(2), m2)
    with pytest.raises(lt.ScheduleError, match="%3 already iterates n"):     # (a reduction: test_bad_input)
        t2.add_loop(t2.ref_of(3), _loop_over(t2, "n", 5))


@pytest.mark.parametrize("target", TARGETS)
def test_loop_tool_issue_15_mutation_chain(target):
    """split -> swap -> copy_input -> try_swap -> decrease_reuse keeps extents and the result."""
    from loopstack.frontend.tree import extents

    s = lt.SymbolGenerator()
    a, b = r(16, 12), r(12, 10)
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    t = C.loop_tree.split(0, 5)                       # m -> 3 r 1, 5
    t = t.swap_loops(1, 2)                            # m, k, m', n
    t = t.copy_input(t.ref_of(2), 0)                  # stage A
    mul = t.ref_of(2)
    loops = t.path(mul)
    t = t.try_swap(loops[-2], loops[-1])              # m' <-> n
    t = t.decrease_reuse(t.ref_of(3))                 # the add stops sharing its innermost loop
    for nid, ns in t.schedule:
        ext = extents(ns.order)
        for v in t.graph.domain(t.graph.node(nid)):
            assert ext[v] == t.graph.size(v), (nid, v, str(t))
    C.set(t)
    np.testing.assert_allclose(run(C, target), a @ b, 1e-4, 1e-4)


def _loop_over(tree, var, node_id):
    """A loop over `var` that does not enclose node `node_id`."""
    path = tree.path(tree.ref_of(node_id))
    return next(r for r in tree.loops if tree.item(r).entry[0] == var and r not in path)


@pytest.mark.parametrize("target", TARGETS)
def test_max_and_min_reduce_when_given_dimensions(target):
    s = lt.SymbolGenerator()
    x, y = r(5, 7), r(7)
    X = lt.Tensor(x).to(s.i, s.j)
    np.testing.assert_array_equal(run(X.max(s.j), target), x.max(1))
    np.testing.assert_array_equal(run(X.min(s.i, s.j) + 0.0, target), x.min())
    np.testing.assert_array_equal(run(X.max(lt.Tensor(y).to(s.j)), target), np.maximum(x, y))
    with pytest.raises(lt.ShapeError, match="max: one tensor or number, or dimensions to reduce"):
        X.max()


def test_set_order_takes_loop_tools_var_size_tail_pairs():
    """loop_tool's README schedules `ir.set_order(n, [(v, (8, 0)), (v, (16, 0))])`."""
    N, K = lt.symbols("N K")
    x, z = r(128), r(128)
    W = (lt.Tensor(z).to(N) * lt.Tensor(x).to(N)).sum(N)
    t = W.loop_tree
    for nid, _ in t.schedule:
        if t.graph.node(nid).op != "write":
            t = t.set_order(nid, [("N", (8, 0)), ("N", (16, 0))])
    assert str(t).splitlines()[:2] == ["for N in 8 : L0", " for N' in 16 : L1"]
    W.set(t)
    np.testing.assert_allclose(W.numpy(), np.sum(x * z), 1e-4, 1e-4)
