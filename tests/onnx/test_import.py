"""The importer: the converter registry, errors that name the node, constant folding."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import loopstack as lt
from loopstack.onnx import registry


def _model(nodes, inputs, inits=(), opset=17, outputs=("y",)):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def test_an_unsupported_operator_names_the_node_its_op_and_position():
    m = _model([helper.make_node("Relu", ["x"], ["r"], name="first"),
                helper.make_node("Hardmax", ["r"], ["y"], name="odd")], [("x", [2, 3])])
    with pytest.raises(lt.UnsupportedError, match=r"node 1 'odd' \(Hardmax\): operator Hardmax is not supported"):
        lt.onnx.load(m)


def test_an_unknown_attribute_is_refused_not_ignored():
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="r", frobnicate=1)], [("x", [2, 3])])
    with pytest.raises(lt.UnsupportedError, match="attribute 'frobnicate' of Relu"):
        lt.onnx.load(m)


def test_converters_are_keyed_by_since_version():
    assert registry.lookup("Softmax", 17).fn.__name__ == "softmax"
    assert registry.lookup("Softmax", 11).fn.__name__ == "softmax_1"
    assert registry.lookup("ReduceSum", 11).const == ()
    assert registry.lookup("ReduceSum", 13).const == (1,)
    with pytest.raises(lt.LoopstackError, match="two converters"):
        registry.converter("Relu", 6)(lambda ctx, X: X)


def test_a_version_without_a_converter_names_the_versions_there_are():
    # Relu's opset-1 schema (since version 1) predates every converter: the lookup scans the
    # registry for what it has only on this error path
    with pytest.raises(lt.UnsupportedError, match=r"Relu version 1 \(opset 1\) is not supported; "
                                                  r"supported versions: 6, 13, 14"):
        registry.lookup("Relu", 1)
    with pytest.raises(lt.UnsupportedError, match="operator Hardmax is not supported"):
        registry.lookup("Hardmax", 13)
    with pytest.raises(lt.UnsupportedError, match="domain 'com.example'"):
        registry.lookup("Relu", 13, "com.example")


def test_a_required_constant_input_that_is_not_constant_is_refused():
    m = _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")], [("x", [2, 3]), ("s", [2])])
    with pytest.raises(lt.UnsupportedError):
        lt.onnx.load(m)


def test_symbolic_input_shapes_need_a_value():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(lt.ShapeError, match="batch"):
        lt.onnx.load(m)
    model = lt.onnx.compile(m, input_shapes={"x": (3, 4)})
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(model(x), np.maximum(x, 0))


def test_a_missing_file_is_an_argument_error(tmp_path):
    with pytest.raises(lt.ArgumentError, match="no such ONNX file"):
        lt.onnx.load(tmp_path / "none.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(lt.ArgumentError, match="not a readable ONNX model"):
        lt.onnx.load(bad)


def test_shape_driven_subgraphs_fold_at_import():
    # x.reshape(x.shape[0], -1) as exporters write it: Shape -> Gather -> Unsqueeze -> Concat -> Reshape
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    inits = [("zero", np.array(0, np.int64)), ("ax", np.array([0], np.int64)), ("minus1", np.array([-1], np.int64))]
    m = _model(nodes, [("x", [2, 3, 4])], inits)
    net = lt.onnx.load(m)
    assert len(net.layers) == 1            # only the Relu runs; the shape arithmetic folded
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(lt.onnx.compile(m)(x), np.maximum(x.reshape(2, -1), 0))


def test_constant_only_branches_fold_through_the_compiler():
    w = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    nodes = [helper.make_node("Sigmoid", ["w"], ["sw"]), helper.make_node("Add", ["x", "sw"], ["y"])]
    m = _model(nodes, [("x", [3, 4])], [("w", w)])
    net = lt.onnx.load(m)
    assert len(net.layers) == 1
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(lt.onnx.compile(m)(x), want, rtol=1e-6, atol=1e-6)


def test_a_value_with_two_users_is_computed_once():
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Relu", ["e"], ["a"]),
             helper.make_node("Neg", ["e"], ["b"]), helper.make_node("Add", ["a", "b"], ["y"])]
    net = lt.onnx.load(_model(nodes, [("x", [4, 8])]))
    assert [L.ops for L in net.layers][0] == ("Exp_0",)
    assert len(net.layers) == 2


def test_integer_run_time_inputs_are_unsupported():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.INT32, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(lt.UnsupportedError, match="int32"):
        lt.onnx.load(m)


def test_comparisons_and_selects_fold_on_constants_and_refuse_run_time_values():
    # x.view(x.size(0), -1) as some exporters write it, with an Equal/Where on the shape
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Equal", ["s", "neg"], ["eq"]),
             helper.make_node("Where", ["eq", "ones", "s"], ["s2"]),
             helper.make_node("Slice", ["s2", "z", "one"], ["n"]),
             helper.make_node("Concat", ["n", "neg"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    inits = [("neg", np.array([-1], np.int64)), ("ones", np.array([1], np.int64)), ("z", np.array([0], np.int64)),
             ("one", np.array([1], np.int64))]
    m = _model(nodes, [("x", [2, 3, 4])], inits)
    assert len(lt.onnx.load(m).layers) == 1
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(lt.onnx.compile(m)(x), np.maximum(x.reshape(2, -1), 0))
    bad = _model([helper.make_node("Greater", ["x", "x"], ["y"], name="cmp")], [("x", [3])])
    with pytest.raises(lt.UnsupportedError, match=r"node 0 'cmp' \(Greater\): Greater of a run-time tensor"):
        lt.onnx.load(bad)
