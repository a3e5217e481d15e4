"""backend/chain.py: a compiled model's serial layer calls run from one native call."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import loopstack as lt
from loopstack.backend.chain import chain, chainable
from loopstack.isa.target import host_arch

pytestmark = pytest.mark.skipif(host_arch() != "x86_64", reason="chains are x86-64 machine code")


def _net(rng, channels=16, side=10):
    w = rng.standard_normal((channels, 8, 3, 3)).astype(np.float32)
    dw = rng.standard_normal((channels, 1, 3, 3)).astype(np.float32)
    fc = rng.standard_normal((channels, 10)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "dw"], ["d"], pads=[1, 1, 1, 1], group=channels),
             helper.make_node("GlobalAveragePool", ["d"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, side, side])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(a, n) for n, a in (("w", w), ("dw", dw), ("fc", fc))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_chained_model_computes_the_bits_its_calls_compute_one_by_one():
    rng = np.random.default_rng(0)
    model = lt.onnx.compile(_net(rng), threads=1)
    assert len(model._runs) < len(model._calls)      # the layers run from fewer calls
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((1, 8, 10, 10)).astype(np.float32)
        got = model(x).copy()
        for _, call in model._calls:            # the same prepared calls, one Python call each
            call()
        np.testing.assert_array_equal(got, model._buffer(model.net.outputs[0][1][1]).reshape(got.shape))
        import onnxruntime as ort
        want = ort.InferenceSession(_net(np.random.default_rng(0)).SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_chain_runs_its_calls_in_order_and_keeps_them_alive():
    """The second call reads what the first wrote; the chain outlives the names of its calls
    and of the kernel, whose code it still jumps to."""
    rng = np.random.default_rng(1)
    model = lt.onnx.compile(_net(rng), threads=1)
    calls = [call for _, call in model._calls]
    assert all(chainable(c) for c in calls)
    x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
    want = model(x).copy()
    out = model._buffer(model.net.outputs[0][1][1])
    out[...] = 0
    run = chain(calls)
    del calls, model
    run()
    np.testing.assert_array_equal(out.reshape(want.shape), want)


def test_a_call_on_a_thread_team_is_not_chained():
    rng = np.random.default_rng(2)
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(rng.standard_normal((512, 512)).astype(np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    two = lt.onnx.compile(m, threads=2)
    parallel = [call for L, call in two._calls if any(p for _, _, p in L.kernel._steps)]
    assert parallel and not any(chainable(c) for c in parallel)
    two.threads = 1
    assert all(chainable(c) for _, c in two._calls)
