"""Tuning integer contractions on their tensorized instruction (UNIT §4.3).

Once a contraction runs on a dot-product instruction, what is left to search is the loops
around it: the register block (rows x panels of the instruction's lanes), the order and tiling
of the outer loops (the reduction tiled by whole k-groups or not; lane panels or rows
outermost), and which loop runs in parallel (the outermost one, annotated by `realize`). Each
candidate is a `Plan` with `tensorize="auto"`: the schedule's loops, then the `tensorize` action
on the contraction, so the result replays from the database like any other schedule. Without
the action the backend tensorizes with its own fixed block and ignores the loops the tuner
would vary, so an integer contraction is searched here instead of by the float mappers.

Where the CPU has tile units (AMX, and Linux grants the tile state) the tile blocks are a family
of their own (`tile_plans`, `tensorize="amx"`), searched first: the block's shape in tiles,
which operand's blocks are outermost, the parallel loop. The default schedule is then the
tile rewriter's own blocks (a compile without a schedule), so the search starts from the
fastest code the compile has and never returns slower.
"""
from __future__ import annotations

from .space import Plan, cache_tiles, loop_names, register_blocks, window_permutations


def is_integer_contraction(session) -> bool:
    return integer_contraction(session.base.graph, session.nid)


def integer_contraction(g, nid: int) -> bool:
    """Node `nid` is a sum of 8-bit products into int32 (what the instructions compute)."""
    n = g.node(nid)
    if n.op != "reduce" or n.fn != "add" or n.dtype != "int32":
        return False
    prod = g.node(n.inputs[0])
    if prod.op != "binary" or prod.fn != "mul":
        return False
    return all(g.node(i).dtype in ("int8", "uint8") for i in prod.inputs)


def has_tiles(target) -> bool:
    """Whether integer contractions compiled for `target` on this host may run on tile blocks
    (AMX: the CPU's features and Linux's grant of the tile state)."""
    from ..backend.tensorize.apply import tile_instructions

    return bool(tile_instructions(target))


def on_tiles(tree, nid: int, target) -> bool:
    """Whether the integer contraction `nid` runs on tile blocks with the program's own loops
    (a matrix multiply, a unit-stride convolution with its channels innermost)."""
    from ..errors import ScheduleError

    if not has_tiles(target):
        return False
    try:
        tree.tensorize(tree.ref_of(nid), "amx")
    except ScheduleError:
        return False
    return True


def tensorized_default(tree, nid: int):
    """The default schedule's integer contraction on its instruction, its loops kept (the
    rewriter packs the weights itself); as it is where no instruction applies."""
    from ..errors import ScheduleError

    try:
        return tree.tensorize(tree.ref_of(nid), "auto")
    except ScheduleError:
        return tree


def tile_plans(session) -> list[Plan]:
    """Tile blocks (AMX), where the target has them: the program's loops (the tile rewriter's
    own blocks, as a compile without a schedule), then each block shape the tile registers hold
    (rows x columns of 16 x 16 tiles: scheduled.tile_limits) with the rows' or the columns'
    blocks outermost (which operand's panel is read once; the outermost loop runs in parallel).
    The reduction runs whole inside a block (the accumulators stay in tile registers); a
    convolution keeps its own blocks (TileSchedule), so it has the first plan alone."""
    from ..backend.tensorize.scheduled import tile_limits
    from .mappers import _roles

    if not has_tiles(session.target):
        return []
    own = Plan(tuple((v, ()) for v in session.sizes), tuple(loop_names(session.base, session.nid)), (), "amx")
    vec, row, others, red = _roles(session)
    if row is None or others:
        return [own]
    rows_max, cols_max, acc_max = tile_limits()
    out = [own]
    for rows in range(rows_max, 0, -1):
        for cols in range(min(cols_max, acc_max // rows), 0, -1):
            split = {v: 16 * t for v, t in ((row, rows), (vec, cols)) if 16 * t < session.sizes[v]}
            if not split:
                continue            # one block covers the output: the rewriter's own
            tiles = tuple((v, (split[v],) if v in split else ()) for v in session.sizes)
            inner = tuple(v + "'" for v in (row, vec) if v in split)
            for outer in ((row, vec), (vec, row)):
                out.append(Plan(tiles, outer + tuple(v for v in session.sizes if v in red) + inner, (), "amx"))
    return out


def plans(session) -> list[Plan]:
    """Register blocks (most accumulators first) x reduction tiles (multiples of the
    instruction's 4-byte groups, or none) x which of the lane panels and the rows is outermost."""
    from .mappers import _roles, blocked_plan

    vec, row, _, red = _roles(session)
    lanes = session.lanes
    if session.sizes[vec] % lanes:
        return []                   # no instruction's lanes fill the lane dimension
    blocks = sorted(((r, v) for r, v in register_blocks(session.target)
                     if v * lanes <= session.sizes[vec] and session.sizes[vec] % (v * lanes) == 0
                     and (row is None or r <= session.sizes[row])),
                    key=lambda rv: (-rv[0] * rv[1], -rv[1]))
    kcs = [None]
    if red:
        n = session.sizes[red[0]]
        kcs += [t for t in cache_tiles(n, lo=64) if t < n and t % 4 == 0][:2]
    out = []
    for kc in kcs:
        for r, v in blocks:
            p = blocked_plan(session, r, v, kc)
            out.append(Plan(p.tiles, p.order, (), "auto"))
            if row is not None and p.order[0] == vec and row in p.order:
                # the rows outermost instead (the parallel loop then splits the rows)
                order = list(p.order)
                order.remove(row)
                out.append(Plan(p.tiles, (row, *order), (), "auto"))
    return out


def search(session, best):
    """The best (GFLOPS, plan): the tile plans, the vector instruction's plans, then (where one
    of those wins) the orders of the loops above the best one's register block (the innermost
    rows and lane panel stay innermost); `best` (the start) competes throughout."""
    from .mappers import _block_depth, _keep_best

    best = _keep_best(session, tile_plans(session) + plans(session), best)
    if best[1].tensorize == "auto" and not session.exhausted():
        order = best[1].order
        n = len(order) - _block_depth(session, order)
        best = _keep_best(session, [Plan(best[1].tiles, tuple(o) + tuple(order[n:]), (), "auto")
                                    for o in window_permutations(tuple(order[:n]), 0, 5)], best)
    return best


def tensorized_first(mapper):
    """`mapper`, except that an integer contraction is searched on its instruction (a float
    mapper's plans would all compile to the backend's one default block)."""
    def run(session):
        if is_integer_contraction(session):
            return search(session, session.start_best)
        return mapper(session)
    run.__name__, run.__doc__ = mapper.__name__, mapper.__doc__
    return run
