"""The nets bench's other engines: an ONNX model run by torch eager node by node, and built by
TVM's Relax frontend, each checked against onnxruntime on the same input."""
import numpy as np
import pytest

from loopstack.errors import UnsupportedError
from loopstack.onnx.models import MODELS

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is in the test extra")


def _input_and_reference(model, seed=0):
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return {inp.name: x}, sess.run(None, {inp.name: x})[0]


def _close(got, want):
    scale = max(1.0, float(np.abs(want).max()))
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= 1e-4 * scale


@pytest.mark.parametrize("name, kwargs", [
    ("mlp", {}),
    ("resnet18", {"resolution": 32, "width": 8, "blocks": (1, 1, 1, 1), "classes": 10}),
    ("mobilenet_v3_small", {"resolution": 32, "width": 0.25, "classes": 10}),
    ("bert_layer", {"seq": 8, "hidden": 32, "heads": 2, "ffn": 64}),
])
def test_torch_eager_runs_the_models_like_onnxruntime(name, kwargs):
    pytest.importorskip("torch", reason="torch is in the test extra")
    from loopstack.peers.torch_onnx import torch_eager

    model = MODELS[name](**kwargs)
    feeds, want = _input_and_reference(model)
    (got,) = torch_eager(model)(feeds).values()
    _close(got, want)


def test_torch_eager_names_an_operator_it_lacks():
    pytest.importorskip("torch", reason="torch is in the test extra")
    from onnx import TensorProto, helper

    from loopstack.peers.torch_onnx import torch_eager

    node = helper.make_node("Celu", ["x"], ["y"], name="odd")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(UnsupportedError, match=r"node odd \(Celu\)"):
        torch_eager(helper.make_model(graph))


def test_tvm_builds_and_runs_the_mlp_like_onnxruntime():
    pytest.importorskip("tvm", reason="apache-tvm is in the test extra")
    from loopstack.peers.tvm_onnx import tvm_relax

    model = MODELS["mlp"]()
    feeds, want = _input_and_reference(model)
    (got,) = tvm_relax(model)(feeds).values()
    _close(got, want)
