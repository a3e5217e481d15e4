"""cp.async: copies from global to shared memory that complete only at a wait.

Each thread has its own sequence of groups, as in the PTX ISA: its copies since its last
`cp.async.commit_group` form the next group; `cp.async.wait_group N` completes all of the
thread's committed groups but the N most recent; `cp.async.wait_all` completes all of its copies.
A copy is performed (its source read, its destination written) only then: the hardware may finish
it at any time before the wait, so a kernel that reads the destination before waiting, or writes
the source after issuing, is wrong, and here it reads stale shared memory.  Bounds and alignment
are checked when the copy is issued, so a fault names the cp.async itself.
"""
from __future__ import annotations

import numpy as np

from ....errors import SimulationError
from .numeric import TYPES
from .ops import builder, only, unsupported
from .parse import Imm, Reg

UNCOMMITTED = -1


class AsyncCopies:
    def __init__(self, kernel):
        self.kernel = kernel
        self.reset()

    def reset(self):
        self.pending = []          # [instr, lanes, dst, src, nbytes(src-size), size, group per lane]
        self.committed = np.zeros(self.kernel.n, dtype=np.int64)   # groups committed per thread

    def issue(self, instr, lanes, dst, src, size, nbytes):
        k = self.kernel
        k.shared.issue_async(instr, k.fault, lanes, dst, size)
        reading = nbytes > 0
        if reading.any():
            k.globals.check(instr, k.fault, lanes[reading], src[reading], nbytes[reading], align=size)
        self.pending.append([instr, lanes, dst, src, nbytes, size, np.full(len(lanes), UNCOMMITTED)])

    def commit(self, mask):
        for rec in self.pending:
            group = rec[6]
            sel = mask[rec[1]] & (group == UNCOMMITTED)
            group[sel] = self.committed[rec[1][sel]]
        self.committed[mask] += 1

    def wait(self, mask, keep):
        """Complete the copies of the threads in `mask`: all but their `keep` most recent
        committed groups (keep=None: every copy, committed or not)."""
        still = []
        for rec in self.pending:
            instr, lanes, dst, src, nbytes, size, group = rec
            mine = mask[lanes]
            if keep is None:
                done = mine
            else:
                done = mine & (group != UNCOMMITTED) & (group < self.committed[lanes] - keep)
            if done.any():
                self._perform(instr, lanes[done], dst[done], src[done], nbytes[done], size)
            if not done.all():
                still.append([instr, lanes[~done], dst[~done], src[~done], nbytes[~done], size, group[~done]])
        self.pending = still

    def _perform(self, instr, lanes, dst, src, nbytes, size):
        k = self.kernel
        data = np.zeros((len(lanes), size), dtype=np.uint8)
        reading = nbytes > 0
        if reading.any():
            data[reading] = k.globals.load_partial(instr, k.fault, lanes[reading], src[reading], size,
                                                   nbytes[reading])
        k.shared.store(instr, k.fault, lanes, dst, data, asynchronous=True)


@builder("cp")
def cp_async(instr, B):
    if instr.mods[:1] != ("async",):
        unsupported(instr)
    rest = instr.mods[1:]
    if rest == ("commit_group",):
        return lambda mask: B.copies.commit(mask)
    if rest == ("wait_all",):
        def wait_all(mask):
            B.copies.commit(mask)
            B.copies.wait(mask, None)
        return wait_all
    if rest == ("wait_group",):
        if len(instr.operands) != 1 or not isinstance(instr.operands[0], Imm):
            raise SimulationError(f"{instr.where()}: cp.async.wait_group takes an integer constant")
        keep = int(instr.operands[0].text, 0)
        return lambda mask: B.copies.wait(mask, keep)
    flags = {m.split("::")[0] for m in rest}
    only(instr, flags, {"ca", "cg", "shared", "global", "L2"})
    if not {"shared", "global"} <= flags or len({"ca", "cg"} & flags) != 1:
        unsupported(instr, "cp.async.{ca,cg}.shared.global only")
    ops = instr.operands
    if len(ops) not in (3, 4) or not isinstance(ops[2], Imm):
        raise SimulationError(f"{instr.where()}: cp.async [dst], [src], cp-size{{, src-size | ignore-src}}")
    size = int(ops[2].text, 0)
    if size not in (4, 8, 16) or ("cg" in flags and size != 16):
        raise SimulationError(f"{instr.where()}: cp-size must be 4, 8 or 16 (16 for .cg), not {size}")
    _, dst = B.ops.address(instr, ops[0])
    _, src = B.ops.address(instr, ops[1])
    u32 = TYPES["u32"]
    nbytes = lambda: np.uint32(size)
    ignore = None
    if len(ops) == 4:
        fourth = ops[3]
        if isinstance(fourth, Reg) and B.ops.reg_types[fourth.name].kind == "pred":
            ignore = B.ops.reader(instr, fourth, TYPES["pred"])     # ignore-src: copy zeros
        else:
            nbytes = B.ops.reader(instr, fourth, u32)                # src-size: zero-fill the rest

    def run(mask):
        lanes = np.flatnonzero(mask)
        n = np.broadcast_to(nbytes(), (B.n,))[lanes].astype(np.int64)
        if ignore is not None:
            n = np.where(np.broadcast_to(ignore(), (B.n,))[lanes], 0, n)
        if (n > size).any():
            lane = lanes[int(np.argmax(n > size))]
            B.fault.raise_for(instr, lane, f"src-size {int(n.max())} exceeds cp-size {size}")
        B.copies.issue(instr, lanes, np.broadcast_to(dst(), (B.n,))[lanes].copy(),
                       np.broadcast_to(src(), (B.n,))[lanes].copy(), size, n)
    return run
