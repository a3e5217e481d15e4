"""The search space: schedules as action traces built from the frontend's pure mutations.

A candidate schedule is described by a small `Plan` for the program's main compute node
(the one with the most loops): how each of its variables is tiled and in which order its
loops run.  `realize(base, plan)` turns a plan into frontend mutations (splits, then the
new loop order, then optional staging of inputs), so every tuning result is the
replayable trace `tree.actions`, and `lt.apply_actions(base, tree.actions) == tree`.

    base:    for m in 256 / for k in 256 / for n in 256          (unscheduled)
    plan:    tiles {m: (6,), n: (16,)}, order n m k m' n'
    tree:    for n in 16 / for m in 42 r 4 / for k in 256 / for m' in 6 / for n' in 16
    actions: split(2, 16), split(0, 6), set_order(...), ...

Illegal plans raise `ScheduleError` from the frontend; mappers skip them.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from ..errors import ScheduleError
from ..frontend.mutate import Action, apply_actions
from .defaults import MAX_BLOCK_VECTORS, parallelize


@dataclass(frozen=True)
class Plan:
    """Tiles per variable (element sizes, outermost first) and a loop order.

    `order` lists loops by name, primes counting the tiling level from the outside
    ("m", "m'", "m''"): the variable's loop of level 0 covers the whole extent.
    `stage` lists input indices of the main node to stage (copy_input), each with how
    many of the node's loops the copy stops sharing (0: placed just before the node).
    """
    tiles: tuple[tuple[str, tuple[int, ...]], ...]
    order: tuple[str, ...]
    stage: tuple[tuple[int, int], ...] = field(default=())
    tensorize: str = ""         # the main node on a tensorized instruction ("auto"; tune.tensorized)

    def describe(self) -> str:
        t = " ".join(f"{v}:{'x'.join(map(str, s))}" for v, s in self.tiles if s)
        st = f" stage {list(self.stage)}" if self.stage else ""
        return f"[{t}] {' '.join(self.order)}{st}" + (f" tensorize {self.tensorize}" if self.tensorize else "")


def main_node(tree) -> int:
    """The graph id of the node with the most loops (ties: the one with most flops, last)."""
    best, key = None, None
    for ref in tree.nodes:
        nid = tree.ir_node(ref)
        n = tree.graph.node(nid)
        if n.op in ("read", "write", "copy"):
            continue
        k = (len(tree.path(ref)), n.op != "view", nid)
        if key is None or k > key:
            best, key = nid, k
    if best is None:
        raise ScheduleError("the program has no compute node to schedule")
    return best


def stage_node(tree, nid: int) -> int:
    """The node whose inputs staging copies: the one with most inputs in `nid`'s innermost loop."""
    path = tree.path(tree.ref_of(nid))
    leaves = tree.leaves_under(path[-1]) if path else [nid]
    return max(leaves, key=lambda i: (len(tree.graph.node(i).inputs), -i))


def loop_names(tree, nid: int) -> list[str]:
    """Names of the loops around node `nid`, outermost first ("m", "m'", ...)."""
    return [tree.loop_name(r) for r in tree.path(tree.ref_of(nid))]


def var_sizes(tree, nid: int) -> dict[str, int]:
    g = tree.graph
    return {v: g.size(v) for v in g.domain(g.node(nid))}


def default_order(tree, nid: int) -> list[str]:
    return loop_names(tree, nid)


def realize(base, plan: Plan, nid: int | None = None):
    """The loop tree `plan` describes, built by mutations of `base` (its actions record them)."""
    tree = base
    nid = main_node(base) if nid is None else nid
    for v, tiles in plan.tiles:
        for t in tiles:
            refs = [r for r in tree.path(tree.ref_of(nid)) if tree.items[r].entry[0] == v]
            if not refs:
                raise ScheduleError(f"plan: node %{nid} has no loop over {v}")
            tree = tree.split(refs[-1], t)       # the innermost loop of v has step 1
    names = loop_names(tree, nid)
    if sorted(names) != sorted(plan.order):
        raise ScheduleError(f"plan: order {' '.join(plan.order)} does not name the loops "
                            f"{' '.join(names)}")
    tree = _reorder(tree, nid, plan.order)
    tree = fuse_consumers(tree, nid)
    if plan.tensorize:
        tree = tree.tensorize(tree.ref_of(nid), plan.tensorize)
    for idx, hoist in plan.stage:
        sid = stage_node(tree, nid)
        tree = tree.copy_input(tree.ref_of(sid), idx)
        copy_id = tree.graph.node(sid).inputs[idx]
        for _ in range(hoist):
            tree = tree.decrease_reuse(tree.ref_of(copy_id))
    return parallelize(tree)      # every core, as the default schedule (see defaults.parallelize)


def _reorder(tree, nid: int, order: tuple[str, ...]):
    """`tree` with node `nid`'s loops in `order` (loop names).

    When every node sharing the main node's outermost loop shares all its loops (the multiply
    feeding a reduction) or is a consumer that `fuse_consumers` reorders next, the group gets
    the new order in one `set_order` each: the schedule adjacent swaps reach, at a fraction of
    their cost (each swap rebuilds the tree).  Otherwise the loops are bubbled into place with
    adjacent swaps."""
    from ..frontend.mutate import set_order

    names = loop_names(tree, nid)
    path = tree.path(tree.ref_of(nid))
    if not path or list(names) == list(order):
        return tree
    for v in {n.rstrip("'") for n in names}:
        levels = [n.count("'") for n in order if n.rstrip("'") == v]
        if levels != sorted(levels):
            raise ScheduleError(f"plan: the loops over {v} must stay outermost level first "
                                f"(order {' '.join(order)})")
    group = tree.leaves_under(path[-1])
    # the consumers fuse_consumers reorders afterwards may share loops too
    if set(tree.leaves_under(path[0])) <= set(group) | set(_elementwise_consumers(tree, nid)):
        entry = dict(zip(names, tree.node_schedule(nid).order))
        new = tuple(entry[n] for n in order)
        for leaf in group:
            ns = tree.node_schedule(leaf)
            if ns.order != tree.node_schedule(nid).order or ns.annotations or ns.disabled:
                return _bubble(tree, nid, order)   # what set_order would not keep: swaps do
        for leaf in group:
            tree = set_order(tree, leaf, new)
        return tree
    return _bubble(tree, nid, order)


def _bubble(tree, nid: int, order: tuple[str, ...]):
    """Node `nid`'s loops bubbled into `order` by adjacent swaps (each a legal mutation)."""
    target = {name: i for i, name in enumerate(order)}
    changed = True
    while changed:
        changed = False
        names = loop_names(tree, nid)
        for d in range(len(names) - 1):
            if target[names[d]] > target[names[d + 1]]:
                path = tree.path(tree.ref_of(nid))
                tree = tree.swap_loops(path[d], path[d + 1])
                changed = True
                break
    return tree


def fuse_consumers(tree, nid: int):
    """Node `nid`'s element-wise consumers (bias, activation, the write) given its loop order
    without the reduction loops, so that they fuse into the store of its output block instead
    of sweeping the output again (what the default schedule does too)."""
    from ..frontend.mutate import set_order

    out = set(tree.graph.node(nid).vars)
    order = tuple(e for e in tree.node_schedule(nid).order if e[0] in out)
    for c in _elementwise_consumers(tree, nid):
        if tree.node_schedule(c).order != order:
            tree = set_order(tree, c, order)
    return tree


def _elementwise_consumers(tree, nid: int) -> list[int]:
    """The scheduled nodes fed (through each other) by `nid` over exactly its output domain."""
    g = tree.graph
    out = set(g.node(nid).vars)
    fed, found = {nid}, []
    for n in g.nodes:                        # graph order is a topological order
        if n.id in fed or n.id not in tree._sched or not tree._deps[n.id] & fed:
            continue
        if set(g.domain(n)) != out:
            continue
        fed.add(n.id)
        found.append(n.id)
    return found


def stagings(n_inputs: int) -> list:
    """The stagings the tuner tries: none, each input packed at a few depths, or two inputs."""
    stages = [()] + [((i, h),) for i in range(n_inputs) for h in range(3)]
    if n_inputs > 1:
        stages += [((0, h0), (1, h1)) for h0 in range(2) for h1 in range(2)]
    return stages


def exact_plan(base, tree, nid: int) -> Plan | None:
    """The plan that `realize` turns into exactly `tree` (a default schedule, a stored
    result), staging included; None when no plan of the tuner's space describes it."""
    try:
        p = plan_of(tree, nid)
    except ScheduleError:
        return None
    for stage in stagings(len(base.graph.node(stage_node(base, nid)).inputs)):
        q = Plan(p.tiles, p.order, stage, tree.node_schedule(nid).tensorize)
        try:
            if realize(base, q, nid).key() == tree.key():
                return q
        except ScheduleError:
            continue
    return None


def replay(base, actions):
    """`base` with a stored action trace applied (lists from JSON or Action values)."""
    return apply_actions(base, [a if isinstance(a, Action) else Action(a[0], tuple(a[1]))
                                for a in actions])


def actions_json(tree) -> list:
    return [[a.kind, list(a.args)] for a in tree.actions]


# -- generators of plans ---------------------------------------------------------------------

def register_blocks(target) -> list[tuple[int, int]]:
    """(rows, vectors) output blocks the backend keeps in registers: 4 to
    `target.block_registers` accumulators (a column that finds no register beside them is an
    FMA memory operand, re-read by each row), up to 6 vectors wide (the wide blocks of a
    convolution whose output rows are few)."""
    most = target.block_registers
    return [(rows, vecs) for vecs in range(1, MAX_BLOCK_VECTORS + 1) for rows in range(1, 17)
            if 4 <= rows * vecs <= most]


def tile_sizes(extent: int, lanes: int) -> list[int]:
    """Tile sizes a random or mutated plan may give a loop of `extent`: small row blocks,
    one to six vectors, and cache-sized powers of two."""
    sizes = {2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 64, 128} | {lanes * i for i in range(1, 7)}
    return sorted(t for t in sizes if t < extent)


def cache_tiles(extent: int, lo: int = 16) -> list[int]:
    """Cache tile sizes for a loop of `extent`: powers of two and the whole extent."""
    out = [t for t in (16, 32, 64, 128, 256, 512) if lo <= t < extent]
    return out + [extent]


def window_permutations(order: tuple[str, ...], start: int, width: int = 5):
    """Every order that permutes the window order[start:start+width] and keeps the rest."""
    win = order[start:start + width]
    for p in itertools.permutations(win):
        if p != tuple(win):
            yield order[:start] + p + order[start + width:]


def random_plan(rng: random.Random, sizes: dict[str, int], lanes: int, max_levels: int = 2) -> Plan:
    """A random tiling and loop order of the main node's variables."""
    tiles, order = [], []
    for v, ext in sizes.items():
        levels = rng.randint(0, max_levels)
        cands = tile_sizes(ext, lanes)
        chosen = sorted(rng.sample(cands, min(levels, len(cands))), reverse=True)
        tiles.append((v, tuple(chosen)))
        order += [v + "'" * i for i in range(len(chosen) + 1)]
    rng.shuffle(order)
    order = _fix_prime_order(order)
    return Plan(tuple(tiles), tuple(order))


def _fix_prime_order(order: list[str]) -> list[str]:
    """Renumber primes so that each variable's loops appear outermost level first."""
    seen: dict[str, int] = {}
    out = []
    for name in order:
        v = name.rstrip("'")
        out.append(v + "'" * seen.get(v, 0))
        seen[v] = seen.get(v, 0) + 1
    return out


def mutate_plan(rng: random.Random, plan: Plan, sizes: dict[str, int], lanes: int,
                n_inputs: int = 2) -> Plan:
    """One random edit: retile a variable, swap two loops, or toggle staging of an input."""
    tiles = dict(plan.tiles)
    order = list(plan.order)
    r = rng.random()
    if r < 0.4:
        v = rng.choice(list(sizes))
        ext = sizes[v]
        cands = tile_sizes(ext, lanes)
        old = tiles.get(v, ())
        if old and rng.random() < 0.5:
            new = list(old)
            i = rng.randrange(len(new))
            new[i] = rng.choice(cands) if cands else new[i]
            new = sorted(set(new), reverse=True)
        elif cands:
            new = sorted(set(old) | {rng.choice(cands)}, reverse=True)[:3]
        else:
            new = []
        names = [v + "'" * i for i in range(len(new) + 1)]
        kept = [n for n in order if n.rstrip("'") != v]
        # keep the variable's old positions where possible, extra loops go innermost
        pos = [i for i, n in enumerate(order) if n.rstrip("'") == v][:len(names)]
        order = kept
        for k, name in enumerate(names):
            at = pos[k] if k < len(pos) else len(order)
            order.insert(min(at, len(order)), name)
        tiles[v] = tuple(new)
        order = _fix_prime_order(order)
    elif r < 0.85 and len(order) > 1:
        i = rng.randrange(len(order) - 1)
        j = i + 1 if rng.random() < 0.6 else rng.randrange(len(order))
        order[i], order[j] = order[j], order[i]
        order = _fix_prime_order(order)
    else:
        st = dict(plan.stage)
        idx = rng.randrange(n_inputs)
        if idx in st:
            del st[idx]
        else:
            st[idx] = rng.randint(0, 2)
        return Plan(tuple(tiles.items()), tuple(order), tuple(sorted(st.items())))
    return Plan(tuple((v, tuple(tiles.get(v, ()))) for v in sizes), tuple(order), plan.stage)


def plan_of(tree, nid: int) -> Plan:
    """The plan of an unstaged tree's main node (tiles read back from its loops)."""
    ns = tree.node_schedule(nid)
    from ..frontend.tree import steps

    st = steps(ns.order)
    tiles: dict[str, list[int]] = {}
    for (v, _s, _t), step in zip(ns.order, st):
        tiles.setdefault(v, []).append(step)
    tiles = {v: s[:-1] for v, s in tiles.items()}       # the innermost loop has step 1
    sizes = var_sizes(tree, nid)
    return Plan(tuple((v, tuple(sorted(tiles.get(v, ()), reverse=True))) for v in sizes),
                tuple(loop_names(tree, nid)))
