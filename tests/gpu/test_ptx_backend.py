"""The GPU backend: DSL -> loop tree -> PTX.  Every kernel is assembled by ptxas (sm_80 and sm_90)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopstack as lt
from loopstack.backend.ptx import GpuSchedule, GpuTarget, compile_ptx
from loopstack.errors import ScheduleError, UnsupportedError
from loopstack.isa.ptx import ptxas
from loopstack.isa.ptx.mma import mma_for

from gpu_programs import conv, gemm

needs_ptxas = pytest.mark.skipif(ptxas.ptxas_path() is None, reason="ptxas is not on the PATH")
pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")

SMALL = GpuSchedule(1, 2, 2, 1, 2, 0, 2)


def _programs():
    """(name, tensor, target) for every kernel shape the backend emits."""
    rng = np.random.default_rng(0)
    out = []
    for dt in ("float16", "bfloat16", "int8"):
        for tr in (False, True):
            C, _, _ = gemm(100, 72, 40 if dt != "int8" else 72, dt, rng, b_transposed=tr)
            out.append((f"gemm-{dt}-bT{tr}", C, GpuTarget("sm_80", SMALL)))
    C, _, _ = gemm(33, 50, 37, "float16", rng, bias=True, relu=True, scale=0.5)        # narrow rows: ld/st
    out.append(("gemm-f16-odd-epilogue", C, GpuTarget("sm_80", GpuSchedule(1, 1, 1, 1, 1, 1, 1))))
    C, _, _ = gemm(64, 64, 64, "bfloat16", rng, bias=True, relu=True)
    out.append(("gemm-bf16-bias", C, GpuTarget("sm_90", GpuSchedule(2, 2, 1, 1, 4, 0, 4))))
    C, _, _ = gemm(40, 24, 52, "int8", rng, bias=False, relu=True)
    out.append(("gemm-s8-relu", C, GpuTarget("sm_80", GpuSchedule(1, 1, 2, 2, 1, 0, 3))))
    C, _, _ = gemm(4096, 4096, 4096, "float16", None)
    out.append(("gemm-4096-default", C, "sm_90"))
    for dt in ("float16", "int8"):
        Y, _, _ = conv(2, 9, 16, 24, dt, rng)
        out.append((f"conv-{dt}", Y, GpuTarget("sm_80", SMALL)))
    Y, _, _ = conv(2, 9, 32, 16, "float16", rng, stride=2)
    out.append(("conv-stride2-reorder", Y, GpuTarget("sm_90", SMALL.replace(REORDER_INNER=1, CHUNK=1))))
    for i, (c, k, h) in enumerate(((64, 128, 56), (128, 256, 28), (256, 512, 14), (512, 512, 7)), 1):
        s = lt.SymbolGenerator()
        X = lt.Tensor(np.zeros((32, h, h, c), np.float16)).to(s.b, s.h, s.w, s.c)
        Wt = lt.Tensor(np.zeros((3, 3, c, k), np.float16)).to(s.r, s.s, s.c, s.k)
        Xp = lt.nn.pad(X, (s.h, 1), (s.w, 1))
        hh, ww = Xp.symbolic_shape[1:3]
        Xw = Xp.to(s.b, s.oh, s.ow, s.r, s.s, s.c, constraints=[(hh, s.oh + s.r), (ww, s.ow + s.s)])
        Y = (Xw * Wt.to(s.r, s.s, s.c, s.k)).sum(s.r, s.s, s.c)
        out.append((f"CONV-{i}", Y, GpuTarget("sm_90", GpuSchedule(REORDER_INNER=1))))
    return out


@pytest.fixture(scope="module")
def kernels():
    return [(name, lt.compile(t, target=tgt)) for name, t, tgt in _programs()]


def test_kernels_are_inspectable_on_any_host(kernels):
    for name, k in kernels:
        assert k.ptx.startswith(".version 8.0") and f".visible .entry {k.entry}(" in k.ptx, name
        assert k.compile_ms > 0 and k.flops == k.contraction.flops > 0
        assert k.ptx.count("mma.sync.aligned") >= 1 and "cp.async" in k.ptx, name
        assert f".maxntid {k.block[0]}, 1, 1" in k.ptx          # ptxas fits the registers to the CTA
    conv1 = dict(kernels)["CONV-1"]
    assert conv1.contraction.m == 32 * 56 * 56 and conv1.contraction.k == 9 * 64
    assert conv1.contraction.conv.c == 64 and conv1.contraction.conv.stride == 1 and conv1.contraction.conv.pad == 1
    assert "// conv M=100352 N=128 K=576" in conv1.ptx
    assert conv1.flops == 2 * 32 * 56 * 56 * 128 * 64 * 9


def test_the_schedule_reads_as_a_bound_loop_nest(kernels):
    text = dict(kernels)["gemm-bf16-bias"].schedule_text()
    lines = [ln.strip() for ln in text.splitlines()]
    assert lines[2].startswith("for mb in 2 : block.y") and lines[3].startswith("for nb in 2 : block.x")
    assert lines[4].startswith("for wm in 2 : warp") and lines[5].startswith("for wn in 2 : warp")
    assert lines[6].startswith("for kt in 1 : cp.async pipeline, 4 stage(s)")
    assert "tensorize mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in text
    assert lines[-1] == "store relu(add(acc, %in2[n])) -> bfloat16"         # 64 x 64 in 32 x 32 blocks: no guards
    conv = dict(kernels)["conv-stride2-reorder"].schedule_text()
    assert "stride 2 pad 1" in conv and "channel blocks outermost" in conv and "predicated per element" in conv


@needs_ptxas
def test_every_kernel_assembles_for_sm80_and_sm90(kernels):
    by_target = {"sm_80": [], "sm_90": []}
    for _, k in kernels:
        by_target[k.target].append(k.ptx)
    ptxas.assemble(by_target["sm_80"], "sm_80")
    ptxas.assemble(by_target["sm_80"], "sm_90")
    ptxas.assemble(by_target["sm_90"], "sm_90")


@needs_ptxas
def test_the_benchmark_kernels_do_not_spill():
    """GEMM 4096^3 (f16; int8 with B [k, n], which is transposed in shared memory, and [n, k])
    and CONV-1..4 (f16; CONV-2 in int8) with the default knobs and with the model's picks: no
    register spills (ptxas -v), which would put local-memory traffic into the main loop."""
    from loopstack.tune.gpu import tune_gpu
    trees = []
    for dtype, b_transposed in (("float16", False), ("int8", False), ("int8", True)):
        C, _, _ = gemm(4096, 4096, 4096, dtype, None, b_transposed=b_transposed)
        trees.append(C.loop_tree.lower())
    trees.append(conv(32, 28, 128, 256, "int8", None)[0].loop_tree.lower())
    for c, k, h in ((64, 128, 56), (128, 256, 28), (256, 512, 14), (512, 512, 7)):
        Y, _, _ = conv(32, h, c, k, "float16", None)
        trees.append(Y.loop_tree.lower())
    ptx = [compile_ptx(t, "sm_90", s).ptx for t in trees for s in (GpuSchedule(), None, tune_gpu(t, "sm_90").best)]
    found = ptxas.resources(ptx, "sm_90")
    assert len(found) == len(ptx)
    for name, r in found.items():
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["registers"] <= 255, (name, r)


def test_without_knobs_the_model_picks_a_preset_for_the_shape():
    from loopstack.backend.ptx.model import PRESETS
    small = compile_ptx(gemm(48, 40, 64, "float16", None)[0].loop_tree.lower(), "sm_90")
    big = compile_ptx(gemm(4096, 4096, 4096, "float16", None)[0].loop_tree.lower(), "sm_90")
    assert small.schedule.replace(REORDER_INNER=0) in PRESETS and big.schedule.replace(REORDER_INNER=0) in PRESETS
    assert small.schedule.bm * small.schedule.bn < big.schedule.bm * big.schedule.bn
    assert big.schedule.WARP_ROW_TILES * big.schedule.WARP_COL_TILES == 16      # 64 x 64 warp tiles
    assert GpuTarget.of("sm_80").schedule is None and GpuTarget.of("sm_80", CHUNK=4).schedule == GpuSchedule(CHUNK=4)


@pytest.mark.parametrize("knob, value", [
    ("BLK_ROW_WARPS", 3), ("BLK_COL_WARPS", 0), ("WARP_ROW_TILES", 16), ("WARP_COL_TILES", -1),
    ("CHUNK", 3), ("REORDER_INNER", 2), ("stages", 5), ("CHUNK", 2.0), ("stages", True),
])
def test_bad_knob_values_name_the_knob(knob, value):
    with pytest.raises(ScheduleError, match=f"knob {knob}="):
        GpuSchedule(**{knob: value}).check()


def test_knob_combinations_that_cannot_compile_name_their_knobs():
    rng = np.random.default_rng(1)
    C, _, _ = gemm(64, 64, 64, "float16", rng)
    tree = C.loop_tree.lower()
    with pytest.raises(ScheduleError, match="BLK_ROW_WARPS\\*BLK_COL_WARPS"):
        compile_ptx(tree, "sm_90", GpuSchedule(BLK_ROW_WARPS=8, BLK_COL_WARPS=4))
    with pytest.raises(ScheduleError, match="WARP_ROW_TILES\\*WARP_COL_TILES"):
        compile_ptx(tree, "sm_90", GpuSchedule(WARP_ROW_TILES=8, WARP_COL_TILES=4))
    with pytest.raises(ScheduleError, match="16 warps: 512 threads get 128 registers each"):
        compile_ptx(tree, "sm_90", GpuSchedule(BLK_ROW_WARPS=4, BLK_COL_WARPS=4, WARP_ROW_TILES=4, WARP_COL_TILES=4))
    with pytest.raises(ScheduleError, match="knob stages=4"):
        compile_ptx(tree, "sm_80", GpuSchedule(2, 4, 4, 4, CHUNK=8, stages=4))
    with pytest.raises(ScheduleError, match="unknown knob 'CHUNKS'"):
        GpuTarget.of("sm_90", CHUNKS=2)
    Y, _, _ = conv(1, 8, 24, 16, "float16", rng)
    with pytest.raises(ScheduleError, match="REORDER_INNER=1 needs CHUNK\\*16 = 32 to divide the 24"):
        lt.compile(Y, target=GpuTarget.of("sm_90", REORDER_INNER=1))


def test_what_tensor_cores_cannot_run_is_unsupported():
    s = lt.SymbolGenerator()
    A = lt.Tensor(np.zeros((16, 16), np.int32)).to(s.m, s.k)
    B = lt.Tensor(np.zeros((16, 16), np.int32)).to(s.k, s.n)
    with pytest.raises(UnsupportedError, match="no mma.sync form multiplies int32"):
        lt.compile((A * B).sum(s.k), target="sm_90")
    X = lt.Tensor(np.zeros((16, 16), np.float16)).to(s.m, s.n)
    with pytest.raises(UnsupportedError, match="reduces with None"):
        lt.compile(lt.nn.relu(X + X), target="sm_90")
    with pytest.raises(UnsupportedError, match="GPU target 'sm_70'"):
        compile_ptx(lt.nn.relu(X + X).loop_tree.lower(), "sm_70")


def test_contractions_the_kernels_cannot_map_are_refused_with_the_reason():
    a, b, v = np.zeros((32, 16), np.float16), np.zeros((16, 24), np.float16), np.zeros(16, np.float16)

    def case(build):
        s = lt.SymbolGenerator()
        return build(s)

    cases = {
        "is not a matrix product": lambda s: (lt.Tensor(b).to(s.k, s.m) * lt.Tensor(b).to(s.k, s.n)).sum(s.k),
        "reduces with 'max'": lambda s: (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).max_reduce(s.k),
        "writes a 1-d output": lambda s: (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(v).to(s.k)).sum(s.k),
        # A shared by every batch puts the batch second in the DSL's output: out[m, b, n]
        r"writes out\[m, b, n\] .* the batch first": lambda s: (
            lt.Tensor(a).to(s.m, s.k) * lt.Tensor(np.zeros((2, 16, 8), np.float16)).to(s.b, s.k, s.n)).sum(s.k),
    }
    for why, build in cases.items():
        with pytest.raises(UnsupportedError, match=why):
            lt.compile(case(build), target="sm_90")
    # A times its own transpose: one array read as both operands
    k = lt.compile(case(lambda s: (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(a).to(s.n, s.k)).sum(s.k)), target="sm_90")
    assert not k.contraction.b_kmajor and k.contraction.n == 32


def test_an_int8_b_stored_k_major_is_transposed_in_shared_memory_not_gathered():
    """ldmatrix cannot transpose bytes: each k-step's B tile is turned into [n][k] rows with
    4-byte words and prmt, then read by ldmatrix like a B stored [n, k]."""
    C, _, _ = gemm(4096, 4096, 4096, "int8", None)
    kern = lt.compile(C, target="sm_90")
    loop = kern.ptx[kern.ptx.index("$L_k"):]
    loop = loop[:loop.index("bra.uni $L_k")]
    assert "ld.shared.u8" not in loop and loop.count("prmt.b32") == 8 * loop.count("st.shared.b32") // 4
    s = kern.schedule                                   # ldmatrix of A and of B, as for a B stored [n, k]
    assert loop.count("ldmatrix") == s.CHUNK * (s.WARP_ROW_TILES + s.WARP_COL_TILES)
    assert kern.shared_bytes == s.shared_bytes(mma_for("int8"), True) > s.stages * sum(s.stage_bytes(mma_for("int8")))


@settings(max_examples=300)
@given(d=st.integers(1, 2**31 - 1), bound=st.integers(0, 2**31 - 1), picks=st.lists(st.integers(0, 2**31 - 1), max_size=20))
def test_a_magic_reciprocal_divides_exactly_up_to_its_bound(d, bound, picks):
    """x // d == (x * m) >> (32 + s) for every x the kernel can hold (0..bound), at the edges
    (multiples of d and their neighbours, the bound) and anywhere. Only a power of two has no
    32-bit m (s = floor(log2 d) works for any other d below 2**31); it is divided by a shift."""
    from loopstack.backend.ptx.emit import magic_divisor
    magic = magic_divisor(d, bound)
    if magic is None:
        assert d & (d - 1) == 0
        return
    m, s = magic
    assert 0 < m < 2**32
    q = bound // d
    xs = {0, bound, max(0, bound - 1), q * d, max(0, q * d - 1), *(p % (bound + 1) for p in picks)}
    for x in xs:
        assert (x * m) >> (32 + s) == x // d, (x, d, bound, m, s)
