"""Quantized kernels, natively: random int8 matmuls and convolutions against numpy's int32.

Each program compiles for every target this CPU runs, once with the instruction the compile
picks (AMX tiles, VNNI / AVX-VNNI where the CPU has them), once without tiles (`vnni`), once as
on a CPU without dot-product extensions (the exact path: `vpmaddwd` on 16-bit pairs, packed and
staged widened) and once on the byte-widening path (bytes widened in registers at every use,
asked for by name); results must equal numpy's int32 arithmetic bit for bit, and a requantized
output the reference interpreter's (itself bit-exact against onnxruntime,
tests/unit/test_requant.py).
"""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from loopstack.backend import compile
from loopstack.backend.tensorize import instruction, tensorize
from loopstack.backend.tensorize.apply import register_block
from loopstack.errors import ScheduleError, UnsupportedError
from loopstack.isa import cpu
from loopstack.isa.target import get_target
from int8_programs import int8_conv, int8_matmul, int8_matmul_case, ints

FEATURES = cpu.cpu_features()
TARGETS = [t for t, need in (("avx2", "avx2"), ("avx512", "avx512f")) if need in FEATURES]
PAIRS = [("uint8", "int8"), ("int8", "int8")]


AMX = cpu.amx_permission()[0]


@pytest.fixture(params=["chosen", "vnni", "widening", "bytes"])
def family(request):
    """`vnni`: the compile may not use AMX tiles, as on a CPU without them; `widening`: nor VNNI
    or AVX-VNNI, as on a CPU without them; `bytes`: the contraction is rewritten for the
    byte-widening entry of that target's width."""
    return request.param


def byte_widening(tree, t):
    """`tree` with its contraction on `t`'s byte-widening entry, where the rewriter can apply it."""
    (_, s), = [(st, c) for st, c in tree.computes() if c.reduce == "add"]
    a_dt = tree.buffer(s.expr.a.access.buffer).dtype
    prefix = "avx2" if t.vector_bits == 256 else "avx512bw"
    instr = instruction(f"{prefix}.dot.{'s8s8' if a_dt == 'int8' else 'u8s8'}.bcst_a")
    try:
        return tensorize(tree, instr, block=register_block(t, instr)).tree
    except (UnsupportedError, ScheduleError):
        return tree


def run(tree, target, arrays, family="chosen"):
    outs = [np.zeros(b.shape, b.dtype) for b in tree.outputs]
    t = get_target(target)
    if family == "vnni":
        t = dataclasses.replace(t, extensions=frozenset(e for e in t.extensions if not e.startswith("amx")))
    elif family != "chosen":
        t = dataclasses.replace(t, extensions=frozenset())
    if family == "bytes":
        tree = byte_widening(tree, t)
    kernel = compile(tree, target=t)
    kernel(*arrays, *outs)
    return kernel, outs[0]


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(M=st.integers(1, 13), n_vec=st.integers(1, 5), n_extra=st.sampled_from([0, 0, 0, 3]), K=st.integers(1, 70),
       pair=st.sampled_from(PAIRS), bias=st.booleans(), relu=st.booleans(), seed=st.integers(0, 2**31))
def test_int8_matmuls_are_exact(target, family, M, n_vec, n_extra, K, pair, bias, relu, seed):
    lanes = get_target(target).vector_bits // 32
    N = n_vec * lanes + n_extra          # a width that is no whole vector runs untensorized, still exact
    tree, arrays, want = int8_matmul_case(np.random.default_rng(seed), M, N, K, pair, bias, relu)
    kernel, got = run(tree, target, arrays, family)
    np.testing.assert_array_equal(got, want)
    if not n_extra:
        assert kernel.tensorized is not None
        # a dot-product extension counts only where the target may encode it: the avx2 target
        # takes VEX AVX-VNNI alone (a Zen 4 has AVX512_VNNI but no AVX-VNNI)
        vnni = FEATURES & get_target(target).extensions & {"avx512_vnni", "avx_vnni"}
        assert ("dot" in kernel.tensorized) == (family in ("widening", "bytes") or not vnni)
        if family in ("widening", "bytes"):
            assert (".dot.s16" in kernel.tensorized) == (family == "widening"), kernel.tensorized
        assert kernel.tensorized.startswith("amx.") == (family == "chosen" and target == "avx512" and AMX)


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(M=st.integers(1, 9), n_vec=st.integers(1, 3), K=st.integers(1, 50), pair=st.sampled_from(PAIRS),
       out_dt=st.sampled_from(["int8", "uint8"]), per_channel=st.booleans(), seed=st.integers(0, 2**31))
def test_requantized_int8_matmuls_match_the_interpreter(target, family, M, n_vec, K, pair, out_dt, per_channel, seed):
    N = n_vec * get_target(target).vector_bits // 32
    rng = np.random.default_rng(seed)
    scale = rng.uniform(1e-4, 2e-2, N).astype(np.float32) if per_channel else np.float32(rng.uniform(1e-4, 2e-2))
    zp = int(ints(rng, out_dt, ()))
    tree = int8_matmul(M, N, K, *pair, bias=True, requant=(scale, zp, out_dt))
    A, B = ints(rng, pair[0], (M, K)), ints(rng, pair[1], (K, N))
    arrays = [A, B, rng.integers(-5000, 5000, N).astype(np.int32)] + ([scale] if per_channel else [])
    want = np.zeros((M, N), out_dt)
    compile(tree, target="interp")(*arrays, want)
    kernel, got = run(tree, target, arrays, family)
    assert kernel.tensorized is not None
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(C=st.integers(1, 10), H=st.integers(3, 8), k_vec=st.integers(1, 2), R=st.integers(1, 3),
       stride=st.integers(1, 2), padding=st.integers(0, 1), layout=st.sampled_from(["NCHW", "NHWC"]),
       pair=st.sampled_from(PAIRS), seed=st.integers(0, 2**31))
def test_int8_convolutions_are_exact(target, family, C, H, k_vec, R, stride, padding, layout, pair, seed):
    assume(H + 2 * padding >= R)
    K = k_vec * get_target(target).vector_bits // 32
    tree = int8_conv(C, H, K, R, stride, padding, layout, pair)
    rng = np.random.default_rng(seed)
    X, W = ints(rng, pair[0], tree.buffer("X").shape), ints(rng, pair[1], tree.buffer("Wt").shape)
    want = np.zeros(tree.buffer("Y").shape, np.int32)
    compile(tree, target="interp")(X, W, want)
    kernel, got = run(tree, target, [X, W], family)
    assert kernel.tensorized is not None
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_the_extremes_of_uint8_times_int8_do_not_saturate(target, family):
    lanes = get_target(target).vector_bits // 32
    A = np.full((3, 64), 255, np.uint8)
    B = np.full((64, 2 * lanes), -128, np.int8)
    kernel, got = run(int8_matmul(3, 2 * lanes, 64, "uint8", "int8"), target, [A, B], family)
    assert (got == 64 * 255 * -128).all(), kernel.tensorized


def test_the_int8_bench_agrees_with_onnxruntime_bit_for_bit():
    pytest.importorskip("onnxruntime", reason="onnxruntime is the int8 bench's peer")
    from loopstack.commands import bench_int8

    rows = bench_int8.rows(runs=1, rounds=1, names={"GEMM-256", "QCONV-4", "QDWCONV-1"})
    assert [r["name"] for r in rows] == ["GEMM-256", "QCONV-4", "QDWCONV-1"]
    assert all(r["exact"] for r in rows), [(r["name"], r["exact"]) for r in rows]
    assert rows[0]["gops"] > 0 and rows[0]["instr"] != "-"
    assert "QCONV-4" in bench_int8.format_table(rows)


@pytest.mark.skipif("avx2" not in TARGETS, reason="needs an AVX2 host")
def test_the_int8_bench_runs_the_pairs_path_and_a_named_entry_exactly():
    """`bench/int8.py --target avx2 --widening`, and with `--instr` the byte-widening path beside it."""
    pytest.importorskip("onnxruntime", reason="onnxruntime is the int8 bench's peer")
    from loopstack.commands import bench_int8

    t = dataclasses.replace(get_target("avx2"), extensions=frozenset())
    for name, want in ((None, "avx2.dot.s16.bcst_a"), ("avx2.dot.u8s8.bcst_a", "avx2.dot.u8s8.bcst_a")):
        (row,) = bench_int8.rows(runs=1, rounds=1, target=t, names={"QCONV-4"}, instr_name=name)
        assert row["instr"] == want and row["exact"], row


@pytest.mark.parametrize("align", [16, 64, 4096])
@pytest.mark.parametrize("dtype", ["uint8", "int32", "float32"])
def test_the_int8_bench_places_operands_on_the_boundary_asked_for(align, dtype):
    """bench --align: the same values, at an address that is a multiple of `align`."""
    from loopstack.commands.bench_int8 import _placed

    x = np.arange(3 * 37, dtype=dtype).reshape(3, 37)
    y = _placed(x, align)
    assert y.ctypes.data % align == 0 and y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_array_equal(y, x)
    assert _placed(x, 0) is x


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["int32", "int16", "int8", "uint8"])
@pytest.mark.parametrize("binary, unary", [("add", ()), ("sub", ("relu",)), ("mul", ()), ("max", ("neg",)),
                                           ("min", ("abs",)), (None, ("relu",))])
def test_integer_element_wise_code_runs_natively(target, dtype, binary, unary):
    from loopstack.looptree.builders import elementwise_tree

    tree = elementwise_tree((3, 7), unary=unary, binary=binary, dtype=dtype)
    rng = np.random.default_rng(2)
    ins = [ints(rng, dtype, (3, 7)) for _ in tree.inputs]
    want = np.zeros((3, 7), dtype)
    compile(tree, target="interp")(*ins, want)
    out = np.zeros((3, 7), dtype)
    compile(tree, target=target)(*ins, out)
    np.testing.assert_array_equal(out, want)
