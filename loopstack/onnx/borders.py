"""Zero-bordered activations: a layer writes straight into the interior of the padded buffer
its readers read in place.

A convolution's padded read `pad %X[h - 1, ...]` would otherwise stage X into a zero-bordered
copy at every call (backend/padding.py): inside a network that copy runs at memory speed, the
whole activation once more per layer. When the network's buffer plan gives X a border of zeros
of its own (allocated once, zeroed once, never written), each kernel addresses X through it:

    producer   %out[h, w, c] = ...            ->  %out[h + 1, w + 1, c] = ...
    reader     pad %in0[h - 1, w - 1, c]      ->  %in0[h, w, c]
    others     %in3[h, w, c]                  ->  %in3[h + 1, w + 1, c]

each kernel taking the whole bordered buffer as its argument. The schedule is the one the layer had; only the addresses change. A reader whose padded reads
reach further than the border (none: the border is the widest reach of X's readers) would
still stage its copy.
"""
from __future__ import annotations

from ..looptree.ir import Access, Affine, Buffer, Loop, LoopTree, map_accesses


def padded_reach(tree: LoopTree, name: str) -> tuple[tuple[int, int], ...] | None:
    """Per axis of buffer `name`, how far the padded reads of a lowered tree go beyond it
    (before, after); None when they index it by a loop offset (the reach is not static)."""
    buf = tree.buffer(name)
    sizes = dict(tree.dims)
    reach = [[0, 0] for _ in buf.shape]
    for _, stmt in tree.computes():
        for acc in stmt.reads():
            if acc.buffer != name or not acc.zero_pad:
                continue
            for axis, (ix, extent) in enumerate(zip(acc.index, buf.shape)):
                if any(n.startswith("@") for n, _ in ix.terms):
                    return None
                lo, hi = _range(ix, sizes)
                reach[axis][0] = max(reach[axis][0], -lo)
                reach[axis][1] = max(reach[axis][1], hi - (extent - 1))
    return tuple((a, b) for a, b in reach)


def _range(ix: Affine, sizes: dict[str, int]) -> tuple[int, int]:
    lo = hi = ix.const
    for n, c in ix.terms:
        span = c * (sizes[n] - 1)
        lo, hi = lo + min(0, span), hi + max(0, span)
    return lo, hi


def through_border(tree: LoopTree, name: str, before, bordered_shape) -> LoopTree:
    """`tree` addressing buffer `name` (an input or the output) as the interior of a bordered
    buffer of `bordered_shape` (`before[axis]` zeros before its first element along each
    axis): every index shifted, padded reads that stay inside the bordered buffer made plain
    (its border holds the zeros they read)."""
    sizes = dict(tree.dims)

    def shift(acc: Access) -> Access:
        if acc.buffer != name:
            return acc
        index = tuple(Affine(ix.terms, ix.const + b) for ix, b in zip(acc.index, before))
        pad = acc.zero_pad and not all(0 <= lo and hi < s for (lo, hi), s in
                                       zip((_range(ix, sizes) for ix in index), bordered_shape))
        return Access(name, index, pad)

    def rec(node):
        if isinstance(node, Loop):
            return node.with_body(tuple(rec(n) for n in node.body))
        return map_accesses(node, shift)

    bufs = tuple(Buffer(b.name, b.dtype, tuple(bordered_shape), b.kind, (), b.constant) if b.name == name else b
                 for b in tree.buffers)
    return LoopTree(bufs, tree.dims, tuple(rec(n) for n in tree.body))
