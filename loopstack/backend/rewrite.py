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
    REDUCE_IDENTITY, Acc, Access, Affine, Binary, Buffer, Compute, Const, Load, Loop, LoopTree,
    Unary,
)
from .analysis import block_footprint, chain_below, indexes_output, reads_output, reduction_loops

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
        for s in _statements(node):
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


def _statements(node):
    if isinstance(node, Compute):
        yield node
    else:
        for n in node.body:
            yield from _statements(n)


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
        if chain_below(lp)[-1] is stack[-1] and len(chain_below(lp)) == len(stack) - i:
            if any(x is red[0] for x in stack[i:]) and block_footprint(tree, lp, stmt, ranges, lanes, max_acc) <= max_acc:
                return True
        rng = ranges.get(lp.dim, tree.dim_size(lp.dim))
        ranges[lp.dim] = min(lp.step, rng)
    return False


def _init_expr(stmt: Compute):
    if stmt.init == "identity":
        return Const(REDUCE_IDENTITY[stmt.reduce])
    return stmt.init


def _substitute_acc(e, value):
    if isinstance(e, Acc):
        return value
    if isinstance(e, Unary):
        return Unary(e.op, _substitute_acc(e.x, value))
    if isinstance(e, Binary):
        return Binary(e.op, _substitute_acc(e.a, value), _substitute_acc(e.b, value))
    return e


def split_init_post(tree: LoopTree, lanes: int, max_acc: int) -> LoopTree:
    """Move init/post out of statements whose reduction cannot be kept in registers."""
    counter = [0]

    def rebuild(nodes, stack):
        out = []
        for node in nodes:
            if isinstance(node, Loop):
                stmt = _only_statement(node)
                if stmt is not None and stmt.reduce is not None and (stmt.init is not None or stmt.post is not None):
                    full_stack = stack + tuple(chain_below(node))
                    if not init_post_fusable(tree, full_stack, stmt, lanes, max_acc) and \
                            reduction_loops(stmt, full_stack)[0] is node:
                        out.extend(_split_here(stmt, full_stack[len(stack):], counter))
                        continue
                node = replace(node, body=tuple(rebuild(node.body, stack + (node,))))
            out.append(node)
        return out

    result = LoopTree(tree.buffers, tree.dims, tuple(rebuild(tree.body, ())))
    for stack, stmt in result.computes():
        if stmt.reduce is not None and (stmt.init is not None or stmt.post is not None) and \
                not init_post_fusable(result, stack, stmt, lanes, max_acc):
            raise UnsupportedError(
                f"statement '{stmt.name}': its init/post cannot be fused into a register block and "
                "its outermost reduction loop is shared with other statements; give the reduction "
                "its own nest")
    return result


def _only_statement(loop: Loop) -> Compute | None:
    node = loop
    while isinstance(node, Loop):
        if len(node.body) != 1:
            return None
        node = node.body[0]
    return node


def _split_here(stmt: Compute, chain: tuple[Loop, ...], counter) -> list:
    """init nest, bare reduction, post nest — for a chain that starts at the outermost reduction loop."""
    inner_out = [lp for lp in chain if indexes_output(stmt, lp)]

    def nest(leaf: Compute):
        node = leaf
        for lp in reversed(inner_out):
            counter[0] += 1
            node = Loop(f"{lp.var}_{leaf.name}{counter[0]}", lp.dim, lp.step, (node,))
        return node

    pieces = []
    if stmt.init is not None:
        pieces.append(nest(Compute(f"{stmt.name}_init", stmt.out, _init_expr(stmt))))
    node = replace(stmt, init=None, post=None)
    for lp in reversed(chain):
        node = replace(lp, body=(node,))
    pieces.append(node)
    if stmt.post is not None:
        pieces.append(nest(Compute(f"{stmt.name}_post", stmt.out, _substitute_acc(stmt.post, Load(stmt.out)))))
    return pieces
