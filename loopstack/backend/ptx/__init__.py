"""The GPU backend: a loop tree computing a GEMM or an NHWC convolution -> an mma.sync PTX kernel.

    compile_ptx(tree, target="sm_90", schedule=None, allow_tf32=False) -> PtxKernel

`schedule` is a `GpuSchedule` (or a dict of its knobs, see `knobs.py`); None lets the
analytical model (`model.py`) pick among a few presets for the problem's shape.  float32
operands multiply as TF32 (mantissas rounded to 10 bits, f32 sums) only when asked for:
`allow_tf32`, or the statement's `tensorize "mma.m16n8k8.tf32"`.  A tree whose
loops are bound to the grid and to warps (`block`, `warp` annotations) states its knobs itself
(`bind.py`); `schedule` then gives only the knobs the loops do not state, and must agree with
those they do.  The tree is matched as a contraction (`match.py`), the knobs are checked against
it, and `emit.py` writes the kernel.  `compile_ms` is the PTX generation time; the driver's
JIT runs on first launch and is reported as `jit_ms`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ...errors import UnsupportedError
from .bind import binds, check_request, tree_schedule
from .emit import GemmEmitter
from .kernel import PtxKernel
from .knobs import GpuSchedule, schedule_from  # noqa: F401
from .match import match

TARGETS = ("sm_80", "sm_90")


@dataclass(frozen=True)
class GpuTarget:
    """A GPU and the tensor-core schedule to compile for it: `lt.compile(C, target=GpuTarget(...))`.
    A schedule of None lets the analytical model pick the knobs; `allow_tf32` lets float32
    operands multiply as TF32 (as torch's `allow_tf32` does)."""
    arch: str = "sm_90"
    schedule: GpuSchedule | None = None
    named: tuple = ()           # of()'s knobs, (name, value): the ones a bound tree is completed with
    allow_tf32: bool = False

    @staticmethod
    def of(arch: str = "sm_90", allow_tf32: bool = False, **knobs) -> "GpuTarget":
        """GpuTarget("sm_90", GpuSchedule(**knobs)): unnamed knobs keep GpuSchedule's defaults
        (or, for a tree that binds its loops, the loops' and the model's choice)."""
        return GpuTarget(arch, schedule_from(knobs) if knobs else None, tuple(sorted(knobs.items())), allow_tf32)

    def knobs(self):
        """What compile_ptx is given: the named knobs, else the whole schedule (or None)."""
        return dict(self.named) if self.named else self.schedule


def is_gpu_target(target) -> bool:
    return isinstance(target, GpuTarget) or (isinstance(target, str) and target.startswith("sm_"))


def compile_gpu(tree, target) -> PtxKernel:
    """compile_ptx for a target name ("sm_90": default knobs) or a GpuTarget."""
    if isinstance(target, GpuTarget):
        return compile_ptx(tree, target.arch, target.knobs(), target.allow_tf32)
    return compile_ptx(tree, target)


def compile_ptx(tree, target: str = "sm_90", schedule=None, allow_tf32: bool = False) -> PtxKernel:
    t0 = time.perf_counter()
    if target not in TARGETS:
        raise UnsupportedError(f"GPU target {target!r}: one of {', '.join(TARGETS)}")
    con = match(tree)
    mma = con.mma
    check_request(con, allow_tf32, target)
    if binds(con):                  # the loops state the knobs; `schedule` completes them
        given = {} if schedule is None else schedule if isinstance(schedule, dict) else schedule.knobs()
        schedule_from(given)        # an unknown knob's name is refused as without bound loops
        schedule = tree_schedule(con, mma, target, given)
    elif schedule is None:          # the model's pick among a few presets (microseconds)
        from .model import default_schedule
        schedule = default_schedule(con, target)
    sched = schedule_from(schedule).check(mma, target, con.b_kmajor, con.conv)
    names = [b.name for b in tree.arguments]
    dtypes = {b.name: b.dtype for b in tree.buffers}
    kind = "conv" if con.conv else "gemm"
    entry = f"loopstack_{kind}_{mma.label.replace('.', '_')}"
    em = GemmEmitter(con, sched, mma, target, entry, names, dtypes)
    ptx = em.emit()
    if sched.REORDER_INNER and con.conv is None:
        grid = (-(-con.m // sched.bm), -(-con.n // sched.bn), con.batch)
    else:
        grid = (-(-con.n // sched.bn), -(-con.m // sched.bm), con.batch)
    k = PtxKernel(tree, ptx, entry, grid, (sched.threads, 1, 1), em.shared_bytes, sched, con, target)
    k.compile_ms = (time.perf_counter() - t0) * 1e3
    return k
