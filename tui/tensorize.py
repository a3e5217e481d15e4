"""The TUI's `x` and `X` keys: toggle the `tensorize` action on a sum of products (`x`: its
dot-product instruction; `X`: tile blocks, AMX, which keep only the schedule's whole-tile splits
of the output and its parallel loop).

A refusal names why no instruction applies; the status line is one line, so it shows the
request and the first candidate's reason (the whole list is the action's error, e.g. in Python).
"""
from __future__ import annotations

from loopstack.errors import ScheduleError
from loopstack.frontend.tensorize import tensorized


def one_line(e: ScheduleError) -> str:
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return " ".join(lines[:2])


WHAT = {"auto": "the widest dot-product instruction", "amx": "tile blocks"}


def toggle_tensorize(tree, ref: int, request: str = "auto"):
    """(status label, tree -> tree) for the `x` ("auto") or `X` ("amx") key at node `ref`:
    `request`, or none where the node has it already."""
    new = "" if tensorized(tree, ref) == request else request

    def fn(t):
        try:
            out = t.tensorize(ref, new)
        except ScheduleError as e:
            raise ScheduleError(one_line(e)) from None
        return out

    nid = tree.ir_node(ref)
    return (f"%{nid}: tensorized ({WHAT[new]})" if new else f"%{nid}: not tensorized"), fn
