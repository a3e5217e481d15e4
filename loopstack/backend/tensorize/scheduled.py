"""A contraction the schedule asked to tensorize (the `tensorize` action): its loops kept.

The frontend's `tensorize` action marks a statement (`Compute.tensorize`: "auto" or a registry
entry). Here the rewriter builds the instruction form with the *schedule's* loops above the
instruction's (UNIT §4.3: the outer loops are the schedule's to tile, order, unroll and run in
parallel), instead of the compile's default register block:
  - the innermost loop over the lane dimension (the one of step 1) steps by the instruction's
    lanes instead, and the innermost loop over the reduction by its k; each other loop over
    either must step by a multiple of them, or the schedule is refused naming the loop;
  - a loop left with one iteration (its step now its parent's) is dropped;
  - the loops keep their annotations ("parallel", "unroll"); "vectorize" is the instruction's.
A statement may share no loop with another: it is rewritten as a tree of its own and spliced
back, so the other statements of the program (copies, element-wise code) stay as they are.

A tile entry (AMX) keeps fewer of the schedule's loops, since one tile block holds its
accumulators in tile registers across the whole reduction (see `TileSchedule`); a loop it cannot
keep is refused at the action, naming the loop and why.
"""
from __future__ import annotations

from ...errors import ScheduleError, UnsupportedError
from ...looptree.ir import Compute, Loop, LoopTree, statements
from .registry import TensorInstr, family, instructions_for
from .rewrite import tensorize


def candidates(request: str, target, features) -> list[TensorInstr]:
    """The entries a request may use on `target`, widest first."""
    runs = instructions_for(target.arch, features)
    if request == "auto":
        return [t for t in runs if t.broadcast is not None and t.vector_bits == target.vector_bits]
    named = family(request)
    return [t for t in runs if t in named and (t.broadcast is not None or t.tile)] or named


def tile_limits() -> tuple[int, int, int]:
    """(row tiles, column tiles, accumulator tiles) of one tile block: the x86 tile code
    generator's register split, the one bound on a block's shape."""
    from ..x86.amx import A_TILES, ACCUMULATORS, B_TILES

    return len(A_TILES), len(B_TILES), len(ACCUMULATORS)


class TileSchedule:
    """The schedule's loops a tile block keeps (`tensorize` naming a tile entry).

    Of a matrix multiply's loops (rows m, columns n, reduction r):
      - splits of m and n by multiples of 16 (whole tiles) are the block loops, in the
        schedule's order and with its `parallel` annotation; the innermost split of each is the
        block's shape (ranges[m] x ranges[n] tiles, within the tile registers: `tile_limits`);
      - a dimension the schedule does not split gets the rewriter's block (tiles.BLOCK) at its
        loop's place; when neither is split, the block loops are the rewriter's own (the operand
        with more bytes outermost: the same code as a compile without the action);
      - the reduction runs whole inside the block (the accumulators stay in tile registers): a
        split of it is refused, and so is any annotation but `parallel` (and `vectorize`, the
        instruction's own).
    A convolution's tile rows are its output pixels on the input's grid (tiles._rewrite_conv),
    which no loop of the schedule indexes: it keeps the schedule's parallel loop and refuses
    any split.
    """

    def __init__(self, stack: tuple[Loop, ...]):
        self.stack = stack

    def _check_annotations(self, lp: Loop, instr: TensorInstr) -> bool:
        extra = set(lp.annotations) - {"vectorize", "parallel"}
        if extra:
            raise ScheduleError(f"tensorize: loop {lp.var} over {lp.dim} is {', '.join(sorted(extra))}; a tile "
                                f"block ({instr.name}) keeps only the schedule's block loops and parallel loop")
        return "parallel" in lp.annotations

    def blocks(self, tile_dims: dict[str, str], reductions, instr: TensorInstr, default: tuple[int, int]):
        """(block loops over the tile dimensions in tiles, (rows, cols)) for `tile_dims` ({m: its
        tile dim, n: its tile dim}), or (None, parallel) where the schedule splits neither."""
        (m, mt), (n, nt) = tile_dims.items()
        split = {lp.dim for lp in self.stack if lp.step > 1}
        parallel, loops, inner = False, [], {}
        for lp in self.stack:
            parallel |= self._check_annotations(lp, instr)
            ann = frozenset(lp.annotations) & {"parallel"}
            if lp.dim in reductions:
                if lp.step > 1:
                    raise ScheduleError(f"tensorize: loop {lp.var} over {lp.dim} steps by {lp.step}; a tile block "
                                        f"({instr.name}) runs the whole reduction, its accumulators in tile registers")
                continue
            if lp.dim not in tile_dims:
                raise ScheduleError(f"tensorize: loop {lp.var} over {lp.dim} indexes neither the tiles' rows "
                                    f"({m}) nor their columns ({n})")   # pragma: no cover - a matmul has no other
            if lp.step > 1 and lp.step % 16:
                raise ScheduleError(f"tensorize: loop {lp.var} over {lp.dim} steps by {lp.step}, not a multiple "
                                    f"of {instr.name}'s 16 tile {'rows' if lp.dim == m else 'columns'}")
            if lp.dim in split and lp.step == 1:
                continue                    # the tile's own rows or columns
            tiles = lp.step // 16 if lp.step > 1 else default[0 if lp.dim == m else 1]
            loops.append((tile_dims[lp.dim], tiles, ann, lp))
            inner[lp.dim] = (tiles, lp)
        if not split & set(tile_dims):
            return None, parallel
        rows_max, cols_max, acc_max = tile_limits()
        (rows, lm), (cols, ln) = inner[m], inner[n]
        for (count, lp), most, what in (((rows, lm), rows_max, "rows"), ((cols, ln), cols_max, "columns")):
            if count > most:
                raise ScheduleError(f"tensorize: loop {lp.var} over {lp.dim} steps by {lp.step}: a block of "
                                    f"{count} tile {what}; {instr.name}'s blocks hold at most {most} "
                                    f"(steps of {', '.join(str(16 * i) for i in range(1, most + 1))})")
        if rows * cols > acc_max:
            raise ScheduleError(f"tensorize: loops {lm.var} and {ln.var} make a block of {rows} x {cols} tiles; "
                                f"{instr.name}'s blocks hold at most {acc_max} accumulators")
        return [(d, t, ann) if ann else (d, t) for d, t, ann, _ in loops], (rows, cols)

    def convolution_parallel(self, instr: TensorInstr) -> bool:
        """Whether the schedule runs the convolution's outermost loop in parallel (its only loop
        a tile convolution keeps); a split is refused."""
        parallel = False
        for lp in self.stack:
            parallel |= self._check_annotations(lp, instr)
            if lp.step > 1:
                raise ScheduleError(f"tensorize: loop {lp.var} over {lp.dim} steps by {lp.step}; a tile "
                                    f"convolution ({instr.name}) blocks its own output pixels and keeps only "
                                    "the schedule's parallel loop")
        return parallel


def outer_loops(stack: tuple[Loop, ...]):
    """The rewriter's `outer`: the schedule's loops, the lane and reduction loops by whole
    instructions (a function of the lane and reduction dimensions the rewriter picks)."""
    def outer(lane: str, r: str, instr: TensorInstr):
        unit = {lane: (instr.lanes, "lanes"), r: (instr.k, "bytes of reduction")}
        out, step_of = [], {}
        for lp in stack:
            step = lp.step
            if lp.dim in unit:
                n, what = unit[lp.dim]
                if step == 1:
                    step = n
                elif step % n:
                    raise ScheduleError(f"tensorize: loop {lp.var} over {lp.dim} steps by {lp.step}, not a "
                                        f"multiple of {instr.name}'s {n} {what}")
            enclosing = step_of.get(lp.dim)
            step_of[lp.dim] = step
            if enclosing == step:
                continue            # one iteration: the instruction's loop replaced this one
            ann = frozenset(lp.annotations) - {"vectorize"}
            out.append((lp.dim, step, ann) if ann else (lp.dim, step))
        return out
    return outer


def isolate(tree: LoopTree, stmt: Compute) -> int:
    """The top-level node holding `stmt` and nothing else."""
    for i, node in enumerate(tree.body):
        held = list(statements(node))
        if any(s is stmt for s in held):
            if len(held) != 1:
                others = ", ".join(s.name for s in held if s is not stmt)
                raise ScheduleError(f"tensorize {stmt.name}: it shares its loops with {others}; the "
                                    "instruction's loops must be its own (give it loops of its own)")
            return i
    raise ScheduleError(f"tensorize {stmt.name}: not a statement of this tree")  # pragma: no cover


def splice(tree: LoopTree, at: int, part: LoopTree) -> LoopTree:
    """`tree` with its top-level node `at` replaced by the nodes of `part` (a rewrite of that node
    alone, which holds every buffer and dimension of `tree` plus its own)."""
    return LoopTree(part.buffers, part.dims, tree.body[:at] + part.body + tree.body[at + 1:])


def alone(tree: LoopTree, at: int) -> LoopTree:
    return LoopTree(tree.buffers, tree.dims, (tree.body[at],))


def loop_vars(tree: LoopTree) -> frozenset[str]:
    """Every loop variable of `tree`: a part rewritten alone must not reuse one."""
    return frozenset(n.var for _, n in tree.walk() if isinstance(n, Loop))


def _on_tiles(part: LoopTree, tiles: list[TensorInstr], stack, avoid, why: list[str]):
    """(`part` on tile blocks keeping the schedule's loops (TileSchedule), the instruction), or
    None with each entry's reason added to `why`. Each entry whose row operand is the output's
    rows first, then transposed (tiles.tensorize_tiles): the compile's own order of preference."""
    from .tiles import tensorize_tiles

    reasons = {}
    for transposed in (False, True):
        for instr in tiles:
            try:
                return tensorize_tiles(part, instr, avoid=avoid, transposed=transposed,
                                       schedule=TileSchedule(stack)).tree, instr
            except (ScheduleError, UnsupportedError) as e:
                reasons.setdefault(instr.name, str(e).removeprefix(instr.name + ": "))
    why += [f"{name}: {reason}" for name, reason in reasons.items()]
    return None


def tensorize_requested(tree: LoopTree, stack, stmt: Compute, target, features):
    """(tree with `stmt` tensorized on the schedule's loops, instruction); ScheduleError with each
    candidate's reason when none applies."""
    at = isolate(tree, stmt)
    found = candidates(stmt.tensorize, target, features)
    why, tiles = [], []
    for instr in found:
        if not instr.runs_on(features) or instr.isa != target.arch:
            why.append(f"{instr.name}: {target.name} code cannot use it (needs {', '.join(sorted(instr.features))})")
            continue
        if instr.tile:
            tiles.append(instr)
            continue
        if instr.vector_bits != target.vector_bits:
            why.append(f"{instr.name}: {instr.vector_bits}-bit; {target.name} code is {target.vector_bits}-bit vectors")
            continue
        try:
            part = tensorize(alone(tree, at), instr, outer=outer_loops(stack), avoid=loop_vars(tree)).tree
        except (ScheduleError, UnsupportedError) as e:
            why.append(f"{instr.name}: {str(e).removeprefix(instr.name + ' ')}")
            continue
        return splice(tree, at, part), instr
    done = tiles and _on_tiles(alone(tree, at), tiles, stack, loop_vars(tree), why)
    if done:
        return splice(tree, at, done[0]), done[1]
    if not why:
        why = [f"{target.name} has no tensorized instruction"]
    raise ScheduleError(f"tensorize {stmt.name} ({stmt.tensorize}): no instruction applies on {target.name}:\n  "
                        + "\n  ".join(why))
