"""The builders every tensorized-instruction description is made from.

A description is an ordinary `LoopTree` with one statement `out[...] += a[...] * b[...]` in
int32 (or float32) accumulation, so the reference interpreter runs it and a test can hold it
against the real instruction. Dimension names are fixed: `i` for the output lanes, `j` for the
reduction inside one lane (the 4 bytes of a `vpdpbusd` / `sdot` lane); `m`, `n`, `k` for a
matrix instruction.
"""
from __future__ import annotations

from ...looptree.builders import access, make_tree, nest
from ...looptree.ir import Binary, Buffer, Compute, Load, LoopTree


def dot_desc(lanes: int, k: int, a_dtype: str, b_dtype: str, acc_dtype: str = "int32", *,
             broadcast: str | None = None) -> LoopTree:
    """`acc[i] += a[i, j] * b[i, j]` for i < lanes, j < k — a vector dot-product instruction.

    With `broadcast="b"` (or "a"), that operand is `b[j]`: the same k values in every lane —
    the by-element form of `sdot`, or `vpdpbusd` with a 32-bit broadcast operand.
    """
    def operand(name):
        return ((k,), ("j",)) if broadcast == name else ((lanes, k), ("i", "j"))

    (a_shape, a_index), (b_shape, b_index) = operand("a"), operand("b")
    buffers = (
        Buffer("a", a_dtype, a_shape, "input"),
        Buffer("b", b_dtype, b_shape, "input"),
        Buffer("acc", acc_dtype, (lanes,), "output"),
    )
    stmt = Compute("dot", access("acc", "i"),
                   Binary("mul", Load(access("a", *a_index)), Load(access("b", *b_index))), reduce="add")
    return make_tree(buffers, {"i": lanes, "j": k}, nest([("i", 1), ("j", 1)], stmt))


def mma_desc(m: int, n: int, k: int, a_dtype: str, b_dtype: str, acc_dtype: str) -> LoopTree:
    """`acc[m, n] += a[m, k] * b[k, n]` — a warp-wide matrix instruction (mma.sync)."""
    buffers = (
        Buffer("a", a_dtype, (m, k), "input"),
        Buffer("b", b_dtype, (k, n), "input"),
        Buffer("acc", acc_dtype, (m, n), "output"),
    )
    stmt = Compute("mma", access("acc", "m", "n"),
                   Binary("mul", Load(access("a", "m", "k")), Load(access("b", "k", "n"))), reduce="add")
    return make_tree(buffers, {"m": m, "n": n, "k": k}, nest([("m", 1), ("n", 1), ("k", 1)], stmt))


def tile_desc(rows: int, cols: int, groups: int, group: int, a_dtype: str, b_dtype: str,
              acc_dtype: str = "int32") -> LoopTree:
    """`acc[m, n] += a[m, k, j] * b[k, n, j]` — a tile matrix instruction (AMX `tdpbusd`): `rows` x
    `cols` accumulators, each the sum over `groups` groups of `group` adjacent bytes (the
    reduction is k*group + j). A row of `a` is the row's whole reduction (64 bytes); a row of
    `b` is one group of every column (`[k][n][j]`: the weights packed 4 bytes per column)."""
    buffers = (
        Buffer("a", a_dtype, (rows, groups, group), "input"),
        Buffer("b", b_dtype, (groups, cols, group), "input"),
        Buffer("acc", acc_dtype, (rows, cols), "output"),
    )
    stmt = Compute("tile", access("acc", "m", "n"),
                   Binary("mul", Load(access("a", "m", "k", "j")), Load(access("b", "k", "n", "j"))), reduce="add")
    return make_tree(buffers, {"m": rows, "n": cols, "k": groups, "j": group},
                     nest([("m", 1), ("n", 1), ("k", 1), ("j", 1)], stmt))
