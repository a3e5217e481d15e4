"""x86 instruction selection: AVX2 and AVX-512 code for statement instances, and the function's
frame, loop counters and branches the nest walk asks for (see backend/emitter.py).

Vector width and mask style come from the Target: AVX2 masks are vector registers used
by vmaskmovps; AVX-512 masks are opmask registers on the instruction itself. Arithmetic
takes memory operands (a value read once, a broadcast, a constant) where the block's
registers are all taken.
"""
from __future__ import annotations

import struct
from operator import mul

from ...errors import UnsupportedError
from ...isa.x86.operands import (GPR64, K, XMM, YMM, ZMM, Gpr, Mem, Vec, eax, rax, rbp, rbx, rdi, rdx, rsi, rsp,
                                 r12, r13, r14, r15)
from ...looptree.ir import REDUCE_IDENTITY, Access, LoopTree
from ..analysis import NARROW_INTEGERS
from ..emitter import Emitter
from ..values import Shape, Val
from .values import vreg
from . import integer, vmath

ARITH = {"add": "vadd", "sub": "vsub", "mul": "vmul", "div": "vdiv", "max": "vmax", "min": "vmin"}
CALLEE_SAVED = (rbx, rbp, r12, r13, r14, r15)
# rax is the scratch register; rsp the stack; everything else can hold pointers and counters
ALLOCATABLE = tuple(r for r in GPR64 if r not in (rax, rsp))
FRAME = 128            # start/end, and counters that do not fit in registers
START_SLOT, END_SLOT = 0, 8
PREFETCH = "prefetcht0"  # into L1 (and L2): measured ahead of prefetchnta and prefetcht1 on Zen 3

__all__ = ["ARITH", "Shape", "Val", "X86Emitter"]

# Memory operands once per address, and per operand and size or broadcast (see X86Emitter.memory,
# sized): the loads and stores of unrolled code name a few hundred addresses, over and over, and
# every kernel names the same small displacements from the same pointer registers. Mems are
# values, so sharing one is building it again. Keyed by identity (an entry holds the objects
# whose ids it is keyed by, so no other object has them); shared by all kernels and bounded.
_MEMS: dict[tuple, Mem] = {}
_SIZED: dict[tuple, tuple] = {}
_MEMS_LIMIT = 1 << 15
# The hottest instructions as the assembler recorded them (Assembler.recorded / again): float32
# vector loads and stores, and FMAs. Keyed by vector bits (or, for an AVX-512 tail, the number of
# its opmask register: 1-7, no vector width), register numbers and the identity of the memory
# operand, which the entry holds (as _MEMS); no rip-relative operand.
_LOADS: dict[tuple, tuple] = {}
_STORES: dict[tuple, tuple] = {}
_FMAS: dict[tuple, tuple] = {}
# and instructions of interned registers and immediates only, keyed by what names them: zeroed
# accumulators, pointer steps, the frame's pushes and pops
_PLAIN: dict[tuple, tuple] = {}


def _keep(table: dict, key: tuple, value):
    if len(table) >= _MEMS_LIMIT:
        table.clear()
    table[key] = value
    return value


class X86Emitter(Emitter):
    pointer_registers = ALLOCATABLE
    vector_integers = True

    def __init__(self, asm, target, tree: LoopTree, pointers: dict | None = None):
        super().__init__(asm, target, tree, pointers)
        self.avx512 = target.vector_bits == 512
        self.bits = target.vector_bits
        self._full = {128: XMM, 256: YMM, 512: ZMM}[self.bits]     # the registers of a full vector
        self._consts: dict[tuple, Mem] = {}
        self._masks: dict[int, object] = {}     # lanes -> AVX-512 opmask register set up for them
        # per open runtime loop, the opmask registers set up before it that its body still reads:
        # code inside the loop must not set them to other masks
        self._held: list[dict[int, object]] = []
        self.free_gprs: list[Gpr] = []
        self.next_slot = 2        # stack slots of counters; 0: start, 1: end

    @classmethod
    def check_tree(cls, tree: LoopTree, target) -> None:
        for b in tree.buffers:
            if b.dtype not in ("float32", "float16") and b.dtype not in integer.INT_DTYPES:
                raise UnsupportedError(f"the x86 backend has no {b.dtype} arithmetic (buffer %{b.name})")

    # -- registers and operands ------------------------------------------------
    def v(self, num: int, shape: Shape) -> Vec:
        # vreg(num, bits), looked up here: every operand of every instruction asks
        return (self._full if shape.vector else XMM)[num]

    def suffix(self, shape: Shape) -> str:
        return "ps" if shape.vector else "ss"

    def memory(self, pointer, disp: int) -> Mem:
        # keyed by the pointer's identity: the Mem kept holds it, so no other object has its id
        m = _MEMS.get((id(pointer), disp))
        if m is None:
            m = _keep(_MEMS, (id(pointer), disp), Mem(pointer, disp=disp))
        return m

    def sized(self, m: Mem, bits: int) -> Mem:
        """`m.with_bits(bits)`, made once per operand and size (see _MEMS)."""
        hit = _SIZED.get((id(m), bits))
        if hit is None:
            hit = _keep(_SIZED, (id(m), bits), (m, m.with_bits(bits)))
        return hit[1]

    def memory_operand(self, m, kind: str, shape: Shape, dtype: str):
        if dtype in NARROW_INTEGERS:            # a Dot operand: whole vectors, or a 4-byte group
            if not self.int:                    # a float statement converts it first
                return None
            if kind == "vec" and not shape.masked:
                return m
            return self._broadcast(m) if kind == "bcast" and self.avx512 else None
        if dtype != "float32" or (self.int and kind == "scalar"):
            return None
        if kind == "scalar" or (kind == "vec" and not shape.masked):
            return m
        if kind == "bcast" and self.avx512:
            return self._broadcast(m)
        return None

    def _broadcast(self, m: Mem) -> Mem:
        """`m.bcst(32)`, made once per operand (as `sized`)."""
        hit = _SIZED.get((id(m), "bcst"))
        if hit is None:
            hit = _keep(_SIZED, (id(m), "bcst"), (m, m.bcst(32)))
        return hit[1]

    def const_operand(self, value: float):
        return integer.const(self, value) if self.int else self.const(value)

    def const(self, value: float) -> Mem:
        """A full vector of `value` in the constant pool (also read as a scalar)."""
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        m = self._consts.get(bits)
        if m is None:
            data = struct.pack("<I", bits) * self.width
            m = self._consts[bits] = self.asm.const(data, align=self.bits // 8)
        return m

    def load_const(self, reg: int, value: float, shape: Shape) -> None:
        if self.int:
            integer.load_const(self, reg, value, shape)
            return
        if value == 0.0 and str(value) == "0.0":
            key = ("vxorps", reg, self.bits if shape.vector else 128)
            hit = _PLAIN.get(key)
            if hit is None:
                r = self.v(reg, shape)
                self.asm.emit("vxorps", r, r, r)
                _keep(_PLAIN, key, self.asm.recorded())
            else:
                self.asm.again(hit)
            return
        r = self.v(reg, shape)
        if shape.vector:
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
                k = self._masks[lanes] = self._free_opmask()
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

    def _free_opmask(self):
        """k1-k6 (k7 is the blend mask): the lowest one no mask holds, else the oldest one no
        enclosing loop still reads."""
        taken = {id(k) for k in self._masks.values()}
        for k in K[1:7]:
            if id(k) not in taken:
                return k
        held = {id(k) for k in self._held[-1].values()} if self._held else set()
        for lanes, k in self._masks.items():
            if id(k) not in held:
                del self._masks[lanes]
                return k
        raise UnsupportedError("more than six tail masks live across one loop")

    def drop_masks(self) -> None:
        """Forget AVX-512 mask registers (their setup is emitted per straight-line region),
        except those set up before an enclosing runtime loop, which stay valid inside it."""
        self._masks = dict(self._held[-1]) if self._held else {}

    def load_into(self, reg: int, m: Mem, kind: str, shape: Shape, dtype: str) -> None:
        a = self.asm
        if dtype == "float32" and kind == "vec" and shape.lanes == shape.width:     # the common case first
            key = (self.bits, reg, id(m))
            hit = _LOADS.get(key)
            if hit is None:
                a.emit("vmovups", self._full[reg], self.sized(m, self.bits))
                _keep(_LOADS, key, (a.recorded(), m))
            else:
                a.again(hit[0])
            return
        if dtype in integer.INT_DTYPES:
            if self.int:
                integer.load_into(self, reg, m, kind, shape, dtype)
            else:
                integer.load_as_float(self, reg, m, kind, shape, dtype)
            return
        if dtype == "float16":
            x = vreg(reg, 128)
            if kind == "vec" and not shape.masked:
                a.emit("vcvtph2ps", self.v(reg, shape), self.sized(m, self.bits // 2))
                return
            if kind == "vec":
                self._load_f16_lanes(reg, m, shape)
                return
            a.emit("movzx", eax, self.sized(m, 16))
            a.emit("vmovd", x, eax)
            a.emit("vcvtph2ps", x, x)
            if kind == "bcast":
                a.emit("vbroadcastss", self.v(reg, shape), x)
            return
        if dtype != "float32":
            raise UnsupportedError(f"the x86 backend computes float32 and float16 only, not {dtype}")
        if kind == "scalar":
            a.emit("vmovss", vreg(reg, 128), self.sized(m, 32))
        elif kind == "bcast":
            a.emit("vbroadcastss", self.v(reg, shape), self.sized(m, 32))
        elif not shape.masked:
            a.emit("vmovups", self.v(reg, shape), self.sized(m, self.bits))
        elif self.avx512:
            k = self.mask(shape.lanes)
            key = (k.num, reg, id(m))
            hit = _LOADS.get(key)
            if hit is None:
                a.emit("vmovups", vreg(reg, 512).masked(k, zero=True), self.sized(m, 512))
                _keep(_LOADS, key, (a.recorded(), m))
            else:
                a.again(hit[0])
        else:
            a.emit("vmaskmovps", vreg(reg, 256), self.mask(shape.lanes), self.sized(m, 256))

    def store(self, reg: int, access: Access, static: dict[str, int], shape: Shape) -> None:
        base = self._bases.get(id(access)) or self._base(access)
        disp = base[2] + sum(map(mul, base[6], map(static.get, base[5], base[7])))     # _displacement
        self.store_at(reg, access, static, disp, shape)

    def store_at(self, reg: int, access: Access, static: dict[str, int], disp: int, shape: Shape) -> None:
        a = self.asm
        base = self._bases.get(id(access)) or self._base(access)
        m = _MEMS.get((id(base[1]), disp)) or self.memory(base[1], disp)
        dtype = base[4]
        if dtype == "float32" and shape.vector and shape.lanes == shape.width:     # the common case first
            key = (self.bits, reg, id(m))
            hit = _STORES.get(key)
            if hit is None:
                a.emit("vmovups", self.sized(m, self.bits), self._full[reg])
                _keep(_STORES, key, (a.recorded(), m))
            else:
                a.again(hit[0])
            return
        src = self.v(reg, shape)
        if dtype in integer.INT_DTYPES:
            integer.store(self, reg, m, dtype, shape)
            return
        if dtype == "float16":
            if shape.vector and not shape.masked:
                a.emit("vcvtps2ph", self.sized(m, self.bits // 2), src, 0)
                return
            if shape.vector:
                self._store_f16_lanes(reg, m, shape)
                return
            t = self.regs.alloc()       # the source may be a cached value: convert a copy
            a.emit("vcvtps2ph", vreg(t, 128), vreg(reg, 128), 0)
            a.emit("vpextrw", self.sized(m, 16), vreg(t, 128), 0)
            self.regs.release(t)
            return
        if not shape.vector:
            a.emit("vmovss", self.sized(m, 32), vreg(reg, 128))
        elif not shape.masked:
            a.emit("vmovups", self.sized(m, self.bits), src)
        elif self.avx512:
            k = self.mask(shape.lanes)
            key = (k.num, reg, id(m))
            hit = _STORES.get(key)
            if hit is None:
                a.emit("vmovups", self.sized(m, 512).masked(k), vreg(reg, 512))
                _keep(_STORES, key, (a.recorded(), m))
            else:
                a.again(hit[0])
        else:
            a.emit("vmaskmovps", self.sized(m, 256), self.mask(shape.lanes), src)

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

    def operand(self, val: Val, shape: Shape):
        if val.reg is not None:
            return self.v(val.reg, shape)
        if val.mem.broadcast:
            return val.mem
        # scalar integers live in an xmm register and read a whole one (vpaddd has no m32 form)
        return self.sized(val.mem, self.bits if shape.vector else 128 if self.int else 32)

    def blend_identity(self, val: Val, reduce: str, shape: Shape) -> None:
        """Lanes past a reduction tail must not contribute: set them to the identity."""
        if self.int:
            raise UnsupportedError("integer reductions along a vector are not vectorised on x86")
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

    # -- values into registers, arithmetic -------------------------------------------
    def load_operand(self, reg: int, operand, shape: Shape) -> None:
        if self.int:
            if operand.broadcast:
                self.asm.emit("vpbroadcastd", self.v(reg, shape), operand.with_bits(32))
            else:
                self.asm.emit(integer.vec_move(self) if shape.vector else "vmovdqu", self.v(reg, shape),
                              operand.with_bits(self.bits if shape.vector else 128))
            return
        if operand.broadcast:
            self.asm.emit("vbroadcastss", self.v(reg, shape), operand.with_bits(32))
        else:
            self.asm.emit("vmovups" if shape.vector else "vmovss", self.v(reg, shape),
                          operand.with_bits(self.bits if shape.vector else 32))

    def copy(self, dst: int, src: int, shape: Shape) -> None:
        self.asm.emit("vmovaps", self.v(dst, shape), self.v(src, shape))

    def arith(self, op: str, d: int, a: int, b: Val, shape: Shape) -> None:
        if self.int:
            integer.arith(self, op, d, a, b, shape)
            return
        self.asm.emit(ARITH[op] + self.suffix(shape), self.v(d, shape), self.v(a, shape), self.operand(b, shape))

    def fma_reg(self, acc: int, a: int, b: int, shape: Shape) -> None:
        if shape.vector and not self.int:       # fma's vector case, its operand a register
            key = (self.bits, acc, a, b)
            hit = _FMAS.get(key)
            if hit is not None and hit[1] is None:
                self.asm.again(hit[0])
                return
            full = self._full
            self.asm.emit("vfmadd231ps", full[acc], full[a], full[b])
            _keep(_FMAS, key, (self.asm.recorded(), None))
            return
        self.fma(acc, a, Val(reg=b), shape)

    def fma(self, acc: int, a: int, b: Val, shape: Shape) -> None:
        if self.int:
            integer.fma(self, acc, a, b, shape)
            return
        if shape.vector:
            mem = b.mem
            if mem is None or mem.label is None:            # no rip-relative constant: kept
                key = (self.bits, acc, a, b.reg if mem is None else id(mem))
                hit = _FMAS.get(key)
                if hit is not None and hit[1] is mem:
                    self.asm.again(hit[0])
                    return
                self.asm.emit("vfmadd231ps", self._full[acc], self._full[a], self.operand(b, shape))
                _keep(_FMAS, key, (self.asm.recorded(), mem))
                return
        regs = self._full if shape.vector else XMM          # self.v, for the two registers
        self.asm.emit("vfmadd231ps" if shape.vector else "vfmadd231ss", regs[acc], regs[a], self.operand(b, shape))

    def unary(self, op: str, d: int, x: int, shape: Shape) -> None:
        if self.int:
            integer.unary(self, op, d, x, shape)
            return
        vmath.unary(self, op, d, x, shape)

    def dot(self, acc: int, e, a: int, b: Val, shape: Shape) -> None:
        integer.dot(self, acc, e, a, b, shape)

    def requant(self, reg: int, stmt, static, shape: Shape) -> None:
        integer.requant(self, reg, stmt, static, shape)

    # AMX tiles (backend/x86/amx.py), loaded by the first program that has a tile statement
    def tile_begin(self) -> None:
        from . import amx
        amx.tile_begin(self.asm)

    def tile_block(self, stmt, root, static, ranges) -> None:
        from . import amx
        amx.tile_block(self, stmt, root, static, ranges)

    def tile_end(self) -> None:
        from . import amx
        amx.tile_end(self.asm)

    # -- the function ---------------------------------------------------------------
    def _sequence(self, name: str, instructions) -> None:
        """A fixed run of plain instructions (`instructions()`: (mnemonic, *operands) each), kept
        under `name`."""
        entries = _PLAIN.get(name)
        if entries is None:
            kept = []
            for mnemonic, *ops in instructions():
                self.asm.emit(mnemonic, *ops)
                kept.append(self.asm.recorded())
            entries = _keep(_PLAIN, name, tuple(kept))
        else:
            for entry in entries:
                self.asm.again(entry)

    def prologue(self, slots: dict[str, int]) -> None:
        a = self.asm
        self._sequence("enter", lambda: [*[("push", r) for r in CALLEE_SAVED], ("sub", rsp, FRAME), ("mov", rax, rdi),
                                         ("mov", Mem(rsp, disp=START_SLOT, bits=64), rsi),
                                         ("mov", Mem(rsp, disp=END_SLOT, bits=64), rdx)])
        for s, reg in self.pointers.items():
            a.emit("mov", reg, Mem(rax, disp=8 * slots[s[0]], bits=64))

    def epilogue(self) -> None:
        self._sequence("leave", lambda: [("add", rsp, FRAME), *[("pop", r) for r in reversed(CALLEE_SAVED)],
                                         ("vzeroupper",), ("ret",)])

    def use_counters(self, registers: list) -> None:
        self.free_gprs = list(registers)

    def _counter(self):
        """A free register, else a stack slot of the frame."""
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

    def loop_begin(self, name: str, count: int):
        a = self.asm
        self._held.append(dict(self._masks))
        c = self._counter()
        a.emit("mov", c, count)
        top = a.label(f"{name}_top")
        a.bind(top)
        return c, top

    def _plain(self, mnemonic: str, reg, imm: int) -> None:
        """`mnemonic reg, imm` for an interned register, kept (see _PLAIN)."""
        key = (mnemonic, id(reg), imm)
        hit = _PLAIN.get(key)
        if hit is None:
            self.asm.emit(mnemonic, reg, imm)
            _keep(_PLAIN, key, self.asm.recorded())
        else:
            self.asm.again(hit)

    def loop_end(self, counter, top, deltas) -> None:
        a = self.asm
        for reg, d in deltas:
            self._plain("add", reg, d)
        a.emit("dec", counter)
        a.emit("jne", top)
        self._release_counter(counter)
        self._held.pop()

    def rewind(self, pointer, total: int) -> None:
        if -2**31 <= total < 2**31:
            self._plain("sub", pointer, total)
        else:
            self.asm.emit("mov", rax, total)
            self.asm.emit("sub", pointer, rax)

    def prefetch(self, pointer, disp: int) -> None:
        self.asm.emit(PREFETCH, Mem(pointer, disp=disp, bits=8))

    def parallel_begin(self, deltas, full: int):
        a = self.asm
        start = Mem(rsp, disp=START_SLOT, bits=64)
        end = Mem(rsp, disp=END_SLOT, bits=64)
        for reg, d in deltas:
            a.emit("mov", rax, start)
            a.emit("imul", rax, rax, d)
            a.emit("add", reg, rax)
        if not full:
            return None
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
        self._held.append(dict(self._masks))
        return c, top, done

    def parallel_tail_begin(self, full: int):
        a = self.asm
        skip = a.label("par_no_tail")
        a.emit("mov", rax, Mem(rsp, disp=END_SLOT, bits=64))
        a.emit("cmp", rax, full)
        a.emit("jle", skip)
        return skip
