"""Requantized sums the backend cannot finish in one register block (the reduction outside the
output's loops, a vector loop with a remainder, a depthwise layer of many channels): summed in
int32 and requantized where the sum is complete, bit-exact against the reference interpreter
(itself bit-exact against onnxruntime, tests/unit/test_requant.py); scales per tensor, per
column, per row and per (row, column)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from loopstack.backend import compile
from loopstack.backend.interp import InterpKernel
from loopstack.commands.bench_int8 import qconv_tree
from loopstack.isa import cpu
from loopstack.isa.target import get_target
from loopstack.looptree.builders import access, make_tree, nest
from loopstack.looptree.ir import Acc, Binary, Buffer, Compute, Const, Load, Requant
from int8_programs import ints

FEATURES = cpu.cpu_features()
TARGETS = [t for t, need in (("avx2", "avx2"), ("avx512", "avx512f")) if need in FEATURES]
SCALES = {"tensor": None, "column": ("n",), "row": ("m",), "row_column": ("m", "n")}


def requantized_matmul(M, N, K, scale, out_dt, relu, order):
    dims = {"m": M, "n": N, "k": K}
    bufs = [Buffer("A", "uint8", (M, K), "input"), Buffer("B", "int8", (K, N), "input"),
            Buffer("bias", "int32", (N,), "input")]
    if SCALES[scale] is None:
        s = Const(0.0123)
    else:
        bufs.append(Buffer("S", "float32", tuple(dims[d] for d in SCALES[scale]), "input"))
        s = Load(access("S", *SCALES[scale]))
    bufs.append(Buffer("C", out_dt, (M, N), "output"))
    stmt = Compute("C", access("C", "m", "n"), Binary("mul", Load(access("A", "m", "k")), Load(access("B", "k", "n"))),
                   reduce="add", init=Load(access("bias", "n")), post=Binary("max", Const(0), Acc()) if relu else None,
                   requant=Requant(s, 5 if out_dt == "uint8" else -7))
    return make_tree(bufs, dims, nest([(d, 1) for d in order], stmt))


def inputs(tree, rng):
    arrays = []
    for b in tree.inputs:
        if b.dtype == "float32":
            arrays.append((rng.random(b.shape) * 0.02).astype(np.float32))
        elif b.dtype == "int32":
            arrays.append(rng.integers(-3000, 3000, b.shape).astype(np.int32))
        else:
            arrays.append(ints(rng, b.dtype, b.shape))
    return arrays


def run(tree, kernel, arrays):
    out = np.zeros(tree.outputs[0].shape, tree.outputs[0].dtype)
    kernel(*arrays, out)
    return out


@pytest.fixture(params=["chosen", "widening"])
def family(request):
    """`widening`: as on a CPU without VNNI or tiles (the exact 16-bit pairs path)."""
    return request.param


def target_for(name, family):
    t = get_target(name)
    return t if family == "chosen" else dataclasses.replace(t, extensions=frozenset())


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(M=st.integers(1, 9), N=st.integers(1, 40), K=st.integers(1, 40), scale=st.sampled_from(sorted(SCALES)),
       out_dt=st.sampled_from(["uint8", "int8"]), relu=st.booleans(), order=st.permutations(["m", "n", "k"]),
       seed=st.integers(0, 2**31))
def test_requantized_matmuls_in_any_loop_order(target, family, M, N, K, scale, out_dt, relu, order, seed):
    tree = requantized_matmul(M, N, K, scale, out_dt, relu, order)
    arrays = inputs(tree, np.random.default_rng(seed))
    np.testing.assert_array_equal(run(tree, compile(tree, target=target_for(target, family)), arrays),
                                  run(tree, InterpKernel(tree), arrays))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(576, 576, 14, True), (72, 72, 7, True), (16, 72, 6, False)])
def test_requantized_layers_the_backend_splits(target, family, shape):
    """A 576-channel depthwise layer (its sum is split over several nests), and a convolution
    of 72 filters (no whole number of vectors)."""
    c, k, h, depthwise = shape
    tree = qconv_tree(c, k, h, depthwise=depthwise, zero_point=3)
    arrays = inputs(tree, np.random.default_rng(c + h))
    np.testing.assert_array_equal(run(tree, compile(tree, target=target_for(target, family)), arrays),
                                  run(tree, InterpKernel(tree), arrays))
