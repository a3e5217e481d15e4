"""XNNPACK, through LiteRT's interpreter and its default XNNPACK delegate (one thread), as a peer.

Each workload is written as the `.tflite` model a user would hand LiteRT (`peers/tflite.py`):
BATCH_MATMUL for the matmuls (both operands inputs, as loopstack's are), FULLY_CONNECTED with
fused ReLU for the MLPs (constant weights), CONV_2D / DEPTHWISE_CONV_2D on NHWC tensors — the
layout loopstack's convolutions use — with an explicit PAD where the padding is not TensorFlow's
SAME (stride 2). The model is checked to have been handed to the delegate whole; a timed call is
`invoke()` on inputs set once.
"""
from __future__ import annotations

import time

import numpy as np

from .common import PeerSkipped, Prepared, conv_geometry
from .tflite import TfliteGraph


def _conv_input(g: TfliteGraph, x: int, shape, stride: int, pad: int, r: int):
    """(tensor, padding) for a convolution: SAME where TensorFlow's SAME is this padding, else the
    input padded explicitly and VALID."""
    if stride == 1 and 2 * pad == r - 1:
        return x, "SAME"
    _, h, w, c = shape
    paddings = np.array([[0, 0], [pad, pad], [pad, pad], [0, 0]], np.int32)
    return g.op("PAD", [x, g.const("paddings", paddings)], (1, h + 2 * pad, w + 2 * pad, c)), "VALID"


def _model(w, a):
    """(model bytes, {input tensor name: array}, to_reference(out) -> reference layout)."""
    g = TfliteGraph()
    feeds = {}
    if w.kind == "mm":
        A, B = a["A"], a["B"]
        ta, tb = g.input("A", A.shape), g.input("B", B.shape)
        feeds = {"A": A, "B": B}
        y = g.op("BATCH_MATMUL", [ta, tb], (A.shape[0], B.shape[1]), "BatchMatMulOptions", adjX=False, adjY=False)
    elif w.kind == "mlp":
        X = a["X"]
        y = g.input("X", X.shape)
        feeds = {"X": X}
        for i in range(3):
            W, b = a[f"W{i}"], a[f"b{i}"]
            y = g.op("FULLY_CONNECTED", [y, g.const(f"W{i}", W.T), g.const(f"b{i}", b)], (X.shape[0], W.shape[1]),
                     "FullyConnectedOptions", fusedActivationFunction="RELU")
    elif w.kind in ("conv", "dwconv", "mbv3"):
        stride, pad, r, o = conv_geometry(w)
        X = a["X"][None]                                                    # NHWC, batch 1
        x = g.input("X", X.shape)
        feeds = {"X": X}
        x, padding = _conv_input(g, x, X.shape, stride, pad, r)
        c = X.shape[3]
        conv = dict(padding=padding, strideH=stride, strideW=stride, dilationHFactor=1, dilationWFactor=1)
        if w.kind == "conv":
            W = a["W"]                                                      # [r, s, c, k]
            k = W.shape[3]
            y = g.op("CONV_2D", [x, g.const("W", W.transpose(3, 0, 1, 2)), g.const("b", np.zeros(k, np.float32))],
                     (1, o, o, k), "Conv2DOptions", **conv)
        else:
            wd = a["W"] if w.kind == "dwconv" else a["Wd"]                  # [r, s, c]
            act = "RELU" if w.kind == "mbv3" else "NONE"
            y = g.op("DEPTHWISE_CONV_2D", [x, g.const("Wd", wd[None]), g.const("bd", np.zeros(c, np.float32))],
                     (1, o, o, c), "DepthwiseConv2DOptions", depthMultiplier=1, fusedActivationFunction=act, **conv)
            if w.kind == "mbv3":
                wp = a["Wp"]                                                # [c, k]
                k = wp.shape[1]
                y = g.op("CONV_2D", [y, g.const("Wp", wp.T[:, None, None, :]), g.const("bp", np.zeros(k, np.float32))],
                         (1, o, o, k), "Conv2DOptions", padding="VALID", strideH=1, strideW=1,
                         dilationHFactor=1, dilationWFactor=1, fusedActivationFunction="RELU")
    else:
        raise PeerSkipped(f"XNNPACK has no {w.kind}")
    g.output(y)
    return g.finish(), feeds


def interpreter(model: bytes):
    """LiteRT's interpreter on one thread with its default (XNNPACK) delegate, tensors allocated."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=model, num_threads=1)
    interp.allocate_tensors()
    return interp


def _delegated(interp) -> bool:
    """True when the delegate took the whole graph: one DELEGATE node reads the graph's inputs and
    writes its outputs (the nodes it replaced stay listed, outside the execution plan)."""
    delegates = [op for op in interp._get_ops_details() if op["op_name"] == "DELEGATE"]
    if len(delegates) != 1:
        return False
    ins = {d["index"] for d in interp.get_input_details()}
    outs = {d["index"] for d in interp.get_output_details()}
    return ins <= set(delegates[0]["inputs"].tolist()) and outs <= set(delegates[0]["outputs"].tolist())


def prepare(w, a) -> Prepared:
    model, feeds = _model(w, a)
    t0 = time.perf_counter()
    interp = interpreter(model)
    ms = (time.perf_counter() - t0) * 1e3
    if not _delegated(interp):
        names = sorted({op["op_name"] for op in interp._get_ops_details()})
        raise PeerSkipped(f"XNNPACK did not take the whole {w.kind} graph (its operators: {', '.join(names)})")
    by_name = {d["name"]: d["index"] for d in interp.get_input_details()}
    for name, value in feeds.items():
        interp.set_tensor(by_name[name], np.ascontiguousarray(value, np.float32))
    out_index = interp.get_output_details()[0]["index"]
    return Prepared({"xnnpack": interp.invoke}, compile_ms=ms,
                    result=lambda: _reference_layout(w, interp.get_tensor(out_index)))


def _reference_layout(w, y: np.ndarray) -> np.ndarray:
    if w.kind in ("conv", "dwconv"):
        return y[0]
    if w.kind == "mbv3":
        return y[0].reshape(-1, y.shape[3])
    return y
