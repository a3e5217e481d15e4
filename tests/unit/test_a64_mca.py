"""The llvm-mca driver: parsing its summary, and the FMA bound of a loop body."""
from __future__ import annotations

import shutil

import pytest

from loopstack.errors import UnsupportedError
from loopstack.isa.aarch64 import mca
from loopstack.isa.aarch64.assembler import Assembler
from loopstack.isa.aarch64.operands import Mem, V, X

pytestmark = pytest.mark.skipif(shutil.which("llvm-mca") is None, reason="llvm-mca is not on the PATH")


def _block_8x12(extra_loads: int = 0) -> str:
    """An ideal 8x12 fp32 register block: 2 loads of A, 3 of B, 24 fmla by element."""
    asm = Assembler()
    asm.ldr(V(24).q, Mem.post(X(0), 16))
    asm.ldr(V(25).q, Mem.post(X(0), 16))
    for j in range(3 + extra_loads):
        asm.ldr(V(26 + j % 3).q, Mem.post(X(1), 16))
    for i in range(8):
        for j in range(3):
            asm.fmla(V(3 * i + j).s4, V(26 + j).s4, V(24 + i // 4).s[i % 4])
    return mca.body_text(asm.bytes())


def test_ideal_block_runs_at_the_fma_bound():
    text = _block_8x12()
    assert len(text.splitlines()) == 29
    # platform.md: 8.0 cycles/iteration on apple-m1, 24 on cortex-a57 (one 128-bit FMLA a cycle)
    for mcpu, cycles in (("apple-m1", 8.0), ("cortex-a57", 24.0)):
        p = mca.analyse(text, mcpu)
        assert p.instructions == 29 and p.block_rthroughput == cycles
        assert p.cycles_per_iteration == pytest.approx(cycles, rel=0.02)
        assert mca.fma_bound(text, mcpu) == pytest.approx(cycles, rel=0.02)


def test_a_load_bound_body_is_slower_than_its_fma_bound():
    # 24 extra loads per iteration: more than the load ports retire in 8 cycles on apple-m1
    text = _block_8x12(extra_loads=24)
    cycles, bound = mca.predict(text, "apple-m1"), mca.fma_bound(text, "apple-m1")
    assert cycles > 1.2 * bound


def test_fma_lines_keep_only_fma_class_instructions():
    text = "ldr q0, [x0]\nfmla v0.4s, v1.4s, v2.s[1]\nsdot v3.4s, v4.16b, v5.4b[0]\nsubs x1, x1, #1"
    assert mca.fma_lines(text).splitlines() == ["fmla v0.4s, v1.4s, v2.s[1]", "sdot v3.4s, v4.16b, v5.4b[0]"]
    with pytest.raises(UnsupportedError, match="no fmla"):
        mca.fma_bound("ldr q0, [x0]", "apple-m1")


def test_errors_are_clear():
    with pytest.raises(UnsupportedError, match="no instructions"):
        mca.predict("// nothing", "apple-m1")
    with pytest.raises(UnsupportedError, match="llvm-mca -mcpu=apple-m1 failed"):
        mca.predict("frobnicate x0", "apple-m1")
    with pytest.raises(UnsupportedError, match="decoded 0 of 4 bytes"):
        mca.body_text(b"\xff\xff\xff\xff")
