"""Lowering (paper §4.3): frontend loop tree -> backend loop tree (loopstack.looptree.ir).

One function, a straight list of passes over a small context:

    build_loops      frontend loops -> (var "L<ref>", dim, step); step = extent of the
                     inner loops over the same variable (LoopNest style)
    build_computes   one Compute per graph node at its leaf; an element-wise producer
                     whose loops all enclose its consumer is inlined into the consumer's
                     expression (fusion); views become affine indices (zero_pad for pads)
    drop_dead        a node every consumer inlined needs no buffer and no statement
    fold_posts       an element-wise node that is the only reader of a reduction (at the
                     output point, once or more) and reads nothing but inputs besides
                     becomes the reduction's `post`
                     (bias, activation applied on the store)
    size_buffers     each intermediate gets the smallest scope holding its writer and
                     readers: dimensions iterated by shared loops shrink to the loop's step
                     and are indexed `v - @L`
    emit             the loop tree (empty loops dropped)

    for m in 8 : L0                     Loop(L0, m, 1)
     for k in 4 : L1           ->         Loop(L1, k, 1)
      for n in 6 : L2                       Loop(L2, n, 1)
       %2[m, k, n] <- multiply(%0, %1)        Compute %3: %out[m, n] add= mul(%in0[m, k], %in1[k, n])
       %3[m, n] <- add(%2)
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..dtypes import DTYPES
from ..looptree.ir import (
    Acc, Access, Affine, Binary, Buffer, Compute, Const, Load, Loop, LoopTree as IRTree, Unary, loop_var,
    substitute_acc,
)
from .graph import view_source_index
from .tree import LoopTree, steps


@dataclass
class Ctx:
    tree: LoopTree
    steps: dict = field(default_factory=dict)        # loop ref -> step
    paths: dict = field(default_factory=dict)        # node id -> tuple of loop refs
    computes: dict = field(default_factory=dict)     # node id -> Compute (buffer names are node ids)
    reads: dict = field(default_factory=dict)        # node id -> set of buffer node ids it loads
    writer: dict = field(default_factory=dict)       # buffer node id -> compute node id writing it
    out_of: dict = field(default_factory=dict)       # node id -> buffer node id it writes
    materialized: set = field(default_factory=set)   # nodes stored anyway: read, never recomputed
    inlined: set = field(default_factory=set)        # nodes recomputed in a user's loops


def _aff(d: dict, c: int = 0) -> Affine:
    return Affine.of(*((n, k) for n, k in d.items() if k), const=c)


def build_loops(ctx: Ctx) -> None:
    t = ctx.tree
    g = t.graph
    node_steps: dict[int, list] = {}      # node id -> the steps of its order
    loop_path: dict[int, tuple] = {-1: ()}    # loop ref -> the loop refs down to it (items come in pre-order)
    for it in t.items:
        if it.kind == "loop":
            v, size, _ = it.entry
            loop_path[it.ref] = loop_path[it.parent] + (it.ref,)
            # the step comes from a node that needs the loop's dimension; a loop that only
            # repeats its nodes (add_loop(node, loop)) runs about `size` times over the dimension
            need = next((i for i in it.leaves if v in g.domain(g.node(i))), None)
            if need is not None:
                st = node_steps.get(need)
                if st is None:
                    st = node_steps[need] = steps(t.node_schedule(need).order)
                ctx.steps[it.ref] = st[it.depth]
            else:
                ctx.steps[it.ref] = -(-g.size(v) // size)
        else:
            ctx.paths[it.node] = loop_path[it.parent]


def _is_prefix(a, b) -> bool:
    return len(a) <= len(b) and b[:len(a)] == a


def _resolve(ctx: Ctx, i: int, idx: dict, padded: bool, user: int) -> object:
    """The value of node i at index idx (var -> (terms, const) over the user's dims)."""
    g = ctx.tree.graph
    n = g.node(i)
    if n.op == "const":
        return Const(float(n.value))
    if n.op == "view":
        src = g.node(n.inputs[0])
        return _resolve(ctx, src.id, view_source_index(n, src, idx), padded or n.pad, user)
    if n.op == "read":
        acc = Access(f"in{n.arg}", tuple(_aff(*idx[v]) for v in n.vars), padded)
        return Load(acc)
    if (n.op in ("unary", "binary") and not padded and i not in ctx.materialized
            and _is_prefix(ctx.paths[i], ctx.paths[user])
            # recomputed in the user's statement, it would compute in the user's type: an int32
            # sum's bias stays an integer add before the result's astype converts it
            and DTYPES[n.dtype].compute == DTYPES[g.node(user).dtype].compute):
        ctx.inlined.add(i)
        return _expr(ctx, n, idx, user)           # fusion: recompute in the user's loops
    ctx.reads[user].add(i)
    return Load(Access(f"#{i}", tuple(_aff(*idx[v]) for v in n.vars), padded))


def _expr(ctx: Ctx, n, idx: dict, user: int):
    args = [_resolve(ctx, j, idx, False, user) for j in n.inputs]
    if n.op == "unary":
        return Unary(n.fn, args[0])
    return Binary(n.fn, args[0], args[1])


def build_computes(ctx: Ctx) -> None:
    """Two rounds: the first finds the nodes some consumer must load from memory; the
    second inlines only the others (a stored value is read, not recomputed)."""
    _computes(ctx)
    first = dict(ctx.computes)
    drop_dead(ctx)
    ctx.materialized = set(ctx.computes)
    if ctx.inlined.isdisjoint(ctx.materialized):
        # nothing the first round recomputed is stored: the second round would make the same
        # statements (the materialized nodes only stop an inlining)
        ctx.computes = first
        return
    ctx.computes, ctx.reads = {}, {}
    _computes(ctx)


def _computes(ctx: Ctx) -> None:
    g = ctx.tree.graph
    for i in ctx.tree.sequence:
        n = g.node(i)
        if n.op in ("read", "write"):
            continue
        ctx.reads[i] = set()
        dom = g.domain(n)
        ident = {v: ({v: 1}, 0) for v in dom}
        out = Access(f"#{i}", tuple(_aff({v: 1}) for v in n.vars))
        if n.op in ("unary", "binary"):
            c = Compute(f"%{i}", out, _expr(ctx, n, ident, i))
        elif n.op == "reduce":
            c = Compute(f"%{i}", out, _resolve(ctx, n.inputs[0], ident, False, i), reduce=n.fn,
                        init="identity")
        elif n.op == "copy":
            c = Compute(f"%{i}", out, _resolve(ctx, n.inputs[0], ident, False, i))
        elif n.op == "flatten":
            stride, terms = 1, {}
            for v in reversed(n.flat):
                terms[v] = stride
                stride *= g.size(v)
            index = tuple(_aff(terms) if v not in dom else _aff({v: 1}) for v in n.vars)
            c = Compute(f"%{i}", Access(f"#{i}", index), _resolve(ctx, n.inputs[0], ident, False, i))
        else:  # pragma: no cover - every op is handled above
            raise AssertionError(n.op)
        ctx.computes[i] = c
        ctx.writer[i] = i
        ctx.out_of[i] = i


def drop_dead(ctx: Ctx) -> None:
    g = ctx.tree.graph
    keep = {g.output.inputs[0]}
    for i in reversed(ctx.tree.sequence):
        if i in ctx.computes:
            if i in keep:
                keep |= ctx.reads[i]
            else:
                del ctx.computes[i]


def _loads(e):
    if isinstance(e, Load):
        yield e
    elif isinstance(e, Unary):
        yield from _loads(e.x)
    elif isinstance(e, Binary):
        yield from _loads(e.a)
        yield from _loads(e.b)


def _subst(e, target: Load, by):
    if e == target:
        return by
    if isinstance(e, Unary):
        return Unary(e.op, _subst(e.x, target, by))
    if isinstance(e, Binary):
        return Binary(e.op, _subst(e.a, target, by), _subst(e.b, target, by))
    return e


def fold_posts(ctx: Ctx) -> None:
    g = ctx.tree.graph
    changed = True
    while changed:
        changed = False
        for r, rc in list(ctx.computes.items()):
            if rc.reduce is None:
                continue
            buf = ctx.out_of[r]
            users = [u for u in ctx.computes if buf in ctx.reads[u] and u != r]
            if len(users) != 1:
                continue
            e = users[0]
            en, ec = g.node(e), ctx.computes[e]
            if en.op not in ("unary", "binary") or ctx.tree.node_schedule(e).disabled:
                continue
            bn = g.node(buf)
            if set(en.vars) != set(bn.vars):
                continue
            loads = list(_loads(ec.expr))
            mine = [ld for ld in loads if ld.access.buffer == f"#{buf}"]
            ident = tuple(_aff({v: 1}) for v in bn.vars)
            # read more than once, as HardSwish's x * clip(x / 6 + 1/2, 0, 1) reads it, each read
            # is the accumulator's register; left out, the epilogue would be a pass of its own
            # that stores and reloads every accumulator, and the accumulator temp it reads keeps
            # a padded nest from splitting at its borders (backend/padding.py). MobileNetV3-Small,
            # one thread on an AVX-512 Xeon: its first convolution 122 -> 91 us in the model (with
            # its split), its 28x28 5x5/2 depthwise layer 15 -> 11 us alone; its 14x14x240 5x5
            # layers, whose 13-accumulator blocks leave few registers for it, 16.4 -> 18.1 us
            if not mine or any(ld.access.index != ident or ld.access.zero_pad for ld in mine):
                continue
            if any(not ld.access.buffer.startswith("in") for ld in loads if ld not in mine):
                continue
            post = _subst(ec.expr, mine[0], Acc())
            if rc.post is not None:
                post = substitute_acc(post, rc.post)
            ctx.computes[r] = replace(rc, out=ec.out, post=post)
            ctx.reads[r] = (ctx.reads[r] | ctx.reads[e]) - {buf}
            del ctx.computes[e]
            ctx.out_of[r] = e
            ctx.writer[e] = r
            changed = True


def size_buffers(ctx: Ctx):
    """Buffers, and a rename of '#id' accesses to their buffer with scope-relative indices."""
    t, g = ctx.tree, ctx.tree.graph
    out_id = g.output.inputs[0]
    buffers = [Buffer(f"in{g_.arg}", g_.dtype, tuple(g.size(v) for v in g_.vars), "input", constant=g_.constant)
               for g_ in sorted({n.arg: n for n in g.nodes if n.op == "read"}.values(), key=lambda n: n.arg)]
    rename = {}
    for i, c in ctx.computes.items():
        b = ctx.out_of[i]
        n = g.node(b)
        if b == out_id:
            rename[b] = ("out", list(n.vars), {})
            continue
        paths = [ctx.paths[i]] + [ctx.paths[u] for u in ctx.computes if b in ctx.reads[u]]
        k = 0
        while all(len(p) > k for p in paths) and len({p[k] for p in paths}) == 1:
            k += 1
        layout = list(t.node_schedule(b).layout) if n.op != "flatten" else list(n.vars)
        # a shared loop over another variable than the buffer's (a flatten's source variable b of
        # b_c = 17 b + c) has its writer write part of the buffer per iteration while a reader
        # reads it whole: a dimension may shrink only at the shared loops outside the first such
        # loop (inside it, one buffer row would hold rows of several iterations of the loops
        # between)
        scope = paths[0][:k]
        foreign = next((j for j, L in enumerate(scope) if t.items[L].entry[0] not in layout), len(scope))
        scope = scope[:foreign]
        shape, offs = [], {}
        for v in layout:
            ls = [L for L in scope if t.items[L].entry[0] == v]
            shape.append(ctx.steps[ls[-1]] if ls else g.size(v))
            offs[v] = ls
        name = f"t{b}"
        buffers.append(Buffer(name, n.dtype, tuple(shape), "temp"))
        rename[b] = (name, layout, offs)
    on = g.node(out_id)
    # the write's dtype, which a result's astype sets (the result is computed into `out`)
    buffers.append(Buffer("out", g.output.dtype, tuple(g.size(v) for v in on.vars), "output"))
    return tuple(buffers), rename


def _fix_access(a: Access, rename, g) -> Access:
    if not a.buffer.startswith("#"):
        return a
    b = int(a.buffer[1:])
    name, layout, offs = rename[b]
    n = g.node(b)
    by_var = dict(zip(n.vars, a.index))
    index = []
    for v in layout:
        af = by_var[v]
        for L in offs.get(v, ()):
            af = Affine.of(*af.terms, (loop_var(f"L{L}"), -1), const=af.const)
        index.append(af)
    return Access(name, tuple(index), a.zero_pad)


def _fix_expr(e, rename, g):
    if isinstance(e, Load):
        return Load(_fix_access(e.access, rename, g))
    if isinstance(e, Unary):
        return Unary(e.op, _fix_expr(e.x, rename, g))
    if isinstance(e, Binary):
        return Binary(e.op, _fix_expr(e.a, rename, g), _fix_expr(e.b, rename, g))
    return e


def emit(ctx: Ctx, buffers, rename) -> IRTree:
    t, g = ctx.tree, ctx.tree.graph
    stmts = {}
    for i, c in ctx.computes.items():
        b = ctx.out_of[i]
        # flatten writes a flat index: its buffer dims are its own vars, not a renamed layout
        stmts[i] = replace(c, out=_fix_access(replace(c.out, buffer=f"#{b}"), rename, g),
                           expr=_fix_expr(c.expr, rename, g),
                           post=_fix_expr(c.post, rename, g) if c.post is not None else None,
                           tensorize=t.node_schedule(i).tensorize if i in t._sched else "")

    def rec(refs):
        out = []
        for r in refs:
            it = t.items[r]
            if it.kind == "node":
                if it.node in stmts:
                    out.append(stmts[it.node])
                continue
            body = rec(it.children)
            if body:
                ann = frozenset((it.annotation,)) if it.annotation else frozenset()
                out.append(Loop(f"L{r}", it.entry[0], ctx.steps[r], tuple(body), ann))
        return out

    return IRTree(buffers, tuple(g.sizes), tuple(rec(t.roots)))


def lower(tree: LoopTree, log=None) -> IRTree:
    ctx = Ctx(tree)
    build_loops(ctx)
    build_computes(ctx)
    drop_dead(ctx)
    fold_posts(ctx)
    buffers, rename = size_buffers(ctx)
    res = emit(ctx, buffers, rename)
    if log is not None:
        log("after lower", res)
    return res
