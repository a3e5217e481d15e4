"""Zero-bordered activations (onnx/borders.py): a layer writes into the interior of the buffer
its padded readers read in place; the answers stay onnxruntime's and the borders stay zero."""
import numpy as np
import onnxruntime as ort
import pytest

import loopstack as lt
from loopstack.backend.padding import zero_bordered_temps
from loopstack.onnx.models import Builder


def _onnxruntime(m, x):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]


def _check(m, shape, seeds=(0, 1)):
    model = lt.onnx.compile(m)
    for seed in seeds:
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        got, want = model(x), _onnxruntime(m, x)
        err = np.abs(got - want).max()
        assert err <= 1e-4 * np.abs(want).max(), f"max abs error {err}, output scale {np.abs(want).max()}"
    return model


def _borders_are_zero(model):
    for b, (before, shape) in model.bordered.items():
        whole = model._store[f"bordered:{b}"]
        inner = np.zeros(shape, bool)
        inner[tuple(slice(a, a + n) for a, n in zip(before, model.net.buffers[b]))] = True
        assert not whole[~inner].any(), f"the border of {b} was written"


def _staged(layer):
    return zero_bordered_temps(layer.kernel.lowered) if hasattr(layer.kernel, "lowered") else {}


def _residual_block(c=8, hw=12):
    b = Builder(3)
    x = b.conv("input", c, c, 3, act="relu")
    y = b.conv(x, c, c, 3, act="relu")
    y = b.conv(y, c, c, 3)
    x = b.act(b.node("Add", [y, x]), "relu")                # the residual reads x in its interior
    x = b.conv(x, c, c, 3, stride=2, act="relu")            # a strided reader: reaches one side only
    return b.model((1, c, hw, hw), b.conv(x, c, c, 1), "residual"), (1, c, hw, hw)


def test_a_residual_block_reads_its_activations_in_place():
    m, shape = _residual_block()
    model = _check(m, shape)
    # the graph input, transposed to channels-last, and every activation a 3x3 convolution
    # reads are bordered; the transpose writes the first one's interior
    ops = [L.ops for L in model.layers]
    assert ops[0] == () and [o[-1].split("_")[0] for o in ops[1:]] == ["relu", "relu", "relu", "relu", "output"]
    assert set(model.bordered) == {L.out for L in model.layers[:4]}
    for before, bordered in model.bordered.values():
        assert before[:2] == (1, 1) and bordered[:2] == (14, 14)
    assert not any(_staged(L) for L in model.layers)
    # the residual add reads its input (also a padded read's input) in the interior
    assert [a[0] for a in model.layers[3].args if a[0] != "const"] == ["bordered", "bordered"]
    _borders_are_zero(model)


def test_bordered_buffers_share_bytes_only_with_their_own_geometry():
    m, shape = _residual_block()
    model = lt.onnx.compile(m)
    geometry = {b: g[1] for b, g in model.bordered.items()}
    for i, a in enumerate(model.intervals):
        for b in model.intervals[i + 1:]:
            oa, ob = model.offsets[a.name], model.offsets[b.name]
            disjoint = oa + a.nbytes <= ob or ob + b.nbytes <= oa
            if a.start <= b.end and b.start <= a.end:
                assert disjoint
            elif (a.name in geometry) != (b.name in geometry) or geometry.get(a.name) != geometry.get(b.name):
                assert disjoint, (a, b)
            elif not disjoint:
                assert oa == ob


@pytest.mark.parametrize("k,stride,pads", [(3, 1, [1, 1, 1, 1]), (5, 1, [2, 2, 2, 2]), (3, 2, [1, 1, 1, 1]),
                                           (3, 1, [0, 1, 2, 1]), (2, 2, [1, 0, 1, 0])])
def test_a_padded_reader_of_a_layer_output(k, stride, pads):
    c, hw = 8, 11
    b = Builder(k + stride)
    x = b.conv("input", c, c, 1, act="relu")
    w = b.weight((c, c, k, k), c * k * k)
    y = b.node("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=pads)
    y = b.node("MaxPool", [b.act(y, "relu")], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    model = _check(b.model((1, c, hw, hw), y, "padded"), (1, c, hw, hw))
    # what the convolution and the pool read is bordered (in whichever layout the import chose)
    assert len(model.bordered) == 2 and model.layers[-1].args[0][0] == "bordered"
    assert not any(_staged(L) for L in model.layers)
    _borders_are_zero(model)


def test_resnet_reduced_keeps_its_borders_zero():
    from loopstack.onnx import models

    m = models.resnet18(resolution=32, width=8, blocks=(1, 1, 1, 1), classes=10)
    model = _check(m, (1, 3, 32, 32), seeds=(2, 3))
    assert len(model.bordered) >= 6
    assert _staged(model.layers[0])         # the stem reads the graph input
    _borders_are_zero(model)


def test_without_borders_the_layers_stage_their_copies_and_agree():
    m, shape = _residual_block()
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    plain = lt.onnx.compile(m, borders=False)
    bordered = lt.onnx.compile(m)
    assert plain.bordered == {} and all(a[0] != "bordered" for L in plain.layers for a in L.args)
    assert sum(bool(_staged(L)) for L in plain.layers) == 4
    np.testing.assert_allclose(bordered(x), plain(x), rtol=1e-5, atol=1e-5)
