"""Each x86 tensorized-instruction description, held against the real instruction on this CPU.

For every x86 entry of the registry, a tiny JIT'd function loads an accumulator and two byte
vectors (tiles, for AMX: 16 rows of 64 bytes each), runs the entry's implementation
(backend/x86/dot.py; the tile product itself for AMX) and stores the accumulator; the
reference interpreter runs the entry's *description* on the same inputs. They must agree
exactly — on random bytes and on the extremes (all 255 x all -128, the case where a saturating
`vpmaddubsw` would be wrong). Entries whose CPU features this machine lacks skip, saying which.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from loopstack.backend import compile
from loopstack.backend.tensorize import REGISTRY
from loopstack.backend.x86.dot import emit_dot
from loopstack.isa import cpu
from loopstack.isa.execmem import ExecutableCode, array_pointer
from loopstack.isa.x86.assembler import Assembler
from loopstack.backend.x86.amx import tile_begin, tile_end
from loopstack.isa.x86.operands import TMM, Mem, XMM, YMM, ZMM, rax, rdi, rdx, rsi

X86 = [t for t in REGISTRY if t.isa == "x86_64"]
REGS = {128: XMM, 256: YMM, 512: ZMM}


def _jit_tile(instr):
    """void f(int32 *acc, int8 *a, int8 *b): acc += instr(a, b) on 16 x 64-byte tiles."""
    asm = Assembler()
    tile_begin(asm)
    asm.emit("mov", rax, 64)                         # every row stride: 64 bytes
    acc, a, b = TMM[0], TMM[4], TMM[6]
    for t, ptr in ((acc, rdi), (a, rsi), (b, rdx)):
        asm.emit("tileloadd", t, Mem(ptr, rax, 1))
    asm.emit(instr.mnemonic, acc, a, b)
    asm.emit("tilestored", Mem(rdi, rax, 1), acc)
    tile_end(asm)
    asm.emit("ret")
    return ExecutableCode(asm.bytes(), "void(*)(char *, char *, char *)")


def _jit(instr):
    """void f(int32 *acc, int8 *a, int8 *b): acc += instr(a, b)."""
    if instr.tile:
        return _jit_tile(instr)
    regs = REGS[instr.vector_bits]
    load = "vmovdqu32" if instr.vector_bits == 512 else "vmovdqu"
    asm = Assembler()
    acc, a, b = regs[0], regs[1], regs[2]
    asm.emit(load, acc, Mem(rdi))
    for reg, ptr, name in ((a, rsi, "a"), (b, rdx, "b")):
        if instr.broadcast == name:
            asm.emit("vpbroadcastd", reg, Mem(ptr, bits=32))
        else:
            asm.emit(load, reg, Mem(ptr))
    mask = None
    if instr.mnemonic == "vpmaddwd" and instr.dtypes()[0] == "uint8":
        mask = regs[7]
        asm.emit(load, mask, asm.const(np.full(instr.vector_bits // 16, 0x00FF, np.uint16)))
    emit_dot(asm, instr, acc, a, b, [regs[3 + i] for i in range(instr.scratch)], mask)
    asm.emit(load, Mem(rdi), acc)
    asm.emit("vzeroupper")
    asm.emit("ret")
    return ExecutableCode(asm.bytes(), "void(*)(char *, char *, char *)")


def _features(instr):
    return {f.lower() for f in instr.features}


def _skip_unless_runs(instr):
    missing = _features(instr) - cpu.cpu_features()
    if missing:
        pytest.skip(f"{instr.name}: this CPU lacks {', '.join(sorted(missing))}")
    if instr.tile and not cpu.amx_permission()[0]:
        pytest.skip(f"{instr.name}: {cpu.amx_permission()[1]}")


def _operands(instr, rng, fill=None):
    a_dt, b_dt, _ = instr.dtypes()
    shapes = {b.name: b.shape for b in instr.desc.buffers}
    def draw(name, dt):
        if fill is not None:
            return np.full(shapes[name], fill[name], dt)
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max + 1, shapes[name]).astype(dt)
    acc = rng.integers(-2**20, 2**20, shapes["acc"]).astype(np.int32)
    return draw("a", a_dt), draw("b", b_dt), acc


def _check(instr, a, b, acc):
    want = acc.copy()
    compile(instr.desc, target="interp")(a, b, want)
    got = acc.copy()
    lanes = instr.lanes
    # the instruction reads whole registers: a broadcast operand is its 4 bytes, repeated by the load
    fn = _jit(instr)
    fn(array_pointer(got, writable=True), array_pointer(np.ascontiguousarray(a), writable=False),
       array_pointer(np.ascontiguousarray(b), writable=False))
    assert got.size == lanes
    np.testing.assert_array_equal(got, want, err_msg=instr.name)


@pytest.mark.parametrize("instr", X86, ids=lambda t: t.name)
def test_description_matches_the_instruction_on_extremes(instr):
    _skip_unless_runs(instr)
    a_dt, b_dt, _ = instr.dtypes()
    rng = np.random.default_rng(0)
    for fa in (np.iinfo(a_dt).max, np.iinfo(a_dt).min):
        for fb in (np.iinfo(b_dt).min, np.iinfo(b_dt).max):
            a, b, acc = _operands(instr, rng, {"a": fa, "b": fb})
            _check(instr, a, b, acc)


@pytest.mark.parametrize("instr", X86, ids=lambda t: t.name)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_description_matches_the_instruction_on_random_bytes(instr, seed):
    _skip_unless_runs(instr)
    _check(instr, *_operands(instr, np.random.default_rng(seed)))


def test_all_255_times_all_minus_128_does_not_saturate_on_the_avx2_path():
    instr = next(t for t in X86 if t.name == "avx2.dot.u8s8")
    _skip_unless_runs(instr)
    a = np.full((8, 4), 255, np.uint8)
    b = np.full((8, 4), -128, np.int8)
    acc = np.zeros(8, np.int32)
    fn = _jit(instr)
    fn(array_pointer(acc, writable=True), array_pointer(a, writable=False), array_pointer(b, writable=False))
    assert (acc == 4 * 255 * -128).all()
