"""Code for one top-level node of a loop tree: a function `void f(void **args, i64 start, i64 end)`.

The walk obeys the user's loop order (paper §5.1). Per loop it decides only *how* to
emit it:
  - runtime loop: a counter register, pointer increments, a partial last iteration
    emitted once more after the loop with the smaller range (tails are specialised code);
  - unrolled: the body repeated with the loop's offset folded into displacements —
    when annotated "unroll", when the whole loop fits the unroll limit, or when it
    indexes the output inside a register block (accumulators need static names);
  - vectorised: the innermost loop, `width` lanes at a time, a masked last vector;
  - register block: the outermost loop whose output block fits in the vector
    registers; its accumulators are loaded (or initialised) before it and stored
    (after post-ops) once after it.
Straight-line code between control-flow points is collected as statement instances and
emitted together, so loads used several times are loaded once (paper §5.1, reuse).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ScheduleError, UnsupportedError
from ...isa.x86.operands import GPR64, Gpr, Mem, rax, rbp, rbx, rdi, rdx, rsi, rsp, r12, r13, r14, r15
from ...looptree.ir import REDUCE_IDENTITY, Compute, Const, Load, Loop, LoopTree, loop_var, statements
from ..analysis import (
    VectorPlan, block_footprint, byte_map, chain_below, indexes_output, loop_delta, perfect_statement,
    reads_output, reduction_loops, subtree_size, trips, uses_heavy_math, vector_plan,
)
from .emitter import Emitter, Shape, Val

CALLEE_SAVED = (rbx, rbp, r12, r13, r14, r15)
# rax is the scratch register; rsp the stack; everything else can hold pointers and counters
ALLOCATABLE = tuple(r for r in GPR64 if r not in (rax, rsp))
FRAME = 128            # start/end, and counters that do not fit in registers
START_SLOT, END_SLOT = 0, 8


def max_accumulators(target, stmt: Compute) -> int:
    """Vector registers a register block may take, leaving room to evaluate the statement."""
    reserve = 3
    if uses_heavy_math(stmt.expr) or uses_heavy_math(stmt.post) or uses_heavy_math(stmt.init):
        reserve += 4
    if target.vector_bits != 512:
        reserve += 1   # an AVX2 tail mask lives in a vector register
    return target.vector_registers - reserve


@dataclass
class Block:
    stmt: Compute
    root: Loop
    accs: dict[int, int]                 # output displacement -> accumulator register
    along_output: bool


@dataclass
class Ctx:
    ranges: dict[str, int]
    static: dict[str, int]
    unrolling: bool = False
    block: Block | None = None

    def child(self, **kw) -> "Ctx":
        c = Ctx(dict(self.ranges), dict(self.static), self.unrolling, self.block)
        for k, v in kw.items():
            setattr(c, k, v)
        return c


@dataclass
class Instance:
    stmt: Compute
    static: dict[str, int]
    shape: Shape
    acc: int | None = None
    blend: bool = False


class SegmentCompiler:
    def __init__(self, asm, target, tree: LoopTree, node, slots: dict[str, int], unroll_limit: int):
        self.asm = asm
        self.target = target
        self.tree = tree
        self.node = node
        self.slots = slots
        self.limit = unroll_limit
        self.width = target.lanes("float32")
        self.pending: list[Instance] = []
        self.free_gprs: list[Gpr] = []
        self.stack_slots = FRAME // 8 - 1
        self.next_slot = 2        # 0: start, 1: end
        self.em: Emitter | None = None
        self._plans: dict[int, VectorPlan | None] = {}

    def plan(self, tree, lp: Loop) -> VectorPlan | None:
        """vector_plan, once per loop of this segment."""
        key = id(lp)
        if key not in self._plans:
            self._plans[key] = vector_plan(tree, lp, lambda t, a: self.em.bytemap(a))
        return self._plans[key]

    # -- the function --------------------------------------------------------------
    def compile(self) -> None:
        a = self.asm
        streams = self._streams()
        regs = list(ALLOCATABLE)
        if len(streams) > len(regs) - 2:
            raise UnsupportedError(
                f"{len(streams)} distinct access streams in one nest exceed the {len(regs) - 2} "
                "pointer registers; stage some inputs (copy_input) to share layouts")
        pointers = {}
        for s in streams:
            pointers[s] = regs.pop(0)
        self.free_gprs = regs
        self.em = Emitter(a, self.target, self.tree, pointers)
        for r in CALLEE_SAVED:
            a.emit("push", r)
        a.emit("sub", rsp, FRAME)
        a.emit("mov", rax, rdi)
        a.emit("mov", Mem(rsp, disp=START_SLOT, bits=64), rsi)
        a.emit("mov", Mem(rsp, disp=END_SLOT, bits=64), rdx)
        for s, reg in pointers.items():
            a.emit("mov", reg, Mem(rax, disp=8 * self.slots[s[0]], bits=64))
        ctx = Ctx({}, {})
        if isinstance(self.node, Loop) and "parallel" in self.node.annotations:
            self._parallel_loop(self.node, ctx)
        else:
            self.gen([self.node], ctx)
        self.flush()
        a.emit("add", rsp, FRAME)
        for r in reversed(CALLEE_SAVED):
            a.emit("pop", r)
        a.emit("vzeroupper")
        a.emit("ret")

    def _streams(self) -> list[tuple]:
        seen: dict[tuple, None] = {}
        for s in statements(self.node):
            for acc in (s.out, *s.reads()):
                seen.setdefault(byte_map(self.tree, acc).stream, None)
        return list(seen)

    # -- walking -------------------------------------------------------------------
    def gen(self, nodes, ctx: Ctx) -> None:
        for node in nodes:
            if isinstance(node, Compute):
                self.statement(node, ctx, Shape(False, 1, self.width, None))
            else:
                self.loop(node, ctx)

    def loop(self, lp: Loop, ctx: Ctx) -> None:
        if "parallel" in lp.annotations:
            raise ScheduleError(f"loop {lp.var}: only an outermost loop can run in parallel")
        rng = ctx.ranges.get(lp.dim, self.tree.dim_size(lp.dim))
        if ctx.block is None:
            stmt = perfect_statement(lp)
            if stmt is not None and self._block_fits(lp, stmt, ctx, rng):
                self.register_block(lp, stmt, ctx)
                return
        plan = self.plan(self.tree, lp)
        if "vectorize" in lp.annotations and plan is None:
            raise ScheduleError(
                f"loop {lp.var} cannot be vectorized: it must be innermost, of step 1, and every "
                "access must be unit-stride or constant along it")
        unroll = (ctx.unrolling or "unroll" in lp.annotations
                  or (ctx.block is not None and indexes_output(ctx.block.stmt, lp))
                  or subtree_size(self.tree, lp, ctx.ranges, self.width, self.plan) <= self.limit)
        if plan is not None:
            self.vector_loop(lp, plan, ctx, rng, unroll)
            return
        full, tail = trips(rng, lp.step)
        inner = ctx.child(unrolling=unroll or ctx.unrolling)
        inner.ranges[lp.dim] = min(lp.step, rng)
        if unroll or full <= 1:
            for it in range(full):
                self._static_iteration(lp, inner, it * lp.step)
        else:
            self.runtime_loop(lp, full, lambda: self.gen(lp.body, self._with_offset(inner, lp, 0)))
        if tail:
            t = ctx.child(unrolling=inner.unrolling)
            t.ranges[lp.dim] = tail
            self._static_iteration(lp, t, full * lp.step if (unroll or full <= 1) else 0)
        if not unroll and full > 1:
            self._restore(lp, full)

    def _with_offset(self, ctx: Ctx, lp: Loop, offset: int) -> Ctx:
        c = ctx.child()
        c.static[lp.dim] = c.static.get(lp.dim, 0) + offset
        c.static[loop_var(lp.var)] = offset
        return c

    def _static_iteration(self, lp: Loop, ctx: Ctx, offset: int) -> None:
        self.gen(lp.body, self._with_offset(ctx, lp, offset))

    # -- runtime loops -----------------------------------------------------------------
    def _counter(self):
        if self.free_gprs:
            return self.free_gprs.pop(0)
        if self.next_slot >= FRAME // 8:
            raise UnsupportedError("loop nest too deep: more than 14 runtime loops are open")
        m = Mem(rsp, disp=8 * self.next_slot, bits=64)
        self.next_slot += 1
        return m

    def _release_counter(self, c) -> None:
        if isinstance(c, Gpr):
            self.free_gprs.insert(0, c)
        else:
            self.next_slot -= 1

    def _deltas(self, lp: Loop, per_iteration_elems: int | None = None):
        out = []
        for (_, coeffs), reg in self.em.pointers.items():
            d = loop_delta(dict(coeffs), lp, per_iteration_elems)
            if d:
                out.append((reg, d))
        return out

    def runtime_loop(self, lp: Loop, count: int, body, per_iteration_elems: int | None = None) -> None:
        self.flush()
        a = self.asm
        c = self._counter()
        a.emit("mov", c, count)
        top = a.label(f"{lp.var}_top")
        a.bind(top)
        body()
        self.flush()
        for reg, d in self._deltas(lp, per_iteration_elems):
            a.emit("add", reg, d)
        a.emit("dec", c)
        a.emit("jne", top)
        self._release_counter(c)

    def _restore(self, lp: Loop, count: int, per_iteration_elems: int | None = None) -> None:
        self.flush()
        for reg, d in self._deltas(lp, per_iteration_elems):
            total = d * count
            if -2**31 <= total < 2**31:
                self.asm.emit("sub", reg, total)
            else:
                self.asm.emit("mov", rax, total)
                self.asm.emit("sub", reg, rax)

    def _parallel_loop(self, lp: Loop, ctx: Ctx) -> None:
        """Iterations [start, end) of the outermost loop; the caller splits them over threads."""
        a = self.asm
        rng = self.tree.dim_size(lp.dim)
        full, tail = trips(rng, lp.step)
        inner = ctx.child()
        inner.ranges[lp.dim] = min(lp.step, rng)
        start = Mem(rsp, disp=START_SLOT, bits=64)
        end = Mem(rsp, disp=END_SLOT, bits=64)
        for reg, d in self._deltas(lp):
            a.emit("mov", rax, start)
            a.emit("imul", rax, rax, d)
            a.emit("add", reg, rax)
        if full:
            c = self._counter()
            done = a.label("par_done")
            a.emit("mov", rax, end)
            a.emit("cmp", rax, full)
            clamp = a.label("par_clamped")
            a.emit("jle", clamp)
            a.emit("mov", rax, full)
            a.bind(clamp)
            a.emit("sub", rax, start)
            a.emit("mov", c, rax)
            a.emit("cmp", rax, 0)
            a.emit("jle", done)
            top = a.label("par_top")
            a.bind(top)
            self.gen(lp.body, self._with_offset(inner, lp, 0))
            self.flush()
            for reg, d in self._deltas(lp):
                a.emit("add", reg, d)
            a.emit("dec", c)
            a.emit("jne", top)
            a.bind(done)
            self._release_counter(c)
        if tail:
            skip = a.label("par_no_tail")
            a.emit("mov", rax, end)
            a.emit("cmp", rax, full)
            a.emit("jle", skip)
            t = ctx.child()
            t.ranges[lp.dim] = tail
            self.gen(lp.body, self._with_offset(t, lp, 0))
            self.flush()
            a.bind(skip)

    # -- vectorised innermost loops ----------------------------------------------------
    def vector_loop(self, lp: Loop, plan: VectorPlan, ctx: Ctx, rng: int, unroll: bool) -> None:
        w = self.width
        full, tail = divmod(rng, w)
        inner = ctx.child(unrolling=True)
        inner.ranges[lp.dim] = 1

        def chunk(c: Ctx, offset: int, lanes: int):
            c2 = self._with_offset(c, lp, offset)
            for stmt in lp.body:
                self.statement(stmt, c2, Shape(True, lanes, w, lp.dim), along_output=plan.along_output)

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
        if stmt.reduce is None or reads_output(stmt):
            return False
        limit = max_accumulators(self.target, stmt)
        return block_footprint(self.tree, lp, stmt, ctx.ranges, self.width, limit, self.plan) <= limit

    def register_block(self, root: Loop, stmt: Compute, ctx: Ctx) -> None:
        self.flush()
        chain = chain_below(root)
        plan = self.plan(self.tree, chain[-1])
        along = plan is None or plan.along_output
        keys = self._block_keys(chain, stmt, plan, ctx)
        em = self.em
        fused = all(lp in chain for lp in reduction_loops(stmt, self._stack_to(root) + tuple(chain)))
        accs: dict[int, int] = {}
        for static, shape in keys:
            disp = em.address(stmt.out, static).disp
            if disp in accs:
                continue
            reg = em.regs.alloc()
            accs[disp] = reg
            acc_shape = shape if along else Shape(True, self.width, self.width, plan.loop.dim)
            self._init_accumulator(reg, stmt, static, acc_shape if along else Shape(False, 1, self.width, None),
                                   along, fused)
        self.flush_cache_only()
        blk = Block(stmt, root, accs, along)
        self.loop(root, ctx.child(block=blk))
        self.flush()
        for static, shape in keys:
            disp = em.address(stmt.out, static).disp
            reg = accs.pop(disp, None)
            if reg is None:
                continue
            self._finish_accumulator(reg, stmt, static, shape, along, fused)
            em.regs.release(reg)
            self.flush_cache_only()
        em.drop_masks()

    def _stack_to(self, root: Loop) -> tuple:
        """Loops enclosing `root` in this segment (for the reduction-loop test)."""
        path = []

        def find(node, stack):
            if node is root:
                path.extend(stack)
                return True
            if isinstance(node, Loop):
                return any(find(n, stack + [node]) for n in node.body)
            return False

        find(self.node, [])
        return tuple(path)

    def _block_keys(self, chain, stmt, plan, ctx):
        """(static point, shape) of every accumulator of the block, in emission order."""
        keys = []

        def rec(i, c: Ctx):
            if i == len(chain):
                keys.append((c.static, Shape(False, 1, self.width, None)))
                return
            lp = chain[i]
            rng = c.ranges.get(lp.dim, self.tree.dim_size(lp.dim))
            if not indexes_output(stmt, lp):
                c2 = c.child()
                c2.ranges[lp.dim] = min(lp.step, rng)
                rec(i + 1, c2)
                return
            if plan is not None and lp is plan.loop and plan.along_output:
                for off in range(0, rng, self.width):
                    c2 = self._with_offset(c, lp, off)
                    keys.append((c2.static, Shape(True, min(self.width, rng - off), self.width, lp.dim)))
                return
            full, tail = trips(rng, lp.step)
            for it in range(full + (1 if tail else 0)):
                c2 = self._with_offset(c, lp, it * lp.step)
                c2.ranges[lp.dim] = lp.step if it < full else tail
                rec(i + 1, c2)

        rec(0, ctx)
        if plan is not None and not plan.along_output:
            keys = [(s, Shape(True, self.width, self.width, plan.loop.dim)) for s, _ in keys]
        return keys

    def _init_accumulator(self, reg, stmt, static, shape, along, fused):
        em = self.em
        if not along:
            em.load_const(reg, REDUCE_IDENTITY[stmt.reduce], Shape(True, self.width, self.width, None))
            return
        if fused and stmt.init is not None:
            init = Const(REDUCE_IDENTITY[stmt.reduce]) if stmt.init == "identity" else stmt.init
            if isinstance(init, Const):
                em.load_const(reg, float(init.value), shape)
                return
            val = em.to_reg(em.eval(init, static, shape), shape)
            em.asm.emit("vmovaps", em.v(reg, shape), em.v(val.reg, shape))
            em.free(val)
            return
        self._load_out(reg, stmt, static, shape)

    def _load_out(self, reg, stmt, static, shape):
        em = self.em
        dtype = self.tree.buffer(stmt.out.buffer).dtype
        em.load_into(reg, em.address(stmt.out, static), "vec" if shape.vector else "scalar", shape, dtype)

    def _finish_accumulator(self, reg, stmt, static, shape, along, fused):
        em = self.em
        if not along:
            em.hreduce(reg, stmt.reduce)
            shape = Shape(False, 1, self.width, None)
            if not (fused and stmt.init == "identity"):
                other = Load(stmt.out) if not fused or stmt.init is None else stmt.init
                val = em.eval(other, static, shape, foldable=True)
                em.asm.emit(f"v{stmt.reduce}ss", em.v(reg, shape), em.v(reg, shape), em.operand(val, shape))
                em.free(val)
        if fused and stmt.post is not None:
            val = em.eval(stmt.post, static, shape, acc=Val(reg=reg))
            if val.reg != reg:
                em.asm.emit("vmovaps", em.v(reg, shape), em.v(val.reg, shape))
                em.free(val)
        self._store(reg, stmt.out, static, shape)

    def _store(self, reg, access, static, shape):
        self.em.store(reg, access, static, shape)

    # -- statements -----------------------------------------------------------------------
    def statement(self, stmt: Compute, ctx: Ctx, shape: Shape, along_output: bool = True) -> None:
        blk = ctx.block
        if blk is not None and blk.stmt is stmt:
            disp = self.em.address(stmt.out, ctx.static).disp
            blend = (not blk.along_output) and shape.masked and not _zero_safe(stmt, self.em, shape)
            self.pending.append(Instance(stmt, ctx.static, shape, blk.accs[disp], blend))
        else:
            self.pending.append(Instance(stmt, ctx.static, shape))

    def flush_cache_only(self) -> None:
        self.em.regs.flush_cache()

    def flush(self) -> None:
        """Emit the collected straight-line instances."""
        if not self.pending:
            return
        em = self.em
        todo, self.pending = self.pending, []
        em.regs.flush_cache()
        versions: dict[str, int] = {}
        snapshots = []
        for ins in todo:
            em.versions = dict(versions)
            snapshots.append(em.versions)
            exprs = [ins.stmt.expr]
            if ins.acc is None:
                if ins.stmt.post is not None:
                    exprs.append(ins.stmt.post)
                if isinstance(ins.stmt.init, (Load,)):
                    exprs.append(ins.stmt.init)
            em.count_loads(ins.stmt, ins.static, ins.shape, exprs)
            if ins.acc is None:      # block accumulators are stored after the region
                versions[ins.stmt.out.buffer] = versions.get(ins.stmt.out.buffer, 0) + 1
        for ins, snap in zip(todo, snapshots):
            em.versions = snap
            if ins.acc is not None:
                em.accumulate(ins.acc, ins.stmt, ins.static, ins.shape, ins.blend)
            else:
                self._memory_instance(ins)
        em.versions = {}
        em.regs.flush_cache()
        em.drop_masks()

    def _memory_instance(self, ins: Instance) -> None:
        em, stmt, static, shape = self.em, ins.stmt, ins.static, ins.shape
        if stmt.reduce is None:
            val = em.to_reg(em.eval(stmt.expr, static, shape), shape)
            if stmt.post is not None:
                res = em.to_reg(em.eval(stmt.post, static, shape, acc=val), shape)
                if res.reg != val.reg:
                    em.free(val)
                val = res
            em.store(val.reg, stmt.out, static, shape)
            em.free(val)
            return
        reg = em.regs.alloc()
        if stmt.init is not None:    # no reduction loops: init and post fuse here
            init = Const(REDUCE_IDENTITY[stmt.reduce]) if stmt.init == "identity" else stmt.init
            val = em.to_reg(em.eval(init, static, shape), shape)
            em.asm.emit("vmovaps", em.v(reg, shape), em.v(val.reg, shape))
            em.free(val)
        else:
            em.load_into(reg, em.address(stmt.out, static), "vec" if shape.vector else "scalar", shape,
                         self.tree.buffer(stmt.out.buffer).dtype)
        em.regs.pinned.add(reg)
        em.accumulate(reg, stmt, static, shape, blend=False)
        if stmt.post is not None:
            val = em.eval(stmt.post, static, shape, acc=Val(reg=reg))
            if val.reg != reg:
                em.asm.emit("vmovaps", em.v(reg, shape), em.v(val.reg, shape))
                em.free(val)
        em.regs.pinned.discard(reg)
        em.store(reg, stmt.out, static, shape)
        em.regs.release(reg)


def _zero_safe(stmt: Compute, em: Emitter, shape: Shape) -> bool:
    """A masked reduction tail is safe without blending when its lanes past the tail are 0 * x."""
    e = stmt.expr
    if stmt.reduce != "add":
        return False
    if isinstance(e, Load):
        return em.load_kind(e.access, shape) == "vec"
    from ...looptree.ir import Binary
    if isinstance(e, Binary) and e.op == "mul":
        return any(isinstance(x, Load) and em.load_kind(x.access, shape) == "vec" for x in (e.a, e.b))
    return False
