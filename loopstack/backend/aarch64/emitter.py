"""AArch64 instruction selection: AdvSIMD code for statement instances (fp32 arithmetic on `neon`,
on float32 or float16 storage; fp16 storage and arithmetic on `neon_fp16`), and the AAPCS64
function, loop counters and branches the nest walk asks for (see backend/emitter.py; the walk
itself is shared with x86).

Differences from x86 that shape this file:
  - no memory operands: every value is loaded into a register (the load cache still reuses it);
  - no masks: a tail of `lanes` < width elements moves as power-of-two pieces, the first with a
    scalar ldr/str of its size (which clears the rest of the register), the others as single
    lanes (ld1/st1 {v.T}[i]); reduction tails blend with a lane-mask constant (bif);
  - a broadcast operand is a scalar load used by element (`fmla v.4s, v.4s, v.s[0]`), duplicated
    across the register only when other arithmetic reads it;
  - displacements beyond the immediate forms go through x16 (register offset), x17 is scratch.
AAPCS64: x19-x28 and d8-d15 are saved in the prologue (the pointer pool reaches them, and
register numbers 24-31 of the vector file are v8-v15).
"""
from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...isa.aarch64.operands import SP, V, X, Mem
from ...looptree.ir import REDUCE_IDENTITY, Access, LoopTree
from ..emitter import Emitter
from ..values import Shape, Val
from . import integer, vmath

ARITH = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv", "max": "fmax", "min": "fmin"}
# caller-saved first: x0 is the argument block (read in the prologue), x1/x2 start/end (parallel
# loops), x16/x17 address scratch, x18 the platform register, x29/x30 frame and link
POINTERS = tuple(X(n) for n in (*range(3, 16), *range(19, 29)))
CALLEE_SAVED_X = tuple(X(n) for n in range(19, 29))
# vector register numbers of the register file -> v registers. fp32: v8-v15 (callee-saved low
# halves) last. fp16: v16-v31 first, so that the operands of a large block's by-element fmla,
# allocated after its accumulators, fall in v0-v15, the only registers its 4-bit Vm field names
PHYSICAL = {False: (*range(8), *range(16, 32), *range(8, 16)), True: (*range(16, 32), *range(16))}
FRAME = 16 * 9            # x19-x28 and d8-d15 in pairs
T0, T1 = X(16), X(17)


class A64Emitter(Emitter):
    pointer_registers = POINTERS

    def __init__(self, asm, target, tree: LoopTree, pointers: dict | None = None):
        super().__init__(asm, target, tree, pointers)
        self.fp16 = target.compute_dtype == "float16"
        self.esize = 2 if self.fp16 else 4
        self.arr = "h8" if self.fp16 else "s4"
        self.phys = PHYSICAL[self.fp16]
        self.counters: list = []
        self._lane0: set[int] = set()   # registers holding a broadcast operand in lane 0 only

    @classmethod
    def lanes(cls, target) -> int:
        return target.lanes()

    @classmethod
    def check_tree(cls, tree: LoopTree, target) -> None:
        want = target.compute_dtype
        for b in tree.buffers:       # fp32 arithmetic also reads and writes fp16 storage
            if b.dtype in integer.INT_DTYPES and want == "float32":
                continue             # integer statements: int32 lanes where fp32 ones are
            if b.dtype != want and not (b.dtype == "float16" and want == "float32"):
                raise UnsupportedError(
                    f"target {target.name} computes in {want} (storage and arithmetic); buffer %{b.name} is "
                    f"{b.dtype} (use {'neon' if want == 'float16' else 'neon_fp16'} or target='interp')")

    # -- registers ------------------------------------------------------------------
    def vec(self, num: int):
        """Register number `num` as a full vector (a lane-0 broadcast is spread first)."""
        v = V(self.phys[num])
        if num in self._lane0:
            self._lane0.discard(num)
            self.asm.emit("dup", getattr(v, self.arr), self._elem(v, 0))
        return getattr(v, self.arr)

    def out(self, num: int):
        """Register number `num` as a destination: whatever it held is replaced."""
        self._lane0.discard(num)
        return getattr(V(self.phys[num]), self.arr)

    def _elem(self, v, i: int):
        return (v.h if self.fp16 else v.s)[i]

    def alloc_for(self, kind: str) -> int:
        """fp16 broadcasts in v0-v15 where one is free: fmla .8h by element names only those."""
        free = self.regs.free
        if self.fp16 and kind == "bcast":
            for i in range(len(free) - 1, -1, -1):
                if self.phys[free[i]] < 16:
                    return free.pop(i)
        return self.regs.alloc()

    # -- addresses ------------------------------------------------------------------
    def memory(self, pointer, disp: int):
        return (pointer, disp)

    def _mem(self, m, size: int) -> Mem:
        """[pointer, #disp] for an access of `size` bytes, or [pointer, x16] beyond the immediates."""
        pointer, disp = m
        if (0 <= disp < 4096 * size and disp % size == 0) or -256 <= disp < 256:
            return Mem(pointer, disp)
        self._mov(T0, disp)
        return Mem(pointer, T0)

    def _addr(self, m) -> Mem:
        """[x16] at pointer + disp (the single-lane forms take no offset)."""
        pointer, disp = m
        if disp == 0:
            return Mem(pointer)
        self._add(T0, pointer, disp)
        return Mem(T0)

    def _mov(self, d, value: int) -> None:
        """d = value: one movz for the common small counts and offsets, else the assembler's
        shortest movz/movn/movk sequence."""
        if 0 <= value < 1 << 16:
            self.asm.emit("movz", d, value)
        else:
            self.asm.mov_imm(d, value)

    def _add(self, d, n, value: int) -> None:
        if value == 0:
            if d != n:
                self.asm.emit("mov", d, n)
            return
        op, mag = ("add", value) if value > 0 else ("sub", -value)
        if mag < 4096:
            self.asm.emit(op, d, n, mag)
        else:
            self._mov(T1, mag)
            self.asm.emit(op, d, n, T1)

    # -- loads and stores -----------------------------------------------------------
    def _pieces(self, lanes: int):
        """(first lane, lanes) of the power-of-two pieces of a tail, largest first."""
        out, lane, size = [], 0, self.width
        while size:
            if lanes - lane >= size:
                out.append((lane, size))
                lane += size
            size //= 2
        return out

    def _narrow(self, dtype: str) -> bool:
        """float16 storage under float32 arithmetic (neon): converted on every load and store."""
        return dtype == "float16" and not self.fp16

    def load_into(self, reg: int, m, kind: str, shape: Shape, dtype: str) -> None:
        if dtype in integer.INT_DTYPES:
            if not self.int and (dtype != "int32" or self.fp16):    # int32 lanes read as float bits
                what = f"{dtype} into float16" if self.fp16 else dtype
                raise UnsupportedError(f"the AArch64 backend converts int32 reads into a float32 statement, not {what} "
                                       "(convert the integers to int32 or to float32 in a statement of their own)")
            integer.load_into(self, reg, m, kind, shape, dtype)
            if not self.int:        # an int32 read by a float statement: as numpy's astype, rounded
                self.asm.emit("scvtf", V(self.phys[reg]).s4, V(self.phys[reg]).s4)
            return
        a = self.asm
        v = V(self.phys[reg])
        self._lane0.discard(reg)
        esize = 2 if dtype == "float16" else 4
        if kind in ("scalar", "bcast"):
            a.emit("ldr", v.h if esize == 2 else v.s, self._mem(m, esize))
        elif not shape.masked:
            a.emit("ldr", v.q if esize == self.esize else v.d, self._mem(m, esize * self.width))
        else:
            self._tail("ldr", "ld1", v, m, shape.lanes, esize)
        if self._narrow(dtype):
            a.emit("fcvtl", v.s4, v.h4)
        if kind == "bcast":
            self._lane0.add(reg)

    def _tail(self, whole: str, lane: str, v, m, lanes: int, esize: int) -> None:
        """`lanes` elements of `esize` bytes at `m` as power-of-two pieces: the first by a scalar
        ldr/str of its size (a load clears the rest of the register), the others as single lanes
        (ld1/st1)."""
        pointer, disp = m
        for first, n in self._pieces(lanes):
            size = n * esize
            view = getattr(v, {2: "h", 4: "s", 8: "d"}[size])
            if first == 0:
                self.asm.emit(whole, view, self._mem((pointer, disp), size))
            else:
                self.asm.emit(lane, [view[first // n]], self._addr((pointer, disp + first * esize)))

    def store(self, reg: int, access: Access, static: dict[str, int], shape: Shape) -> None:
        a = self.asm
        m = self.address(access, static)
        dtype = self.dtype_of(access)
        if dtype in integer.INT_DTYPES:
            integer.store(self, reg, m, dtype, shape)
            return
        if shape.vector:
            self.vec(reg)
        v = V(self.phys[reg])
        tmp = None
        if self._narrow(dtype):          # convert a copy: the register may be a cached value
            tmp = self.regs.alloc()
            v, src = V(self.phys[tmp]), v
            a.emit("fcvtn", v.h4, src.s4)
        esize = 2 if dtype == "float16" else 4
        if not shape.vector:                 # lane 0, whether or not the rest holds it too
            a.emit("str", v.h if esize == 2 else v.s, self._mem(m, esize))
        elif not shape.masked:
            a.emit("str", v.q if esize == self.esize else v.d, self._mem(m, esize * self.width))
        else:
            self._tail("str", "st1", v, m, shape.lanes, esize)
        if tmp is not None:
            self.regs.release(tmp)

    def _const_vector(self, values) -> object:
        dt = np.float16 if self.fp16 else np.float32
        return self.asm.const(np.asarray(values, dt), align=16)

    def load_const(self, reg: int, value: float, shape: Shape) -> None:
        if self.int:
            integer.load_const(self, reg, value, shape)
            return
        v = V(self.phys[reg])
        self._lane0.discard(reg)
        if value == 0.0 and str(value) == "0.0":
            self.asm.emit("movi", v.d2, 0)
        else:
            self.asm.emit("ldr", v.q, self._const_vector([value] * self.width))

    def load_operand(self, reg: int, operand, shape: Shape) -> None:
        raise UnsupportedError("AArch64 arithmetic takes no memory operands")

    # -- arithmetic -----------------------------------------------------------------
    def copy(self, dst: int, src: int, shape: Shape) -> None:
        self.vec(src)
        self.out(dst)
        self.asm.emit("mov", V(self.phys[dst]).b16, V(self.phys[src]).b16)

    def arith(self, op: str, d: int, a: int, b: Val, shape: Shape) -> None:
        if self.int:
            integer.arith(self, op, d, a, b, shape)
            return
        x, y = self.vec(a), self.vec(b.reg)
        self.asm.emit(ARITH[op], self.out(d), x, y)

    def _by_element(self, reg: int) -> bool:
        """Whether an fmla can read register number `reg` as its lane-0 element operand."""
        return reg in self._lane0 and (not self.fp16 or self.phys[reg] < 16)

    def fma(self, acc: int, a: int, b: Val, shape: Shape) -> None:
        if self.int:
            integer.fma(self, acc, a, b, shape)
            return
        if self._by_element(b.reg) and a not in self._lane0:
            self.asm.emit("fmla", self.vec(acc), self.vec(a), self._elem(V(self.phys[b.reg]), 0))
            return
        if self._by_element(a) and b.reg not in self._lane0:
            self.asm.emit("fmla", self.vec(acc), self.vec(b.reg), self._elem(V(self.phys[a]), 0))
            return
        self.asm.emit("fmla", self.vec(acc), self.vec(a), self.vec(b.reg))

    def unary(self, op: str, d: int, x: int, shape: Shape) -> None:
        if self.int:
            integer.unary(self, op, d, x, shape)
            return
        self.vec(x)
        vmath.unary(self, op, d, x)

    def dot(self, acc: int, e, a: int, b: Val, shape: Shape) -> None:
        integer.dot(self, acc, e, a, b, shape)

    def requant(self, reg: int, stmt, static, shape: Shape) -> None:
        integer.requant(self, reg, stmt, static, shape)

    def blend_identity(self, val: Val, reduce: str, shape: Shape) -> None:
        if self.int:
            raise UnsupportedError("integer reductions along a vector are not vectorised on AArch64")
        if not val.owned:
            reg = self.regs.alloc()
            self.copy(reg, val.reg, shape)
            val.reg, val.owned = reg, True
        self.vec(val.reg)
        self.regs.pinned.add(val.reg)
        ident, mask = self.regs.alloc(), self.regs.alloc()
        self.load_const(ident, REDUCE_IDENTITY[reduce], shape)
        ones = (0xFFFF if self.fp16 else 0xFFFFFFFF)
        dt = np.uint16 if self.fp16 else np.uint32
        self.asm.emit("ldr", V(self.phys[mask]).q,
                      self.asm.const(np.array([ones] * shape.lanes + [0] * (self.width - shape.lanes), dt), align=16))
        # bif: the lanes where the mask is clear take the identity
        self.asm.emit("bif", V(self.phys[val.reg]).b16, V(self.phys[ident]).b16, V(self.phys[mask]).b16)
        self.regs.pinned.discard(val.reg)
        self.regs.release(ident)
        self.regs.release(mask)

    def hreduce(self, acc: int, reduce: str) -> None:
        """Halve the vector onto itself (ext) until lane 0 holds the fold of every lane."""
        t = self.regs.alloc()
        va, vt = V(self.phys[acc]), V(self.phys[t])
        self.vec(acc)
        step = 8
        while step >= self.esize:
            self.asm.emit("ext", vt.b16, va.b16, va.b16, step)
            self.asm.emit(ARITH[reduce], getattr(va, self.arr), getattr(va, self.arr), getattr(vt, self.arr))
            step //= 2
        self.regs.release(t)

    # -- the function ---------------------------------------------------------------
    def prologue(self, slots: dict[str, int]) -> None:
        a = self.asm
        xs = CALLEE_SAVED_X
        a.emit("stp", xs[0], xs[1], Mem.pre(SP, -FRAME))
        for i in range(2, len(xs), 2):
            a.emit("stp", xs[i], xs[i + 1], Mem(SP, 8 * i))
        for j, n in enumerate(range(8, 16, 2)):
            a.emit("stp", V(n).d, V(n + 1).d, Mem(SP, 80 + 16 * j))
        for s, reg in self.pointers.items():
            a.emit("ldr", reg, Mem(X(0), 8 * slots[s[0]]))

    def epilogue(self) -> None:
        a = self.asm
        xs = CALLEE_SAVED_X
        for j, n in enumerate(range(8, 16, 2)):
            a.emit("ldp", V(n).d, V(n + 1).d, Mem(SP, 80 + 16 * j))
        for i in range(2, len(xs), 2):
            a.emit("ldp", xs[i], xs[i + 1], Mem(SP, 8 * i))
        a.emit("ldp", xs[0], xs[1], Mem.post(SP, FRAME))
        a.emit("ret")

    def use_counters(self, registers: list) -> None:
        self.counters = list(registers)

    def _counter(self):
        if not self.counters:
            raise UnsupportedError("loop nest too deep: no general register is left for a loop counter")
        return self.counters.pop(0)

    def loop_begin(self, name: str, count: int):
        c = self._counter()
        self._mov(c, count)
        top = self.asm.label(f"{name}_top")
        self.asm.bind(top)
        return c, top

    def loop_end(self, counter, top, deltas) -> None:
        for reg, d in deltas:
            self._add(reg, reg, d)
        self.asm.emit("subs", counter, counter, 1)
        self.asm.emit("b.ne", top)
        self.counters.insert(0, counter)

    def rewind(self, pointer, total: int) -> None:
        self._add(pointer, pointer, -total)

    def prefetch(self, pointer, disp: int) -> None:
        self.asm.emit("prfm", "pldl1keep", self._mem((pointer, disp), 8))

    def parallel_begin(self, deltas, full: int):
        a = self.asm
        start, end = X(1), X(2)
        for reg, d in deltas:
            self._mov(T0, d)
            a.emit("madd", reg, start, T0, reg)
        if not full:
            return None
        c = self._counter()
        done = a.label("par_done")
        self._mov(T1, full)
        a.emit("cmp", end, T1)
        a.emit("csel", T1, end, T1, "lt")
        a.emit("subs", c, T1, start)
        a.emit("b.le", done)
        top = a.label("par_top")
        a.bind(top)
        return c, top, done

    def parallel_tail_begin(self, full: int):
        a = self.asm
        skip = a.label("par_no_tail")
        self._mov(T1, full)
        a.emit("cmp", X(2), T1)
        a.emit("b.le", skip)
        return skip
