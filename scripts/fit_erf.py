"""Derive the coefficients of the vector erf (backend/vmath.py: ERF_P, ERF_Q).

    python3 scripts/fit_erf.py

erf(x) = x * P(x^2) / Q(x^2) on |x| <= ERF_CLAMP (beyond it erf is 1 to float32 precision),
P of degree 6 and Q of degree 4 in t = x^2, Q(0) = 1. The fit minimises the largest relative
error over a dense grid: weighted linear least squares of P(t) - g(t) Q(t) with g = erf(x)/x,
the weights raised where the error is largest at each step (Lawson's iteration). The
coefficients are rounded to float32, and the float32 evaluation (FMA Horner steps, one division)
is checked against math.erf: its largest relative error is printed.
"""
from __future__ import annotations

import math

import numpy as np

CLAMP = 3.92
DEG_P, DEG_Q = 6, 4


def fit(iterations: int = 60):
    x = np.unique(np.concatenate([np.linspace(1e-4, CLAMP, 4000),
                                  CLAMP * (1 - np.cos(np.linspace(0, np.pi / 2, 4000)))]))
    x = x[x > 0]
    g = np.array([math.erf(v) for v in x]) / x
    t = x * x
    a = np.hstack([np.vander(t, DEG_P + 1, increasing=True),
                   -(g[:, None] * np.vander(t, DEG_Q + 1, increasing=True)[:, 1:])])
    w, best = np.ones_like(t), None
    for _ in range(iterations):
        scale = w / np.abs(g)
        c, *_ = np.linalg.lstsq(a * scale[:, None], g * scale, rcond=None)
        p, q = c[:DEG_P + 1], np.concatenate([[1.0], c[DEG_P + 1:]])
        err = (np.polyval(p[::-1], t) / np.polyval(q[::-1], t) - g) / g
        worst = np.abs(err).max()
        if best is None or worst < best[0]:
            best = (worst, p, q)
        w = w * np.sqrt(np.abs(err) / worst) + 1e-12
        w /= w.max()
    return best[1].astype(np.float32), best[2].astype(np.float32)


def float32_erf(x: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The vector code's arithmetic: clamp, t = x*x, Horner steps rounded once each (FMA)."""
    x = np.clip(x, -CLAMP, CLAMP).astype(np.float32)
    t = (x.astype(np.float64) * x).astype(np.float32)

    def horner(c):
        acc = np.full_like(t, c[-1])
        for k in c[-2::-1]:
            acc = (acc.astype(np.float64) * t + np.float64(k)).astype(np.float32)
        return acc

    num = (horner(p).astype(np.float64) * x).astype(np.float32)
    return (num.astype(np.float64) / horner(q)).astype(np.float32)


def main() -> None:
    p, q = fit()
    xs = np.concatenate([np.linspace(-6, 6, 200000), np.geomspace(1e-30, 6, 100001)]).astype(np.float32)
    xs = xs[xs != 0]
    ref = np.array([math.erf(float(v)) for v in xs])
    rel = np.abs(float32_erf(xs, p, q) - ref) / np.abs(ref)
    print("ERF_P =", [float(v) for v in p])
    print("ERF_Q =", [float(v) for v in q])
    print(f"largest relative error in float32: {rel.max():.2e}")


if __name__ == "__main__":
    main()
