"""The loop tree's verifier, printer, stats and builders."""
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopstack.errors import BoundsError, DTypeError, LoopstackError, ScheduleError, ShapeError, SymbolError
from loopstack.looptree import stats
from loopstack.looptree.builders import (
    access, conv2d_tree, elementwise_tree, make_tree, matmul_tree, nest, transpose_tree, var_names,
)
from loopstack.looptree.ir import Acc, Access, Affine, Binary, Buffer, Compute, Load, Loop, Unary
from loopstack.looptree.printer import format_tree
from loopstack.looptree.verify import verify
from strategies import random_case

MM = Binary("mul", Load(access("A", "m", "k")), Load(access("B", "k", "n")))


def _mm_bufs(M=8, N=8, K=8, ashape=None):
    return [Buffer("A", "float32", ashape or (M, K), "input"), Buffer("B", "float32", (K, N), "input"),
            Buffer("C", "float32", (M, N), "output")]


def _mm(order, M=8, N=8, K=8, ashape=None, stmt=None):
    stmt = stmt or Compute("C", access("C", "m", "n"), MM, reduce="add", init="identity")
    return make_tree(_mm_bufs(M, N, K, ashape), {"m": M, "n": N, "k": K}, nest(order, stmt))


FLAT = [("m", 1), ("n", 1), ("k", 1)]


# ---------------------------------------------------------------------------
# printer


def test_printer_split_matmul_exact_text():
    t = matmul_tree(10, 8, 5, order=[("m", 4), ("n", 8), ("k", 1), ("m", 1), ("n", 1, ("unroll",))], post="relu")
    assert format_tree(t) == "\n".join([
        "%A: float32[10, 5] input",
        "%B: float32[5, 8] input",
        "%C: float32[10, 8] output",
        "for m0 in 2 r 2 : L0",
        "  for n0 in 1 : L1",
        "    for k0 in 5 : L2",
        "      for m1 in 4 : L3",
        "        for n1 in 8 : L4  [unroll]",
        "          %C[m, n] += mul(%A[m, k], %B[k, n])  init identity  post relu(acc)",
    ])
    assert str(t) == format_tree(t)


def test_printer_copy_max_and_named_statements():
    t = make_tree([Buffer("X", "float16", (3, 4), "input"), Buffer("Y", "float16", (3,), "output")],
                  {"i": 3, "j": 4},
                  nest([("i", 1), ("j", 1)], Compute("rowmax", access("Y", "i"), Load(access("X", "i", "j")),
                                                     reduce="max", init="identity"), names=["a", "j0"]))
    assert format_tree(t).splitlines()[2:] == [
        "for a (i) in 3 : L0",
        "  for j0 in 4 : L1",
        "    %Y[i] max= %X[i, j]  init identity  : rowmax",
    ]


# ---------------------------------------------------------------------------
# verifier: accepted trees


def test_verify_accepts_builders():
    for t in (matmul_tree(17, 13, 5), matmul_tree(4, 4, 4, bias=True, post="relu", dtype="int8"),
              conv2d_tree(1, 3, 7, 6, 2, 3, 3, padding=1, stride=2),
              conv2d_tree(2, 2, 5, 5, 3, 3, 3, padding=2, dilation=2, pad="copy", layout="NHWC"),
              elementwise_tree((3, 5), ("relu", "tanh"), "add"), transpose_tree((2, 3, 4), (2, 0, 1))):
        verify(t)


def test_verify_tails_are_not_over_approximated():
    # m = m0 + m1 with m0 in {0, 4, 8} and m1 < min(4, 10 - m0): the max is 9, not 8 + 3
    verify(_mm([("m", 4), ("n", 3), ("k", 1), ("m", 1), ("n", 1)], M=10))


def test_verify_block_temp_indexed_relative_to_loop():
    def tree(tsize):
        idx = (Affine.of("m", ("@m0", -1)),)
        prod = Compute("T", Access("T", idx), Load(access("A", "m")))
        cons = Compute("C", access("C", "m"), Load(Access("T", idx)))
        return make_tree([Buffer("A", "float32", (10,), "input"), Buffer("T", "float32", (tsize,), "temp"),
                          Buffer("C", "float32", (10,), "output")], {"m": 10},
                         Loop("m0", "m", 4, (nest([("m", 1)], prod, tag="p"), nest([("m", 1)], cons, tag="c"))))
    verify(tree(4))            # m - @m0 ranges over [0, 3], exactly
    with pytest.raises(BoundsError, match=r"statement 'T' writes %T\[-@m0 \+ m\]: index 0 \(-@m0 \+ m\) reaches 3"
                                          r" but T has size 3 in dimension 0"):
        verify(tree(3))



# ---------------------------------------------------------------------------
# verifier: errors


def test_verify_out_of_bounds_read():
    with pytest.raises(BoundsError, match=r"statement 'C' reads %A\[m, k\]: index 1 \(k\) reaches 9"
                                          r" but A has size 8 in dimension 1"):
        verify(_mm(FLAT, K=10, ashape=(8, 8)))


def test_verify_negative_index():
    stmt = Compute("Y", access("Y", "h"), Load(access("X", Affine.of("h", const=-1))))
    t = make_tree([Buffer("X", "float32", (5,), "input"), Buffer("Y", "float32", (5,), "output")], {"h": 5},
                  nest([("h", 1)], stmt))
    with pytest.raises(BoundsError, match=r"index 0 \(h - 1\) reaches -1 but X starts at 0"):
        verify(t)
    # the same read with zero_pad is fine
    stmt = Compute("Y", access("Y", "h"), Load(access("X", Affine.of("h", const=-1), zero_pad=True)))
    verify(make_tree(t.buffers, t.dims, nest([("h", 1)], stmt)))


def test_verify_wrong_index_count():
    stmt = Compute("C", access("C", "m", "n"), Binary("mul", Load(access("A", "m")), Load(access("B", "k", "n"))),
                   reduce="add", init="identity")
    with pytest.raises(ShapeError, match=r"statement 'C' reads %A\[m\]: A has 2 dimension\(s\) but the access has 1"):
        verify(_mm(FLAT, stmt=stmt))


def test_verify_missing_step_one_loop():
    with pytest.raises(ScheduleError, match="dimension k of statement 'C' is not iterated down to step 1"):
        verify(_mm([("m", 1), ("n", 1), ("k", 4)]))
    with pytest.raises(ScheduleError, match="dimension k of statement 'C' is not iterated down to step 1"):
        verify(_mm([("m", 1), ("n", 1)]))


def test_verify_write_to_input():
    stmt = Compute("S", access("A", "m", "k"), Load(access("B", "k", "m")))
    with pytest.raises(ScheduleError, match=r"statement 'S' writes %A\[m, k\], but A is an input"):
        verify(_mm(FLAT, stmt=stmt))


def test_verify_duplicate_loop_var():
    stmt = Compute("C", access("C", "m", "n"), MM, reduce="add", init="identity")
    body = nest([("m", 1), ("n", 1), ("k", 1)], stmt, names=["i", "j", "i"])
    t = make_tree(_mm_bufs(), {"m": 8, "n": 8, "k": 8}, body)
    with pytest.raises(ScheduleError, match="loop var i is used by two loops"):
        verify(t)


@pytest.mark.parametrize("mutate, err, msg", [
    (lambda s: Compute("C", access("C", "m", "n"), MM, reduce="sum", init="identity"), LoopstackError,
     "unknown reduction 'sum'"),
    (lambda s: Compute("C", access("C", "m", "n"), Unary("cube", MM), reduce="add"), LoopstackError,
     "unknown unary op 'cube'"),
    (lambda s: Compute("C", access("C", "m", "n"), MM, reduce="add", init=Load(access("A", "m", "k"))),
     ScheduleError, r"its init reads %A\[m, k\], which uses k, not a dimension of the output"),
    (lambda s: Compute("C", access("C", "m", "n"), Binary("add", MM, Acc()), reduce="add"), ScheduleError,
     "acc may only appear in post"),
    (lambda s: Compute("C", access("C", "m", "n", zero_pad=True), MM, reduce="add"), ScheduleError,
     "zero_pad is for reads only"),
    (lambda s: Compute("C", access("C", "m", "n"), MM, init="identity"), ScheduleError, "init but no reduction"),
    (lambda s: Compute("C", access("C", "m", "n"), Load(access("Q", "m", "n"))), SymbolError, "unknown buffer Q"),
    (lambda s: Compute("C", access("C", "m", ("n", "@zz")), MM, reduce="add"), SymbolError,
     "@zz is not a loop enclosing the statement"),
])
def test_verify_statement_errors(mutate, err, msg):
    with pytest.raises(err, match=msg):
        verify(_mm(FLAT, stmt=mutate(None)))


def test_verify_structure_errors():
    stmt = Compute("C", access("C", "m", "n"), MM, reduce="add", init="identity")
    with pytest.raises(ScheduleError, match="unknown annotation"):
        verify(_mm([("m", 1), ("n", 1, ("fast",)), ("k", 1)]))
    with pytest.raises(ScheduleError, match="step 0"):
        verify(_mm([("m", 1), ("n", 1), ("k", 0), ("k", 1)]))
    with pytest.raises(SymbolError, match="unknown dimension z"):
        verify(make_tree(_mm_bufs(), {"m": 8, "n": 8, "k": 8}, nest(FLAT + [("z", 1)], stmt)))
    with pytest.raises(SymbolError, match="buffer A is declared twice"):
        verify(make_tree(_mm_bufs() + [Buffer("A", "float32", (1,), "temp")], {"m": 8, "n": 8, "k": 8},
                         nest(FLAT, stmt)))
    with pytest.raises(ShapeError, match="2 dimensions but 1 strides"):
        verify(make_tree(_mm_bufs()[:2] + [Buffer("C", "float32", (8, 8), "output", (1,))],
                         {"m": 8, "n": 8, "k": 8}, nest(FLAT, stmt)))
    int_stmt = Compute("C", access("C", "m", "n"), Unary("exp", MM), reduce="add")
    with pytest.raises(DTypeError, match="unary op exp needs a floating-point statement"):
        verify(make_tree([Buffer("A", "int8", (8, 8), "input"), Buffer("B", "int8", (8, 8), "input"),
                          Buffer("C", "int32", (8, 8), "output")], {"m": 8, "n": 8, "k": 8}, nest(FLAT, int_stmt)))


@given(random_case())
def test_verify_accepts_random_cases(case):
    verify(case.tree)


# ---------------------------------------------------------------------------
# stats


@pytest.mark.parametrize("order", [
    FLAT, [("k", 1), ("m", 1), ("n", 1)], [("m", 16), ("n", 8), ("k", 1), ("m", 1), ("n", 1)],
    [("m", 3), ("k", 5), ("n", 7), ("m", 1), ("k", 2), ("n", 1), ("k", 1)],
])
def test_flops_matmul_is_2mnk(order):
    t = matmul_tree(13, 11, 7, order=order)
    assert stats.flops(t) == 2 * 13 * 11 * 7
    c_stack = next(iter(t.computes()))[0]
    assert stats.iteration_count(t, c_stack) == 13 * 11 * 7


def test_flops_copies_post_and_bytes():
    assert stats.flops(transpose_tree((4, 5), (1, 0))) == 0
    assert stats.flops(matmul_tree(4, 5, 6, post="relu", bias=True)) == 2 * 4 * 5 * 6 + 4 * 5
    assert stats.flops(elementwise_tree((3, 4), ("relu", "exp"), "add")) == 3 * 12
    assert stats.bytes_moved(matmul_tree(4, 5, 6)) == 4 * (4 * 6 + 6 * 5 + 4 * 5)
    assert stats.bytes_moved(matmul_tree(4, 5, 6, accumulate=True)) == 4 * (4 * 6 + 6 * 5 + 2 * 4 * 5)
    assert stats.bytes_moved(matmul_tree(4, 5, 6, dtype="int8")) == 4 * 6 + 6 * 5 + 4 * 4 * 5


def test_loop_ranges():
    t = matmul_tree(10, 8, 5, order=[("m", 4), ("n", 16), ("k", 1), ("m", 3), ("m", 1), ("n", 1)])
    r = stats.loop_ranges(t)
    assert r["m0"] == (10, 2, 2)
    assert r["n0"] == (8, 0, 8)       # step larger than the dimension: one partial iteration
    assert r["m1"] == (4, 1, 1)
    assert r["m2"] == (3, 3, 0)
    assert r["n1"] == (8, 8, 0)


@given(st.integers(0, 30), st.lists(st.integers(1, 9), min_size=1, max_size=3),
       st.lists(st.integers(-3, 3), min_size=3, max_size=3))
def test_chain_bounds_and_points_match_enumeration(size, steps, coeffs):
    coeffs = coeffs[: len(steps)]
    pts = []

    def rec(i, r, offs):
        if i == len(steps):
            pts.append(offs)
            return
        for o in range(0, r, steps[i]):
            rec(i + 1, min(steps[i], r - o), offs + [o])

    rec(0, size, [])
    vals = [sum(c * o for c, o in zip(coeffs, p)) for p in pts]
    assert stats.chain_bounds(size, steps, coeffs) == ((min(vals), max(vals)) if vals else None)
    assert stats.dim_points(size, steps) == len(pts)


def test_builders_nest_and_var_names():
    assert var_names([("m", 16), ("n", 8), ("k", 1), ("m", 1), ("n", 1)]) == ["m0", "n0", "k0", "m1", "n1"]
    t = matmul_tree(4, 4, 4)
    loops = [n for _, n in t.walk() if isinstance(n, Loop)]
    assert [(lp.var, lp.dim, lp.step) for lp in loops] == [
        ("m0", "m", 16), ("n0", "n", 8), ("k0", "k", 1), ("m1", "m", 1), ("n1", "n", 1)]
    assert list(itertools.islice((c.name for _, c in t.computes()), 2)) == ["C"]
