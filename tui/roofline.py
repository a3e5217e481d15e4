"""A roofline drawn in text: where the workload sits under min(peak, bandwidth x intensity).

Both axes are logarithmic.  The roof is `-` where compute-bound and `/` where
memory-bound; `*` marks the measured point and `|` the roof above it:

      102 |        /--------------
          |      /          *
     GF/s |    /
          |  /
        1 |/
          +-----------------------
     fl/B .1   1    10   100   1k
"""
from __future__ import annotations

import math

X_LO, X_HI = 0.1, 1000.0      # flop/B across the width


def _col(x: float, width: int) -> int:
    x = min(max(x, X_LO), X_HI)
    return round((math.log10(x) - math.log10(X_LO)) / (math.log10(X_HI) - math.log10(X_LO)) * (width - 1))


def _row(y: float, lo: float, hi: float, height: int) -> int:
    """Row 0 at the top (hi)."""
    if y <= lo:
        return height - 1
    f = (math.log10(min(y, hi)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    return height - 1 - round(f * (height - 1))


def roofline(intensity: float, gflops: float, peak: float, bandwidth: float,
             width: int = 30, height: int = 5, unit: str = "GF/s") -> list[str]:
    """`height + 2` lines of at most `width` characters (axis labels included); `gflops`, `peak`
    and `bandwidth` (GB/s) in the same thousands as `unit` ("TF/s": TFLOPS and TB/s)."""
    label_w = 7
    w = max(8, width - label_w)
    if peak <= 0 or bandwidth <= 0:
        return ["(no roofline: peak or bandwidth unknown)"[:width]]
    hi = peak
    lo = peak / 100.0
    grid = [[" "] * w for _ in range(height)]
    for c in range(w):
        x = 10 ** (math.log10(X_LO) + c / (w - 1) * (math.log10(X_HI) - math.log10(X_LO)))
        roof = min(peak, bandwidth * x)
        if roof < lo:
            continue
        grid[_row(roof, lo, hi, height)][c] = "-" if roof >= peak else "/"
    if intensity > 0:
        c = _col(intensity, w)
        top = _row(min(peak, bandwidth * intensity), lo, hi, height)
        if gflops > 0:
            r = _row(gflops, lo, hi, height)
            for rr in range(top + 1, r):
                grid[rr][c] = "|" if grid[rr][c] == " " else grid[rr][c]
            grid[r][c] = "*"
        else:
            grid[top][c] = "?"
    lines = []
    for r in range(height):
        if r == 0:
            lab = f"{peak:>5.0f}"
        elif r == height - 1:
            lab = f"{lo:>5.2g}"
        else:
            lab = unit if r == height // 2 else ""
        lines.append(f"{lab:>5} |" + "".join(grid[r]))
    lines.append(" " * 6 + "+" + "-" * w)
    ticks = [" "] * (w + 7)
    for v, text in ((0.1, ".1"), (1, "1"), (10, "10"), (100, "100"), (1000, "1k")):
        c = 7 + _col(v, w)
        start = min(max(c - len(text) // 2, 7), len(ticks) - len(text))
        ticks[start:start + len(text)] = text
    lines.append(("fl/B " + "".join(ticks)[5:]).rstrip()[:width])
    return [ln[:width] for ln in lines]
