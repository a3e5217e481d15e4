"""The TUI's `x` key: toggle the `tensorize` action on a sum of products.

A refusal names why no instruction applies; the status line is one line, so it shows the
request and the first candidate's reason (the whole list is the action's error, e.g. in Python).
"""
from __future__ import annotations

from loopstack.errors import ScheduleError
from loopstack.frontend.tensorize import tensorized


def one_line(e: ScheduleError) -> str:
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return " ".join(lines[:2])


def toggle_tensorize(tree, ref: int):
    """(status label, tree -> tree) for the `x` key at node `ref`."""
    new = "" if tensorized(tree, ref) else "auto"

    def fn(t):
        try:
            out = t.tensorize(ref, new)
        except ScheduleError as e:
            raise ScheduleError(one_line(e)) from None
        return out

    nid = tree.ir_node(ref)
    return (f"%{nid}: tensorized (the widest dot-product instruction)" if new else f"%{nid}: not tensorized"), fn
