"""The x86 code generator feature by feature: register blocks, tails, math, parallel loops,
float16 storage, annotations, argument checks, AVX-512 emission."""
import dataclasses
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from strategies import random_case
from vector_math import MATH

from loopstack.backend import compile
from loopstack.backend.kernel_base import empty_aligned
from loopstack.backend.x86.compile import emit_x86
from loopstack.backend.nest import UNROLL_REDUCTION
from loopstack.errors import ArgumentError, ScheduleError, UnsupportedError
from loopstack.isa import cpu
from loopstack.isa.target import get_target
from loopstack.looptree.builders import access, elementwise_tree, make_tree, matmul_tree, nest
from loopstack.looptree.ir import Binary, Buffer, Compute, Load, Loop, LoopTree, Unary

from x86_decode import assert_decodes, decode_all

FEATURES = cpu.cpu_features()
pytestmark = pytest.mark.skipif(not {"avx2", "fma", "f16c"} <= FEATURES,
                                reason="CPU lacks AVX2/FMA/F16C: x86 kernels cannot run here")
needs_avx512 = pytest.mark.skipif(not {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= FEATURES,
                                  reason="CPU lacks AVX-512 (F/BW/VL/DQ): AVX-512 kernels cannot run here")

BLOCK_6x16 = (("n", 16), ("m", 6), ("k", 1), ("m", 1), ("n", 1))


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def matmul_args(M, N, K, dtype=np.float32):
    return rand(M, K, seed=1, dtype=dtype), rand(K, N, seed=2, dtype=dtype)


# -- register blocking ------------------------------------------------------------------
# (AVX2 code, whatever the host's widest target: the register counts below are AVX2's 16)


def _loop_body(listing: str, label: str) -> list[str]:
    lines = listing.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(label))
    end = next(i for i in range(start, len(lines)) if re.search(rf"\bjne {label[:-1]}\b", lines[i]))
    return lines[start + 1:end]


def test_6x16_block_keeps_twelve_accumulators_in_registers():
    kernel = compile(matmul_tree(96, 96, 96, BLOCK_6x16), target="avx2")
    body = _loop_body(kernel.asm(), "k0_top:")
    fmas = [line for line in body if "vfmadd231ps" in line]
    assert len(fmas) == 12 * UNROLL_REDUCTION                  # 6 rows x 2 vectors of 8 per k step
    assert len({re.search(r"vfmadd231ps (ymm\d+)", f).group(1) for f in fmas}) == 12
    stores = [line for line in body if re.search(r"vmovups \w+ ptr \[", line)]
    assert stores == []                                         # C is stored once, after the k loop
    assert not any("rsp" in line for line in body)              # nothing spilled to the stack
    A, B = matmul_args(96, 96, 96)
    np.testing.assert_allclose(kernel.run(A, B)[0], A @ B, rtol=1e-4, atol=1e-4)


def test_compile_cost_follows_instructions_not_sizes():
    small = compile(matmul_tree(96, 96, 96, BLOCK_6x16))
    large = compile(matmul_tree(1536, 1536, 96, BLOCK_6x16))
    assert len(small._segments[0][1]) == len(large._segments[0][1])


def test_unroll_limit_changes_code_not_results():
    tree = matmul_tree(20, 19, 13, (("m", 4), ("n", 8), ("k", 1), ("m", 1), ("n", 1)))
    rolled, unrolled = compile(tree, unroll_limit=0), compile(tree, unroll_limit=100000)
    assert len(unrolled._segments[0][1]) > len(rolled._segments[0][1])
    A, B = matmul_args(20, 19, 13)
    np.testing.assert_allclose(rolled.run(A, B)[0], unrolled.run(A, B)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ScheduleError, match="unroll_limit"):
        compile(tree, unroll_limit=-1)


@pytest.mark.parametrize("M,N,K", [(7, 13, 5), (1, 1, 1), (13, 29, 31), (6, 16, 1)])
def test_tails_everywhere(M, N, K):
    kernel = compile(matmul_tree(M, N, K, (("n", 16), ("m", 6), ("k", 4), ("k", 1), ("m", 1), ("n", 1))))
    A, B = matmul_args(M, N, K)
    np.testing.assert_allclose(kernel.run(A, B)[0], A @ B, rtol=1e-4, atol=1e-4)


def test_bias_and_post_ops_are_fused_into_the_block_store():
    tree = matmul_tree(12, 24, 16, BLOCK_6x16, bias=True, post="relu")
    kernel = compile(tree)
    A, B = matmul_args(12, 24, 16)
    bias = rand(24, seed=3)
    np.testing.assert_allclose(kernel.run(A, B, bias)[0], np.maximum(A @ B + bias, 0), rtol=1e-4, atol=1e-4)
    body = _loop_body(kernel.asm(), "k0_top:")
    assert not any("vmaxps" in line for line in body)          # relu after the reduction, not inside


def _accumulators(lines: list[str]) -> set[str]:
    return {re.search(r"vfmadd231ps (ymm\d+)", line).group(1) for line in lines if "vfmadd231ps" in line}


def _loop_bodies(listing: str, label: str) -> list[list[str]]:
    """The body of every loop labelled `label` (a label repeats in specialised tails)."""
    lines = listing.splitlines()
    bodies = []
    for start, line in enumerate(lines):
        if line.startswith(label):
            end = next(i for i in range(start, len(lines)) if re.search(rf"\bjne {label[:-1]}\b", lines[i]))
            bodies.append(lines[start + 1:end])
    return bodies


@pytest.mark.parametrize("K", [29, 3, 2])
def test_small_block_alternates_two_accumulator_sets(K):
    """A 2 x 16 block has 4 FMA chains, half of what the FMA latency needs: alternate k steps
    update a second set of 4, added into the first after the loop."""
    kernel = compile(matmul_tree(2, 16, K, (("n", 16), ("m", 2), ("k", 1), ("m", 1), ("n", 1))), target="avx2")
    A, B = matmul_args(2, 16, K)
    np.testing.assert_allclose(kernel.run(A, B)[0], A @ B, rtol=1e-4, atol=1e-4)
    if K >= 2 * UNROLL_REDUCTION:
        (body,) = _loop_bodies(kernel.asm(), "k0_top:")
        assert len(_accumulators(body)) == 8
        assert "vaddps" in kernel.asm()


def test_block_columns_beyond_the_free_registers_are_memory_operands():
    """A 3 x 32 block: 12 accumulators and a broadcast leave 3 registers for the 4 columns of B.
    Three columns stay in registers and the fourth is an FMA memory operand of every row:
    9 loads a k step, not a reload of every column for every row."""
    kernel = compile(matmul_tree(3, 32, 64, (("n", 32), ("m", 3), ("k", 1), ("m", 1), ("n", 1))), target="avx2")
    (body,) = _loop_bodies(kernel.asm(), "k0_top:")
    steps = UNROLL_REDUCTION
    assert sum("vfmadd231ps" in line for line in body) == 12 * steps
    assert sum("vbroadcastss" in line for line in body) == 3 * steps
    assert sum("vmovups" in line for line in body) == 3 * steps
    assert sum("vfmadd231ps" in line and "ptr" in line for line in body) == 3 * steps
    A, B = matmul_args(3, 32, 64)
    np.testing.assert_allclose(kernel.run(A, B)[0], A @ B, rtol=1e-4, atol=1e-4)


def test_row_tail_blocks_keep_their_reduction_loop():
    """7 rows in blocks of 4: the block of 4 and the tail of 3 each run their own k loop (with
    two accumulator sets). Blocking both row iterations at once would hold idle accumulators
    and, unrolled for them, unroll the whole k loop too."""
    kernel = compile(matmul_tree(7, 8, 64, (("n", 8), ("m", 4), ("k", 1), ("m", 1), ("n", 1))), target="avx2")
    bodies = _loop_bodies(kernel.asm(), "k0_top:")
    assert [len(_accumulators(b)) for b in bodies] == [8, 6]
    A, B = matmul_args(7, 8, 64)
    np.testing.assert_allclose(kernel.run(A, B)[0], A @ B, rtol=1e-4, atol=1e-4)


def _conv(h, c, k, order=None, seed=0):
    """An NHWC 3x3 convolution (pad 1) with the default schedule or `order` and packed weights."""
    import loopstack as lt
    from loopstack.frontend.mutate import copy_input
    from loopstack.tune.defaults import default_schedule
    from loopstack.workloads import conv_reference, conv_tensor

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((h, h, c)).astype(np.float32)
    w = (rng.standard_normal((3, 3, c, k)) / np.sqrt(9 * c)).astype(np.float32)
    s = lt.SymbolGenerator()
    Y = conv_tensor(lt.Tensor(x).to(s.h, s.w, s.c), lt.Tensor(w).to(s.r, s.s, s.c, s.k), s.c)
    if order is None:
        tree = default_schedule(Y)
    else:
        tree = Y.loop_tree
        sched = {}
        for n in tree.graph.nodes:
            if n.id in tree._sched:
                mine = order if n.op != "write" else tuple(e for e in order if e[0] not in "rsc")
                sched[n.id] = dataclasses.replace(tree._sched[n.id], order=mine)
        tree = tree._with(sched=sched)
        mult = next(n for n in tree.graph.nodes if n.op == "binary")
        tree = copy_input(tree, tree.ref_of(mult.id), 1)
    Y.set(tree)
    return Y, conv_reference(x, w)


def _compute_loops(kernel):
    """(vars of the loops around the multiply-accumulate, innermost last) of a lowered conv."""
    def find(node, stack):
        if isinstance(node, Loop):
            for child in node.body:
                got = find(child, stack + (node,))
                if got is not None:
                    return got
        elif isinstance(node, Compute) and node.reduce is not None:
            return stack
        return None

    return next(s for s in (find(n, ()) for n in kernel.lowered.body) if s is not None)


def test_taps_and_channels_of_a_row_run_as_one_loop():
    """With all channels in one tile, X[ow + s, c] and the packed W[r, s, c, k] walk one
    contiguous range along (s, c): the two loops run as one (one exit, one pointer reset)."""
    Y, want = _conv(8, 32, 32)
    kernel = Y.compile()
    np.testing.assert_allclose(Y.numpy(), want, rtol=1e-4, atol=1e-4)
    loops = {lp.dim: lp.var for lp in _compute_loops(kernel)}
    listing = kernel.asm()
    assert f"{loops['c']}_top:" in listing
    assert f"{loops['s']}_top:" not in listing and f"{loops['r']}_top:" in listing


def test_loops_move_only_the_pointers_their_statements_use():
    """The convolution's innermost loop reads X and the packed weights; the source weights
    (read by the packing nest only) are not advanced there."""
    order = (("k", 2, 0), ("oh", 8, 0), ("ow", 1, 2), ("r", 3, 0), ("s", 3, 0), ("c", 32, 0), ("ow", 6, 0),
             ("k", 16, 0))
    Y, want = _conv(8, 32, 32, order)
    kernel = Y.compile()
    np.testing.assert_allclose(Y.numpy(), want, rtol=1e-4, atol=1e-4)
    inner = _compute_loops(kernel)[-3]             # the channel loop around the (ow, k) block
    for body in _loop_bodies(kernel.asm(), f"{inner.var}_top:"):
        assert len([line for line in body if re.search(r"\badd r\w+, ", line)]) == 2


def test_nested_tails_keep_the_code_small():
    """7 rows in blocks of 4 under a panel loop whose tail is one vector: the tail block may
    hold all 7 rows in registers, but its reduction loops must stay loops (they were fully
    unrolled once: thousands of instructions and 70 ms to compile)."""
    order = (("c", 4, 0), ("k", 1, 8), ("oh", 7, 0), ("ow", 1, 3), ("r", 3, 0), ("s", 3, 0), ("c", 16, 0),
             ("ow", 4, 0), ("k", 24, 0))
    Y, want = _conv(7, 64, 32, order)
    kernel = Y.compile()
    np.testing.assert_allclose(Y.numpy(), want, rtol=1e-4, atol=1e-4)
    assert sum(len(asm) for _, asm, _ in kernel._segments) < 1500


# -- integer reads of float statements --------------------------------------------------

@pytest.mark.parametrize("target", [t for t, need in (("avx2", "avx2"), ("avx512", "avx512f")) if need in FEATURES])
@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32"])
@pytest.mark.parametrize("n", [5, 16, 37, 100])
def test_float_statements_convert_integer_reads_in_vector_lanes(target, dtype, n):
    """(x - 3) * s over integer x (a DequantizeLinear): vector loads widened and converted
    (vpmovzxbd ... vcvtdq2ps), masked or element-wise tails; numpy's float32 arithmetic."""
    from loopstack.looptree.builders import access, make_tree, nest
    from loopstack.looptree.ir import Binary, Buffer, Compute, Const, Load

    stmt = Compute("dq", access("y", "i", "j"),
                   Binary("mul", Binary("sub", Load(access("x", "i", "j")), Const(3)), Load(access("s", "j"))))
    tree = make_tree([Buffer("x", dtype, (3, n), "input"), Buffer("s", "float32", (n,), "input"),
                      Buffer("y", "float32", (3, n), "output")], {"i": 3, "j": n}, nest([("i", 1), ("j", 1)], stmt))
    info = np.iinfo(dtype)
    rng = np.random.default_rng(n)
    x = rng.integers(info.min, int(info.max) + 1, (3, n)).astype(dtype)
    s = rng.uniform(0.01, 2, n).astype(np.float32)
    kernel = compile(tree, target=target)
    assert "vcvtdq2ps" in kernel.asm() and ("ps " + ("zmm" if target == "avx512" else "ymm")) in kernel.asm()
    y = np.zeros((3, n), np.float32)
    kernel(x, s, y)
    np.testing.assert_array_equal(y, (x.astype(np.float32) - np.float32(3)) * s)


@pytest.mark.parametrize("target", [t for t, need in (("avx2", "avx2"), ("avx512", "avx512f")) if need in FEATURES]
                         + ["interp"])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("n", [5, 16, 37, 100])
def test_a_requantized_float_quotient_rounds_half_to_even_and_saturates(target, dtype, n):
    """y = saturate(round_half_even(x / s) + zp) (ONNX QuantizeLinear, Requant.of_float), with
    a per-column scale: ties, values past both bounds, vector tails; numpy's float32 arithmetic."""
    from loopstack.onnx.qlayers import quantize_tree

    info = np.iinfo(dtype)
    zp = 3 if dtype == "int8" else 128
    rng = np.random.default_rng(n)
    s = rng.uniform(0.01, 0.05, n).astype(np.float32)
    x = (rng.standard_normal((3, n)) * 4).astype(np.float32)
    k = min(n, 6)
    x[0, :k] = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1000.0], np.float32)[:k] * s[:k]
    tree, consts = quantize_tree(dtype, (3, n), s, zp, 1)
    kernel = compile(tree, target=target)
    y = np.zeros((3, n), dtype)
    kernel(x, *consts, y)
    np.testing.assert_array_equal(y, np.clip(np.rint(x / s) + zp, info.min, info.max).astype(dtype))


def test_a_requantized_float_value_is_an_assignment():
    from loopstack.errors import ScheduleError
    from loopstack.looptree.builders import access, make_tree, nest
    from loopstack.looptree.ir import Buffer, Compute, Const, Load, Requant

    stmt = Compute("q", access("y"), Load(access("x", "i")), reduce="add", init="identity",
                   requant=Requant(Const(1.0), 0, of_float=True))
    tree = make_tree([Buffer("x", "float32", (8,), "input"), Buffer("y", "int8", (1,), "output")], {"i": 8},
                     nest([("i", 1)], stmt))
    with pytest.raises(ScheduleError, match="assignment"):
        compile(tree, target="interp")


# -- element-wise math ------------------------------------------------------------------

@pytest.mark.parametrize("op", sorted(MATH))
def test_vector_math_accuracy(op):
    sample, ref, rtol, atol = MATH[op]
    x = sample(np.random.default_rng(4)).astype(np.float32)
    kernel = compile(elementwise_tree(x.shape, unary=(op,)))
    got = kernel.run(x)[0].astype(np.float64)
    want = ref(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# -- float16 storage ---------------------------------------------------------------------


@pytest.mark.parametrize("M,N,K", [(12, 32, 16), (7, 13, 9)])
def test_float16_storage_computes_in_float32(M, N, K):
    A, B = matmul_args(M, N, K, np.float16)
    C = compile(matmul_tree(M, N, K, BLOCK_6x16, dtype="float16")).run(A, B)[0]
    assert C.dtype == np.float16
    want = (A.astype(np.float32) @ B.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(C.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)


# -- parallel loops ----------------------------------------------------------------------


def _parallel_matmul(M, N, K):
    tree = matmul_tree(M, N, K, (("m", 6), ("n", 16), ("k", 1), ("m", 1), ("n", 1)))
    top = tree.body[0]
    return LoopTree(tree.buffers, tree.dims, (Loop(top.var, top.dim, top.step, top.body, frozenset({"parallel"})),))


def test_parallel_loop_matches_serial_exactly():
    kernel = compile(_parallel_matmul(61, 40, 33))
    A, B = matmul_args(61, 40, 33)
    C = np.zeros((61, 40), np.float32)
    kernel.threads = 1
    kernel(A, B, C)
    serial = C.copy()
    kernel.threads = 2              # the same arrays again: the argument cache must follow
    C[...] = 0
    kernel(A, B, C)
    parallel = C
    np.testing.assert_array_equal(serial, parallel)
    np.testing.assert_allclose(parallel, A @ B, rtol=1e-4, atol=1e-4)


class _CountingTeam:
    """Stands in for the process's thread team: records the thread count of each job handed to it."""

    def __init__(self):
        self.jobs = []

    def run(self, job):
        self.jobs.append(job.threads)
        job.run_here()


def test_thread_count_takes_effect_whenever_it_is_set(monkeypatch):
    """`kernel.threads` set after the first call changes the next call (the call prebuilt at the
    first call must not keep the thread count of that moment)."""
    from loopstack.backend import threads

    team = _CountingTeam()
    monkeypatch.setattr(threads, "team", lambda: team)
    kernel = compile(_parallel_matmul(61, 40, 33))
    A, B = matmul_args(61, 40, 33)
    C = np.zeros((61, 40), np.float32)
    kernel.threads = 1
    kernel(A, B, C)
    assert team.jobs == []
    kernel.threads = 3              # the same arrays: the prebuilt call must be rebuilt
    kernel(A, B, C)
    assert team.jobs == [3]
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)
    kernel.threads = 1
    kernel(A, B, C)
    assert team.jobs == [3]


def _run_in_child(kernel, A, B, conn):
    C = np.zeros((A.shape[0], B.shape[1]), np.float32)
    kernel(A, B, C)
    conn.send(C)


def test_a_forked_child_runs_parallel_kernels_on_threads_of_its_own():
    """The tuner forks its measuring workers: a child must not wait on the parent's pool threads,
    which do not exist in it."""
    import multiprocessing as mp

    kernel = compile(_parallel_matmul(61, 40, 33))
    kernel.threads = 2
    A, B = matmul_args(61, 40, 33)
    kernel.run(A, B)                # the parent's pool now has its threads
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_run_in_child, args=(kernel, A, B, child))
    p.start()
    try:
        assert parent.poll(30), "the child's parallel call never finished"
        np.testing.assert_allclose(parent.recv(), A @ B, rtol=1e-4, atol=1e-4)
    finally:
        p.kill()
        p.join()


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_thread_count_must_be_a_positive_integer(bad):
    kernel = compile(_parallel_matmul(8, 16, 8))
    with pytest.raises(ArgumentError, match="kernel.threads"):
        kernel.threads = bad


def test_parallel_reduction_loop_is_a_race_error():
    tree = matmul_tree(8, 8, 8, (("k", 1), ("m", 1), ("n", 1)))
    top = tree.body[0]
    racy = LoopTree(tree.buffers, tree.dims, (Loop(top.var, top.dim, top.step, top.body, frozenset({"parallel"})),))
    with pytest.raises(ScheduleError, match="would race"):
        compile(racy)


def test_parallel_inner_loop_is_an_error():
    tree = matmul_tree(8, 8, 8, (("m", 1), ("n", 1), ("k", 1)))
    top = tree.body[0]
    inner = top.body[0]
    bad = LoopTree(tree.buffers, tree.dims, (Loop(top.var, top.dim, top.step, (
        Loop(inner.var, inner.dim, inner.step, inner.body, frozenset({"parallel"})),)),))
    with pytest.raises(ScheduleError, match="outermost"):
        compile(bad)


def test_parallel_loop_gets_private_temps():
    """A temp used only inside the parallel loop is per thread: threads do not overwrite each other."""
    M, N = 64, 24
    bufs = [Buffer("X", "float32", (M, N), "input"), Buffer("T", "float32", (1, N), "temp"),
            Buffer("Y", "float32", (M, N), "output")]
    t_idx = (("m", 1), ("@m0", -1))
    produce = Compute("T", access("T", t_idx, "n"), Unary("exp", Load(access("X", "m", "n"))))
    consume = Compute("Y", access("Y", "m", "n"), Binary("mul", Load(access("T", t_idx, "n")),
                                                         Load(access("X", "m", "n"))))
    body = (nest([("n", 1)], produce, tag="a"), nest([("n", 1)], consume, tag="b"))
    tree = make_tree(bufs, {"m": M, "n": N}, Loop("m0", "m", 1, body, frozenset({"parallel"})))
    kernel = compile(tree)
    kernel.threads = 2
    X = rand(M, N)
    for _ in range(5):
        np.testing.assert_allclose(kernel.run(X)[0], np.exp(X) * X, rtol=1e-5, atol=1e-6)


# -- annotations and errors ------------------------------------------------------------------


def test_vectorize_annotation_on_a_strided_loop_is_an_error():
    tree = matmul_tree(8, 8, 8, (("m", 1), ("n", 1), ("k", 1)))
    m, n, k = tree.body[0], tree.body[0].body[0], tree.body[0].body[0].body[0]
    bad = LoopTree(tree.buffers, tree.dims, (Loop(m.var, m.dim, m.step, (Loop(n.var, n.dim, n.step, (
        Loop(k.var, k.dim, k.step, k.body, frozenset({"vectorize"})),)),)),))
    # k is innermost and A is unit-stride along it, but B is strided (stride 8) along k
    with pytest.raises(ScheduleError, match="cannot be vectorized"):
        compile(bad)


def test_bad_arrays_are_clear_errors():
    kernel = compile(matmul_tree(8, 8, 8))
    A, B = matmul_args(8, 8, 8)
    C = np.zeros((8, 8), np.float32)
    with pytest.raises(ArgumentError, match="dtype float64"):
        kernel(A.astype(np.float64), B, C)
    with pytest.raises(ArgumentError, match="shape"):
        kernel(A[:4], B, C)
    with pytest.raises(ArgumentError, match="not laid out"):
        kernel(np.asfortranarray(A), B, C)
    with pytest.raises(ArgumentError, match="not writable"):
        C.flags.writeable = False
        kernel(A, B, C)
    with pytest.raises(ArgumentError, match="overlaps"):
        kernel(A, B, A)
    with pytest.raises(ArgumentError, match="takes 3"):
        kernel(A, B)


def test_integer_programs_compile_natively_and_match_the_interpreter():
    tree = matmul_tree(5, 7, 6, dtype="int8")        # 7 columns: no whole vector, scalar int code
    rng = np.random.default_rng(3)
    A, B = (rng.integers(-128, 128, s).astype(np.int8) for s in ((5, 6), (6, 7)))
    out = tree.buffer("C").dtype
    got, want = np.zeros((5, 7), out), np.zeros((5, 7), out)
    compile(tree)(A, B, got)
    compile(tree, target="interp")(A, B, want)
    np.testing.assert_array_equal(got, want)


def test_a_target_the_cpu_lacks_fails_before_any_code_runs():
    if "avx512f" in FEATURES:
        pytest.skip("this CPU has AVX-512")
    with pytest.raises(UnsupportedError, match="avx512f"):
        compile(matmul_tree(8, 8, 8), target="avx512")


def test_aligned_buffers():
    a = empty_aligned((3, 5), np.float32)
    assert a.ctypes.data % 64 == 0 and a.flags.c_contiguous and not a.any()


# -- AVX-512 --------------------------------------------------------------------------------

AVX512 = get_target("avx512", check=False)


@settings(max_examples=60)
@given(random_case())
def test_avx512_code_decodes(case):
    """Emitted for AVX-512 (no execution needed): every instruction decodes with iced-x86."""
    assume(not any(b.dtype in ("int8", "uint8", "int32") for b in case.tree.buffers))
    _, _, segments, _ = emit_x86(case.tree, AVX512)
    for asm, _ in segments:
        decode_all(asm.bytes()[:asm.code_size])


def test_avx512_block_uses_zmm_and_masks():
    _, _, segments, _ = emit_x86(matmul_tree(24, 40, 16, (("n", 32), ("m", 12), ("k", 1), ("m", 1), ("n", 1))), AVX512)
    text = segments[0][0].listing()
    assert "zmm2" in text and "vfmadd231ps zmm" in text
    assert "{k" in text                                       # the 40 = 32 + 8 tail uses an opmask
    assert len(re.findall(r"vfmadd231ps zmm\d+, zmm\d+, (zmm\d+|zmmword)", text)) >= 24


@needs_avx512
@settings(max_examples=80)
@given(random_case())
def test_avx512_random_trees_match_numpy(case):
    from strategies import check_case
    assume(not any(b.dtype in ("int8", "uint8", "int32") for b in case.tree.buffers))
    kernel = compile(case.tree, target="avx512")
    inputs = case.make_inputs(np.random.default_rng(0))
    check_case(case, inputs, kernel.run(*inputs))
    assert_decodes(kernel)


@needs_avx512
def test_avx512_matmul_and_math():
    A, B = matmul_args(37, 45, 29)
    kernel = compile(matmul_tree(37, 45, 29, (("n", 32), ("m", 12), ("k", 1), ("m", 1), ("n", 1)), post="gelu"),
                     target="avx512")
    x = A @ B
    want = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(kernel.run(A, B)[0], want, rtol=1e-4, atol=1e-4)


# -- prefetch of streamed weight tiles ------------------------------------------------------
@pytest.mark.parametrize("name", ["CONV-3", "CONV-4"])
def test_convolutions_that_prefetch_their_next_weight_tile_compute_the_same(name):
    """Weights from beyond L2 are prefetched a tile ahead (backend.prefetch); the prefetches
    decode, and the kernel's results match numpy's. (AVX2 code for Zen 3's caches, whose 512 KiB
    L2 makes the default tile the channels: a 2 MiB L2 streams whole panels instead; and for a
    core that prefetches such tiles in software, as the default schedules take a Xeon's.)"""
    from loopstack.frontend.run import program
    from loopstack.isa.target import TARGETS
    from loopstack.tune.defaults import default_schedule
    from loopstack.workloads import get_workload

    zen3 = TARGETS["avx2"]
    tgt = dataclasses.replace(get_target("avx2"), l1d=zen3.l1d, l2=zen3.l2, l3=zen3.l3, streams_prefetched=False)
    Y, reference = get_workload(name).build(seed=0)
    kernel = compile(default_schedule(Y, tgt).lower(), target=tgt)
    assert "prefetcht0" in kernel.asm()
    assert_decodes(kernel)
    out = empty_aligned(Y.shape, np.float32)
    kernel(*[r.data for r in program(Y).reads], out)
    np.testing.assert_allclose(out, reference(), rtol=1e-4, atol=1e-4)


def test_a_dense_layer_that_prefetches_its_next_weight_panel_computes_the_same():
    """A layer's weights beyond L2 (768 x 768 here: 2.25 MiB), packed in panels that each pass
    over the one before prefetches; with a bias, four access streams and the prefetch pointer
    share the general registers with the loop counters. The results match numpy's."""
    import loopstack as lt
    from loopstack.tune.defaults import default_schedule

    # the cache geometry pinned (a 48 KiB L1 takes 12 KiB panels; a Zen's 32 KiB one takes
    # 6 KiB panels, which load in a few hundred cycles and are not prefetched)
    tgt = dataclasses.replace(get_target(None), l1d=48 << 10, l2=2 << 20, cores=1)
    x, w, b = rand(128, 768, seed=1), rand(768, 768, seed=2), rand(768, seed=3)
    s = lt.SymbolGenerator()
    Y = (lt.Tensor(x).to(s.m, s.k) * lt.Tensor(w, constant=True).to(s.k, s.n)).sum(s.k) \
        + lt.Tensor(b, constant=True).to(s.n)
    kernel = compile(default_schedule(Y, tgt).lower(), target=tgt)
    assert "prefetcht0" in kernel.asm()
    assert_decodes(kernel)
    (out,) = kernel.run(x, w, b)
    np.testing.assert_allclose(out, x @ w + b, rtol=1e-4, atol=1e-3)


def test_a_strided_convolution_whose_row_blocks_are_whole_rows_prefetches_and_computes_the_same():
    """ResNet-18's 3x3/2 convolution to 7 x 7 x 512 (4.5 MiB of weights): whole 7-pixel rows
    per block, a block-row loop of one iteration among the pass loops of its prefetch."""
    import loopstack as lt
    from loopstack.frontend.run import program
    from loopstack.tune.defaults import default_schedule
    from loopstack.workloads import conv_reference, conv_tensor

    tgt = dataclasses.replace(get_target(None), l2=2 << 20, cores=1, streams_prefetched=False)
    x, w = rand(14, 14, 256, seed=1), rand(3, 3, 256, 512, seed=2) * np.float32(0.05)
    s = lt.SymbolGenerator()
    Y = conv_tensor(lt.Tensor(x).to(s.h, s.w, s.c), lt.Tensor(w, constant=True).to(s.kr, s.ks, s.c, s.k), s.c,
                    stride=2)
    kernel = compile(default_schedule(Y, tgt).lower(), target=tgt)
    assert "prefetcht0" in kernel.asm()
    out = empty_aligned(Y.shape, np.float32)
    kernel(*[r.data for r in program(Y).reads], out)
    np.testing.assert_allclose(out, conv_reference(x, w, stride=2), rtol=1e-4, atol=1e-3)


@needs_avx512
def test_opmasks_set_before_a_loop_survive_the_tails_inside_it():
    """A block's 3-lane mask is set up before its reduction loops; a 1-lane channel tail inside
    them must take another opmask register, not overwrite the one the next trip reads."""
    from loopstack.looptree.builders import depthwise_conv2d_tree

    order = [("c", 5), ("oh", 1), ("s", 2), ("ow", 2), ("ow", 1), ("r", 1), ("c", 2), ("s", 1), ("c", 1)]
    tree = depthwise_conv2d_tree(5, 2, 10, 2, 2, order=order)
    X, W = rand(2, 10, 5, seed=1), rand(2, 2, 5, seed=2)
    (Y,) = compile(tree, target="avx512", unroll_limit=0).run(X, W)
    want = sum(X[r:r + 1, s:s + 9] * W[r, s] for r in range(2) for s in range(2))
    np.testing.assert_allclose(Y, want, rtol=1e-5, atol=1e-5)
