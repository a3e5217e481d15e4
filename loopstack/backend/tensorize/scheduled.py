"""A contraction the schedule asked to tensorize (the `tensorize` action): its loops kept.

The frontend's `tensorize` action marks a statement (`Compute.tensorize`: "auto" or a registry
entry). Here the rewriter builds the instruction form with the *schedule's* loops above the
instruction's (UNIT §4.3: the outer loops are the schedule's to tile, order, unroll and run in
parallel), instead of the compile's default register block:
  - the innermost loop over the lane dimension (the one of step 1) steps by the instruction's
    lanes instead, and the innermost loop over the reduction by its k; each other loop over
    either must step by a multiple of them, or the schedule is refused naming the loop;
  - a loop left with one iteration (its step now its parent's) is dropped;
  - the loops keep their annotations ("parallel", "unroll"); "vectorize" is the instruction's.
A statement may share no loop with another: it is rewritten as a tree of its own and spliced
back, so the other statements of the program (copies, element-wise code) stay as they are.
"""
from __future__ import annotations

from ...errors import ScheduleError, UnsupportedError
from ...looptree.ir import Compute, Loop, LoopTree, statements
from .registry import TensorInstr, family, instructions_for
from .rewrite import tensorize


def candidates(request: str, target, features) -> list[TensorInstr]:
    """The entries a request may use on `target`, widest first."""
    runs = instructions_for(target.arch, features)
    if request == "auto":
        return [t for t in runs if t.broadcast is not None and t.vector_bits == target.vector_bits]
    named = family(request)
    return [t for t in runs if t in named and t.broadcast is not None] or named


def outer_loops(stack: tuple[Loop, ...]):
    """The rewriter's `outer`: the schedule's loops, the lane and reduction loops by whole
    instructions (a function of the lane and reduction dimensions the rewriter picks)."""
    def outer(lane: str, r: str, instr: TensorInstr):
        unit = {lane: (instr.lanes, "lanes"), r: (instr.k, "bytes of reduction")}
        out, step_of = [], {}
        for lp in stack:
            step = lp.step
            if lp.dim in unit:
                n, what = unit[lp.dim]
                if step == 1:
                    step = n
                elif step % n:
                    raise ScheduleError(f"tensorize: loop {lp.var} over {lp.dim} steps by {lp.step}, not a "
                                        f"multiple of {instr.name}'s {n} {what}")
            enclosing = step_of.get(lp.dim)
            step_of[lp.dim] = step
            if enclosing == step:
                continue            # one iteration: the instruction's loop replaced this one
            ann = frozenset(lp.annotations) - {"vectorize"}
            out.append((lp.dim, step, ann) if ann else (lp.dim, step))
        return out
    return outer


def isolate(tree: LoopTree, stmt: Compute) -> int:
    """The top-level node holding `stmt` and nothing else."""
    for i, node in enumerate(tree.body):
        held = list(statements(node))
        if any(s is stmt for s in held):
            if len(held) != 1:
                others = ", ".join(s.name for s in held if s is not stmt)
                raise ScheduleError(f"tensorize {stmt.name}: it shares its loops with {others}; the "
                                    "instruction's loops must be its own (give it loops of its own)")
            return i
    raise ScheduleError(f"tensorize {stmt.name}: not a statement of this tree")  # pragma: no cover


def splice(tree: LoopTree, at: int, part: LoopTree) -> LoopTree:
    """`tree` with its top-level node `at` replaced by the nodes of `part` (a rewrite of that node
    alone, which holds every buffer and dimension of `tree` plus its own)."""
    return LoopTree(part.buffers, part.dims, tree.body[:at] + part.body + tree.body[at + 1:])


def alone(tree: LoopTree, at: int) -> LoopTree:
    return LoopTree(tree.buffers, tree.dims, (tree.body[at],))


def loop_vars(tree: LoopTree) -> frozenset[str]:
    """Every loop variable of `tree`: a part rewritten alone must not reuse one."""
    return frozenset(n.var for _, n in tree.walk() if isinstance(n, Loop))


def tensorize_requested(tree: LoopTree, stack, stmt: Compute, target, features):
    """(tree with `stmt` tensorized on the schedule's loops, instruction); ScheduleError with each
    candidate's reason when none applies."""
    at = isolate(tree, stmt)
    found = candidates(stmt.tensorize, target, features)
    why = []
    for instr in found:
        if not instr.runs_on(features) or instr.isa != target.arch:
            why.append(f"{instr.name}: {target.name} code cannot use it (needs {', '.join(sorted(instr.features))})")
            continue
        if instr.tile:
            why.append(f"{instr.name}: tile blocks keep no schedule's loops yet; without the action the compile "
                       "runs an integer contraction on tiles where the CPU has them")
            continue
        if instr.vector_bits != target.vector_bits:
            why.append(f"{instr.name}: {instr.vector_bits}-bit; {target.name} code is {target.vector_bits}-bit vectors")
            continue
        try:
            part = tensorize(alone(tree, at), instr, outer=outer_loops(stack), avoid=loop_vars(tree)).tree
        except (ScheduleError, UnsupportedError) as e:
            why.append(f"{instr.name}: {str(e).removeprefix(instr.name + ' ')}")
            continue
        return splice(tree, at, part), instr
    if not why:
        why = [f"{target.name} has no tensorized instruction"]
    raise ScheduleError(f"tensorize {stmt.name} ({stmt.tensorize}): no instruction applies on {target.name}:\n  "
                        + "\n  ".join(why))
