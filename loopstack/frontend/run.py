"""From a Tensor to results: unify, canonicalise, schedule, lower, compile (cached), run.

The compile cache is keyed by the structural identity of (graph, schedule, target):
re-building the same program, or calling `.numpy()` again, does not recompile.
`target=None` picks the x86 backend when it is importable and runs on this CPU, else
the reference interpreter.

A tensor compiles with its own schedule when one was set; otherwise the registered schedule
sources are asked in order (the package registers the tuning database's best schedule), and
failing those it compiles unscheduled.  The frontend does not import the tuner: sources are
plain functions `(graph, target) -> LoopTree | None` handed down by the layer above.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from ..dtypes import dtype as _dtype
from ..errors import ArgumentError, ScheduleError, UnsupportedError
from .graph import canonicalize, toposort
from .tree import LoopTree, default_schedule
from .unify import unify


@dataclass
class Program:
    graph: object
    reads: list          # DSL read nodes, in input order
    node: object         # the DSL node this was built from (invalidates on rebinding)
    sourced: dict = field(default_factory=dict)   # (target, generation) -> tree from a source


_programs_key = "_program"
_CACHE: dict = {}        # (graph, schedule, target) -> (Kernel, lowered tree)
_CACHE_LIMIT = 256
_default_target = None
_schedule_sources: list = []
_generation = 0          # bumped when a source may answer differently (e.g. after tuning)


def add_schedule_source(source) -> None:
    """Ask `source(graph, target) -> LoopTree | None` for the schedule of tensors that set none."""
    if source not in _schedule_sources:
        _schedule_sources.append(source)
    schedules_changed()


def schedules_changed() -> None:
    """Forget what the schedule sources said: the next compile of an unscheduled tensor asks again."""
    global _generation
    _generation += 1


def program(t) -> Program:
    c = t._cache
    if c is not None and c.node is t._node:
        return c
    nodes = toposort(t._node)
    sizes = unify(nodes)
    graph, reads = canonicalize(t._node, sizes.val, nodes)
    for n in nodes:   # record what was deduced about inputs (loop_tool: W.unify(); Z.shape)
        if n.op == "read":
            have = {s for s, _, _ in n.known}
            n.known += [(s, sizes.get(s), "inferred from use") for s in n.vars if s not in have]
    t._cache = Program(graph, reads, t._node)
    t._compiled = None
    return t._cache


def _own_schedule(t, prog: Program) -> LoopTree | None:
    sched = getattr(t, "_schedule", None)
    return sched if sched is not None and sched.graph_base == prog.graph else None


def loop_tree(t) -> LoopTree:
    """The tree the user schedules: the tensor's own schedule, else the unscheduled program."""
    prog = program(t)
    own = _own_schedule(t, prog)
    return own if own is not None else LoopTree(prog.graph, default_schedule(prog.graph))


def scheduled_tree(t, target=None) -> LoopTree:
    """The tree `t` compiles with: its own schedule, else the first schedule source's answer,
    else the unscheduled program."""
    prog = program(t)
    own = _own_schedule(t, prog)
    if own is not None:
        return own
    key = (target, _generation)
    tree = prog.sourced.get(key)
    if tree is None:
        for source in _schedule_sources:
            tree = source(prog.graph, target)
            if tree is not None:
                break
        else:
            tree = LoopTree(prog.graph, default_schedule(prog.graph))
        prog.sourced.clear()
        prog.sourced[key] = tree
    return tree


def apply_schedule(t, tree: LoopTree) -> None:
    prog = program(t)
    if _strip_copies(tree.graph) != _strip_copies(prog.graph):
        raise ScheduleError("set: this loop tree schedules a different program "
                            f"(its graph:\n{tree.graph}\nthis tensor's:\n{prog.graph})")
    tree.graph_base = prog.graph
    t._schedule = tree
    t._compiled = None


def _strip_copies(g):
    """A graph without staging copies (what scheduling does not change; a cast is no staging)."""
    return tuple((n.op, n.fn, n.vars, n.view, n.pad, n.value, n.arg, n.flat, n.dtype)
                 for n in g.nodes if n.op != "copy" or n.fn != "copy") + (g.sizes,)


def default_target():
    """"x86" when this host runs the x86 backend's code, "native" on another architecture whose
    code this host runs (AArch64 NEON), else "interp"."""
    global _default_target
    if _default_target is None:
        try:
            from ..backend.native import runs_here
            from ..isa.target import host_arch, host_target

            if not runs_here(host_target()):
                _default_target = "interp"
            else:
                _default_target = "x86" if host_arch() == "x86_64" else "native"
        except (ImportError, UnsupportedError):
            _default_target = "interp"
    return _default_target


def compile_tree(tree: LoopTree, target=None):
    return _compile_cached(tree.key(), tree.lower, target)


def compile_lowered(ir, target=None):
    """A kernel of a lowered tree (looptree.ir) that a caller rewrote, through the compile cache."""
    return _compile_cached(("lowered", ir), lambda: ir, target)


def _compile_cached(tree_key, lower, target):
    from .. import backend

    tgt = default_target() if target is None else target
    key = (tree_key, tgt)
    hit = _CACHE.get(key)
    if hit is not None and not getattr(hit, "closed", False):
        return hit
    ir = lower()
    kernel = backend.compile(ir, target=None if tgt in ("x86", "native") else tgt)
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = kernel
    return kernel


def compiled(t, target=None):
    c = getattr(t, "_compiled", None)
    if (c is not None and c[1] == target and c[4] == _generation and t._cache is not None
            and not getattr(c[0], "closed", False)
            and t._cache.node is t._node):
        return c[0], c[2], c[3]
    prog = program(t)
    tree = scheduled_tree(t, target)
    kernel = compile_tree(tree, target)
    out = prog.graph.output
    shape = tuple(prog.graph.size(v) for v in out.vars)
    dt = _dtype(out.dtype).np          # bfloat16 through ml_dtypes
    t._compiled = (kernel, target, prog.reads, (shape, dt), _generation)
    return kernel, prog.reads, (shape, dt)


def execute(t, target=None) -> np.ndarray:
    kernel, reads, (shape, dt) = compiled(t, target)
    args = []
    for k, r in enumerate(reads):
        if r.data is None:
            raise ArgumentError(f"input {k} [{', '.join(v.name for v in r.vars)}] has no data: "
                                "bind it with .set(array)")
        args.append(r.data)
    # Reuse the last result's memory when the caller dropped it (no fresh pages to fault in).
    # Right after the last call `out` had `t._out_refs` references (ours, and whatever the kernel
    # keeps of its last arguments); one more now means the caller still holds that result.
    out = getattr(t, "_out", None)
    if out is None or sys.getrefcount(out) > t._out_refs or out.shape != shape or out.dtype != dt:
        out = np.empty(shape, dt)
        t._out = out
    kernel(*args, out)
    t._out_refs = sys.getrefcount(out)
    return out
