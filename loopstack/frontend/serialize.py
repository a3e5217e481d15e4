"""Lossless text form of a loop tree: its graph, its schedule and its action trace (JSON)."""
from __future__ import annotations

import json

from ..errors import LoopstackError, ScheduleError
from .graph import GNode, Graph
from .mutate import Action
from .tree import LoopTree, NodeSchedule

VERSION = 1


def serialize(tree: LoopTree) -> str:
    g = tree.graph
    doc = {
        "loopstack_tree": VERSION,
        "sizes": [list(p) for p in g.sizes],
        "inputs": g.n_inputs,
        "nodes": [{"id": n.id, "op": n.op, "fn": n.fn, "inputs": list(n.inputs), "vars": list(n.vars),
                   "dtype": n.dtype, "view": [[[list(t) for t in terms], c] for terms, c in n.view],
                   "pad": n.pad, "value": n.value, "arg": n.arg, "flat": list(n.flat),
                   **({"constant": True} if n.constant else {})}
                  for n in g.nodes],
        "schedule": [{"node": i, "order": [list(e) for e in s.order], "priority": s.priority,
                      "layout": list(s.layout), "disabled": sorted(s.disabled),
                      "annotations": [list(a) for a in s.annotations],
                      **({"tensorize": s.tensorize} if s.tensorize else {})} for i, s in tree.schedule],
        "actions": [[a.kind, list(a.args)] for a in tree.actions],
    }
    return json.dumps(doc, indent=1)


def deserialize(text: str) -> LoopTree:
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("loopstack_tree") != VERSION:
            raise ScheduleError(f"deserialize: not a loopstack tree of version {VERSION}")
        nodes = tuple(GNode(id=n["id"], op=n["op"], fn=n["fn"], inputs=tuple(n["inputs"]),
                            vars=tuple(n["vars"]), dtype=n["dtype"],
                            view=tuple((tuple(tuple(t) for t in terms), c) for terms, c in n["view"]),
                            pad=n["pad"], value=n["value"], arg=n["arg"], flat=tuple(n["flat"]),
                            constant=bool(n.get("constant", False)))
                      for n in doc["nodes"])
        graph = Graph(nodes, tuple((v, s) for v, s in doc["sizes"]), doc["inputs"])
        sched = tuple((s["node"], NodeSchedule(tuple(tuple(e) for e in s["order"]), s["priority"],
                                               tuple(s["layout"]), frozenset(s["disabled"]),
                                               tuple(tuple(a) for a in s["annotations"]),
                                               str(s.get("tensorize", ""))))
                      for s in doc["schedule"])
        actions = tuple(Action(k, tuple(a)) for k, a in doc["actions"])
        ids = {n.id for n in nodes}
        for n in nodes:
            if any(i not in ids for i in n.inputs):
                raise ScheduleError(f"deserialize: node {n.id} reads a node that does not exist ({list(n.inputs)})")
        return LoopTree(graph, sched, actions)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, StopIteration) as e:
        if isinstance(e, LoopstackError):
            raise
        raise ScheduleError(f"deserialize: malformed loop tree text ({type(e).__name__}: {e})") from None
