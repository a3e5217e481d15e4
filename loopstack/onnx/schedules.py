"""The schedule each layer of a network compiles with.

A layer takes the tuning database's best schedule for its program when one was recorded, else
loopstack's default (`tune.defaults`), which is built for contractions: matmuls and
convolutions, vectorised along their output channels. Three kinds of layer a network has in
numbers that the default serves badly are adjusted here:

* **Row reductions** (Softmax, LayerNormalization, ReduceMean over the last axis): every
  reduction runs over the innermost, unit-stride axis of its input. Vectorised along the
  output (the default) each lane strides a whole row apart; kept in the program's own order,
  a row is read along its length instead, each reduction in a loop of its own so that it
  vectorises as a sum across lanes (the code generator vectorises a loop holding one
  reduction, or element-wise statements only).
* **Values used more than once** inside one element-wise expression (a sigmoid under the
  HardSwish after it, an operator expanded into terms that share one): fused into one statement they are
  recomputed at every use. Each such value ends its innermost loop instead, so that it is
  stored once into a temp of one vector (the lowering scopes it to the loops it shares with
  its readers) and loaded where it is used.
* **Matrix-vector products** (a Gemm or MatMul at batch 1): the constant matrix is staged
  panel by panel, so that it streams from memory as one run (`pack_matrix_of_matvec`).
* **Transposes** that move the input's innermost axis (BERT's K^T: [128, 12, 64] ->
  [12, 64, 128]): read a vector of output lanes at a time, the source rows a lane apart are a
  whole row apart (3 KB: all 128 of them fall in 4 of L1's 64 sets, and every read misses L1);
  tiled, one vector's worth of source rows serves the whole innermost source axis before the
  tile moves on (`tile_transpose`: 106 -> 41 us, one thread, this Xeon).

BERT-base's layer (one thread, this Xeon): Softmax 750 -> 80 us, LayerNormalization 130 ->
50 us, the Gelu chain 2.2 ms -> 0.4 ms (then erf as one vector function: 0.15 ms on a Zen 4).
"""
from __future__ import annotations

from dataclasses import replace

__all__ = ["layer_schedule", "pack_matrix_of_matvec", "row_reductions", "share_common_values", "tile_transpose"]


def layer_schedule(tensor, target=None):
    """(frontend LoopTree, origin) for one layer: "tuned", else "default" (adjusted as above)."""
    from ..frontend.graph import SCHEDULED
    from ..frontend.run import program
    from ..frontend.tree import LoopTree, default_schedule
    from ..tune.defaults import chosen_schedule

    tree, origin = chosen_schedule(tensor, target)
    if origin != "default":
        return tree, origin
    graph = program(tensor).graph      # as written (the default may have added copies)
    reductions = [n for n in graph.nodes if n.op in SCHEDULED and graph.reduced(n)]
    if reductions and not row_reductions(graph):
        return pack_matrix_of_matvec(tree), origin
    if reductions:
        tree = _own_loops_for_reductions(LoopTree(graph, default_schedule(graph)))
    else:
        tree = tile_transpose(tree)
    return share_common_values(tree), origin


def row_reductions(graph) -> bool:
    """Whether every reduction of `graph` is a row reduction: the tensors it reads (through
    the element-wise nodes it applies to them) have their innermost, unit-stride axis
    reduced. A depthwise convolution over channels-last data is none (its innermost axis is
    the channel it keeps), nor is a matmul (B[k, n] keeps n innermost)."""
    from ..frontend.graph import SCHEDULED

    found = False
    for n in graph.nodes:
        if n.op not in SCHEDULED or not graph.reduced(n):
            continue
        reduced = set(graph.reduced(n))
        inner = _innermost_reads(graph, n)
        if not inner or any(not vs or not vs <= reduced for vs in inner) or _contraction(graph, n):
            return False
        found = True
    return found


def _innermost_reads(graph, node) -> list:
    """The variables indexing the innermost axis of each tensor `node` reads from memory,
    through the element-wise nodes of its own domain (values reduced before are not
    followed: they are the rows' statistics); None when it reads anything else."""
    from ..frontend.graph import SCHEDULED

    found, todo, seen = [], list(node.inputs), set()
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        n = graph.node(i)
        if n.op == "read":
            found.append({n.vars[-1]} if n.vars else set())
        elif n.op == "view":
            terms, _ = n.view[-1]
            found.append({name for name, k in terms if k})
        elif n.op in ("unary", "binary") and n.op in SCHEDULED and not graph.reduced(n):
            todo.extend(n.inputs)
        elif n.op not in ("const", "reduce"):
            return None
    return found


def _contraction(graph, node) -> bool:
    """A product of two operands that each lack a variable of the other (A[m, k] * B[k, n])."""
    for i in node.inputs:
        p = graph.node(i)
        if p.op == "binary" and p.fn == "mul" and set(graph.domain(p)) == set(graph.domain(node)):
            a, b = (_vars(graph, j) for j in p.inputs)
            if a and b and not a <= b and not b <= a:
                return True
    return False


def _vars(graph, i) -> set:
    n = graph.node(i)
    if n.op == "view":
        return {name for terms, _ in n.view for name, k in terms if k}
    return set(n.vars) if n.op != "const" else set()


def pack_matrix_of_matvec(tree):
    """A matrix-vector product (one output row: a Gemm or MatMul at batch 1) with its constant
    matrix staged panel by panel: the default streams each vector panel of B[k, n] as k short
    runs a row of B apart, which the hardware prefetcher follows badly once B has left L2 (it
    has in a network: MobileNetV3's 576 x 1024 classifier layer, 105 -> ~80 us); packed, all
    of B is one run, built once when the weights are bound. Other trees are returned as they are."""
    from ..errors import ScheduleError
    from ..frontend.mutate import copy_input, set_order

    g = tree.graph
    reds = [n for n in g.nodes if n.op == "reduce" and n.id in tree._sched]
    if len(reds) != 1 or len(reds[0].vars) != 1 or any(n.op == "copy" for n in g.nodes):
        return tree
    red = reds[0]
    (vec,), order = red.vars, tree._sched[red.id].order
    mult = next((g.node(i) for i in red.inputs if g.node(i).op == "binary" and g.node(i).fn == "mul"), None)
    if mult is None or not order or order[0][0] != vec or order[-1][0] != vec:
        return tree
    k = set(g.domain(red)) - {vec}
    found = [i for i, x in enumerate(mult.inputs)
             if g.node(x).op == "read" and g.node(x).constant and set(g.node(x).vars) == k | {vec}]
    if len(k) != 1 or not found:
        return tree
    (kvar,) = k
    try:
        packed = copy_input(tree, tree.ref_of(mult.id), found[0])
        copy = max(n.id for n in packed.graph.nodes)
        # under the panel loop: all of k, then the panel's columns (the mult's innermost entry)
        return set_order(packed, copy, (order[0], (kvar, g.size(kvar), 0), order[-1]))
    except ScheduleError:
        return tree


def _innermost_alone(sched, nid):
    """`nid`'s schedule with its innermost loop not shared with the node before it."""
    ns = sched[nid]
    if not ns.order:
        return ns
    return replace(ns, disabled=ns.disabled | {len(ns.order) - 1})


def _own_loops_for_reductions(tree):
    """The program's order with each reduction, and what follows it, in innermost loops of
    their own."""
    g = tree.graph
    seq = list(tree.sequence)
    sched = dict(tree._sched)
    for k, nid in enumerate(seq):
        if g.reduced(g.node(nid)):
            for j in (k, k + 1):
                if j < len(seq):
                    sched[seq[j]] = _innermost_alone(sched, seq[j])
    return tree._with(sched=sched)


def share_common_values(tree):
    """`tree` with every element-wise value that more than one node reads ending its innermost
    loop, so that the lowering stores it once instead of inlining it into every reader."""
    g = tree.graph
    readers: dict = {}
    for n in g.nodes:
        for i in n.inputs:
            readers[i] = readers.get(i, 0) + 1
    seq = list(tree.sequence)
    sched = dict(tree._sched)
    changed = False
    for k, nid in enumerate(seq[:-1]):
        n = g.node(nid)
        if n.op in ("unary", "binary") and readers.get(nid, 0) > 1:
            nxt = seq[k + 1]
            if sched[nxt].order[:-1] == sched[nid].order[:-1]:
                sched[nxt] = _innermost_alone(sched, nxt)
                changed = True
    return tree._with(sched=sched) if changed else tree


def tile_transpose(tree):
    """A layer that only copies its input in another axis order, with the source's innermost
    axis moved: the output's vector loop (vectors of `vec`, its innermost variable) goes in
    tiles of one vector, with the loop over the source's innermost variable `d` inside the
    tile loop. Each tile then reads one vector's worth of source rows (as many lines, each
    used for 16 consecutive `d`) and writes whole lines. Other trees are returned as they are."""
    from ..errors import ScheduleError
    from ..frontend.mutate import set_order

    g = tree.graph
    reads = [n for n in g.nodes if n.op == "read"]
    copies = [n for n in g.nodes if n.op == "copy"]
    if len(reads) != 1 or len(copies) != 1 or any(n.op not in ("read", "view", "copy", "write") for n in g.nodes):
        return tree
    views = [n for n in g.nodes if n.op == "view"]
    if len(views) > 1:
        return tree
    if views:       # the variable indexing the source's innermost axis
        inner = [name for name, k in views[0].view[-1][0] if k]
        d = inner[0] if len(inner) == 1 else None
    else:
        d = reads[0].vars[-1] if reads[0].vars else None
    vec = copies[0].vars[-1] if copies[0].vars else None
    order = tree._sched[copies[0].id].order
    if d is None or d == vec or len(order) < 2 or order[-1][0] != vec or order[-2][0] != vec or \
            order[-2][2] or order[-1][2]:
        return tree
    outer = [e for e in order[:-2] if e[0] != d]
    tiled = (*outer, order[-2], (d, g.size(d), 0), order[-1])
    try:
        for n in g.nodes:
            if n.id in tree._sched and tree._sched[n.id].order == order:
                tree = set_order(tree, n.id, tiled)
    except ScheduleError:
        return tree
    return tree
