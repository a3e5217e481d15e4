"""Graph rewrites before import. Each pass is a guard (does this pattern apply, and if not,
why: logged) and an apply; it returns a new list of nodes and leaves the model untouched.

fold_batchnorm: Conv -> BatchNormalization (inference) becomes one Conv, and Gemm ->
BatchNormalization one Gemm, when the producer's only user is the BatchNormalization and
every parameter is an initializer (a constant by the time the pass runs). With s = scale / sqrt(var + eps):

    W'[k, ...] = W[k, ...] * s[k]          b'[k] = (b[k] - mean[k]) * s[k] + beta[k]
"""
from __future__ import annotations

import logging
from collections import Counter

import numpy as np

log = logging.getLogger("loopstack.onnx")


def _decline(bn, why: str) -> None:
    log.info("BatchNormalization %r not folded: %s", bn.name, why)
    return None


def _bn_params(bn, inits):
    from onnx import helper

    if len(bn.input) != 5 or any(n not in inits for n in bn.input[1:]):
        return _decline(bn, "its parameters are not all initializers")
    if any(o for o in bn.output[1:]):
        return _decline(bn, "it has training outputs")
    attrs = {a.name: helper.get_attribute_value(a) for a in bn.attribute}
    if attrs.get("training_mode", 0):
        return _decline(bn, "training mode")
    gamma, beta, mean, var = (inits[n].astype(np.float32, copy=False) for n in bn.input[1:])
    s = gamma / np.sqrt(var + np.float32(attrs.get("epsilon", 1e-5)))
    return s, beta - mean * s


def _fold_into(prod, bn, inits, new_inits):
    """New inputs for `prod` (Conv or Gemm) with `bn` folded in, or None."""
    from onnx import helper

    params = _bn_params(bn, inits)
    if params is None:
        return None
    s, shift = params
    attrs = {a.name: helper.get_attribute_value(a) for a in prod.attribute}
    if any(n not in inits for n in prod.input[1:] if n):
        return _decline(bn, f"the {prod.op_type}'s weights are not initializers")
    w = inits[prod.input[1]].astype(np.float32, copy=False)
    bias = inits[prod.input[2]].astype(np.float32, copy=False) if len(prod.input) > 2 and prod.input[2] else None
    if prod.op_type == "Conv":
        if w.shape[0] != s.size:
            return _decline(bn, "channel counts differ")
        w2 = w * s.reshape([-1] + [1] * (w.ndim - 1)).astype(np.float32, copy=False)
        b2 = (bias if bias is not None else 0.0) * s + shift
    else:   # Gemm: Y = alpha A B + beta C, channels along Y's columns; the new C carries beta
        beta, trans_b = attrs.get("beta", 1.0), attrs.get("transB", 0)
        n = w.shape[0] if trans_b else w.shape[1]
        if n != s.size:
            return _decline(bn, "channel counts differ")
        if bias is not None and not (bias.ndim <= 1 and bias.size in (1, n)) and bias.shape != (1, n):
            return _decline(bn, "the Gemm's C is not one value per column")
        w2 = w * (s.reshape(-1, 1) if trans_b else s.reshape(1, -1))
        c = np.float32(beta) * bias.reshape(-1) if bias is not None else np.float32(0.0)
        b2 = c * s + shift
    names = (f"{prod.output[0]}__bnw", f"{prod.output[0]}__bnb")
    new_inits[names[0]] = w2.astype(np.float32, copy=False)
    new_inits[names[1]] = b2.astype(np.float32, copy=False)
    return [prod.input[0], *names]


def fold_batchnorm(nodes, inits: dict, outputs=()) -> list:
    """`nodes` with each foldable BatchNormalization merged into its Conv or Gemm; the new
    weights are added to `inits` (name -> array)."""
    from onnx import helper

    uses = Counter(n for node in nodes for n in node.input if n)
    uses.update(outputs)
    producer = {o: node for node in nodes for o in node.output}
    replaced, dropped, new_inits = {}, set(), {}
    for bn in nodes:
        if bn.op_type != "BatchNormalization":
            continue
        prod = producer.get(bn.input[0])
        if prod is None or prod.op_type not in ("Conv", "Gemm"):
            continue
        if uses[bn.input[0]] != 1:
            _decline(bn, f"the {prod.op_type}'s output has other users")
            continue
        if prod.op_type == "Gemm":
            attrs = {a.name: helper.get_attribute_value(a) for a in prod.attribute}
            if attrs.get("beta", 1.0) == 0.0 and len(prod.input) > 2 and prod.input[2]:
                _decline(bn, "the Gemm has beta = 0")
                continue
        inputs = _fold_into(prod, bn, inits, new_inits)
        if inputs is None:
            continue
        node = helper.make_node(prod.op_type, inputs, [bn.output[0]], name=prod.name or bn.name)
        node.attribute.extend(a for a in prod.attribute if not (prod.op_type == "Gemm" and a.name == "beta"))
        replaced[id(prod)] = node
        dropped.add(id(bn))
    inits.update(new_inits)
    return [replaced.get(id(n), n) for n in nodes if id(n) not in dropped]
