"""Vectorised integer copies: the staging, shifting and element-wise code around int8 kernels.

Element-wise integer statements compile to vectors of int32 lanes, 8-bit operands widened on
load (vpmovzxbd / vpmovsxbd; int16, the exact AVX2 dot path's staged operands: vpmovsxwd) and
narrowed to their low byte or word on store (vpmovdb / vpmovdw; a mask or a sign-extension and
packs on AVX2), with masked tails on AVX-512 and tails inserted and extracted element by element
on AVX2. Each result must equal the reference interpreter's (C's conversions: an 8-bit store
keeps the low byte), and the code must really be vector code.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from loopstack.backend import compile
from loopstack.looptree.builders import access, make_tree, nest
from loopstack.looptree.ir import Binary, Buffer, Compute, Const, Load, LoopTree, Unary, replace
from loopstack.isa import cpu
from loopstack.isa.target import get_target
from int8_programs import ints

FEATURES = cpu.cpu_features()
TARGETS = [t for t, need in (("avx2", "avx2"), ("avx512", "avx512f")) if need in FEATURES]
DTYPES = ["int8", "uint8", "int16", "int32"]
WIDEN = ("vpmovzxbd", "vpmovsxbd", "vpmovsxwd")


def shifted_copy(rows, cols, src_dt, dst_dt, shift, op="add", unary=None):
    """Y[i, j] = unary(X[i, j] <op> shift) — the activations' staging copy when shift is ±128."""
    e = Binary(op, Load(access("X", "i", "j")), Const(shift)) if shift is not None else Load(access("X", "i", "j"))
    if unary:
        e = Unary(unary, e)
    bufs = [Buffer("X", src_dt, (rows, cols), "input"), Buffer("Y", dst_dt, (rows, cols), "output")]
    return make_tree(bufs, {"i": rows, "j": cols}, nest([("i", 1), ("j", 1)], Compute("Y", access("Y", "i", "j"), e)))


def run_both(tree, target, X):
    want = np.zeros(tree.buffer("Y").shape, tree.buffer("Y").dtype)
    compile(tree, target="interp")(X, want)
    kernel = compile(tree, target=target)
    got = np.zeros_like(want)
    kernel(X, got)
    return kernel, got, want


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 4), cols=st.integers(1, 70), src=st.sampled_from(DTYPES), dst=st.sampled_from(DTYPES),
       shift=st.sampled_from([None, 128, -128, 3]), op=st.sampled_from(["add", "sub", "max", "mul"]),
       unary=st.sampled_from([None, "relu", "neg"]), seed=st.integers(0, 2**31))
def test_integer_copies_vectorise_and_keep_the_low_byte(target, rows, cols, src, dst, shift, op, unary, seed):
    tree = shifted_copy(rows, cols, src, dst, shift, op, unary)
    X = ints(np.random.default_rng(seed), src, (rows, cols))
    kernel, got, want = run_both(tree, target, X)
    np.testing.assert_array_equal(got, want)
    lanes = get_target(target).vector_bits // 32
    if src != "int32" and cols >= lanes:
        assert any(w in kernel.asm() for w in WIDEN), "an 8-bit copy ran as scalar code"


@pytest.mark.parametrize("target", TARGETS)
def test_the_int8_staging_shift_is_exact_at_the_extremes(target):
    """int8 -> uint8 by +128 (the compensation's shift) over the whole int8 range, with a tail."""
    X = np.arange(-128, 128, dtype=np.int8).reshape(8, 32)[:, :29].copy()
    kernel, got, want = run_both(shifted_copy(8, 29, "int8", "uint8", 128), target, X)
    np.testing.assert_array_equal(got, (X.astype(np.int32) + 128).astype(np.uint8))
    np.testing.assert_array_equal(got, want)
    assert "vpmovsxbd" in kernel.asm()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("pair", [("uint8", "int8"), ("int8", "int8")])
def test_a_quantized_convolution_stages_its_input_with_vector_code(target, pair):
    """The per-call copies of a padded int8 convolution with constant weights (the activations
    with the reduction innermost, their zero border, the int8 shift) are vector code: no byte
    is moved alone outside the once-only weight packing."""
    from int8_programs import int8_conv

    tree = int8_conv(32, 9, get_target(target).vector_bits // 32, 3, 1, 1, "NHWC", pair)
    tree = LoopTree(tuple(replace(b, constant=b.name == "Wt") for b in tree.buffers), tree.dims, tree.body)
    rng = np.random.default_rng(5)
    X, W = ints(rng, pair[0], tree.buffer("X").shape), ints(rng, pair[1], tree.buffer("Wt").shape)
    want = np.zeros(tree.buffer("Y").shape, np.int32)
    compile(tree, target="interp")(X, W, want)
    kernel = compile(tree, target=target)
    got = np.zeros_like(want)
    kernel(X, W, got)
    np.testing.assert_array_equal(got, want)
    per_call = kernel.asm().split("; segment ")[1 + len(kernel._once):]
    assert per_call and not any(" movzx " in s or " movsx " in s for s in per_call), kernel.lowered
    assert any(w in s for s in per_call for w in WIDEN)


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=15, deadline=None)
@given(C=st.sampled_from([3, 8, 11, 16, 20, 29, 32]), H=st.integers(3, 9), stride=st.integers(1, 2),
       x_dt=st.sampled_from(["uint8", "int8"]), requant=st.booleans(), seed=st.integers(0, 2**31))
def test_depthwise_int8_convolutions_are_vector_code_and_exact(target, C, H, stride, x_dt, requant, seed):
    """A depthwise convolution's sum over its taps runs in int32 lanes along the channels
    (widened loads, vpmulld, vpaddd, the requantization on the store), bit-exact against the
    interpreter; channels that fill no whole vector end in a vector tail (masked on AVX-512,
    inserted and extracted element by element on AVX2)."""
    from loopstack.commands.bench_int8 import qconv_tree

    tree = qconv_tree(C, C, H, depthwise=True, stride=stride, zero_point=3)
    if x_dt == "int8":
        tree = LoopTree(tuple(replace(b, dtype="int8") if b.name == "X" else b for b in tree.buffers),
                        tree.dims, tree.body)
    if not requant:
        (stack, stmt), = tree.computes()
        tree = LoopTree(tuple(replace(b, dtype="int32") if b.kind == "output" else b for b in tree.buffers
                              if b.name != "scale"), tree.dims,
                        (_swap(tree.body[0], stmt, replace(stmt, requant=None)),))
    rng = np.random.default_rng(seed)
    arrays = []
    for b in tree.inputs:
        if b.dtype == "float32":
            arrays.append(rng.uniform(1e-3, 2e-2, b.shape).astype(np.float32))
        elif b.dtype == "int32":
            arrays.append(rng.integers(-20000, 20000, b.shape).astype(np.int32))
        else:
            arrays.append(ints(rng, b.dtype, b.shape))
    out = tree.outputs[0]
    want = np.zeros(out.shape, out.dtype)
    compile(tree, target="interp")(*arrays, want)
    kernel = compile(tree, target=target)
    got = np.zeros_like(want)
    kernel(*arrays, got)
    np.testing.assert_array_equal(got, want)
    if C >= get_target(target).vector_bits // 32:
        assert any(w in kernel.asm() for w in WIDEN), "the taps' sum ran as scalar code"


def _swap(node, old, new):
    if node is old:
        return new
    return replace(node, body=tuple(_swap(n, old, new) for n in node.body))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("C", [12, 20, 27])
def test_a_requantized_depthwise_sum_over_channels_with_a_tail_is_exact_at_the_extremes(target, C):
    """More channels than a vector and no multiple of it (on AVX2 once a clear refusal): all
    255 x all -128 at the border of the uint8 output's range, and the tail's neighbours intact."""
    from loopstack.commands.bench_int8 import qconv_tree

    tree = qconv_tree(C, C, 5, depthwise=True, zero_point=3)
    X = np.full(tree.buffer("X").shape, 255, np.uint8)
    W = np.full(tree.buffer("Wt").shape, -128, np.int8)
    W[..., 1::2] = 127
    bias = np.arange(C, dtype=np.int32) * 1000 - 5000
    scale = np.linspace(1e-4, 2e-3, C).astype(np.float32)
    want = np.zeros(tree.buffer("Y").shape, np.uint8)
    compile(tree, target="interp")(X, W, bias, scale, want)
    assert 0 < (want == 0).sum() < want.size and (want == 255).any()     # both ends of the range
    kernel = compile(tree, target=target)
    got = np.zeros_like(want)
    kernel(X, W, bias, scale, got)
    np.testing.assert_array_equal(got, want)
    assert any(w in kernel.asm() for w in WIDEN)
