"""x86 code for tile instructions (AMX): the tile configuration, and one block of tile products.

The tile rewriter (backend/tensorize/tiles.py) leaves a contraction whose statement is one Dot
per 16 x 16 tile of int32 accumulators, addressed by its first row and column, under the loops
`mt` (tile rows) x `nt` (tile columns) of the accumulator block, then `kt` (64-byte reduction
steps; a convolution's window taps too). The nest walk emits the loops above the block as it
emits any loop (the schedule's tiling, order and parallelism); from the reduction loops down,
`tile_block` emits:

    tilezero   every accumulator tile of the block (rows x cols <= 4: tmm0-3)
    loops over the reduction (runtime loops moving the A and B pointers):
               tileloadd each row's A tile (tmm4-5), tileloaddt1 each column's B tile
               (tmm6-7: the weights stream from L2, the hint leaves L1 to the block's A rows;
               measured +5-50 % at GEMM-1024 on a loaded Xeon, no loss at 512), each just
               before the first of the rows x cols tile products (tdpbusd & co.) reading it;
               the outermost reduction loop also asks for the accumulators' lines (prefetchw)
    tilestored every accumulator to its rows (the int32 output, or the rewriter's tile buffer)

Where a block's time goes (bench/amx_ceiling.py takes it apart; GEMM-1024, line-aligned
operands, a loaded Sapphire Rapids, % of the tdpbusd chain): the products alone 96 %, with their
loads 75-78 %, stores to lines in L1 70 %, stores to the output 55 % (the compiled kernel 56 %).
A tile row 16 bytes off a line's boundary touches two lines, and numpy places arrays on 16
bytes: there the outermost reduction loop's prefetchw of the accumulator rows, a share per
iteration, has the lines owned before the stores come (+20 % at GEMM-256 with the output 16
bytes off); with a line-aligned output it is neutral (+-3 %: the rows, 2 or 4 KiB apart, share
a few L1 sets and evict each other before their stores). Tried without gain: A staged at a
padded row length, B loaded without the t1 hint, a third level of blocks for L1 reuse,
prefetcht0 of the next step's A or B rows, the stores through an L1 scratch and vector moves,
the output's lines asked for in the last step only.

A tile load's rows are a register stride apart ([pointer + stride + disp]); the strides are
the operands' own row lengths. Every tile has the same shape, 16 rows of 64 bytes: one
64-byte configuration (`ldtilecfg`) at the top of a function that uses tiles, `tilerelease`
before it returns (the tile state is then back at its initial, unconfigured state).

The kernel may use tiles only after Linux grants the process the AMX state (isa.cpu.amx_permission,
asked for before any tile code is chosen).
"""
from __future__ import annotations

import struct

from ...errors import UnsupportedError
from ...isa.x86.operands import TMM, Mem
from ..analysis import chain_below, indexes_output
from ..tensorize.registry import instruction

ROWS, ROW_BYTES = 16, 64
ACCUMULATORS, A_TILES, B_TILES = TMM[0:4], TMM[4:6], TMM[6:8]


def tile_config() -> bytes:
    """The 64-byte configuration: palette 1, every tile 16 rows of 64 bytes (SDM vol. 1 §3.3:
    byte 0 palette, 1 start row, 16-47 bytes per row of tiles 0-15, 48-63 rows of tiles 0-15)."""
    n = len(TMM)
    return (bytes([1, 0]) + bytes(14) + struct.pack("<16H", *([ROW_BYTES] * n + [0] * (16 - n)))
            + bytes([ROWS] * n + [0] * (16 - n)))


def tile_begin(asm) -> None:
    asm.emit("ldtilecfg", asm.const(tile_config(), align=64).with_bits(512))


def tile_end(asm) -> None:
    asm.emit("tilerelease")


def tile_block(em, stmt, root, static: dict[str, int], ranges: dict[str, int]) -> None:
    """The accumulator block of `stmt` whose loops start at `root` (its reduction loops, then one
    tile row and one tile column), at `static`: ranges[m] x ranges[n] tiles, all reduction steps."""
    instr = instruction(stmt.expr.instr)
    asm = em.asm
    chain = chain_below(root)
    reduction = [lp for lp in chain if not indexes_output(stmt, lp)]
    a, b, c = stmt.expr.a.access, stmt.expr.b.access, stmt.out
    tile_loops = [lp for lp in chain if indexes_output(stmt, lp)]
    try:
        m = next(lp.dim for lp in tile_loops if lp.dim in a.names())
        n = next(lp.dim for lp in tile_loops if lp.dim in b.names())
    except StopIteration:
        raise UnsupportedError(f"statement {stmt.name}: no tile row and column loops below {root.var}") from None
    size = dict(em.tree.dims)
    rows, cols = (ranges.get(d, size[d]) for d in (m, n))
    if rows > len(A_TILES) or cols > len(B_TILES) or rows * cols > len(ACCUMULATORS):
        raise UnsupportedError(f"{instr.name}: a block of {rows} x {cols} tiles exceeds the tile registers "
                               f"({len(A_TILES)} x {len(B_TILES)})")

    def at(access, **offsets):
        point = dict(static)
        for d, o in offsets.items():
            point[d] = point.get(d, 0) + o
        return em.address(access, point)

    def step(access, d):                          # bytes from one tile to the next along d
        return em.displacement(access, {**static, d: static.get(d, 0) + 1}) - em.displacement(access, static)

    # a tile's row stride: A and C rows are the rows of a tile row; B rows its reduction groups
    k = reduction[-1].dim
    stride_bytes = {"a": step(a, m) // ROWS, "b": step(b, k) // ROWS, "c": step(c, m) // ROWS}
    regs: dict[int, object] = {}
    for value in stride_bytes.values():
        if value not in regs:
            if not em.free_gprs:
                raise UnsupportedError(f"{instr.name}: no general register left for a tile's row stride")
            regs[value] = em.free_gprs.pop()
            asm.emit("mov", regs[value], value)
    stride = {name: regs[v] for name, v in stride_bytes.items()}

    def tile_mem(base: Mem, name: str) -> Mem:
        return Mem(base.base, stride[name], 1, base.disp)

    acc = {(i, j): ACCUMULATORS[i * cols + j] for i in range(rows) for j in range(cols)}

    def products():
        # each load just before its first product: a tile register is reloaded only once the
        # products reading it are done (no renaming), so the first row's products overlap the
        # loads of the next operands (+3-7 % over all loads first at GEMM 256-512 on a loaded
        # Xeon, operands as numpy placed them; within the noise on line-aligned ones)
        for i in range(rows):
            asm.emit("tileloadd", A_TILES[i], tile_mem(at(a, **{m: i}), "a"))
            for j in range(cols):
                if i == 0:          # weights stream past once per block row: a hint to keep
                    asm.emit("tileloaddt1", B_TILES[j], tile_mem(at(b, **{n: j}), "b"))   # them out of L1
                asm.emit(instr.mnemonic, acc[i, j], A_TILES[i], B_TILES[j])

    def reduce(level: int) -> None:
        """The reduction loops from `level` in, runtime loops moving the A and B pointers."""
        if level == len(reduction):
            products()
            return
        lp = reduction[level]
        rng = ranges.get(lp.dim, size[lp.dim])
        if rng % lp.step:
            raise UnsupportedError(f"{instr.name}: reduction loop {lp.var} has a partial last step")
        count = rng // lp.step
        if count == 1:
            reduce(level + 1)
            return
        moves = [(x.base, d) for x, d in ((at(a), step(a, lp.dim) * lp.step), (at(b), step(b, lp.dim) * lp.step)) if d]
        owner = None if owned or not em.free_gprs else em.free_gprs.pop()
        per = 0
        if owner is not None:                 # the outermost runtime reduction loop claims the
            owned.append(owner)               # accumulator rows' lines, a share per iteration
            # (where the rows do not divide evenly, the last shares reach a few rows past the
            # block: a prefetch never faults, and those lines are another block's to store)
            per = -(-rows * ROWS // count)
            base = at(c)
            asm.emit("lea", owner, Mem(base.base, disp=base.disp, bits=64))
            moves.append((owner, per * stride_bytes["c"]))
        loop = em.loop_begin(lp.var, count)
        for r in range(per):
            for offset in range(0, cols * ROWS * 4, 64):
                asm.emit("prefetchw", Mem(owner, disp=r * stride_bytes["c"] + offset, bits=8))
        reduce(level + 1)
        em.loop_end(*loop, moves)
        for ptr, d in moves:
            if ptr is not owner:
                em.rewind(ptr, d * count)
        if owner is not None:
            em.free_gprs.append(owner)

    owned: list = []          # the register walking the accumulator rows ahead of their stores
    for t in acc.values():
        asm.emit("tilezero", t)
    reduce(0)
    for (i, j), t in acc.items():
        asm.emit("tilestored", tile_mem(at(c, **{m: i, n: j}), "c"), t)
    em.free_gprs.extend(regs.values())


def tile_probe_code(instr, chains: int = 4) -> bytes:
    """`void probe(int64_t n)`: n iterations of `chains` independent accumulator tiles each
    updated by `instr` from the same two operand tiles — the tile unit's peak on this core."""
    from ...isa.x86.assembler import Assembler
    from ...isa.x86.operands import rdi

    asm = Assembler()
    tile_begin(asm)
    for t in TMM[:chains] + (A_TILES[0], B_TILES[0]):
        asm.emit("tilezero", t)
    top = asm.label("loop")
    asm.bind(top)
    for t in TMM[:chains]:
        asm.emit(instr.mnemonic, t, A_TILES[0], B_TILES[0])
    asm.emit("dec", rdi)
    asm.emit("jne", top)
    tile_end(asm)
    asm.emit("ret")
    return asm.bytes()
