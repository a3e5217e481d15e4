"""Element-wise operators: arithmetic with numpy broadcasting and activations.

Each extends its inputs' lazy expressions, so chains fuse into one kernel. All-constant
inputs fold with the numpy form given as `fold`.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedError
from ..registry import converter
from ..values import Dyn, is_const
from .common import binary, clamp01, unary, versions

_BINARY = {"Add": ("add", np.add), "Sub": ("sub", np.subtract), "Mul": ("mul", np.multiply),
           "Div": ("div", None)}


def _int_div(a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return (np.trunc(a / b)).astype(np.result_type(a, b))   # C division, as ONNX
    return np.divide(a, b)


def _fold_binary(fn):
    def fold(A, B):
        out = fn(A, B)
        return out.astype(np.result_type(A, B))
    return fold


def _register_binary(op, fn, np_fn):
    def convert(ctx, A, B):
        return binary(fn, ctx.dyn(A, f"{op} input A"), ctx.dyn(B, f"{op} input B"), op)

    convert.__name__ = op.lower()
    converter(op, *versions(op, 7), fold=_fold_binary(np_fn or _int_div))(convert)


for _op, (_fn, _np) in _BINARY.items():
    _register_binary(_op, _fn, _np)


def _variadic(op, fn, np_fn, mean=False):
    def convert(ctx, *xs):
        vals = [ctx.dyn(x, f"{op} input {i}") for i, x in enumerate(xs)]
        acc = vals[0]
        for v in vals[1:]:
            acc = binary(fn, acc, v, op)
        if mean:
            acc = acc.with_(acc.t * (1.0 / len(vals)))
        return acc

    def fold(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = np_fn(out, x)
        return out / len(xs) if mean else out

    convert.__name__ = op.lower()
    converter(op, *versions(op, 8), fold=fold)(convert)


_variadic("Sum", "add", np.add)
_variadic("Mean", "add", np.add, mean=True)
_variadic("Max", "max", np.maximum)
_variadic("Min", "min", np.minimum)


# ---------------------------------------------------------------------------- activations
def _register_unary(op, first, build, fold=None, **attrs):
    """An activation `build(tensor, **attrs)` registered with the attribute defaults `attrs`."""
    import inspect

    def convert(ctx, X, **kw):
        kw = {**attrs, **kw}
        return unary(ctx.dyn(X, f"{op} input"), lambda t: build(t, **kw))

    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD),
              inspect.Parameter("X", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in attrs.items()]
    convert.__signature__ = inspect.Signature(params)
    convert.__name__ = op.lower()
    converter(op, *versions(op, first), fold=fold)(convert)


def _softplus(t):
    return t.max(0.0) + ((-t.abs()).exp() + 1.0).log()


def _elu(t, alpha):
    return t.max(0.0) + ((t.min(0.0)).exp() - 1.0) * alpha


def _np_unary(fn):
    def fold(X):
        return fn(X).astype(X.dtype)
    return fold


_register_unary("Relu", 6, lambda t: t._unary("relu"), _np_unary(lambda x: np.maximum(x, 0)))
_register_unary("Sigmoid", 6, lambda t: t._unary("sigmoid"))
_register_unary("Tanh", 6, lambda t: t._unary("tanh"))
_register_unary("Exp", 6, lambda t: t.exp())
_register_unary("Log", 6, lambda t: t.log())
_register_unary("Sqrt", 6, lambda t: t.sqrt(), _np_unary(np.sqrt))
_register_unary("Reciprocal", 6, lambda t: t.reciprocal(), _np_unary(np.reciprocal))
_register_unary("Abs", 6, lambda t: t.abs())
_register_unary("Neg", 6, lambda t: -t, lambda X: -X)
_register_unary("Erf", 9, lambda t: t._unary("erf"))
_register_unary("Softsign", 1, lambda t: t / (t.abs() + 1.0))
_register_unary("Softplus", 1, _softplus)
_register_unary("HardSwish", 14, lambda t: t * clamp01(t * (1.0 / 6.0) + 0.5))
_register_unary("LeakyRelu", 6, lambda t, alpha: t.max(0.0) + t.min(0.0) * alpha, alpha=0.01)
_register_unary("Elu", 6, _elu, alpha=1.0)
_register_unary("Selu", 6, lambda t, alpha, gamma: _elu(t, alpha) * gamma,
                alpha=1.67326319217681884765625, gamma=1.05070102214813232421875)
_register_unary("Mish", 18, lambda t: t * _softplus(t)._unary("tanh"))
_register_unary("Celu", 12, lambda t, alpha: t.max(0.0) + (((t.min(0.0)) * (1.0 / alpha)).exp() - 1.0) * alpha,
                alpha=1.0)
_register_unary("HardSigmoid", 6, lambda t, alpha, beta: clamp01(t * alpha + beta), alpha=0.2, beta=0.5)


def _gelu(t, approximate):
    if approximate == "tanh":
        c = math.sqrt(2 / math.pi)
        return t * 0.5 * ((t + t * t * t * 0.044715) * c)._unary("tanh") + t * 0.5
    if approximate != "none":
        raise UnsupportedError(f"Gelu approximate={approximate!r}")
    return t * 0.5 + t * 0.5 * (t * (1 / math.sqrt(2)))._unary("erf")


_register_unary("Gelu", 20, _gelu, approximate="none")


@converter("PRelu", *versions("PRelu", 7))
def prelu(ctx, X, slope):
    x, s = ctx.dyn(X, "PRelu input"), ctx.dyn(slope, "PRelu slope")
    neg = binary("mul", x.with_(x.t.min(0.0)), s, "PRelu")
    return binary("add", x.with_(x.t.max(0.0)), neg, "PRelu")


def _scalar(x, what):
    if x is None:
        return None
    if not is_const(x):
        raise UnsupportedError(f"{what} must be a constant")
    if x.size != 1:
        raise UnsupportedError(f"{what} must be a scalar, got shape {x.shape}")
    return float(x.reshape(()))


def _clip(ctx, x: Dyn, lo, hi):
    t = x.t
    if lo is not None:
        t = t.max(float(lo))
    if hi is not None:
        t = t.min(float(hi))
    return x.with_(t)


@converter("Clip", 6)
def clip_6(ctx, X, *, min=-3.4028234663852886e38, max=3.4028234663852886e38):  # noqa: A002
    return _clip(ctx, ctx.dyn(X, "Clip input"), min, max)


@converter("Clip", *versions("Clip", 11), const=(1, 2))
def clip(ctx, X, lo=None, hi=None):
    return _clip(ctx, ctx.dyn(X, "Clip input"), _scalar(lo, "Clip min"), _scalar(hi, "Clip max"))


_POWERS = {1.0: lambda t: t, 2.0: lambda t: t * t, 3.0: lambda t: t * t * t, 0.5: lambda t: t.sqrt(),
           -1.0: lambda t: t.reciprocal(), -0.5: lambda t: t.sqrt().reciprocal(), -2.0: lambda t: (t * t).reciprocal()}


@converter("Pow", *versions("Pow", 7), fold=lambda X, Y: np.power(X, Y).astype(X.dtype))
def pow_(ctx, X, Y):
    if not is_const(Y) or Y.size != 1:
        raise UnsupportedError("Pow: only a constant scalar exponent is supported")
    e = float(Y.reshape(()))
    if e not in _POWERS:
        raise UnsupportedError(f"Pow: exponent {e} is not supported (supported: {sorted(_POWERS)})")
    x = ctx.dyn(X, "Pow base")
    return unary(x, _POWERS[e])
