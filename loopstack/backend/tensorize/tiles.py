"""The tile rewriter: a matrix multiply or a convolution onto a tile instruction (AMX `tdpbusd`
and its kin).

`tensorize_tiles(tree, instr)` takes a loop tree holding one contraction
`out[m, n] += a[m, r] * b[r, n]` (8-bit operands, int32 accumulation, an init, optionally a
requantized output) — or a unit-stride convolution with its channels innermost, as an implicit
GEMM over the zero-bordered input grid (see `_rewrite_conv`) — and returns an equivalent tree in which `instr` (a `tile_desc` registry
entry: 16 x 16 accumulators, 64 bytes of reduction in 4-byte groups) computes the core, by the
same ordinary means as the vector rewriter (rewrite.py):
  - the weights `b` are packed by a copy nest into `[n/16][r/4][16][4]` — 16-column panels of
    4-byte reduction groups, the layout `vpdpbusd` reads too; a tile of it is 16 rows of 64
    bytes — zero-padded where 16 does not divide n or 64 the reduction;
  - the activations `a` are read in place when each row's reduction is contiguous and whole
    tiles cover them (a tile load's row stride is a register: any row length), else copied
    into `[m'][r']` rows of whole tiles; what lies past them is never read into a kept result
    (padding rows reach only output rows the epilogue drops, padding bytes of the reduction
    meet the weights' zero padding), so it is not written;
  - the accumulators are stored straight into an int32 output that whole tiles cover; anything
    else (a bias, a requantized or narrower output, a ragged edge) goes through an int32 tile
    buffer and an element-wise epilogue `out = requant(tiles + init)`, which the vector code
    generator runs.
Each signedness pair has its own tile instruction, so int8 activations need no compensation.

The contraction's loops are `mt` (tile rows) by `block[0]`, `nt` (tile columns) by
`block[1]` — the accumulator block, 4 of AMX's 8 tile registers, the other 4 its operands —
then the reduction (a convolution's taps, then `kt`, 64-byte steps), then one tile row and
column: the code generator (backend/x86/amx.py) emits everything from the reduction down as one
tile block. `Rewrite.matched` is
the same contraction with the instruction's own loops (16 rows, 16 columns, 16 groups of 4)
innermost, which the inspector matches and the interpreter runs.
"""
from __future__ import annotations

from dataclasses import replace

from ...errors import UnsupportedError
from ...looptree.builders import nest
from ...looptree.ir import Access, Affine, Binary, Buffer, Compute, Dot, Load, LoopTree
from .inspect import _bind, inspect
from .registry import TensorInstr
from .rewrite import Rewrite, _index_range, accumulation_dtype, namer

BLOCK = (2, 2)          # tile rows x tile columns of accumulators


def _ceil(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _block_loops(mt: str, rows: int, nt: str, cols: int, parallel: bool, a_bytes: int, b_bytes: int) -> list:
    """The loops over blocks of tile rows and columns: the operand with more bytes outermost, so
    that its panel is read once and the smaller one, swept once per panel, stays in cache
    (weights of a deep convolution layer outweigh its activations); the outermost may run in
    parallel."""
    first, second = ((nt, cols), (mt, rows)) if b_bytes > a_bytes else ((mt, rows), (nt, cols))
    return [first + (frozenset({"parallel"}),) if parallel else first, second]


def _dims_alone(acc: Access) -> list[str] | None:
    """The dimension each position of `acc` indexes, where every position is one bare dim."""
    out = []
    for ix in acc.index:
        if len(ix.terms) != 1 or ix.terms[0][1] != 1 or ix.const:
            return None
        out.append(ix.terms[0][0])
    return out


def _reindex(acc: Access, dims: list[str], by: dict[str, Affine], zero_pad: bool) -> Access:
    return Access(acc.buffer, tuple(by[d] for d in dims), zero_pad or acc.zero_pad)


def tensorize_tiles(tree: LoopTree, instr: TensorInstr, *, block: tuple[int, int] = BLOCK,
                    avoid: frozenset[str] = frozenset(), transposed: bool = True, parallel: bool = False,
                    schedule=None) -> Rewrite:
    """`tree` (one matrix multiply or convolution) rewritten so `instr` computes it in tiles. The instruction's
    row operand `a` is the one the output's rows index; with `transposed`, also the other
    (a product commutes: the tiles then hold the output's transpose, stored back through the
    epilogue) — the way a product of int8 x uint8 runs as uint8 x int8 where only that
    instruction exists. `parallel`: the outermost loop (the blocks' rows) runs in parallel.
    `schedule` (scheduled.TileSchedule): the schedule's loops the blocks keep instead."""
    if not instr.tile:
        raise UnsupportedError(f"{instr.name} is no tile instruction")
    stmts = list(tree.computes())
    if len(stmts) != 1:
        raise UnsupportedError(f"tensorize takes a tree of one contraction; this one has {len(stmts)} statements")
    _, stmt = stmts[0]
    if stmt.reduce != "add" or accumulation_dtype(tree, stmt) != "int32":
        raise UnsupportedError(f"{instr.name}: statement {stmt.name} is no int32 sum")
    if stmt.init is None:
        raise UnsupportedError(f"{instr.name}: statement {stmt.name} accumulates into %{stmt.out.buffer}'s values; "
                               "tiles start from zero (give it an init)")
    want = {b.name: b.dtype for b in instr.desc.buffers}
    dtype_of = {b.name: b.dtype for b in tree.buffers}
    bindings = [b for b in _bind(instr.stmt.expr, stmt.expr, {})
                if dtype_of[b["a"].buffer] == want["a"] and dtype_of[b["b"].buffer] == want["b"]]
    if not bindings:
        raise UnsupportedError(f"{instr.name} multiplies {want['a']} x {want['b']}; statement {stmt.name} "
                               f"computes {stmt.expr}")
    if not transposed:
        rows_of = {ix.names()[0] for ix in stmt.out.index[:-1] if ix.names()}
        bindings = [b for b in bindings if rows_of & set(b["a"].names())]
        if not bindings:
            raise UnsupportedError(f"{instr.name}: its {want['a']} row operand would be the output's columns")
    why = []
    for binding in bindings:
        a, b = binding["a"], binding["b"]
        rewrite = _rewrite if _dims_alone(a) is not None and len(stmt.out.index) == 2 else _rewrite_conv
        try:
            return rewrite(tree, stmt, instr, a, b, block, avoid, parallel, schedule)
        except UnsupportedError as e:
            why.append(str(e))
    raise UnsupportedError(why[0])


def _rewrite(tree, stmt, instr, a, b, block, avoid, parallel, schedule) -> Rewrite:
    a_dims, b_dims, out_dims = _dims_alone(a), _dims_alone(b), _dims_alone(stmt.out)
    if a_dims is None or b_dims is None or out_dims is None or len(out_dims) != 2:
        raise UnsupportedError(f"{instr.name}: not a matrix multiply of single-dimension indices: {stmt}")
    red = [d for d in a_dims if d in b_dims and d not in out_dims]
    m = [d for d in a_dims if d in out_dims]
    n = [d for d in b_dims if d in out_dims]
    if len(a_dims) != 2 or len(b_dims) != 2 or len(red) != 1 or len(m) != 1 or len(n) != 1 or m == n:
        raise UnsupportedError(f"{instr.name}: %{a.buffer}[{', '.join(a_dims)}] x %{b.buffer}[{', '.join(b_dims)}] "
                               f"-> %{stmt.out.buffer}[{', '.join(out_dims)}] is no matrix multiply (m x r . r x n)")
    (r,), (m,), (n,) = red, m, n
    sizes = dict(tree.dims)
    M, N, K = sizes[m], sizes[n], sizes[r]
    Mp, Np, Kp = _ceil(M, 16), _ceil(N, 16), _ceil(K, 64)
    fresh = namer(tree, avoid)
    buffers, dims, body, steps = list(tree.buffers), dict(tree.dims), [], []
    (mt, nt, kt), inner = _tile_loops(fresh, dims, Mp, Np, Kp)
    mi, ni, kg, kj = (d for d, _ in inner)

    # -- the activations: in place, or copied with the padding materialised -------------------
    abuf = tree.buffer(a.buffer)
    if a_dims[-1] == r and abuf.strides[-1] == 1 and (M, K) == (Mp, Kp) and not a.zero_pad:
        a_name, a_order = a.buffer, a_dims
    else:
        # only the activations themselves are copied: the padding's rows reach only output rows
        # the epilogue drops, and its columns meet the weights' zero padding
        a_name, a_order = fresh(f"{a.buffer}_rows"), [m, r]
        am, ak = fresh(f"{a.buffer.lower()}0"), fresh(f"{a.buffer.lower()}1")
        dims.update({am: M, ak: K})
        buffers.append(Buffer(a_name, abuf.dtype, (Mp, Kp), "temp"))
        src = _reindex(a, a_dims, {m: Affine.of(am), r: Affine.of(ak)}, False)
        body.append(nest([(am, 1), (ak, 1)], Compute(fresh("stage"), Access(a_name, (Affine.of(am), Affine.of(ak))),
                                                      Load(src)), names=[fresh(am + "_l"), fresh(ak + "_l")]))
        steps.append(f"copy %{a.buffer} as [{m}][{r}] rows" + (f" of {Mp} x {Kp}" if (M, K) != (Mp, Kp) else ""))

    # -- the weights: 16-column panels of 4-byte reduction groups ----------------------------
    bbuf = tree.buffer(b.buffer)
    b_name = fresh(f"{b.buffer}_tiles")
    bd = [fresh(f"{b.buffer.lower()}{i}") for i in range(4)]
    dims.update(zip(bd, (Np // 16, Kp // 4, 16, 4)))
    buffers.append(Buffer(b_name, bbuf.dtype, (Np // 16, Kp // 4, 16, 4), "temp"))
    src = _reindex(b, b_dims, {r: Affine.of((bd[1], 4), (bd[3], 1)), n: Affine.of((bd[0], 16), (bd[2], 1))},
                   (N, K) != (Np, Kp))
    body.append(nest([(d, 1) for d in bd], Compute(fresh("pack"), Access(b_name, tuple(Affine.of(d) for d in bd)),
                                                     Load(src)), names=[fresh(d + "_l") for d in bd]))
    steps.append(f"pack %{b.buffer} as [{n}/16][{r}/4][16][4]" + (f", zero-padded to {Kp} x {Np}" if (N, K) != (Np, Kp) else ""))

    # -- the accumulators: into the output, or an int32 tile buffer and an epilogue -----------
    obuf = tree.buffer(stmt.out.buffer)
    direct = (obuf.dtype == "int32" and stmt.requant is None and stmt.post is None and stmt.init == "identity"
              and out_dims[-1] == n and obuf.strides[-1] == 1 and (M, N) == (Mp, Np))
    if direct:
        c_name, c_order = stmt.out.buffer, out_dims
    else:
        c_name, c_order = fresh(f"{stmt.out.buffer}_tiles"), [m, n]
        buffers.append(Buffer(c_name, "int32", (Mp, Np), "temp"))

    def operands(a_ix, b_ix, c_ix):
        return (Access(a_name, tuple(a_ix[d] for d in a_order)), Access(b_name, b_ix),
                Access(c_name, tuple(c_ix[d] for d in c_order)))

    # the instruction form: one Dot per tile, addressed by its first row, column and group
    ta, tb, tc = operands({m: Affine.of((mt, 16)), r: Affine.of((kt, 64))},
                          (Affine.of(nt), Affine.of((kt, 16)), Affine.of(), Affine.of()),
                          {m: Affine.of((mt, 16)), n: Affine.of((nt, 16))})
    # the same with the instruction's loops: what the inspector matches and the interpreter runs
    ma, mb, mc = operands({m: Affine.of((mt, 16), (mi, 1)), r: Affine.of((kt, 64), (kg, 4), (kj, 1))},
                          (Affine.of(nt), Affine.of((kt, 16), (kg, 1)), Affine.of(ni), Affine.of(kj)),
                          {m: Affine.of((mt, 16), (mi, 1)), n: Affine.of((nt, 16), (ni, 1))})
    blocks = None
    if schedule is not None:            # the schedule's block loops, or its parallel loop alone
        blocks, kept = schedule.blocks({m: mt, n: nt}, {r}, instr, block)
        if blocks is None:
            parallel = kept
        else:
            block = kept
    rows, cols = block
    outer = (blocks or _block_loops(mt, rows, nt, cols, parallel, Mp * Kp, Np * Kp)) + [(kt, 1), (mt, 1), (nt, 1)]
    epilogue = []
    if not direct:
        epilogue.append(_epilogue(stmt, Load(Access(c_name, (Affine.of(m), Affine.of(n)))), out_dims, fresh))
        steps.append(f"accumulate in int32 tiles %{c_name}, then %{stmt.out.buffer} = " + _epilogue_text(stmt, "tiles"))
    return _finish(instr, stmt, block, LoopTree(tuple(buffers), tuple(dims.items()), tuple(body)), epilogue,
                   outer, inner, (ta, tb, tc), (ma, mb, mc), fresh, steps)


def _tile_loops(fresh, dims: dict, rows: int, cols: int, reduction: int):
    """(tile rows, tile columns, 64-byte steps) dimensions over padded extents, and the
    instruction's own loops (16 rows, 16 columns, 16 groups of 4 bytes), added to `dims`."""
    mt, nt, kt = fresh("mt"), fresh("nt"), fresh("kt")
    mi, ni, kg, kj = fresh("mi"), fresh("ni"), fresh("kg"), fresh("kj")
    dims.update({mt: rows // 16, nt: cols // 16, kt: reduction // 64, mi: 16, ni: 16, kg: 16, kj: 4})
    return (mt, nt, kt), [(mi, 1), (ni, 1), (kg, 1), (kj, 1)]


def _epilogue(stmt: Compute, tiles: Load, out_dims: list[str], fresh):
    """`out = requant(tiles + init)` (with the statement's post), element-wise over the output."""
    value = tiles if stmt.init == "identity" else Binary("add", tiles, stmt.init)
    return nest([(d, 1) for d in out_dims],
                replace(stmt, name=fresh(f"{stmt.name}_out"), expr=value, reduce=None, init=None, tensorize=""),
                names=[fresh(f"{d}_o") for d in out_dims])


def _epilogue_text(stmt: Compute, what: str) -> str:
    return (("requant(" if stmt.requant is not None else "(") + what
            + (" + init)" if stmt.init != "identity" else ")"))


def _finish(instr, stmt, block, staged: LoopTree, epilogue, outer, inner, tile_ops, matched_ops, fresh,
            steps) -> Rewrite:
    """The Rewrite: `staged` (buffers, dims, copy nests), the contraction on `outer` loops, then
    the epilogue; its matched form (the instruction's loops innermost) checked by the inspector."""
    names = [fresh(f"{e[0]}_l") for e in outer]
    inner_names = [fresh(f"{d}_l") for d, _ in inner]
    (ta, tb, tc), (ma, mb, mc) = tile_ops, matched_ops
    tile_stmt = Compute(stmt.name, tc, Dot("dot", Load(ta), Load(tb), k=instr.k, instr=instr.name),
                        reduce="add", init="identity")
    matched_stmt = Compute(stmt.name, mc, Binary("mul", Load(ma), Load(mb)), reduce="add", init="identity")
    steps = list(steps) + [f"{instr.mnemonic} ({instr.name}): {block[0]} x {block[1]} tiles of 16 x 16 int32, "
                           "64 bytes a step"]

    def tree_with(contraction):
        return replace(staged, body=staged.body + (contraction,) + tuple(epilogue))

    matched = tree_with(nest(outer + inner, matched_stmt, names=names + inner_names))
    (stack, s), = [(st_, c) for st_, c in matched.computes() if c.reduce == "add"]
    match = inspect(matched, stack, s, instr)
    if not match:
        raise UnsupportedError(f"tensorize: the rewritten loops do not match {instr.name}: {match.reason}")
    return Rewrite(tree_with(nest(outer, tile_stmt, names=names)), matched, match, tuple(steps))


def _conv_shape(tree, stmt, a, b):
    """(batch positions, spatial positions, channel dim, tap dims, output column dim) of a
    convolution `out[.., oh, ow, k] += a[.., oh + r*d - p, ow + s*d - p, c] * b[r, s, c, k]` with
    unit stride (the index positions in any order but a's: batch, two spatial, then channels)."""
    b_dims, out_dims = _dims_alone(b), _dims_alone(stmt.out)
    abuf = tree.buffer(a.buffer)
    if b_dims is None or out_dims is None or len(a.index) < 3:
        raise UnsupportedError(f"tile convolution: %{b.buffer} and %{stmt.out.buffer} must index one dim per position")
    red = [d for d in b_dims if d not in out_dims]
    cols = [d for d in out_dims if d in b_dims]
    last = _dims_alone(Access(a.buffer, a.index[-1:]))
    if len(cols) != 1 or last is None or last[0] not in red or abuf.strides[-1] != 1:
        raise UnsupportedError(f"tile convolution: %{a.buffer}'s channels (a reduction %{b.buffer} reads) must be "
                               "its last, contiguous position, and one output dimension %{b.buffer}'s alone")
    c, kd = last[0], cols[0]
    taps = [d for d in red if d != c]
    spatial = []
    for p, ix in enumerate(a.index[:-1]):
        tap = [t for t in ix.names() if t in taps]
        outs = [d for d in ix.names() if d in out_dims]
        if tap:
            if len(tap) != 1 or len(outs) != 1 or ix.coeff(outs[0]) != 1 or ix.coeff(tap[0]) <= 0 \
                    or len(ix.terms) != 2:
                raise UnsupportedError(f"tile convolution: %{a.buffer}'s index {ix} is no unit-stride window")
            spatial.append((p, outs[0], tap[0]))
        elif _dims_alone(Access(a.buffer, (ix,))) is None or ix.names()[0] not in out_dims or ix.names()[0] in b_dims:
            raise UnsupportedError(f"tile convolution: %{a.buffer}'s index {ix} is neither a window nor a batch")
    if len(spatial) != 2 or [p for p, _, _ in spatial] != [len(a.index) - 3, len(a.index) - 2] \
            or sorted(t for _, _, t in spatial) != sorted(taps):
        raise UnsupportedError(f"tile convolution: %{a.buffer} needs two window positions just before its channels")
    batch = list(range(len(a.index) - 3))
    a_outs = {ix.names()[0] for ix in a.index[:-3]} | {o for _, o, _ in spatial}
    if a_outs | {kd} != set(out_dims):
        raise UnsupportedError(f"tile convolution: %{stmt.out.buffer}'s dimensions are not %{a.buffer}'s and {kd}")
    return batch, spatial, c, taps, kd


def _rewrite_conv(tree, stmt, instr, a, b, block, avoid, parallel, schedule) -> Rewrite:
    """A unit-stride convolution as tiles: its output pixels along (oh, ow) are the tile rows on a
    grid as wide as the zero-bordered input row (implicit GEMM): the pixel q = oh * Ws + ow reads
    the staged input row q + r * Ws + s for tap (r, s), affine in q, so a tile is 16 consecutive
    grid points at the channels' row stride. The grid's columns past the output's width are
    computed and dropped by the epilogue (2 of every Ws + 2 for a 3x3 window)."""
    batch, spatial, c, taps, kd = _conv_shape(tree, stmt, a, b)
    if schedule is not None:
        parallel = schedule.convolution_parallel(instr)
    b_dims, out_dims = _dims_alone(b), _dims_alone(stmt.out)
    sizes = dict(tree.dims)
    (hp, oh, rh), (wp, ow, rw) = spatial
    lo = {p: _index_range(a.index[p], sizes) for p in (hp, wp)}
    Hs, Ws = (lo[p][1] - lo[p][0] + 1 for p in (hp, wp))
    OH, OW, C, K = sizes[oh], sizes[ow], sizes[c], sizes[kd]
    Q, Cp, Kp = _ceil(OH * Ws, 16), _ceil(C, 64), _ceil(K, 16)
    # the last staged row a tile may read: q < Q plus the largest tap offset
    reach = (lo[hp][1] - lo[hp][0] - (OH - 1)) * Ws + (lo[wp][1] - lo[wp][0] - (OW - 1))
    L = Q + reach
    abuf, bbuf = tree.buffer(a.buffer), tree.buffer(b.buffer)
    fresh = namer(tree, avoid)
    buffers, dims, body = list(tree.buffers), dict(tree.dims), []
    (mt, nt, kt), inner = _tile_loops(fresh, dims, Q, Kp, Cp)
    mi, ni, kg, kj = (d for d, _ in inner)
    batch_ix = [a.index[p] for p in batch]

    # -- the activations: rows of the zero-bordered (h, w) grid, flattened -------------------
    # only the input's pixels inside the window's reach are copied: the border's grid rows are
    # never written, so they keep the zeros a temporary buffer starts with (backend
    # kernel_base.allocate_storage, the interpreter's too); channels past C meet zero weights
    xs = fresh(f"{a.buffer}_grid")
    xd = [fresh(f"{a.buffer.lower()}{i}") for i in range(len(batch) + 3)]
    first = {p: max(0, lo[p][0]) for p in (hp, wp)}
    count = {p: min(abuf.shape[p] - 1, lo[p][1]) - first[p] + 1 for p in (hp, wp)}
    if min(count.values()) < 1:
        raise UnsupportedError("tile convolution: the window reads no input pixel")
    dims.update(zip(xd, [abuf.shape[p] for p in batch] + [count[hp], count[wp], C]))
    buffers.append(Buffer(xs, abuf.dtype, tuple(abuf.shape[p] for p in batch) + (L, Cp), "temp"))
    *bx, xi, xj, xc = xd
    src = Access(a.buffer, tuple(Affine.of(d) for d in bx) + (Affine.of(xi, const=first[hp]),
                 Affine.of(xj, const=first[wp]), Affine.of(xc)))
    to_row = Affine.of((xi, Ws), (xj, 1), const=(first[hp] - lo[hp][0]) * Ws + first[wp] - lo[wp][0])
    body.append(nest([(d, 1) for d in xd], Compute(fresh("stage"), Access(xs, tuple(Affine.of(d) for d in bx)
                + (to_row, Affine.of(xc))), Load(src)), names=[fresh(d + "_l") for d in xd]))
    steps = [f"copy %{a.buffer} into a zero-bordered grid of {Hs} x {Ws} pixel rows ({Cp} bytes apart)"]

    # -- the weights: [k/16][taps][c/4][16][4] ----------------------------------------------
    bp = fresh(f"{b.buffer}_tiles")
    bd = [fresh(f"{b.buffer.lower()}{i}") for i in range(len(taps) + 4)]
    b0, *bt, b1, b2, b3 = bd
    dims.update(zip(bd, [Kp // 16] + [sizes[t] for t in taps] + [Cp // 4, 16, 4]))
    buffers.append(Buffer(bp, bbuf.dtype, (Kp // 16, *[sizes[t] for t in taps], Cp // 4, 16, 4), "temp"))
    by = {c: Affine.of((b1, 4), (b3, 1)), kd: Affine.of((b0, 16), (b2, 1)), **{t: Affine.of(v) for t, v in zip(taps, bt)}}
    body.append(nest([(d, 1) for d in bd], Compute(fresh("pack"), Access(bp, tuple(Affine.of(d) for d in bd)),
                     Load(_reindex(b, b_dims, by, (C, K) != (Cp, Kp)))), names=[fresh(d + "_l") for d in bd]))
    steps.append(f"pack %{b.buffer} as [{kd}/16][{']['.join(taps)}][{c}/4][16][4]")

    # -- the accumulators: an int32 grid, then the epilogue drops the grid's extra columns -----
    ct = fresh(f"{stmt.out.buffer}_tiles")
    buffers.append(Buffer(ct, "int32", tuple(abuf.shape[p] for p in batch) + (Q, Kp), "temp"))
    grid = {p: a.index[p] for p in (hp, wp)}

    def row(q: Affine) -> Affine:          # the staged row of grid point q at the taps
        terms = list(q.terms) + [(rh, grid[hp].coeff(rh) * Ws), (rw, grid[wp].coeff(rw))]
        return Affine.of(*terms, const=(grid[hp].const - lo[hp][0]) * Ws + grid[wp].const - lo[wp][0])

    def operands(q: Affine, k_ix: Affine, b_ix, col: Affine):
        return (Access(xs, tuple(batch_ix) + (row(q), k_ix)), Access(bp, b_ix),
                Access(ct, tuple(batch_ix) + (q, col)))

    taps_ix = tuple(Affine.of(t) for t in taps)
    ta, tb, tc = operands(Affine.of((mt, 16)), Affine.of((kt, 64)),
                          (Affine.of(nt),) + taps_ix + (Affine.of((kt, 16)), Affine.of(), Affine.of()),
                          Affine.of((nt, 16)))
    ma, mb, mc = operands(Affine.of((mt, 16), (mi, 1)), Affine.of((kt, 64), (kg, 4), (kj, 1)),
                          (Affine.of(nt),) + taps_ix + (Affine.of((kt, 16), (kg, 1)), Affine.of(ni), Affine.of(kj)),
                          Affine.of((nt, 16), (ni, 1)))
    rows, cols = block
    batch_dims = [ix.names()[0] for ix in batch_ix]
    # the images of a batch inside the blocks: the outermost loop is the one that may run in parallel
    outer = (_block_loops(mt, rows, nt, cols, parallel, L * Cp, Kp * Cp * len(taps) * 4)
             + [(d, 1) for d in batch_dims] + [(t, 1) for t in taps] + [(kt, 1), (mt, 1), (nt, 1)])
    grid_value = Load(Access(ct, tuple(batch_ix) + (Affine.of((oh, Ws), (ow, 1)), Affine.of(kd))))
    epilogue = [_epilogue(stmt, grid_value, out_dims, fresh)]
    steps.append(f"accumulate in an int32 grid %{ct} ({Q} rows), then %{stmt.out.buffer} = "
                 + _epilogue_text(stmt, "grid") + f", {OW} of every {Ws} columns")
    return _finish(instr, stmt, block, LoopTree(tuple(buffers), tuple(dims.items()), tuple(body)), epilogue,
                   outer, inner, (ta, tb, tc), (ma, mb, mc), fresh, steps)
