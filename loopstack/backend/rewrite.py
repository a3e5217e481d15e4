"""Tree-to-tree passes the code generators run before emitting code.

Each pass takes a verified loop tree and returns an equivalent one that is easier to
emit; none changes the user's loop order.

stage_padded_reads
    %out[h] = pad %in[h - 1]         %in_pad: zero border, allocated once
                           ==>       for j in N: %in_pad[j + 1] = %in[j]
                                     %out[h] = %in_pad[h]
    Padding costs one copy of the input instead of a bounds test per element; the
    border of the staging buffer is never written, so it stays zero.

split_init_post
    for k: for m: %C[m] += ... init identity post relu
                           ==>       for m: %C[m] = 0.0
                                     for k: for m: %C[m] += ...
                                     for m: %C[m] = relu(%C[m])
    Only where no loop that keeps the output block in registers encloses every
    reduction loop: there, init and post are fused into the block's load and store.
"""
from __future__ import annotations

from dataclasses import replace

from ..errors import UnsupportedError
from ..looptree.ir import (
    REDUCE_IDENTITY, Access, Affine, Binary, Buffer, Compute, Const, Load, Loop, LoopTree,
    Unary, statements, substitute_acc,
)
from .analysis import block_footprint, indexes_output, perfect_statement, reads_output, reduction_loops

# ---------------------------------------------------------------------------
# padding


def _index_range(idx: Affine, sizes: dict[str, int]) -> tuple[int, int]:
    lo = hi = idx.const
    for name, c in idx.terms:
        if name.startswith("@"):
            raise UnsupportedError("a padded read indexed by a loop offset is not supported")
        span = c * (sizes[name] - 1)
        lo += min(0, span)
        hi += max(0, span)
    return lo, hi


def stage_padded_reads(tree: LoopTree) -> LoopTree:
    sizes = dict(tree.dims)
    staged: dict[tuple, tuple[str, tuple[int, ...]]] = {}  # (buffer, lows, shape) -> temp name
    new_buffers = list(tree.buffers)
    new_dims = list(tree.dims)
    copies_before: dict[int, list] = {}

    def stage(access: Access, top: int) -> Access:
        buf = tree.buffer(access.buffer)
        ranges = [_index_range(i, sizes) for i in access.index]
        if all(lo >= 0 and hi < s for (lo, hi), s in zip(ranges, buf.shape)):
            return replace(access, zero_pad=False)
        lows = tuple(min(lo, 0) for lo, _ in ranges)
        shape = tuple(max(hi + 1, s) - low for (lo, hi), s, low in zip(ranges, buf.shape, lows))
        key = (buf.name, lows, shape)
        if key not in staged:
            name = f"{buf.name}_pad{len(staged)}"
            new_buffers.append(Buffer(name, buf.dtype, shape, "temp"))
            dims = []
            for i, s in enumerate(buf.shape):
                d = f"{name}_d{i}"
                new_dims.append((d, s))
                dims.append(d)
            copy = Compute(
                f"{name}_copy",
                Access(name, tuple(Affine.of(d, const=-low) for d, low in zip(dims, lows))),
                Load(Access(buf.name, tuple(Affine.of(d) for d in dims))),
            )
            node = copy
            for i, d in reversed(list(enumerate(dims))):
                node = Loop(f"{name}_l{i}", d, 1, (node,))
            staged[key] = (name, lows)
            copies_before.setdefault(top, []).append(node)
        name, lows = staged[key]
        return Access(name, tuple(Affine(i.terms, i.const - low) for i, low in zip(access.index, lows)))

    def fix_expr(e, top):
        if isinstance(e, Load):
            return Load(stage(e.access, top)) if e.access.zero_pad else e
        if isinstance(e, Unary):
            return Unary(e.op, fix_expr(e.x, top))
        if isinstance(e, Binary):
            return Binary(e.op, fix_expr(e.a, top), fix_expr(e.b, top))
        return e

    def fix(node, top):
        if isinstance(node, Loop):
            return replace(node, body=tuple(fix(n, top) for n in node.body))
        init = node.init if isinstance(node.init, (str, type(None))) else fix_expr(node.init, top)
        post = None if node.post is None else fix_expr(node.post, top)
        return replace(node, expr=fix_expr(node.expr, top), init=init, post=post)

    if not any(a.zero_pad for _, s in tree.computes() for a in s.reads()):
        return tree
    written_in: dict[str, set[int]] = {}
    for top, node in enumerate(tree.body):
        for s in statements(node):
            written_in.setdefault(s.out.buffer, set()).add(top)
    body = [fix(n, top) for top, n in enumerate(tree.body)]
    out = []
    for top, node in enumerate(body):
        for c in copies_before.get(top, []):
            src = c
            while isinstance(src, Loop):
                src = src.body[0]
            if top in written_in.get(src.expr.access.buffer, set()):
                raise UnsupportedError(
                    f"padded read of %{src.expr.access.buffer} inside the nest that writes it: "
                    "stage it in its own nest first")
            out.append(c)
        out.append(node)
    return LoopTree(tuple(new_buffers), tuple(new_dims), tuple(out))



# ---------------------------------------------------------------------------
# init / post


def init_post_fusable(tree: LoopTree, stack: tuple[Loop, ...], stmt: Compute,
                      lanes: int, max_acc) -> bool:
    """True when a register block will enclose every reduction loop of `stmt`."""
    red = reduction_loops(stmt, stack)
    if not red:
        return True
    if reads_output(stmt):
        return False
    if callable(max_acc):
        max_acc = max_acc(stmt)
    ranges: dict[str, int] = {}
    for i, lp in enumerate(stack):
        # a register block holds exactly one statement: the loop must enclose nothing else
        if perfect_statement(lp) is stmt and any(x is red[0] for x in stack[i:]) \
                and block_footprint(tree, lp, stmt, ranges, lanes, max_acc) <= max_acc:
            return True
        rng = ranges.get(lp.dim, tree.dim_size(lp.dim))
        ranges[lp.dim] = min(lp.step, rng)
    return False


def _init_expr(stmt: Compute):
    if stmt.init == "identity":
        return Const(REDUCE_IDENTITY[stmt.reduce])
    return stmt.init


def split_init_post(tree: LoopTree, lanes: int, max_acc) -> LoopTree:
    """Move init/post out of statements whose reduction cannot be kept in registers.

    The init nest goes right before the statement's outermost reduction loop, the post
    nest right after it; both iterate the output loops found between that loop and the
    statement. Other statements in the loop are untouched."""
    counter = [0]

    def needs_split(stack, stmt) -> bool:
        return (stmt.reduce is not None and (stmt.init is not None or stmt.post is not None)
                and not init_post_fusable(tree, stack, stmt, lanes, max_acc))

    def rebuild(nodes, stack):
        out = []
        for node in nodes:
            if isinstance(node, Compute):
                out.append(node)
                continue
            here = stack + (node,)
            todo = [(st, s) for st, s in _computes_under(node, here)
                    if _outermost_reduction(s, st) is node and needs_split(st, s)]
            new = replace(node, body=tuple(rebuild(node.body, here)))
            if not todo:
                out.append(new)
                continue
            pre, post = [], []
            for st, stmt in todo:
                inner_out = [lp for lp in st[len(stack):] if indexes_output(stmt, lp)]
                if stmt.init is not None:
                    pre.append(_nest(inner_out, Compute(f"{stmt.name}_init", stmt.out, _init_expr(stmt)), counter))
                if stmt.post is not None:
                    post.append(_nest(inner_out, Compute(
                        f"{stmt.name}_post", stmt.out, substitute_acc(stmt.post, Load(stmt.out))), counter))
                new = _replace_statement(new, stmt, replace(stmt, init=None, post=None))
            out.extend(pre)
            out.append(new)
            out.extend(post)
        return out

    return LoopTree(tree.buffers, tree.dims, tuple(rebuild(tree.body, ())))


def _outermost_reduction(stmt: Compute, stack) -> Loop | None:
    if stmt.reduce is None or (stmt.init is None and stmt.post is None):
        return None
    red = reduction_loops(stmt, stack)
    return red[0] if red else None


def _computes_under(node, stack):
    if isinstance(node, Compute):
        yield stack, node
        return
    for n in node.body:
        yield from _computes_under(n, stack + (n,) if isinstance(n, Loop) else stack)


def _replace_statement(node, old: Compute, new: Compute):
    if isinstance(node, Compute):
        return new if node is old else node
    return replace(node, body=tuple(_replace_statement(n, old, new) for n in node.body))


def _nest(loops, leaf: Compute, counter):
    node = leaf
    for lp in reversed(loops):
        counter[0] += 1
        node = Loop(f"{lp.var}_{leaf.name}{counter[0]}", lp.dim, lp.step, (node,))
    return node
