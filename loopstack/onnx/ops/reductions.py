"""Reduce* operators: axes as an attribute (before opset 13 or 18) or a constant input."""
from __future__ import annotations

import math

import numpy as np

from ..registry import converter
from ..values import is_const, norm_axis, reduce
from .common import scale, unary, versions

# op -> (DSL reduction, prepare each element, finish the reduced value, numpy fold)
_KINDS = {
    "ReduceSum": ("add", None, None, np.sum),
    "ReduceMean": ("add", None, "mean", np.mean),
    "ReduceMax": ("max", None, None, np.max),
    "ReduceMin": ("min", None, None, np.min),
    "ReduceProd": ("mul", None, None, np.prod),
    "ReduceSumSquare": ("add", lambda t: t * t, None, lambda x, axis, keepdims: np.sum(x * x, axis, keepdims=keepdims)),
    "ReduceL1": ("add", lambda t: t.abs(), None, lambda x, axis, keepdims: np.sum(np.abs(x), axis, keepdims=keepdims)),
    "ReduceL2": ("add", lambda t: t * t, lambda t: t.sqrt(), None),
    "ReduceLogSum": ("add", None, lambda t: t.log(), None),
    "ReduceLogSumExp": (None, None, None, None),
}


def _reduce(ctx, op, data, axes, keepdims, noop_with_empty_axes):
    rank = len(data.shape)
    if not axes:
        if noop_with_empty_axes:
            return data
        axes = list(range(rank))
    axes = sorted({norm_axis(a, rank, op) for a in axes})
    fn, prep, finish, fold = _KINDS[op]
    if is_const(data) and fold is not None and data.dtype.kind in "fiu":
        kw = {"axis": tuple(axes), "keepdims": bool(keepdims)}
        return np.asarray(fold(data, **kw)).astype(data.dtype)
    x = ctx.ready(data)
    if op == "ReduceLogSumExp":
        m = reduce(x, axes, "max", True)
        from .common import binary

        e = binary("sub", x, m, op)
        s = reduce(e.with_(e.t.exp()), axes, "add", bool(keepdims))
        mk = m if keepdims else reduce(m, axes, "max", False)
        return binary("add", s.with_(s.t.log()), mk, op)
    if prep is not None:
        x = unary(x, prep)
    y = reduce(x, axes, fn, bool(keepdims))
    if finish == "mean":
        return scale(y, 1.0 / math.prod(data.shape[a] for a in axes))
    if finish is not None:
        y = unary(y, finish)
    return y


def _ints(x):
    if x is None:
        return None
    if not is_const(x):
        from ...errors import UnsupportedError

        raise UnsupportedError("axes must be a constant")
    return [int(v) for v in np.asarray(x).reshape(-1)]


def _register(op, axes_input_from):
    def attr_form(ctx, data, *, axes=None, keepdims=1):
        return _reduce(ctx, op, data, axes, keepdims, 0)

    def input_form(ctx, data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        return _reduce(ctx, op, data, _ints(axes), keepdims, noop_with_empty_axes)

    attr_form.__name__ = input_form.__name__ = op.lower()
    early = [v for v in versions(op) if v < axes_input_from]
    late = [v for v in versions(op) if v >= axes_input_from]
    if early:
        converter(op, *early)(attr_form)
    if late:
        converter(op, *late, const=(1,))(input_form)


for _op in _KINDS:
    _register(_op, 13 if _op == "ReduceSum" else 18)
