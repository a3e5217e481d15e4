"""The `tensorize` action naming a tile entry (AMX): the schedule's block loops kept, the rest refused.

Random schedules of random int8 matmuls — the output's rows and columns split into whole tiles
in either order, a tile block within the tile registers, the outermost loop parallel or not —
compile onto tile blocks of the named entry and equal numpy's int32 arithmetic bit for bit. A
schedule the tile block cannot keep (a split that is no whole tile, a split reduction, a block
larger than the tile registers, an unrolled loop) is refused at the action, naming the loop,
so that a schedule never fails only when compiled. Everything compiled needs a CPU with AMX
and Linux's grant of the tile state; elsewhere the refusal names the missing features.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import loopstack as lt
from loopstack.backend.tensorize import apply
from loopstack.backend.tensorize.scheduled import tile_limits
from loopstack.errors import ScheduleError
from loopstack.isa import cpu
from loopstack.isa.target import get_target, host_target
from int8_programs import ints

PAIRS = {("uint8", "int8"): "amx.tdpbusd", ("int8", "int8"): "amx.tdpbssd",
         ("int8", "uint8"): "amx.tdpbsud", ("uint8", "uint8"): "amx.tdpbuud"}


def has_tiles() -> bool:
    return bool(apply.tile_instructions(get_target("avx512", check=False))) \
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= cpu.cpu_features() else False


def needs_tiles():
    if not {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= cpu.cpu_features():
        pytest.skip("AMX kernels compile for the avx512 target; this CPU has no AVX-512")
    granted, why = cpu.amx_permission()
    if not granted:
        pytest.skip(why)
    if lt.default_target() == "interp" or host_target().name != "avx512":
        pytest.skip("the action checks the schedule by compiling for this host's target, here not avx512")


def program(M, N, K, pair=("uint8", "int8"), seed=0):
    rng = np.random.default_rng(seed)
    s = lt.SymbolGenerator()
    a, b = ints(rng, pair[0], (M, K)), ints(rng, pair[1], (K, N))
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    return C, a.astype(np.int32) @ b.astype(np.int32)


def scheduled(C, order):
    tree = C.loop_tree
    for n in tree.graph.nodes:
        if n.op in ("binary", "reduce") and set(tree.graph.domain(n)) == {"m", "n", "k"}:
            tree = tree.set_order(n.id, order)
    return tree


def split(var, size, step):
    """The order entries of `var` in blocks of `step` elements, then one element at a time (one
    loop where a block covers it)."""
    if size <= step:
        return [(var, size, 0)], []
    return [(var, size // step, size % step)], [(var, step, 0)]


def contraction(tree):
    return tree.ref_of(next(n.id for n in tree.graph.nodes if n.op == "reduce"))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_tile_schedules_are_exact(data):
    needs_tiles()
    rows_max, cols_max, acc_max = tile_limits()
    M, N, K = (data.draw(st.integers(1, 80), d) for d in "MNK")
    pair = data.draw(st.sampled_from(sorted(PAIRS)), "pair")
    C, ref = program(M, N, K, pair, seed=data.draw(st.integers(0, 99)))
    rows = data.draw(st.integers(1, rows_max), "block rows")
    cols = data.draw(st.integers(1, min(cols_max, acc_max // rows)), "block cols")
    mo, mi = split("m", M, 16 * rows)
    no, ni = split("n", N, 16 * cols)
    outer = mo + no if data.draw(st.booleans(), "rows outermost") else no + mo
    tree = scheduled(C, outer + [("k", K, 0)] + mi + ni)
    request = data.draw(st.sampled_from(["amx", PAIRS[pair]]), "request")
    tree = tree.tensorize(contraction(tree), request)
    if data.draw(st.booleans(), "parallel"):
        tree = tree.annotate(0, "parallel")
    kernel = tree.compile()
    assert kernel.tensorized == PAIRS[pair]
    C.set(tree)
    np.testing.assert_array_equal(C.numpy(), ref)


def test_the_schedules_block_loops_are_kept():
    needs_tiles()
    C, ref = program(80, 64, 100)
    tree = scheduled(C, [("n", 2, 0), ("m", 2, 16), ("k", 100, 0), ("m", 32, 0), ("n", 32, 0)])
    tree = tree.tensorize(contraction(tree), "amx.tdpbusd").annotate(0, "parallel")
    kernel = tree.compile()
    (stack, _), = [(s_, c) for s_, c in kernel.lowered.computes() if c.reduce == "add"]
    # n by 2 tiles (parallel), m by 2 tiles, the whole reduction, one tile row and column
    assert [(lp.dim, lp.step) for lp in stack] == [("nt", 2), ("mt", 2), ("kt", 1), ("mt", 1), ("nt", 1)]
    assert "parallel" in stack[0].annotations
    for threads in (1, 2):
        kernel.threads = threads
        C.set(tree)
        np.testing.assert_array_equal(C.numpy(), ref)


def test_an_unsplit_schedule_runs_the_compiles_own_blocks():
    """The action on the program's own loops: the same code as the compile without it (the one
    the tuner must never fall behind)."""
    needs_tiles()
    C, ref = program(100, 48, 96)
    tree = C.loop_tree
    plain = tree.compile()
    asked = tree.tensorize(contraction(tree), "amx").compile()
    assert plain.tensorized == asked.tensorized == "amx.tdpbusd"
    assert asked.lowered == plain.lowered and asked.code == plain.code


@pytest.mark.parametrize("order,why", [
    ([("m", 10, 0), ("n", 4, 0), ("k", 64, 0), ("m", 8, 0), ("n", 16, 0)],
     r"loop L0 over m steps by 8, not a multiple of amx.tdpbusd's 16 tile rows"),
    ([("m", 5, 0), ("n", 4, 0), ("k", 16, 0), ("k", 4, 0), ("m", 16, 0), ("n", 16, 0)],
     r"loop L2 over k steps by 4; a tile block \(amx.tdpbusd\) runs the whole reduction"),
    ([("m", 1, 0), ("n", 1, 0), ("k", 64, 0), ("m", 80, 0), ("n", 64, 0)],
     r"loop L0 over m steps by 80: a block of 5 tile rows; amx.tdpbusd's blocks hold at most \d"),
])
def test_what_a_tile_block_cannot_keep_is_refused_naming_the_loop(order, why):
    needs_tiles()
    C, _ = program(80, 64, 64)
    tree = scheduled(C, order)
    with pytest.raises(ScheduleError, match=why):
        tree.tensorize(contraction(tree), "amx.tdpbusd")


def test_an_unrolled_loop_is_refused_and_the_schedule_kept():
    needs_tiles()
    C, _ = program(64, 64, 64)
    tree = scheduled(C, [("m", 2, 0), ("n", 2, 0), ("k", 64, 0), ("m", 32, 0), ("n", 32, 0)]).annotate(1, "unroll")
    with pytest.raises(ScheduleError, match=r"loop L1 over n is unroll; a tile block \(amx.tdpbusd\) keeps only"):
        tree.tensorize(contraction(tree), "amx.tdpbusd")


def _qconv(order):
    from loopstack.looptree.builders import conv2d_tree
    from loopstack.looptree.ir import LoopTree, replace

    t = conv2d_tree(2, 64, 6, 7, 32, 3, 3, padding=1, layout="NHWC", order=order)
    bufs = tuple(replace(b, dtype={"X": "uint8", "Wt": "int8", "Y": "int32"}[b.name]) for b in t.buffers)

    def ask(node):
        if hasattr(node, "body"):
            return replace(node, body=tuple(ask(n) for n in node.body))
        return replace(node, tensorize="amx.tdpbusd")
    return LoopTree(bufs, t.dims, tuple(ask(n) for n in t.body))


def test_a_convolution_keeps_the_parallel_loop_and_refuses_splits():
    """A tile convolution's rows are output pixels on the input's grid, which no loop of the
    schedule indexes: its parallel loop is kept, a split refused naming the loop."""
    needs_tiles()
    from loopstack.backend import compile as backend_compile
    from loopstack.looptree.ir import Loop

    names = ("n", "oh", "ow", "r", "s", "c", "k")
    rng = np.random.default_rng(2)
    x, w = ints(rng, "uint8", (2, 6, 7, 64)), ints(rng, "int8", (3, 3, 64, 32))
    xp = np.pad(x.astype(np.int32), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = sum(np.einsum("nhwc,co->nhwo", xp[:, i:i + 6, j:j + 7], w[i, j].astype(np.int32))
               for i in range(3) for j in range(3))
    tree = _qconv([("n", 1, ("parallel",))] + [(d, 1) for d in names[1:]])
    kernel = backend_compile(tree, target="avx512")
    assert kernel.tensorized == "amx.tdpbusd"
    assert any(isinstance(n, Loop) and "parallel" in n.annotations for n in kernel.lowered.body)
    got = np.zeros((2, 6, 7, 32), np.int32)
    kernel(x, w, got)
    np.testing.assert_array_equal(got, want)
    split = _qconv([(d, 1) for d in names[:-1]] + [("k", 16), ("k", 1)])
    with pytest.raises(ScheduleError, match=r"over k steps by 16; a tile convolution \(amx.tdpbusd\) blocks"):
        backend_compile(split, target="avx512")


def test_without_amx_the_request_names_the_missing_features(monkeypatch):
    """Where the CPU (or Linux) gives no tile state, naming a tile entry is refused with why."""
    if not {"avx2"} <= cpu.cpu_features() or lt.default_target() == "interp":
        pytest.skip("needs an x86 vector target to check the request against")
    monkeypatch.setattr(cpu, "amx_permission", lambda: (False, "arch_prctl refused (test)"))
    C, _ = program(32, 32, 96)                # a shape no test above compiles (none is cached)
    tree = C.loop_tree
    with pytest.raises(ScheduleError, match=r"amx.tdpbusd: .* code cannot use it \(needs amx_int8, amx_tile\)"):
        tree.tensorize(contraction(tree), "amx.tdpbusd")


def test_an_edit_after_the_request_that_tiles_cannot_keep_is_refused():
    """Every later action is checked against the request: the schedule never holds a tile
    request it would fail to compile."""
    needs_tiles()
    C, ref = program(64, 64, 128)
    tree = C.loop_tree.tensorize(contraction(C.loop_tree), "amx")
    with pytest.raises(ScheduleError, match=r"over k steps by \d+; a tile block \(amx.tdpbusd\) runs the whole"):
        tree.split(1, 64)                     # L1: the reduction
    with pytest.raises(ScheduleError, match=r"over m steps by 8, not a multiple of amx.tdpbusd's 16 tile rows"):
        tree.split(0, 8)
    tree = tree.split(0, 32)                  # m by 2 tiles: kept
    C.set(tree)
    np.testing.assert_array_equal(C.numpy(), ref)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_schedule_is_refused_at_the_action_or_compiles_exactly(data):
    """Arbitrary splits of every loop (any step, the reduction too) in any order above the
    reduction: the request is refused at the action, or the schedule compiles on tiles and is exact."""
    needs_tiles()
    M, N, K = (data.draw(st.integers(2, 70), d) for d in "MNK")
    C, ref = program(M, N, K, seed=data.draw(st.integers(0, 99)))
    inner, outer = [], []
    for var, size in (("m", M), ("n", N), ("k", K)):
        step = data.draw(st.sampled_from([1, 16, 32, 1, 16, 32, 4, 8, 48, 64]), f"{var} step")
        o, i = split(var, size, step) if step > 1 else ([(var, size, 0)], [])
        outer += o
        inner += i
    outer = data.draw(st.permutations(outer), "outer order")
    tree = scheduled(C, list(outer) + inner)
    try:
        tree = tree.tensorize(contraction(tree), "amx")
    except ScheduleError as e:
        assert "tensorize" in str(e) and ("loop L" in str(e) or "steps by" in str(e)), str(e)
        return
    kernel = tree.compile()
    assert kernel.tensorized == "amx.tdpbusd"
    C.set(tree)
    np.testing.assert_array_equal(C.numpy(), ref)
