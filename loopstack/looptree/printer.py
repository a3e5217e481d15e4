"""Text form of a loop tree, in the style of loop_tool's `print_loop_nest()`:

    %A: float32[64, 64] input
    %B: float32[64, 64] input
    %C: float32[64, 64] output
    for m0 in 4 : L0
      for n0 in 8 : L1
        for k0 in 64 : L2
          for m1 in 16 : L3
            for n1 in 8 : L4  [unroll]
              %C[m, n] += mul(%A[m, k], %B[k, n])  init identity

A loop line shows its var, its extent (full steps of the range it sees) and ` r T` when the
range leaves a tail of T elements; `(dim)` follows a var that does not spell its dimension.
Loops are numbered L0, L1, ... in program order.  A statement shows its reduction as
`+=`, `*=`, `max=`, `min=` (a plain assignment is `=`), then its init and post, and its name
when that differs from the output buffer's.
"""
from __future__ import annotations

import re

from .ir import Compute, Loop, LoopTree

__all__ = ["format_tree", "format_loop", "format_compute", "format_buffer"]

_REDUCE_SYMBOL = {None: "=", "add": "+=", "mul": "*=", "max": "max=", "min": "min="}
INDENT = "  "


def format_buffer(b) -> str:
    default = b.__class__(b.name, b.dtype, b.shape, b.kind).strides
    strides = "" if b.strides == default else f" strides [{', '.join(map(str, b.strides))}]"
    const = " constant" if b.constant else ""
    return f"%{b.name}: {b.dtype}[{', '.join(map(str, b.shape))}] {b.kind}{const}{strides}"


def format_loop(lp: Loop, extent: int, tail: int, number: int) -> str:
    name = lp.var if re.fullmatch(re.escape(lp.dim) + r"([0-9]\w*)?'*", lp.var) else f"{lp.var} ({lp.dim})"
    tail_s = f" r {tail}" if tail else ""
    ann = f"  [{', '.join(sorted(lp.annotations))}]" if lp.annotations else ""
    return f"for {name} in {extent}{tail_s} : L{number}{ann}"


def format_compute(c: Compute) -> str:
    s = f"{c.out} {_REDUCE_SYMBOL.get(c.reduce) or f'{c.reduce}='} {c.expr}"
    if c.init is not None:
        s += f"  init {c.init}"
    if c.post is not None:
        s += f"  post {c.post}"
    if c.requant is not None:
        s += f"  {c.requant}"
    if c.tensorize:
        s += f"  tensorize {c.tensorize}"
    if c.name != c.out.buffer:
        s += f"  : {c.name}"
    return s


def format_tree(tree: LoopTree) -> str:
    sizes = dict(tree.dims)
    lines = [format_buffer(b) for b in tree.buffers]
    counter = [0]

    # ranges computed here rather than by stats.loop_ranges so that a tree that does not
    # verify (duplicate vars, step 0) still prints, for error messages and the TUI
    def rec(nodes, depth, seen):
        for n in nodes:
            pad = INDENT * depth
            if isinstance(n, Loop):
                r = seen.get(n.dim, sizes.get(n.dim, 0))
                extent, tail = divmod(r, n.step) if isinstance(n.step, int) and n.step > 0 else (0, r)
                lines.append(pad + format_loop(n, extent, tail, counter[0]))
                counter[0] += 1
                rec(n.body, depth + 1, {**seen, n.dim: min(r, n.step) if n.step else r})
            else:
                lines.append(pad + format_compute(n))

    rec(tree.body, 0, {})
    return "\n".join(lines)
