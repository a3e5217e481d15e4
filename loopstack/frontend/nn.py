"""Neural-network building blocks on the DSL (loop_tool's `nn` signatures)."""
from __future__ import annotations

from ..errors import ShapeError, SymbolError
from .symbols import Expr, Size, Symbol, as_expr
from .tensor import Tensor, as_tensor


def relu(x: Tensor) -> Tensor:
    return as_tensor(x)._unary("relu")


def relu6(x: Tensor) -> Tensor:
    return relu(x).min(6.0)


def sigmoid(x: Tensor) -> Tensor:
    return as_tensor(x)._unary("sigmoid")


def swish(x: Tensor) -> Tensor:
    return x * sigmoid(x)


def hardswish(x: Tensor) -> Tensor:
    return x * relu6(x + 3.0) * (1.0 / 6.0)


def tanh(x: Tensor) -> Tensor:
    return as_tensor(x)._unary("tanh")


def gelu(x: Tensor) -> Tensor:
    """GELU, tanh approximation."""
    return as_tensor(x)._unary("gelu")


def softmax(x: Tensor, sym: Symbol) -> Tensor:
    e = (x - x.max_reduce(sym)).exp()
    return e / e.sum(sym)


def linear(X: Tensor, W: Tensor, bias=None) -> Tensor:
    """Reduce over the dimensions X and W share; add bias."""
    red = [v for v in X.symbolic_shape if v in W.symbolic_shape]
    if not red:
        raise SymbolError("linear: X and W share no dimension to reduce over")
    Y = (X * W).sum(*red)
    return Y + bias if bias is not None else Y


def pad(X: Tensor, *args) -> Tensor:
    """`pad(X, (s.h, 1), (s.w, (0, 1)))`."""
    for d, amount in args:
        X = X.pad(d, *amount) if isinstance(amount, tuple) else X.pad(d, amount)
    return X


def _window_view(X, spatial, window, stride, dilation=1):
    if len(spatial) != len(window):
        raise ShapeError(f"{len(spatial)} spatial dimensions but {len(window)} window dimensions")
    for s in spatial:
        if s not in X.symbolic_shape:
            raise SymbolError(f"{s.name} is not a dimension of X")
    new = [Symbol(s.name + "o") for s in spatial]
    outer = [d for d in X.symbolic_shape if d not in spatial]
    cons = [(s, as_expr(o) * stride + as_expr(k) * dilation) for s, o, k in zip(spatial, new, window)]
    return X.to(*outer, *new, *window, constraints=cons)


def conv(X: Tensor, W: Tensor, spatial, window, stride: int = 1, channel_reduce: bool = True,
         dilation: int = 1) -> Tensor:
    """Direct convolution; depthwise when `channel_reduce` is False."""
    Xw = _window_view(X, spatial, window, stride, dilation)
    if channel_reduce:
        red = [v for v in Xw.symbolic_shape if v in W.symbolic_shape and v not in window] + list(window)
    else:
        red = list(window)
    return (Xw * W).sum(*red)


def maxpool(X: Tensor, spatial, window, stride: int = 1) -> Tensor:
    """Max over windows: `window` names the window dimensions (sized elsewhere), or is an int k
    for a k x ... x k window, as loop_tool's C++ `nn::maxpool(X, spatial, k, stride)` spells it."""
    if isinstance(window, int) and not isinstance(window, bool):
        if window < 1:
            raise ShapeError(f"maxpool: the window size must be a positive int, got {window}")
        k, window = window, [Symbol(s.name + "_k") for s in spatial]
        X = X.to(*X.symbolic_shape, constraints=[(Size(w), Expr(k)) for w in window])
    elif isinstance(window, Symbol):
        window = [window]
    return _window_view(X, spatial, window, stride).max_reduce(*window)


def mean(X: Tensor, dims) -> Tensor:
    dims = list(dims)
    X.unify()
    count = 1
    sizes = dict(zip(X.symbolic_shape, X.shape))
    for d in dims:
        if d not in sizes:
            raise SymbolError(f"mean: {getattr(d, 'name', d)} is not a dimension of X")
        count *= sizes[d]
    return X.sum(*dims) * (1.0 / count)


def batch_norm(x, mean, var, weight, bias, eps: float = 1e-5):
    return (x - mean) * weight / (var + eps).sqrt() + bias
