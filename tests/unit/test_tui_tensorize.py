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


def tiles_here():
    from loopstack.backend.tensorize.apply import tile_instructions
    from loopstack.isa.target import host_target

    return lt.default_target() != "interp" and bool(tile_instructions(host_target()))


def test_shift_x_toggles_tile_blocks_or_says_why_not(monkeypatch):
    s = int8_session()
    s.cursor = s.tree.ref_of(3)
    if tiles_here():
        keys(s, "X")
        assert not s.error and "tile blocks" in s.message and s.tree.node_schedule(3).tensorize == "amx"
        assert s.tree.compile().tensorized == "amx.tdpbusd"
        keys(s, "x")                          # from tiles to the dot-product instruction
        assert s.tree.node_schedule(3).tensorize == "auto"
        keys(s, "X", "X")                     # tiles, then cleared
        assert s.tree.node_schedule(3).tensorize == "" and "not tensorized" in s.message
        # a split no tile block keeps: refused on the status line, the schedule kept
        order = [("m", 8, 0), ("n", 4, 0), ("k", 64, 0), ("m", 8, 0), ("n", 16, 0)]
        s.tree = s.tree.set_order(2, order).set_order(3, order)
        before = s.tree
        s.cursor = s.tree.ref_of(3)
        keys(s, "X")
        assert s.error and s.tree == before and "not a multiple of" in s.message and "16 tile rows" in s.message
        assert "\n" not in s.message
    # a CPU without AMX (or Linux refusing the tile state): refused naming what is missing
    monkeypatch.setattr(cpu, "amx_permission", lambda: (False, "arch_prctl refused (test)"))
    s = int8_session(32)                      # a program no compile above has cached
    s.cursor = s.tree.ref_of(3)
    keys(s, "X")
    if lt.default_target() == "interp":
        pytest.skip("the interpreter checks no instruction (it ignores the request)")
    assert s.error and "needs amx_int8, amx_tile" in s.message and s.tree == s.initial
