"""Each mma.sync row, three ways: its loopstack description run by the loop-tree interpreter,
and one mma.sync instruction whose fragments are gathered and scattered by the row's layouts,
run by the SIMT interpreter (which implements the PTX ISA's layouts on its own) and assembled
by ptxas."""
import importlib.util

import numpy as np
import pytest

from loopstack.backend import compile as compile_tree
from loopstack.isa.ptx import ptxas
from loopstack.isa.ptx.builder import Addr, KernelBuilder
from loopstack.isa.ptx.mma import MMA_SHAPES

pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")


def one_mma_kernel(row, target="sm_80") -> str:
    """Lane l loads element i of each fragment from table[l, i] (a flat index into the
    operand), runs the row's mma.sync, and stores D the same way."""
    k = KernelBuilder("one_mma", target)
    names = ["A", "B", "C", "D", "ta", "tb", "tc"]
    for n in names:
        k.param("u64", n)
    p = {}
    for n in names:
        raw = k.ld_param("u64", n)
        p[n] = k.reg("u64")
        k.ins("cvta.to.global.u64", p[n], raw)
    lane = k.special("%laneid")
    es = row.ab_bytes

    def table_entry(table, count, i):
        at = k.reg("u64")
        k.ins("mad.wide.u32", at, lane, 4 * count, p[table])
        idx = k.reg("u32")
        k.ins("ld.global.u32", idx, Addr(at, 4 * i))
        return idx

    def fragment(op, table):
        count = row.elements(op)
        regs = []
        for r in range(count // row.per_reg):
            word = k.reg("b32")
            k.ins("mov.b32", word, 0)
            for j in range(row.per_reg):
                idx = table_entry(table, count, r * row.per_reg + j)
                at = k.reg("u64")
                k.ins("mad.wide.u32", at, idx, es, p[op.upper()])
                v = k.reg("u32")
                k.ins(f"ld.global.{ {1: 'u8', 2: 'u16', 4: 'u32'}[es]}", v, Addr(at))
                k.ins("shl.b32", v, v, 8 * es * j)
                k.ins("or.b32", word, word, v)
            regs.append(word)
        return regs

    a, b = fragment("a", "ta"), fragment("b", "tb")
    acc = k.regs(row.acc, 4)
    for i, r in enumerate(acc):
        at = k.reg("u64")
        k.ins("mad.wide.u32", at, table_entry("tc", 4, i), 4, p["C"])
        k.ins(f"ld.global.{row.acc}", r, Addr(at))
    k.mma(row, acc, a, b, acc)
    for i, r in enumerate(acc):
        off = k.reg("u64")
        k.ins("mad.wide.u32", off, table_entry("tc", 4, i), 4, p["D"])
        k.ins(f"st.global.{row.acc}", Addr(off), r)
    k.ins("ret")
    return k.text()


def tables(row):
    out = []
    for op, cols in (("a", row.k), ("b", row.n), ("c", row.n)):
        lay = row.layout(op)
        out.append(np.array([[lay(lane, i)[0] * cols + lay(lane, i)[1] for i in range(row.elements(op))]
                             for lane in range(32)], np.uint32))
    return out


def _operands(row, rng):
    kern = compile_tree(row.description(), target="interp")
    a, b, c, d = kern.random_arguments(int(rng.integers(1 << 30)))
    if row.ab_bytes == 1:       # every byte value, so that reading u8 as s8 (or back) shows
        a, b = (rng.integers(0, 256, x.shape).astype(np.uint8).view(x.dtype) for x in (a, b))
    return kern, a, b, c, d


@pytest.mark.skipif(ptxas.ptxas_path() is None, reason="ptxas is not on the PATH")
def test_the_single_mma_kernels_assemble():
    ptxas.assemble([one_mma_kernel(row) for row in MMA_SHAPES], "sm_80")


@pytest.mark.skipif(importlib.util.find_spec("loopstack.isa.ptx.sim") is None,
                    reason="the SIMT reference interpreter is not in this build")
@pytest.mark.parametrize("row", MMA_SHAPES, ids=[f"{r.shape}.{r.label}" for r in MMA_SHAPES])
@pytest.mark.parametrize("seed", [0, 1])
def test_layouts_and_description_agree_with_the_instruction(row, seed):
    from loopstack.isa.ptx.sim import launch
    rng = np.random.default_rng(seed)
    kern, a, b, c, want = _operands(row, rng)
    kern(a, b, c, want)                                     # the description, in the loop-tree interpreter
    got = np.zeros_like(want)
    bits = [x.view(np.uint16) if x.dtype.name == "bfloat16" else x for x in (a, b)]
    launch(one_mma_kernel(row), "one_mma", grid=(1, 1, 1), block=(32, 1, 1),
           args=[*bits, c, got, *tables(row)])
    if row.acc == "s32":
        np.testing.assert_array_equal(got, want)
    else:                                                   # the tensor cores add in their own order
        bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(c)
        # tf32 reads 10 of float32's 23 mantissa bits (these operands are not rounded to tf32 first)
        rel = 1e-5 if row.exact else 2.0 ** -9
        assert np.all(np.abs(got.astype(np.float64) - want) <= rel * bound + 1e-6)
        if not row.exact:                                   # and it does read fewer bits
            assert np.abs(got.astype(np.float64) - want).max() > 1e-5 * bound.max()
