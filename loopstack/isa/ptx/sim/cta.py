"""Binding an entry to a launch, and running its CTAs one after another.

Every thread of a CTA has its own program counter; the scheduler runs the group of runnable
threads at the lowest PC, one instruction at a time, vectorised over that group.  Divergent
branches therefore reconverge wherever the paths meet again (structured or not), loops run until
their last thread leaves, and `bar.sync` holds each thread until every thread of the CTA has
arrived.  While all runnable threads share one PC (the common case) no per-thread PCs are touched.
"""
from __future__ import annotations

import numpy as np

from ....errors import ArgumentError, SimulationError
from . import access, arith, async_copy, convert, warp  # noqa: F401  (they register their builders)
from .memory import Fault, GlobalMemory, SharedMemory, ByteSpace
from .numeric import TYPES, storage_dtype
from .operands import Operands
from .ops import BUILDERS, control_kind, unsupported
from .parse import Entry, Module, Sym

SHARED_LIMIT = 228 * 1024       # an H100 SM's shared memory; sm_80 has 164 KiB
DEFAULT_MAX_STEPS = 20_000_000


class Op:
    __slots__ = ("kind", "run", "guard", "target", "instr")

    def __init__(self, kind, run, guard, target, instr):
        self.kind, self.run, self.guard, self.target, self.instr = kind, run, guard, target, instr


class BoundKernel:
    """An entry bound to a launch configuration and its arguments: register file, state spaces and
    the compiled instruction list, reused by every CTA of the grid."""

    def __init__(self, module: Module, entry: Entry, grid, block, args, dynamic_shared_bytes, banks=None):
        self.entry = entry
        self.grid, self.block = grid, block
        bx, by, bz = block
        self.n = n = bx * by * bz
        if n < 1 or n > 1024:
            raise ArgumentError(f"block {block}: a CTA holds 1 to 1024 threads")
        # the GPU refuses such launches: a kernel compiled for at most (or exactly) these threads
        limit = entry.thread_limits.get(".maxntid")
        if limit and n > limit[0] * limit[1] * limit[2]:
            raise ArgumentError(f"block {block}: entry {entry.name} declares .maxntid {limit} "
                                f"({limit[0] * limit[1] * limit[2]} threads)")
        required = entry.thread_limits.get(".reqntid")
        if required and tuple(block) != required:
            raise ArgumentError(f"block {block}: entry {entry.name} declares .reqntid {required}")
        self.ctaid = (0, 0, 0)
        lin = np.arange(n, dtype=np.uint32)
        self.specials = {
            "%tid.x": lin % bx, "%tid.y": (lin // bx) % by, "%tid.z": lin // (bx * by),
            "%laneid": lin % 32, "%warpid": lin // 32, "%warpsize": np.full(n, 32, np.uint32),
            "%nwarpid": np.full(n, (n + 31) // 32, np.uint32),
        }
        for axis, (g, b) in zip("xyz", zip(grid, block)):
            self.specials[f"%ntid.{axis}"] = np.full(n, b, np.uint32)
            self.specials[f"%nctaid.{axis}"] = np.full(n, g, np.uint32)
            self.specials[f"%ctaid.{axis}"] = np.zeros(n, np.uint32)
        self.symbols = {}
        self.shared = SharedMemory(self._layout_shared(module, entry, dynamic_shared_bytes), banks)
        self.params, self.globals, self._writeback = self._bind_args(entry, args)
        reg_types = {name: TYPES[t] for name, t in entry.regs.items()}
        self.regs = {name: np.zeros(n, storage_dtype(t)) for name, t in reg_types.items()}
        self.ops = Operands(self.regs, reg_types, self.specials, self.symbols)
        self.fault = Fault(self.describe)
        self.copies = async_copy.AsyncCopies(self)
        self.prog = [self._compile(instr) for instr in entry.body]

    # -- layout
    def _layout_shared(self, module, entry, dynamic_bytes):
        offset = 0
        dynamic = []
        for var in module.shared + entry.shared:
            if var.extern:
                dynamic.append(var)
                continue
            offset = (offset + var.align - 1) // var.align * var.align
            self.symbols[var.name] = ("shared", offset)
            offset += var.size
        if dynamic:
            align = max(16, *(v.align for v in dynamic))
            offset = (offset + align - 1) // align * align
            for var in dynamic:        # every extern array names the start of the dynamic part
                self.symbols[var.name] = ("shared", offset)
        offset += dynamic_bytes
        if offset > SHARED_LIMIT:
            raise ArgumentError(f"entry {entry.name}: {offset} bytes of shared memory exceed a CTA's "
                                f"{SHARED_LIMIT}")
        return offset

    def _bind_args(self, entry, args):
        if len(args) != len(entry.params):
            raise ArgumentError(f"entry {entry.name} takes {len(entry.params)} arguments "
                                f"({', '.join(p.name for p in entry.params)}), got {len(args)}")
        arrays, writeback, address_of = [], [], []      # address_of: per argument, its array's index
        for p, a in zip(entry.params, args):
            if not isinstance(a, np.ndarray):
                address_of.append(None)
                continue
            if p.type not in ("u64", "b64", "s64"):
                raise ArgumentError(f"parameter {p.name} is .{p.type}: an array needs a .u64 pointer")
            same = next((k for k, (_, _, orig) in enumerate(arrays) if orig is a), None)
            if same is not None:              # the same array twice: one address, as on a GPU
                address_of.append(same)
                continue
            work = np.ascontiguousarray(a)
            if work is not a and a.flags.writeable:
                writeback.append((a, work))
            address_of.append(len(arrays))
            arrays.append((f"argument {p.name} ({a.dtype}{list(a.shape)})", work, a))
        glob = GlobalMemory([(label, work) for label, work, _ in arrays])
        offset = 0
        pieces = []
        for p, a, k in zip(entry.params, args, address_of):
            offset = (offset + p.align - 1) // p.align * p.align
            t = TYPES[p.type]
            if k is not None:
                value = np.array([glob.addresses[k]], dtype=np.uint64)
            else:
                value = _scalar_param(p, t, a)
            pieces.append((offset, value.view(np.uint8)))
            self.symbols[p.name] = ("param", offset)
            offset += p.size
        space = np.zeros(max(offset, 1), dtype=np.uint8)
        for off, raw in pieces:
            space[off:off + raw.size] = raw
        params = ByteSpace([(0, space, "the kernel parameters", False)])
        params.space = "param"
        return params, glob, writeback

    def space(self, name):
        return {"global": self.globals, "shared": self.shared, "param": self.params}[name]

    def describe(self, lane):
        lane = int(lane)
        bx, by, _ = self.block
        tid = (lane % bx, (lane // bx) % by, lane // (bx * by))
        return f"thread {tid} (lane {lane % 32} of warp {lane // 32}) of CTA {self.ctaid}"

    # -- compile
    def _compile(self, instr) -> Op:
        guard = None
        if instr.guard is not None:
            guard = self.ops.reader(instr, instr.guard, TYPES["pred"])
        kind = control_kind(instr)
        if kind == "bra":
            if len(instr.operands) != 1 or not isinstance(instr.operands[0], Sym):
                raise SimulationError(f"{instr.where()}: bra needs a label")
            label = instr.operands[0].name
            if label not in self.entry.labels:
                raise SimulationError(f"{instr.where()}: unknown label {label}")
            return Op("bra", None, guard, self.entry.labels[label], instr)
        if kind is not None:
            return Op(kind, None, guard, None, instr)
        build = BUILDERS.get(instr.opcode)
        if build is None:
            unsupported(instr)
        return Op("op", build(instr, self), guard, None, instr)

    # -- run
    def run(self, max_steps=DEFAULT_MAX_STEPS) -> int:
        """Run every CTA of the grid; returns the instructions executed (one per group of threads
        stepped together)."""
        gx, gy, gz = self.grid
        total = 0
        with np.errstate(all="ignore"):
            for z in range(gz):
                for y in range(gy):
                    for x in range(gx):
                        self.ctaid = (x, y, z)
                        self.globals.cta = x + gx * (y + gy * z)
                        for axis, v in zip("xyz", (x, y, z)):
                            self.specials[f"%ctaid.{axis}"].fill(v)
                        self.shared.reset()
                        self.copies.reset()
                        total += self._run_cta(max_steps)
        for original, work in self._writeback:
            original[...] = work
        return total

    def _run_cta(self, max_steps):
        n, prog, end = self.n, self.prog, len(self.prog)
        live = np.ones(n, dtype=bool)          # not exited
        waiting = np.zeros(n, dtype=bool)      # arrived at a barrier
        pcs = np.zeros(n, dtype=np.int64)      # valid for lanes outside `mask` (or all, when not uniform)
        pc, mask, uniform = 0, live.copy(), True
        steps = 0
        while True:
            if not uniform:
                runnable = live & ~waiting
                if not runnable.any():
                    if not live.any():
                        return steps
                    self._release_barrier(live, waiting)
                    waiting[:] = False
                    self.shared.hazards.clear()
                    runnable = live.copy()
                pc = int(pcs[runnable].min())
                mask = runnable & (pcs == pc)
                uniform = bool(np.array_equal(mask, runnable))
            if pc >= end:                      # ran off the end: an implicit exit
                live &= ~mask
                if not live.any():
                    return steps
                uniform = False
                continue
            steps += 1
            if steps > max_steps:
                raise SimulationError(f"CTA {self.ctaid}: more than {max_steps} instructions executed "
                                      f"(an endless loop?) at {prog[pc].instr.where()}")
            op = prog[pc]
            eff = mask
            if op.guard is not None:
                g = op.guard()
                eff = mask & g
            kind = op.kind
            if kind == "op":
                if eff is mask or eff.any():
                    op.run(eff)
                pc += 1
                if not uniform:
                    pcs[mask] = pc
                continue
            rest = mask & ~eff if eff is not mask else None
            if kind == "bra":
                if rest is None or not rest.any():
                    pc = op.target
                elif not eff.any():
                    pc += 1
                else:
                    if "uni" in op.instr.mods:     # .uni promises the branch does not diverge
                        lane = int(np.argmax(rest))
                        raise SimulationError(f"{op.instr.where()}: bra.uni diverges: {self.describe(lane)} "
                                              f"does not take it while others do")
                    pcs[eff] = op.target
                    pcs[rest] = pc + 1
                    uniform = False
                    continue
                if not uniform:
                    pcs[mask] = pc
            elif kind == "exit":
                live &= ~eff
                if not live.any():
                    return steps
                mask = mask & ~eff
                pc += 1
                pcs[mask] = pc
                if not mask.any():
                    uniform = False
            elif kind == "bar":
                if uniform and rest is None and not waiting.any():
                    self._release_barrier(live, mask, op.instr)
                    self.shared.hazards.clear()
                    pc += 1
                    continue
                waiting |= eff
                pcs[mask] = pc + 1
                uniform = False

    def _release_barrier(self, live, waiting, instr=None):
        """All runnable threads wait at a barrier: it completes only if every thread of the CTA
        arrived (a thread that exited can never arrive: on the hardware that is a hang)."""
        if not live.all() or not np.array_equal(live, waiting):
            lane = int(np.argmin(live)) if not live.all() else int(np.argmin(waiting))
            raise SimulationError(f"{(instr.where() + ': ') if instr else ''}CTA {self.ctaid}: bar.sync "
                                  f"can never complete: {self.describe(lane)} "
                                  f"{'has exited' if not live[lane] else 'does not arrive'}")


def _scalar_param(p, t, value):
    """A Python int or float as the bytes of a scalar parameter of type `t`."""
    if t.kind == "f":
        if not isinstance(value, (int, float, np.integer, np.floating)):
            raise ArgumentError(f"parameter {p.name} is .{p.type}: expected a number, got {type(value).__name__}")
        return np.array([value], dtype=t.view)
    if t.is_int:
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise ArgumentError(f"parameter {p.name} is .{p.type}: expected an int, got {type(value).__name__}")
        # untyped (.b) parameters take signed or unsigned values alike
        lo = 0 if t.kind == "u" else -(1 << (t.bits - 1))
        hi = (1 << (t.bits - 1)) - 1 if t.kind == "s" else (1 << t.bits) - 1
        if not lo <= int(value) <= hi:
            raise ArgumentError(f"parameter {p.name} is .{p.type}: {value} is out of range")
        return np.array([int(value) & ((1 << t.bits) - 1)], dtype=np.uint64).astype(t.view.str.replace("i", "u"))
    raise ArgumentError(f"parameter {p.name}: type .{p.type} is not supported")
