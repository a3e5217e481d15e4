"""What the converter modules share: schema versions and small DSL compositions."""
from __future__ import annotations

from functools import lru_cache

from ..values import Dyn, broadcast


@lru_cache(maxsize=None)
def _history():
    import onnx.defs

    out: dict = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain in ("", "ai.onnx"):
            out.setdefault(s.name, set()).add(s.since_version)
    return out


def versions(op: str, first: int = 1) -> tuple[int, ...]:
    """Every since_version of `op`'s schema from `first` on (the ones whose semantics a
    converter written for `first` covers: later ones only widened the type constraints)."""
    return tuple(sorted(v for v in _history().get(op, ()) if v >= first))


def binary(fn: str, a: Dyn, b: Dyn, what: str) -> Dyn:
    (ta, tb), dims, shape = broadcast([a, b], what)
    hint = next((v.layout for v in (a, b) if v.layout is not None and v.rank == len(shape)), None)
    return Dyn(ta._binary(fn, tb), dims, shape, _ops(a, b), layout=hint)


def _ops(*vals) -> tuple:
    seen = []
    for v in vals:
        for o in v.ops:
            if o not in seen:
                seen.append(o)
    return tuple(seen)


def scale(v: Dyn, k: float) -> Dyn:
    return v if k == 1.0 else v.with_(v.t * float(k))


def unary(v: Dyn, fn) -> Dyn:
    """`fn` applied to v's tensor (a DSL expression of one tensor)."""
    return v.with_(fn(v.t))


def clamp01(t):
    return t.max(0.0).min(1.0)

