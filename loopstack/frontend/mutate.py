"""Schedule primitives: pure functions `tree -> new tree` (loop_tool's mutate.h).

Each one checks that it applies and raises a ScheduleError saying why not; none
fails silently.  Each records an `Action(kind, args)` in the new tree's `actions`, so
a schedule is a replayable trace: `apply_actions(unscheduled, tree.actions) == tree`.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, replace

from ..errors import LoopstackError, ScheduleError
from ..looptree.ir import ANNOTATIONS, GPU_BINDINGS
from .graph import GNode
from .tree import LoopTree, NodeSchedule, extents, steps


@dataclass(frozen=True)
class Action:
    kind: str
    args: tuple

    def __str__(self) -> str:
        return f"{self.kind}({', '.join(repr(a) for a in self.args)})"


def _rewrite(tree: LoopTree, nodes, fn) -> dict:
    s = dict(tree._sched)
    for i in nodes:
        s[i] = fn(i, s[i])
    return s


def _shift(ns: NodeSchedule, at: int, by: int, **kw) -> NodeSchedule:
    """Shift disabled depths and annotations at or below `at` by `by`."""
    dis = frozenset(d + by if d >= at else d for d in ns.disabled)
    ann = tuple((d + by if d >= at else d, a) for d, a in ns.annotations)
    return replace(ns, disabled=dis, annotations=ann, **kw)


def split(tree: LoopTree, ref: int, factor: int) -> LoopTree:
    """Split loop `ref` into an outer loop and an inner loop of `factor` iterations."""
    it = tree.loop(ref)
    d = it.depth
    if not isinstance(factor, int) or factor < 1:
        raise ScheduleError(f"split L{ref}: the factor must be a positive int, got {factor!r}")
    v, size, tail = it.entry
    step = steps(tree.node_schedule(it.leaves[0]).order)[d]
    ext = size * step + tail
    if factor * step > ext:
        raise ScheduleError(f"split L{ref}: factor {factor} exceeds the {size + (tail > 0)} "
                            f"iterations of loop {v}")

    def f(i, ns):
        order = list(ns.order)
        inner = factor * step
        order[d:d + 1] = [(v, ext // inner, ext % inner), (v, factor, 0)]
        ns = _shift(ns, d + 1, 1, order=tuple(order))
        # a vectorized loop stays innermost: the annotation follows it to the inner half
        return replace(ns, annotations=tuple(sorted((x + 1 if x == d and a == "vectorize" else x, a)
                                                    for x, a in ns.annotations)))

    return tree._with(sched=_rewrite(tree, it.leaves, f), action=Action("split", (ref, factor)))


def merge(tree: LoopTree, ref: int) -> LoopTree:
    """Merge loop `ref` into its parent loop over the same variable."""
    it = tree.loop(ref)
    par = it.parent
    if par == -1 or tree.items[par].entry[0] != it.entry[0]:
        raise ScheduleError(f"merge L{ref}: its parent is not a loop over {it.entry[0]}")
    d = it.depth

    def f(i, ns):
        order = list(ns.order)
        st = steps(ns.order)
        ext = order[d - 1][1] * st[d - 1] + order[d - 1][2]
        order[d - 1:d + 1] = [(it.entry[0], ext // st[d], ext % st[d])]
        # the merged loop keeps the outer half's annotation, or the inner half's vectorize
        inner = ns.annotation(d)
        ann = tuple((x, a) for x, a in ns.annotations if x != d)
        if inner == "vectorize" and not ns.annotation(d - 1):
            ann = tuple(sorted(ann + ((d - 1, inner),)))
        ns = replace(ns, annotations=ann, disabled=frozenset(x for x in ns.disabled if x != d))
        return _shift(ns, d + 1, -1, order=tuple(order))

    return tree._with(sched=_rewrite(tree, it.leaves, f), action=Action("merge", (ref,)))


def swap_loops(tree: LoopTree, a: int, b: int) -> LoopTree:
    """Swap a loop with its direct child loop (either order of arguments)."""
    la, lb = tree.loop(a), tree.loop(b)
    if lb.parent == a:
        outer, inner = la, lb
    elif la.parent == b:
        outer, inner = lb, la
    else:
        raise ScheduleError(f"swap_loops L{a}, L{b}: one loop must directly contain the other")
    if outer.entry[0] == inner.entry[0]:
        raise ScheduleError(f"swap_loops L{a}, L{b}: both loops are over {outer.entry[0]}; swapping "
                            "them would change the result (merge or split instead)")
    d = outer.depth
    if outer.annotation == "parallel":
        raise ScheduleError(f"swap_loops L{a}, L{b}: L{outer.ref} runs in parallel and only an outermost "
                            "loop can; clear its annotation first")
    if inner.annotation == "vectorize":
        raise ScheduleError(f"swap_loops L{a}, L{b}: L{inner.ref} is vectorized and must stay innermost; "
                            "clear its annotation first")

    def f(i, ns):
        order = list(ns.order)
        order[d], order[d + 1] = order[d + 1], order[d]
        ann = tuple((d + 1 if x == d else d if x == d + 1 else x, k) for x, k in ns.annotations)
        return replace(ns, order=tuple(order), annotations=ann)

    return tree._with(sched=_rewrite(tree, inner.leaves, f), action=Action("swap_loops", (a, b)))


def swap_nodes(tree: LoopTree, a: int, b: int) -> LoopTree:
    """Swap the execution order of two nodes that do not depend on each other."""
    na, nb = tree.leaf(a).node, tree.leaf(b).node
    for x, y in ((na, nb), (nb, na)):
        if _depends(tree, x, y):
            raise ScheduleError(f"swap_nodes L{a}, L{b}: %{x} depends on %{y}; swapping them "
                                "would read a value before it is computed")
    pa, pb = tree._sched[na].priority, tree._sched[nb].priority
    s = dict(tree._sched)
    s[na], s[nb] = replace(s[na], priority=pb), replace(s[nb], priority=pa)
    return tree._with(sched=s, action=Action("swap_nodes", (a, b)))


def _depends(tree, x, y) -> bool:
    stack, seen = [x], set()
    while stack:
        i = stack.pop()
        for j in tree._deps[i]:
            if j == y:
                return True
            if j not in seen:
                seen.add(j)
                stack.append(j)
    return False


def try_swap(tree: LoopTree, a: int, b: int) -> LoopTree:
    """swap_loops for two loops, swap_nodes for two nodes; an error (never a silent no-op) otherwise."""
    ka, kb = tree.kind(a), tree.kind(b)
    if ka == kb == "loop":
        t = swap_loops(tree, a, b)
    elif ka == kb == "node":
        t = swap_nodes(tree, a, b)
    else:
        raise ScheduleError(f"try_swap L{a}, L{b}: cannot swap a loop with a node")
    return LoopTree(t.graph, t.schedule, tree.actions + (Action("try_swap", (a, b)),))


def remove_loop(tree: LoopTree, ref: int, loop_ref: int | None = None) -> LoopTree:
    """`remove_loop(loop)`: remove a loop of one iteration (size 1, no tail) from every node under it.
    `remove_loop(node, loop)` (loop_tool's form): take the enclosing loop `loop` out of `node`'s
    loops, for a loop of any size over a dimension the node does not need (one `add_loop` gave
    it), or of one iteration."""
    if loop_ref is not None:
        return _remove_node_loop(tree, ref, loop_ref)
    it = tree.loop(ref)
    v, s, t = it.entry
    if s != 1 or t != 0:
        raise ScheduleError(f"remove_loop L{ref}: loop {v} has {s} iterations{f' r {t}' if t else ''}; "
                            "only a loop of size 1 can be removed (merge it instead)")
    return tree._with(sched=_rewrite(tree, it.leaves, lambda i, ns: _drop_depth(ns, it.depth)),
                      action=Action("remove_loop", (ref,)))


def _drop_depth(ns: NodeSchedule, d: int) -> NodeSchedule:
    ns = replace(ns, annotations=tuple((x, k) for x, k in ns.annotations if x != d),
                 disabled=frozenset(x for x in ns.disabled if x != d))
    return _shift(ns, d + 1, -1, order=ns.order[:d] + ns.order[d + 1:])


def _remove_node_loop(tree: LoopTree, node_ref: int, loop_ref: int) -> LoopTree:
    nid = tree.leaf(node_ref).node
    lp = tree.loop(loop_ref)
    where = f"remove_loop L{node_ref}, L{loop_ref}"
    if loop_ref not in tree.path(node_ref):
        raise ScheduleError(f"{where}: L{loop_ref} does not enclose %{nid}")
    v, s, t = lp.entry
    if v in tree.graph.domain(tree.graph.node(nid)) and (s, t) != (1, 0):
        raise ScheduleError(f"{where}: %{nid} needs loop {v} ({s} iterations{f' r {t}' if t else ''}); "
                            "only a loop it does not need, or of one iteration, can be removed")
    sched = dict(tree._sched)
    sched[nid] = _drop_depth(sched[nid], lp.depth)
    return tree._with(sched=sched, action=Action("remove_loop", (node_ref, loop_ref)))


def add_loop(tree: LoopTree, ref: int, what) -> LoopTree:
    """`add_loop(ref, var)`: a loop of size 1 over `var` just above `ref` (a loop or a node).
    `add_loop(node, loop)` (loop_tool's form): `node` also iterates the loop `loop`, of any size,
    over a dimension it does not need; it enters at that loop's depth, so that it can share the
    loop with the nodes already in it (a staged copy built per block of the loop), and simply
    runs again on each iteration. A reduction cannot: it would add its terms again."""
    if isinstance(what, int) and not isinstance(what, bool):
        return _add_node_loop(tree, ref, what)
    var = what
    it = tree.item(ref)
    d = it.depth
    leaves = tree.leaves_under(ref)
    for i in leaves:
        if var not in tree.graph.domain(tree.graph.node(i)):
            raise ScheduleError(f"add_loop L{ref}: {var} is not a dimension of %{i}")

    def f(i, ns):
        return _shift(ns, d, 1, order=ns.order[:d] + ((var, 1, 0),) + ns.order[d:])

    return tree._with(sched=_rewrite(tree, leaves, f), action=Action("add_loop", (ref, var)))


def _add_node_loop(tree: LoopTree, node_ref: int, loop_ref: int) -> LoopTree:
    g = tree.graph
    nid = tree.leaf(node_ref).node
    lp = tree.loop(loop_ref)
    where = f"add_loop L{node_ref}, L{loop_ref}"
    v = lp.entry[0]
    n = g.node(nid)
    if v in g.domain(n):
        raise ScheduleError(f"{where}: %{nid} already iterates {v}; split or swap its own loops instead")
    if v in n.vars:
        raise ScheduleError(f"{where}: %{nid} writes along {v} (its flattened dimension); it cannot "
                            f"also repeat under a loop over {v}")
    if n.op == "reduce":
        raise ScheduleError(f"{where}: %{nid} is a reduction; repeating it under loop {v} would add its "
                            "terms again")
    if n.op == "write":
        raise ScheduleError(f"{where}: %{nid} writes the output; it takes no loops of its own")
    ns = tree._sched[nid]
    d = min(lp.depth, len(ns.order))
    sched = dict(tree._sched)
    sched[nid] = _shift(ns, d, 1, order=ns.order[:d] + (lp.entry,) + ns.order[d:])
    return tree._with(sched=sched, action=Action("add_loop", (node_ref, loop_ref)))


def swap_vars(tree: LoopTree, ref: int, a: str, b: str) -> LoopTree:
    """Swap two dimensions in the layout of the buffer node `ref` writes."""
    it = tree.leaf(ref)
    g = tree.graph
    n = g.node(it.node)
    if n.op in ("read", "write") or any(g.node(c).op == "write" for c in g.consumers(n.id)):
        raise ScheduleError(f"swap_vars L{ref}: %{n.id} is an input or the output; its layout is "
                            "the caller's (stage a copy to change it)")
    ns = tree._sched[n.id]
    for v in (a, b):
        if v not in ns.layout:
            raise ScheduleError(f"swap_vars L{ref}: {v} is not a dimension of %{n.id} "
                                f"[{', '.join(ns.layout)}]")
    lay = [b if v == a else a if v == b else v for v in ns.layout]
    s = dict(tree._sched)
    s[n.id] = replace(ns, layout=tuple(lay))
    return tree._with(sched=s, action=Action("swap_vars", (ref, a, b)))


def copy_input(tree: LoopTree, ref: int, idx: int) -> LoopTree:
    """Stage input `idx` of node `ref` into its own buffer (packing), placed just before it."""
    it = tree.leaf(ref)
    g = tree.graph
    n = g.node(it.node)
    if n.op in ("read", "write"):
        raise ScheduleError(f"copy_input L{ref}: %{n.id} is a {n.op}; only a compute node's "
                            "inputs can be staged")
    if not 0 <= idx < len(n.inputs):
        raise ScheduleError(f"copy_input L{ref}: %{n.id} has {len(n.inputs)} inputs, no input {idx}")
    src = g.node(n.inputs[idx])
    if src.op == "const":
        raise ScheduleError(f"copy_input L{ref}: input {idx} of %{n.id} is a constant")
    cid = max(x.id for x in g.nodes) + 1
    copy = GNode(id=cid, op="copy", fn="copy", inputs=(src.id,), vars=src.vars, dtype=src.dtype)
    ins = list(n.inputs)
    ins[idx] = cid
    nodes = [replace(x, inputs=tuple(ins)) if x.id == n.id else x for x in g.nodes] + [copy]
    ns = tree._sched[n.id]
    order = tuple(e for e in ns.order if e[0] in src.vars)
    if set(extents(order)) != set(src.vars):
        raise ScheduleError(f"copy_input L{ref}: input {idx} of %{n.id} has dimensions that %{n.id} "
                            "does not loop over")
    s = dict(tree._sched)
    s[cid] = NodeSchedule(order, ns.priority - 0.5, src.vars)
    # the copy has its source's dimensions: no node's domain changes
    return tree._with(graph=g.with_nodes(nodes), sched=s, action=Action("copy_input", (ref, idx)),
                      changed=(n.id, cid))


def delete_copy(tree: LoopTree, ref: int) -> LoopTree:
    """Remove a staging copy (undo copy_input)."""
    it = tree.leaf(ref)
    g = tree.graph
    n = g.node(it.node)
    if n.op != "copy" or n.fn != "copy" or any(g.node(c).op == "write" for c in g.consumers(n.id)):
        what = "an astype's conversion" if n.fn == "cast" else "not a staging copy"
        raise ScheduleError(f"delete_copy L{ref}: %{n.id} is {what}")
    src = n.inputs[0]
    nodes = [replace(x, inputs=tuple(src if i == n.id else i for i in x.inputs))
             for x in g.nodes if x.id != n.id]
    s = dict(tree._sched)
    del s[n.id]
    return tree._with(graph=g.with_nodes(nodes), sched=s, action=Action("delete_copy", (ref,)))


def _reuse(tree, loop_ref, node_ref, enable: bool, kind: str) -> LoopTree:
    lp = tree.loop(loop_ref)
    nid = tree.leaf(node_ref).node
    ns = tree._sched[nid]
    d = lp.depth
    if d >= len(ns.order):
        raise ScheduleError(f"{kind} L{loop_ref}, L{node_ref}: %{nid} has only {len(ns.order)} loops")
    dis = ns.disabled - {d} if enable else ns.disabled | {d}
    s = dict(tree._sched)
    s[nid] = replace(ns, disabled=frozenset(dis))
    return tree._with(sched=s, action=Action(kind, (loop_ref, node_ref)))


def disable_reuse(tree: LoopTree, loop_ref: int, node_ref: int) -> LoopTree:
    """Node `node_ref` must not reuse (share) the loop at `loop_ref`'s depth."""
    return _reuse(tree, loop_ref, node_ref, False, "disable_reuse")


def enable_reuse(tree: LoopTree, loop_ref: int, node_ref: int) -> LoopTree:
    return _reuse(tree, loop_ref, node_ref, True, "enable_reuse")


def _shared_depth(tree, ref) -> int:
    """How many of the node's enclosing loops also hold an earlier node."""
    nid = tree.item(ref).node
    k = 0
    for p in tree.path(ref):
        if tree.items[p].leaves[0] != nid:
            k += 1
        else:
            break
    return k


def decrease_reuse(tree: LoopTree, ref: int) -> LoopTree:
    """The node at `ref` stops sharing its innermost shared loop."""
    it = tree.leaf(ref)
    k = _shared_depth(tree, ref)
    if k == 0:
        raise ScheduleError(f"decrease_reuse L{ref}: %{it.node} shares no loop with an earlier node")
    ns = tree._sched[it.node]
    s = dict(tree._sched)
    s[it.node] = replace(ns, disabled=ns.disabled | {k - 1})
    return tree._with(sched=s, action=Action("decrease_reuse", (ref,)))


def increase_reuse(tree: LoopTree, ref: int) -> LoopTree:
    """Undo the innermost-first disabled reuse of the node at `ref`."""
    it = tree.leaf(ref)
    ns = tree._sched[it.node]
    if not ns.disabled:
        raise ScheduleError(f"increase_reuse L{ref}: %{it.node} has no disabled reuse to enable")
    s = dict(tree._sched)
    s[it.node] = replace(ns, disabled=ns.disabled - {min(ns.disabled)})
    return tree._with(sched=s, action=Action("increase_reuse", (ref,)))


def annotate(tree: LoopTree, ref: int, kind: str) -> LoopTree:
    """Mark a loop "unroll", "vectorize" or "parallel", or bind it to a GPU's CTAs ("block") or
    to the warps of a CTA ("warp"); "" clears."""
    leaves, f = annotation_change(tree, ref, kind)
    return tree._with(sched=_rewrite(tree, leaves, f), action=Action("annotate", (ref, kind)))


def annotate_loops(tree: LoopTree, refs, kind: str) -> LoopTree:
    """`annotate(tree, ref, kind)` for each of `refs` in turn, made as one tree: an annotation
    moves no loop, so each ref names the same loop throughout, and the actions recorded are
    those of the annotations one by one. A schedule generator annotating several nests thus
    builds no tree in between. Raises what the first refused annotation raises; the trees in
    between are not checked on their own (check_annotations), only the last one."""
    s = dict(tree._sched)
    actions = []
    for ref in refs:
        leaves, f = annotation_change(tree, ref, kind)
        for i in leaves:
            s[i] = f(i, s[i])
        actions.append(Action("annotate", (ref, kind)))
    return tree._with(sched=s, actions=actions)


def annotation_change(tree: LoopTree, ref: int, kind: str):
    """(the nodes under loop `ref`, their schedules' rewrite) of annotating it `kind`, or the
    ScheduleError saying why the loop cannot be."""
    it = tree.loop(ref)
    if kind not in ANNOTATIONS + ("",):
        raise ScheduleError(f"annotate L{ref}: unknown annotation {kind!r} (expected one of "
                            f"{', '.join(ANNOTATIONS)})")
    g = tree.graph
    v = it.entry[0]
    if kind == "parallel" or kind in GPU_BINDINGS:
        for i in it.leaves:
            if v in g.reduced(g.node(i)):
                what = "parallelize" if kind == "parallel" else f"bind to the GPU's {kind}s"
                raise ScheduleError(f"annotate L{ref}: cannot {what} loop {v}: %{i} reduces over {v}, "
                                    "so the iterations would race on its output")
    if kind == "parallel" and it.depth != 0:
        raise ScheduleError(f"annotate L{ref}: only an outermost loop can run in parallel "
                            f"({v} is nested {it.depth} deep)")
    if kind == "vectorize" and any(tree.kind(c) == "loop" for c in tree.children(ref)):
        raise ScheduleError(f"annotate L{ref}: only an innermost loop can be vectorized ({v} has inner loops)")
    d = it.depth

    def f(i, ns):
        ann = tuple((x, a) for x, a in ns.annotations if x != d) + (((d, kind),) if kind else ())
        return replace(ns, annotations=tuple(sorted(ann)))

    return it.leaves, f


def set_order(tree: LoopTree, node_id: int, order) -> LoopTree:
    """Give node `%node_id` the whole loop order `order` ((var, count, tail) entries, outer to
    inner) in one step: what a schedule generator states, recorded as one replayable action.

    The node's annotations and disabled reuse are dropped: they name depths of the old order."""
    order = _order(tree, node_id, order)
    sched = dict(tree._sched)
    sched[node_id] = sched[node_id].reordered(order)
    return tree._with(sched=sched, action=Action("set_order", (node_id, [list(e) for e in order])))


def set_orders(tree: LoopTree, orders) -> LoopTree:
    """`set_order(tree, node_id, order)` for each (node_id, order) of `orders` in turn, made as
    one tree (the trees in between are not checked on their own, only the last one), with the
    actions of the calls one by one."""
    s = dict(tree._sched)
    actions = []
    for node_id, order in orders:
        order = _order(tree, node_id, order)
        s[node_id] = s[node_id].reordered(order)
        actions.append(Action("set_order", (node_id, [list(e) for e in order])))
    return tree._with(sched=s, actions=actions)


def _order(tree: LoopTree, node_id: int, order) -> tuple:
    """`order` as (var, count, tail) tuples, for a scheduled node of `tree`."""
    if node_id not in tree._sched:
        raise ScheduleError(f"set_order: %{node_id} is not a scheduled node")
    try:
        # (var, count, tail), or loop_tool's IR spelling (var, (count, tail))
        return tuple((str(e[0]), int(e[1][0]), int(e[1][1])) if len(e) == 2 else
                     (str(e[0]), int(e[1]), int(e[2])) for e in order)
    except (TypeError, ValueError, IndexError):
        raise ScheduleError(f"set_order %{node_id}: an order is (var, count, tail) entries, got {order!r}") from None


def map_ref(new: LoopTree, old_ref: int, old: LoopTree) -> int:
    """The ref in `new` closest to `old_ref` in `old` (a cursor carried across a mutation)."""
    it = old.item(old_ref)
    if it.kind == "node":
        nid, depth = it.node, None
    else:
        nid, depth = it.leaves[0], it.depth
    if nid not in new._leaf:
        nid = next(iter(new._leaf))
    r = new.ref_of(nid)
    if depth is None:
        return r
    path = new.path(r)
    return path[min(depth, len(path) - 1)] if path else r


def apply_actions(tree: LoopTree, actions) -> LoopTree:
    """Replay a trace of actions (e.g. `other.actions`) on a tree."""
    try:
        actions = list(actions)
    except TypeError:
        raise ScheduleError(f"a schedule is a list of actions, got {actions!r}") from None
    for a in actions:
        if isinstance(a, Action):
            kind, args = a.kind, a.args
        elif isinstance(a, (list, tuple)) and len(a) == 2 and isinstance(a[1], (list, tuple)):
            kind, args = a[0], tuple(a[1])
        else:
            raise ScheduleError(f"malformed schedule action {a!r}: expected [kind, [arguments]]")
        fn = PRIMITIVES.get(kind) if isinstance(kind, str) else None
        if fn is None:
            raise ScheduleError(f"unknown schedule action {kind!r}")
        try:
            inspect.signature(fn).bind(tree, *args)
        except TypeError:
            raise ScheduleError(f"{kind}: wrong arguments {args!r}") from None
        try:
            tree = fn(tree, *args)
        except (TypeError, ValueError, IndexError, KeyError) as e:
            if isinstance(e, LoopstackError):
                raise
            raise ScheduleError(f"{kind}{args!r}: malformed arguments ({e})") from None
    return tree


from .tensorize import tensorize  # noqa: E402 - the action's own module (it records an Action)

PRIMITIVES = {f.__name__: f for f in (
    split, merge, swap_loops, swap_nodes, try_swap, remove_loop, add_loop, swap_vars, copy_input,
    delete_copy, disable_reuse, enable_reuse, decrease_reuse, increase_reuse, annotate, set_order,
    tensorize)}
PRIMITIVES["swap"] = try_swap
PRIMITIVES["apply_actions"] = apply_actions
PRIMITIVES["map_ref"] = lambda new, old_ref, old: map_ref(new, old_ref, old)
