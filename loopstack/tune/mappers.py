"""Mappers: search strategies that propose schedules (Union's mappers, §III-B).

A mapper only proposes; the session (api.py) scores what it proposes with whichever cost
model was chosen, so any mapper runs with any cost model:

    session.build(plan)       -> LoopTree | None   (None: the frontend refused the plan)
    session.evaluate(trees)   -> [GFLOPS | None]   (the cost model ranks, the best are measured;
                                                    None for a candidate left unmeasured)
    session.predict(trees)    -> [estimated GFLOPS] (cheap; zeros for the measured model)
    session.measure(trees)    -> [GFLOPS]           (ground truth, always)
    session.exhausted()       -> the time budget is spent
    session.start_plan        the plan of the schedule the search starts from
    session.start_best        (its GFLOPS, it) when that plan rebuilds it exactly, else (-1, it)

    scripted      LoopStack §6.3: register blocks x cache tiles, then windows of loop
                  permutations from the innermost outwards, then staging of inputs
    exhaustive    every register block x reduction tile x order of the outer loops
    random        random tilings and orders
    evolutionary  diversity-aware evolution (two mutants per parent, half kept by diversity,
                  competing with the parents, a few generations on the cost model's
                  predictions; the predicted-best batch plus one random measured)
"""
from __future__ import annotations

import itertools
import math
import random

from .space import (Plan, cache_tiles, mutate_plan, random_plan, register_blocks, stagings,
                    window_permutations)


def _roles(session):
    """(vector var, row var, other output vars, reduction vars by size) of the main node."""
    out = list(session.output_vars)
    vec = out[-1]
    rest = [v for v in out[:-1]]
    row = rest[-1] if rest else None       # the output's next dimension (m of a matmul, ow of a conv)
    others = [v for v in rest if v != row]
    red = sorted((v for v in session.sizes if v not in out), key=lambda v: -session.sizes[v])
    return vec, row, others, red


def blocked_plan(session, rows: int, vecs: int, kc: int | None) -> Plan:
    """Output block rows x (vecs vectors) held in registers under the reduction loops, the
    largest reduction tiled by kc (None: untiled):  vec [red] others row red.. row' vec'.

    The vector variable's panels are outermost, so that a panel of the operand it indexes
    (B of a matmul, a convolution's weights) serves every row, and a reduction tile right
    inside them, so that each tile of the panel serves every row before the next one is read
    (`k c oh ow`, not `k oh c ow`: on Zen 3, 5-8 % faster for CONV-3's channel tiles).  The
    reductions keep the program's order, the tiled one's tile in its place (the innermost is
    the contiguous one of the input: `r s c'` of NHWC)."""
    vec, row, others, red = _roles(session)
    lanes = session.lanes
    tiles = {v: () for v in session.sizes}
    nv = vecs * lanes
    if nv < session.sizes[vec]:
        tiles[vec] = (nv,)
    if row is not None and rows < session.sizes[row]:
        tiles[row] = (rows,)
    order = [vec if tiles[vec] else None]
    in_program_order = [v for v in session.sizes if v in red]
    if red and kc is not None and kc < session.sizes[red[0]]:
        tiles[red[0]] = (kc,)
        order += [red[0]] + list(others)
        order += [row if row and tiles[row] else None]
        order += [red[0] + "'" if v == red[0] else v for v in in_program_order]
    else:
        order += list(others) + [row if row and tiles[row] else None] + in_program_order
    order += [(row + "'") if row and tiles[row] else row]
    order += [vec + "'" if tiles[vec] else vec]
    order = [o for o in order if o is not None]
    return Plan(tuple((v, tiles[v]) for v in session.sizes), tuple(order))


def _blocks_biggest_first(target) -> list[tuple[int, int]]:
    """The register blocks, most accumulators first (the most promising), wider on ties."""
    return sorted(register_blocks(target), key=lambda rv: (-rv[0] * rv[1], -rv[1]))


def _reduction_tiles(session) -> list:
    """None (untiled) and the cache tiles of the largest reduction variable."""
    _, _, _, red = _roles(session)
    if not red:
        return [None]
    n = session.sizes[red[0]]
    return [None] + [t for t in cache_tiles(n, lo=32) if t < n]


def _keep_best(session, plans, best):
    """Evaluate plans in batches; return the best (gflops, plan) seen (including `best`)."""
    batch = max(4, 2 * session.workers)
    for i in range(0, len(plans), batch):
        if session.exhausted():
            break
        chunk = [(p, session.build(p)) for p in plans[i:i + batch]]
        chunk = [(p, t) for p, t in chunk if t is not None]
        if not chunk:
            continue
        scores = session.evaluate([t for _, t in chunk])
        for (p, _), g in zip(chunk, scores):
            if g is not None and g > best[0]:
                best = (g, p)
    return best


def reblocked(session, plan: Plan, rows: int, vecs: int) -> Plan | None:
    """`plan` with its register block (the innermost tiles of the row and vector variables)
    changed to rows x vecs, its order and staging kept; None when the plan has no such block."""
    vec, row, _, _ = _roles(session)
    tiles = dict(plan.tiles)
    new = {vec: vecs * session.lanes, row: rows}
    for v, t in new.items():
        if v is None or not tiles.get(v) or t >= session.sizes[v]:
            return None
        if len(tiles[v]) > 1 and t >= tiles[v][-2]:
            return None
        tiles[v] = tiles[v][:-1] + (t,)
    return Plan(tuple((v, tiles[v]) for v in session.sizes), plan.order, plan.stage)


def scripted(session):
    """LoopStack §6.3's three steps, each keeping the best configuration for the next:
    register blocks x cache tiles, then windows of loop permutations from the innermost
    outwards, then staging of inputs.  The starting schedule competes from the outset (a
    default that is already blocked and packed is refined rather than discarded).  While
    budget remains, the steps repeat around the best schedule, its register block swept
    again with its order and staging kept, until a round improves nothing."""
    blocks = _blocks_biggest_first(session.target)
    kcs = _reduction_tiles(session)
    best = session.start_best
    # each block also with each input packed where it is reused: whether a block wins can
    # depend on its operand being packed (a convolution's weights panel, read with a
    # 1 KiB stride unpacked), so step 3 alone would judge the blocks on the wrong layout
    plans = [q for r, v in blocks for q in _packed_too(session, [blocked_plan(session, r, v, kcs[0])])]
    best = _keep_best(session, plans, best)
    # the cache tiles of the reduction for the biggest register blocks, packed as the best is
    plans = []
    for r, v in blocks[:6]:
        plans += [Plan(p.tiles, p.order, best[1].stage)
                  for p in (blocked_plan(session, r, v, kc) for kc in kcs[1:])]
    best = _keep_best(session, plans, best)
    while best[0] > 0 and not session.exhausted():
        before = best[1]
        best = _permute_windows(session, best)
        best = _keep_best(session, [Plan(best[1].tiles, best[1].order, st)
                                    for st in stagings(session.n_stage_inputs)], best)
        best = _keep_best(session, [q for r, v in blocks if (q := reblocked(session, best[1], r, v))], best)
        if best[1] == before:
            break
    return best


def _packed_too(session, plans) -> list:
    """Each plan as it is, then with each input of the main node packed (staged where
    copy_input places it: outside the loops that do not index it)."""
    return [Plan(p.tiles, p.order, st) for p in plans
            for st in [p.stage] + [((i, 0),) for i in range(session.n_stage_inputs)]]


def _permute_windows(session, best):
    """Step 2: permute windows of 5 loops, innermost first, above the register block (the
    innermost loops of the row and vector variables, chosen by step 1, stay innermost: moving
    one outwards spills the block and such candidates, a tenth as fast, would spend most of
    the step's budget on being measured)."""
    order = best[1].order
    n = len(order) - _block_depth(session, order)
    starts = list(range(max(0, n - 5), -1, -2))
    if starts and starts[-1] != 0:
        starts.append(0)
    for start in starts:
        if session.exhausted():
            break
        cands = [Plan(best[1].tiles, tuple(o[:n]) + tuple(order[n:]), best[1].stage)
                 for o in window_permutations(order[:n], start, 5)]
        best = _keep_best(session, cands, best)
        order = best[1].order
    return best


def _block_depth(session, order) -> int:
    """How many innermost loops of `order` form the register block: the vector variable's
    innermost loop and, when it is right above it, the row variable's innermost tile."""
    vec, row, _, _ = _roles(session)
    depth = 1
    if len(order) > 1 and row is not None and order[-2].rstrip("'") == row and order[-2] != row:
        depth = 2
    return depth if len(order) > depth else len(order) - 1


def exhaustive(session):
    """Every register block x reduction tile x permutation of the loops above the block."""
    vec, row, others, red = _roles(session)
    plans = []
    for (r, v), kc in itertools.product(register_blocks(session.target), _reduction_tiles(session)):
        base = blocked_plan(session, r, v, kc)
        inner = 2 if row else 1
        outer = base.order[:-inner]
        for perm in itertools.permutations(outer):
            plans.append(Plan(base.tiles, tuple(_renumber(perm)) + base.order[-inner:]))
    seen, uniq = set(), []
    for p in plans:
        if p not in seen:
            seen.add(p)
            uniq.append(p)
    return _keep_best(session, uniq, session.start_best)


def _renumber(order):
    from .space import _fix_prime_order

    return _fix_prime_order(list(order))


def random_search(session):
    rng = random.Random(session.seed)
    best = session.start_best
    while not session.exhausted():
        plans = [random_plan(rng, session.sizes, session.lanes) for _ in range(max(4, 2 * session.workers))]
        best = _keep_best(session, plans, best)
    return best


def _distance(a: Plan, b: Plan) -> float:
    """Plan dissimilarity: differing log tile sizes plus loop-order inversions."""
    ta, tb = dict(a.tiles), dict(b.tiles)
    d = 0.0
    for v in set(ta) | set(tb):
        x, y = ta.get(v, ()), tb.get(v, ())
        for i in range(max(len(x), len(y))):
            u = x[i] if i < len(x) else 1
            w = y[i] if i < len(y) else 1
            d += abs(math.log2(u) - math.log2(w))
    pos = {n: i for i, n in enumerate(b.order)}
    common = [n for n in a.order if n in pos]
    d += sum(1 for i, j in itertools.combinations(range(len(common)), 2) if pos[common[i]] > pos[common[j]])
    d += 2 * len(set(a.stage) ^ set(b.stage))
    return d


def _diverse(cands, score, k: int, distance=None) -> list:
    """`k` of `cands`, chosen greedily by score times distance to those already chosen
    (`distance` between two candidates: plans' by default)."""
    distance = distance or _distance
    ranked = sorted(cands, key=lambda c: -score[c])
    if not ranked:
        return []
    kept = [ranked[0]]
    top = max(score[ranked[0]], 1e-9)
    while len(kept) < min(k, len(ranked)):
        kept.append(max((c for c in ranked if c not in kept),
                        key=lambda c: (0.5 + score[c] / top) * (1 + min(distance(c, q) for q in kept))))
    return kept


def evolutionary(session, population: int = 12, batch: int = 4, rounds: int | None = None):
    """Diversity-aware evolutionary search (tensor-core paper §3.4).

    Each parent yields two mutants; half of them are kept, chosen greedily by predicted
    GFLOPS times distance to those already kept; they compete with the parents.  With a
    predictive cost model this exploration runs `rounds` generations on predictions alone
    (as the paper's exploration repeats its selection before touching hardware); the
    `batch` best unmeasured candidates explored and one random one are then measured, and
    the model learns from them.  The initial population is the model's best `batch` of the
    scripted tuner's first space (every register block x reduction tile, with or without
    staging an input), one per register block, measured first, and a diverse rest of that
    space and random plans.
    With measurement as the cost model there is nothing to explore on, so each generation
    is measured."""
    rng = random.Random(session.seed)
    predictive = not session.cost.measured
    rounds = rounds if rounds is not None else (4 if predictive else 1)
    score: dict[Plan, float] = {}
    measured: dict[Plan, float] = {}

    def built(plans):
        return [p for p in dict.fromkeys(plans) if session.build(p) is not None]

    def predict(plans):
        for p, g in zip(plans, session.predict([session.build(p) for p in plans])):
            score[p] = g

    def measure(plans):
        for p, g in zip(plans, session.measure([session.build(p) for p in plans])):
            measured[p] = score[p] = g

    def offspring(parents):
        kids = []
        for p in parents:
            for _ in range(2):
                for _try in range(5):
                    k = mutate_plan(rng, p, session.sizes, session.lanes, session.n_stage_inputs)
                    if k not in score and k not in kids and session.build(k) is not None:
                        kids.append(k)
                        break
        return kids

    if predictive:
        # the first batch measured is the model's best register blocks (a random plan the
        # model overrates would waste it); random plans only join the population, for
        # diversity.  The seeds are listed in the scripted tuner's order so that the model's
        # ties (a roofline saturates at peak) fall to the bigger, untiled blocks first.
        blocks = _blocks_biggest_first(session.target)
        block_of = {}
        for kc in _reduction_tiles(session):
            for r, v in blocks:
                for q in _packed_too(session, [blocked_plan(session, r, v, kc)]):
                    block_of.setdefault(q, (r, v))
        seeds = built([session.start_plan] + list(block_of))
        predict(seeds)
        # the first batch spans register blocks (the model's best tiling and packing of each):
        # the block decides most of a kernel's speed, and the model's ties and near-ties
        # between tilings of one block would otherwise fill the batch with a single block
        best_of_block = {}
        for p in sorted(seeds, key=lambda p: -score[p]):
            best_of_block.setdefault(block_of.get(p, p), p)     # the start plan: a block of its own
        first = list(best_of_block.values())[:batch]
        others = built(random_plan(rng, session.sizes, session.lanes) for _ in range(population))
        predict(others)
        pop = first + _diverse([p for p in seeds + others if p not in first], score, population - len(first))
    else:
        blocks = register_blocks(session.target)
        pop = built([session.start_plan] + [blocked_plan(session, r, v, None) for r, v in rng.sample(blocks, 3)])
        while len(pop) < population:
            pop += built([random_plan(rng, session.sizes, session.lanes)])
        first = pop[:batch]
    measure(first)
    while not session.exhausted():
        if predictive:   # the model has learned from the last batch: re-score what it guessed
            predict([p for p in pop if p not in measured])
        explored, parents = [], pop
        for _ in range(rounds):
            kids = offspring(parents)
            if not kids:
                break
            predict(kids)
            kept = _diverse(kids, score, max(1, len(kids) // 2))
            explored += kept
            parents = sorted(dict.fromkeys(parents + kept), key=lambda p: -score.get(p, 0.0))[:population]
        if not explored:
            continue
        todo = [k for k in sorted(explored, key=lambda k: -score[k]) if k not in measured][:batch]
        rest = [k for k in explored if k not in measured and k not in todo]
        if rest:
            todo.append(rng.choice(rest))
        measure(todo)
        pop = sorted(dict.fromkeys(pop + explored), key=lambda p: -score.get(p, 0.0))[:population]
    if not measured:
        return (-1.0, session.start_plan)
    p = max(measured, key=measured.get)
    return (measured[p], p)


MAPPERS = {"scripted": scripted, "exhaustive": exhaustive, "random": random_search,
           "evolutionary": evolutionary}

# an integer contraction is searched on its tensorized instruction by every mapper (tune.tensorized)
from .tensorized import tensorized_first  # noqa: E402 - it imports this module's helpers lazily
MAPPERS = {name: tensorized_first(fn) for name, fn in MAPPERS.items()}
