"""Zero padding without a bounds test per element: split nests at the borders, stage the borders.

A padded read `pad %X[i]` reads 0 wherever i leaves X. Two passes make every read a plain one:

split_padded_nests (index-set splitting)
    for oh in 56: ... pad %X[2*oh + r - 1, ...]
                           ==>    for oh_0_1 in 1: ... pad %X[2*oh_0_1 + r - 1, ...]     border
                                  for oh_1_56 in 55: ... %X[2*oh_1_56 + r + 1, ...]      interior
    The interior nest, nearly all of the work, reads the input where it lies; only the border
    nests, a few rows or columns wide, still read padding. Opposite borders of the same width
    share one nest that runs over both edges (a loop over a `side` dimension of size 2).

stage_padded_reads
    %out[h] = pad %in[h - 1]         %in_pad: zero border, allocated once
                           ==>       for j in N: %in_pad[j + 1] = %in[j]
                                     %out[h] = %in_pad[h]
    The temp holds what the read reaches and nothing more; its border is never written, so it
    stays zero. A read that jumps between the two edges of a shared border nest stages the two
    windows (a temp dimension of size 2), not the span between them.

Unsplit, a padded nest pays one copy of its whole input before it starts: a depthwise
convolution does a few operations per input element, and that copy costs about as much as the
convolution itself.
"""
from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass

from ..dtypes import dtype as _dtype
from ..errors import UnsupportedError
from ..looptree import stats
from ..looptree.ir import (
    Access, Affine, Buffer, Compute, Load, Loop, LoopTree, loop_var, map_accesses, statements,
)

__all__ = ["split_padded_nests", "stage_padded_reads", "zero_bordered_temps"]

# A nest that does more operations than this per byte it would stage is not split: a dense
# convolution over many channels does hundreds, its copy is a fraction of a percent of its time,
# and narrow border nests would lose the reuse of its register blocks. Below it the copy costs:
# a network's first convolution over a 3-channel image (MobileNetV3-Small's 3x3/2, 18 per byte)
# copied its 600 KB image into a padded temp at every call, 13 us of its 84 alone and more in
# the model, where the temp is cold; split, its border nests take 4 us (one thread, AVX-512 Xeon).
_SPLIT_MAX_FLOPS_PER_BYTE = 64
# What one more nest costs, as bytes of copy: a call, its set-up and its loop overheads.
_NEST_COST_BYTES = 16 << 10


# ---------------------------------------------------------------------------
# split_padded_nests


def split_padded_nests(tree: LoopTree, always: bool = False) -> LoopTree:
    """Every top-level nest whose padded reads leave their buffer, split into an interior nest
    that reads in place and border nests.

    Along each output dimension d that a padded index uses, the interior [a, b) is where the
    read stays inside its buffer whatever the other dimensions are. A region nest is a copy of
    the nest with d restricted to a range (d renamed, its indices shifted). Outer dimensions
    split first; the interior splits again along the next one, so a 2-D window gives

        top rows | left columns, interior, right columns | bottom rows

    where top and bottom (left and right) are one nest when they are equally wide.

    A nest stays whole when the split could change what it computes: a padded index with no
    output dimension (padding along a reduction) or with two, a statement that does not write
    every split dimension, a buffer the nest reads at another point than it writes it along a
    split dimension, a loop offset (`@var`) of a loop over one. It also stays whole when the
    split does not pay (`_split_pays`), unless `always`."""
    dims = dict(tree.dims)
    body: list = []
    for top, node in enumerate(tree.body):
        body.extend(_split_nest(tree, node, dims, f"p{top}", always))
    if len(body) == len(tree.body):
        return tree
    return LoopTree(tree.buffers, tuple(dims.items()), tuple(body))


def _split_nest(tree: LoopTree, node, dims: dict[str, int], tag: str, always: bool) -> list:
    """The region nests of one top-level node (their dims added to `dims`), or [node]."""
    intervals = _interior(tree, node) if isinstance(node, Loop) else []
    if not intervals:
        return [node]
    sizes = dict(dims)
    try:
        # a loop over both edges cannot enclose a parallel loop: its edges stay two nests
        parallel = {lp.dim for lp in _loops(node) if "parallel" in lp.annotations}
        nests = [_restrict(tree, node, region, sizes, f"{tag}r{i}")
                 for i, region in enumerate(_regions(intervals, sizes, parallel))]
    except _NameTaken:
        return [node]
    if not always and not _split_pays(tree, node, nests, sizes):
        return [node]
    dims.update(sizes)
    return nests


def _split_pays(tree: LoopTree, node: Loop, nests: list, sizes: dict[str, int]) -> bool:
    """For a nest bound by memory: whether its border nests and their copies cost less than the
    copy of the whole input, each added nest counted as `_NEST_COST_BYTES`. (Under a large
    window a small image is mostly border, and copying the borders costs more than the image.)"""
    whole, whole_copies = _staging_cost(tree, node, sizes)
    flops = stats.flops(LoopTree(tree.buffers, tuple(sizes.items()), (node,)))
    if flops > _SPLIT_MAX_FLOPS_PER_BYTE * whole:
        return False
    # the region nests and their copies replace the nest and its copy
    split, added = 0, -1 - whole_copies
    for nest in nests:
        nbytes, copies = _staging_cost(tree, nest, sizes)
        split += nbytes
        added += 1 + copies
    return split + _NEST_COST_BYTES * added < whole


def _interior(tree: LoopTree, node: Loop) -> list[tuple[str, int, int]]:
    """[(dim, start, stop)], outer dimensions first: where the padded reads of `node` stay
    inside their buffers; [] when the nest is not to be split."""
    sizes = dict(tree.dims)
    stmts = list(statements(node))
    bounds: dict[str, tuple[int, int]] = {}
    for stmt in stmts:
        out_dims = {n for n in stmt.out.names() if not n.startswith("@")}
        for acc in stmt.reads():
            if not acc.zero_pad:
                continue
            for ix, extent in zip(acc.index, tree.buffer(acc.buffer).shape):
                lo, hi = _index_range(ix, sizes)
                if 0 <= lo and hi < extent:
                    continue
                split = [(n, c) for n, c in ix.terms if n in out_dims]
                if len(split) != 1:
                    return []
                d, c = split[0]
                start, stop = _inside(ix, d, c, extent, sizes)
                old = bounds.get(d, (0, sizes[d]))
                bounds[d] = (max(old[0], start), min(old[1], stop))
    order = dict.fromkeys(lp.dim for lp in _loops(node))
    intervals = [(d, *bounds[d]) for d in order if d in bounds]
    if not intervals or any(start >= stop for _, start, stop in intervals):
        return []
    if not _splits_safely(node, stmts, {d for d, _, _ in intervals}):
        return []
    return intervals


def _inside(ix: Affine, d: str, c: int, extent: int, sizes: dict[str, int]) -> tuple[int, int]:
    """The range [start, stop) of d where `ix` stays in [0, extent) whatever its other terms."""
    rest_lo, rest_hi = _index_range(_without(ix, d), sizes)
    # 0 <= c*d + rest_lo and c*d + rest_hi <= extent - 1
    if c > 0:
        start, last = -(rest_lo // c), (extent - 1 - rest_hi) // c
    else:
        start, last = -((extent - 1 - rest_hi) // -c), rest_lo // -c
    return max(start, 0), min(last + 1, sizes[d])


def _without(ix: Affine, name: str) -> Affine:
    return Affine(tuple(t for t in ix.terms if t[0] != name), ix.const)


def _loops(node):
    """Every loop of a subtree, in program order."""
    if isinstance(node, Loop):
        yield node
        for n in node.body:
            yield from _loops(n)


def _splits_safely(node: Loop, stmts: list[Compute], split_dims: set[str]) -> bool:
    """Each region nest computes exactly the points of its range: every statement writes every
    split dimension, reads what the nest writes at the point it writes it, and no index uses
    the offset of a loop over a split dimension."""
    split_vars = {loop_var(lp.var) for lp in _loops(node) if lp.dim in split_dims}
    written: dict[str, Access] = {}
    for stmt in stmts:
        if not split_dims <= stmt.out.names():
            return False
        written.setdefault(stmt.out.buffer, stmt.out)
    for stmt in stmts:
        for acc in (stmt.out, *stmt.reads()):
            if acc.names() & split_vars:
                return False
            first = written.get(acc.buffer)
            if first is not None and _along(acc, split_dims) != _along(first, split_dims):
                return False
    return True


def _along(acc: Access, dims: set[str]) -> tuple:
    """The index positions of an access that use one of `dims`."""
    return tuple((i, ix) for i, ix in enumerate(acc.index) if set(ix.names()) & dims)


@dataclass(frozen=True)
class _Range:
    """`width` values of `dim` from each of `starts` (two starts: both edges, one nest)."""
    dim: str
    starts: tuple[int, ...]
    width: int


def _regions(intervals, sizes: dict[str, int], separate_edges: set[str]) -> list[list[_Range]]:
    """The regions of a split, each a list of restrictions, one per split dimension at most;
    equally wide edges of a dim share a region unless the dim is in `separate_edges`."""
    if not intervals:
        return [[]]
    (d, start, stop), rest = intervals[0], intervals[1:]
    low, high = start, sizes[d] - stop
    interior = [[_Range(d, (start,), stop - start), *inner] for inner in _regions(rest, sizes, separate_edges)]
    if low and low == high and d not in separate_edges:
        return [[_Range(d, (0, stop), low)], *interior]
    return ([[_Range(d, (0,), low)]] if low else []) + interior + ([[_Range(d, (stop,), high)]] if high else [])


def _restrict(tree: LoopTree, node: Loop, region: list[_Range], dims: dict[str, int], tag: str):
    """A copy of `node` over `region` (new dims added to `dims`, loop vars suffixed with `tag`;
    padded reads that no longer leave their buffer lose the flag).

    A dim d restricted to one range [s, s + w) becomes the dim `d_s_{s+w}` of size w, and d
    in every index `d_s_{s+w} + s`. Restricted to both edges [0, w) and [b, b + w), d becomes
    `d_edgew + b*d_sidew`, and a loop over `d_sidew` (size 2) encloses the outermost loops
    over `d_edgew`."""
    subst: dict[str, Affine] = {}
    local: dict[str, str] = {}
    sides: dict[str, str] = {}
    for r in region:
        if len(r.starts) == 1:
            name = _declare(dims, f"{r.dim}_{r.starts[0]}_{r.starts[0] + r.width}", r.width)
            subst[r.dim] = Affine.of(name, const=r.starts[0])
        else:
            name = _declare(dims, f"{r.dim}_edge{r.width}", r.width)
            side = sides[name] = _declare(dims, f"{r.dim}_side{r.width}", 2)
            subst[r.dim] = Affine.of(name, (side, r.starts[1] - r.starts[0]), const=r.starts[0])
        local[r.dim] = name

    def index(ix: Affine) -> Affine:
        for n, _ in ix.terms:
            if n in subst or n.startswith("@"):
                break
        else:
            return ix           # nothing to rename (a channel index, a weight's): kept as it is
        terms, const = [], ix.const
        for n, c in ix.terms:
            if n in subst:
                terms.extend((m, c * k) for m, k in subst[n].terms)
                const += c * subst[n].const
            else:
                terms.append((f"{n}_{tag}" if n.startswith("@") else n, c))
        return Affine.of(*terms, const=const)

    def access(acc: Access) -> Access:
        indices = tuple(index(ix) for ix in acc.index)
        if not acc.zero_pad and all(map(operator.is_, indices, acc.index)):
            return acc
        acc = Access(acc.buffer, indices, acc.zero_pad)
        if acc.zero_pad and _inside_buffer(acc, tree.buffer(acc.buffer).shape, dims):
            acc = Access(acc.buffer, acc.index, False)      # a read of the interior
        return acc

    def rec(n, enclosing: frozenset):
        if not isinstance(n, Loop):
            return map_accesses(n, access)
        dim = local.get(n.dim, n.dim)
        loop = Loop(f"{n.var}_{tag}", dim, n.step, tuple(rec(b, enclosing | {dim}) for b in n.body), n.annotations)
        if dim in sides and dim not in enclosing:
            return Loop(f"{n.var}_{tag}_side", sides[dim], 1, (loop,))
        return loop

    out = rec(node, frozenset())
    restricted = set(local.values())
    kept = _drop_single_iterations((out,), restricted, dims, {})
    if len(kept) == 1:
        return kept[0]
    inner = {out.dim: min(out.step, dims[out.dim])}
    return out.with_body(_drop_single_iterations(out.body, restricted, dims, inner))


class _NameTaken(Exception):
    """A region's dimension name is already a dimension of another size."""


def _declare(dims: dict[str, int], name: str, size: int) -> str:
    if dims.setdefault(name, size) != size:
        raise _NameTaken(name)
    return name


def _drop_single_iterations(nodes, restricted: set[str], sizes: dict[str, int], ranges: dict[str, int]) -> tuple:
    """`nodes` without the loops over a restricted dim that run once over their whole range
    (a block loop over a border a few elements wide) where an inner loop over the dim remains:
    the code generator would take such a loop for a register block of the output, and unroll
    every reduction loop inside it."""
    out = []
    for n in nodes:
        if not isinstance(n, Loop):
            out.append(n)
            continue
        rng = ranges.get(n.dim, sizes[n.dim])
        body = _drop_single_iterations(n.body, restricted, sizes, {**ranges, n.dim: min(n.step, rng)})
        if n.dim in restricted and rng <= n.step and not n.annotations and _iterated_below(body, n.dim):
            out.extend(body)
        elif len(body) == len(n.body) and all(map(operator.is_, body, n.body)):
            out.append(n)           # nothing dropped below: the loop as it is
        else:
            out.append(n.with_body(body))
    return tuple(out)


def _iterated_below(nodes, dim: str) -> bool:
    """Every statement among `nodes` has a loop over `dim` enclosing it."""
    for n in nodes:
        if isinstance(n, Compute) or (n.dim != dim and not _iterated_below(n.body, dim)):
            return False
    return True


# ---------------------------------------------------------------------------
# stage_padded_reads


@dataclass(frozen=True)
class _Window:
    """What a padded read reaches along one index position: [lo, hi], and `lo + coeff` to
    `hi + coeff` as well when `side` (a dim of size 2) moves the read further than its window."""
    lo: int
    hi: int
    side: str | None = None
    coeff: int = 0

    @property
    def extent(self) -> int:
        return self.hi - self.lo + 1


def _windows(access: Access, sizes: dict[str, int]) -> tuple[_Window, ...]:
    return tuple(_window(ix, sizes) for ix in access.index)


def _window(ix: Affine, sizes: dict[str, int]) -> _Window:
    for name, c in ix.terms:
        if not name.startswith("@") and sizes[name] == 2:
            lo, hi = _index_range(_without(ix, name), sizes)
            if abs(c) > hi - lo + 1:
                return _Window(lo, hi, name, c)
    return _Window(*_index_range(ix, sizes))


def _boxes(windows: tuple[_Window, ...], shape) -> list[tuple[tuple[int, ...], list, list]]:
    """(side values, index ranges, the ranges clipped to the buffer) of every box the windows
    cover: one box, or one per combination of the sides of the windows that have one."""
    out = []
    options = [(0, 1) if w.side else (0,) for w in windows]
    for values in itertools.product(*options):
        ranges = [(w.lo + w.coeff * v, w.hi + w.coeff * v) for w, v in zip(windows, values)]
        clipped = [(max(lo, 0), min(hi, s - 1)) for (lo, hi), s in zip(ranges, shape)]
        out.append((tuple(v for w, v in zip(windows, values) if w.side), ranges, clipped))
    return out


def _inside_buffer(access: Access, shape, sizes: dict[str, int]) -> bool:
    for ix, s in zip(access.index, shape):
        lo, hi = _index_range(ix, sizes)
        if lo < 0 or hi >= s:
            return False
    return True


def _staging_cost(tree: LoopTree, node, sizes: dict[str, int]) -> tuple[int, int]:
    """(bytes, copy nests) stage_padded_reads would copy for the padded reads of a nest."""
    staged = set()
    for stmt in statements(node):
        for acc in stmt.reads():
            buf = tree.buffer(acc.buffer)
            if acc.zero_pad and not _inside_buffer(acc, buf.shape, sizes):
                staged.add((buf, _windows(acc, sizes)))
    nbytes = copies = 0
    for buf, windows in staged:
        for _, _, clipped in _boxes(windows, buf.shape):
            elems = 1
            for first, last in clipped:
                elems *= max(0, last - first + 1)
            nbytes += elems * _dtype(buf.dtype).itemsize
            copies += elems > 0
    return nbytes, copies


def stage_padded_reads(tree: LoopTree) -> LoopTree:
    """Every padded read that may leave its buffer reads a zero-bordered temp instead, filled
    by copy nests placed before its top-level nest; reads that stay inside lose the flag."""
    if not any(a.zero_pad for _, s in tree.computes() for a in s.reads()):
        return tree
    sizes = dict(tree.dims)
    staged: dict[tuple, str] = {}   # (buffer, windows) -> temp
    new_buffers = list(tree.buffers)
    new_dims = list(tree.dims)
    copies_before: dict[int, list] = {}

    def stage(access: Access, top: int) -> Access:
        buf = tree.buffer(access.buffer)
        if _inside_buffer(access, buf.shape, sizes):
            return Access(access.buffer, access.index, False)
        windows = _windows(access, sizes)
        key = (buf.name, windows)
        if key not in staged:
            name = staged[key] = f"{buf.name}_pad{len(staged)}"
            shape = [e for w in windows for e in ((2, w.extent) if w.side else (w.extent,))]
            new_buffers.append(Buffer(name, buf.dtype, tuple(shape), "temp"))
            copies_before.setdefault(top, []).extend(_copies(name, buf, windows, new_dims))
        index = []
        for ix, w in zip(access.index, windows):
            if w.side:
                index += [Affine.of(w.side), Affine(_without(ix, w.side).terms, ix.const - w.lo)]
            else:
                index.append(Affine(ix.terms, ix.const - w.lo))
        return Access(staged[key], tuple(index))

    def fix(node, top):
        # a subtree without a padded read is kept as it is (the interior nest of a split one)
        if isinstance(node, Loop):
            body = tuple(fix(n, top) for n in node.body)
            return node if all(map(operator.is_, body, node.body)) else node.with_body(body)
        if not any(a.zero_pad for a in node.reads()):
            return node
        return map_accesses(node, lambda a: stage(a, top) if a.zero_pad else a)

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


def _copies(name: str, buf: Buffer, windows: tuple[_Window, ...], new_dims: list) -> list[Loop]:
    """The nests copying each box the windows cover from `buf` into the temp `name`, whose
    indices count from each window's low end (boxes entirely outside the buffer need none)."""
    nests = []
    boxes = _boxes(windows, buf.shape)
    for k, (sides, ranges, clipped) in enumerate(boxes):
        if any(first > last for first, last in clipped):
            continue
        tag = f"{name}_{k}" if len(boxes) > 1 else name
        dims = [f"{tag}_d{i}" for i in range(len(clipped))]
        new_dims.extend((d, last - first + 1) for d, (first, last) in zip(dims, clipped))
        index, side_values = [], iter(sides)
        for d, w, (first, _), (lo, _) in zip(dims, windows, clipped, ranges):
            if w.side:
                index.append(Affine(const=next(side_values)))
            index.append(Affine.of(d, const=first - lo))
        source = Access(buf.name, tuple(Affine.of(d, const=first) for d, (first, _) in zip(dims, clipped)))
        node = Compute(f"{tag}_copy", Access(name, tuple(index)), Load(source))
        for i, d in reversed(list(enumerate(dims))):
            node = Loop(f"{tag}_l{i}", d, 1, (node,))
        nests.append(node)
    return nests


def _index_range(ix: Affine, sizes: dict[str, int]) -> tuple[int, int]:
    lo = hi = ix.const
    for name, c in ix.terms:
        if name.startswith("@"):
            raise UnsupportedError("a padded read indexed by a loop offset is not supported")
        span = c * (sizes[name] - 1)
        lo += min(0, span)
        hi += max(0, span)
    return lo, hi


def zero_bordered_temps(tree: LoopTree) -> dict[str, tuple]:
    """{temp: key} for the temps of a lowered tree that stage_padded_reads made and that are
    filled in every call (copies of a plain input): the key is the temp's dtype, shape and the
    boxes its copies write. Whatever no copy writes is the zero border, never written; so two
    kernels' temps of one key may be one buffer when the kernels run one after the other (the
    layers of a network: the buffer the last layer filled is still in cache, where a buffer of
    each layer's own is not)."""
    sizes = dict(tree.dims)
    boxes: dict[str, set] = {}
    other: set[str] = set()
    for _, stmt in tree.computes():
        out = stmt.out.buffer
        src = stmt.expr.access.buffer if isinstance(stmt.expr, Load) and stmt.reduce is None else None
        if src is None or not stmt.name.endswith("_copy") or tree.buffer(src).kind != "input" \
                or tree.buffer(src).constant:
            other.add(out)
            continue
        boxes.setdefault(out, set()).add(tuple(_index_range(ix, sizes) for ix in stmt.out.index))
    found = {}
    for b in tree.temps:
        head, _, number = b.name.rpartition("_pad")
        if head and number.isdigit() and b.name in boxes and b.name not in other:
            found[b.name] = (b.dtype, b.shape, b.strides, frozenset(boxes[b.name]))
    return found
