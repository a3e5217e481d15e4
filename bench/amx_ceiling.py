"""Where an AMX GEMM's cycles go: GEMM-N's 2 x 2 accumulator blocks as the tile code generator
emits them (backend/x86/amx.py, without its prefetches), hand-assembled with one thing changed at
a time, beside the tdpbusd chain (the %peak of `bench/int8.py`) and the compiled kernel itself.

    python3 bench/amx_ceiling.py [--n 512] [--rounds 5] [--json FILE]

Rows (each the whole GEMM: N/32 block rows of N/32 blocks of N/64 steps; a block row's 32 rows
of A reused by each of its blocks, B's packed panels streaming, as in the kernel):
  products only          the blocks' tdpbusd with no loads or stores: the tile unit alone
  loads, A and B in L1   every block reads the first block's B panel (no streaming)
  loads, B streaming     each block its own B panel (from L2 once the row outgrows L1)
  + stores to L1         each block's 4 accumulators stored to one 4 KiB scratch
  + stores to C          stored to the int32 output's rows (row stride N x 4 bytes), as emitted
  compiled GEMM-N        loopstack's kernel (bench/int8.py's row)
The gap between two rows is what the changed thing costs; the last two rows should agree.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from loopstack.backend.tensorize import instruction
from loopstack.backend.x86.amx import ACCUMULATORS, A_TILES, B_TILES, ROWS, tile_begin, tile_end
from loopstack.commands.bench_int8 import _placed, gemm_tree, int8_peak
from loopstack.isa import cpu
from loopstack.isa.execmem import ExecutableCode
from loopstack.isa.x86.assembler import Assembler
from loopstack.isa.x86.operands import Mem, r8, r9, r10, r11, r12, r13, r14, r15, rax, rbx, rcx, rdi, rdx, rsi
from loopstack.timing import best_seconds

SAVED = (rbx, r12, r13, r14, r15)


def block_row(n: int, loads: str, stores: str, mnemonic: str = "tdpbusd") -> bytes:
    """`void gemm(rows, A, B, C, scratch)`: `rows` block rows of 2 x 2 blocks of GEMM-n.
    loads: 'none' | 'l1' (every block the first B panel) | 'stream'; stores: 'none' | 'l1' | 'c'."""
    steps, blocks = n // 64, n // 32
    a_row, panel, c_row = n, 2 * steps * 1024, n * 4      # bytes: A row, a block's B, C row
    asm = Assembler()
    for r in SAVED:
        asm.emit("push", r)
    asm.emit("mov", r15, r8)                  # the 4 KiB scratch of stores to L1
    tile_begin(asm)
    asm.emit("mov", rax, a_row)
    asm.emit("mov", rbx, 64)                  # a packed B tile's rows, and the L1 scratch's
    asm.emit("mov", r12, c_row)
    rep = asm.label("rep")
    asm.bind(rep)
    asm.emit("mov", r8, rdx)                  # this block's B panel
    asm.emit("mov", r9, rcx)                  # this block's C columns
    asm.emit("mov", r10, blocks)
    block = asm.label("block")
    asm.bind(block)
    for t in ACCUMULATORS:
        asm.emit("tilezero", t)
    asm.emit("mov", r13, rsi)                 # A's 32 rows, one 64-byte step at a time
    asm.emit("mov", r14, r8)
    asm.emit("mov", r11, steps)
    step = asm.label("step")
    asm.bind(step)
    for i in range(2):
        if loads != "none":
            asm.emit("tileloadd", A_TILES[i], Mem(r13, rax, 1, i * ROWS * a_row))
        for j in range(2):
            if i == 0 and loads != "none":
                asm.emit("tileloaddt1", B_TILES[j], Mem(r14, rbx, 1, j * steps * 1024))
            asm.emit(mnemonic, ACCUMULATORS[2 * i + j], A_TILES[i], B_TILES[j])
    asm.emit("add", r13, 64)
    asm.emit("add", r14, 1024)
    asm.emit("dec", r11)
    asm.emit("jne", step)
    for i in range(2):
        for j in range(2):
            t = ACCUMULATORS[2 * i + j]
            if stores == "l1":
                asm.emit("tilestored", Mem(r15, rbx, 1, (2 * i + j) * 1024), t)
            elif stores == "c":
                asm.emit("tilestored", Mem(r9, r12, 1, i * ROWS * c_row + j * 64), t)
    if loads == "stream":
        asm.emit("add", r8, panel)
    asm.emit("add", r9, 128)
    asm.emit("dec", r10)
    asm.emit("jne", block)
    asm.emit("add", rsi, 2 * ROWS * a_row)      # the next block row: A's and C's next 32 rows
    asm.emit("add", rcx, 2 * ROWS * c_row)
    asm.emit("dec", rdi)
    asm.emit("jne", rep)
    tile_end(asm)
    for r in reversed(SAVED):
        asm.emit("pop", r)
    asm.emit("ret")
    return asm.bytes()


def rows(n: int, rounds: int) -> list[dict]:
    instr = instruction("amx.tdpbusd")
    rng = np.random.default_rng(0)
    # every operand on a cache line's boundary, as the kernel's own packed weights are (a tile
    # row 16 bytes past a boundary touches two lines: a third slower, bench/int8.py --align)
    A = _placed(rng.integers(0, 256, (n, n)).astype(np.uint8), 64)
    B = _placed(rng.integers(-128, 128, (n, n)).astype(np.int8), 64)
    packed = _placed(rng.integers(-128, 128, n * n).astype(np.int8), 64)     # the packed panels' bytes
    C = _placed(np.zeros((n, n), np.int32), 64)
    scratch = np.zeros(4096 + 64, np.uint8)
    s_addr = scratch.ctypes.data + (-scratch.ctypes.data) % 64
    variants = [("products only", "none", "none"), ("loads, A and B in L1", "l1", "none"),
                ("loads, B streaming", "stream", "none"), ("+ stores to L1", "stream", "l1"),
                ("+ stores to C", "stream", "c")]
    fns = []
    for name, loads, stores in variants:
        f = ExecutableCode(block_row(n, loads, stores), "void(*)(int64_t, int64_t, int64_t, int64_t, int64_t)")
        fns.append((name, lambda f=f: f(n // 32, A.ctypes.data, packed.ctypes.data, C.ctypes.data, s_addr),
                    2 * n ** 3))
    from loopstack.backend import compile as compile_tree
    kernel = compile_tree(gemm_tree(n))
    kernel.threads = 1
    fns.append((f"compiled GEMM-{n}", lambda: kernel(A, B, C), 2 * n ** 3))
    best = {name: 0.0 for name, _, _ in fns}
    pct = {name: 0.0 for name, _, _ in fns}
    for _ in range(rounds):
        peak = int8_peak(instr)
        for name, fn, ops in fns:
            g = ops / best_seconds(fn, 10) / 1e9
            best[name] = max(best[name], g)
            pct[name] = max(pct[name], 100 * g / peak)
    return [{"name": name, "gops": best[name], "peak_pct": pct[name]} for name, _, _ in fns]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512, help="GEMM size, a multiple of 64")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    granted, why = cpu.amx_permission()
    if not granted:
        print(f"no AMX here: {why}")
        return 0
    if args.n % 64:
        ap.error("--n must be a multiple of 64")
    got = rows(args.n, args.rounds)
    print(f"one block row of GEMM-{args.n} on {cpu.cpu_brand()}, best of {args.rounds} rounds; "
          "%peak: share of the tdpbusd chain probed beside each round")
    print(f"{'':24} {'GOPS':>7} {'%peak':>6}")
    for r in got:
        print(f"{r['name']:24} {r['gops']:7.0f} {r['peak_pct']:6.1f}")
    if args.json:
        from loopstack.timing import write_records
        write_records(args.json, got)
    return 0


if __name__ == "__main__":
    sys.exit(main())
