"""Integer max and min over zero-padded windows (a quantized max pool), natively and in the
interpreter, against numpy: every loop order, both layouts, int8, uint8 and int32. Along the
channels they are vector code (int32 lanes, vpmaxsd / vpminsd), like a sum's taps.

A reduction whose init is stored apart (its window loops outside the output's) starts from the
output type's identity: int8's -128, not int32's lowest, whose low byte is 0."""
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from loopstack.backend import compile
from loopstack.backend.interp import InterpKernel
from loopstack.isa import cpu
from loopstack.isa.target import get_target
from loopstack.looptree.builders import access, make_tree, nest
from loopstack.looptree.ir import Access, Affine, Buffer, Compute, Load, reduce_identity

FEATURES = cpu.cpu_features()
TARGETS = [t for t, need in (("avx2", "avx2"), ("avx512", "avx512f")) if need in FEATURES]


def pool_tree(dtype, C, H, W, k, pad, layout, order, reduce):
    """Y[oh, ow, c] = reduce over (r, s) of X[oh + r - pad, ow + s - pad, c], zero outside X."""
    row = Affine.of(("oh", 1), ("r", 1), const=-pad)
    col = Affine.of(("ow", 1), ("s", 1), const=-pad)
    OH, OW = H + 2 * pad - k + 1, W + 2 * pad - k + 1
    if layout == "hwc":
        xs, ys, ix, ox = (H, W, C), (OH, OW, C), (row, col, Affine.of("c")), ("oh", "ow", "c")
    else:
        xs, ys, ix, ox = (C, H, W), (C, OH, OW), (Affine.of("c"), row, col), ("c", "oh", "ow")
    bufs = [Buffer("X", dtype, xs, "input"), Buffer("Y", dtype, ys, "output")]
    stmt = Compute("Y", access("Y", *ox), Load(Access("X", ix, pad > 0)), reduce=reduce, init="identity")
    return make_tree(bufs, {"c": C, "oh": OH, "ow": OW, "r": k, "s": k}, nest(order, stmt))


def reference(x, k, pad, layout, reduce):
    axes = (0, 1) if layout == "hwc" else (1, 2)
    xp = np.pad(x, [(pad, pad) if i in axes else (0, 0) for i in range(3)])
    windows = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=axes)
    return getattr(np, reduce)(windows, axis=(-2, -1))


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from(["int8", "uint8", "int32"]), reduce=st.sampled_from(["max", "min"]),
       layout=st.sampled_from(["hwc", "chw"]), C=st.integers(1, 40), H=st.integers(1, 7), W=st.integers(1, 7),
       k=st.integers(1, 3), pad=st.integers(0, 1), perm=st.permutations(["out0", "out1", "out2", "r", "s"]),
       seed=st.integers(0, 2**31))
def test_padded_integer_window_reductions_match_numpy(dtype, reduce, layout, C, H, W, k, pad, perm, seed):
    outs = ["oh", "ow", "c"] if layout == "hwc" else ["c", "oh", "ow"]
    names = dict(out0=outs[0], out1=outs[1], out2=outs[2], r="r", s="s")
    if H + 2 * pad < k or W + 2 * pad < k:
        k = 1
    tree = pool_tree(dtype, C, H, W, k, pad, layout, [(names[p], 1) for p in perm], reduce)
    info = np.iinfo(dtype)
    x = np.random.default_rng(seed).integers(info.min, info.max, tree.buffer("X").shape, endpoint=True).astype(dtype)
    want = reference(x, k, pad, layout, reduce)
    for name, kernel in [("interp", InterpKernel(tree))] + [(t, compile(tree, target=t)) for t in TARGETS]:
        y = np.zeros(tree.buffer("Y").shape, dtype)
        kernel(x, y)
        np.testing.assert_array_equal(y, want, err_msg=f"{name}, order {perm}")


def test_identities_are_values_of_the_type():
    assert reduce_identity("max", "int8") == -128 and reduce_identity("min", "int8") == 127
    assert reduce_identity("max", "uint8") == 0 and reduce_identity("min", "int32") == 2**31 - 1
    assert reduce_identity("max", "float32") == float("-inf") and reduce_identity("add", "int8") == 0


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("channels", [64, 128])
def test_a_quantized_max_pool_runs_as_vector_code(target, dtype, channels):
    """Channels innermost: int32 lanes of widened bytes, vpmaxsd on whole vectors; with more
    channels than the registers hold (128 on AVX2), the max continues from the stored output."""
    order = [("oh", 1), ("ow", 1), ("r", 1), ("s", 1), ("c", 1)]
    tree = pool_tree(dtype, channels, 9, 9, 3, 1, "hwc", order, "max")
    kernel = compile(tree, target=target)
    x = np.random.default_rng(7).integers(-128, 128, tree.buffer("X").shape).astype(dtype)
    y = np.zeros(tree.buffer("Y").shape, dtype)
    kernel(x, y)
    np.testing.assert_array_equal(y, reference(x, 3, 1, "hwc", "max"))
    reg = "zmm" if get_target(target).vector_bits == 512 else "ymm"
    assert re.search(rf"vpmaxsd {reg}", kernel.asm()), "the window's max ran as scalar code"
