"""QDQ graphs: DequantizeLinear -> Conv / MatMul -> QuantizeLinear as one quantized operator.

A model quantized in the QDQ format (onnxruntime.quantization's default) keeps float operators
between DequantizeLinear and QuantizeLinear nodes; onnxruntime runs each such group as its
integer kernel. `fuse_qdq` rewrites the same groups the same way, so that they run on the int8
kernels with onnxruntime's integer results:

    DQ(x) -> Conv(., DQ(w) [, DQ(b: int32)]) [-> Relu] -> Q   becomes   QLinearConv(x, .., w, .., [b])
    DQ(a) -> MatMul(., DQ(b))                           -> Q   becomes   QLinearMatMul(a, .., b, ..)

when the weights (and bias) are constant 8-bit (int32) tensors, every scale and zero point is
a constant, the activations' are per tensor, and the float result has no other user. A Relu
before the QuantizeLinear goes where its zero point is the output type's lowest value (the
saturation then clamps what Relu would). A DequantizeLinear left without users is dropped.
Anything else stays as it is: its DequantizeLinear and QuantizeLinear are host steps around a
float operator.
"""
from __future__ import annotations

import logging
from collections import Counter

import numpy as np

log = logging.getLogger("loopstack.onnx")

_LOWEST = {np.dtype(np.uint8): 0, np.dtype(np.int8): -128}


def _producers(nodes) -> dict:
    return {o: n for n in nodes for o in n.output if o}


def _dq(name, producer, consts, weight=False):
    """The DequantizeLinear producing `name` with constant scale and zero point (and, for
    weights, a constant 8-bit or int32 input), or None."""
    n = producer.get(name)
    if n is None or n.op_type != "DequantizeLinear" or n.domain not in ("", "ai.onnx"):
        return None
    if any(i not in consts for i in n.input[1:] if i):
        return None
    if any(a.name == "block_size" and a.i for a in n.attribute):
        return None
    if weight and n.input[0] not in consts:
        return None
    return n


def _per_tensor(n, consts) -> bool:
    return all(np.asarray(consts[i]).size == 1 for i in n.input[1:] if i)


def _zero_point(n):
    """The zero point input of a Q/DQ node, or None when it is omitted (0)."""
    if len(n.input) > 2 and n.input[2]:
        return n.input[2]
    return None


def fuse_qdq(nodes, consts: dict, outputs) -> list:
    """`nodes` with every DQ -> Conv/MatMul -> Q group fused (see the module docstring); new
    constants (explicit zero points) are added to `consts`."""
    from onnx import helper

    producer = _producers(nodes)
    users = Counter(i for n in nodes for i in n.input if i)
    users.update(outputs)
    drop, replace = set(), {}
    for n in nodes:
        if n.op_type not in ("Conv", "MatMul") or n.domain not in ("", "ai.onnx") or users[n.output[0]] != 1:
            continue
        nxt = [m for m in nodes if n.output[0] in m.input]
        relu = None
        if nxt and nxt[0].op_type == "Relu" and users[nxt[0].output[0]] == 1:
            relu = nxt[0]
            nxt = [m for m in nodes if relu.output[0] in m.input]
        if not nxt or nxt[0].op_type != "QuantizeLinear" or any(i not in consts for i in nxt[0].input[1:] if i):
            continue
        q = nxt[0]
        dx = _dq(n.input[0], producer, consts)
        dw = _dq(n.input[1], producer, consts, weight=True)
        if dx is None or dw is None or not _per_tensor(dx, consts) or not _per_tensor(q, consts):
            continue
        xq = consts.get(dx.input[0])
        if xq is not None:      # a constant activation: folded at import anyway
            continue
        wq = np.asarray(consts[dw.input[0]])
        if wq.dtype not in (np.uint8, np.int8):
            continue
        y_zp = _zero_point(q)
        y_dt = np.asarray(consts[y_zp]).dtype if y_zp else np.dtype(np.uint8)
        if relu is not None and (y_zp and int(np.asarray(consts[y_zp]).reshape(-1)[0]) != _LOWEST.get(y_dt)):
            continue
        if any(a.name == "output_dtype" and a.i for a in q.attribute):
            continue
        new_consts = {}

        def zp(node, like=None, _new=new_consts):
            """The node's zero point; an omitted one is "" (0) for the activations, and an explicit
            0 of the weights' or the output's dtype (which the QLinear operator reads it from)."""
            name = _zero_point(node)
            if name is not None or like is None:
                return name or ""
            name = f"{node.output[0]}__zero_point"
            _new[name] = np.zeros((), like)
            return name

        # a weight DequantizeLinear's axis must be the output channel (0) or the column (-1)
        w_axis = next((a.i for a in dw.attribute if a.name == "axis"), 1)
        per_channel = np.asarray(consts[dw.input[1]]).size > 1
        if n.op_type == "Conv":
            if per_channel and w_axis != 0:
                continue
            ins = [dx.input[0], dx.input[1], zp(dx), dw.input[0], dw.input[1], zp(dw, wq.dtype),
                   q.input[1], zp(q, y_dt)]
            if len(n.input) > 2 and n.input[2]:
                db = _dq(n.input[2], producer, consts, weight=True)
                if db is None or np.asarray(consts[db.input[0]]).dtype != np.int32:
                    continue
                ins.append(db.input[0])
            fused = helper.make_node("QLinearConv", ins, [q.output[0]], name=f"{n.name or 'Conv'}_qlinear")
            fused.attribute.extend(n.attribute)
        else:
            if per_channel and w_axis not in (1, -1, wq.ndim - 1):
                continue
            ins = [dx.input[0], dx.input[1], zp(dx), dw.input[0], dw.input[1], zp(dw, wq.dtype),
                   q.input[1], zp(q, y_dt)]
            fused = helper.make_node("QLinearMatMul", ins, [q.output[0]], name=f"{n.name or 'MatMul'}_qlinear")
        consts.update(new_consts)
        replace[id(n)] = fused
        drop.update(id(m) for m in (q, relu) if m is not None)
        log.info("%s %r runs as %s", n.op_type, n.name, fused.op_type)
    if not replace:
        return list(nodes)
    out = [replace.get(id(n), n) for n in nodes if id(n) not in drop]
    # DequantizeLinear nodes nothing reads any more
    while True:
        used = Counter(i for n in out for i in n.input if i)
        used.update(outputs)
        dead = [n for n in out if n.op_type == "DequantizeLinear" and not any(used[o] for o in n.output)]
        if not dead:
            return out
        out = [n for n in out if n not in dead]
