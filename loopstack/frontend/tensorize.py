"""The `tensorize` schedule action (UNIT §III): run a sum of products on a tensorized instruction.

`tree.tensorize(ref)` marks the contraction at node `ref` (its sum, or the product the sum
reads) to run on the widest dot-product instruction the target has; `tree.tensorize(ref,
"vpdpbusd.ymm")` names a registry entry (backend.tensorize.registry: one entry, or every operand
form of one), and `tree.tensorize(ref, "")` clears the request. The node's loops stay the
schedule's: the backend places the instruction's lanes and k-byte groups innermost and keeps
every loop above them (splits of the lane and reduction dimensions must be whole instructions).
A tile entry (`"amx"`, `"amx.tdpbusd"`) keeps the splits of the output's rows and columns by
whole 16 x 16 tiles as its block loops, and the parallel loop; it runs the reduction whole, so a
split of it is refused (backend.tensorize.scheduled.TileSchedule says which loops are kept).

Like a `vectorize` or `parallel` annotation, the request is checked by compiling the tree for
the default target: a request no instruction can satisfy is refused with each candidate's
reason, instead of failing later when the tree is compiled.
"""
from __future__ import annotations

from dataclasses import replace

from ..errors import ScheduleError
from .tree import LoopTree


def contraction_node(tree: LoopTree, ref: int) -> int:
    """The id of the sum of products at node `ref`: the sum itself or the product it reads."""
    g = tree.graph
    n = g.node(tree.ir_node(ref))
    if n.op == "reduce" and n.fn == "add":
        return n.id
    if n.op == "binary" and n.fn == "mul":
        users = [u for u in g.nodes if n.id in u.inputs]
        if len(users) == 1 and users[0].op == "reduce" and users[0].fn == "add":
            return users[0].id
    raise ScheduleError(f"tensorize L{ref}: %{n.id} ({n.fn or n.op}) is not a sum of products "
                        "(select the sum or the product it sums)")


def tensorize(tree: LoopTree, ref: int, instr: str = "auto") -> LoopTree:
    """Run the contraction at node `ref` on a tensorized instruction ("auto": the widest the
    target runs; a registry entry; "" clears)."""
    from .mutate import Action

    if not isinstance(instr, str):
        raise ScheduleError(f"tensorize L{ref}: the instruction is a registry name or 'auto', got {instr!r}")
    nid = contraction_node(tree, ref)
    if instr not in ("", "auto"):
        from ..backend.tensorize.registry import family

        family(instr)           # a name nobody knows is refused here, with the known ones
    s = dict(tree._sched)
    s[nid] = replace(s[nid], tensorize=instr)
    return tree._with(sched=s, action=Action("tensorize", (ref, instr)))


def tensorized(tree: LoopTree, ref: int) -> str:
    """The request on the contraction at node `ref` ("" when none or not a contraction)."""
    try:
        return tree.node_schedule(contraction_node(tree, ref)).tensorize
    except ScheduleError:
        return ""
