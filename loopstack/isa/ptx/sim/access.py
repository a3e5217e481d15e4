"""ld and st on the global, shared and param state spaces, scalar and vector (.v2/.v4)."""
from __future__ import annotations

import numpy as np

from ....errors import SimulationError
from .ops import builder, only, operand_count, types_and_flags, unsupported

SPACES = ("global", "shared", "param")
CACHE_HINTS = {"ca", "cg", "cs", "lu", "cv", "nc", "wb", "wt", "volatile", "relaxed", "weak", "cta", "gpu", "sys",
               "L1::no_allocate", "L2::64B", "L2::128B", "L2::256B"}


def memory_access(instr, B):
    """(space, element type, vector length, the space's ByteSpace or None for param)."""
    types, flags = types_and_flags(instr)
    spaces = [m.split("::")[0] for m in instr.mods if m.split("::")[0] in SPACES + ("local", "const")]
    if len(spaces) != 1 or spaces[0] not in SPACES:
        unsupported(instr, "state space must be .global, .shared or .param")
    space = spaces[0]
    vec = 1
    for m in instr.mods:
        if m in ("v2", "v4", "v8"):
            vec = int(m[1])
    only(instr, {f for f in flags if not f.startswith(space)} - {"v2", "v4", "v8"}, CACHE_HINTS)
    if len(types) != 1:
        unsupported(instr, "one type suffix expected")
    return space, types[0], vec


@builder("ld")
def ld(instr, B):
    space, t, vec = memory_access(instr, B)
    operand_count(instr, 2)
    dests = B.ops.vector(instr, instr.operands[0], vec if vec > 1 else None)
    writes = [B.ops.writer(instr, d, t) for d in dests]
    sym_space, addr = B.ops.address(instr, instr.operands[1])
    if sym_space is not None and sym_space != space:
        raise SimulationError(f"{instr.where()}: symbol in .{sym_space} read with ld.{space}")
    mem = B.space(space)
    size = t.size * vec
    if t.kind == "pred":
        unsupported(instr, "predicate load")
    noncoherent = "nc" in instr.mods

    def run(mask):
        lanes = np.flatnonzero(mask)
        a = np.broadcast_to(addr(), (B.n,))[lanes]
        data = mem.load(instr, B.fault, lanes, a, size, noncoherent).view(t.view)
        for k, write in enumerate(writes):
            full = np.zeros(B.n, dtype=t.view)
            full[lanes] = data[:, k]
            write(full, mask)
    return run


@builder("st")
def st(instr, B):
    space, t, vec = memory_access(instr, B)
    if space == "param":
        unsupported(instr, "stores to .param")
    operand_count(instr, 2)
    srcs = B.ops.vector(instr, instr.operands[1], vec if vec > 1 else None)
    reads = [B.ops.reader(instr, s, t) for s in srcs]
    _, addr = B.ops.address(instr, instr.operands[0])
    mem = B.space(space)

    def run(mask):
        lanes = np.flatnonzero(mask)
        a = np.broadcast_to(addr(), (B.n,))[lanes]
        cols = np.stack([np.broadcast_to(r(), (B.n,))[lanes].astype(t.view) for r in reads], axis=1)
        mem.store(instr, B.fault, lanes, a, np.ascontiguousarray(cols).view(np.uint8))
    return run
