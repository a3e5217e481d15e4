"""The element-wise functions' algorithms, shared by every instruction set's straight-line code
(backend/x86/vmath.py, backend/aarch64/vmath.py): their constants and accuracy.

Accuracy (float32, checked against numpy in tests/exec/test_codegen_features.py for x86 and
tests/exec/test_aarch64_codegen.py for AArch64):
    exp      inputs clamped to [-104, 89]; n = round(x log2 e), r = x - n ln2 (ln2 in two
             parts), a degree-7 Taylor polynomial p of e^r, times 2^n as 2^h * 2^(n-h) with
             h = n >> 1 (h added to p's exponent field, then a multiply by the float 2^(n-h)),
             so that results above the float range are inf and tiny ones underflow gradually
             as the multiply rounds them; max relative error 3e-7 where the result is a normal
             number, absolute 2e-45 below
    log      positive normal inputs; exponent e and mantissa m in [1, 2), t = (m-1)/(m+1),
             log x = e ln2 + 2 atanh(t) by its series to t^13; max absolute error 2e-7,
             relative 3e-7 away from x=1
    sigmoid  1 / (1 + exp(-x)); max relative error 5e-7
    tanh     1 - 2 / (exp(2x) + 1); max absolute error 2e-7 (relative error grows near 0,
             where the absolute error stays under 2e-7)
    gelu     tanh approximation 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))), evaluated as
             x * sigmoid(2√(2/π)(x + 0.044715x³)) to avoid cancellation; max relative error 1e-6
    erf      x clamped to [-3.92, 3.92] (erf is ±1 beyond, to float precision), then
             x P(x²) / Q(x²), P of degree 6 and Q of degree 4 fitted for the least largest
             relative error (scripts/fit_erf.py); max relative error 4e-7
"""
from __future__ import annotations

import math

LOG2E = 1.4426950408889634
LN2_HI = 0.693145751953125          # exactly representable: n * LN2_HI has no rounding error
LN2_LO = 1.428606765330187e-06
EXP_POLY = [1 / math.factorial(i) for i in range(8)]     # Taylor on |r| <= ln2/2
LOG_SERIES = [1 / (2 * i + 1) for i in range(7)]          # atanh series: 1, 1/3, ..., 1/13
GELU_K = 2 * math.sqrt(2 / math.pi)
EXP_CLAMP = (-104.0, 89.0)      # e^89 > the largest float: inf; e^-104 rounds to 0
GELU_CUBIC = 0.044715
ERF_CLAMP = 3.92
# float32 coefficients, lowest degree first (scripts/fit_erf.py)
ERF_P = [1.1283791065216064, 0.19994314014911652, 0.05057581514120102, 0.003702363697811961,
         0.0001418651081621647, -1.9578087631089147e-06, 1.9922349991929877e-08]
ERF_Q = [1.0, 0.5105266571044922, 0.11500611901283264, 0.014354782178997993, 0.0009562101913616061]
