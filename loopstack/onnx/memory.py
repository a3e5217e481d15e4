"""Intermediate buffers placed in one arena by liveness.

A buffer is live from the step that writes it to the last step that reads it, both included
(a kernel may read its inputs after it has begun writing its output). Buffers are placed in
order of their first step, larger first at a tie, each at the lowest offset where it overlaps
no placed buffer whose life overlaps its own; a buffer whose readers are done leaves its bytes
to the next. Peak memory is then close to the largest set of buffers live at once.
"""
from __future__ import annotations

from dataclasses import dataclass

ALIGN = 64   # every buffer starts on a cache line (the kernels' vector loads)


@dataclass(frozen=True)
class Interval:
    name: str
    nbytes: int
    start: int      # first step that touches it
    end: int        # last step that touches it (inclusive)


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan(intervals) -> tuple[dict, int]:
    """({name: byte offset}, arena bytes) for `intervals`."""
    placed: list = []   # (offset, size, interval)
    offsets = {}
    for iv in sorted(intervals, key=lambda i: (i.start, -i.nbytes, i.name)):
        size = _round(max(iv.nbytes, 1))
        busy = sorted((off, sz) for off, sz, other in placed if other.start <= iv.end and iv.start <= other.end)
        at = 0
        for off, sz in busy:
            if at + size <= off:
                break
            at = max(at, off + sz)
        offsets[iv.name] = at
        placed.append((at, size, iv))
    arena = max((off + sz for off, sz, _ in placed), default=0)
    return offsets, arena


def peak_live(intervals) -> int:
    """The most bytes live at one step (a lower bound for any placement)."""
    steps = {s for iv in intervals for s in (iv.start, iv.end)}
    return max((sum(_round(iv.nbytes) for iv in intervals if iv.start <= s <= iv.end) for s in steps), default=0)
