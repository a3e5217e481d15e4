"""Instruction selection for statement instances: loads, stores, arithmetic, accumulators.

An *instance* is one statement at one static point of the unrolled code: a vector of
`lanes` elements along the vectorised loop (fewer than a full vector in a tail, under
a mask), or a scalar. Addresses are a pointer register per access stream plus a
displacement the unrolled loops fixed at compile time.

Vector width and mask style come from the Target: AVX2 masks are vector registers used
by vmaskmovps; AVX-512 masks are opmask registers on the instruction itself.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ...errors import UnsupportedError
from ...isa.x86.operands import K, Gpr, Mem, Vec, eax
from ...looptree.ir import REDUCE_IDENTITY, Acc, Access, Binary, Compute, Const, Load, LoopTree, Unary, expr_loads
from ..analysis import ByteMap, byte_map, element_stride
from .values import RegisterFile, Val, vreg
from . import vmath

ARITH = {"add": "vadd", "sub": "vsub", "mul": "vmul", "div": "vdiv", "max": "vmax", "min": "vmin"}


@dataclass(frozen=True)
class Shape:
    """How an instance is laid out: `lanes` used of a `width`-lane vector, or scalar."""

    vector: bool          # False: scalar ss code on xmm registers
    lanes: int            # elements this instance covers (1 for scalar)
    width: int            # lanes of a full vector
    dim: str | None       # the vectorised dimension

    @property
    def masked(self) -> bool:
        return self.vector and self.lanes < self.width


class Emitter:
    def __init__(self, asm, target, tree: LoopTree, pointers: dict[tuple, Gpr]):
        self.asm = asm
        self.target = target
        self.tree = tree
        self.pointers = pointers
        self.avx512 = target.vector_bits == 512
        self.bits = target.vector_bits
        self.width = target.lanes("float32")
        self.regs = RegisterFile(target.vector_registers)
        self._consts: dict[tuple, Mem] = {}
        self._masks: dict[int, object] = {}     # lanes -> Vec (AVX2) or MaskReg (AVX-512)
        self._maps: dict[int, tuple[Access, ByteMap]] = {}
        self._bases: dict[int, tuple] = {}           # id(access) -> see _base
        self._kinds: dict[tuple, str] = {}           # (id(access), vector dim) -> load kind
        self.versions: dict[str, int] = {}      # buffer -> stores so far in this region

    # -- registers and operands ------------------------------------------------
    def v(self, num: int, shape: Shape) -> Vec:
        return vreg(num, self.bits if shape.vector else 128)

    def suffix(self, shape: Shape) -> str:
        return "ps" if shape.vector else "ss"

    def bytemap(self, access: Access) -> ByteMap:
        # keyed by identity: hashing an Access (nested frozen dataclasses) on every address
        # would dominate the compile time; the entry keeps the access alive, so ids stay unique
        hit = self._maps.get(id(access))
        if hit is None:
            hit = self._maps[id(access)] = (access, byte_map(self.tree, access))
        return hit[1]

    def _base(self, access: Access) -> tuple:
        """(access, pointer register, constant bytes, coefficients, dtype), once per access."""
        hit = self._bases.get(id(access))
        if hit is None:
            bm = self.bytemap(access)
            hit = self._bases[id(access)] = (access, self.pointers[bm.stream], bm.const, bm.coeffs,
                                             self.tree.buffer(access.buffer).dtype)
        return hit

    def _displacement(self, base: tuple, static: dict[str, int]) -> int:
        disp = base[2]
        for name, c in base[3]:
            disp += c * static.get(name, 0)
        return disp

    def address(self, access: Access, static: dict[str, int]) -> Mem:
        base = self._base(access)
        return Mem(base[1], disp=self._displacement(base, static))

    def const(self, value: float) -> Mem:
        """A full vector of `value` in the constant pool (also read as a scalar)."""
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        m = self._consts.get(bits)
        if m is None:
            data = struct.pack("<I", bits) * self.width
            m = self._consts[bits] = self.asm.const(data, align=self.bits // 8)
        return m

    def load_const(self, reg: int, value: float, shape: Shape) -> None:
        r = self.v(reg, shape)
        if value == 0.0 and str(value) == "0.0":
            self.asm.emit("vxorps", r, r, r)
        elif shape.vector:
            self.asm.emit("vmovups", r, self.const(value).with_bits(self.bits))
        else:
            self.asm.emit("vmovss", r, self.const(value).with_bits(32))

    def const_bits(self, bits: int) -> Mem:
        """A vector of a 32-bit pattern (sign masks and the like)."""
        return self.const(struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0])

    # -- masks -----------------------------------------------------------------
    def mask(self, lanes: int):
        """The mask of the first `lanes` lanes: an opmask register (AVX-512), or a vector
        register (AVX2) kept in the load cache, so it is reused while registers are free
        and simply reloaded after an eviction."""
        if self.avx512:
            k = self._masks.get(lanes)
            if k is None:
                k = self._masks[lanes] = K[1 + len(self._masks) % 6]   # k7 is the blend mask
                self.asm.emit("mov", eax, (1 << lanes) - 1)
                self.asm.emit("kmovw", k, eax)
            return k
        key = ("mask", lanes)
        reg = self.regs.cache.get(key)
        if reg is None:
            reg = self.regs.alloc()
            data = struct.pack("<8i", *([-1] * lanes + [0] * (8 - lanes)))
            self.asm.emit("vmovups", vreg(reg, 256), self.asm.const(data, align=32))
            self.regs.cache[key] = reg
            self.regs.uses[key] = 1 << 30
        return vreg(reg, 256)

    def drop_masks(self) -> None:
        """Forget AVX-512 mask registers (their setup is emitted per straight-line region)."""
        self._masks.clear()

    # -- loads -----------------------------------------------------------------
    def load_kind(self, access: Access, shape: Shape) -> str:
        if not shape.vector:
            return "scalar"
        key = (id(access), shape.dim)
        kind = self._kinds.get(key)
        if kind is None:
            kind = self._kinds[key] = "vec" if element_stride(self.bytemap(access), shape.dim) == 1 else "bcast"
        return kind

    def load_key(self, access: Access, static: dict[str, int], shape: Shape) -> tuple:
        base = self._base(access)
        kind = self.load_kind(access, shape)
        lanes = shape.lanes if kind == "vec" else 0
        # the buffer's version changes with every store to it, so a load after a store
        # never hits the cache entry of the value before it
        version = self.versions.get(access.buffer, 0)
        return (base[1].num, self._displacement(base, static), kind, lanes, base[4], version)

    def load(self, access: Access, static: dict[str, int], shape: Shape, foldable: bool) -> Val:
        """The value of a read; a cached register, a memory operand, or a fresh register."""
        key = self.load_key(access, static, shape)
        regs = self.regs
        left = regs.uses.get(key, 1) - 1
        regs.uses[key] = left
        if key in regs.cache:
            reg = regs.cache[key]
            # last use: the register passes to the caller, who frees it — unless an enclosing
            # operand still reads it (pinned); then it stays cached until evicted or flushed
            if left <= 0 and reg not in regs.pinned:
                del regs.cache[key]
                return Val(reg=reg, owned=True)
            return Val(reg=reg, key=key)
        m = Mem(self._base(access)[1], disp=key[1])
        kind, dtype = key[2], key[4]
        operand = kind == "scalar" or (kind == "vec" and not shape.masked) or (kind == "bcast" and self.avx512)
        # a value used again is kept in a register, unless every cached value is needed before
        # it: then it is read as a memory operand each time instead (in a block whose columns
        # outnumber the free registers, the columns that fit stay put)
        if foldable and operand and dtype == "float32" and regs.keep_in_memory(key, left):
            return Val(mem=m.bcst(32) if kind == "bcast" else m)
        reg = regs.alloc()
        self.load_into(reg, m, kind, shape, dtype)
        if left > 0:
            regs.cache[key] = reg
            return Val(reg=reg, key=key)
        return Val(reg=reg, owned=True)

    def load_into(self, reg: int, m: Mem, kind: str, shape: Shape, dtype: str) -> None:
        a = self.asm
        if dtype == "float16":
            x = vreg(reg, 128)
            if kind == "vec" and not shape.masked:
                a.emit("vcvtph2ps", self.v(reg, shape), m.with_bits(self.bits // 2))
                return
            if kind == "vec":
                self._load_f16_lanes(reg, m, shape)
                return
            a.emit("movzx", eax, m.with_bits(16))
            a.emit("vmovd", x, eax)
            a.emit("vcvtph2ps", x, x)
            if kind == "bcast":
                a.emit("vbroadcastss", self.v(reg, shape), x)
            return
        if dtype != "float32":
            raise UnsupportedError(f"the x86 backend computes float32 and float16 only, not {dtype}")
        if kind == "scalar":
            a.emit("vmovss", vreg(reg, 128), m.with_bits(32))
        elif kind == "bcast":
            a.emit("vbroadcastss", self.v(reg, shape), m.with_bits(32))
        elif not shape.masked:
            a.emit("vmovups", self.v(reg, shape), m.with_bits(self.bits))
        elif self.avx512:
            a.emit("vmovups", vreg(reg, 512).masked(self.mask(shape.lanes), zero=True), m.with_bits(512))
        else:
            a.emit("vmaskmovps", vreg(reg, 256), self.mask(shape.lanes), m.with_bits(256))

    def store(self, reg: int, access: Access, static: dict[str, int], shape: Shape) -> None:
        a = self.asm
        base = self._base(access)
        m = Mem(base[1], disp=self._displacement(base, static))
        dtype = base[4]
        src = self.v(reg, shape)
        if dtype == "float16":
            if shape.vector and not shape.masked:
                a.emit("vcvtps2ph", m.with_bits(self.bits // 2), src, 0)
                return
            if shape.vector:
                self._store_f16_lanes(reg, m, shape)
                return
            t = self.regs.alloc()       # the source may be a cached value: convert a copy
            a.emit("vcvtps2ph", vreg(t, 128), vreg(reg, 128), 0)
            a.emit("vpextrw", m.with_bits(16), vreg(t, 128), 0)
            self.regs.release(t)
            return
        if not shape.vector:
            a.emit("vmovss", m.with_bits(32), vreg(reg, 128))
        elif not shape.masked:
            a.emit("vmovups", m.with_bits(self.bits), src)
        elif self.avx512:
            a.emit("vmovups", m.with_bits(512).masked(self.mask(shape.lanes)), vreg(reg, 512))
        else:
            a.emit("vmaskmovps", m.with_bits(256), self.mask(shape.lanes), src)

    # float16 tails move one 16-bit word per lane: there is no masked vcvtph2ps in AVX2
    def _load_f16_lanes(self, reg: int, m: Mem, shape: Shape) -> None:
        a = self.asm
        lo = vreg(reg, 128)
        hi = vreg(self.regs.alloc(), 128) if shape.lanes > 8 else None
        for x in (lo, hi):
            if x is not None:
                a.emit("vxorps", x, x, x)
        for i in range(shape.lanes):
            x = lo if i < 8 else hi
            a.emit("vpinsrw", x, x, (m + 2 * i).with_bits(16), i % 8)
        if hi is not None:
            a.emit("vinsertf32x4" if self.avx512 else "vinsertf128", vreg(reg, 256), vreg(reg, 256), hi, 1)
            self.regs.release(hi.num)
        a.emit("vcvtph2ps", self.v(reg, shape), vreg(reg, self.bits // 2))

    def _store_f16_lanes(self, reg: int, m: Mem, shape: Shape) -> None:
        a = self.asm
        t = self.regs.alloc()
        a.emit("vcvtps2ph", vreg(t, self.bits // 2), self.v(reg, shape), 0)
        for i in range(shape.lanes):
            if i == 8:
                a.emit("vextractf32x4" if self.avx512 else "vextractf128", vreg(t, 128), vreg(t, 256), 1)
            a.emit("vpextrw", (m + 2 * i).with_bits(16), vreg(t, 128), i % 8)
        self.regs.release(t)

    # -- expressions -----------------------------------------------------------
    def count_loads(self, stmt: Compute, static: dict[str, int], shape: Shape, exprs, position: int = 0) -> None:
        """Note the loads of one instance (the `position`-th of its region) before emitting it."""
        for e in exprs:
            for acc in expr_loads(e):
                self.regs.note_use(self.load_key(acc, static, shape), position)

    def to_reg(self, val: Val, shape: Shape) -> Val:
        if val.reg is not None:
            return val
        reg = self.regs.alloc()
        if val.mem.broadcast:
            self.asm.emit("vbroadcastss", self.v(reg, shape), val.mem.with_bits(32))
        else:
            self.asm.emit("vmovups" if shape.vector else "vmovss", self.v(reg, shape),
                          val.mem.with_bits(self.bits if shape.vector else 32))
        return Val(reg=reg, owned=True)

    def free(self, val: Val) -> None:
        if val.owned and val.reg is not None:
            self.regs.release(val.reg)

    def dest(self, *srcs: Val) -> int:
        for s in srcs:
            if s.owned and s.reg is not None:
                s.owned = False
                return s.reg
        return self.regs.alloc()

    def eval(self, e, static, shape: Shape, acc: Val | None = None, foldable=False) -> Val:
        if isinstance(e, Load):
            return self.load(e.access, static, shape, foldable)
        if isinstance(e, Const):
            if foldable:
                return Val(mem=self.const(float(e.value)))
            reg = self.regs.alloc()
            self.load_const(reg, float(e.value), shape)
            return Val(reg=reg, owned=True)
        if isinstance(e, Acc):
            return Val(reg=acc.reg)
        if isinstance(e, Binary):
            a = self.to_reg(self.eval(e.a, static, shape, acc), shape)
            pinned = self.regs.pinned
            pinned.add(a.reg)
            b = self.eval(e.b, static, shape, acc, foldable=True)
            if b.reg is not None:
                pinned.add(b.reg)
            d = self.dest(a, b)
            self.asm.emit(ARITH[e.op] + self.suffix(shape), self.v(d, shape), self.v(a.reg, shape),
                          self.operand(b, shape))
            self._unpin(a, b)
            for x in (a, b):
                if x.reg != d:
                    self.free(x)
            return Val(reg=d, owned=True)
        if isinstance(e, Unary):
            x = self.to_reg(self.eval(e.x, static, shape, acc), shape)
            self.regs.pinned.add(x.reg)
            d = self.dest(x)
            self.regs.pinned.add(d)
            vmath.unary(self, e.op, d, x.reg, shape)
            self._unpin(x, Val(reg=d))
            if x.reg != d:
                self.free(x)
            return Val(reg=d, owned=True)
        raise UnsupportedError(f"cannot emit expression {e}")

    def _unpin(self, *vals: Val) -> None:
        for v in vals:
            if v.reg is not None:
                self.regs.pinned.discard(v.reg)

    def operand(self, val: Val, shape: Shape):
        if val.reg is not None:
            return self.v(val.reg, shape)
        if val.mem.broadcast:
            return val.mem
        return val.mem.with_bits(self.bits if shape.vector else 32)

    # -- combining into an accumulator -------------------------------------------
    def accumulate(self, acc: int, stmt: Compute, static, shape: Shape, blend: bool) -> None:
        """acc = acc <reduce> expr, for one instance."""
        e = stmt.expr
        if stmt.reduce == "add" and isinstance(e, Binary) and e.op == "mul" and not blend:
            a = self.to_reg(self.eval(e.a, static, shape), shape)
            self.regs.pinned.add(a.reg)
            b = self.eval(e.b, static, shape, foldable=True)
            self.asm.emit("vfmadd231" + self.suffix(shape), self.v(acc, shape), self.v(a.reg, shape),
                          self.operand(b, shape))
            self._unpin(a)
            self.free(a)
            self.free(b)
            return
        val = self.eval(e, static, shape, foldable=not blend)
        if blend:
            val = self.to_reg(val, shape)
            self.blend_identity(val, stmt.reduce, shape)
        op = ARITH[stmt.reduce] + self.suffix(shape)
        self.asm.emit(op, self.v(acc, shape), self.v(acc, shape), self.operand(val, shape))
        self.free(val)

    def blend_identity(self, val: Val, reduce: str, shape: Shape) -> None:
        """Lanes past a reduction tail must not contribute: set them to the identity."""
        if not val.owned:
            reg = self.regs.alloc()
            self.asm.emit("vmovaps", self.v(reg, shape), self.v(val.reg, shape))
            val.reg, val.owned = reg, True
        ident = self.const(REDUCE_IDENTITY[reduce])
        if self.avx512:
            # merge-masked load of the identity into the lanes outside the tail
            inv = K[7]
            self.asm.emit("mov", eax, (~((1 << shape.lanes) - 1)) & 0xFFFF)
            self.asm.emit("kmovw", inv, eax)
            self.asm.emit("vmovups", vreg(val.reg, 512).masked(inv), ident.with_bits(512))
        else:
            self.regs.pinned.add(val.reg)
            t = self.regs.alloc()
            self.regs.pinned.add(t)
            self.asm.emit("vmovups", vreg(t, 256), ident.with_bits(256))
            mask = self.mask(shape.lanes)
            # vblendvps takes src2 where the mask is set: the tail lanes keep the value
            self.asm.emit("vblendvps", vreg(val.reg, 256), vreg(t, 256), vreg(val.reg, 256), mask)
            self.regs.pinned.discard(t)
            self.regs.pinned.discard(val.reg)
            self.regs.release(t)

    def hreduce(self, acc: int, reduce: str) -> None:
        """Fold the lanes of vector `acc` into its lane 0."""
        op = ARITH[reduce] + "ps"
        t = self.regs.alloc()
        if self.avx512:
            self.asm.emit("vextractf32x8", vreg(t, 256), vreg(acc, 512), 1)
            self.asm.emit(op, vreg(acc, 256), vreg(acc, 256), vreg(t, 256))
        self.asm.emit("vextractf32x4" if self.avx512 else "vextractf128", vreg(t, 128), vreg(acc, 256), 1)
        self.asm.emit(op, vreg(acc, 128), vreg(acc, 128), vreg(t, 128))
        self.asm.emit("vshufps", vreg(t, 128), vreg(acc, 128), vreg(acc, 128), 0x0E)
        self.asm.emit(op, vreg(acc, 128), vreg(acc, 128), vreg(t, 128))
        self.asm.emit("vshufps", vreg(t, 128), vreg(acc, 128), vreg(acc, 128), 0x01)
        self.asm.emit(op, vreg(acc, 128), vreg(acc, 128), vreg(t, 128))
        self.regs.release(t)
