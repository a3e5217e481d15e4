"""The rewriter: every rewritten contraction computes what the original does, bit for bit, and
its innermost loops are the instruction's (the inspector matches them — `tensorize` checks it).

Programs are int8 matmuls and convolutions (strides, padding, dilation; NCHW and NHWC) drawn by
hypothesis, with uint8 x int8, int8 x int8 (the compensated form on x86) and uint8 x uint8
operands, a bias init and a relu post; results are compared with numpy's int32 arithmetic. The
exact AVX2 path on 16-bit pairs (`*.dot.s16`) takes any 8-bit operands, widened by the rewrite.
"""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from int8_programs import int8_matmul_case, ints

from loopstack.backend import compile
from loopstack.backend.tensorize import REGISTRY, instruction, tensorize
from loopstack.errors import UnsupportedError
from loopstack.looptree.builders import conv2d_tree, matmul_tree
from loopstack.looptree.ir import LoopTree, replace

# forms whose broadcast operand can be a matmul's activations (A): `a` broadcast, or a
# symmetric product (sdot, udot, s8 x s8) that binds the other way round
BROADCAST = [t for t in REGISTRY if t.isa != "ptx" and (t.broadcast == "a" or (t.broadcast and
                                                                              t.dtypes()[0] == t.dtypes()[1]))]


def retype(tree, dtypes):
    return LoopTree(tuple(replace(b, dtype=dtypes.get(b.name, b.dtype)) for b in tree.buffers), tree.dims, tree.body)


def _run(tree, arrays):
    out = [np.zeros(b.shape, b.dtype) for b in tree.outputs]
    compile(tree, target="interp")(*arrays, *out)
    return out[0]


def _applicable(instr, a_dt, b_dt):
    ia, ib, _ = instr.dtypes()
    return ((a_dt, b_dt) == (ia, ib) or (a_dt, b_dt, ia, instr.broadcast) == ("int8", ib, "uint8", "a")
            or ia == ib == "int16")


DTYPE_PAIRS = [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")]


@settings(max_examples=40, deadline=None)
@given(M=st.integers(1, 5), N_blocks=st.integers(1, 2), K=st.integers(1, 13), pair=st.sampled_from(DTYPE_PAIRS),
       which=st.integers(0, len(BROADCAST) - 1), bias=st.booleans(), relu=st.booleans(), seed=st.integers(0, 2**31))
def test_rewritten_matmuls_are_exact(M, N_blocks, K, pair, which, bias, relu, seed):
    instr = BROADCAST[which]
    assume(_applicable(instr, *pair))
    N = N_blocks * instr.lanes
    tree, arrays, want = int8_matmul_case(np.random.default_rng(seed), M, N, K, pair, bias, relu, bias_range=1000)
    rw = tensorize(tree, instr)
    np.testing.assert_array_equal(_run(rw.matched, arrays), want)
    np.testing.assert_array_equal(_run(rw.tree, arrays), want)


@settings(max_examples=25, deadline=None)
@given(C=st.integers(1, 9), H=st.integers(3, 6), K_blocks=st.integers(1, 2), R=st.integers(1, 3),
       stride=st.integers(1, 2), padding=st.integers(0, 1), dilation=st.integers(1, 2),
       layout=st.sampled_from(["NCHW", "NHWC"]), pair=st.sampled_from(DTYPE_PAIRS[:2]),
       name=st.sampled_from(["vpdpbusd.ymm.bcst_a", "avx2.dot.s8s8.bcst_a", "sdot.4s.elem", "vpdpbusd.xmm.bcst_a",
                             "avx2.dot.s16.bcst_a"]),
       seed=st.integers(0, 2**31))
def test_rewritten_convolutions_are_exact(C, H, K_blocks, R, stride, padding, dilation, layout, pair, name, seed):
    instr = instruction(name)
    assume(_applicable(instr, *pair) and H + 2 * padding >= dilation * (R - 1) + 1)
    K = K_blocks * instr.lanes
    tree = retype(conv2d_tree(1, C, H, H, K, R, R, stride=stride, padding=padding, dilation=dilation, layout=layout),
                  {"X": pair[0], "Wt": pair[1], "Y": "int32"})
    rng = np.random.default_rng(seed)
    X = ints(rng, pair[0], tree.buffer("X").shape)
    Wt = ints(rng, pair[1], tree.buffer("Wt").shape)
    want = _run(tree, [X, Wt])
    rw = tensorize(tree, instr)
    np.testing.assert_array_equal(_run(rw.matched, [X, Wt]), want)
    np.testing.assert_array_equal(_run(rw.tree, [X, Wt]), want)
    # the reference itself, independently of the interpreter: a direct numpy convolution
    x = X.astype(np.int64) if layout == "NCHW" else X.transpose(0, 3, 1, 2).astype(np.int64)
    w = Wt.astype(np.int64) if layout == "NCHW" else Wt.transpose(3, 2, 0, 1).astype(np.int64)
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    OH = want.shape[2] if layout == "NCHW" else want.shape[1]
    ref = np.zeros((1, K, OH, OH), np.int64)
    for r in range(R):
        for s in range(R):
            patch = xp[:, :, r * dilation: r * dilation + stride * (OH - 1) + 1: stride,
                       s * dilation: s * dilation + stride * (OH - 1) + 1: stride]
            ref += np.einsum("nchw,kc->nkhw", patch, w[:, :, r, s])
    got = want if layout == "NCHW" else want.transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(got, ref)


def test_the_rewrite_says_what_it_did():
    tree = retype(matmul_tree(4, 16, 10), {"A": "int8", "B": "int8", "C": "int32"})
    rw = tensorize(tree, instruction("vpdpbusd.zmm.bcst_a"))
    assert rw.steps == ("split n by 16", "split k by 4", "pad k from 10 to 12 with zeros, as k_pad",
                        "pack %B as [n/16][k/4][16][4]", "copy %A with k innermost, shifted by 128 to uint8",
                        "compensate: init -= 128 * sum of %B over the reduction",
                        "vpdpbusd (vpdpbusd.zmm.bcst_a): 4 products per lane, 16 lanes")
    # the padded reduction is a dimension of its own; k keeps its size for the rest of the tree
    assert rw.match.loops["i"].dim == "n" and rw.match.loops["j"].dim == "k_pad"
    assert rw.tree.dim_size("k") == 10 and rw.tree.dim_size("k_pad") == 12


@pytest.mark.parametrize("a_dt", ["uint8", "int8"])
def test_the_pairs_path_widens_both_operands_and_needs_no_compensation(a_dt):
    tree = retype(matmul_tree(4, 16, 9), {"A": a_dt, "B": "int8", "C": "int32"})
    rw = tensorize(tree, instruction("avx2.dot.s16.bcst_a"))
    assert rw.steps == ("split n by 8", "split k by 2", "pad k from 9 to 10 with zeros, as k_pad",
                        "pack %B as [n/8][k/2][8][2], widened to int16", "copy %A with k innermost, widened to int16",
                        "vpmaddwd (avx2.dot.s16.bcst_a): 2 products per lane, 8 lanes")
    assert {b.dtype for b in rw.tree.buffers if b.kind == "temp"} == {"int16"}


@pytest.mark.parametrize("dtypes, name, words", [
    ({"A": "uint8", "B": "int8", "C": "float32"}, "vpdpbusd.zmm.bcst_a", "accumulates int32"),
    ({"A": "int8", "B": "uint8", "C": "int32"}, "vpdpbusd.zmm.bcst_a", "m = 4 is not a multiple of"),
    ({"A": "int8", "B": "int8", "C": "int32"}, "sdot.4s", "broadcast forms"),
    ({"A": "int32", "B": "int8", "C": "int32"}, "vpdpbusd.zmm.bcst_a", "multiplies uint8 x int8"),
    ({"A": "uint8", "B": "int8", "C": "int32"}, "vpdpbusd.zmm", "broadcast forms"),
])
def test_what_cannot_be_tensorized_says_why(dtypes, name, words):
    tree = retype(matmul_tree(4, 16, 8), dtypes)
    with pytest.raises(UnsupportedError, match=words):
        tensorize(tree, instruction(name))


def test_lanes_that_do_not_divide_the_output_are_refused_by_name():
    tree = retype(matmul_tree(4, 20, 8), {"A": "uint8", "B": "int8", "C": "int32"})
    with pytest.raises(UnsupportedError, match="n = 20 is not a multiple of vpdpbusd.zmm.bcst_a's 16 lanes"):
        tensorize(tree, instruction("vpdpbusd.zmm.bcst_a"))


def test_rows_of_seven_take_one_seven_row_block_where_the_registers_hold_it():
    from loopstack.looptree.builders import conv2d_tree
    tree = retype(conv2d_tree(1, 8, 7, 7, 16, 3, 3, padding=1, layout="NHWC"), {"X": "uint8", "Wt": "int8", "Y": "int32"})
    steps = lambda rw: {lp.step for stack, _ in rw.tree.computes() for lp in stack if lp.dim == "ow"}  # noqa: E731
    instr = instruction("vpdpbusd.zmm.bcst_a")
    assert 7 in steps(tensorize(tree, instr, block=(6, 4, 29)))
    assert 7 not in steps(tensorize(tree, instr, block=(6, 4, 24)))     # 28 accumulators do not fit
    assert 7 not in steps(tensorize(tree, instr, block=(6, 4)))
