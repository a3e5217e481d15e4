"""Shared-memory bank conflicts counted by the interpreter (isa/ptx/sim/banks.py): the rule on
access patterns whose answer is known, then the backend's kernels: ldmatrix reads of the padded
tiles are conflict-free for every operand type and layout."""
import importlib.util

import numpy as np
import pytest

import loopstack as lt
from loopstack.backend.ptx import GpuSchedule, GpuTarget
from loopstack.isa.ptx import ptxas
from loopstack.isa.ptx.builder import Addr, KernelBuilder, Vec

from gpu_programs import gemm

pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
if importlib.util.find_spec("loopstack.isa.ptx.sim") is None:
    pytest.skip("the SIMT reference interpreter is not in this build", allow_module_level=True)

from loopstack.isa.ptx.sim import bank_report, launch  # noqa: E402
from loopstack.isa.ptx.sim.banks import by_opcode  # noqa: E402


def pattern_kernel(access: str, stride: int) -> str:
    """Thread t accesses shared memory at byte t * stride: `access` is "st.b32", "ld.v4" or
    "ldmatrix" (lanes 8j..8j+7 give the rows of matrix j)."""
    k = KernelBuilder("pattern", "sm_80")
    k.extern_shared("smem", 128)
    base = k.reg("u32")
    k.ins("mov.u32", base, "smem")
    tid = k.special("%tid.x")
    addr = k.reg("u32")
    k.ins("mad.lo.u32", addr, tid, stride, base)
    if access == "st.b32":
        k.ins("st.shared.b32", Addr(addr), tid)
    elif access == "ld.v4":
        k.ins("ld.shared.v4.b32", Vec(tuple(k.regs("b32", 4))), Addr(addr))
    else:
        k.ldmatrix(k.regs("b32", 4), Addr(addr))
    k.ins("ret")
    return k.text()


def profile_of(access, stride, threads=32):
    ptx = pattern_kernel(access, stride)
    prof = {}
    launch(ptx, "pattern", block=(threads,), dynamic_shared_bytes=threads * max(stride, 16) + 16, bank_profile=prof)
    (stats,) = prof.values()
    return ptx, stats


@pytest.mark.parametrize("access, stride, threads, phases, wavefronts, ideal", [
    ("st.b32", 4, 32, 1, 1, 1),          # 32 consecutive words: every bank once
    ("st.b32", 0, 32, 1, 1, 1),          # one word for all: a broadcast
    ("st.b32", 128, 32, 1, 32, 1),       # a column of words 128 bytes apart: all in bank 0
    ("st.b32", 8, 32, 1, 2, 1),          # every other word: the even banks only, two words each
    ("st.b32", 4, 64, 2, 2, 2),          # two warps: a phase each
    ("ld.v4", 16, 32, 4, 4, 4),          # 16 bytes a lane: quarter-warp phases, each 32 words
    ("ld.v4", 32, 32, 4, 8, 4),          # 32-byte steps: each quarter's 8 rows meet in 16 banks
    ("ldmatrix", 16, 32, 4, 4, 4),       # four 8x8 matrices of packed rows: conflict-free
    ("ldmatrix", 80, 32, 4, 4, 4),       # rows 64 + 16 bytes apart (the kernels' padding): too
    ("ldmatrix", 64, 32, 4, 16, 4),      # rows 64 bytes apart: 4 rows in each of 2 groups of 4 banks
    ("ldmatrix", 128, 32, 4, 32, 4),     # rows 128 bytes apart: all 8 rows in the same 4 banks
])
def test_the_bank_rule_on_known_patterns(access, stride, threads, phases, wavefronts, ideal):
    ptx, s = profile_of(access, stride, threads)
    assert (s.phases, s.wavefronts, s.ideal) == (phases, wavefronts, ideal)
    assert s.ratio == wavefronts / ideal
    if ptxas.ptxas_path():
        ptxas.assemble(ptx, "sm_80")


def test_a_report_lists_each_shared_instruction_in_program_order():
    C, arrays, _ = gemm(32, 32, 64, "int8", np.random.default_rng(1))       # B [k, n]: transposed in shared
    kern = lt.compile(C, target=GpuTarget("sm_90", GpuSchedule(1, 1, 2, 2, 1, 0, 2)))
    prof = {}
    kern.simulate(*arrays, np.zeros((32, 32), np.int32), bank_profile=prof)
    rows = bank_report(prof).splitlines()[1:]
    lines = [int(r.split()[0]) for r in rows]
    assert lines == sorted(lines) and len(rows) == len(prof)
    ops = [r.split()[4] for r in rows]
    assert ops[0].startswith("cp.async") and {"ld.shared.b32", "st.shared.b32"} <= set(ops)
    assert ops[-1].startswith("ldmatrix")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8", "uint8"])
@pytest.mark.parametrize("b_transposed", [False, True])
def test_the_kernels_fragment_reads_are_conflict_free(dtype, b_transposed):
    """ldmatrix over the tiles padded by SMEM_PAD: one wavefront per matrix, whatever the operand
    type, B's layout (and the shared-memory transpose of an 8- or 32-bit k-major B) or the knobs."""
    rng = np.random.default_rng(0)
    for sched in (GpuSchedule(2, 2, 2, 2, 2, 0, 2), GpuSchedule(1, 2, 1, 4, 1, 0, 3), GpuSchedule(2, 1, 4, 1, 4, 0, 1)):
        C, arrays, _ = gemm(96, 80, 160, dtype, rng, b_transposed=b_transposed)
        kern = lt.compile(C, target=GpuTarget("sm_90", sched, allow_tf32=True))
        prof = {}
        kern.simulate(*arrays, np.zeros((96, 80), lt.dtypes.dtype(kern.tree.outputs[0].dtype).np), bank_profile=prof)
        ops = by_opcode(prof)
        reads = [s for op, s in ops.items() if op.startswith("ldmatrix")]
        assert reads and all(s.ratio == 1.0 for s in reads), bank_report(prof)
        # the cp.async copies land in the same padded rows, each quarter-warp in rows that share no
        # bank (emit._chunk_place); a k-major 8-bit B 16 columns wide has one chunk a row, and
        # 8 rows of it meet in 4 bank groups
        one_chunk_rows = dtype in ("int8", "uint8") and not b_transposed and sched.bn == 16
        copies = [st.ratio for st in prof.values() if st.opcode.startswith("cp.async")]
        assert all(r == 1.0 for r in copies) or one_chunk_rows and all(r <= 2.0 for r in copies), bank_report(prof)


@pytest.mark.parametrize("dtype, sched", [
    ("int8", GpuSchedule(2, 4, 4, 4, 2, 0, 3)),       # bytes: 64 deep, 128 wide
    ("int8", GpuSchedule(1, 2, 2, 2, 4, 0, 2)),       # 128 deep, 64 wide
    ("float32", GpuSchedule(2, 4, 4, 4, 2, 0, 3)),    # tf32: whatever the tile
    ("float32", GpuSchedule(1, 1, 1, 1, 1, 0, 1)),
])
def test_a_k_major_b_is_transposed_without_bank_conflicts(dtype, sched):
    """The transpose of an 8- or 32-bit B [k, n] in shared memory (emit._transpose_block): each
    warp's reads and writes meet every bank once."""
    from loopstack.isa.ptx.mma import mma_for
    m, n, k = sched.bm, sched.bn, 2 * sched.bk(mma_for(dtype))
    C, arrays, ref = gemm(m, n, k, dtype, np.random.default_rng(2))
    kern = lt.compile(C, target=GpuTarget("sm_90", sched, allow_tf32=True))
    got = np.zeros((m, n), lt.dtypes.dtype(kern.tree.outputs[0].dtype).np)
    prof = {}
    kern.simulate(*arrays, got, bank_profile=prof)
    ops = by_opcode(prof)
    moves = [s for op, s in ops.items() if op.startswith(("ld.shared", "st.shared"))]
    assert len(moves) == 2 and all(s.ratio == 1.0 for s in moves), bank_report(prof)
    want = ref()
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=0.1 * np.sqrt(k) if dtype != "int8" else 0)


def test_the_bank_benchmark_profiles_a_cut_down_kernel():
    """bench/ptx_banks.py on one small workload of each kind: numbers beside a name, at the ideal."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    import ptx_banks
    from loopstack.backend.ptx.match import match
    from loopstack.backend.ptx.model import default_schedule
    for name, tree, kind, dtype in (("gemm", ptx_banks.gemm_tree(1024, 1024, 1024, "int8", True), "gemm", "int8"),
                                    ("conv", ptx_banks.conv_tree(64, 64, 8, "float16", 2), "conv", "float16")):
        row = ptx_banks.profile(name, kind, dtype, tree, default_schedule(match(tree), "sm_90"))
        assert row["name"] == name and all(isinstance(v, float) for k, v in row.items() if k not in ("name", "knobs"))
        assert row["x_ideal"] == 1.0 and row["ldmatrix_share"] > 0.3
