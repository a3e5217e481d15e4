"""Code for one top-level node of a loop tree: a function `void f(void **args, i64 start, i64 end)`.

The walk obeys the user's loop order (paper §5.1). Per loop it decides only *how* to
emit it:
  - runtime loop: a counter register, increments of the pointers its statements use, a
    partial last iteration emitted once more after the loop with the smaller range (tails
    are specialised code, with half the unroll limit of the code around them, so that
    tails nested in tails do not multiply it);
  - unrolled: the body repeated with the loop's offset folded into displacements —
    when annotated "unroll", when the whole loop fits the unroll limit, or when it
    indexes the output inside a register block (accumulators need static names);
  - coalesced: a runtime loop whose only child's full trip moves every pointer as one of
    its own iterations does runs as one loop with its child (the same iterations, in order);
  - vectorised: the innermost loop, `width` lanes at a time, a masked last vector;
  - register block: the outermost loop whose output block fits in the vector
    registers (and that does not index the output above runtime reduction loops); its
    accumulators are loaded (or initialised) before it and stored (after post-ops) once
    after it. Its innermost reduction loop runs UNROLL_REDUCTION iterations a trip, and a
    block with fewer accumulators than the FMA latency needs keeps a second set that
    alternate iterations update. A block that re-reads a tile of an operand streamed from
    beyond L2 starts by prefetching its share of the next tile (backend.prefetch).
Straight-line code between control-flow points is collected as statement instances and
emitted together, so loads used several times are loaded once (paper §5.1, reuse).

The walk names no instruction: it asks the instruction set's Emitter (backend/emitter.py;
backend/x86, backend/aarch64) for every instruction, register and branch, so every CPU
instruction set shares it.
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import mul

from ..errors import ScheduleError, UnsupportedError
from ..looptree.ir import REDUCE_IDENTITY, Compute, Const, Dot, Load, Loop, LoopTree, loop_var, statements
from .analysis import (
    VectorPlan, block_chain, chain_below, footprint_of, indexes_output, loop_delta, perfect_statement,
    reads_output, reduction_loops, subtree_size, trips, uses_heavy_math,
)
from .emitter import Emitter
from .prefetch import LINE, prefetch_plans
from .values import Shape, Val, shape_of

UNROLL_REDUCTION = 2   # iterations per trip of a register block's innermost reduction loop


def max_accumulators(target, stmt: Compute) -> int:
    """Vector registers a register block may take, leaving room to evaluate the statement
    (exp, log and the like take 4 more temporaries; a tensorized dot product the scratch
    registers its implementation names)."""
    heavy = uses_heavy_math(stmt.expr) or uses_heavy_math(stmt.post) or uses_heavy_math(stmt.init)
    scratch = _instruction(stmt.expr.instr).scratch if isinstance(stmt.expr, Dot) else 0
    return target.block_registers - (4 if heavy else 0) - scratch


def is_tile_statement(stmt: Compute) -> bool:
    """A Dot of a tile instruction (AMX): one statement per tile of accumulators."""
    return isinstance(stmt.expr, Dot) and _instruction(stmt.expr.instr).tile


def _instruction(name: str):
    """The registry entry of a Dot; the registry is loaded by the first program that has one."""
    from .tensorize.registry import instruction

    return instruction(name)


@dataclass
class Block:
    stmt: Compute
    root: Loop
    accs: dict[int, int]                 # output displacement -> accumulator register
    along_output: bool
    # the innermost reduction loop of the block runs `factor` iterations per trip (fewer loop
    # exits and pointer updates per FMA); a block too small to hide the FMA latency keeps a
    # second accumulator set that alternate iterations of that loop update, combined with the
    # first once after the block
    inner: Loop | None = None
    factor: int = 1
    alt: dict[int, int] | None = None    # output displacement -> second accumulator register

    def acc_set(self, chain: int) -> dict[int, int]:
        return self.alt if chain else self.accs

    def chain_of(self, lp: Loop, iteration: int, default: int) -> int:
        """The accumulator set iteration `iteration` of `lp` updates."""
        if lp is self.inner and self.alt is not None:
            return iteration % 2
        return default

    def chains_of(self, lp: Loop, count: int, default: int) -> list[int]:
        """chain_of for iterations 0 .. count - 1 of `lp`."""
        if lp is self.inner and self.alt is not None:
            return [it % 2 for it in range(count)]
        return [default] * count


class Ctx:
    """Where the walk is: each dimension's range in the loop being emitted (`ranges`), the
    offsets the unrolled loops around fixed (`static`: a dimension's summed offset, and `@var`
    per loop), and the register block being filled. A context and those made from it share a
    dict that neither changes: `child` copies `ranges` (its caller narrows a loop there), `at`
    copies `static`. The walk makes one per static iteration, so this is a slotted class."""

    __slots__ = ("ranges", "static", "unrolling", "block", "chain", "budget")

    def __init__(self, ranges: dict[str, int], static: dict[str, int], unrolling: bool = False,
                 block: Block | None = None, chain: int = 0, budget: int = 0):
        self.ranges = ranges
        self.static = static
        self.unrolling = unrolling
        self.block = block
        self.chain = chain               # which accumulator set of a split block (0 or 1)
        self.budget = budget             # unroll limit here: halved in each specialised tail

    def child(self, unrolling: bool | None = None, block: Block | None = None, chain: int | None = None,
              budget: int | None = None) -> "Ctx":
        """A context with a copy of the ranges, and the fields given (those left None kept)."""
        return Ctx(self.ranges.copy(), self.static, self.unrolling if unrolling is None else unrolling,
                   self.block if block is None else block, self.chain if chain is None else chain,
                   self.budget if budget is None else budget)

    def at(self, dim: str, var: str, offset: int, chain: int | None = None) -> "Ctx":
        """The context `offset` into loop `var` over `dim` (`var` as Affine terms name it)."""
        static = self.static.copy()
        static[dim] = static.get(dim, 0) + offset
        static[var] = offset
        return Ctx(self.ranges, static, self.unrolling, self.block, self.chain if chain is None else chain,
                   self.budget)


# One statement at one static point, as a plain tuple (the walk collects one per statement per
# point of the unrolled code, and a tuple is one instruction to build):
#   (stmt, static point, Shape, accumulator register or None, blend, accumulator set or None,
#    output displacement)
# In a register block, the accumulator set maps output displacements to registers (`acc` is its
# entry for the point) and `blend` says the lanes past a reduction tail must be set to the identity;
# outside one (acc None), the instance loads and stores its output.
Instance = tuple


def _counters_needed(node) -> int:
    """Loop counters a nest can hold open at once, at most: the loops of its deepest path, less
    the innermost, which is a contraction's vector loop or unrolled in its register block (a
    prefetch plan is only made for a reduction's operand)."""
    if not isinstance(node, Loop):
        return 0
    below = [_counters_needed(n) + 1 for n in node.body if isinstance(n, Loop)]
    return max(below, default=0)


class SegmentCompiler:
    """One top-level node of a tree as one function, its instructions chosen by `isa` (an
    Emitter subclass) into the assembler `asm`."""

    def __init__(self, asm, target, tree: LoopTree, node, slots: dict[str, int], unroll_limit: int,
                 isa: type[Emitter]):
        self.target = target
        self.tree = tree
        self.node = node
        self.slots = slots
        self.limit = unroll_limit
        self.em: Emitter = isa(asm, target, tree)
        self._vector_plan = isa.vector_plan_for(target)
        self.width = self.em.width
        self.pending: list[Instance] = []
        self._plans: dict[int, VectorPlan | None] = {}
        self._loop_streams: dict[int, set] = {}
        self._loop_deltas: dict[tuple, list] = {}   # see _deltas
        self._loop_vars: dict[int, str] = {}        # id(loop) -> loop_var(its var)
        self._enclosing: dict[int, tuple] | None = None     # id(node) -> loops around it
        self._dims_under: dict[int, tuple] = {}     # id(node) -> dimensions of the loops under it
        self._sizes: dict[tuple, int] = {}          # see _subtree_size, _max_accumulators
        self._block_chains: dict[int, tuple] = {}   # id(loop) -> analysis.block_chain
        self.prefetches: list = []      # backend.prefetch plans with a pointer register
        self.body_start = 0             # instructions of the prologue, once compiled
        self.flushes = 0                # flush() calls so far (see _static_iterations)

    def plan(self, tree, lp: Loop) -> VectorPlan | None:
        """vector_plan, once per loop of this segment."""
        key = id(lp)
        if key not in self._plans:
            self._plans[key] = self._vector_plan(tree, lp)
        return self._plans[key]

    def _subtree_size(self, node, ranges: dict[str, int]) -> int:
        """analysis.subtree_size, once per node and ranges of the dimensions under it."""
        key = (id(node), tuple(map(ranges.get, self._dims_of(node))))
        size = self._sizes.get(key)
        if size is None:
            size = self._sizes[key] = subtree_size(self.tree, node, ranges, self.width, self.plan,
                                                   self._subtree_size)
        return size

    def _dims_of(self, node) -> tuple:
        """The dimensions of the loops under `node` (itself included), once per node."""
        dims = self._dims_under.get(id(node))
        if dims is None:
            # each loop's dimension, then its children's in program order (each once); the
            # children's own tuples are kept as well, so each node of a nest is collected once
            if isinstance(node, Loop):
                found = {node.dim: None}
                for child in node.body:
                    found.update(dict.fromkeys(self._dims_of(child)))
                dims = tuple(found)
            else:
                dims = ()
            self._dims_under[id(node)] = dims
        return dims

    # -- the function --------------------------------------------------------------
    def compile(self) -> None:
        self.prologue()
        self.body_start = len(self.em.asm)
        tiles = any(is_tile_statement(s) for s in statements(self.node))
        if tiles:                       # the tile configuration, loaded once per function
            self.em.tile_begin()
        ctx = Ctx({}, {}, budget=self.limit)
        if isinstance(self.node, Loop) and "parallel" in self.node.annotations:
            self._parallel_loop(self.node, ctx)
        else:
            self.gen([self.node], ctx)
        self.flush()
        if tiles:
            self.em.tile_end()
        self.em.epilogue()

    def prologue(self) -> None:
        """Pointer registers for the access streams (and prefetch pointers), the rest to loop
        counters, and the function's prologue loading the pointers from their argument slots."""
        streams = self._streams()
        regs = list(self.em.pointer_registers)
        if len(streams) > len(regs) - 2:
            raise UnsupportedError(
                f"{len(streams)} distinct access streams in one nest exceed the {len(regs) - 2} "
                "pointer registers; stage some inputs (copy_input) to share layouts")
        # operands that stream from beyond L2 get a prefetch pointer, while the loop counters
        # keep registers of their own (counters are taken outermost first: one too few would put
        # the innermost runtime loop's counter on the stack)
        plans = [p for p in prefetch_plans(self.tree, self.node, self.target.l2, lambda t, a: self.em.bytemap(a))
                 if p.stream not in streams]
        self.prefetches = plans[:max(0, len(regs) - len(streams) - _counters_needed(self.node))]
        pointers = {}
        for s in streams + [p.stream for p in self.prefetches]:
            pointers[s] = regs.pop(0)
        em = self.em
        em.pointers.update(pointers)
        em.use_counters(regs)
        em.prologue(self.slots)

    def _streams(self) -> list[tuple]:
        seen: dict[tuple, None] = {}
        for s in statements(self.node):
            for acc in (s.out, *s.reads()):
                seen.setdefault(self.em.bytemap(acc).stream, None)
        return list(seen)

    # -- walking -------------------------------------------------------------------
    def gen(self, nodes, ctx: Ctx) -> None:
        for node in nodes:
            if isinstance(node, Compute):
                self.statement(node, ctx, shape_of(False, 1, self.width, None))
            else:
                self.loop(node, ctx)

    def loop(self, lp: Loop, ctx: Ctx) -> None:
        if "parallel" in lp.annotations:
            raise ScheduleError(f"loop {lp.var}: only an outermost loop can run in parallel")
        rng = ctx.ranges.get(lp.dim)
        if rng is None:
            rng = self.tree.dim_size(lp.dim)
        if ctx.block is None:
            stmt = perfect_statement(lp)            # kept on the loop (analysis.chain_of)
            if stmt is not None and is_tile_statement(stmt):
                # a tile instruction's accumulators are tiles: the block is the loops from its
                # reduction down, emitted by the instruction set; the loops above, as any loop
                if not indexes_output(stmt, lp):
                    self.flush()
                    self.em.tile_block(stmt, lp, ctx.static, ctx.ranges)
                    return
            elif stmt is not None and self._block_fits(lp, stmt, ctx, rng):
                self.register_block(lp, stmt, ctx)
                return
        plan = self.plan(self.tree, lp)
        if "vectorize" in lp.annotations and plan is None:
            raise ScheduleError(
                f"loop {lp.var} cannot be vectorized: it must be innermost, of step 1, and every "
                "access must be unit-stride or constant along it")
        whole = (ctx.unrolling or "unroll" in lp.annotations
                 or self._subtree_size(lp, ctx.ranges) <= ctx.budget)
        # a loop over the output inside a register block is unrolled so that its accumulators
        # have static names; the loops below it still decide for themselves (a reduction loop
        # under it stays a runtime loop instead of multiplying the block's code)
        unroll = whole or (ctx.block is not None and indexes_output(ctx.block.stmt, lp))
        if plan is not None:
            self.vector_loop(lp, plan, ctx, rng, unroll)
            return
        full, tail = trips(rng, lp.step)
        inner = ctx.child(unrolling=whole)
        inner.ranges[lp.dim] = min(lp.step, rng)
        if not unroll and self._special_runtime_loop(lp, inner, ctx, full, tail):
            return
        self._iterations(lp, inner, ctx, full, tail, unroll)

    def _iterations(self, lp: Loop, inner: Ctx, ctx: Ctx, full: int, tail: int, unroll: bool) -> None:
        """`lp`'s full iterations, static or as a runtime loop, then its partial last one."""
        runtime = not unroll and full > 1
        if runtime:
            self.runtime_loop(lp, full, lambda: self.gen(lp.body, self._with_offset(inner, lp, 0)))
        else:
            chains = ctx.block.chains_of(lp, full, ctx.chain) if ctx.block is not None else [ctx.chain] * full
            self._static_iterations(lp, inner, list(zip(range(0, full * lp.step, lp.step), chains)))
        if tail:
            t = ctx.child(unrolling=inner.unrolling, chain=self._chain(ctx, lp, full))
            if runtime:
                t.budget = self._tail_budget(ctx)
            t.ranges[lp.dim] = tail
            self._static_iteration(lp, t, 0 if runtime else full * lp.step)
        if runtime:
            self._restore(lp, full)

    @staticmethod
    def _chain(ctx: Ctx, lp: Loop, iteration: int) -> int:
        return ctx.block.chain_of(lp, iteration, ctx.chain) if ctx.block is not None else ctx.chain

    def _special_runtime_loop(self, lp: Loop, inner: Ctx, ctx: Ctx, full: int, tail: int) -> bool:
        """Emit `lp` as its block's unrolled reduction loop, or merged with its only child, when
        it is one of those; False otherwise (nothing emitted)."""
        blk = ctx.block
        if blk is not None and blk.inner is lp and full >= 2 * blk.factor:
            self._unrolled_runtime_loop(lp, inner, ctx, full, tail, blk)
            return True
        if not tail and full > 1:
            fused = self._coalescable(lp, inner)
            if fused is not None:
                self._coalesced_loop(lp, fused, inner, full)
                return True
        return False

    def _coalescable(self, lp: Loop, inner: Ctx) -> Loop | None:
        """The loop `lp` can merge with: its only child, a runtime loop without a tail whose
        full trip moves every pointer under `lp` exactly as one iteration of `lp` does (a
        convolution's taps along a row and its channels: X[w + s, c] walks one contiguous
        window row). One loop of both trip counts then runs the same iterations in the same
        order, with one loop exit and one pointer reset instead of one per iteration of `lp`."""
        if len(lp.body) != 1 or not isinstance(lp.body[0], Loop):
            return None
        child = lp.body[0]
        blk = inner.block
        if blk is not None and (indexes_output(blk.stmt, lp) or indexes_output(blk.stmt, child)):
            return None
        rng = inner.ranges.get(child.dim, self.tree.dim_size(child.dim))
        full, tail = trips(rng, child.step)
        if (tail or full < 2 or self.plan(self.tree, child) is not None or "unroll" in child.annotations
                or self._subtree_size(child, inner.ranges) <= inner.budget):
            return None
        for stream in self._streams_in(lp):
            coeffs = dict(stream[1])
            if loop_delta(coeffs, lp) != full * loop_delta(coeffs, child):
                return None
        return child

    def _coalesced_loop(self, lp: Loop, child: Loop, inner: Ctx, full: int) -> None:
        """`lp` and its only child `child` (see _coalescable) as one runtime loop over `child`."""
        outer = self._with_offset(inner, lp, 0)
        rng = outer.ranges.get(child.dim, self.tree.dim_size(child.dim))
        count = full * (rng // child.step)
        body = outer.child(unrolling=False)
        body.ranges[child.dim] = min(child.step, rng)
        blk = outer.block
        if blk is not None and blk.inner is child and count >= 2 * blk.factor:
            self._unrolled_runtime_loop(child, body, outer, count, 0, blk)
            return
        self.runtime_loop(child, count, lambda: self.gen(child.body, self._with_offset(body, child, 0)))
        self._restore(child, count)

    def _tail_budget(self, ctx: Ctx) -> int:
        """The unroll limit of a runtime loop's partial last iteration: that code is a second copy
        of the body that runs once, and tails nested in tails would multiply it (a row tail
        inside a panel tail inside a channel tail ...), so each level gets half."""
        return max(ctx.budget // 2, self.limit // 8)

    def _unrolled_runtime_loop(self, lp: Loop, inner: Ctx, ctx: Ctx, full: int, tail: int, blk: Block) -> None:
        """A block's innermost reduction loop as a runtime loop of `blk.factor` static iterations
        per trip, then the iterations left over and the tail, statically."""
        trips_, rest = divmod(full, blk.factor)

        def iterations(n: int) -> None:
            offsets = range(0, n * lp.step, lp.step)
            self._static_iterations(lp, inner, list(zip(offsets, blk.chains_of(lp, n, ctx.chain))))

        self.runtime_loop(lp, trips_, lambda: iterations(blk.factor), iterations=blk.factor)
        iterations(rest)
        if tail:
            t = ctx.child(unrolling=inner.unrolling, chain=blk.chain_of(lp, rest, ctx.chain),
                          budget=self._tail_budget(ctx))
            t.ranges[lp.dim] = tail
            self._static_iteration(lp, t, rest * lp.step)
        self._restore(lp, trips_, iterations=blk.factor)

    def _with_offset(self, ctx: Ctx, lp: Loop, offset: int, chain: int | None = None) -> Ctx:
        var = self._loop_vars.get(id(lp))
        if var is None:
            var = self._loop_vars[id(lp)] = loop_var(lp.var)
        return ctx.at(lp.dim, var, offset, chain)

    def _static_iteration(self, lp: Loop, ctx: Ctx, offset: int, chain: int | None = None) -> None:
        """The body of `lp` at `offset` (updating accumulator set `chain`, if given)."""
        self.gen(lp.body, self._with_offset(ctx, lp, offset, chain))

    def _static_iterations(self, lp: Loop, ctx: Ctx, iterations: list[tuple[int, int]]) -> None:
        """The body of `lp` at each (offset, accumulator set) of `iterations`, all of `lp`'s full
        range `ctx` gives. The first is walked; when that only collected statement instances
        (emitted nothing, flushed nothing), each other iteration with its accumulator set is
        those instances moved by its offset: nothing the walk decides depends on the offsets,
        only the instances' points do (and the accumulator of a point in a register block)."""
        template = None           # (instances, offset, set) of the first iteration
        for offset, chain in iterations:
            if template is not None and chain == template[2]:
                self.pending.extend(self._moved(template[0], lp, offset - template[1]))
                continue
            start, code, flushes = len(self.pending), len(self.em.asm), self.flushes
            self._static_iteration(lp, ctx, offset, chain)
            if template is None and (len(self.em.asm), self.flushes) == (code, flushes):
                template = (self.pending[start:], offset, chain)

    def _moved(self, instances: list[Instance], lp: Loop, delta: int) -> list[Instance]:
        """`instances` collected under an iteration of `lp`, at the iteration `delta` further on."""
        dim, var = lp.dim, loop_var(lp.var)
        displacement = self.em.displacement
        static_was = point = out_was = None     # instances at one point are adjacent and share it
        shift = 0       # bytes the output moves by (its displacement is affine in the point)
        out = []
        append = out.append
        for stmt, static, shape, _, blend, accs, disp in instances:
            if static is not static_was:
                static_was, point = static, static.copy()
                point[dim] += delta
                point[var] += delta
            if accs is None:
                append((stmt, point, shape, None, blend, None, 0))
                continue
            if stmt.out is not out_was:
                out_was = stmt.out
                shift = displacement(out_was, point) - displacement(out_was, static)
            disp += shift
            append((stmt, point, shape, accs[disp], blend, accs, disp))
        return out

    # -- runtime loops -----------------------------------------------------------------
    def _streams_in(self, lp: Loop) -> set:
        """The access streams of the statements under `lp` (the pointers it must move)."""
        key = id(lp)
        if key not in self._loop_streams:
            stmts = list(statements(lp))
            self._loop_streams[key] = {self.em.bytemap(acc).stream for s in stmts for acc in (s.out, *s.reads())}
            self._loop_streams[key] |= {p.stream for p in self.prefetches if any(s is p.stmt for s in stmts)}
        return self._loop_streams[key]

    def _deltas(self, lp: Loop, per_iteration_elems: int | None = None, iterations: int = 1):
        """(pointer, bytes) to add per `iterations` iterations of `lp`; a stream no statement
        under `lp` reads or writes stays put (its loops elsewhere move it). Made once per loop
        and arguments (a runtime loop asks at its end and again to rewind)."""
        key = (id(lp), per_iteration_elems, iterations)
        out = self._loop_deltas.get(key)
        if out is not None:
            return out
        out = []
        used = self._streams_in(lp)
        for stream, reg in self.em.pointers.items():
            if stream not in used:
                continue
            d = loop_delta(dict(stream[1]), lp, per_iteration_elems) * iterations
            if d:
                out.append((reg, d))
        self._loop_deltas[key] = out
        return out

    def runtime_loop(self, lp: Loop, count: int, body, per_iteration_elems: int | None = None,
                     iterations: int = 1) -> None:
        """`count` trips of `body`, each covering `iterations` iterations of `lp`."""
        self.flush()
        counter, top = self.em.loop_begin(lp.var, count)
        body()
        self.flush()
        self.em.loop_end(counter, top, self._deltas(lp, per_iteration_elems, iterations))

    def _restore(self, lp: Loop, count: int, per_iteration_elems: int | None = None,
                 iterations: int = 1) -> None:
        self.flush()
        for reg, d in self._deltas(lp, per_iteration_elems, iterations):
            self.em.rewind(reg, d * count)

    def _parallel_loop(self, lp: Loop, ctx: Ctx) -> None:
        """Iterations [start, end) of the outermost loop; the caller splits them over threads."""
        em = self.em
        rng = self.tree.dim_size(lp.dim)
        full, tail = trips(rng, lp.step)
        inner = ctx.child()
        inner.ranges[lp.dim] = min(lp.step, rng)
        loop = em.parallel_begin(self._deltas(lp), full)
        if loop is not None:
            counter, top, done = loop
            self.gen(lp.body, self._with_offset(inner, lp, 0))
            self.flush()
            em.loop_end(counter, top, self._deltas(lp))
            em.bind(done)
        if tail:
            skip = em.parallel_tail_begin(full)
            t = ctx.child()
            t.ranges[lp.dim] = tail
            self.gen(lp.body, self._with_offset(t, lp, 0))
            self.flush()
            em.bind(skip)

    # -- vectorised innermost loops ----------------------------------------------------
    def vector_loop(self, lp: Loop, plan: VectorPlan, ctx: Ctx, rng: int, unroll: bool) -> None:
        w = self.width
        full, tail = divmod(rng, w)
        inner = ctx.child(unrolling=True)
        inner.ranges[lp.dim] = 1

        def chunk(c: Ctx, offset: int, lanes: int):
            c2 = self._with_offset(c, lp, offset)
            for stmt in lp.body:
                if lanes < w and not self.em.vector_tail(stmt):
                    for i in range(lanes):      # a tail the instruction set cannot mask: scalars
                        self.statement(stmt, self._with_offset(c, lp, offset + i), shape_of(False, 1, w, None))
                    continue
                self.statement(stmt, c2, shape_of(True, lanes, w, lp.dim), along_output=plan.along_output)

        if unroll or full <= 1:
            for i in range(full):
                chunk(inner, i * w, w)
            if tail:
                chunk(inner, full * w, tail)
            return
        self.runtime_loop(lp, full, lambda: chunk(inner, 0, w), per_iteration_elems=w)
        if tail:
            chunk(inner, 0, tail)
        self._restore(lp, full, per_iteration_elems=w)

    # -- register blocks -------------------------------------------------------------------
    def _block_fits(self, lp: Loop, stmt: Compute, ctx: Ctx, rng: int) -> bool:
        limit = self._max_accumulators(stmt)
        if not limit:
            return False
        chain = self._block_chains.get(id(lp))
        if chain is None:
            chain = self._block_chain(lp, stmt)
        if footprint_of(chain, ctx.ranges, self.tree.dim_size, self.width, limit) > limit:
            return False
        return not self._splits_reduction(lp, stmt, ctx)

    def _block_chain(self, lp: Loop, stmt: Compute) -> tuple:
        """analysis.block_chain of `lp`, kept with those of the loops under it: each is a suffix
        of it (the walk asks the loops of a nest top down, until a block fits)."""
        chain = block_chain(self.tree, lp, stmt, self.plan)
        for i, inner in enumerate(chain_below(lp)):
            self._block_chains[id(inner)] = chain[i:]
        return chain

    def _max_accumulators(self, stmt: Compute) -> int:
        """max_accumulators, once per statement; 0 for a statement no register block can hold
        (no reduction, or one that reads its own output)."""
        key = ("max_accumulators", id(stmt))
        n = self._sizes.get(key)
        if n is None:
            blockable = stmt.reduce is not None and not reads_output(stmt)
            n = self._sizes[key] = max_accumulators(self.target, stmt) if blockable else 0
        return n

    def _splits_reduction(self, lp: Loop, stmt: Compute, ctx: Ctx) -> bool:
        """Whether `lp` indexes the output above runtime reduction loops: each of its iterations
        would then run the reduction loops on its own share of the accumulators, holding the
        others idle (a tail of the row loop, say); the loops below make better blocks."""
        if not indexes_output(stmt, lp):
            return False
        if not any(not indexes_output(stmt, inner) for inner in chain_below(lp)[1:]):
            return False
        return self._subtree_size(lp, ctx.ranges) > ctx.budget

    def register_block(self, root: Loop, stmt: Compute, ctx: Ctx) -> None:
        self.flush()
        chain = chain_below(root)
        plan = self.plan(self.tree, chain[-1])
        along = plan is None or plan.along_output
        keys = self._block_keys(chain, stmt, plan, ctx)
        em = self.em
        em.begin(stmt)
        fused = all(lp in chain for lp in reduction_loops(stmt, self._stack_to(root) + tuple(chain)))
        accs: dict[int, int] = {}
        if along and fused and stmt.init == "identity":
            # _init_accumulator's most common case, inline: every accumulator at the identity
            identity, alloc, load_const = float(REDUCE_IDENTITY[stmt.reduce]), em.regs.alloc, em.load_const
            for _, shape, disp in keys:
                if disp not in accs:
                    reg = accs[disp] = alloc()
                    load_const(reg, identity, shape)
            keys_left = ()
        else:
            keys_left = keys
        for static, shape, disp in keys_left:
            if disp in accs:
                continue
            reg = em.regs.alloc()
            accs[disp] = reg
            acc_shape = shape if along else shape_of(True, self.width, self.width, plan.loop.dim)
            self._init_accumulator(reg, stmt, static, acc_shape if along else shape_of(False, 1, self.width, None),
                                   along, fused)
        self._prefetch(root, stmt, ctx)
        inner, factor, sets = self._inner_reduction(chain, stmt, ctx, len(accs), along)
        alt = self._second_set(stmt, keys) if sets == 2 else None
        self.flush_cache_only()
        blk = Block(stmt, root, accs, along, inner, factor, alt)
        self.loop(root, ctx.child(block=blk))
        self.flush()
        em.begin(stmt)
        if alt is not None:
            self._combine_sets(stmt, keys, accs, alt)
        if along and fused and stmt.post is None and stmt.requant is None:
            # each accumulator is only stored: the cache the region began with is empty, and
            # only a store's AVX2 tail mask enters it (then flushed after that store, as the
            # general path flushes after each)
            store, release, cache = em.store_at, em.regs.release, em.regs.cache
            for static, shape, disp in keys:
                reg = accs.pop(disp, None)
                if reg is not None:
                    store(reg, stmt.out, static, disp, shape)
                    release(reg)
                    if cache:
                        self.flush_cache_only()
            self.flushes += 1
        else:
            for static, shape, disp in keys:
                reg = accs.pop(disp, None)
                if reg is None:
                    continue
                self._finish_accumulator(reg, stmt, static, shape, along, fused)
                em.regs.release(reg)
                self.flush_cache_only()
        em.drop_masks()

    def _prefetch(self, root: Loop, stmt: Compute, ctx: Ctx) -> None:
        """This pass's share of the next tile of each operand a prefetch plan names (see
        backend.prefetch), when the block runs inside the plan's pass loops."""
        if not self.prefetches:
            return
        around = {lp.var for lp in self._stack_to(root)}
        for p in self.prefetches:
            if p.stmt is stmt and set(p.passes) <= around:
                reg = self.em.pointers[p.stream]
                disp = p.displacement(ctx.static)
                for j in range(p.lines):
                    self.em.prefetch(reg, disp + LINE * j)

    def _inner_reduction(self, chain, stmt: Compute, ctx: Ctx, n_acc: int, along: bool):
        """(loop, unroll factor, accumulator sets) for the innermost reduction loop of a block
        that has at least two iterations, or (None, 1, 1).

        Its runtime form runs UNROLL_REDUCTION iterations a trip (fewer where the body would pass
        the unroll limit). Two accumulator sets when the block has fewer accumulators than the
        FMA latency needs (fma_units x fma_latency) and the registers hold a second set; the
        reduction is then reassociated, as any blocked BLAS kernel does."""
        ranges = dict(ctx.ranges)
        found, body_ranges = None, None
        for lp in chain:
            rng = ranges.get(lp.dim, self.tree.dim_size(lp.dim))
            ranges[lp.dim] = min(lp.step, rng)
            if not indexes_output(stmt, lp) and rng // lp.step >= 2:
                found, body_ranges = lp, dict(ranges)
        if found is None:
            return None, 1, 1
        sets = 1
        if (along and stmt.reduce in REDUCE_IDENTITY and n_acc < self.target.accumulators
                and 2 * n_acc <= self._max_accumulators(stmt)):
            sets = 2
        body = sum(self._subtree_size(n, body_ranges) for n in found.body)
        # a specialised tail does a small share of the work: half the unrolling there
        factor = UNROLL_REDUCTION if ctx.budget >= self.limit else max(sets, UNROLL_REDUCTION // 2)
        while factor > sets and factor * body > ctx.budget:
            factor //= 2
        return found, factor, sets

    def _second_set(self, stmt: Compute, keys) -> dict[int, int]:
        """The second accumulator set of a split block, at the reduction's identity."""
        em = self.em
        alt: dict[int, int] = {}
        for _, shape, disp in keys:
            if disp not in alt:
                alt[disp] = em.regs.alloc()
                em.load_const(alt[disp], REDUCE_IDENTITY[stmt.reduce],
                              shape_of(shape.vector, self.width, self.width, None))
        return alt

    def _combine_sets(self, stmt: Compute, keys, accs: dict[int, int], alt: dict[int, int]) -> None:
        em = self.em
        for _, shape, disp in keys:
            reg = alt.pop(disp, None)
            if reg is None:
                continue
            full = shape_of(shape.vector, self.width, self.width, None)
            em.arith(stmt.reduce, accs[disp], accs[disp], Val(reg=reg), full)
            em.regs.release(reg)

    def _stack_to(self, root: Loop) -> tuple:
        """Loops enclosing `root` in this segment (for the reduction-loop test)."""
        if self._enclosing is None:
            self._enclosing = {}

            def walk(node, stack):
                self._enclosing[id(node)] = stack
                if isinstance(node, Loop):
                    for n in node.body:
                        walk(n, stack + (node,))

            walk(self.node, ())
        return self._enclosing[id(root)]

    def _block_keys(self, chain, stmt, plan, ctx):
        """(static point, shape, output displacement) of every accumulator of the block, in emission
        order (the points the walk's contexts would reach, as plain dicts: see Ctx.at)."""
        keys = []
        width, dim_size = self.width, self.tree.dim_size
        scalar = shape_of(False, 1, width, None)
        along = plan.loop if plan is not None and plan.along_output else None
        last = len(chain)
        output_vars = [loop_var(lp.var) if indexes_output(stmt, lp) else None for lp in chain]

        def rec(i, static, ranges):
            if i == last:
                keys.append((static, scalar))
                return
            lp = chain[i]
            dim = lp.dim
            rng = ranges.get(dim, dim_size(dim))
            var = output_vars[i]
            if var is None:         # a reduction loop: its first iteration's range
                inner = ranges.copy()
                inner[dim] = min(lp.step, rng)
                rec(i + 1, static, inner)
                return
            base = static.get(dim, 0)
            if lp is along:
                for off in range(0, rng, width):
                    point = static.copy()
                    point[dim] = base + off
                    point[var] = off
                    keys.append((point, shape_of(True, min(width, rng - off), width, dim)))
                return
            full, tail = trips(rng, lp.step)
            for it in range(full + (1 if tail else 0)):
                point = static.copy()
                point[dim] = base + it * lp.step
                point[var] = it * lp.step
                inner = ranges.copy()
                inner[dim] = lp.step if it < full else tail
                rec(i + 1, point, inner)

        rec(0, ctx.static, ctx.ranges)
        if plan is not None and not plan.along_output:
            keys = [(s, shape_of(True, width, width, plan.loop.dim)) for s, _ in keys]
        base = self.em._base(stmt.out)          # Emitter.displacement, its base looked up once
        const, names, factors, zeros = base[2], base[5], base[6], base[7]
        return [(s, shape, const + sum(map(mul, factors, map(s.get, names, zeros)))) for s, shape in keys]

    def _init_accumulator(self, reg, stmt, static, shape, along, fused):
        em = self.em
        if not along:
            em.load_const(reg, REDUCE_IDENTITY[stmt.reduce], shape_of(True, self.width, self.width, None))
            return
        if fused and stmt.init is not None:
            if stmt.init == "identity":
                em.load_const(reg, float(REDUCE_IDENTITY[stmt.reduce]), shape)
                return
            init = stmt.init
            if isinstance(init, Const):
                em.load_const(reg, float(init.value), shape)
                return
            val = em.to_reg(em.eval(init, static, shape), shape)
            em.copy(reg, val.reg, shape)
            em.free(val)
            return
        self._load_out(reg, stmt, static, shape)

    def _load_out(self, reg, stmt, static, shape):
        em = self.em
        dtype = self.tree.buffer(stmt.out.buffer).dtype
        em.load_into(reg, em.address(stmt.out, static), em.output_kind(dtype, shape), shape, dtype)

    def _finish_accumulator(self, reg, stmt, static, shape, along, fused):
        em = self.em
        if not along:
            em.hreduce(reg, stmt.reduce)
            shape = shape_of(False, 1, self.width, None)
            if not (fused and stmt.init == "identity"):
                other = Load(stmt.out) if not fused or stmt.init is None else stmt.init
                val = em.eval(other, static, shape, foldable=True)
                em.arith(stmt.reduce, reg, reg, val, shape)
                em.free(val)
        if fused and stmt.post is not None:
            val = em.eval(stmt.post, static, shape, acc=Val(reg=reg))
            if val.reg != reg:
                em.copy(reg, val.reg, shape)
                em.free(val)
        if stmt.requant is not None:
            if not fused:
                raise UnsupportedError(f"statement {stmt.name}: a requantized sum is finished where its "
                                       "reduction ends; keep its reduction loops inside one register block")
            em.requant(reg, stmt, static, shape)
        self.em.store(reg, stmt.out, static, shape)

    # -- statements -----------------------------------------------------------------------
    def statement(self, stmt: Compute, ctx: Ctx, shape: Shape, along_output: bool = True) -> None:
        blk = ctx.block
        if blk is not None and blk.stmt is stmt:
            disp = self.em.displacement(stmt.out, ctx.static)
            blend = (not blk.along_output) and shape.masked and not self.em.zero_safe(stmt, shape)
            accs = blk.acc_set(ctx.chain)
            self.pending.append((stmt, ctx.static, shape, accs[disp], blend, accs, disp))
        else:
            self.pending.append((stmt, ctx.static, shape, None, False, None, 0))

    def flush_cache_only(self) -> None:
        self.flushes += 1
        self.em.regs.flush_cache()

    def flush(self) -> None:
        """Emit the collected straight-line instances."""
        self.flushes += 1
        if not self.pending:
            return
        em = self.em
        todo, self.pending = self.pending, []
        em.regs.flush_cache()
        first = todo[0][0]
        if not em.fma_run(first, todo) and not em.copy_run(first, todo):
            self._instances(todo)
        em.versions = {}
        em.instance_keys = {}
        em.regs.flush_cache()
        em.drop_masks()

    def _instances(self, todo: list[Instance]) -> None:
        """flush's emission of any region: each instance's loads counted, then each emitted."""
        em = self.em
        versions: dict[str, int] = {}
        snapshots = []          # per instance: (stores so far per buffer, its load keys)
        count_loads, instance_loads = em.count_loads, em.instance_loads
        stmt, loads, memory = None, None, None
        for position, (this, static, shape, acc, _, _, _) in enumerate(todo):
            em.versions = versions     # replaced, never changed, at each store: a snapshot
            if this is not stmt or (acc is None) is not memory:
                stmt, memory = this, acc is None
                loads = instance_loads(stmt, memory)
            snapshots.append((versions, count_loads(loads, static, shape, position)))
            if memory:      # block accumulators are stored after the region
                versions = dict(versions)
                versions[stmt.out.buffer] = versions.get(stmt.out.buffer, 0) + 1
        stmt = None
        accumulate = em.accumulate
        for (this, static, shape, acc, blend, _, _), (em.versions, em.instance_keys) in zip(todo, snapshots):
            if this is not stmt:       # an unrolled run is instances of one statement
                stmt = this
                em.begin(stmt)
            if acc is not None:
                accumulate(acc, stmt, static, shape, blend)
            else:
                self._memory_instance(stmt, static, shape)

    def _memory_instance(self, stmt: Compute, static: dict[str, int], shape: Shape) -> None:
        em = self.em
        if stmt.reduce is None and stmt.post is None and stmt.requant is None and type(stmt.expr) is Load:
            val = em.load(stmt.expr.access, static, shape, False)     # a copy: eval, inline
            em.store(val.reg, stmt.out, static, shape)
            em.free(val)
            return
        if stmt.reduce is None:
            val = em.to_reg(em.eval(stmt.expr, static, shape), shape)
            if stmt.post is not None:
                res = em.to_reg(em.eval(stmt.post, static, shape, acc=val), shape)
                if res.reg != val.reg:
                    em.free(val)
                val = res
            if stmt.requant is not None:
                if not val.owned:          # a cached load: requantize a copy
                    reg = em.regs.alloc()
                    em.copy(reg, val.reg, shape)
                    val = Val(reg=reg, owned=True)
                em.requant(val.reg, stmt, static, shape)
            em.store(val.reg, stmt.out, static, shape)
            em.free(val)
            return
        reg = em.regs.alloc()
        if stmt.init is not None:    # no reduction loops: init and post fuse here
            init = Const(REDUCE_IDENTITY[stmt.reduce]) if stmt.init == "identity" else stmt.init
            val = em.to_reg(em.eval(init, static, shape), shape)
            em.copy(reg, val.reg, shape)
            em.free(val)
        else:
            dtype = self.tree.buffer(stmt.out.buffer).dtype
            em.load_into(reg, em.address(stmt.out, static), em.output_kind(dtype, shape), shape, dtype)
        em.regs.pinned.add(reg)
        em.accumulate(reg, stmt, static, shape, blend=False)
        if stmt.post is not None:
            val = em.eval(stmt.post, static, shape, acc=Val(reg=reg))
            if val.reg != reg:
                em.copy(reg, val.reg, shape)
                em.free(val)
        if stmt.requant is not None:
            if stmt.init is None:
                raise UnsupportedError(f"statement {stmt.name}: a requantized sum split over several nests")
            em.requant(reg, stmt, static, shape)
        em.regs.pinned.discard(reg)
        em.store(reg, stmt.out, static, shape)
        em.regs.release(reg)

