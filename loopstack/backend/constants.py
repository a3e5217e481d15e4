"""hoist_constant_packs: a staged copy of a constant input is built once, not in every call.

A packed panel of a network's weights (`copy_input` of a constant input) is rebuilt in every
iteration of the loops that scope its buffer:

    for L0 (c) in 32:
      for L1 (k) in 10 r 32:
        for r, s, c, k:  %t8[r, s, c - @L0, k - @L1] = %W[r, s, c, k]
        for oh, ow, ...:  ... %t8[r, s, c - @L0, k - @L1] ...

Its values depend on the constant alone. So the buffer gets one leading dimension per loop it is
tiled by, indexed by that loop's offset (each tile its own slot, the tiles laid out in the order
the loops visit them), the copy moves into a nest of its own ahead of the program, and the
readers index their tile's slot:

    for L0' (c) in 32: for L1' (k) in 10 r 32: for r, s, c, k:
        %t8[@L0', @L1', r, s, c - @L0', k - @L1'] = %W[r, s, c, k]          <- once
    for L0 (c) in 32: for L1 (k) in 10 r 32: for oh, ow, ...:
        ... %t8[@L0, @L1, r, s, c - @L0, k - @L1] ...

The packed weights then lie in the order the compute streams them (one contiguous tile after
another) instead of being gathered from rows far apart in every call. The kernel runs the
leading `once` nests only when it is given arrays it has not seen.

A sum of a constant over whole dimensions (`%W_sum[k] += %W[r, s, c, k]`, the int8
compensation's weight sums) is hoisted likewise when its nest is a top-level one.

A copy is hoisted when its buffer is written by it alone and every reader lies inside all the
loops the buffer is tiled by. Loops around the copy whose dimension it does not use are left out
of the hoisted nest: the copy no longer repeats in them.
"""
from __future__ import annotations

from dataclasses import replace

from ..looptree.ir import Access, Affine, Buffer, Compute, Load, Loop, LoopTree, loop_var, map_accesses, statements

__all__ = ["hoist_constant_packs"]


def hoist_constant_packs(tree: LoopTree) -> tuple[LoopTree, int]:
    """(the tree with copies of constant inputs hoisted, the number of leading top-level nodes
    that need to run only once per set of arrays)."""
    constants = {b.name for b in tree.inputs if b.constant}
    if not constants:
        return tree, 0
    hoisted: list = []
    tried: set[str] = set()     # by name: a hoist rebuilds every statement object
    # writers per buffer: a hoist moves its one statement out of the tree and widens accesses,
    # so the count stays right for every statement still in it
    writers: dict[str, int] = {}
    for _, s in tree.computes():
        writers[s.out.buffer] = writers.get(s.out.buffer, 0) + 1
    temps = {b.name for b in tree.temps}
    while constants:
        walked = list(tree.walk())
        found = _next_candidate(walked, constants, tried, writers, temps)
        if found is None:
            break
        stack, stmt = found
        tried.add(stmt.name)
        result = _hoist(tree, stack, stmt, walked)
        if result is not None:
            tree, nest = result
            hoisted.append(nest)
            if stmt.is_copy:        # built once from a constant: a copy of it (a pack of the
                constants.add(stmt.out.buffer)   # zero-padded weights) is built once too, after it
    if not hoisted:
        return tree, 0
    return replace(tree, body=tuple(hoisted) + tree.body), len(hoisted)


def _next_candidate(walked, constants: set[str], tried: set[str], writers: dict, temps: set):
    """The first (loops, statement) of `walked` (a tree's walk) to hoist: a copy or sum of a
    constant into a temp that nothing else writes."""
    for stack, node in walked:
        if isinstance(node, Compute) and node.name not in tried and (node.is_copy or _sum_of_load(node)) \
                and node.expr.access.buffer in constants and node.out.buffer in temps \
                and writers[node.out.buffer] == 1:
            return stack, node
    return None


def _sum_of_load(stmt: Compute) -> bool:
    """`%t[...] += %W[...]` from the identity: the weights' sum of the int8 compensation."""
    return (stmt.reduce == "add" and stmt.init == "identity" and stmt.post is None and stmt.requant is None
            and isinstance(stmt.expr, Load))


def _hoist(tree: LoopTree, stack: tuple[Loop, ...], stmt: Compute, walked):
    """(new tree, the hoisted nest), or None when `stmt` cannot be hoisted (`walked`: the
    tree's walk)."""
    # the copy's own nest: the outermost node on its path that holds nothing else
    path = stack + (stmt,)
    own = next(i for i, n in enumerate(path) if list(statements(n)) == [stmt])
    outer, nest = stack[:own], path[own]
    if stmt.reduce is not None and outer:
        return None         # a sum inside loops that tile it would be split among the tiles
    buf = tree.buffer(stmt.out.buffer)
    out_names = stmt.out.names()
    used = {n for a in (stmt.out, stmt.expr.access) for n in a.names()}
    tiled = [lp for lp in outer if loop_var(lp.var) in out_names]
    kept = [lp for lp in outer if lp.dim in used or loop_var(lp.var) in used]
    readers = [(st, s) for st, s in walked if isinstance(s, Compute) and s is not stmt
               and any(a.buffer == buf.name for a in s.reads())]
    if not readers or any(not all(any(x is lp for x in st) for lp in tiled) for st, _ in readers):
        return None
    wide = _widened(tree, buf, outer, tiled)
    if wide is None:
        return None
    # the hoisted nest: clones of the loops it needs, under fresh names
    names = {lp.var: f"{lp.var}.once" for lp in kept}
    body = _rename(nest, {loop_var(old): loop_var(new) for old, new in names.items()})
    body = _widen_accesses(body, buf.name, [loop_var(names[lp.var]) for lp in tiled])
    for lp in reversed(kept):
        body = Loop(names[lp.var], lp.dim, lp.step, (body,))
    rest = _without(tree.body, nest)
    rest = tuple(_widen_accesses(n, buf.name, [loop_var(lp.var) for lp in tiled]) for n in rest)
    buffers = tuple(wide if b.name == buf.name else b for b in tree.buffers)
    return replace(tree, buffers=buffers, body=rest), body


def _widened(tree: LoopTree, buf: Buffer, outer, tiled) -> Buffer | None:
    """`buf` with a leading dimension per tiled loop: tile after tile in loop order. The
    dimension is indexed by the loop's offset, so its stride is the slot size over the step."""
    counts = []
    for lp in tiled:
        # the range a loop sees: the step of the nearest loop outside it over the same dim
        rng = tree.dim_size(lp.dim)
        for x in outer:
            if x is lp:
                break
            if x.dim == lp.dim:
                rng = x.step
        counts.append(-(-rng // lp.step))
    shape, strides = [], []
    slot = buf.size
    for lp, count in reversed(list(zip(tiled, counts))):
        if slot % lp.step:
            return None
        shape.append((count - 1) * lp.step + 1)
        strides.append(slot // lp.step)
        slot *= count
    return Buffer(buf.name, buf.dtype, tuple(reversed(shape)) + buf.shape, buf.kind,
                  tuple(reversed(strides)) + buf.strides)


def _map_tree(node, f, touches=None):
    """`node` with `f` applied to the accesses of each statement (of each that `touches`, if
    given): a subtree with nothing changed is the same object."""
    if isinstance(node, Compute):
        return map_accesses(node, f) if touches is None or touches(node) else node
    body = tuple(_map_tree(n, f, touches) for n in node.body)
    if all(new is old for new, old in zip(body, node.body)):
        return node                       # nothing below changed: share the subtree
    return node.with_body(body)


def _rename(node, names: dict[str, str]):
    def f(a: Access) -> Access:
        return Access(a.buffer, tuple(Affine(tuple((names.get(n, n), c) for n, c in ix.terms), ix.const)
                                      for ix in a.index), a.zero_pad)
    return _map_tree(node, f)


def _widen_accesses(node, name: str, offsets: list[str]):
    if not any(a.buffer == name for s in statements(node) for a in (s.out, *s.reads())):
        return node                       # the subtree does not touch the buffer
    lead = tuple(Affine.of(o) for o in offsets)

    def f(a: Access) -> Access:
        return Access(a.buffer, lead + a.index, a.zero_pad) if a.buffer == name else a
    return _map_tree(node, f, lambda s: any(a.buffer == name for a in (s.out, *s.reads())))


def _without(nodes: tuple, gone) -> tuple:
    out = []
    for n in nodes:
        if n is gone:
            continue
        if isinstance(n, Loop):
            body = _without(n.body, gone)
            if len(body) != len(n.body) or any(new is not old for new, old in zip(body, n.body)):
                n = n.with_body(body)
        out.append(n)
    return tuple(out)
