"""Instruction selection for statement instances, the part every instruction set shares.

An *instance* is one statement at one static point of the unrolled code: a vector of
`lanes` elements along the vectorised loop (fewer than a full vector in a tail), or a
scalar. Addresses are a pointer register per access stream plus a displacement the
unrolled loops fixed at compile time.

`Emitter` evaluates expressions into values, keeps loaded values in registers while they
are used again (the load cache, emptied at every control-flow point), and decides when a
value is read from memory each time instead. Everything that names an instruction is a
method a subclass implements (backend/x86/emitter.py, backend/aarch64/emitter.py): loads
and stores with tails, constants, arithmetic, FMA, the horizontal reduction, and the
function's frame, loop counters, branches and pointer updates that the nest walk
(backend/nest.py) asks for.
"""
from __future__ import annotations

import functools
from operator import mul

from ..dtypes import DTYPES
from ..errors import UnsupportedError
from ..looptree.ir import Acc, Access, Binary, Compute, Const, Dot, Load, LoopTree, Unary, expr_loads
from ..looptree.verify import computes_in_integers
from .analysis import NARROW_INTEGERS, ByteMap, byte_map, dot_kind, element_stride, vector_plan
from .values import RegisterFile, Shape, Val

__all__ = ["Emitter", "Shape", "Val"]


class Emitter:
    """The instruction-set independent half of instruction selection (see the module doc).

    A subclass sets `pointer_registers` (the general registers that may hold stream pointers
    and loop counters, in order of preference) and implements the methods that raise here."""

    pointer_registers: tuple = ()
    # whether element-wise integer statements are vectorised (analysis.vector_plan): 8-bit
    # reads as "widen" loads (bytes to int32 lanes), 8-bit stores narrowed back
    vector_integers = False

    def __init__(self, asm, target, tree: LoopTree, pointers: dict | None = None):
        self.asm = asm
        self.target = target
        self.tree = tree
        self.pointers = pointers if pointers is not None else {}
        self.width = self.lanes(target)
        self.regs = RegisterFile(target.vector_registers)
        self._maps: dict[int, tuple[Access, ByteMap]] = {}
        self._bases: dict[int, tuple] = {}           # id(access) -> see _base
        self._kinds: dict[tuple, str] = {}           # (id(access), vector dim) -> load kind
        self._forms: dict[tuple, tuple] = {}         # see _load_form
        # load keys of the instance being emitted, by id(access) (see count_loads): its accesses
        # are alive while it is emitted, so no other object has their ids
        self.instance_keys: dict[int, tuple] = {}
        self.versions: dict[str, int] = {}      # buffer -> stores so far in this region
        self._dot_k: dict[int, int] = {}        # id(access) of a Dot operand -> bytes per lane
        self._instance_loads: dict[tuple, tuple] = {}   # see instance_loads
        self.int = False      # the statement being emitted computes in int32 (see begin)

    def begin(self, stmt: Compute) -> None:
        """The walk hands over instances of `stmt`: select integer or floating-point arithmetic."""
        self.int = computes_in_integers(stmt, self.tree.buffer(stmt.out.buffer).dtype)

    # -- what the instruction set decides ------------------------------------------
    @classmethod
    def vector_plan_for(cls, target):
        """analysis.vector_plan as this instruction set vectorises for `target`."""
        if not cls.vector_integers:
            return vector_plan
        return functools.partial(vector_plan, integers=True, byte_lanes=cls.unmasked_byte_lanes(target))

    @classmethod
    def unmasked_byte_lanes(cls, target) -> int:
        """0 where 8-bit vectors can be masked; else the lanes a vector of them must fill."""
        return 0

    def vector_tail(self, stmt: Compute) -> bool:
        """Whether `stmt` can run on a partial vector (a loop's tail); if not, the walk emits
        the tail's elements as scalar instances."""
        return True

    @classmethod
    def lanes(cls, target) -> int:
        """Elements per vector register in the arithmetic this instruction set emits for `target`."""
        return target.lanes("float32")

    @classmethod
    def check_tree(cls, tree: LoopTree, target) -> None:
        """Raise UnsupportedError for a buffer type this instruction set does not compute."""

    # -- addresses -----------------------------------------------------------------
    def bytemap(self, access: Access) -> ByteMap:
        # keyed by identity: hashing an Access (nested frozen dataclasses) on every address
        # would dominate the compile time; the entry keeps the access alive, so ids stay unique
        hit = self._maps.get(id(access))
        if hit is None:
            hit = self._maps[id(access)] = (access, byte_map(self.tree, access))
        return hit[1]

    def _base(self, access: Access) -> tuple:
        """(access, pointer register, constant bytes, coefficients, dtype, their names, their
        factors, as many zeros), once per access: see _displacement."""
        hit = self._bases.get(id(access))
        if hit is None:
            bm = self.bytemap(access)
            names = tuple(name for name, _ in bm.coeffs)
            hit = self._bases[id(access)] = (access, self.pointers[bm.stream], bm.const, bm.coeffs,
                                             self.tree.buffer(access.buffer).dtype, names,
                                             tuple(c for _, c in bm.coeffs), (0,) * len(names))
        return hit

    @staticmethod
    def _displacement(base: tuple, static: dict[str, int]) -> int:
        # the sum of coefficient x offset over the access's loop terms (an offset absent from
        # `static` is 0), in builtins: this runs for every load and store of every instance
        return base[2] + sum(map(mul, base[6], map(static.get, base[5], base[7])))

    def displacement(self, access: Access, static: dict[str, int]) -> int:
        """Bytes from the access's pointer register to its element at `static`."""
        return self._displacement(self._base(access), static)

    def address(self, access: Access, static: dict[str, int]):
        base = self._base(access)
        return self.memory(base[1], self._displacement(base, static))

    def dtype_of(self, access: Access) -> str:
        return self._base(access)[4]

    # -- loads -----------------------------------------------------------------
    def load_kind(self, access: Access, shape: Shape) -> str:
        """"scalar", "vec" (unit stride along the vector) or "bcast" (constant along it)."""
        if not shape.vector:
            return "scalar"
        key = (id(access), shape.dim)
        kind = self._kinds.get(key)
        if kind is None:
            stride = element_stride(self.bytemap(access), shape.dim)
            k = self._dot_k.get(id(access))
            kind = dot_kind(stride, k) if k else ("vec" if stride == 1 else "bcast")
            if kind == "vec" and not k and self.dtype_of(access) in NARROW_INTEGERS:
                kind = "widen"
            self._kinds[key] = kind
        return kind

    def output_kind(self, dtype: str, shape: Shape) -> str:
        """How a statement reads back its output as the accumulator: 8-bit and 16-bit integers
        widened to int32 lanes, like any read of them."""
        if not shape.vector:
            return "scalar"
        return "widen" if dtype in NARROW_INTEGERS else "vec"

    def _load_form(self, access: Access, shape: Shape) -> tuple:
        """(pointer number, constant bytes, coefficient names, their factors, as many zeros, kind,
        lanes, dtype, buffer, shape, access) of a load of `access` as `shape`: what its load key
        takes from both, made once per both by load_key. Keyed by identity (the walk makes a
        shape once per value, values.shape_of): the entry holds the shape and the access."""
        base = self._base(access)
        kind = self.load_kind(access, shape)
        lanes = shape.lanes if kind in ("vec", "widen") else 0
        form = self._forms[(id(access), id(shape))] = (base[1].num, base[2], base[5], base[6], base[7], kind, lanes,
                                                       base[4], access.buffer, shape, access)
        return form

    def load_key(self, access: Access, static: dict[str, int], shape: Shape) -> tuple:
        form = self._forms.get((id(access), id(shape)))
        if form is None:
            form = self._load_form(access, shape)
        num, const, names, factors, zeros, kind, lanes, dtype, buffer, _, _ = form
        # the buffer's version changes with every store to it, so a load after a store
        # never hits the cache entry of the value before it; an integer read by a float statement
        # is held converted, so the statement's kind is part of the key
        return (num, const + sum(map(mul, factors, map(static.get, names, zeros))), kind, lanes, dtype,
                self.versions.get(buffer, 0), self.int)

    def load(self, access: Access, static: dict[str, int], shape: Shape, foldable: bool) -> Val:
        """The value of a read; a cached register, a memory operand, or a fresh register."""
        key = self.instance_keys.get(id(access))
        if key is None:
            key = self.load_key(access, static, shape)
        regs = self.regs
        uses = regs.uses
        left = uses.get(key, 1) - 1
        uses[key] = left
        cache = regs.cache
        reg = cache.get(key)
        if reg is not None:
            # last use: the register passes to the caller, who frees it — unless an enclosing
            # operand still reads it (pinned); then it stays cached until evicted or flushed
            if left <= 0 and reg not in regs.pinned:
                del cache[key]
                return Val(reg, None, True)
            return Val(reg, None, False, key)
        m = self.memory(self._bases[id(access)][1], key[1])     # its key made its _base
        kind, dtype = key[2], key[4]
        # a value used again is kept in a register, unless every cached value is needed before
        # it: then it is read as a memory operand each time instead (in a block whose columns
        # outnumber the free registers, the columns that fit stay put)
        if foldable and regs.keep_in_memory(key, left):
            operand = self.memory_operand(m, kind, shape, dtype)
            if operand is not None:
                return Val(None, operand)
        reg = self.alloc_for(kind)
        self.load_into(reg, m, kind, shape, dtype)
        if left > 0:
            cache[key] = reg
            return Val(reg, None, False, key)
        return Val(reg, None, True)

    def alloc_for(self, kind: str) -> int:
        """A register for a load of `kind` (an instruction set may prefer some registers)."""
        return self.regs.alloc()

    # -- expressions -----------------------------------------------------------
    def instance_loads(self, stmt: Compute, memory: bool) -> tuple:
        """The accesses one instance of `stmt` reads, in evaluation order: its expression's, and
        for an instance outside a register block (`memory`: it loads and stores its output) its
        post-op's and a loaded init's. Made once per statement; a Dot's operands are noted then
        (their lanes are k-byte groups)."""
        hit = self._instance_loads.get((id(stmt), memory))
        if hit is None:
            exprs = [stmt.expr]
            if memory:
                if stmt.post is not None:
                    exprs.append(stmt.post)
                if isinstance(stmt.init, Load):
                    exprs.append(stmt.init)
            for e in exprs:
                if isinstance(e, Dot):
                    for x in (e.a, e.b):
                        self._dot_k[id(x.access)] = e.k
            hit = self._instance_loads[(id(stmt), memory)] = (stmt, tuple(a for e in exprs for a in expr_loads(e)))
        return hit[1]

    def count_loads(self, accesses: tuple, static: dict[str, int], shape: Shape, position: int = 0) -> dict:
        """Note the loads of one instance (the `position`-th of its region; `accesses`: its
        instance_loads) before emitting it. Returns their load keys by id(access): set as
        `instance_keys` while the instance is emitted, so that its loads are not keyed twice.
        (An access read twice gets the same key twice: nothing it depends on changes here.)"""
        keys: dict[int, tuple] = {}
        note_use = self.regs.note_use
        for acc in accesses:
            key = keys[id(acc)] = self.load_key(acc, static, shape)
            note_use(key, position)
        return keys

    def to_reg(self, val: Val, shape: Shape) -> Val:
        if val.reg is not None:
            return val
        reg = self.regs.alloc()
        self.load_operand(reg, val.mem, shape)
        return Val(reg=reg, owned=True)

    def free(self, val: Val) -> None:
        if val.owned and val.reg is not None:
            self.regs.release(val.reg)

    def eval(self, e, static, shape: Shape, acc: Val | None = None, foldable=False) -> Val:
        if isinstance(e, Load):
            return self.load(e.access, static, shape, foldable)
        if isinstance(e, Const):
            if foldable:
                operand = self.const_operand(float(e.value))
                if operand is not None:
                    return Val(mem=operand)
            reg = self.regs.alloc()
            self.load_const(reg, float(e.value), shape)
            return Val(reg=reg, owned=True)
        if isinstance(e, Acc):
            return Val(reg=acc.reg)
        # the operators below: each operand pinned while the other is evaluated and while the
        # destination is allocated, the destination an owned operand's register where there is
        # one (every element-wise instance outside a register block passes here: one call
        # unpins both operands)
        regs = self.regs
        pinned = regs.pinned
        if isinstance(e, Binary):
            a = self.eval(e.a, static, shape, acc)
            if a.reg is None:
                a = self.to_reg(a, shape)
            ra = a.reg
            pinned.add(ra)
            b = self.eval(e.b, static, shape, acc, foldable=True)
            rb = b.reg
            if rb is not None:
                pinned.add(rb)
            if a.owned:                     # the destination: an operand's own register
                a.owned = False
                d = ra
            elif b.owned and rb is not None:
                b.owned = False
                d = rb
            else:
                d = regs.alloc()
            self.arith(e.op, d, ra, b, shape)
            pinned.discard(ra, rb)
            if ra != d and a.owned:
                regs.release(ra)
            if rb != d and b.owned and rb is not None:
                regs.release(rb)
            return Val(reg=d, owned=True)
        if isinstance(e, Unary):
            x = self.eval(e.x, static, shape, acc)
            if x.reg is None:
                x = self.to_reg(x, shape)
            rx = x.reg
            pinned.add(rx)
            if x.owned:
                x.owned = False
                d = rx
            else:
                d = regs.alloc()
            pinned.add(d)
            self.unary(e.op, d, rx, shape)
            pinned.discard(rx, d)
            if rx != d and x.owned:
                regs.release(rx)
            return Val(reg=d, owned=True)
        raise UnsupportedError(f"cannot emit expression {e}")

    def _unpin(self, *vals: Val) -> None:
        self.regs.pinned.discard(*(v.reg for v in vals))

    # -- combining into an accumulator -------------------------------------------
    def accumulate(self, acc: int, stmt: Compute, static, shape: Shape, blend: bool) -> None:
        """acc = acc <reduce> expr, for one instance."""
        e = stmt.expr
        if isinstance(e, Dot):
            a = self.to_reg(self.eval(e.a, static, shape), shape)
            self.regs.pinned.add(a.reg)
            b = self.eval(e.b, static, shape, foldable=True)
            self.dot(acc, e, a.reg, b, shape)
            self._unpin(a)
            self.free(a)
            self.free(b)
            return
        if stmt.reduce == "add" and isinstance(e, Binary) and e.op == "mul" and not blend:
            a = self.to_reg(self.eval(e.a, static, shape), shape)
            self.regs.pinned.add(a.reg)
            b = self.eval(e.b, static, shape, foldable=True)
            self.fma(acc, a.reg, b, shape)
            self._unpin(a)
            self.free(a)
            self.free(b)
            return
        val = self.eval(e, static, shape, foldable=not blend)
        if blend:
            val = self.to_reg(val, shape)
            self.blend_identity(val, stmt.reduce, shape)
        self.arith(stmt.reduce, acc, acc, val, shape)
        self.free(val)

    def fma_run(self, stmt: Compute, instances: list) -> bool:
        """A straight-line region of `stmt`'s register-block instances (nest.Instance tuples), when
        it is acc += a * b of two float reads and none blends: count_loads and accumulate for each
        instance, fused into two loops that key each read once (the most common region of all).
        Emits what count_loads and accumulate would, instance by instance; False (nothing done)
        for any other region. Called with the load cache just emptied and no store in the region,
        so every read is at version 0, and nothing pinned: within it, only an instance's first
        read is ever pinned, while its second is read."""
        e = stmt.expr
        if (type(e) is not Binary or e.op != "mul" or stmt.reduce != "add" or type(e.a) is not Load
                or type(e.b) is not Load or self.int or not DTYPES[self.tree.buffer(stmt.out.buffer).dtype].is_float):
            return False
        for ins in instances:
            if ins[0] is not stmt or ins[3] is None or ins[4]:
                return False
        ea, eb = e.a.access, e.b.access
        keys = self._pair_keys(ea, eb, instances)
        self.begin(stmt)
        regs = self.regs
        uses, cache, pinned, release = regs.uses, regs.cache, regs.pinned, regs.release
        pa, pb = self._bases[id(ea)][1], self._bases[id(eb)][1]
        memory, load_into, alloc_for = self.memory, self.load_into, self.alloc_for
        fma, fma_reg = self.fma, self.fma_reg
        for ins, (ka, kb) in zip(instances, keys):
            shape, acc = ins[2], ins[3]
            # the first read (never folded: _read, inline), pinned while the second is read as
            # load(foldable=True)
            left = uses.get(ka, 1) - 1
            uses[ka] = left
            a = cache.get(ka)
            if a is None:
                a = alloc_for(ka[2])
                load_into(a, memory(pa, ka[1]), ka[2], shape, ka[4])
                owned = left <= 0
                if not owned:
                    cache[ka] = a
            elif left <= 0:
                del cache[ka]
                owned = True
            else:
                owned = False
            left = uses.get(kb, 1) - 1
            uses[kb] = left
            b = cache.get(kb)
            if b is not None:       # a cached register: the common case, without a Val
                free_b = left <= 0 and b != a       # (a is b where both reads are one value)
                if free_b:
                    del cache[kb]
                fma_reg(acc, a, b, shape)
            else:
                # only reading b may evict (keep_in_memory, alloc_for, an AVX2 tail's mask): a
                # is pinned while it is read, as load(foldable=True) under eval's pin of a
                pinned[a] = 1
                free_b = False
                m = memory(pb, kb[1])
                operand = None
                if regs.keep_in_memory(kb, left):
                    operand = self.memory_operand(m, kb[2], shape, kb[4])
                if operand is not None:
                    fma(acc, a, Val(None, operand), shape)
                else:
                    b = alloc_for(kb[2])
                    load_into(b, m, kb[2], shape, kb[4])
                    if left > 0:
                        cache[kb] = b
                    else:
                        free_b = True
                    fma_reg(acc, a, b, shape)
                del pinned[a]
            if owned:
                release(a)
            if free_b:
                release(b)
        return True

    def copy_run(self, stmt: Compute, instances: list) -> bool:
        """A straight-line region of instances of one plain copy (out = in, in another buffer):
        count_loads and the copy of each instance fused as fma_run fuses FMAs; False (nothing
        done) for any other region. Its stores never change the version of what it reads."""
        e = stmt.expr
        if (type(e) is not Load or stmt.reduce is not None or stmt.post is not None or stmt.requant is not None
                or stmt.init is not None or e.access.buffer == stmt.out.buffer):
            return False
        for ins in instances:
            if ins[0] is not stmt or ins[3] is not None:
                return False
        src, out = e.access, stmt.out
        keys = self._run_keys((src,), instances)
        self.begin(stmt)
        pointer = self._bases[id(src)][1]
        read, store, release = self._read, self.store, self.regs.release
        for (_, static, shape, _, _, _, _), (key,) in zip(instances, keys):
            reg, owned = read(key, pointer, shape)
            store(reg, out, static, shape)
            if owned:
                release(reg)
        return True

    def _run_keys(self, accesses: tuple, instances: list) -> list:
        """count_loads for a run of instances that read `accesses` with nothing stored between:
        each instance's load keys (in the order of `accesses`), every read at version 0."""
        keys = []
        # per shape (a run has one or two: full vectors and a tail), each access's load form as
        # what varies with the point and the key's fixed tail: (kind, lanes, dtype, version, int)
        parts_of: dict[int, list] = {}
        for _, static, shape, _, _, _, _ in instances:
            parts = parts_of.get(id(shape))
            if parts is None:
                parts = parts_of[id(shape)] = []
                for acc in accesses:
                    form = self._forms.get((id(acc), id(shape))) or self._load_form(acc, shape)
                    parts.append((form[0], form[1], form[2], form[3], form[4], (*form[5:8], 0, self.int)))
            at = static.get
            keys.append([(num, const + sum(map(mul, factors, map(at, names, zeros)))) + tail
                         for num, const, names, factors, zeros, tail in parts])
        self.regs.note_uses(keys)
        return keys

    def _pair_keys(self, ea: Access, eb: Access, instances: list) -> list:
        """_run_keys for fma_run's two reads, unrolled: a run's instances mostly share one shape,
        so its load forms are looked up when the shape changes."""
        keys = []
        append = keys.append
        last = None
        for ins in instances:
            shape = ins[2]
            if shape is not last:
                last = shape
                fa = self._forms.get((id(ea), id(shape))) or self._load_form(ea, shape)
                fb = self._forms.get((id(eb), id(shape))) or self._load_form(eb, shape)
                na, ca, names_a, factors_a, zeros_a = fa[:5]
                nb, cb, names_b, factors_b, zeros_b = fb[:5]
                tail_a, tail_b = (*fa[5:8], 0, self.int), (*fb[5:8], 0, self.int)
            at = ins[1].get
            append(((na, ca + sum(map(mul, factors_a, map(at, names_a, zeros_a)))) + tail_a,
                    (nb, cb + sum(map(mul, factors_b, map(at, names_b, zeros_b)))) + tail_b))
        self.regs.note_uses(keys)
        return keys

    def _read(self, key: tuple, pointer, shape: Shape) -> tuple[int, bool]:
        """(register, owned) of a read as load() gives it when it may not be folded: the cached
        register, or a fresh one loaded from `pointer` (its stream's register) at the key's
        displacement, kept while uses are left."""
        regs = self.regs
        cache, uses = regs.cache, regs.uses
        left = uses.get(key, 1) - 1
        uses[key] = left
        reg = cache.get(key)
        if reg is not None:
            if left <= 0 and reg not in regs.pinned:
                del cache[key]
                return reg, True
            return reg, False
        reg = self.alloc_for(key[2])
        self.load_into(reg, self.memory(pointer, key[1]), key[2], shape, key[4])
        if left > 0:
            cache[key] = reg
            return reg, False
        return reg, True

    def zero_safe(self, stmt: Compute, shape: Shape) -> bool:
        """A reduction tail is safe without blending when its lanes past the tail are 0 * x
        (a vector load of a tail leaves them 0)."""
        e = stmt.expr
        if stmt.reduce != "add":
            return False
        if isinstance(e, Load):
            return self.load_kind(e.access, shape) == "vec"
        if isinstance(e, Binary) and e.op == "mul":
            return any(isinstance(x, Load) and self.load_kind(x.access, shape) == "vec" for x in (e.a, e.b))
        return False

    # -- per instruction set: values -------------------------------------------------
    def memory(self, pointer, disp: int):
        """The address `disp` bytes from pointer register `pointer`, as the instruction set's operand."""
        raise NotImplementedError

    def memory_operand(self, m, kind: str, shape: Shape, dtype: str):
        """`m` as a source operand of arithmetic (read in place, not loaded), or None."""
        return None

    def const_operand(self, value: float):
        """A constant as a source operand of arithmetic, or None (then it is loaded)."""
        return None

    def load_operand(self, reg: int, operand, shape: Shape) -> None:
        """Load a value `memory_operand` or `const_operand` returned into register `reg`."""
        raise NotImplementedError

    def load_const(self, reg: int, value: float, shape: Shape) -> None:
        raise NotImplementedError

    def load_into(self, reg: int, m, kind: str, shape: Shape, dtype: str) -> None:
        """Load the element(s) at `m` as `kind` ("scalar", "vec", "bcast"), `shape.lanes` of a tail."""
        raise NotImplementedError

    def store(self, reg: int, access: Access, static: dict[str, int], shape: Shape) -> None:
        raise NotImplementedError

    def copy(self, dst: int, src: int, shape: Shape) -> None:
        raise NotImplementedError

    def arith(self, op: str, d: int, a: int, b: Val, shape: Shape) -> None:
        """d = a <op> b for op in add, sub, mul, div, max, min."""
        raise NotImplementedError

    def fma(self, acc: int, a: int, b: Val, shape: Shape) -> None:
        """acc += a * b."""
        raise NotImplementedError

    def store_at(self, reg: int, access: Access, static: dict[str, int], disp: int, shape: Shape) -> None:
        """store(), its displacement at `static` already known (`disp`: see displacement)."""
        self.store(reg, access, static, shape)

    def fma_reg(self, acc: int, a: int, b: int, shape: Shape) -> None:
        """acc += a * b of three registers (fma_run's common case, without building a Val)."""
        self.fma(acc, a, Val(reg=b), shape)

    def dot(self, acc: int, e: Dot, a: int, b: Val, shape: Shape) -> None:
        """acc += e's k-term dot product in every int32 lane, by the registry entry `e.instr`."""
        raise UnsupportedError(f"{type(self).__name__} has no tensorized dot products ({e.instr})")

    def tile_begin(self) -> None:
        """The top of a function with tile statements (a Dot of a tile instruction): configure tiles."""
        raise UnsupportedError(f"{type(self).__name__} has no tile instructions")

    def tile_block(self, stmt: Compute, root, static: dict[str, int], ranges: dict[str, int]) -> None:
        """A tile statement's block of accumulator tiles at `static`: the loops from `root` (its
        reduction loops, then one tile row and column), the whole reduction inside."""
        raise UnsupportedError(f"{type(self).__name__} has no tile instructions")

    def tile_end(self) -> None:
        """Before a function with tile statements returns: release the tile state."""
        raise UnsupportedError(f"{type(self).__name__} has no tile instructions")

    def requant(self, reg: int, stmt: Compute, static: dict[str, int], shape: Shape) -> None:
        """The int32 value in `reg` requantized as `stmt.requant` says (looptree.ir.Requant),
        left in `reg` as int32 lanes within the output dtype's range, ready to be stored."""
        raise UnsupportedError(f"{type(self).__name__} has no requantization epilogue")

    def unary(self, op: str, d: int, x: int, shape: Shape) -> None:
        """d = op(x); d may equal x."""
        raise NotImplementedError

    def blend_identity(self, val: Val, reduce: str, shape: Shape) -> None:
        """Lanes past a reduction tail must not contribute: set them to the identity."""
        raise NotImplementedError

    def hreduce(self, acc: int, reduce: str) -> None:
        """Fold the lanes of vector `acc` into its lane 0."""
        raise NotImplementedError

    def drop_masks(self) -> None:
        """End of a straight-line region: forget state kept for it (mask registers)."""

    # -- per instruction set: the function -----------------------------------------
    def prologue(self, slots: dict[str, int]) -> None:
        """Save what the function uses, keep start/end, and load every stream's pointer
        (`self.pointers`) from the argument block at the buffer's slot."""
        raise NotImplementedError

    def epilogue(self) -> None:
        raise NotImplementedError

    def use_counters(self, registers: list) -> None:
        """The general registers left to loop counters."""
        raise NotImplementedError

    def loop_begin(self, name: str, count: int):
        """A counter set to `count` and the loop's top label bound: returns (counter, top)."""
        raise NotImplementedError

    def loop_end(self, counter, top, deltas) -> None:
        """Advance each (pointer, bytes) of `deltas`, count down, branch back to `top` while
        trips are left, and give the counter back."""
        raise NotImplementedError

    def rewind(self, pointer, total: int) -> None:
        """pointer -= total bytes."""
        raise NotImplementedError

    def prefetch(self, pointer, disp: int) -> None:
        raise NotImplementedError

    def parallel_begin(self, deltas, full: int):
        """Of a parallel loop's `full` full iterations, run [start, min(end, full)): advance each
        (pointer, bytes per iteration) by start iterations, set a counter to the trips and
        skip the loop when there are none. Returns (counter, top, done label)."""
        raise NotImplementedError

    def parallel_tail_begin(self, full: int):
        """Skip the parallel loop's partial last iteration unless end > full: returns the label to bind after it."""
        raise NotImplementedError

    def bind(self, label) -> None:
        self.asm.bind(label)
