"""AArch64 code generation, run: kernels for `neon` (fp32) and `neon_fp16` (fp16 storage and
arithmetic) from hypothesis-drawn programs and schedules, against numpy.

On an x86 host every kernel runs in unicorn (tests/a64_kernels.py); on an aarch64 host the tests
marked `aarch64` call the same kernels natively, through the kernel's own call.

fp16 tolerance: each output is a sum of n terms computed in fp16 (unit roundoff u = 2^-11), so its
error is bounded by about n·u·Σ|terms|; the tests allow (n + 2)·2^-10 times the output's scale.
"""
import dataclasses

import numpy as np
import pytest
from a64_run import run_kernel
from hypothesis import HealthCheck, assume, given, settings
from strategies import check_case, contraction_cases, random_case
from vector_math import MATH

from loopstack.backend import compile
from loopstack.backend.interp import InterpKernel
from loopstack.backend.native import in_float16
from loopstack.errors import UnsupportedError
from loopstack.looptree import stats
from loopstack.looptree.builders import depthwise_conv2d_tree, elementwise_tree, matmul_tree

FAST = settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))


def _floats_only(tree) -> bool:
    return all(b.dtype.startswith("float") for b in tree.buffers)


def _terms(tree) -> int:
    outs = sum(b.size for b in tree.outputs)
    return max(1, stats.flops(tree) // max(1, 2 * outs))


def run_neon(case, target: str):
    tree = case.tree if target == "neon" else in_float16(case.tree)
    kernel = compile(tree, target=target)
    inputs = case.make_inputs(np.random.default_rng(0))
    if target == "neon_fp16":
        inputs = tuple(x.astype(np.float16) for x in inputs)
        want = case.reference(inputs)
        assume(all(np.all(np.abs(np.asarray(w)) < 3e4) for w in want))   # fp16 range
        case = dataclasses.replace(case, rtol=1e-2, atol=(_terms(tree) + 2) * 2.0 ** -10)
    outs = tuple(np.zeros(b.shape, np.dtype(b.dtype)) for b in tree.outputs)
    run_kernel(kernel, list(inputs) + list(outs))
    check_case(case, inputs, outs)
    return kernel


@pytest.mark.aarch64
@FAST
@given(random_case())
def test_neon_kernels_match_numpy(case):
    """fp32 arithmetic, on float32 and float16 (converted on load and store) buffers."""
    assume(_floats_only(case.tree))
    run_neon(case, "neon")


@pytest.mark.aarch64
@FAST
@given(random_case())
def test_neon_fp16_kernels_match_numpy(case):
    assume(_floats_only(case.tree))
    run_neon(case, "neon_fp16")


@pytest.mark.aarch64
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(contraction_cases())
def test_neon_matches_the_interpreter_with_every_loop_at_run_time(case):
    """unroll_limit=0: runtime loops, tails after them, counters and pointer rewinds."""
    assume(all(b.dtype == "float32" for b in case.tree.buffers))
    inputs = case.make_inputs(np.random.default_rng(1))
    kernel = compile(case.tree, target="neon", unroll_limit=0)
    outs = [np.zeros(b.shape, np.float32) for b in case.tree.outputs]
    run_kernel(kernel, list(inputs) + outs)
    want = InterpKernel(case.tree).run(*inputs)
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-4 * (1 + np.abs(w).max()))


def test_a_register_block_broadcasts_by_element():
    """An 8-row block of a matmul: one scalar load per row, used as the element of the fmla."""
    text = compile(matmul_tree(8, 16, 32, order=[("m", 8), ("n", 16), ("k", 1), ("m", 1), ("n", 1)]),
                   target="neon").asm()
    assert "fmla v" in text and ".s[0]" in text
    assert "dup" not in text and "ld1r" not in text
    # fp16: the by-element operand must be one of v0-v15, which the broadcasts are given
    text16 = compile(in_float16(matmul_tree(8, 32, 32, order=[("m", 8), ("n", 32), ("k", 1), ("m", 1), ("n", 1)])),
                     target="neon_fp16").asm()
    assert "fmla v" in text16 and ".h[0]" in text16 and ".8h" in text16
    assert "dup" not in text16 and "ld1r" not in text16


def test_cross_compiled_kernels_have_code_listing_and_counts_but_do_not_run_here():
    from loopstack.backend.native import runs_here

    kernel = compile(matmul_tree(8, 8, 8), target="neon")
    assert kernel.code and kernel.flops == 2 * 8 * 8 * 8 and "ret" in kernel.asm()
    if not runs_here(kernel.target):
        with pytest.raises(UnsupportedError, match="neon"):
            kernel.run(*kernel.random_arguments()[:2])


def test_neon_fp16_rejects_float32_buffers():
    with pytest.raises(UnsupportedError, match="float16"):
        compile(matmul_tree(4, 4, 4), target="neon_fp16")


FP16_INPUTS = {"log": lambda r: np.exp(r.uniform(-9, 9, 1027)), "sqrt": lambda r: r.uniform(0, 6e4, 1027),
               "reciprocal": lambda r: r.uniform(0.01, 100, 1027)}


@pytest.mark.aarch64
@pytest.mark.parametrize("op", sorted(MATH))
def test_vector_math_accuracy_on_neon(op):
    """x86's inputs and documented float32 bounds (test_codegen_features.MATH), on neon."""
    sample, ref, rtol, atol = MATH[op]
    x = sample(np.random.default_rng(4)).astype(np.float32)
    y = np.zeros_like(x)
    run_kernel(compile(elementwise_tree(x.shape, (op,)), target="neon"), [x, y])
    np.testing.assert_allclose(y.astype(np.float64), ref(x.astype(np.float64)), rtol=rtol, atol=atol)


@pytest.mark.aarch64
@pytest.mark.parametrize("op", sorted(MATH))
def test_vector_math_accuracy_on_neon_fp16(op):
    """On fp16 inputs (in fp16's range), the float32 bound plus one fp16 rounding (2^-11)."""
    _, ref, rtol, atol = MATH[op]
    x = FP16_INPUTS.get(op, lambda r: r.uniform(-10, 10, 1027))(np.random.default_rng(4)).astype(np.float16)
    y = np.zeros_like(x)
    run_kernel(compile(elementwise_tree(x.shape, (op,), dtype="float16"), target="neon_fp16"), [x, y])
    np.testing.assert_allclose(y.astype(np.float64), ref(x.astype(np.float64)), rtol=rtol + 2.0 ** -11,
                               atol=atol + 2.0 ** -24)


@pytest.mark.aarch64
def test_depthwise_convolution_with_channel_tails():
    tree = depthwise_conv2d_tree(11, 9, 9, 3, 3, padding=1, post="relu",
                                 order=[("oh", 1), ("ow", 4), ("c", 4), ("r", 1), ("s", 1), ("ow", 1), ("c", 1)])
    rng = np.random.default_rng(5)
    X, W = rng.standard_normal((9, 9, 11)).astype(np.float32), rng.standard_normal((3, 3, 11)).astype(np.float32)
    Y = np.zeros((9, 9, 11), np.float32)
    run_kernel(compile(tree, target="neon"), [X, W, Y])
    (want,) = InterpKernel(tree).run(X, W)
    np.testing.assert_allclose(Y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.aarch64
@pytest.mark.parametrize("name", ["MBV3-C64", "MLP-8x256"])
@pytest.mark.parametrize("target", ["neon", "neon_fp16"])
def test_paper_workloads_under_their_default_schedule(name, target):
    """Whole layers through the frontend with the target's default schedule: constant weights
    packed once, depthwise and pointwise nests, bias and relu fused."""
    from loopstack.frontend.run import program
    from loopstack.tune.defaults import default_schedule
    from loopstack.workloads import get_workload

    Y, reference = get_workload(name).build(seed=0)
    Y.set(default_schedule(Y, target))
    tree = Y.loop_tree.lower()
    kernel = compile(in_float16(tree) if target == "neon_fp16" else tree, target=target)
    dt = np.float16 if target == "neon_fp16" else np.float32
    args = [r.data.astype(dt) for r in program(Y).reads]      # the inputs, in the kernel's order
    out = np.zeros(kernel.tree.outputs[0].shape, dt)
    run_kernel(kernel, args + [out])
    want = reference()
    tol = 1e-4 if target == "neon" else 3e-2
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol, atol=tol * (1 + np.abs(want).max()))


@pytest.mark.aarch64
def test_a_parallel_loop_runs_in_parts():
    """The outermost loop's iterations [start, end) in three calls, a partial last iteration in
    the last one (61 rows in blocks of 6)."""
    from loopstack.looptree.ir import Loop

    tree = matmul_tree(61, 40, 33, (("m", 6), ("n", 16), ("k", 1), ("m", 1), ("n", 1)))
    top = tree.body[0]
    tree = dataclasses.replace(tree, body=(Loop(top.var, top.dim, top.step, top.body, frozenset({"parallel"})),))
    rng = np.random.default_rng(7)
    A, B = rng.standard_normal((61, 33)).astype(np.float32), rng.standard_normal((33, 40)).astype(np.float32)
    C = np.zeros((61, 40), np.float32)
    run_kernel(compile(tree, target="neon"), [A, B, C], parts=3)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)


def test_the_largest_register_blocks_of_the_search_space_stay_in_registers():
    """The tuner's register blocks for neon (Target.block_registers accumulators) compile to one
    fmla destination per accumulator: no block of the search space spills."""
    from loopstack.isa.target import TARGETS
    from loopstack.tune.space import register_blocks

    for name in ("neon", "neon_fp16"):
        tgt = TARGETS[name]
        rows, vecs = max(register_blocks(tgt), key=lambda b: b[0] * b[1])
        lanes = tgt.lanes()
        tree = matmul_tree(rows, vecs * lanes, 16, (("m", rows), ("n", vecs * lanes), ("k", 1), ("m", 1), ("n", 1)))
        if name == "neon_fp16":
            tree = in_float16(tree)
        text = compile(tree, target=name).asm()
        dests = {line.split("fmla", 1)[1].split(",")[0].strip() for line in text.splitlines() if "fmla" in line}
        assert len(dests) == rows * vecs >= tgt.block_registers - 2, name


def test_the_analytical_model_reads_the_neon_targets():
    import loopstack as lt
    from loopstack.isa.target import TARGETS
    from loopstack.tune.cost import AnalyticalCost, Machine
    from loopstack.tune.space import Plan, realize

    s = lt.SymbolGenerator()
    a = np.ones((128, 128), np.float32)
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(a).to(s.k, s.n)).sum(s.k)
    base = C.loop_tree
    blocked = realize(base, Plan((("m", (6,)), ("k", ()), ("n", (16,))), ("n", "m", "k", "m'", "n'")))
    for name, peak in (("neon", 102.4), ("neon_fp16", 204.8)):     # Apple M1 at 3.2 GHz
        predicted = AnalyticalCost(Machine.of(TARGETS[name], peak)).predict([base, blocked])
        assert np.all(np.isfinite(predicted)) and predicted[1] > predicted[0] > 0


@pytest.mark.aarch64
@pytest.mark.parametrize("target", ["neon", "neon_fp16"])
def test_a_broadcast_second_operand_is_read_by_element(target):
    """y[n] = sum_k B[k, n] * a[k]: the broadcast is the product's second operand."""
    from loopstack.looptree.builders import access, make_tree, nest
    from loopstack.looptree.ir import Binary, Buffer, Compute, Load

    dt = "float16" if target == "neon_fp16" else "float32"
    bufs = [Buffer("B", dt, (9, 21), "input"), Buffer("a", dt, (9,), "input"), Buffer("y", dt, (21,), "output")]
    stmt = Compute("y", access("y", "n"), Binary("mul", Load(access("B", "k", "n")), Load(access("a", "k"))),
                   reduce="add", init="identity")
    tree = make_tree(bufs, {"k": 9, "n": 21}, nest([("n", 21), ("k", 1), ("n", 1)], stmt))
    kernel = compile(tree, target=target)
    assert ".s[0]" in kernel.asm() or ".h[0]" in kernel.asm()
    rng = np.random.default_rng(9)
    B, a = rng.standard_normal((9, 21)).astype(dt), rng.standard_normal(9).astype(dt)
    y = np.zeros(21, dt)
    run_kernel(kernel, [B, a, y])
    tol = 1e-5 if target == "neon" else 2e-2
    np.testing.assert_allclose(y, a.astype(np.float64) @ B.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.aarch64
def test_the_public_api_runs_native_neon_by_default():
    """On an AArch64 host, plain frontend code compiles for neon and runs it natively, never the
    interpreter (on x86 this test runs in the aarch64 stage, under qemu)."""
    import loopstack as lt
    from loopstack.backend.native import NativeKernel
    from loopstack.isa.target import host_arch

    if host_arch() != "aarch64":
        pytest.skip("needs an aarch64 host (on x86 the aarch64 stage runs it under qemu-aarch64)")
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((19, 23)).astype(np.float32), rng.standard_normal((23, 17)).astype(np.float32)
    s = lt.SymbolGenerator()
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    assert lt.default_target() == "native"
    np.testing.assert_allclose(C.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    kernel = C.compile()
    assert isinstance(kernel, NativeKernel) and kernel.target.name == "neon" and "fmla" in kernel.asm()


def test_the_frontend_passes_the_target_through():
    import loopstack as lt
    from loopstack.isa.target import host_arch

    s = lt.SymbolGenerator()
    a = np.ones((12, 20), np.float32)
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(a.T.copy()).to(s.k, s.n)).sum(s.k)
    for target in ("neon", "neon_fp16"):
        if target == "neon_fp16":
            C = (lt.Tensor(a.astype(np.float16)).to(s.m, s.k) * lt.Tensor(a.T.astype(np.float16)).to(s.k, s.n)).sum(s.k)
        for kernel in (C.compile(target=target), lt.compile(C, target=target)):
            assert kernel.target.name == target and "fmla" in kernel.asm() and kernel.flops == 2 * 12 * 12 * 20
    if host_arch() != "aarch64":
        with pytest.raises(UnsupportedError, match="cannot run"):
            C.numpy(target="neon_fp16")


def test_instruction_bytes_stop_before_the_literal_pool():
    from capstone import CS_ARCH_ARM64, CS_MODE_ARM, Cs

    kernel = compile(elementwise_tree((37,), ("exp",)), target="neon")     # constants in the pool
    (code,) = kernel.instruction_bytes()
    assert len(code) < len(kernel.code)
    insns = list(Cs(CS_ARCH_ARM64, CS_MODE_ARM).disasm(code, 0))
    assert sum(i.size for i in insns) == len(code) and insns[-1].mnemonic == "ret"


@pytest.mark.aarch64
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_a_requantized_float_quotient_on_neon(dtype):
    """ONNX QuantizeLinear's statement (Requant.of_float) on whole vectors of lanes: numpy's
    float32 arithmetic bit for bit; a lane tail of bytes is refused, and a network runs the
    layer as its host step instead (onnx/qlayers.NativeOrHost)."""
    from loopstack.errors import UnsupportedError
    from loopstack.onnx.qlayers import quantize_tree

    info = np.iinfo(dtype)
    rng = np.random.default_rng(2)
    s = rng.uniform(0.01, 0.05, 32).astype(np.float32)
    x = (rng.standard_normal((3, 32)) * 4).astype(np.float32)
    tree, consts = quantize_tree(dtype, (3, 32), s, 7, 1)
    y = np.zeros((3, 32), dtype)
    run_kernel(compile(tree, target="neon"), [x, *consts, y])
    np.testing.assert_array_equal(y, np.clip(np.rint(x / s) + 7, info.min, info.max).astype(dtype))
    with pytest.raises(UnsupportedError, match="tail"):
        compile(quantize_tree(dtype, (3, 37), np.float32(0.02), 7, None)[0], target="neon")


@pytest.mark.aarch64
@pytest.mark.parametrize("src, dst", [("float16", "float32"), ("float32", "float16"), ("int8", "float32"),
                                      ("int8", "float16")])
def test_neon_stores_a_result_in_the_dtype_astype_names(src, dst):
    """`.astype` on a GEMM's result: float16 operands' float32 sums stored as float32 (never
    rounded to float16), float32 sums stored as float16, int8 products summed exactly in int32
    and then converted (scvtf: as numpy's astype, rounded)."""
    import loopstack as lt

    rng = np.random.default_rng(2)
    if src == "int8":
        a, b = rng.integers(-128, 128, (24, 40)).astype(src), rng.integers(-128, 128, (40, 20)).astype(src)
    else:
        a, b = rng.standard_normal((24, 40)).astype(src), rng.standard_normal((40, 20)).astype(src)
    s = lt.SymbolGenerator()
    kernel = lt.compile((lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k).astype(dst), target="neon")
    out = np.zeros((24, 20), dst)
    run_kernel(kernel, [a, b, out])
    exact = a.astype(np.float64) @ b.astype(np.float64)
    if src == "int8":
        with np.errstate(over="ignore"):        # sums beyond float16's range: inf, as numpy's
            np.testing.assert_array_equal(out, exact.astype(np.int32).astype(np.float32).astype(dst))
    else:
        want = exact.astype(np.float32).astype(dst).astype(np.float64)
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-3 if dst == "float16" else 1e-6, atol=1e-5)


def test_a_conversion_aarch64_does_not_make_is_refused_by_name():
    import loopstack as lt

    s = lt.SymbolGenerator()
    bytes_ = lt.Tensor(np.ones((8, 8), np.int8)).to(s.m, s.n)
    with pytest.raises(UnsupportedError, match="converts int32 reads into a float32 statement, not int8"):
        lt.compile(bytes_.astype("float32"), target="neon")
    halves = lt.Tensor(np.ones((8, 8), np.float16)).to(s.m, s.n)
    with pytest.raises(UnsupportedError, match="neon_fp16 computes in float16 .* buffer %out is float32"):
        lt.compile(halves.exp().astype("float32"), target="neon_fp16")
