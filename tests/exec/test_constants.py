"""Constant inputs: a staged copy of a constant (packed weights) is hoisted out of the loops that
tile it, built once per weight array, and read tile by tile; every result still matches numpy."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopstack as lt
from loopstack.backend import compile
from loopstack.backend.constants import hoist_constant_packs
from loopstack.frontend.mutate import copy_input, set_order
from loopstack.frontend.run import program
from loopstack.isa import cpu
from loopstack.looptree.builders import access, make_tree, nest
from loopstack.looptree.ir import Binary, Buffer, Compute, Load, Loop, statements
from loopstack.looptree.verify import verify
from loopstack.workloads import conv_reference, conv_tensor

needs_avx2 = pytest.mark.skipif("avx2" not in cpu.cpu_features() or "fma" not in cpu.cpu_features(),
                                reason="CPU lacks AVX2/FMA: x86 kernels cannot run here")


def _conv(C, K, H, W_array=None, constant=True, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((H, H, C)).astype(np.float32)
    Wt = rng.standard_normal((3, 3, C, K)).astype(np.float32) if W_array is None else W_array
    s = lt.SymbolGenerator()
    weights = lt.Tensor(Wt, constant=constant)
    Y = conv_tensor(lt.Tensor(X).to(s.h, s.w, s.c), weights.to(s.kr, s.ks, s.c, s.k), s.c)
    _conv.weights = weights
    return Y, X, Wt


def _packed_conv_schedule(Y, C, K, H, ct, kt, mr):
    """c(ct) k(kt) oh ow(mr) r s c ow k, the weights staged per (c, k) tile."""
    tree = Y.loop_tree
    g = tree.graph
    order = [("c", C // ct, C % ct), ("k", K // kt, K % kt), ("oh", H, 0), ("ow", H // mr, H % mr),
             ("r", 3, 0), ("s", 3, 0), ("c", ct, 0), ("ow", mr, 0), ("k", kt, 0)]
    for n in g.nodes:
        if n.id in tree._sched and n.op in ("binary", "reduce"):
            tree = set_order(tree, n.id, order)
        elif n.id in tree._sched and n.op == "write":
            tree = set_order(tree, n.id, [e for e in order if e[0] not in ("r", "s", "c")])
    mult = next(n for n in g.nodes if n.op == "binary")
    weights = next(i for i, x in enumerate(mult.inputs) if "k" in g.node(x).vars)
    return copy_input(tree, tree.ref_of(mult.id), weights)


def _run(Y, kernel):
    out = np.zeros(Y.shape, np.float32)
    kernel(*[r.data for r in program(Y).reads], out)
    return out


@st.composite
def packed_convs(draw):
    C, K, H = draw(st.integers(1, 12)), draw(st.integers(1, 20)), draw(st.integers(1, 6))
    return C, K, H, draw(st.integers(1, C)), draw(st.integers(1, K)), draw(st.integers(1, H))


@settings(max_examples=25, deadline=None)
@given(packed_convs())
def test_hoisted_packs_compute_what_the_per_tile_packs_compute(shape):
    """Any tiling, tails included: the hoisted tree verifies, runs its copy in a nest of its own
    ahead of the program, and the interpreter gets the same result from both trees."""
    C, K, H, ct, kt, mr = shape
    Y, X, Wt = _conv(C, K, H)
    ir = _packed_conv_schedule(Y, C, K, H, ct, kt, mr).lower()
    hoisted, once = hoist_constant_packs(ir)
    verify(hoisted)
    assert once == 1
    assert [s.is_copy for s in statements(hoisted.body[0])] == [True]
    assert not any(s.is_copy for n in hoisted.body[1:] for s in statements(n))
    want = conv_reference(X, Wt)
    for tree in (ir, hoisted):
        np.testing.assert_allclose(compile(tree, target="interp").run(X, Wt)[0], want, rtol=1e-4, atol=1e-4)


@needs_avx2
@settings(max_examples=25, deadline=None)
@given(packed_convs())
def test_x86_kernels_with_constant_weights_match_numpy(shape):
    C, K, H, ct, kt, mr = shape
    Y, X, Wt = _conv(C, K, H)
    kernel = compile(_packed_conv_schedule(Y, C, K, H, ct, kt, mr).lower())
    np.testing.assert_allclose(_run(Y, kernel), conv_reference(X, Wt), rtol=1e-4, atol=1e-4)


def test_packed_tiles_lie_one_after_another_in_loop_order():
    """The widened buffer: one leading dimension per tiling loop, indexed by the loop's offset,
    its stride the tile size over the step (11 k tiles of 48 under each of 32 c tiles)."""
    Y, _, _ = _conv(512, 512, 7)
    hoisted, _ = hoist_constant_packs(_packed_conv_schedule(Y, 512, 512, 7, 16, 48, 2).lower())
    temp = hoisted.temps[0]
    tile = 3 * 3 * 16 * 48
    assert temp.shape == (31 * 16 + 1, 10 * 48 + 1, 3, 3, 16, 48)
    assert temp.strides[:2] == (11 * tile // 16, tile // 48)
    assert temp.size == 32 * 11 * tile
    assert hoisted.buffer("in1").constant and not hoisted.buffer("in0").constant


@needs_avx2
def test_the_kernel_packs_again_for_another_weight_array():
    C, K, H = 8, 24, 5
    Y, X, W1 = _conv(C, K, H)
    kernel = compile(_packed_conv_schedule(Y, C, K, H, 4, 16, 2).lower())
    assert len(kernel._once) == 1
    W2 = np.random.default_rng(7).standard_normal(W1.shape).astype(np.float32)
    for Wt in (W1, W2, W1):
        out = np.zeros(Y.shape, np.float32)
        kernel(X, Wt, out)
        np.testing.assert_allclose(out, conv_reference(X, Wt), rtol=1e-4, atol=1e-4)


@needs_avx2
def test_bound_calls_keep_their_own_packed_weights():
    """Two calls of one kernel bound to different weights (two layers of one shape), run in
    turn: each packed its weights into intermediates of its own, so neither sees the other's."""
    C, K, H = 8, 24, 5
    Y, X, W1 = _conv(C, K, H)
    kernel = compile(_packed_conv_schedule(Y, C, K, H, 4, 16, 2).lower())
    W2 = np.random.default_rng(7).standard_normal(W1.shape).astype(np.float32)
    outs = [np.zeros(Y.shape, np.float32) for _ in range(2)]
    calls = [kernel.bind(X, Wt, out) for Wt, out in zip((W1, W2), outs)]
    for call in calls + calls[::-1]:
        for out in outs:
            out[...] = 0
        call()
        done = calls.index(call)
        np.testing.assert_allclose(outs[done], conv_reference(X, (W1, W2)[done]), rtol=1e-4, atol=1e-4)
        assert not outs[1 - done].any()


@needs_avx2
def test_a_bound_call_still_runs_after_its_kernel_is_closed():
    """The kernel's own call refuses once closed; a call prepared before keeps its code mapped."""
    C, K, H = 8, 24, 5
    Y, X, W1 = _conv(C, K, H)
    kernel = compile(_packed_conv_schedule(Y, C, K, H, 4, 16, 2).lower())
    out = np.zeros(Y.shape, np.float32)
    call = kernel.bind(X, W1, out)
    kernel.close()
    with pytest.raises(lt.LoopstackError, match="closed"):
        kernel(X, W1, out)
    with pytest.raises(lt.LoopstackError, match="closed"):
        kernel.bind(X, W1, out)
    call()
    np.testing.assert_allclose(out, conv_reference(X, W1), rtol=1e-4, atol=1e-4)


@needs_avx2
def test_a_bound_call_checks_its_arrays_once_up_front():
    C, K, H = 8, 24, 5
    Y, X, W1 = _conv(C, K, H)
    kernel = compile(_packed_conv_schedule(Y, C, K, H, 4, 16, 2).lower())
    with pytest.raises(lt.ArgumentError, match="shape"):
        kernel.bind(X[:-1], W1, np.zeros(Y.shape, np.float32))


@needs_avx2
def test_frontend_results_follow_a_rebound_constant():
    """`.numpy()` with a constant rebound to new data: the kernel sees another array and repacks."""
    C, K, H = 8, 24, 5
    Y, X, W1 = _conv(C, K, H)
    Y.set(_packed_conv_schedule(Y, C, K, H, 4, 16, 2))
    np.testing.assert_allclose(Y.numpy(), conv_reference(X, W1), rtol=1e-4, atol=1e-4)
    weights = _conv.weights
    W2 = np.random.default_rng(3).standard_normal(W1.shape).astype(np.float32)
    weights.set(W2)
    np.testing.assert_allclose(Y.numpy(), conv_reference(X, W2), rtol=1e-4, atol=1e-4)


def test_without_constant_inputs_nothing_is_hoisted():
    C, K, H = 8, 24, 5
    Y, _, _ = _conv(C, K, H, constant=False)
    ir = _packed_conv_schedule(Y, C, K, H, 4, 16, 2).lower()
    assert hoist_constant_packs(ir) == (ir, 0)


def _copy_under(order_outer, tshape, tindex):
    """%T = copy of constant %W under loops `order_outer`; %C[m, n] += %A[m, k] * %T[...]."""
    M, N, K = 6, 16, 8
    bufs = [Buffer("A", "float32", (M, K), "input"), Buffer("W", "float32", (K, N), "input", constant=True),
            Buffer("T", "float32", tshape, "temp"), Buffer("C", "float32", (M, N), "output")]
    cp = Compute("T", access("T", *tindex), Load(access("W", "k", "n")))
    mm = Compute("C", access("C", "m", "n"), Binary("mul", Load(access("A", "m", "k")), Load(access("T", *tindex))),
                 reduce="add", init="identity")
    body = nest(order_outer, (nest([("k", 1), ("n", 1)], cp, tag="p"), nest([("m", 1), ("k", 1), ("n", 1)], mm, tag="c")),
                names=[f"o{i}" for i in range(len(order_outer))])
    return make_tree(bufs, {"m": M, "n": N, "k": K}, body)


def test_loops_the_copy_does_not_use_are_left_out_of_the_hoisted_nest():
    """A full-size copy repeated under a loop over m (which it does not read) runs once."""
    tree = _copy_under([("m", 2)], (8, 16), ("k", "n"))
    hoisted, once = hoist_constant_packs(tree)
    verify(hoisted)
    assert once == 1 and hoisted.body[0].dim == "k"
    rng = np.random.default_rng(0)
    A, Wt = rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((8, 16)).astype(np.float32)
    for t in (tree, hoisted):
        np.testing.assert_allclose(compile(t, target="interp").run(A, Wt)[0], A @ Wt, rtol=1e-5, atol=1e-5)


def test_a_tile_read_after_its_loop_keeps_the_copy_in_place():
    """A reader after the tiling loop sees the last tile: hoisting would leave it no tile to
    name, so the copy stays where it is."""
    tree = _copy_under([("n", 8)], (8, 8), ("k", ("n", ("@o0", -1))))
    after = Compute("D", access("D", "m", "j"), Binary("mul", Load(access("A", "m", "k")), Load(access("T", "k", "j"))),
                    reduce="add", init="identity")
    tree = make_tree(tree.buffers[:3] + (Buffer("D", "float32", (6, 8), "output"), tree.buffers[3]),
                     tree.dims + (("j", 8),), *tree.body, nest([("m", 1), ("k", 1), ("j", 1)], after, tag="d"))
    verify(tree)
    assert hoist_constant_packs(tree) == (tree, 0)


def test_constness_is_part_of_the_program():
    """It survives serialisation and keys the tuning database apart from the same program with
    a plain input (a schedule's speed depends on it)."""
    from loopstack.frontend.serialize import deserialize, serialize
    from loopstack.tune.db import program_key

    const, _, _ = _conv(4, 8, 3)
    plain, _, _ = _conv(4, 8, 3, constant=False)
    back = deserialize(serialize(const.loop_tree))
    assert [n.constant for n in back.graph.nodes if n.op == "read"] == [False, True]
    assert back.lower().buffer("in1").constant
    assert program_key(const.loop_tree.graph) != program_key(plain.loop_tree.graph)
