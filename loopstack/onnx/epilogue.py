"""A layer's last element-wise nest folded into the reduction whose result it reads.

ResNet's downsampling block is one layer: relu(conv3x3(y) + conv1x1(x)). Lowered, each
reduction stores into a temp of its own and a third nest combines them:

    %t8[o, w, c]  += ...  post add(acc, %b[c])          the 3x3 convolution
    %t19[o, w, c] += ...  post add(acc, %b2[c])         the 1x1 downsample
    %out[o, w, c]  = relu(add(%t8[o, w, c], %t19[o, w, c]))

The last nest is one more pass over three activations (write t8, read t8 and t19, write out).
Folded, the 3x3 convolution runs after the downsample and writes `out` itself:

    %t19[o, w, c] += ...  post add(acc, %b2[c])
    %out[o, w, c] += ...  post relu(add(add(acc, %b[c]), %t19[o, w, c]))

as a residual block's second convolution does with its shortcut. The fold applies when the
temp is written by one reduction, at exactly the point the element-wise nest reads it, and read
by nothing else (its nest may write temps of its own, such as packed weights); the nests in between neither read what the reduction writes nor write what it
reads; and the element-wise nest runs over the reduction's output dimensions and no others.
"""
from __future__ import annotations

from dataclasses import replace

from ..looptree.ir import Acc, Binary, Compute, Load, Loop, LoopTree, Unary, expr_loads, statements


def fold_epilogues(tree: LoopTree) -> LoopTree:
    """`tree` with each foldable element-wise nest folded into its reduction (see above)."""
    while True:
        folded = _fold_one(tree)
        if folded is None:
            return tree
        tree = folded


def _only_statement(node):
    while isinstance(node, Loop):
        if len(node.body) != 1:
            return None
        node = node.body[0]
    return node


def _loop_dims(node) -> set[str]:
    dims = set()
    while isinstance(node, Loop):
        dims.add(node.dim)
        node = node.body[0]
    return dims


def _reads(node) -> set[str]:
    return {a.buffer for s in statements(node) for a in s.reads()}


def _writes(node) -> set[str]:
    return {s.out.buffer for s in statements(node)}


def _fold_one(tree: LoopTree):
    body = list(tree.body)
    for ci, c_node in enumerate(body):
        stmt = _only_statement(c_node)
        if not isinstance(stmt, Compute) or stmt.reduce is not None or stmt.init is not None \
                or stmt.post is not None or stmt.requant is not None or not isinstance(c_node, Loop):
            continue
        for acc in expr_loads(stmt.expr):
            temp = tree.buffer(acc.buffer)
            if temp.kind != "temp" or acc.zero_pad:
                continue
            if sum(1 for a in expr_loads(stmt.expr) if a.buffer == temp.name) != 1:
                continue
            writers = [i for i, n in enumerate(body) if temp.name in _writes(n)]
            readers = [i for i, n in enumerate(body) if temp.name in _reads(n)]
            if len(writers) != 1 or readers != [ci] or writers[0] >= ci:
                continue
            ai = writers[0]
            red = [s for s in statements(body[ai]) if s.out.buffer == temp.name]
            # what else the reduction's nest writes (its packed weights) is its own
            local = _writes(body[ai]) - {temp.name}
            if len(red) != 1 or any(tree.buffer(b).kind != "temp" for b in local) or \
                    any(local & (_reads(n) | _writes(n)) for j, n in enumerate(body) if j != ai):
                continue
            a_stmt = red[0]
            if a_stmt.reduce is None or a_stmt.requant is not None or a_stmt.out.index != acc.index \
                    or tree.buffer(stmt.out.buffer).dtype != temp.dtype:
                continue
            out_dims = set(a_stmt.out.names())
            if _loop_dims(c_node) != out_dims or not all(a.names() <= out_dims for a in expr_loads(stmt.expr)) \
                    or not stmt.out.names() <= out_dims:
                continue
            between = body[ai + 1:ci]
            if any(temp.name in _reads(n) or _writes(n) & _reads(body[ai]) for n in between):
                continue
            value = a_stmt.post if a_stmt.post is not None else Acc()
            post = _replace_load(stmt.expr, acc, value)
            fused = replace(a_stmt, out=stmt.out, post=post)
            moved = _with_statement(body[ai], a_stmt, fused)
            new_body = body[:ai] + between + [moved] + body[ci + 1:]
            buffers = tuple(b for b in tree.buffers if b.name != temp.name)
            return LoopTree(buffers, tree.dims, tuple(new_body))
    return None


def _replace_load(e, acc, value):
    if isinstance(e, Load):
        return value if e.access == acc else e
    if isinstance(e, Unary):
        return Unary(e.op, _replace_load(e.x, acc, value))
    if isinstance(e, Binary):
        return replace(e, a=_replace_load(e.a, acc, value), b=_replace_load(e.b, acc, value))
    return e


def _with_statement(node, old: Compute, new: Compute):
    if node is old:
        return new
    if isinstance(node, Loop):
        return node.with_body(tuple(_with_statement(n, old, new) for n in node.body))
    return node
