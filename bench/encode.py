"""Encoder throughput: instructions per second for `emit` + `bytes()` on a realistic mix.

The mix is a GEMM micro-kernel body: FMAs with a memory operand, loads, stores, broadcasts,
and add/cmp/jne loop control; once with VEX (AVX2/FMA) and once with EVEX (zmm, disp8*N,
{1toN}, masks). The body is emitted 20 times: `vex`/`evex` with the same operand objects each
time (what a code generator that keeps its operands per call site gives the assembler), and
`*_fresh_mem` with new Mem objects for every instruction (what one that builds each address
anew gives it), built before the clock starts. A Mem works out its template shape as it is
built, so what building costs is the `mem_build` row: making the Mems of both `*_fresh_mem`
runs alone, per second (its instr column counts Mems). Also the time to make a callable from
bytes when `loopstack.isa.execmem` exists.

AArch64 rows: `a64` is the NEON 8x12 fp32 block of an sgemm micro-kernel (ldr q post-index,
24 `fmla .4s` by element per k step, unrolled 8 times, st1 of the accumulators, subs/b.ne), emitted
20 times like `vex`; AArch64 operands are interned, so building its Mems anew gives the same
objects and there is no separate fresh-Mem row. `a64_cold` empties the assembler's table of kept
instructions before every copy: each instruction is looked up in the form table and encoded.

    python bench/encode.py [--json FILE] [--rounds N] [--cpu]

--cpu times with this process's CPU time instead of the wall clock: on a shared machine the
wall clock also counts time spent running other processes.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loopstack.isa.x86.assembler import Assembler  # noqa: E402
from loopstack.isa.x86.operands import (K, YMM, ZMM, Mem, r8, r9, r10, rax, rcx, rdi, rdx,  # noqa: E402
                                        rsi)


def _vex_body() -> list[tuple]:
    out = []
    for k in range(8):
        out.append(("vmovups", YMM[12], Mem(rsi, disp=k * 64)))
        out.append(("vmovups", YMM[13], Mem(rsi, disp=k * 64 + 32)))
        for i in range(6):
            out.append(("vbroadcastss", YMM[14], Mem(rdi, rax, 4, i * 4 + k * 96)))
            out.append(("vfmadd231ps", YMM[2 * i], YMM[12], YMM[14]))
            out.append(("vfmadd231ps", YMM[2 * i + 1], YMM[13], Mem(r8, rcx, 4, i * 32)))
    for i in range(12):
        out.append(("vmovups", Mem(rdx, r9, 4, i * 32), YMM[i]))
    out += [("add", rax, 8), ("add", rsi, 512), ("cmp", rax, r10), ("jne", "top")]
    return out


def _evex_body() -> list[tuple]:
    out = []
    for k in range(8):
        out.append(("vmovups", ZMM[28], Mem(rsi, disp=k * 128)))
        out.append(("vmovups", ZMM[29], Mem(rsi, disp=k * 128 + 64)))
        for i in range(12):
            out.append(("vfmadd231ps", ZMM[i], ZMM[28], Mem(rdi, rax, 4, i * 4 + k * 96).bcst(32)))
            out.append(("vfmadd231ps", ZMM[i + 12], ZMM[29], ZMM[30]))
        out.append(("vbroadcastss", ZMM[30], Mem(r8, disp=k * 4)))
    for i in range(24):
        out.append(("vmovups", Mem(rdx, r9, 4, i * 64).masked(K[1]) if i >= 22 else Mem(rdx, r9, 4, i * 64),
                    ZMM[i]))
    out += [("add", rax, 8), ("add", rsi, 1024), ("cmp", rax, r10), ("jne", "top")]
    return out


def _a64_body() -> list[tuple]:
    from loopstack.isa.aarch64.operands import Mem as AMem
    from loopstack.isa.aarch64.operands import V, X
    out = []
    for k in range(8):
        out.append(("ldr", V(24).q, AMem.post(X(0), 16)))
        out.append(("ldr", V(25).q, AMem.post(X(0), 16)))
        for j in range(3):
            out.append(("ldr", V(26 + j).q, AMem(X(1), 48 * k + 16 * j)))
        for i in range(8):
            for j in range(3):
                out.append(("fmla", V(3 * i + j).s4, V(26 + j).s4, V(24 + i // 4).s[i % 4]))
    for i in range(0, 24, 4):
        out.append(("st1", [V(i).s4, V(i + 1).s4, V(i + 2).s4, V(i + 3).s4], AMem.post(X(2), 64)))
    out += [("add", X(1), X(1), 384), ("subs", X(3), X(3), 1), ("b.ne", "top")]
    return out


def measure_a64(body: list[tuple], rounds: int, copies: int = 20, cold: bool = False) -> dict:
    from loopstack.isa.aarch64 import assembler as a64
    times, n, code = [], 0, b""
    for _ in range(rounds):
        asm = a64.Assembler()
        top = asm.label("top")
        ops_list = [(mn, tuple(top if o == "top" else o for o in ops)) for mn, *ops in body]
        emit = asm.emit
        t0 = _clock()
        asm.bind(top)
        for _ in range(copies):
            if cold:
                a64._KEPT.clear()
            for mn, ops in ops_list:
                emit(mn, *ops)
        code = asm.bytes()
        times.append(_clock() - t0)
        n = len(asm)
    t = statistics.median(times)
    return {"instr_per_s": n / t, "us": t * 1e6, "instructions": n, "code_bytes": len(code)}


_clock = time.perf_counter


def _fields(m: Mem) -> tuple:
    return tuple(getattr(m, f) for f in Mem.__match_args__)


def _operand(o, top, fresh: bool):
    if o == "top":
        return top
    return Mem(*_fields(o)) if fresh and isinstance(o, Mem) else o


def _run(body: list[tuple], copies: int, fresh: bool) -> tuple[float, int, bytes]:
    """`fresh`: every copy gets new Mem objects (built before the clock starts), as a code
    generator that builds each address anew gives them; else the copies share them."""
    asm = Assembler()
    top = asm.label("top")
    shared = [(mn, tuple(_operand(o, top, False) for o in ops)) for mn, *ops in body]
    bodies = [[(mn, tuple(_operand(o, top, True) for o in ops)) for mn, *ops in body] for _ in range(copies)] \
        if fresh else [shared] * copies
    emit = asm.emit
    t0 = _clock()
    asm.bind(top)
    for ops_lists in bodies:
        for mn, ops in ops_lists:
            emit(mn, *ops)
    code = asm.bytes()
    dt = _clock() - t0
    return dt, len(asm), code


def measure(body: list[tuple], rounds: int, copies: int = 20, fresh: bool = False) -> dict:
    times = []
    n = 0
    code = b""
    for _ in range(rounds):
        dt, n, code = _run(body, copies, fresh)
        times.append(dt)
    t = statistics.median(times)
    return {"instr_per_s": n / t, "us": t * 1e6, "instructions": n, "code_bytes": len(code)}


def measure_mem_build(bodies: list[list[tuple]], rounds: int, copies: int = 20) -> dict:
    """Building the Mems of `copies` copies of each body, from their fields, as `Mem(...)` calls."""
    fields = [_fields(o) for body in bodies for _, *ops in body for o in ops if isinstance(o, Mem)] * copies
    times = []
    for _ in range(rounds):
        t0 = _clock()
        for f in fields:
            Mem(*f)
        times.append(_clock() - t0)
    t = statistics.median(times)
    return {"instr_per_s": len(fields) / t, "us": t * 1e6, "instructions": len(fields)}


def measure_callable(code: bytes, rounds: int) -> dict | None:
    try:
        from loopstack.isa.execmem import ExecutableCode
    except ImportError:
        return None
    times = []
    for _ in range(rounds * 20):
        t0 = time.perf_counter()
        obj = ExecutableCode(code)
        times.append(time.perf_counter() - t0)
        del obj
    return {"us": statistics.median(times) * 1e6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="FILE", help="write a list of result records")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cpu", action="store_true", help="time with process CPU time, not the wall clock")
    args = ap.parse_args(argv)
    global _clock
    _clock = time.process_time if args.cpu else time.perf_counter
    records = []
    print(f"{'mix':<16}{'instr':>8}{'bytes':>9}{'time (us)':>12}{'M instr/s':>12}")
    mixes = [("vex", _vex_body()), ("evex", _evex_body())]
    for name, body, fresh in [(n, b, False) for n, b in mixes] + [(n + "_fresh_mem", b, True) for n, b in mixes]:
        r = measure(body, args.rounds, fresh=fresh)
        print(f"{name:<16}{r['instructions']:>8}{r['code_bytes']:>9}{r['us']:>12.0f}{r['instr_per_s'] / 1e6:>12.2f}")
        records.append({"name": name, **r})
    for name, cold in (("a64", False), ("a64_cold", True)):
        r = measure_a64(_a64_body(), args.rounds, cold=cold)
        print(f"{name:<16}{r['instructions']:>8}{r['code_bytes']:>9}{r['us']:>12.0f}{r['instr_per_s'] / 1e6:>12.2f}")
        records.append({"name": name, **r})
    r = measure_mem_build([b for _, b in mixes], args.rounds)
    print(f"{'mem_build':<16}{r['instructions']:>8}{'':>9}{r['us']:>12.0f}{r['instr_per_s'] / 1e6:>12.2f}")
    records.append({"name": "mem_build", **r})
    ret = Assembler()
    ret.ret()
    c = measure_callable(ret.bytes(), args.rounds)
    if c is None:
        print(f"{'make_callable':<16}skipped (loopstack.isa.execmem not available)")
    else:
        print(f"{'make_callable':<16}{'':>8}{'':>9}{c['us']:>12.1f}")
        records.append({"name": "make_callable", "instr_per_s": None, **c})
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
