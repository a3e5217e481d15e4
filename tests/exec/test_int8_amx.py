"""int8 matmuls and convolutions on AMX tiles (registry entries amx.tdp*, backend/x86/amx.py), natively.

Random shapes — tails that are no multiple of 16 rows or columns, nor of 64 bytes of reduction
— each signedness pair on its own tile instruction, with a bias, relu and requantized outputs:
bit-exact against numpy's int32 arithmetic, onnxruntime's MatMulInteger and the reference
interpreter. The tile rewriter's own form (the instruction's loops innermost) is held against
the interpreter on any CPU; everything compiled needs a CPU with AMX and Linux's permission
for the tile state, and skips saying which is missing.
"""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from loopstack.backend import compile
from loopstack.backend.interp import InterpKernel
from loopstack.backend.tensorize import instruction
from loopstack.backend.tensorize.tiles import tensorize_tiles
from loopstack.errors import UnsupportedError
from loopstack.isa import cpu
from int8_programs import int8_matmul, int8_matmul_case, ints
from loopstack.looptree.builders import conv2d_tree
from loopstack.looptree.ir import Buffer, Load, LoopTree, Requant, replace
from loopstack.looptree.builders import access

PAIRS = {("uint8", "int8"): "amx.tdpbusd", ("int8", "int8"): "amx.tdpbssd",
         ("int8", "uint8"): "amx.tdpbsud", ("uint8", "uint8"): "amx.tdpbuud"}
shapes = dict(M=st.integers(1, 70), N=st.integers(1, 70), K=st.integers(1, 200))


def needs_amx():
    granted, why = cpu.amx_permission()
    if not cpu.cpu_features() >= {"avx512f", "avx512bw", "avx512vl", "avx512dq"}:
        pytest.skip("AMX kernels compile for the avx512 target; this CPU has no AVX-512")
    if not granted:
        pytest.skip(why)


@settings(max_examples=25, deadline=None)
@given(**shapes, pair=st.sampled_from(sorted(PAIRS)), bias=st.booleans(), relu=st.booleans(),
       seed=st.integers(0, 2**31))
def test_the_tile_form_computes_the_matmul(M, N, K, pair, bias, relu, seed):
    """The rewriter's output with the instruction's loops innermost, in the interpreter: exact,
    and matched by the inspector (tensorize_tiles checks it)."""
    tree, arrays, want = int8_matmul_case(np.random.default_rng(seed), M, N, K, pair, bias, relu)
    rw = tensorize_tiles(tree, instruction(PAIRS[pair]))
    assert rw.match and rw.match.instr.name == PAIRS[pair]
    got = np.zeros((M, N), np.int32)
    InterpKernel(rw.matched)(*arrays, got)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=30, deadline=None)
@given(**shapes, pair=st.sampled_from(sorted(PAIRS)), bias=st.booleans(), relu=st.booleans(),
       seed=st.integers(0, 2**31))
def test_int8_matmuls_on_tiles_are_exact(M, N, K, pair, bias, relu, seed):
    needs_amx()
    tree, arrays, want = int8_matmul_case(np.random.default_rng(seed), M, N, K, pair, bias, relu)
    kernel = compile(tree, target="avx512")
    assert kernel.tensorized == PAIRS[pair]
    got = np.zeros((M, N), np.int32)
    kernel(*arrays, got)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=15, deadline=None)
@given(**shapes, pair=st.sampled_from([("uint8", "int8"), ("int8", "int8")]),
       out_dt=st.sampled_from(["int8", "uint8"]), per_channel=st.booleans(), seed=st.integers(0, 2**31))
def test_requantized_matmuls_on_tiles_match_the_interpreter(M, N, K, pair, out_dt, per_channel, seed):
    needs_amx()
    rng = np.random.default_rng(seed)
    scale = rng.uniform(1e-4, 2e-2, N).astype(np.float32) if per_channel else np.float32(rng.uniform(1e-4, 2e-2))
    zp = int(ints(rng, out_dt, ()))
    tree = int8_matmul(M, N, K, *pair, bias=True, requant=(scale, zp, out_dt))
    arrays = [ints(rng, pair[0], (M, K)), ints(rng, pair[1], (K, N)),
              rng.integers(-5000, 5000, N).astype(np.int32)] + ([scale] if per_channel else [])
    want = np.zeros((M, N), out_dt)
    compile(tree, target="interp")(*arrays, want)
    kernel = compile(tree, target="avx512")
    assert kernel.tensorized == PAIRS[pair]
    got = np.zeros((M, N), out_dt)
    kernel(*arrays, got)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=6, deadline=None)
@given(**shapes, seed=st.integers(0, 2**31))
def test_tiles_agree_with_onnxruntime_matmulinteger(M, N, K, seed):
    needs_amx()
    pytest.importorskip("onnxruntime", reason="onnxruntime's MatMulInteger is the peer")
    from loopstack.commands.bench_int8 import ort_matmul_integer

    tree, (A, B), _ = int8_matmul_case(np.random.default_rng(seed), M, N, K, ("uint8", "int8"))
    got = np.zeros((M, N), np.int32)
    compile(tree, target="avx512")(A, B, got)
    np.testing.assert_array_equal(got, ort_matmul_integer(A, B)())


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_the_extremes_on_tiles(pair):
    """Every product at its extreme (255 x -128, -128 x -128, ...) over a long reduction: the
    int32 sums are exact (4100 x 255 x 255 < 2^31), the padding of 4100 to 4160 bytes adds zeros."""
    needs_amx()
    M, N, K = 33, 17, 4100
    for a_val in (np.iinfo(pair[0]).min, np.iinfo(pair[0]).max):
        for b_val in (np.iinfo(pair[1]).min, np.iinfo(pair[1]).max):
            A, B = np.full((M, K), a_val, pair[0]), np.full((K, N), b_val, pair[1])
            got = np.zeros((M, N), np.int32)
            kernel = compile(int8_matmul(M, N, K, *pair), target="avx512")
            kernel(A, B, got)
            assert kernel.tensorized == PAIRS[pair]
            assert (got == K * int(a_val) * int(b_val)).all(), (pair, a_val, b_val)


def test_a_refused_tile_state_falls_back_to_vector_dots(monkeypatch, caplog):
    """Without Linux's grant a tile instruction would fault: the compile uses vpdpbusd and logs why."""
    if not {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"} <= cpu.cpu_features():
        pytest.skip("needs AVX-512 with VNNI, the fallback")
    # a CPU with the tile unit whose OS refuses the tile state (on one without AMX, as a Zen 4,
    # the unit is added to the features the compile sees, so the refusal is what it acts on)
    features = cpu.cpu_features() | {"amx_tile", "amx_int8"}
    monkeypatch.setattr(cpu, "cpu_features", lambda: features)
    monkeypatch.setattr(cpu, "amx_permission", lambda: (False, "arch_prctl refused (test)"))
    tree, arrays, want = int8_matmul_case(np.random.default_rng(1), 32, 32, 64, ("uint8", "int8"))
    with caplog.at_level("INFO", logger="loopstack"):
        kernel = compile(tree, target="avx512")
    assert kernel.tensorized.startswith("vpdpbusd")
    assert "tdpbusd" not in kernel.asm() and "ldtilecfg" not in kernel.asm()
    assert "arch_prctl refused (test)" in caplog.text
    got = np.zeros((32, 32), np.int32)
    kernel(*arrays, got)
    np.testing.assert_array_equal(got, want)


def test_tile_code_configures_and_releases_the_tiles():
    """The function loads its tile configuration first and releases the tiles before it returns;
    blocks of 2 x 2 accumulator tiles, their A and B operand tiles loaded once a step."""
    needs_amx()
    tree, _, _ = int8_matmul_case(np.random.default_rng(0), 64, 64, 256, ("uint8", "int8"))
    text = compile(tree, target="avx512").asm()
    seg = text.split("; segment")[-1]
    assert seg.index("ldtilecfg") < seg.index("tdpbusd") < seg.index("tilerelease") < seg.index("ret")
    blocks = seg.count("tdpbusd") // 4           # the tile-column loop may be unrolled
    assert blocks and seg.count("tdpbusd") == seg.count("tilezero") == seg.count("tilestored") == 4 * blocks
    assert "tileloadd tmm4, [" in seg and "tileloaddt1 tmm6, [" in seg


def qconv(N, C, H, W, K, R, S, padding, dilation, layout, pair, stride=1, requant=None):
    """A quantized convolution: 8-bit X and weights, int32 output; with `requant=(zero point,
    out dtype)` an int32 bias and a float32 scale per output channel, requantized."""
    t = conv2d_tree(N, C, H, W, K, R, S, stride=stride, padding=padding, dilation=dilation, layout=layout)
    out_dt = "int32" if requant is None else requant[1]
    bufs = [replace(b, dtype={"X": pair[0], "Wt": pair[1], "Y": out_dt}[b.name]) for b in t.buffers]
    if requant is None:
        return LoopTree(tuple(bufs), t.dims, t.body)
    bufs = bufs[:-1] + [Buffer("bias", "int32", (K,), "input"), Buffer("scale", "float32", (K,), "input"), bufs[-1]]
    (_, stmt), = t.computes()
    new = replace(stmt, init=Load(access("bias", "k")), requant=Requant(Load(access("scale", "k")), requant[0]))
    def swap(node):
        return new if node is stmt else replace(node, body=tuple(swap(n) for n in node.body))
    return LoopTree(tuple(bufs), t.dims, tuple(swap(n) for n in t.body))


@settings(max_examples=25, deadline=None)
@given(N=st.integers(1, 2), C=st.integers(1, 80), H=st.integers(1, 9), W=st.integers(1, 9), K=st.integers(1, 40),
       R=st.integers(1, 3), S=st.integers(1, 3), padding=st.integers(0, 2), dilation=st.integers(1, 2),
       pair=st.sampled_from(sorted(PAIRS)), requant=st.sampled_from([None, (3, "uint8"), (-5, "int8")]),
       seed=st.integers(0, 2**31))
def test_nhwc_convolutions_on_tiles_match_the_interpreter(N, C, H, W, K, R, S, padding, dilation, pair, requant, seed):
    """Unit-stride NHWC convolutions (padding, dilation, any channel counts) as implicit GEMMs
    on the zero-bordered input grid: exact, requantized or not, against the interpreter."""
    assume(H + 2 * padding - dilation * (R - 1) >= 1 and W + 2 * padding - dilation * (S - 1) >= 1)
    tree = qconv(N, C, H, W, K, R, S, padding, dilation, "NHWC", pair, requant=requant)
    rng = np.random.default_rng(seed)
    arrays = [ints(rng, pair[0], tree.buffer("X").shape), ints(rng, pair[1], tree.buffer("Wt").shape)]
    if requant is not None:
        arrays += [rng.integers(-3000, 3000, K).astype(np.int32), rng.uniform(1e-4, 1e-2, K).astype(np.float32)]
    want = np.zeros(tree.buffer("Y").shape, tree.buffer("Y").dtype)
    compile(tree, target="interp")(*arrays, want)
    rw = tensorize_tiles(tree, instruction(PAIRS[pair]))           # the tile form, in the interpreter
    got = np.zeros_like(want)
    InterpKernel(rw.matched)(*arrays, got)
    np.testing.assert_array_equal(got, want)
    if cpu.amx_permission()[0] and "avx512f" in cpu.cpu_features():
        kernel = compile(tree, target="avx512")
        assert kernel.tensorized == PAIRS[pair]
        got = np.zeros_like(want)
        kernel(*arrays, got)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout, stride", [("NCHW", 1), ("NHWC", 2)])
def test_other_convolutions_stay_on_vector_dots(layout, stride):
    """Channels not innermost (NCHW), or a strided window: no tile form (a reason), and the
    compile's vector dot products, exact."""
    tree = qconv(1, 8, 6, 6, 16, 3, 3, 1, 1, layout, ("uint8", "int8"), stride=stride)
    with pytest.raises(UnsupportedError, match="tile convolution"):
        tensorize_tiles(tree, instruction("amx.tdpbusd"))
    needs_amx()
    rng = np.random.default_rng(0)
    X, Wt = ints(rng, "uint8", tree.buffer("X").shape), ints(rng, "int8", tree.buffer("Wt").shape)
    want = np.zeros(tree.buffer("Y").shape, np.int32)
    compile(tree, target="interp")(X, Wt, want)
    kernel = compile(tree, target="avx512")
    got = np.zeros_like(want)
    kernel(X, Wt, got)
    assert not kernel.tensorized.startswith("amx")
    np.testing.assert_array_equal(got, want)


def test_what_is_no_matrix_multiply_is_refused_with_a_reason():
    tree = int8_matmul(16, 16, 64, "int8", "int8")
    with pytest.raises(UnsupportedError, match="multiplies uint8 x int8"):
        tensorize_tiles(tree, instruction("amx.tdpbusd"))


def test_the_tile_probe_runs():
    needs_amx()
    from loopstack.commands.bench_int8 import int8_peak

    assert int8_peak(instruction("amx.tdpbusd")) > 0


def test_amx_permission_agrees_with_the_cpu_features():
    granted, why = cpu.amx_permission()
    has = {"amx_tile", "amx_int8"} <= cpu.cpu_features()
    assert granted <= has
    assert granted == (why == "")
    if not has:
        assert "no AMX" in why


def test_a_parallel_schedule_keeps_its_parallel_loop_on_tiles():
    """The tile rewriter builds its own loops; a schedule's parallel loop stays parallel (the
    blocks' rows), and two threads compute the same result."""
    needs_amx()
    from loopstack.looptree.ir import Loop, replace as rep

    tree, arrays, want = int8_matmul_case(np.random.default_rng(3), 100, 48, 96, ("uint8", "int8"), bias=True)
    top = tree.body[0]
    tree = LoopTree(tree.buffers, tree.dims, (rep(top, annotations=frozenset({"parallel"})),))
    kernel = compile(tree, target="avx512")
    assert kernel.tensorized == "amx.tdpbusd"
    assert any(isinstance(n, Loop) and "parallel" in n.annotations and "mt" in n.dim for n in kernel.lowered.body)
    for threads in (1, 2):
        kernel.threads = threads
        got = np.zeros((100, 48), np.int32)
        kernel(*arrays, got)
        np.testing.assert_array_equal(got, want)


def test_tile_blocks_ask_for_every_output_line_once_before_storing():
    """The outermost reduction loop prefetches (prefetchw) the block's accumulator rows, a share
    per iteration: over its iterations every 64-byte line the block's 2 x 2 tiles store is asked
    for exactly once, and only those lines."""
    import re
    needs_amx()
    tree, _, _ = int8_matmul_case(np.random.default_rng(0), 64, 64, 256, ("uint8", "int8"))
    seg = compile(tree, target="avx512").asm().split("; segment")[-1]
    block = seg[seg.index("tilezero"):seg.index("tilestored")]
    owner, base = re.search(r"lea (\w+), qword ptr \[(\w+)\]", block).groups()
    count = int(re.search(r"mov \w+, (0x[0-9a-f]+|\d+)\s*\n(\w+_top):", block).group(1), 0)
    step = int(re.search(rf"add {owner}, (0x[0-9a-f]+)", block).group(1), 16)
    disps = [int(d or "0", 16) for d in re.findall(rf"prefetchw byte ptr \[{owner}(?: \+ 0x([0-9a-f]+))?\]", block)]
    asked = sorted(i * step + d for i in range(count) for d in disps)
    row_bytes = 64 * 4                                 # the int32 output's rows: 4 lines each
    stored = sorted(r * row_bytes + line * 64 for r in range(32) for line in range(2))
    assert count == 256 // 64 and asked == stored, (count, step, disps)
    assert re.search(rf"tilestored \[{base} \+", seg)      # the lines prefetched are the stores' own
