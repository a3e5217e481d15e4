"""numpy as a peer: the workloads as numpy expressions, and the reference other peers are checked against."""
from __future__ import annotations

import numpy as np

from .common import PeerSkipped, Prepared


def _numpy_fn(w, a):
    from ..workloads import conv_reference, dwconv_reference

    p = w.p
    if w.kind == "mm":
        A, B = a["A"], a["B"]
        out = np.empty((A.shape[0], B.shape[1]), np.float32)
        return lambda: np.matmul(A, B, out=out)
    if w.kind == "mlp":
        def f():
            y = a["X"]
            for i in range(3):
                y = np.maximum(y @ a[f"W{i}"] + a[f"b{i}"], 0)
            return y
        return f
    if w.kind == "conv":
        return lambda: conv_reference(a["X"], a["W"], p["stride"], p["pad"])
    if w.kind == "dwconv":
        return lambda: dwconv_reference(a["X"], a["W"], p["stride"], p["pad"])
    if w.kind == "mbv3":
        def g():
            d = np.maximum(dwconv_reference(a["X"], a["Wd"], 1, 1), 0)
            return np.maximum(d.reshape(-1, d.shape[2]) @ a["Wp"], 0)
        return g
    raise PeerSkipped(f"numpy has no {w.kind}")



def prepare(w, a) -> Prepared:
    return Prepared({"numpy": _numpy_fn(w, a)})


def reference(w, a) -> np.ndarray:
    """The workload's output computed by numpy, in its reference layout."""
    return np.asarray(_numpy_fn(w, a)())
