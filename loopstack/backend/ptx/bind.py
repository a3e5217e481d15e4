"""A GPU schedule stated by the loop tree: loops bound to the grid and to warps, and mma tiles.

The contraction's loops, outer to inner, state the tensor-core knobs (`knobs.py`) so:

    for m in M/BM : block        the grid: one CTA per BM x BN block of C; the inner of the two
      for n in N/BN : block      block loops is the grid's x (a GEMM's REORDER_INNER: 0 with n
                                 inner, 1 with m inner)
        for m in BM/WM : warp    BLK_ROW_WARPS = BM/WM warps along C's rows, each WM = 16 *
          for n in BN/WN : warp  WARP_ROW_TILES rows; BLK_COL_WARPS and WARP_COL_TILES likewise
            for k in K/BK        the k-step: BK = CHUNK * mma.k, the tiles cp.async stages
              for ...            loops over m, n and k whose steps are whole mma tiles (16 rows,
                                 8 columns, mma.k) or single elements: a warp's registers, unrolled
                mma.sync         `tensorize` "auto", or the mma entry for the operands' type

- A dimension of C without a warp loop has one warp along it (the block is the warp's tile).
- The k-step is the outermost loop over the reduction's innermost dimension (a GEMM's k, a
  convolution's c): its step, or all of the dimension when it is not split.
- A convolution's rows (b*oh*ow) are one dimension of the implicit GEMM that no loop of the
  tree is: its output channels are bound (block, warp) and its pixel loops are not; the row
  knobs come from the target or the model.  Its k-step loop above the filter window's loops
  (r, s) runs channel blocks outermost (REORDER_INNER 1), below them the flattened (r, s, c).
- `stages` is not a loop.  Knobs the loops do not state come from the target
  (`GpuTarget.of("sm_90", stages=4)`) or, where it names none, from the model's best completion
  of what the loops state.  A knob both state must agree.

A tree that binds no loop leaves the whole schedule to the knobs (`compile_ptx`).  A loop that
does not fit the form above is refused, naming the loop and what it should be.
"""
from __future__ import annotations

import itertools

from ...errors import ScheduleError, UnsupportedError
from ...looptree.ir import GPU_BINDINGS
from .knobs import KNOB_VALUES, GpuSchedule

TILE = 16               # a warp tile's rows and columns come in 16s (two m16n8 products per 16 x 16)
KEPT = frozenset({"unroll"}) | frozenset(GPU_BINDINGS)     # what a bound tree's loops may carry


def binds(con) -> bool:
    """Whether the contraction's loops bind any loop to the grid or to warps."""
    return any(not lp.annotations.isdisjoint(GPU_BINDINGS) for lp in con.loops)


def check_request(con, allow_tf32: bool = False, target: str = "sm_90") -> None:
    """A statement's `tensorize` request must name the mma form of its operands (or be "auto");
    an inexact form (tf32 for float32 operands) must be asked for, by name or `allow_tf32`."""
    req, mma = con.tensorize, con.mma
    want = f"mma.{mma.shape}.{mma.label}"
    if not mma.exact and not allow_tf32 and req != want:
        raise UnsupportedError(f"float32 operands: the tensor cores multiply them as TF32 (mantissas rounded to "
                               f"10 bits, sums in f32); ask for that with GpuTarget.of({target!r}, allow_tf32=True) "
                               f"or tensorize {want!r} on the sum, or give float16 / bfloat16 operands")
    if req in ("", "auto"):
        return
    from ..tensorize.registry import REGISTRY, family

    # a whole name must be the form ("mma.m16n8k32.s8" is not u8 x s8's); a prefix, a family of them
    named = req if req in {t.name for t in REGISTRY} else None
    if want != named and (named or want not in {t.name for t in family(req)}):
        operands = con.dtype if not con.b_dtype else f"{con.dtype} by {con.b_dtype}"
        raise ScheduleError(f"tensorize {req!r}: the GPU multiplies {operands} operands with {want}")


def stated_knobs(con, mma) -> dict:
    """{knob: value} the contraction's bound loops state ({} where none is bound)."""
    return {k: v for k, (v, _) in _stated(con, mma).items()} if binds(con) else {}


def tree_schedule(con, mma, target: str, given: dict) -> GpuSchedule:
    """The knobs the loops state, completed from `given` (the target's knobs) and the model."""
    stated = _stated(con, mma)
    for name, value in given.items():
        if name in stated and stated[name][0] != value:
            v, why = stated[name]
            raise ScheduleError(f"knob {name}: the loops state {v} ({why}), the target {value}")
    fixed = {**given, **{k: v for k, (v, _) in stated.items()}}
    return _complete(con, mma, target, fixed)


def _stated(con, mma) -> dict:
    """{knob: (value, the loop that states it)} from the loops; refuses what does not fit."""
    loops = con.loops
    _check_annotations(con)
    k_at = next(i for i, lp in enumerate(loops) if lp.dim == con.red[-1])     # the k-step loop
    stated, bound_at = {}, []
    for role, d, tile in (("ROW", con.rows[0], mma.m), ("COL", con.col, mma.n)):
        if con.conv and role == "ROW":
            continue                # the implicit GEMM's rows: no loop of the tree
        at, n_warps, warp_tile = _bound(loops, d, role)
        _check_tile_loops(loops, d, tile, mma, at[-1], k_at)
        bound_at += at
        stated[f"BLK_{role}_WARPS"] = (n_warps, f"loops {' / '.join(loops[i].var for i in at)} over {d}")
        what = "rows" if role == "ROW" else "columns"
        stated[f"WARP_{role}_TILES"] = (warp_tile // TILE, f"a warp's {warp_tile} {what}")
    _check_order(con, loops, bound_at, k_at)
    stated["CHUNK"] = _k_step(con, mma, loops, k_at)
    stated["REORDER_INNER"] = _reorder(con, loops, k_at)
    return stated


def _check_annotations(con) -> None:
    """Bound loops split C's rows or columns (a convolution's: its columns); nothing else is a
    CPU annotation."""
    bound_dims = (con.col,) if con.conv else (con.rows[0], con.col)
    for lp in con.loops:
        kinds = lp.annotations & frozenset(GPU_BINDINGS)
        if kinds and lp.dim not in bound_dims:
            kind = sorted(kinds)[0]
            if lp.dim in con.red:
                raise ScheduleError(f"loop {lp.var} over {lp.dim} is bound to {kind}s but is the reduction: "
                                    "block and warp loops split C's rows and columns")
            if lp.dim == con.batch_dim:
                raise ScheduleError(f"loop {lp.var} over {lp.dim} is bound to {kind}s: the batch of a batched "
                                    "GEMM is the grid's z already; block and warp loops split C's rows and columns")
            raise ScheduleError(f"loop {lp.var} over {lp.dim} is bound to {kind}s: a convolution's rows "
                                f"({'*'.join(con.rows)}) are one dimension of the implicit GEMM, which no loop is; "
                                f"bind its output channels ({con.col}) and give the row knobs to the target")
        extra = lp.annotations - KEPT
        if extra:
            raise ScheduleError(f"loop {lp.var} over {lp.dim} is {', '.join(sorted(extra))}: on the GPU a loop is "
                                "bound to blocks or warps, or unrolled in a warp's registers")


def _check_tile_loops(loops, d: str, tile: int, mma, last_bound: int, k_at: int) -> None:
    """The loops over `d` inside its block and warp loops: a warp's registers, inside the k-step."""
    for i, lp in enumerate(loops):
        if lp.dim != d or i <= last_bound:
            continue
        if i < k_at:
            raise ScheduleError(f"loop {lp.var} over {d} (a warp's registers) is above the k-step loop "
                                f"{loops[k_at].var}: a warp keeps its whole tile's accumulators across the "
                                "k-steps, so its tile loops run inside them")
        if lp.step != 1 and lp.step % tile:
            raise ScheduleError(f"loop {lp.var} over {d} steps by {lp.step}: a warp's tile loops step by "
                                f"whole {mma.shape} tiles ({tile}) or single elements")


def _check_order(con, loops, bound_at: list[int], k_at: int) -> None:
    """Block loops, then warp loops, then the k-step: no reduction above the grid."""
    blocks = [i for i in bound_at if "block" in loops[i].annotations]
    warps = [i for i in bound_at if i not in blocks]
    if warps and min(warps) < max(blocks):
        raise ScheduleError(f"the warp loop {loops[min(warps)].var} is above the block loop {loops[max(blocks)].var}: "
                            "the grid's loops come first, then the warps of a CTA")
    for lp in loops[:min(bound_at)]:
        if lp.dim in con.red:
            raise ScheduleError(f"loop {lp.var} over {lp.dim} (the reduction) is above the block loops: "
                                "each CTA runs all of the reduction for its block")
    last = max(bound_at)
    if k_at < last:
        raise ScheduleError(f"the k-step loop {loops[k_at].var} over {con.red[-1]} is above the bound loop "
                            f"{loops[last].var}: the warps of a CTA share each k-step's tiles, so the "
                            "k-step runs inside the block and warp loops")


def _k_step(con, mma, loops, k_at: int) -> tuple[int, str]:
    """CHUNK: the k-step loop's step (all of k where it is not split) in whole mma products."""
    kd = con.red[-1]
    for lp in loops[k_at + 1:]:
        if lp.dim == kd and lp.step != 1 and lp.step % mma.k:
            raise ScheduleError(f"loop {lp.var} over {kd} steps by {lp.step}: inside the k-step, loops "
                                f"over the reduction step by whole {mma.shape} products ({mma.k}) or single elements")
    step = loops[k_at]
    bk = step.step if step.step > 1 else (con.conv.c if con.conv else con.k)
    if bk % mma.k or bk // mma.k not in KNOB_VALUES["CHUNK"]:
        raise ScheduleError(f"the k-step loop {step.var} over {kd} takes {bk} of it at a time: CHUNK whole "
                            f"{mma.shape} products, {', '.join(str(c * mma.k) for c in KNOB_VALUES['CHUNK'])}")
    return bk // mma.k, f"loop {step.var} over {kd} by {bk}"


def _bound(loops, d: str, role: str) -> tuple[list[int], int, int]:
    """(positions of the block and warp loops over `d`, warps along it, a warp's extent along it)."""
    over = [i for i, lp in enumerate(loops) if lp.dim == d]
    blocks = [i for i in over if "block" in loops[i].annotations]
    warps = [i for i in over if "warp" in loops[i].annotations]
    what = "rows" if role == "ROW" else "columns"
    if len(blocks) != 1:
        raise ScheduleError(f"{'no' if not blocks else 'more than one'} loop over {d} is bound to blocks: the grid "
                            f"needs exactly one over C's {what} ({d})")
    if blocks[0] != over[0]:
        raise ScheduleError(f"the block loop {loops[blocks[0]].var} over {d} is inside loop {loops[over[0]].var} over "
                            f"{d}: the grid covers all of {d}, so its block loop is the outermost over it")
    if len(warps) > 1:
        raise ScheduleError(f"more than one loop over {d} is bound to warps ({', '.join(loops[i].var for i in warps)})")
    block = loops[blocks[0]]
    if not warps:
        return blocks, 1, block.step
    w = warps[0]
    if w != over[1]:
        raise ScheduleError(f"the warp loop {loops[w].var} over {d} is not the loop right inside its block loop "
                            f"{block.var} over {d}" if w > over[1] else
                            f"the warp loop {loops[w].var} over {d} is above its block loop {block.var}")
    step = loops[w].step
    n = block.step // step
    if block.step % step or n not in KNOB_VALUES[f"BLK_{role}_WARPS"]:
        raise ScheduleError(f"the warp loop {loops[w].var} over {d} splits a block of {block.step} into {step}s: "
                            f"{', '.join(map(str, KNOB_VALUES[f'BLK_{role}_WARPS']))} warps along C's {what}")
    if step % TILE or step // TILE not in KNOB_VALUES[f"WARP_{role}_TILES"]:
        raise ScheduleError(f"the warp loop {loops[w].var} over {d} gives a warp {step} {what}: "
                            f"{', '.join(str(TILE * t) for t in KNOB_VALUES[f'WARP_{role}_TILES'])}")
    return [blocks[0], w], n, step


def _reorder(con, loops, k_at: int) -> tuple[int, str]:
    if con.conv is None:
        m_at = next(i for i, lp in enumerate(loops) if lp.dim == con.rows[0])
        n_at = next(i for i, lp in enumerate(loops) if lp.dim == con.col)
        m_inner = m_at > n_at          # the grid's x walks the inner block loop's dimension
        return int(m_inner), f"the block loop over {con.rows[0] if m_inner else con.col} is the inner one"
    window = [i for i, lp in enumerate(loops) if lp.dim in con.red[:-1]]
    if all(i > k_at for i in window):
        return 1, f"the k-step loop {loops[k_at].var} is above the filter window's loops"
    if all(i < k_at for i in window):
        return 0, f"the k-step loop {loops[k_at].var} is inside the filter window's loops"
    raise ScheduleError(f"the k-step loop {loops[k_at].var} over {con.red[-1]} is between the filter window's loops "
                        f"({', '.join(loops[i].var for i in window)}): it runs above both (channel blocks "
                        "outermost) or inside both")


def _complete(con, mma, target: str, fixed: dict) -> GpuSchedule:
    """`fixed` knobs, the others the model's fastest valid choice (or the defaults' reason why none is)."""
    from .model import fastest

    free = [k for k in KNOB_VALUES if k not in fixed]
    every = (GpuSchedule(**fixed, **dict(zip(free, values)))
             for values in itertools.product(*(KNOB_VALUES[k] for k in free)))
    # none valid: the defaults' check says which knob the loops or the target broke
    return fastest(con, target, every) or GpuSchedule(**fixed).check(mma, target, con.b_kmajor, con.conv)
