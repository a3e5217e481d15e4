"""Schedules and the frontend loop tree (paper §4.3, loop_tool's LoopTree).

Each scheduled node of the graph carries a `NodeSchedule`: its loop order as
`(var, size, tail)` entries (outermost first; a var split in two appears twice, the
inner entries giving the step of the outer ones), the loop depths at which it must
not reuse an open loop, loop annotations, a priority (its place among nodes that do
not depend on each other) and the layout of the buffer it writes.

The tree is built by a topological walk that keeps the path of open loops and lets
each node reuse the longest matching prefix of it (loop fusion), never reusing a
loop over a variable that a producer it depends on reduces inside that loop:

    for m in 64 : L0
     for k in 32 : L1
      for n in 16 : L2
       %2[m, k, n] <- multiply(%0, %1)
       %3[m, n] <- add(%2)

Refs (`L0`, ...) number loops and nodes in pre-order, as loop_tool does.  The tree is
immutable; the mutations in `mutate.py` return new trees (and record themselves in
`tree.actions`, so that a schedule replays on the unscheduled program).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

from ..dtypes import DTYPES
from ..errors import ScheduleError
from ..looptree.ir import GPU_BINDINGS
from .graph import SCHEDULED, Graph, view_source_index

Entry = tuple  # (var, size, tail)


@dataclass(frozen=True)
class NodeSchedule:
    order: tuple[Entry, ...]
    priority: float
    layout: tuple[str, ...]
    disabled: frozenset = frozenset()            # depths whose loop must not be reused
    annotations: tuple[tuple[int, str], ...] = ()  # (depth, "unroll" | "vectorize" | "parallel")
    tensorize: str = ""                          # "auto" or a tensorized instruction (mutate.tensorize)

    def annotation(self, depth: int) -> str:
        for d, a in self.annotations:
            if d == depth:
                return a
        return ""

    def reordered(self, order) -> "NodeSchedule":
        """This schedule with the loop order `order`, and without the annotations and disabled
        reuse that named depths of the old one (what mutate.set_order makes; no
        dataclasses.replace, which the default schedule would call for every node)."""
        return NodeSchedule(order, self.priority, self.layout, frozenset(), (), self.tensorize)


def default_schedule(graph: Graph) -> tuple[tuple[int, NodeSchedule], ...]:
    out = []
    for n in graph.nodes:
        if n.op in SCHEDULED:
            order = tuple((v, graph.size(v), 0) for v in graph.domain(n))
            apart = frozenset({0}) if converts_integer_sum(graph, n) else frozenset()
            out.append((n.id, NodeSchedule(order, float(n.id), n.vars, apart)))
    return tuple(out)


def converts_integer_sum(graph: Graph, n) -> bool:
    """Whether `n` is an astype to float of an integer sum (or its int32 epilogue).  Its loops
    are its own by default: a contraction whose loops no other statement shares is one the
    backend runs on its dot-product instructions (VNNI, SDOT, AMX), which then stores the int32
    sums for the conversion to read."""
    if not (n.op == "copy" and n.fn == "cast" and DTYPES[n.dtype].is_float):
        return False
    todo = [graph.node(n.inputs[0])]
    while todo:                     # through the sum's integer epilogue (bias, relu) to the sum
        x = todo.pop()
        if DTYPES[x.dtype].is_float:
            continue
        if x.op == "reduce":
            return True
        if x.op in ("unary", "binary"):
            todo += [graph.node(i) for i in x.inputs]
    return False


def steps(order) -> list[int]:
    """The step (elements per iteration) of each entry: the extent of the inner entries over its var."""
    ext: dict[str, int] = {}
    res = [0] * len(order)
    for i in range(len(order) - 1, -1, -1):
        v, s, t = order[i]
        inner = ext.get(v, 1)
        res[i] = inner
        ext[v] = s * inner + t
    return res


def extents(order) -> dict[str, int]:
    ext: dict[str, int] = {}
    for v, s, t in reversed(order):
        ext[v] = s * ext.get(v, 1) + t
    return ext


def check_order(graph: Graph, node, order) -> None:
    dom = graph.domain(node)
    ext = extents(order)
    for v, s, t in order:
        # a loop over a dimension the node does not need repeats it (add_loop(node, loop)):
        # harmless for a value computed again, wrong for a reduction adding its terms again
        if v not in dom and (node.op == "reduce" or v not in graph.vars or v in node.vars):
            raise ScheduleError(f"%{node.id}: loop over {v}, which is not one of its dimensions "
                                f"[{', '.join(dom)}]")
        if s < 1 or t < 0:
            raise ScheduleError(f"%{node.id}: loop over {v} of size {s} tail {t}: sizes must be >= 1")
    for v in dom:
        if ext.get(v) != graph.size(v):
            raise ScheduleError(f"%{node.id}: the loops over {v} cover {ext.get(v, 0)} elements, "
                                f"but {v} has {graph.size(v)}")


def check_annotations(tree, action=None) -> None:
    """Refuse a tree whose annotations the code generator cannot keep, naming why, instead of
    letting it fail later when compiled. A `parallel` loop must be outermost, and every node in
    it must iterate its dimension without reducing over it (else the iterations would race on
    one output); that is checked here, cheaply, as the tuner annotates every candidate. Whether
    a `vectorize` loop's accesses allow it only the backend knows: a tree carrying one is
    compiled right away (the kernel is cached for the compile that follows), and so is one that asks
    for a tensorized instruction. A GPU schedule (a `block` or `warp` loop, or an mma.sync
    request) is checked whole when it is compiled for the GPU (backend/ptx/bind.py): the trees
    that build it, one binding at a time, are not yet one."""
    what = "schedule" if action is None else action.kind + "".join(
        f" L{a}" if isinstance(a, int) else f" {a!r}" for a in action.args)
    if not any(ns.annotations or ns.tensorize for _, ns in tree.schedule):
        return          # nothing to check: the tree stays unbuilt (a schedule's intermediate trees)
    g = tree.graph
    vectorized = gpu = False
    for it in tree.items:
        if it.kind != "loop" or not it.annotation:
            continue
        vectorized |= it.annotation == "vectorize"
        gpu |= it.annotation in GPU_BINDINGS
        if it.annotation != "parallel":
            continue
        v = it.entry[0]
        if it.depth != 0:
            raise ScheduleError(f"{what}: refused, loop {v} (L{it.ref}) runs in parallel but is nested "
                                f"{it.depth} deep; only an outermost loop can")
        for i in it.leaves:
            n = g.node(i)
            if v not in g.domain(n) or v in g.reduced(n):
                raise ScheduleError(f"{what}: refused, loop {v} (L{it.ref}) runs in parallel but %{i} "
                                    f"{'reduces over' if v in g.domain(n) else 'does not iterate'} {v}: "
                                    "its iterations would race on one output")
    requests = {ns.tensorize for _, ns in tree.schedule if ns.tensorize}
    if gpu or any(r.startswith("mma") for r in requests) or not (vectorized or requests):
        return
    from ..errors import LoopstackError
    from .run import compile_tree, default_target

    if default_target() == "interp":     # the interpreter ignores annotations
        return
    try:
        compile_tree(tree)
    except ScheduleError as e:
        raise ScheduleError(f"{what}: refused, the annotated loops would not compile: {e}") from None
    except LoopstackError:
        pass    # not the schedule's doing (an integer program has no x86 code); compile says so


@dataclass
class Item:
    ref: int
    kind: str                  # "loop" or "node"
    parent: int                # ref, -1 at the root
    depth: int
    children: list
    entry: Entry = None        # loop
    annotation: str = ""       # loop
    node: int = -1             # node id (leaf)
    leaves: list = None        # loop: node ids below


def dependencies(graph: Graph, base=None, changed=()) -> tuple[dict, dict]:
    """For each scheduled node: the scheduled nodes it reads directly (through views), and
    for each of them the dimensions along which it does not read the value at its own
    point (a shifted or windowed view): a loop over such a dimension cannot be shared.

    `base`, `changed`: the dependencies of a graph that differs from this one only in the nodes
    `changed` (their inputs, or added): only theirs are found again, as the walk from a node
    stops at the first scheduled node on each path."""
    if base is not None:
        deps, shifted = dict(base[0]), dict(base[1])
        for i in changed:
            acc = node_dependencies(graph, graph.node(i))
            deps[i], shifted[i] = set(acc), acc
        return deps, shifted
    deps: dict[int, set] = {}
    shifted: dict[int, dict] = {}
    for n in graph.nodes:
        if n.op in SCHEDULED:
            acc = node_dependencies(graph, n)
            deps[n.id] = set(acc)
            shifted[n.id] = acc
    return deps, shifted


def node_dependencies(graph: Graph, n) -> dict:
    """The scheduled nodes `n` reads directly (through views), each with the dimensions along
    which it does not read the value at its own point (see dependencies)."""

    def walk(i, idx, acc):
        m = graph.node(i)
        if m.op in ("read", "const"):
            return                      # inputs and constants are always available
        if m.op in SCHEDULED:
            bad = {v for v in m.vars if idx.get(v) != ({v: 1}, 0)}
            acc.setdefault(i, set()).update(bad)
            return
        if m.op == "view":
            walk(m.inputs[0], view_source_index(m, graph.node(m.inputs[0]), idx), acc)
        for j in (m.inputs if m.op != "view" else ()):
            walk(j, {}, acc)

    acc: dict = {}
    for j in n.inputs:
        walk(j, {v: ({v: 1}, 0) for v in graph.domain(n)}, acc)
    return acc


def sequence(graph: Graph, sched: dict, deps: dict) -> list[int]:
    """Kahn's topological order, lowest priority first among ready nodes."""
    users: dict[int, list] = {i: [] for i in deps}
    indeg = {i: len(d) for i, d in deps.items()}
    for i, d in deps.items():
        for j in d:
            users[j].append(i)
    ready = [(sched[i].priority, i) for i, k in indeg.items() if k == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, (sched[u].priority, u))
    return out


_BUILT = frozenset({"sequence", "roots", "items", "_paths", "_leaf"})    # what LoopTree._build sets


class LoopTree:
    """An immutable loop tree over a graph and its schedule."""

    def __init__(self, graph: Graph, schedule, actions=(), _dependencies=None, _checked=None):
        self.graph = graph
        self.schedule = tuple(sorted(schedule, key=lambda p: p[0]))
        self.actions = tuple(actions)
        self._sched = dict(self.schedule)
        # a mutation that keeps the graph passes its dependencies on (the tuner builds
        # thousands of trees over one graph), and the node schedules checked in the tree it
        # changed (`_checked`): a mutation changes one or two of them
        self._deps, self._shifted = _dependencies or dependencies(graph)
        checked = _checked or {}
        for n in graph.nodes:
            if n.op in SCHEDULED:
                ns, before = self._sched[n.id], checked.get(n.id)
                # an order checked before over this graph stays valid (annotate, reuse changes)
                if before is None or (before is not ns and before.order != ns.order):
                    check_order(graph, n, ns.order)
        # the loops and refs (_BUILT) are built on first use, by __getattr__: a schedule generator
        # chains mutations whose intermediate trees nobody looks at

    # ------------------------------------------------------------------ construction
    def _build(self):
        g, sched = self.graph, self._sched
        self.sequence = sequence(g, sched, self._deps)
        reducers: dict[str, list] = {}      # var -> the nodes reducing over it
        for i in self.sequence:
            for v in g.reduced(g.node(i)):
                reducers.setdefault(v, []).append(i)
        trans: dict[int, set] = {}
        for i in self.sequence:        # transitive dependencies
            t = set(self._deps[i])
            for j in self._deps[i]:
                t |= trans[j]
            trans[i] = t
        # Each new loop or node is the last child of an open loop (or the last root): numbered as
        # made, the items come in pre-order, so they are made here directly.
        items: list[Item] = []
        roots: list = []
        open_path: list = []        # the currently open loops (Items)
        opened: list = []           # per open loop: the position in the sequence of its first node
        leaf_of: dict[int, int] = {}
        self._paths: dict[int, list] = {}
        position = {i: p for p, i in enumerate(self.sequence)}
        for p, i in enumerate(self.sequence):
            ns = sched[i]
            order = ns.order
            # per var, the last node (by position) that stops this one from sharing a loop over
            # the var with it: one it depends on that reduces over the var, or one it reads
            # shifted along the var. An open loop holds the nodes from its first one on.
            blocked: dict[str, int] = {}
            before = trans[i]
            for v, js in reducers.items():
                for j in js:
                    if j in before and position[j] > blocked.get(v, -1):
                        blocked[v] = position[j]
            for j, vs in self._shifted[i].items():
                for v in vs:
                    if position.get(j, -1) > blocked.get(v, -1):
                        blocked[v] = position[j]
            k = 0
            while k < len(open_path) and k < len(order):
                entry = open_path[k].entry
                if entry != order[k] or k in ns.disabled or blocked.get(entry[0], -1) >= opened[k]:
                    break
                k += 1
            del open_path[k:], opened[k:]
            if ns.annotations:
                for d, L in enumerate(open_path):     # a shared loop keeps any of its nodes' annotations
                    L.annotation = L.annotation or ns.annotation(d)
            for d in range(k, len(order)):
                L = Item(len(items), "loop", open_path[-1].ref if open_path else -1, d, [], entry=order[d],
                         annotation=ns.annotation(d) if ns.annotations else "", leaves=[])
                (open_path[-1].children if open_path else roots).append(L.ref)
                items.append(L)
                open_path.append(L)
                opened.append(p)
            ref = len(items)
            items.append(Item(ref, "node", open_path[-1].ref if open_path else -1, len(open_path), [], node=i))
            (open_path[-1].children if open_path else roots).append(ref)
            leaf_of[i] = ref
            for L in open_path:
                L.leaves.append(i)
        self.roots = roots
        self.items = items
        self._leaf = leaf_of

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self.items)

    def kind(self, ref: int) -> str:
        return self.item(ref).kind

    def item(self, ref: int) -> Item:
        if not isinstance(ref, int) or not 0 <= ref < len(self.items):
            raise ScheduleError(f"no loop or node with ref {ref} (the tree has refs 0..{len(self.items) - 1})")
        return self.items[ref]

    def loop(self, ref: int) -> Item:
        it = self.item(ref)
        if it.kind != "loop":
            raise ScheduleError(f"ref {ref} is a node (%{it.node}), not a loop")
        return it

    def leaf(self, ref: int) -> Item:
        it = self.item(ref)
        if it.kind != "node":
            raise ScheduleError(f"ref {ref} is a loop, not a node")
        return it

    @property
    def loops(self) -> list[int]:
        return [it.ref for it in self.items if it.kind == "loop"]

    @property
    def nodes(self) -> list[int]:
        return [it.ref for it in self.items if it.kind == "node"]

    def children(self, ref: int) -> list[int]:
        return list(self.item(ref).children)

    def parent(self, ref: int) -> int:
        return self.item(ref).parent

    def ir_node(self, ref: int) -> int:
        return self.leaf(ref).node

    def ref_of(self, node_id: int) -> int:
        return self._leaf[node_id]

    def path(self, ref: int) -> list[int]:
        """Loop refs enclosing `ref`, outermost first."""
        out = []
        p = self.item(ref).parent
        while p != -1:
            out.append(p)
            p = self.items[p].parent
        return out[::-1]

    def node_schedule(self, node_id: int) -> NodeSchedule:
        return self._sched[node_id]

    def leaves_under(self, ref: int) -> list[int]:
        it = self.item(ref)
        return [it.node] if it.kind == "node" else list(it.leaves)

    def next_ref(self, ref: int):
        self.item(ref)
        return ref + 1 if ref + 1 < len(self.items) else None

    def previous_ref(self, ref: int):
        self.item(ref)
        return ref - 1 if ref > 0 else None

    def key(self) -> tuple:
        """Structural identity of the program and its schedule (cache key)."""
        return (self.graph, self.schedule)

    # ------------------------------------------------------------------ printing
    def loop_name(self, ref: int) -> str:
        it = self.loop(ref)
        v = it.entry[0]
        primes = sum(1 for p in self.path(ref) if self.items[p].entry[0] == v)
        return v + "'" * primes

    def loop_line(self, it) -> str:
        """One loop as loop_tool prints it: `for m in 42 r 4 : L0 [vectorize]` (no indent)."""
        _, size, tail = it.entry
        line = f"for {self.loop_name(it.ref)} in {size}{f' r {tail}' if tail else ''} : L{it.ref}"
        return line + (f" [{it.annotation}]" if it.annotation else "")

    def dump(self, callback=None) -> str:
        lines = []
        for it in self.items:
            pad = " " * it.depth
            if it.kind == "loop":
                line = pad + self.loop_line(it)
            else:
                line = f"{pad}{self.graph.node(it.node)}"
            if callback is not None:
                extra = callback(it.ref)
                if extra:
                    line += f" {extra}"
            lines.append(line)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.dump()

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return isinstance(other, LoopTree) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    # ------------------------------------------------------------------ mutations
    def _with(self, graph=None, sched=None, action=None, actions=(), changed=None) -> "LoopTree":
        """The tree after a mutation recorded as `action` (or as several, `actions`).
        `changed`: the nodes in which a new graph differs from this one (inputs changed, or
        added), every node of this one keeping its domain and sizes (a staging copy added): the
        orders checked here need no new check, and only those nodes' dependencies are found."""
        g = graph if graph is not None else self.graph
        s = sched if sched is not None else self._sched
        acts = self.actions + ((action,) if action is not None else ()) + tuple(actions)
        same = g is self.graph
        if same:
            deps = (self._deps, self._shifted)
        elif changed is not None:
            deps = dependencies(g, (self._deps, self._shifted), changed)
        else:
            deps = None
        tree = LoopTree(g, tuple(s.items()), acts, deps, self._sched if same or changed is not None else None)
        check_annotations(tree, action)
        return tree

    def replace_node_schedule(self, node_id: int, **kw) -> dict:
        s = dict(self._sched)
        s[node_id] = replace(s[node_id], **kw)
        return s

    def __getattr__(self, name):
        if name in _BUILT:
            self._build()
            return self.__dict__[name]
        # schedule primitives live in mutate.py: tree.split(ref, 4) == mutate.split(tree, ref, 4)
        from . import mutate

        fn = mutate.PRIMITIVES.get(name)
        if fn is None:
            raise AttributeError(name)
        return lambda *a: fn(self, *a)

    # ------------------------------------------------------------------ compilation
    def lower(self):
        """The loop-tree IR of this tree, built once (the tree is immutable)."""
        ir = self.__dict__.get("_lowered")
        if ir is None:
            from .lower import lower

            ir = self._lowered = lower(self)
        return ir

    def compile(self, target=None):
        from .run import compile_tree

        return compile_tree(self, target)

    def flops(self) -> int:
        from ..looptree.stats import flops  # noqa: F401 - optional helper

        return flops(self.lower())
