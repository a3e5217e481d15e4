"""A layer's last element-wise nest folded into the reduction it reads (onnx/epilogue.py):
the folded tree computes what the tree as lowered computes (the reference interpreter runs
both), and what cannot fold stays as it is."""
import itertools

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopstack as lt
from loopstack.backend import compile as compile_ir
from loopstack.backend.kernel_base import random_array
from loopstack.looptree.ir import Acc, Access, Affine, Binary, Buffer, Compute, Load, Loop, LoopTree, Unary
from loopstack.onnx.epilogue import fold_epilogues


def _acc(buf, *names):
    return Access(buf, tuple(Affine.of(n) for n in names))


_loop_ids = itertools.count()


def _nest(dims, stmt):
    # loop vars unique across the tree (an object's id may repeat once its object is freed)
    for d in reversed(dims):
        stmt = Loop(f"L{d}{next(_loop_ids)}", d, 1, (stmt,))
    return stmt


def _tree(m, n, k, combine="same", other_reader=False, extra_dim=False):
    """t[m, n] = sum_k a[m, k] * b[k, n] + bias[n]; u[m, n] = a 1x1 product; then the
    element-wise out[m, n] = relu(t + u) (or variants that must not fold)."""
    bufs = [Buffer("a", "float32", (m, k), "input"), Buffer("b", "float32", (k, n), "input"),
            Buffer("bias", "float32", (n,), "input"), Buffer("c", "float32", (m, n), "input"),
            Buffer("t", "float32", (m, n), "temp"), Buffer("u", "float32", (m, n), "temp"),
            Buffer("out", "float32", (m, n), "output")]
    dims = [("m", m), ("n", n), ("k", k)]
    red = Compute("red", _acc("t", "m", "n"), Binary("mul", Load(_acc("a", "m", "k")), Load(_acc("b", "k", "n"))),
                  reduce="add", init="identity", post=Binary("add", Acc(), Load(_acc("bias", "n"))))
    other = Compute("other", _acc("u", "m", "n"), Binary("mul", Load(_acc("c", "m", "n")), Load(_acc("c", "m", "n"))))
    t_read = _acc("t", "n", "m") if combine == "transposed" else _acc("t", "m", "n")
    body = [_nest(["m", "n", "k"], red), _nest(["m", "n"], other)]
    if other_reader:
        bufs.append(Buffer("out2", "float32", (m, n), "output"))
        body.append(_nest(["m", "n"], Compute("copy", _acc("out2", "m", "n"), Load(_acc("t", "m", "n")))))
    out_dims = ["m", "n"]
    if extra_dim:
        dims.append(("r", 2))
        out_dims = ["m", "r", "n"]
    ew = Compute("ew", _acc("out", "m", "n"), Unary("relu", Binary("add", Load(t_read), Load(_acc("u", "m", "n")))))
    body.append(_nest(out_dims, ew))
    return LoopTree(tuple(bufs), tuple(dims), tuple(body))


def _run(tree, seed=0):
    rng = np.random.default_rng(seed)
    args = [random_array(b, rng) for b in tree.inputs]
    outs = [np.zeros(b.shape, np.float32) for b in tree.outputs]
    compile_ir(tree, target="interp")(*args, *outs)
    return outs


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 4))
def test_a_folded_epilogue_computes_what_the_tree_computes(m, n, k):
    tree = _tree(m, n, k)
    folded = fold_epilogues(tree)
    assert len(folded.body) == len(tree.body) - 1
    assert "t" not in {b.name for b in folded.buffers}
    (want,), (got,) = _run(tree), _run(folded)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", [{"combine": "transposed"}, {"other_reader": True}, {"extra_dim": True}])
def test_what_cannot_fold_stays(variant):
    tree = _tree(3, 3, 2, **variant)
    assert fold_epilogues(tree) is tree


def test_resnet_downsampling_layers_fold_and_agree_with_onnxruntime():
    from loopstack.onnx import models

    m = models.resnet18(resolution=32, width=8, blocks=(1, 1, 1, 1), classes=10)
    model = lt.onnx.compile(m)
    down = [L for L in model.layers if sum("conv" in op for op in L.ops) == 2]
    assert len(down) == 3
    # the 3x3 convolution writes the output itself (but in the last stage, whose 1 x 1 pixel
    # the import reads as a vector: another index than the convolution writes)
    folded = [L for L in down if "out" in {s.out.buffer for _, s in L.kernel.lowered.computes() if s.reduce}]
    assert len(folded) == 2
    x = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    np.testing.assert_allclose(model(x), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
