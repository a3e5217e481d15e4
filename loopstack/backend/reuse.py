"""Top-level nodes that compile to the same code but for the argument slots they load.

A network's layers are the same loop nest over other buffers and dimensions: an MLP's three
`relu(linear(...))` nests differ only in the names of their dimensions, loops and buffers.
`segment_shape` describes a node with every name replaced by its order of first appearance,
together with what the code generator reads about each name (a dimension's size; a buffer's
dtype, shape and strides). Two nodes of one tree with equal shapes get the same instructions
from the nest walk: names enter the code only as pointer registers assigned in stream order,
as the argument slots the prologue loads those pointers from, and as label names. So the
second is made from the first's code with its own prologue (backend.native.emit_native).
"""
from __future__ import annotations

from ..looptree.ir import Acc, Access, Binary, Compute, Const, Dot, Load, Loop, LoopTree, Unary, loop_var


class _Names:
    """Names in order of first appearance: one numbering for index names (dimensions and
    `@var` loop offsets), one for buffers."""

    def __init__(self, tree: LoopTree):
        self.tree = tree
        self.index: dict[str, int] = {}
        self.buffers: dict[str, int] = {}

    def name(self, n: str) -> int:
        i = self.index.get(n)
        if i is None:
            i = self.index[n] = len(self.index)
        return i

    def buffer(self, n: str) -> int:
        i = self.buffers.get(n)
        if i is None:
            i = self.buffers[n] = len(self.buffers)
        return i

    def facts(self) -> tuple:
        """What the code generator reads about the names: dimension sizes and buffer layouts."""
        tree = self.tree
        dims = tuple(tree.dim_size(n) if not n.startswith("@") else None for n in self.index)
        bufs = tuple((b.dtype, b.shape, b.strides) for b in map(tree.buffer, self.buffers))
        return dims, bufs


class SegmentShape:
    """A top-level node's shape (see the module doc) and the names its numbers stand for."""

    __slots__ = ("key", "loop_vars")

    def __init__(self, key: tuple, loop_vars: tuple[str, ...]):
        self.key = key
        self.loop_vars = loop_vars

    def label_renaming(self, other: "SegmentShape"):
        """A function from the label names of `other`'s code to those of this node's code: a
        label named after a loop (`<var>_<what>`) takes the name of the corresponding loop here."""
        mapping = dict(zip(other.loop_vars, self.loop_vars))

        def rename(name: str) -> str:
            base, sep, what = name.rpartition("_")
            return mapping[base] + sep + what if base in mapping else name

        return rename


def segment_shapes(tree: LoopTree, nodes) -> list[SegmentShape | None]:
    """segment_shape of each top-level node that may share its code: None for a node no other
    one matches on a cheap outline (the loop sizes down its first children), whose full shape
    would find no match (the interior and border nests of a padded convolution differ there)."""
    outlines = [_outline(tree, n) for n in nodes]
    count: dict[tuple, int] = {}
    for o in outlines:
        count[o] = count.get(o, 0) + 1
    return [segment_shape(tree, n) if count[o] > 1 else None for n, o in zip(nodes, outlines)]


def _outline(tree: LoopTree, node) -> tuple:
    """What two nodes of one shape have in common, cheaply: (step, dimension size, children) of
    each loop down the first children."""
    out = []
    while isinstance(node, Loop):
        out.append((node.step, tree.dim_size(node.dim), len(node.body)))
        node = node.body[0] if node.body else None
    return tuple(out)


def segment_shape(tree: LoopTree, node) -> SegmentShape | None:
    """The shape of top-level node `node`, or None for a node holding IR this module does not
    describe (then its code is never shared)."""
    names = _Names(tree)
    try:
        body = _node(node, names)
    except _Unknown:
        return None
    loop_vars = tuple(n[1:] for n in names.index if n.startswith("@"))
    return SegmentShape((body, names.facts()), loop_vars)


class _Unknown(Exception):
    pass


def _node(node, names: _Names) -> tuple:
    if isinstance(node, Loop):
        return ("loop", names.name(loop_var(node.var)), names.name(node.dim), node.step,
                tuple(sorted(node.annotations)), tuple(_node(n, names) for n in node.body))
    if isinstance(node, Compute):
        init = node.init if node.init is None or isinstance(node.init, str) else _expr(node.init, names)
        requant = None
        if node.requant is not None:
            requant = (_expr(node.requant.scale, names), node.requant.zero_point)
        return ("compute", _access(node.out, names), _expr(node.expr, names), node.reduce, init,
                None if node.post is None else _expr(node.post, names), requant, node.tensorize)
    raise _Unknown(type(node).__name__)


def _access(a: Access, names: _Names) -> tuple:
    return (names.buffer(a.buffer), a.zero_pad,
            tuple((tuple((names.name(n), c) for n, c in ix.terms), ix.const) for ix in a.index))


def _expr(e, names: _Names) -> tuple:
    t = type(e)
    if t is Load:
        return ("load", _access(e.access, names))
    if t is Const:
        return ("const", type(e.value).__name__, repr(e.value))
    if t is Acc:
        return ("acc",)
    if t is Unary:
        return ("unary", e.op, _expr(e.x, names))
    if t is Binary:
        return ("binary", e.op, _expr(e.a, names), _expr(e.b, names))
    if t is Dot:
        return ("dot", e.op, _expr(e.a, names), _expr(e.b, names), e.k, e.instr)
    raise _Unknown(t.__name__)
