"""Whole networks built in the repository, compiled by loopstack, checked against onnxruntime
(max abs error <= 1e-4 x the output's scale). CI runs the MLP and reduced forms of the CNNs
and of the BERT layer; the full-size models are the nets bench's."""
import numpy as np
import onnxruntime as ort
import pytest

import loopstack as lt
from loopstack.onnx import models

CASES = {
    "mlp": lambda: models.mlp(),
    "resnet18-reduced": lambda: models.resnet18(resolution=32, width=8, blocks=(1, 1, 1, 1), classes=10),
    "mobilenet_v3_small-reduced": lambda: models.mobilenet_v3_small(resolution=32, width=0.25, classes=10),
    "bert_layer-reduced": lambda: models.bert_layer(seq=16, hidden=64, heads=4, ffn=128),
}


def _input(m, seed=0):
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _onnxruntime(m, x):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_model_matches_onnxruntime(name):
    m = CASES[name]()
    model = lt.onnx.compile(m)
    for seed in (0, 1):
        x = _input(m, seed)
        got, want = model(x), _onnxruntime(m, x)
        assert got.shape == want.shape
        err = np.abs(got - want).max()
        assert err <= 1e-4 * np.abs(want).max(), f"{name}: max abs error {err}, output scale {np.abs(want).max()}"


def test_run_takes_named_inputs_and_checks_them():
    m = CASES["mlp"]()
    model = lt.onnx.compile(m)
    x = _input(m)
    out = model.run({"input": x})
    assert set(out) == {"output"}
    np.testing.assert_array_equal(out["output"], model(x))
    with pytest.raises(lt.ArgumentError, match="shape"):
        model.run({"input": x[:, :10]})
    with pytest.raises(lt.ArgumentError, match="missing input"):
        model.run({})


def test_summary_reports_every_layer():
    m = CASES["resnet18-reduced"]()
    model = lt.onnx.compile(m)
    text = model.summary({"input": _input(m)})
    lines = text.splitlines()
    assert len(lines) == len(model.layers) + 2
    assert "GFLOP" in lines[-1] and "compiled in" in lines[-1]
    assert all(L.seconds > 0 for L in model.layers)
    assert model.compile_ms > 0


def test_batchnorm_folds_into_conv_and_keeps_the_answer():
    m = CASES["resnet18-reduced"]()
    folded = lt.onnx.load(m)
    plain = lt.onnx.load(m, passes=False)
    ops = [op for L in folded.layers for op in L.ops]
    assert not any("batchnormalization" in op for op in ops)
    assert any("batchnormalization" in op for L in plain.layers for op in L.ops)
    x = _input(m)
    a = lt.onnx.compile(folded)(x)
    b = lt.onnx.compile(plain)(x)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.abs(b).max())


def test_elementwise_chains_fuse_into_their_producer():
    net = lt.onnx.load(CASES["resnet18-reduced"]())
    # the first convolution carries its ReLU; each block's second carries the residual add and ReLU
    assert any(len(L.ops) >= 2 and "conv" in L.ops[0] and "relu" in L.ops[-1] for L in net.layers)
    assert any(any("add" in op for op in L.ops) and "conv" in L.ops[0] for L in net.layers)


def test_intermediate_buffers_share_memory_by_liveness():
    # full size: in the reduced form the zero borders of the bordered buffers (test_borders.py),
    # which share bytes only with their own geometry, are most of their bytes
    model = lt.onnx.compile(models.mobilenet_v3_small())
    total = sum(iv.nbytes for iv in model.intervals)
    assert model.arena_bytes < total / 2
    for i, a in enumerate(model.intervals):
        for b in model.intervals[i + 1:]:
            if a.start <= b.end and b.start <= a.end:
                oa, ob = model.offsets[a.name], model.offsets[b.name]
                assert oa + a.nbytes <= ob or ob + b.nbytes <= oa
