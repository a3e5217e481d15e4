"""Software prefetch of the next tile of a reused operand, spread over the passes that reuse the
current one.

A packed weight tile is read once from memory and then re-read from L1 by every output block
that sweeps it:

    for k in 11:              advance: the tile moves on (by `distance` bytes)
      for oh in 7:            passes: the tile stays put; 28 register blocks re-read it
        for ow in 4:
          <register block: for r, s, c', ... read W[k][r, s, c', :]>

Its first pass waits on memory for the whole tile (27 KB of a convolution's weights arrive
no faster than DRAM delivers them, while the block would consume them at 32 bytes a cycle),
and the hardware prefetchers, trained on that one sequential pass, stop at page boundaries and
cannot know the next tile is wanted before its first pass begins. So each pass fetches its share
of the next tile, `lines` cache lines at the start of the block: by the time the next tile's
first pass runs, it is in the caches. (Measured on Zen 3, default schedules in interleaved rounds
beside peak probes: CONV-4's 9.4 MB of weights 71 -> 84 % of peak, CONV-3's 4.7 MB 82 -> 87 %;
CONV-2, whose 1.2 MB stay in L3, unchanged.)

The prefetch address is an affine stream of its own, kept in a pointer register: it moves with
the advance loop and the loops around it as the operand does, and by `lines` lines per pass
along the pass loops, so pass i of tile t prefetches lines [i * lines, (i + 1) * lines) of
tile t + 1. A prefetch never faults, so the last tile's look past the buffer's end is harmless.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..looptree.ir import Compute, LoopTree, loop_var, statements
from ..looptree.stats import loop_ranges
from .analysis import byte_map, loop_delta

__all__ = ["PrefetchPlan", "prefetch_plans"]

LINE = 64
# a tile smaller than this is fetched in a few hundred cycles: the first pass hardly waits
MIN_TILE_BYTES = 8 << 10
# at most this many prefetches start a block: a larger share means too few passes to spread the
# tile over (on an AVX-512 Xeon, CONV-4's 84 lines a pass ran at 0.94x of no prefetch at all)
MAX_LINES_PER_PASS = 32


@dataclass(frozen=True)
class PrefetchPlan:
    """Prefetch `lines` lines of the next tile of `stmt`'s read of `buffer` at the start of
    each register block inside `passes` (loop vars, outermost first)."""
    stmt: Compute
    buffer: str
    coeffs: tuple[tuple[str, int], ...]   # the prefetch pointer's bytes per unit of loop offsets
    const: int                            # bytes from the buffer's base to the next tile
    passes: tuple[str, ...]
    lines: int

    @property
    def stream(self) -> tuple:
        """A pointer stream of its own (the backend keys pointers by (buffer, coefficients))."""
        return (self.buffer, self.coeffs)

    def displacement(self, static: dict[str, int]) -> int:
        """Bytes from the pointer to this pass's first line, at a point of the unrolled code."""
        return self.const + sum(c * static.get(name, 0) for name, c in self.coeffs)


def prefetch_plans(tree: LoopTree, node, cache_bytes: int, byte_map=byte_map) -> list[PrefetchPlan]:
    """The prefetch plans of a top-level node: for each reduction statement and each operand it
    reads, when some loop A moves the operand on by a contiguous tile of at least
    MIN_TILE_BYTES, the loops directly inside A leave it in place for two or more passes, and
    the tiles A and the loops around it sweep exceed `cache_bytes` (they come from memory).
    `byte_map` may be a caching replacement taking (tree, access)."""
    if all(s.reduce is None for s in statements(node)):
        return []           # copies and element-wise nests: no operand is re-read
    nest = LoopTree(tree.buffers, tree.dims, (node,))
    ranges = None        # the loops' ranges, once some operand has a tile large enough to prefetch
    plans = []
    for stack, stmt in nest.computes():
        if stmt.reduce is None:
            continue
        counts = None
        seen = set()
        for acc in stmt.reads():
            bm = byte_map(tree, acc)
            if acc.buffer == stmt.out.buffer or bm.stream in seen:
                continue
            seen.add(bm.stream)
            coeffs = dict(bm.coeffs)
            deltas = [loop_delta(coeffs, lp) for lp in stack]
            if not _advances(deltas):
                continue
            if counts is None:
                ranges = loop_ranges(nest) if ranges is None else ranges
                counts = [-(-ranges[lp.var][0] // lp.step) for lp in stack]
            plan = _plan(stmt, stack, counts, deltas, bm, cache_bytes)
            if plan is not None:
                plans.append(plan)
    return plans


def _advances(deltas: list[int]) -> bool:
    """Whether some loop moves the operand on by a tile of MIN_TILE_BYTES that the loop inside it
    leaves in place (`deltas`: bytes per iteration of each loop)."""
    return any(deltas[a] >= MIN_TILE_BYTES and deltas[a + 1] == 0 for a in range(len(deltas) - 1))


def _plan(stmt: Compute, stack, counts, deltas, bm, cache_bytes: int) -> PrefetchPlan | None:
    """The plan for the innermost advance loop that qualifies (see prefetch_plans), or None;
    `counts`: the iterations of each loop of `stack`, a partial last one included; `deltas`: the
    operand's bytes per iteration of each."""
    for a in range(len(stack) - 2, -1, -1):
        if deltas[a] < MIN_TILE_BYTES or deltas[a + 1] != 0:
            continue
        end = a + 1                       # the pass loops: stack[a + 1:end], the operand stays put
        while end < len(stack) and deltas[end] == 0:
            end += 1
        plan = _advance_plan(stmt, stack, deltas, counts, a, end, bm, cache_bytes)
        if plan is not None:
            return plan
    return None


def _advance_plan(stmt, stack, deltas, counts, a, end, bm, cache_bytes) -> PrefetchPlan | None:
    distance = deltas[a]
    # the tile is contiguous: the loops inside the pass loops span about `distance` bytes
    span = bm.itemsize + sum((c - 1) * abs(d) for c, d in zip(counts[end:], deltas[end:]))
    if not distance * 7 // 8 <= span <= distance:
        return None
    swept = distance
    for c, d in zip(counts[:a + 1], deltas[:a + 1]):
        if d:
            swept *= c
    passes = 1
    for c in counts[a + 1:end]:
        passes *= c
    if swept <= cache_bytes or passes < 2:
        return None
    needed = -(-distance // LINE // passes)
    # the fewest lines per pass (at least `needed`) that make every pass loop's coefficient whole
    # (the pointer moves by a whole number of bytes per element of each loop's step)
    pass_loops = list(zip(stack[a + 1:end], counts[a + 1:end]))
    lines = next((n for n in range(needed, needed + LINE + 1) if _pass_coeffs(pass_loops, n * LINE)), None)
    if lines is None or lines > MAX_LINES_PER_PASS:
        return None
    pcoeffs = {}
    for lp, d in zip(stack[:a + 1], deltas[:a + 1]):
        if d:
            pcoeffs[loop_var(lp.var)] = d // lp.step
    pcoeffs.update(_pass_coeffs(pass_loops, lines * LINE))
    return PrefetchPlan(stmt, bm.buffer, tuple(sorted(pcoeffs.items())), bm.const + distance,
                        tuple(lp.var for lp in stack[a + 1:end]), lines)


def _pass_coeffs(pass_loops, stride: int) -> dict | None:
    """Bytes per element of each pass loop when consecutive passes are `stride` bytes apart,
    innermost pass loop fastest; None when a loop's step does not divide its stride."""
    out = {}
    for lp, count in reversed(pass_loops):
        if count == 1:      # one iteration (a block as wide as the row): its offset is always 0
            out[loop_var(lp.var)] = 0
            continue
        if stride % lp.step:
            return None
        out[loop_var(lp.var)] = stride // lp.step
        stride *= count
    return out
