"""The rewriter (UNIT §III-C): reshape a contraction so a tensorized instruction computes its core.

`tensorize(tree, instr)` takes a loop tree holding one contraction `out[...] += a[...] * b[...]`
and returns an equivalent tree whose statement's two innermost loops are exactly the
instruction's lanes and reduction (the inspector matches it), by ordinary means only:
  - the lane dimension (an output dimension that only the vector operand reads) is split by the
    instruction's lanes, and the reduction dimension (one both operands read) by its k;
  - the vector operand (a matmul's or convolution's weights) is packed by a copy nest into
    [lane/L][its other dims][r/k][L][k] — `KCRS[y]k[x]c` for convolution weights —, zero-
    padded along the reduction when k does not divide it;
  - the broadcast operand (the activations) is copied with the reduction dimension innermost
    (`NCHW[x]c`) when its k values are not already contiguous, or when it must be padded;
  - int8 activations on an instruction that multiplies uint8 (x86 `vpdpbusd`) are shifted by
    128 in that copy, and 128 x the weights' sum over the reduction is subtracted in the
    statement's init — exact, not approximate;
  - 8-bit operands of an instruction that multiplies 16-bit values (the exact AVX2 path's
    `vpmaddwd` on pairs) are widened by those copies: both are packed and staged as int16,
    so the inner loop reads them ready to multiply.
A constant weight tensor's packing and sum read only that constant, so the backends build them
once per weight array, as for any staged copy of a constant.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...errors import ScheduleError, UnsupportedError
from ...looptree.builders import nest
from ...looptree.ir import Access, Affine, Binary, Buffer, Compute, Const, Dot, Load, LoopTree
from .inspect import Match, _bind, inspect
from .registry import TensorInstr

# int8 -> uint8: a + 128, and sum(a * b) = sum((a + 128) * b) - 128 * sum(b); uint8 -> int8 the
# other way round (AArch64's sdot has no unsigned x signed form)
SHIFT = {("int8", "uint8"): 128, ("uint8", "int8"): -128}
# the program's operand dtypes an instruction's wider operand dtype holds exactly
WIDENS = {"int16": frozenset({"int8", "uint8"})}


@dataclass(frozen=True)
class Rewrite:
    tree: LoopTree              # the instruction form: the matched loops replaced by one Dot per lane
    matched: LoopTree           # the same before that step: the instruction's loops innermost
    match: Match
    steps: tuple[str, ...]      # what was done, in words (shown by `loopstack show` and the TUI)


def _single_dim(ix: Affine) -> str | None:
    return ix.terms[0][0] if len(ix.terms) == 1 and ix.terms[0][1] == 1 and ix.const == 0 else None


def _position(acc: Access, dim: str, what: str) -> int:
    """The one buffer position `acc` indexes by exactly `dim`."""
    hits = [p for p, ix in enumerate(acc.index) if dim in ix.names()]
    if len(hits) != 1 or _single_dim(acc.index[hits[0]]) != dim:
        raise UnsupportedError(f"%{acc.buffer} ({what}) must index {dim} alone in one position to be "
                               f"repacked; its index is [{', '.join(map(str, acc.index))}]")
    return hits[0]


def _alone(acc: Access, dim: str) -> bool:
    return [_single_dim(ix) for ix in acc.index if dim in ix.names()] == [dim]


def _renamed(acc: Access, old: str, new: str) -> Access:
    """`acc` with dimension `old` read as `new`."""
    if old == new:
        return acc
    return Access(acc.buffer, tuple(Affine.of(*((new if n == old else n, c) for n, c in ix.terms), const=ix.const)
                                    for ix in acc.index), acc.zero_pad)


def _scaled(ix: Affine, coeff: int) -> list[tuple[str, int]]:
    return [(n, c * coeff) for n, c in ix.terms]


def namer(tree: LoopTree, avoid=()):
    """fresh(base): a name no buffer, dimension or name in `avoid` has, nor one it gave before."""
    taken = set(avoid) | {x.name for x in tree.buffers} | {d for d, _ in tree.dims}

    def fresh(base: str) -> str:
        name, i = base, 0
        while name in taken:
            i += 1
            name = f"{base}{i}"
        taken.add(name)
        return name
    return fresh


def tensorize(tree: LoopTree, instr: TensorInstr, *, outer: list[tuple[str, int]] | None = None,
              block: tuple[int, int] | None = None, avoid: frozenset[str] = frozenset(),
              parallel: bool = False) -> Rewrite:
    """`tree` (one contraction) rewritten so `instr` computes its innermost loops.

    The loops above the instruction's are `outer` ((dim, step[, annotations]) entries, outermost
    first; or a function of the chosen (lane dim, reduction dim, instr) that returns them), or by
    default each output dimension, then the lanes by the instruction's width, the other reduction
    dimensions and the reduction by k. `block=(rows, panels[, room])` asks instead for a register block
    of `rows` points of the output's innermost other dimension by `panels` vectors of lanes, the
    whole reduction inside it — the shape of an FMA kernel's block, for the code generators.
    New loop and buffer names avoid `avoid` (the names of a program this tree is a part of).
    `parallel`: the outermost of the default loops (not of `outer`'s) with two or more iterations
    runs in parallel (see _parallel_first)."""
    stmts = list(tree.computes())
    if len(stmts) != 1:
        raise UnsupportedError(f"tensorize takes a tree of one contraction; this one has {len(stmts)} statements")
    _, stmt = stmts[0]
    if instr.broadcast is None:
        raise UnsupportedError(f"{instr.name}: the rewriter maps contractions onto broadcast forms")
    if stmt.reduce != "add":
        raise UnsupportedError(f"statement {stmt.name} is not a sum of products")
    want = {b.name: b.dtype for b in instr.desc.buffers}
    dtype_of = {b.name: b.dtype for b in tree.buffers}
    if accumulation_dtype(tree, stmt) != want["acc"]:
        raise UnsupportedError(f"{instr.name} accumulates {want['acc']}; %{stmt.out.buffer} is {dtype_of[stmt.out.buffer]}")

    # (binding, shift of the broadcast operand, widen): exact dtypes first, then the compensated
    # form, where the activations differ from the instruction's operand in signedness alone, or
    # the widened one, where the instruction's operands hold the program's exactly
    candidates = []
    bn = instr.broadcast
    for b in _bind(instr.stmt.expr, stmt.expr, {}):
        got = {n: dtype_of[a.buffer] for n, a in b.items()}
        if got == {"a": want["a"], "b": want["b"]}:
            candidates.insert(0, (b, 0, False))
        elif bn is not None and all(got[n] == want[n] for n in got if n != bn) and (got[bn], want[bn]) in SHIFT:
            candidates.append((b, SHIFT[got[bn], want[bn]], False))
        elif all(got[n] in WIDENS.get(want[n], ()) for n in got):
            candidates.append((b, 0, True))
    if not candidates:
        raise UnsupportedError(f"statement {stmt.name} computes {stmt.expr} over "
                               f"{' x '.join(sorted(set(dtype_of[a.buffer] for a in stmt.reads())))}; "
                               f"{instr.name} multiplies {want['a']} x {want['b']}")
    # a commutative product binds both ways: the first binding that tensorizes wins
    errors = []
    for binding, compensate, widen in candidates:
        try:
            return _rewrite(tree, stmt, instr, binding, compensate, widen, outer, block, avoid, parallel)
        except (UnsupportedError, ScheduleError) as e:
            errors.append(e)
    raise errors[0]


def _parallel_first(outer: list, sizes: dict, out_dims) -> list:
    """`outer` with its first loop of two or more iterations annotated parallel and moved first,
    where it runs over the output and only loops of one iteration come before it (moving it
    past them changes the place of no iteration); else `outer` as it is."""
    for i, entry in enumerate(outer):
        dim, step = entry[:2]
        if dim not in out_dims:
            break
        if sizes[dim] >= 2 * step:
            return [(dim, step, frozenset({"parallel"}))] + list(outer[:i]) + list(outer[i + 1:])
    return list(outer)


def _rewrite(tree, stmt, instr, binding, compensate, widen, outer, block, avoid, parallel=False) -> Rewrite:
    if compensate and stmt.init is None:
        raise UnsupportedError(f"statement {stmt.name} accumulates into %{stmt.out.buffer}'s values; the int8 "
                               "compensation needs an init (identity or a bias)")
    bname = instr.broadcast
    vname = "b" if bname == "a" else "a"
    bc, vec = binding[bname], binding[vname]
    sizes = dict(tree.dims)
    out_dims = stmt.out.names()
    red_dims = [d for d, _ in tree.dims if d not in out_dims and (d in bc.names() or d in vec.names())]
    lane_cands = [d for d in out_dims if d in vec.names() and d not in bc.names() and d in sizes]
    if not lane_cands:
        raise UnsupportedError(f"no output dimension of {stmt.name} is read by %{vec.buffer} alone: nothing "
                               f"to spread over {instr.name}'s lanes")
    # the output's innermost dimension first: its lanes are stored contiguously
    out_inner = [n for ix in reversed(stmt.out.index) for n in ix.names()]
    lane = min(lane_cands, key=lambda d: out_inner.index(d) if d in out_inner else len(out_inner))
    # a reduction dimension both operands read, each indexing it alone in one position (a
    # convolution's channels, not its window taps, whose input index is oh + r)
    r_cands = [d for d in red_dims if d in bc.names() and d in vec.names() and _alone(bc, d) and _alone(vec, d)]
    if not r_cands:
        raise UnsupportedError(f"no reduction dimension of {stmt.name} is read by both operands, each indexing "
                               "it alone in one position")
    bc_strides = {d: abs(_stride(tree, bc, d)) for d in r_cands}
    r = min(r_cands, key=lambda d: bc_strides[d])
    L, K = instr.lanes, instr.k
    if sizes[lane] % L:
        raise UnsupportedError(f"{lane} = {sizes[lane]} is not a multiple of {instr.name}'s {L} lanes")
    Kp = -(-sizes[r] // K) * K
    steps = [f"split {lane} by {L}", f"split {r} by {K}"]
    pad = Kp != sizes[r]
    dims = dict(sizes)
    buffers = list(tree.buffers)
    fresh = namer(tree, avoid)

    # the padded reduction is a dimension of its own: `r` keeps its size for the tree's other
    # statements (one that also sums over r must not sum over the padding)
    r_pad = r
    if pad:
        r_pad = fresh(f"{r}_pad")
        dims[r_pad] = Kp
        steps.append(f"pad {r} from {sizes[r]} to {Kp} with zeros, as {r_pad}")

    def loops_of(order, body, tag):
        vs = [fresh(f"{d}_{tag}") for d, _ in order]
        return nest(order, body, names=vs), vs

    # -- the vector operand, packed as [lane/L][other positions][r/K][L][K] ---------------------
    vbuf = tree.buffer(vec.buffer)
    lp, rp = _position(vec, lane, "vector operand"), _position(vec, r, "vector operand")
    others = [p for p in range(len(vec.index)) if p not in (lp, rp)]
    other_strides, st = {}, Kp * L
    for p in reversed(others):
        other_strides[p] = st
        st *= vbuf.shape[p]
    lane_o_stride = st
    vp = fresh(f"{vec.buffer}_packed")
    packed_dtype = instr.desc.buffer(vname).dtype if widen else vbuf.dtype
    buffers.append(Buffer(vp, packed_dtype, (lane_o_stride * (sizes[lane] // L),), "temp"))

    def packed_index(lane_outer, lane_i, r_outer, r_i):
        """The packed element of loops `lane_outer` / `r_outer` (whose offsets are multiples of L
        / K) and the innermost lane and reduction loops `lane_i`, `r_i` (their "@var" names)."""
        terms = ([(v, lane_o_stride // L) for v in lane_outer] + [(lane_i, K)]
                 + [(v, L) for v in r_outer] + [(r_i, 1)])
        for p in others:
            terms += _scaled(vec.index[p], other_strides[p])
        return Access(vp, (Affine.of(*terms, const=sum(vec.index[p].const * other_strides[p] for p in others)),))

    other_dims = [n for p in others for n in vec.index[p].names() if n in dims]
    other_dims = list(dict.fromkeys(other_dims))
    pack_order = [(lane, L)] + [(d, 1) for d in other_dims] + [(r_pad, K), (lane, 1), (r_pad, 1)]
    pack_vars = [fresh(f"{d}_p") for d, _ in pack_order]
    lo, *_, ro, li, ri = pack_vars
    pack_stmt = Compute(fresh("pack"), packed_index(["@" + lo], "@" + li, ["@" + ro], "@" + ri),
                        Load(replace(_renamed(vec, r, r_pad), zero_pad=vec.zero_pad or pad)))
    body = [nest(pack_order, pack_stmt, names=pack_vars)]
    steps.append(f"pack %{vec.buffer} as [{lane}/{L}]{''.join(f'[{vbuf.shape[p]}]' for p in others)}"
                 f"[{r}/{K}][{L}][{K}]" + (f", widened to {packed_dtype}" if widen else ""))

    # -- the broadcast operand: reduction innermost, padded, shifted for compensation ----------
    bbuf = tree.buffer(bc.buffer)
    new_bc = bc
    if pad or compensate or widen or bc.zero_pad or _stride(tree, bc, r) != 1:
        bp_pos = _position(bc, r, "broadcast operand")
        perm = [p for p in range(len(bc.index)) if p != bp_pos] + [bp_pos]
        # a zero-padded read is staged over the whole range its index sweeps, the border
        # materialised (as the shifted zero, 128, under compensation: the weights' sum counts
        # every reduction point, the border's too); then the contraction reads in bounds
        lo = {p: (_index_range(bc.index[p], dims)[0] if bc.zero_pad else 0) for p in perm}
        extent = {p: (_index_range(bc.index[p], dims)[1] - lo[p] + 1 if bc.zero_pad else bbuf.shape[p])
                  for p in perm}
        extent[bp_pos] = Kp
        shape = tuple(extent[p] for p in perm)
        staged_dtype = instr.desc.buffer(bname).dtype if compensate or widen else bbuf.dtype
        tag = {"uint8": "u8", "int8": "s8", "int16": "s16"}[staged_dtype] if compensate or widen else "kc"
        ap = fresh(f"{bc.buffer}_{tag}")
        buffers.append(Buffer(ap, staged_dtype, shape, "temp"))
        cdims = [fresh(f"{bc.buffer.lower()}{i}") for i in range(len(perm))]
        dims.update(zip(cdims, shape))
        src_index = [None] * len(perm)
        for q, p in enumerate(perm):
            src_index[p] = Affine.of(cdims[q], const=lo[p])
        src = Load(Access(bc.buffer, tuple(src_index), zero_pad=pad or bc.zero_pad))
        expr = Binary("add", src, Const(compensate)) if compensate else src
        copy = Compute(fresh("stage"), Access(ap, tuple(Affine.of(c) for c in cdims)), expr)
        body.append(nest([(c, 1) for c in cdims], copy, names=[fresh(c + "_l") for c in cdims]))
        new_bc = Access(ap, tuple(replace(bc.index[p], const=bc.index[p].const - lo[p]) for p in perm))
        steps.append(f"copy %{bc.buffer} with {r} innermost"
                     + (f", shifted by {compensate} to {staged_dtype}" if compensate else "")
                     + (f", widened to {staged_dtype}" if widen else "")
                     + (", its zero border materialised" if bc.zero_pad else ""))
    new_bc = _renamed(new_bc, r, r_pad)

    # -- compensation: init -= 128 * sum over the reduction of the weights ---------------------
    init = stmt.init
    if compensate:
        comp = fresh(f"{vec.buffer}_sum")
        buffers.append(Buffer(comp, "int32", (sizes[lane],), "temp"))
        sum_order = [(lane, 1)] + [(d, 1) for d in red_dims]
        sum_stmt = Compute(fresh("wsum"), Access(comp, (Affine.of(lane),)),
                           Load(replace(vec, zero_pad=vec.zero_pad or pad)), reduce="add", init="identity")
        body.insert(0, nest(sum_order, sum_stmt, names=[fresh(f"{d}_s") for d, _ in sum_order]))
        correction = Binary("mul", Const(-compensate), Load(Access(comp, (Affine.of(lane),))))
        init = correction if init == "identity" else Binary("add", init, correction)
        steps.append(f"compensate: init -= {compensate} * sum of %{vec.buffer} over the reduction")

    # -- the contraction, its instruction loops innermost ---------------------------------------
    out_others = [d for d in out_dims if d != lane and d in dims]
    rows_dim = next((n for ix in reversed(stmt.out.index) for n in ix.names() if n in out_others and sizes[n] > 1), None)
    if callable(outer):                 # the schedule's own loops, given the lanes and the reduction
        outer = outer(lane, r, instr)
    if outer is not None and pad:       # the schedule's loops over r sweep the padded dimension
        outer = [(r_pad, *e[1:]) if e[0] == r else e for e in outer]
    if outer is None and block is not None and rows_dim is not None:
        rows, panels = block[:2]
        # rows of exactly 7 (a 7x7 convolution output) take one 7-row block, not 6 and a tail of
        # 1, where the registers hold it (block[2]: the room they have). Measured on a Xeon:
        # QCONV-4 +16 %; 7-row blocks on 14- to 56-wide rows lost 5-12 % against 6 rows
        if len(block) > 2 and rows >= 6 and sizes[rows_dim] == 7 and 7 * panels <= block[2]:
            rows = 7
        outer = ([(d, 1) for d in out_others if d != rows_dim] + [(lane, L * panels), (rows_dim, rows)]
                 + [(d, 1) for d in red_dims if d != r] + [(r_pad, K), (rows_dim, 1), (lane, L)])
    elif outer is None:
        outer = [(d, 1) for d in out_others] + [(lane, L)] + [(d, 1) for d in red_dims if d != r] + [(r_pad, K)]
    else:
        parallel = False                # the schedule's loops carry their own annotations
    if parallel:
        outer = _parallel_first(outer, sizes, out_dims)
    order = list(outer) + [(lane, 1), (r_pad, 1)]
    vars_ = [fresh(f"{d[0]}{i}") for i, d in enumerate(order)]
    var_of = dict(zip(vars_, order))
    # every loop over the lanes (the reduction) above the innermost one steps by whole vectors
    # (k-groups): the packed element is the sum of their offsets' contributions
    lane_outer = [v for v, e in list(var_of.items())[:-2] if e[0] == lane]
    r_outer = [v for v, e in list(var_of.items())[:-2] if e[0] == r_pad]
    for v in lane_outer + r_outer:
        unit = L if var_of[v][0] == lane else K
        if var_of[v][1] % unit:
            raise ScheduleError(f"tensorize: loop {v} over {var_of[v][0]} steps by {var_of[v][1]}, "
                                f"not a multiple of {unit}")
    new_vec = packed_index(["@" + v for v in lane_outer], "@" + vars_[-2], ["@" + v for v in r_outer],
                           "@" + vars_[-1])
    operands = {bname: new_bc, vname: new_vec}
    expr = _rebind(instr.stmt.expr, stmt.expr, binding, operands)
    main = replace(stmt, expr=expr, init=init)
    copy_back = None
    if _stride(tree, stmt.out, lane) != 1:
        # lanes must be stored contiguously: accumulate into the output with the lane dimension
        # innermost (NCHW -> NHWC-like `[x]c` blocks), then copy it back into place
        obuf = tree.buffer(stmt.out.buffer)
        lpos = _position(stmt.out, lane, "output")
        perm = [p for p in range(len(obuf.shape)) if p != lpos] + [lpos]
        blocked = fresh(f"{obuf.name}_lanes")
        buffers.append(Buffer(blocked, obuf.dtype, tuple(obuf.shape[p] for p in perm), "temp"))
        main = replace(main, out=Access(blocked, tuple(stmt.out.index[p] for p in perm)))
        cdims = [fresh(f"{obuf.name.lower()}{i}") for i in perm]
        dims.update(zip(cdims, (obuf.shape[p] for p in perm)))
        dst = [None] * len(perm)
        for q, p in enumerate(perm):
            dst[p] = Affine.of(cdims[q])
        copy = Compute(fresh("unblock"), Access(obuf.name, tuple(dst)), Load(Access(blocked, tuple(Affine.of(c) for c in cdims))))
        copy_back = nest([(c, 1) for c in cdims], copy, names=[fresh(c + "_l") for c in cdims])
        steps.append(f"accumulate %{obuf.name} with {lane} innermost, then copy it into place")
    def tree_with(contraction):
        nodes = body + [contraction] + ([copy_back] if copy_back is not None else [])
        return LoopTree(tuple(buffers), tuple(dims.items()), tuple(nodes))

    matched = tree_with(nest(order, main, names=vars_))
    (stack, s), = [(st_, c) for st_, c in matched.computes() if c.name == stmt.name]
    m = inspect(matched, stack, s, instr)
    if not m:
        raise ScheduleError(f"tensorize: the rewritten loops do not match {instr.name}: {m.reason}")

    # the instruction form: the reduction's inner loop becomes the Dot's k terms, so the is addressed by its outer loop's offset alone
    # reduction dimension is addressed by its outer loop's offset alone; the lane loop's own
    # offset becomes the lane dimension less its outer loop's (a vectorised loop is addressed
    # by its dimension)
    r_i, lane_i = vars_[-1], vars_[-2]
    def drop_inner(acc: Access) -> Access:
        def terms(ix):
            for n, c in ix.terms:
                if n == "@" + r_i:
                    continue
                if n == r_pad:              # r_pad = the outer reduction loops' offsets
                    for v in r_outer:
                        yield "@" + v, c
                elif n == "@" + lane_i:     # the lane loop's offset = lane - the outer ones'
                    yield lane, c
                    for v in lane_outer:
                        yield "@" + v, -c
                else:
                    yield n, c
        return Access(acc.buffer, tuple(Affine.of(*terms(ix), const=ix.const) for ix in acc.index), acc.zero_pad)
    desc_side = {bname: new_bc, vname: new_vec}
    dot = Dot("dot", Load(drop_inner(desc_side["a"])), Load(drop_inner(desc_side["b"])), k=K, instr=instr.name)
    steps.append(f"{instr.mnemonic} ({instr.name}): {K} products per lane, {L} lanes")
    instr_form = tree_with(nest(order[:-1], replace(main, expr=dot), names=vars_[:-1]))
    return Rewrite(instr_form, matched, m, tuple(steps))


def accumulation_dtype(tree: LoopTree, stmt) -> str:
    """The type a statement's sum is held in: int32 under a requantized int8 output."""
    return "int32" if stmt.requant is not None else tree.buffer(stmt.out.buffer).dtype


def _index_range(ix: Affine, dims: dict[str, int]) -> tuple[int, int]:
    """The least and greatest value `ix` takes with every dimension over its whole size."""
    lo = hi = ix.const
    for n, c in ix.terms:
        if n not in dims:
            raise UnsupportedError(f"tensorize: index term {n} is not a dimension (a tree already scheduled?)")
        span = c * (dims[n] - 1)
        lo, hi = lo + min(0, span), hi + max(0, span)
    return lo, hi


def _stride(tree: LoopTree, acc: Access, dim: str) -> int:
    buf = tree.buffer(acc.buffer)
    return sum(ix.coeff(dim) * s for ix, s in zip(acc.index, buf.strides))


def _rebind(desc_e, e, binding, operands):
    """`e` with the loads bound to description operands replaced by their new accesses."""
    by_access = {acc: operands[n] for n, acc in binding.items()}
    def rec(x):
        if isinstance(x, Load) and x.access in by_access:
            return Load(by_access[x.access])
        if isinstance(x, Binary):
            return Binary(x.op, rec(x.a), rec(x.b))
        return x
    return rec(e)
