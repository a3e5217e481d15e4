"""Tuning a network tunes each distinct layer program once; its layers then compile tuned."""
import numpy as np
import onnxruntime as ort

import loopstack as lt
from loopstack.onnx import models


def test_each_distinct_layer_is_tuned_once_and_then_used():
    m = models.mlp(sizes=(64, 64, 64, 10), seed=5)
    results = lt.onnx.tune(m, budget_s=3)
    groups = [r.layers for r in results]
    # the two hidden layers are one program (same shapes, same fused ReLU): searched once
    assert any(len(g) == 2 for g in groups), groups
    assert sum(len(g) for g in groups) == 3 + 1      # three Gemm layers and the Softmax
    model = lt.onnx.compile(m)
    tuned = [L.schedule for L in model.layers if any(L.name in g for g, r in
                                                     zip(groups, results) if r.result is not None)]
    assert tuned and all(s == "tuned" for s in tuned)
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"input": x})[0]
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-6)
