"""Generated kernels run in the SIMT reference interpreter and agree with numpy.

GEMMs and NHWC convolutions in f16, bf16 and s8, up to 128 per dimension over a few CTAs,
with sizes that are not multiples of the tiles (predicated tails, zero-filled copies) and
random knobs.  The interpreter is a test oracle: it follows the PTX ISA's semantics, with the
fragment layouts of `loopstack.isa.ptx.mma`.
"""
import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopstack as lt
from loopstack.backend.ptx import GpuSchedule, GpuTarget

from gpu_programs import batched, conv, gemm, random, requantized

pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
if importlib.util.find_spec("loopstack.isa.ptx.sim") is None:
    pytest.skip("the SIMT reference interpreter (loopstack.isa.ptx.sim) is not in this build",
                allow_module_level=True)

DTYPES = ["float16", "bfloat16", "int8"]
# small CTAs: the interpreter runs every thread of a CTA in numpy, so fewer warps cost less
knobs = st.builds(GpuSchedule,
                  BLK_ROW_WARPS=st.sampled_from([1, 2]), BLK_COL_WARPS=st.sampled_from([1, 2]),
                  WARP_ROW_TILES=st.sampled_from([1, 2]), WARP_COL_TILES=st.sampled_from([1, 2]),
                  CHUNK=st.sampled_from([1, 2]), REORDER_INNER=st.sampled_from([0, 1]),
                  stages=st.sampled_from([1, 2, 3]))


def _tolerance(dtype, k):
    if dtype in ("int8", "uint8"):
        return 0, 0                      # integer products are exact
    return (2e-2, 2e-2 * np.sqrt(k)) if dtype == "float16" else (5e-2, 8e-2 * np.sqrt(k))


def _run(tensor, arrays, ref, target, dtype, k):
    ref = ref()
    kern = lt.compile(tensor, target=target)
    out = np.zeros(ref.shape, lt.dtypes.dtype(kern.tree.outputs[0].dtype).np)
    kern.simulate(*arrays, out)
    rtol, atol = _tolerance(dtype, k)
    np.testing.assert_allclose(out.astype(np.float64), _rounded(ref, out.dtype), rtol=rtol, atol=atol)


def _rounded(ref, dt):
    return ref if dt.kind == "i" else ref.astype(dt).astype(np.float64)


@settings(max_examples=8)
@given(dtype=st.sampled_from(DTYPES), m=st.integers(1, 128), n=st.integers(1, 96), k=st.integers(1, 80),
       b_transposed=st.booleans(), sched=knobs, arch=st.sampled_from(["sm_80", "sm_90"]), seed=st.integers(0, 99))
def test_gemm_matches_numpy(dtype, m, n, k, b_transposed, sched, arch, seed):
    rng = np.random.default_rng(seed)
    C, arrays, ref = gemm(m, n, k, dtype, rng, b_transposed=b_transposed)
    _run(C, arrays, ref, GpuTarget(arch, sched), dtype, k)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tile_multiples_need_no_bounds_checks(dtype):
    """Sizes that are multiples of the tiles compile without predicates and still agree."""
    sched = GpuSchedule(1, 2, 2, 1, 2, 0, 3)                       # 32 x 32 blocks, BK 32 or 64
    C, arrays, ref = gemm(64, 96, 128, dtype, np.random.default_rng(5), bias=True, relu=True)
    kern = lt.compile(C, target=GpuTarget("sm_90", sched))
    copies = [ln for ln in kern.ptx.splitlines() if "cp.async." in ln and "shared.global" in ln]
    assert copies and all(ln.endswith(", 16;") and "@" not in ln for ln in copies)   # no zero fill, no guard
    _run(C, arrays, ref, GpuTarget("sm_90", sched), dtype, 128)


@settings(max_examples=5)
@given(dtype=st.sampled_from(DTYPES), m=st.integers(1, 80), n=st.integers(1, 64), k=st.integers(1, 64),
       relu=st.booleans(), scale=st.sampled_from([None, 0.25]), sched=knobs, seed=st.integers(0, 99))
def test_gemm_epilogues_match_numpy(dtype, m, n, k, relu, scale, sched, seed):
    rng = np.random.default_rng(seed)
    if dtype == "int8":
        scale = None                     # an integer GEMM keeps integer results
    C, arrays, ref = gemm(m, n, k, dtype, rng, bias=True, relu=relu, scale=scale)
    _run(C, arrays, ref, GpuTarget("sm_90", sched), dtype, k)


@settings(max_examples=6)
@given(dtype=st.sampled_from(DTYPES), batch=st.integers(1, 2), h=st.integers(3, 9),
       c=st.sampled_from([8, 16, 24, 32, 64]), kout=st.integers(1, 40), stride=st.sampled_from([1, 2]),
       pad=st.sampled_from([0, 1]), sched=knobs, seed=st.integers(0, 99))
def test_conv_matches_numpy(dtype, batch, h, c, kout, stride, pad, sched, seed):
    rng = np.random.default_rng(seed)
    Y, arrays, ref = conv(batch, h, c, kout, dtype, rng, stride=stride, pad=pad)
    bk = sched.CHUNK * (32 if dtype == "int8" else 16)
    if sched.REORDER_INNER and c % bk:
        sched = sched.replace(REORDER_INNER=0)
    _run(Y, arrays, ref, GpuTarget("sm_80", sched), dtype, 9 * c)


@pytest.mark.parametrize("c", [64, 48])
@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_conv_k_steps_within_one_tap_and_across_taps(dtype, c):
    """A k-step of 32 channels lies within one filter tap when it divides C (64: the tap's
    (r, s) is computed once per k-step) and straddles two taps when it does not (48)."""
    Y, arrays, ref = conv(2, 6, c, 24, dtype, np.random.default_rng(c), stride=2, pad=1)
    chunk = 1 if dtype == "int8" else 2                                  # BK = 32 either way
    _run(Y, arrays, ref, GpuTarget("sm_90", GpuSchedule(2, 1, 1, 2, chunk, 0, 2)), dtype, 9 * c)


def tf32(x):
    """float32 rounded to TF32 as cvt.rna does: 10 mantissa bits, to nearest, ties away from zero."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


@settings(max_examples=8)
@given(m=st.integers(1, 80), n=st.integers(1, 64), k=st.integers(1, 96), b_transposed=st.booleans(),
       bias=st.booleans(), relu=st.booleans(), conv_=st.booleans(), sched=knobs, seed=st.integers(0, 99))
def test_float32_operands_multiply_as_tf32_when_asked(m, n, k, b_transposed, bias, relu, conv_, sched, seed):
    """With allow_tf32, float32 GEMMs and convolutions run mma.m16n8k8.tf32 on operands rounded to
    tf32: they match numpy on tf32-rounded inputs up to the order of f32 sums, and differ from
    float32 products by tf32's rounding."""
    rng = np.random.default_rng(seed)
    if conv_:
        h, c = 3 + m % 6, 8 * (1 + k % 5)
        if sched.REORDER_INNER and c % (8 * sched.CHUNK):
            sched = sched.replace(REORDER_INNER=0)
        C, arrays, _ = conv(1 + n % 2, h, c, n, "float32", rng, stride=1 + k % 2)
        depth = 9 * c
    else:
        C, arrays, _ = gemm(m, n, k, "float32", rng, b_transposed, bias, relu)
        depth = k
    kern = lt.compile(C, target=GpuTarget("sm_90", sched, allow_tf32=True))
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in kern.ptx and "cvt.rna.tf32.f32" in kern.ptx
    got = np.zeros(kern.tree.outputs[0].shape, np.float32)
    kern.simulate(*arrays, got)
    want = np.zeros_like(got)
    lt.compile(C, target="interp")(*[tf32(a) if i < 2 else a for i, a in enumerate(arrays)], want)
    exact = np.zeros_like(got)
    lt.compile(C, target="interp")(*arrays, exact)
    scale = np.sqrt(depth) * max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)       # f32 sums in another order
    np.testing.assert_allclose(got, exact, rtol=2e-3, atol=2e-3 * scale)      # tf32 keeps 11 bits


def test_float32_operands_need_tf32_asked_for():
    from loopstack.errors import UnsupportedError
    C, arrays, ref = gemm(40, 24, 32, "float32", np.random.default_rng(0))
    with pytest.raises(UnsupportedError, match="multiply them as TF32 .* allow_tf32=True"):
        lt.compile(C, target="sm_90")
    t = C.loop_tree
    total = next(g for g in t.graph.nodes if g.op == "reduce" and g.fn == "add").id
    C.set(t.tensorize(t.ref_of(total), "mma.m16n8k8.tf32"))      # the statement asks for it itself
    assert "tf32" in lt.compile(C, target="sm_90").ptx


BYTE_PAIRS = [("uint8", "int8"), ("int8", "uint8"), ("uint8", "uint8")]


@settings(max_examples=8)
@given(pair=st.sampled_from(BYTE_PAIRS), m=st.integers(1, 80), n=st.integers(1, 64), k=st.integers(1, 96),
       b_transposed=st.booleans(), bias=st.booleans(), relu=st.booleans(), sched=knobs, seed=st.integers(0, 99))
def test_uint8_operands_multiply_with_their_own_mma_form(pair, m, n, k, b_transposed, bias, relu, sched, seed):
    """uint8 activations by int8 weights (ONNX's usual quantization), and the other pairings: the
    kernel multiplies with the mma form of both operand types; uint8 values reach 255, so a byte
    read with the wrong signedness shows."""
    a, b = pair
    C, arrays, ref = gemm(m, n, k, a, np.random.default_rng(seed), b_transposed, bias, relu, b_dtype=b)
    kern = lt.compile(C, target=GpuTarget("sm_90", sched))
    types = {"int8": "s8", "uint8": "u8"}
    assert f"m16n8k32.row.col.s32.{types[a]}.{types[b]}.s32" in kern.ptx
    _run(C, arrays, ref, GpuTarget("sm_90", sched), a, k)


@settings(max_examples=4)
@given(pair=st.sampled_from(BYTE_PAIRS), h=st.integers(3, 8), c=st.sampled_from([8, 32, 40]),
       kout=st.integers(1, 40), stride=st.sampled_from([1, 2]), sched=knobs, seed=st.integers(0, 99))
def test_uint8_convolutions_match_numpy(pair, h, c, kout, stride, sched, seed):
    Y, arrays, ref = conv(2, h, c, kout, pair[0], np.random.default_rng(seed), stride=stride, w_dtype=pair[1])
    if sched.REORDER_INNER and c % (32 * sched.CHUNK):
        sched = sched.replace(REORDER_INNER=0)
    _run(Y, arrays, ref, GpuTarget("sm_80", sched), pair[0], 9 * c)


OUT_TYPES = {"float16": ["float32", "float16"], "bfloat16": ["float32", "bfloat16"], "int8": ["int32", "int8"]}


@settings(max_examples=6)
@given(dtype=st.sampled_from(DTYPES), pick=st.integers(0, 1), m=st.integers(1, 70), n=st.integers(1, 70),
       k=st.integers(1, 70), bias=st.booleans(), post=st.sampled_from([None, "relu"]), sched=knobs,
       seed=st.integers(0, 99))
def test_output_types_and_epilogues_agree_with_the_loop_tree_interpreter(dtype, pick, m, n, k, bias, post,
                                                                         sched, seed):
    """Stores convert as loopstack's semantics say (f16/bf16 round, int8 wraps; the epilogue sees
    the stored value): the oracle is the backend-independent loop-tree interpreter."""
    from loopstack.backend import compile as compile_tree
    from loopstack.looptree.builders import matmul_tree

    out_dtype = OUT_TYPES[dtype][pick]
    tree = matmul_tree(m, n, k, order=[("m", 1), ("n", 1), ("k", 1)], dtype=dtype, out_dtype=out_dtype,
                       post=post, bias=bias)
    rng = np.random.default_rng(seed)
    arrays = [random(b.shape, b.dtype, rng) for b in tree.inputs]
    want = compile_tree(tree, target="interp").run(*(a.astype(np.float32) if a.dtype.name == "bfloat16"
                                                     else a for a in arrays))[0] if dtype != "bfloat16" else None
    kern = compile_tree(tree, target=GpuTarget("sm_90", sched))
    got = np.zeros((m, n), lt.dtypes.dtype(out_dtype).np)
    kern.simulate(*arrays, got)
    if want is None:                 # the loop-tree interpreter has no bfloat16: numpy in float64
        ref = arrays[0].astype(np.float64) @ arrays[1].astype(np.float64)
        if bias:
            ref = ref + arrays[2].astype(np.float64)
        ref = ref.astype(got.dtype).astype(np.float64) if post else ref
        want = np.maximum(ref, 0) if post else ref
    rtol, atol = _tolerance(dtype, k)
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol)


BIG_KNOBS = [
    ("float16", "gemm", GpuSchedule()),                              # the default: 8 warps, 128 x 128
    ("int8", "gemm-bT", GpuSchedule(1, 2, 4, 4, 4, 0, 4)),          # 64 x 128 warp tiles, 4 stages
    ("bfloat16", "gemm", GpuSchedule(2, 1, 2, 4, 8, 1, 2)),         # CHUNK 8, grid walking M
    ("float16", "conv", GpuSchedule(2, 2, 2, 2, 4, 1, 3)),
    ("int8", "conv-s2", GpuSchedule(2, 1, 2, 1, 2, 1, 4)),
]


@pytest.mark.parametrize("dtype, what, sched", BIG_KNOBS, ids=[f"{d}-{w}" for d, w, _ in BIG_KNOBS])
def test_large_knobs_agree(dtype, what, sched):
    rng = np.random.default_rng(1)
    if what.startswith("gemm"):
        m, k = (70, 160) if dtype == "bfloat16" else (130, 96)           # bf16: K spans three CHUNK-8 steps
        T, arrays, ref = gemm(m, 136, k, dtype, rng,
                              b_transposed=what.endswith("bT"), bias=dtype != "int8", relu=True)
    else:
        T, arrays, ref = conv(2, 9, 64, 40, dtype, rng, stride=2 if what.endswith("s2") else 1)
    _run(T, arrays, ref, GpuTarget("sm_90", sched), dtype, 576)


@settings(max_examples=6)
@given(m=st.integers(1, 80), n=st.integers(1, 48), k=st.integers(1, 96), out=st.sampled_from(["int8", "uint8"]),
       per_channel=st.booleans(), zero_point=st.sampled_from([0, 3, -5, 127]), relu=st.booleans(),
       a_dtype=st.sampled_from(["int8", "uint8"]), sched=knobs, seed=st.integers(0, 99))
def test_requantized_int8_gemms_saturate_as_onnx_defines(m, n, k, out, per_channel, zero_point, relu, a_dtype,
                                                         sched, seed):
    """int8 (or uint8) x int8 -> int32 (+ bias, relu) -> saturate(round_half_even(acc * scale) + zero
    point), against numpy and the loop-tree interpreter."""
    from loopstack.backend import compile as compile_tree
    zero_point = abs(zero_point) * 2 if out == "uint8" else zero_point      # within the output's range
    tree, arrays, ref = requantized(m, n, k, np.random.default_rng(seed), out, per_channel, zero_point, relu,
                                    a_dtype)
    kern = compile_tree(tree, target=GpuTarget("sm_90", sched))
    got = np.zeros((m, n), np.dtype(out))
    kern.simulate(*arrays, got)
    np.testing.assert_array_equal(got, ref())
    interp = np.zeros_like(got)
    compile_tree(tree, target="interp")(*arrays, interp)
    np.testing.assert_array_equal(got, interp)


@settings(max_examples=6)
@given(dtype=st.sampled_from(DTYPES), batch=st.integers(2, 3), m=st.integers(1, 48), n=st.integers(1, 40),
       k=st.integers(1, 64), b_shared=st.booleans(), b_transposed=st.booleans(), bias=st.booleans(), sched=knobs,
       seed=st.integers(0, 99))
def test_batched_gemms_run_the_batch_on_the_grids_z(dtype, batch, m, n, k, b_shared, b_transposed, bias, sched, seed):
    C, arrays, ref = batched(batch, m, n, k, dtype, np.random.default_rng(seed), b_shared, b_transposed, bias)
    kern = lt.compile(C, target=GpuTarget("sm_90", sched))
    assert kern.grid[2] == batch and kern.flops == 2 * batch * m * n * k
    _run(C, arrays, ref, GpuTarget("sm_90", sched), dtype, k)


def test_a_batched_gemm_with_a_shared_and_f32_output():
    """out[b, m, n] += A[m, k] * B[b, k, n] as a loop tree (the DSL orders that output m, b, n)."""
    from loopstack.backend import compile as compile_tree
    from loopstack.looptree.builders import access, make_tree, nest
    from loopstack.looptree.ir import Binary, Buffer, Compute, Load
    nb, m, n, k = 3, 20, 24, 40
    bufs = (Buffer("A", "float16", (m, k), "input"), Buffer("B", "float16", (nb, k, n), "input"),
            Buffer("C", "float32", (nb, m, n), "output"))
    stmt = Compute("c", access("C", "b", "m", "n"), Binary("mul", Load(access("A", "m", "k")),
                   Load(access("B", "b", "k", "n"))), reduce="add", init="identity")
    tree = make_tree(bufs, {"b": nb, "m": m, "n": n, "k": k}, nest([("b", 1), ("m", 1), ("n", 1), ("k", 1)], stmt))
    kern = compile_tree(tree, target=GpuTarget("sm_80", GpuSchedule(1, 1, 1, 1, 1, 0, 2)))
    assert not kern.contraction.a_batched and kern.contraction.b_batched
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((nb, k, n)).astype(np.float16)
    out = np.zeros((nb, m, n), np.float32)
    kern.simulate(a, b, out)
    np.testing.assert_allclose(out, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype, m, n, k, sched", [
    ("float16", 70, 40, 147, GpuSchedule(1, 2, 2, 1, 4, 0, 2)),     # rows of A 294 bytes: 2-byte copies
    ("int8", 37, 7, 147, GpuSchedule(1, 2, 2, 4, 8, 0, 3)),         # B [k, n] rows of 7 bytes: byte copies,
])                                                                    # and 256 x 128 bytes to transpose
def test_tiles_of_narrow_rows_are_copied_by_loops_not_unrolled(dtype, m, n, k, sched):
    """Hundreds of byte or half-word copies a thread per k-step run as a loop (emit.COPY_UNROLL):
    the kernel stays small for the JIT (the unrolled kernel of the int8 case took ptxas 28 s) and
    computes the same."""
    from loopstack.backend.ptx.emit import COPY_UNROLL
    rng = np.random.default_rng(7)
    C, arrays, ref = gemm(m, n, k, dtype, rng, relu=True)
    kern = lt.compile(C, target=GpuTarget("sm_90", sched))
    mma = kern.contraction.mma
    assert sched.bm * sched.bk(mma) // sched.threads > COPY_UNROLL        # A's elements a thread copies
    assert "$L_each_" in kern.ptx and kern.ptx.count("\n") < 1000
    _run(C, arrays, ref, GpuTarget("sm_90", sched), dtype, k)


ACTIVATIONS = {"exp": lt.exp, "sigmoid": lt.nn.sigmoid, "tanh": lt.nn.tanh, "gelu": lt.nn.gelu, "abs": lt.abs,
               "erf": lt.erf, "exact gelu": lambda x: x * 0.5 * (lt.erf(x * 0.7071067811865476) + 1.0),
               "silu": lambda x: x * lt.nn.sigmoid(x)}


@settings(max_examples=16)
@given(act=st.sampled_from(sorted(ACTIVATIONS)), m=st.integers(1, 48), n=st.integers(1, 40), scale=st.sampled_from([0.25, 1.0, 4.0]),
       seed=st.integers(0, 99))
def test_float_activations_in_the_epilogue_agree_with_loopstacks_definitions(act, m, n, scale, seed):
    """exp, sigmoid, tanh, gelu (tanh form), erf, abs, x * sigmoid(x) and the exact gelu fused on the store, against the
    loop-tree interpreter.  The operands are multiples of 1/8 below 1 in magnitude, exact in
    tf32, and 32 products sum exactly in f32: what differs is the activation alone."""
    rng = np.random.default_rng(seed)
    s = lt.SymbolGenerator()
    a = (rng.integers(-8, 8, (m, 32)) / 8).astype(np.float32)
    b = (rng.integers(-8, 8, (32, n)) / 8).astype(np.float32)
    Y = ACTIVATIONS[act]((lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k) * (scale / 4))
    kern = lt.compile(Y, target=GpuTarget("sm_90", GpuSchedule(1, 1, 2, 1, 2, 0, 2), allow_tf32=True))
    got, want = np.zeros((m, n), np.float32), np.zeros((m, n), np.float32)
    kern.simulate(a, b, got)
    lt.compile(Y, target="interp")(a, b, want)
    # ex2.approx is within 2 ulp, and x log2(e) rounds: |x| up to 8 here; erf (vmath's rational
    # function, 4e-7) cancels in 1 + erf(x / sqrt 2) for x << 0, scaled by |x|
    np.testing.assert_allclose(got, want, rtol=4e-6, atol=1e-6)


def test_activations_an_integer_result_cannot_take_are_refused():
    C, _, _ = gemm(32, 16, 32, "int8", None)
    with pytest.raises(lt.LoopstackError, match="unary op sigmoid needs a floating-point statement"):
        lt.compile(lt.nn.sigmoid(C), target="sm_90")
