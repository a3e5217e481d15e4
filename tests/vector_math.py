"""Inputs, numpy references and documented error bounds of the element-wise functions
(backend/vmath.py), shared by every instruction set's accuracy tests."""
import math

import numpy as np

def _as_float32(x, fn):
    """fn(x) in float64, rounded as a float32 result is (above the float range: inf)."""
    with np.errstate(over="ignore"):
        return fn(x).astype(np.float32).astype(np.float64)


MATH = {
    # op: (input sampler, numpy reference, rtol, atol)
    # the whole float range: overflow to inf (88.7228 and up), gradual underflow (-87.3 and down)
    "exp": (lambda r: np.concatenate([r.uniform(-80, 80, 3000), r.uniform(-110, -80, 500), r.uniform(80, 200, 591),
                                      [88.3, 88.5, 88.72, 88.7228, 88.72284, 89.0, 1e30, -1e30]]),
            lambda x: _as_float32(x, np.exp), 1e-6, 2e-45),
    "log": (lambda r: np.exp(r.uniform(-80, 80, 4099)), np.log, 1e-6, 3e-7),
    "sigmoid": (lambda r: r.uniform(-30, 30, 4099), lambda x: 1 / (1 + np.exp(-x)), 2e-6, 0),
    "tanh": (lambda r: r.uniform(-12, 12, 4099), np.tanh, 0, 3e-7),
    "gelu": (lambda r: r.uniform(-12, 12, 4099),
             lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), 3e-6, 1e-7),
    "sqrt": (lambda r: r.uniform(0, 1e6, 4099), np.sqrt, 1e-7, 0),
    "reciprocal": (lambda r: r.uniform(0.01, 100, 4099), lambda x: 1 / x, 1e-7, 0),
    "abs": (lambda r: r.standard_normal(4099), np.abs, 0, 0),
    "neg": (lambda r: r.standard_normal(4099), np.negative, 0, 0),
    "relu": (lambda r: r.standard_normal(4099), lambda x: np.maximum(x, 0), 0, 0),
    # both sides of the clamp at 3.92, tiny arguments (erf(x) ~ 2x/sqrt(pi)) and huge ones
    "erf": (lambda r: np.concatenate([r.uniform(-5, 5, 3000), r.uniform(-0.5, 0.5, 1000), [1e-30, -1e-20, 3.9, 3.92,
                                                                                            3.93, -4.0, 1e30, -1e30]]),
            lambda x: np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64), 4e-7, 0),
}
