"""The TUI's `x` key: tensorize a sum of products, or say on the status line why not."""
import numpy as np
import pytest

import loopstack as lt
from loopstack.isa import cpu
from tui.screen import as_text, layout
from tui.state import Session
from test_tui import COLS, ROWS, fake_measure, keys, matmul

needs_dot = pytest.mark.skipif(not {"avx2"} <= cpu.cpu_features(), reason="this CPU runs no x86 vector target")


def int8_session(n=64):
    rng = np.random.default_rng(0)
    s = lt.SymbolGenerator()
    a = rng.integers(0, 256, (n, n)).astype(np.uint8)
    b = rng.integers(-128, 128, (n, n)).astype(np.int8)
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    return Session(C.loop_tree, name="Q-64", measurer=fake_measure)


@needs_dot
def test_x_toggles_tensorize_on_the_sum_or_its_product():
    s = int8_session()
    s.cursor = s.tree.ref_of(2)              # the multiply: its sum is tensorized
    keys(s, "x")
    assert not s.error and "tensorized" in s.message and s.tree.node_schedule(3).tensorize == "auto"
    assert s.tree.actions[-1].kind == "tensorize"
    kernel = s.tree.compile()
    assert kernel.tensorized is not None
    keys(s, "x")                              # again: cleared
    assert s.tree.node_schedule(3).tensorize == "" and "not tensorized" in s.message
    keys(s, "z", "z")
    assert s.tree == s.initial


@needs_dot
def test_a_refusal_shows_the_reason_and_keeps_the_schedule():
    s = int8_session()
    # m and n in steps of 4: no instruction's lanes (8 or 16) fit either
    order = [("m", 16, 0), ("n", 16, 0), ("k", 64, 0), ("m", 4, 0), ("n", 4, 0)]
    s.tree = s.tree.set_order(2, order).set_order(3, order)
    before = s.tree
    s.cursor = s.tree.ref_of(3)
    keys(s, "x")
    assert s.error and s.tree == before
    assert "no instruction applies" in s.message and "not a multiple of" in s.message
    assert "\n" not in s.message
    lines = as_text(layout(s, ROWS, COLS))
    assert any(ln.startswith("error: ") and "tensorize" in ln for ln in lines)
    s.cursor = 0
    keys(s, "x")
    assert s.error and "applies to a node" in s.message


def test_a_float_contraction_is_refused_with_its_dtype():
    C, _, _ = matmul(64)
    s = Session(C.loop_tree, name="MM-64", measurer=fake_measure)
    s.cursor = s.tree.ref_of(3)
    keys(s, "x")
    if lt.default_target() == "interp":
        pytest.skip("the interpreter checks no instruction (it ignores the request)")
    assert s.error and "float32" in s.message and s.tree == s.initial
