"""Which tensorized instruction a compile uses: the code generators' one entry into the registry.

`tensorize_for_target(tree, target)` rewrites the integer contraction (8-bit operands, int32
accumulation, optionally requantized) of a tree, where it has loops of its own, with the widest
registry entry the target runs that the rewriter can apply, and returns the tree unchanged
when none applies (its integer code is then emitted as it stands: correct, not tensorized).
An instruction set is used only where the target may assume it: a target's own features, plus
the target's `extensions` when the host running the compile has them (a compile for another
machine names that machine's target and gets its baseline).
"""
from __future__ import annotations

import logging

from ...errors import ScheduleError, UnsupportedError
from ...looptree.ir import Binary, Compute, Load, Loop, LoopTree
from .registry import TensorInstr, instructions_for
from .rewrite import accumulation_dtype, tensorize
from .scheduled import alone, isolate, loop_vars, splice, tensorize_requested
from .tiles import tensorize_tiles

_log = logging.getLogger("loopstack")


def target_features(target) -> frozenset[str]:
    """What the target's code may use: its own features, a named CPU preset's (`cpu="apple-m1"`
    has the dot product), and the target's `extensions` that this host has when it is the target's."""
    from ...isa import cpu
    from ...isa.target import CPU_PRESETS, host_arch

    feats = set(target.required)
    if target.cpu in CPU_PRESETS:
        feats |= CPU_PRESETS[target.cpu][1]
    elif target.arch == host_arch():
        feats |= target.extensions & cpu.cpu_features()
        if "amx_tile" in feats and not cpu.amx_permission()[0]:      # tiles fault without the OS's grant
            _log.info("no AMX tiles: %s", cpu.amx_permission()[1])
            feats = {f for f in feats if not f.startswith("amx")}
    return frozenset(f.lower() for f in feats)


def is_integer_contraction(tree: LoopTree, s: Compute) -> bool:
    """`out[...] += a[...] * b[...]` over 8-bit operands into an int32 sum."""
    if s.reduce != "add" or accumulation_dtype(tree, s) != "int32":
        return False
    e = s.expr
    return (isinstance(e, Binary) and e.op == "mul" and isinstance(e.a, Load) and isinstance(e.b, Load)
            and all(tree.buffer(x.access.buffer).dtype in ("int8", "uint8") for x in (e.a, e.b)))


def register_block(target, instr: TensorInstr) -> tuple[int, int, int]:
    """(rows, vectors of lanes, accumulators the registers hold) of the accumulator block: up to
    4 vectors wide (2 in 256-bit registers), as many rows (at most 6, or 7 where that divides the
    rows: see rewrite.py) as the registers left by the instruction hold."""
    panels = 4 if target.vector_bits >= 512 else 2
    room = target.block_registers - instr.scratch
    return max(1, min(6, room // panels)), panels, room


def tile_instructions(target) -> list[TensorInstr]:
    """The tile instructions (AMX) code for `target` may use on this host."""
    return [t for t in instructions_for(target.arch, target_features(target)) if t.tile]


def tensorize_for_target(tree: LoopTree, target) -> tuple[LoopTree, TensorInstr | None]:
    """Each statement the schedule asked to tensorize, on the schedule's loops (or a
    ScheduleError saying why no instruction applies); without a request, an integer contraction
    with loops of its own, on the instruction's default register block (or left as it is)."""
    features = target_features(target)
    used = None
    for stack, s in list(tree.computes()):
        if s.tensorize:
            tree, used = tensorize_requested(tree, stack, s, target, features)
    if used is not None:
        return tree, used
    for _, s in tree.computes():
        if is_integer_contraction(tree, s):
            try:
                at = isolate(tree, s)
            except ScheduleError:
                continue
            part, instr = _default(alone(tree, at), target, features, loop_vars(tree))
            if instr is not None:
                return splice(tree, at, part), instr
    return tree, None


def _default(tree: LoopTree, target, features, avoid) -> tuple[LoopTree, TensorInstr | None]:
    tiles = [t for t in instructions_for(target.arch, features) if t.tile]
    # a tile unit first, where there is one; the schedule's parallel loop stays parallel
    parallel = any(isinstance(n, Loop) and "parallel" in n.annotations for n in tree.body)
    for transposed in (False, True):
        for instr in tiles:
            try:
                return tensorize_tiles(tree, instr, avoid=avoid, transposed=transposed, parallel=parallel).tree, instr
            except (UnsupportedError, ScheduleError):
                continue
    for instr in instructions_for(target.arch, features):
        if instr.broadcast is None or instr.vector_bits != target.vector_bits:
            continue
        try:
            return tensorize(tree, instr, block=register_block(target, instr), avoid=avoid, parallel=parallel).tree, instr
        except (UnsupportedError, ScheduleError):
            continue
    return tree, None
