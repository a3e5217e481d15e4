"""The instruction registry: one builder per opcode turns a parsed instruction into a function
of the mask of lanes that execute it (arith.py, convert.py, access.py, async_copy.py, warp.py
register theirs); control flow (bra, exit, bar.sync) is the scheduler's own (cta.py).

Values are computed for every lane of the CTA at once (numpy, vectorised) and stored into the
lanes of the mask only; memory is touched for those lanes alone.
"""
from __future__ import annotations

from ....errors import SimulationError
from .numeric import TYPES
from .parse import Imm

BUILDERS: dict = {}


def builder(*opcodes):
    def register(fn):
        for op in opcodes:
            BUILDERS[op] = fn
        return fn
    return register


def unsupported(instr, why=""):
    raise SimulationError(f"{instr.where()}: unsupported: {instr.full}{' (' + why + ')' if why else ''}")


def types_and_flags(instr):
    types = [TYPES[m] for m in instr.mods if m in TYPES]
    flags = {m for m in instr.mods if m not in TYPES}
    return types, flags


def only(instr, flags, allowed):
    extra = set(flags) - set(allowed)
    if extra:
        unsupported(instr, "modifier ." + ", .".join(sorted(extra)))


def operand_count(instr, n):
    if len(instr.operands) != n:
        raise SimulationError(f"{instr.where()}: expected {n} operands, found {len(instr.operands)}")


# ---- control flow markers (the scheduler runs them) ---------------------------------------------

def control_kind(instr):
    """The scheduler's kind for control instructions, or None for ordinary ones."""
    if instr.opcode == "bra":
        only(instr, set(instr.mods), {"uni"})
        return "bra"
    if instr.opcode in ("ret", "exit"):
        return "exit"
    if instr.opcode in ("bar", "barrier"):
        only(instr, set(instr.mods), {"sync", "aligned", "cta"})
        if instr.opcode == "bar" and "sync" not in instr.mods and instr.mods:
            unsupported(instr)
        if len(instr.operands) != 1 or not isinstance(instr.operands[0], Imm) or int(instr.operands[0].text, 0) != 0:
            unsupported(instr, "only barrier 0 of the whole CTA")
        return "bar"
    return None
