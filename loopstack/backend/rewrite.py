"""Tree-to-tree passes the code generators run before emitting code.

Each pass takes a verified loop tree and returns an equivalent one that is easier to
emit; none changes the user's loop order within a nest.

split_padded_nests, stage_padded_reads
    Padded reads without a bounds test per element: nests split into an interior that
    reads in place and narrow borders, whose reads are staged into zero-bordered temps
    (see padding.py).

split_init_post
    for k: for m: %C[m] += ... init identity post relu
                           ==>       for m: %C[m] = 0.0
                                     for k: for m: %C[m] += ...
                                     for m: %C[m] = relu(%C[m])
    Only where no loop that keeps the output block in registers encloses every
    reduction loop: there, init and post are fused into the block's load and store.
    A requantized sum cannot continue from its 8-bit output: it is summed into an int32
    temp of the output's shape, and requantized into the output where it is complete:
                                     for m: %Y_sum[m] = %bias[m]
                                     for k: for m: %Y_sum[m] += ...
                                     for m: %Y[m] = requant(relu(%Y_sum[m]))
"""
from __future__ import annotations

from dataclasses import replace

from ..looptree.ir import Access, Buffer, Compute, Const, Load, Loop, LoopTree, reduce_identity, substitute_acc
from .analysis import block_chain, footprint_of, indexes_output, perfect_statement, reads_output, reduction_loops, vector_plan
from .padding import split_padded_nests, stage_padded_reads

__all__ = ["split_padded_nests", "stage_padded_reads", "split_init_post", "init_post_fusable"]

# ---------------------------------------------------------------------------
# init / post


def init_post_fusable(tree: LoopTree, stack: tuple[Loop, ...], stmt: Compute,
                      lanes: int, max_acc, plan_of=vector_plan) -> bool:
    """True when a register block will enclose every reduction loop of `stmt`."""
    red = reduction_loops(stmt, stack)
    if not red:
        return True
    if reads_output(stmt):
        return False
    if callable(max_acc):
        max_acc = max_acc(stmt)
    ranges: dict[str, int] = {}
    chain, first = None, 0      # block_chain of the outermost candidate; the others' are its suffixes
    for i, lp in enumerate(stack):
        # a register block holds exactly one statement: the loop must enclose nothing else
        if perfect_statement(lp) is stmt and any(x is red[0] for x in stack[i:]):
            if chain is None:
                chain, first = block_chain(tree, lp, stmt, plan_of), i
            if footprint_of(chain[i - first:], ranges, tree.dim_size, lanes, max_acc) <= max_acc:
                return True
        rng = ranges.get(lp.dim, tree.dim_size(lp.dim))
        ranges[lp.dim] = min(lp.step, rng)
    return False


def _init_expr(tree: LoopTree, stmt: Compute):
    """The init as a statement of its own: it stores the identity, so as a value of the output's type."""
    if stmt.init == "identity":
        return Const(reduce_identity(stmt.reduce, tree.buffer(stmt.out.buffer).dtype))
    return stmt.init


def split_init_post(tree: LoopTree, lanes: int, max_acc, plan_of=vector_plan) -> LoopTree:
    """Move init/post out of statements whose reduction cannot be kept in registers.

    The init nest goes right before the statement's outermost reduction loop, the post
    nest right after it; both iterate the output loops found between that loop and the
    statement. Other statements in the loop are untouched."""
    counter = [0]
    plans: dict[int, object] = {}       # id(loop) -> its vector plan: the pass asks per enclosing loop
    sums: list[Buffer] = []             # the int32 temps of requantized sums
    taken = {b.name for b in tree.buffers}

    def int32_sum(stmt: Compute) -> Access:
        """The int32 temp a requantized statement sums into, indexed as its output."""
        out = tree.buffer(stmt.out.buffer)
        name, i = f"{out.name}_sum", 0
        while name in taken:
            i += 1
            name = f"{out.name}_sum{i}"
        taken.add(name)
        sums.append(Buffer(name, "int32", out.shape, "temp"))
        return replace(stmt.out, buffer=name, zero_pad=False)

    def plan_once(t: LoopTree, lp: Loop):
        key = id(lp)
        if key not in plans:
            plans[key] = plan_of(t, lp)
        return plans[key]

    # (id(enclosing loops), id(statement)) -> needs_split, asked once per place (`outermost`,
    # below, holds the stacks)
    splits: dict[tuple, bool] = {}

    def needs_split(stack, stmt) -> bool:
        key = (id(stack), id(stmt))
        if key not in splits:
            splits[key] = (stmt.reduce is not None and (stmt.init is not None or stmt.post is not None)
                           and not init_post_fusable(tree, stack, stmt, lanes, max_acc, plan_once))
        return splits[key]

    # id(loop) -> (enclosing loops, statement) of each statement whose outermost reduction loop
    # it is, in program order: found in one walk, not per loop of the nest
    outermost: dict[int, list] = {}

    def index(nodes, stack):
        for node in nodes:
            if isinstance(node, Compute):
                lp = _outermost_reduction(node, stack)
                if lp is not None:
                    outermost.setdefault(id(lp), []).append((stack, node))
            else:
                index(node.body, stack + (node,))

    def rebuild(nodes, stack):
        out = []
        for node in nodes:
            if isinstance(node, Compute):
                out.append(node)
                continue
            here = stack + (node,)
            todo = [(st, s) for st, s in outermost.get(id(node), ()) if needs_split(st, s)]
            body = rebuild(node.body, here)
            # an unchanged nest stays the same object (with the facts kept on it: ir._derived)
            same = len(body) == len(node.body) and all(a is b for a, b in zip(body, node.body))
            new = node if same else node.with_body(tuple(body))
            if not todo:
                out.append(new)
                continue
            pre, post = [], []
            for st, stmt in todo:
                inner_out = [lp for lp in st[len(stack):] if indexes_output(stmt, lp)]
                acc = int32_sum(stmt) if stmt.requant is not None else stmt.out
                if stmt.init is not None:
                    pre.append(_nest(inner_out, Compute(f"{stmt.name}_init", acc, _init_expr(tree, stmt)), counter))
                if stmt.requant is not None:
                    value = Load(acc) if stmt.post is None else substitute_acc(stmt.post, Load(acc))
                    post.append(_nest(inner_out, Compute(f"{stmt.name}_requant", stmt.out, value,
                                                         requant=stmt.requant), counter))
                elif stmt.post is not None:
                    post.append(_nest(inner_out, Compute(
                        f"{stmt.name}_post", stmt.out, substitute_acc(stmt.post, Load(stmt.out))), counter))
                new = _replace_statement(new, stmt, replace(stmt, out=acc, init=None, post=None, requant=None))
            out.extend(pre)
            out.append(new)
            out.extend(post)
        return out

    index(tree.body, ())
    # most trees fuse every init and post into a register block: then nothing is rebuilt
    if not any(needs_split(st, s) for found in outermost.values() for st, s in found):
        return tree
    body = rebuild(tree.body, ())
    if len(body) == len(tree.body) and all(a is b for a, b in zip(body, tree.body)):
        return tree
    return LoopTree(tree.buffers + tuple(sums), tree.dims, tuple(body))


def _outermost_reduction(stmt: Compute, stack) -> Loop | None:
    if stmt.reduce is None or (stmt.init is None and stmt.post is None):
        return None
    red = reduction_loops(stmt, stack)
    return red[0] if red else None


def _replace_statement(node, old: Compute, new: Compute):
    if isinstance(node, Compute):
        return new if node is old else node
    return node.with_body(tuple(_replace_statement(n, old, new) for n in node.body))


def _nest(loops, leaf: Compute, counter):
    node = leaf
    for lp in reversed(loops):
        counter[0] += 1
        node = Loop(f"{lp.var}_{leaf.name}{counter[0]}", lp.dim, lp.step, (node,))
    return node
