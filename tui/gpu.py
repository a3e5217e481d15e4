"""The status panel's numbers for a GPU target (sm_80, sm_90): `measure_gpu(tree, seconds, target)`.

Every change compiles the tree to PTX (a few ms).  Where a CUDA driver and GPU answer, the kernel
is timed there for about `seconds`; elsewhere its speed is the analytical model's prediction for
an H100 (`loopstack.backend.ptx.model`), marked as such, so that a schedule can be shaped on a
laptop.  The panel also shows what decides a kernel's speed beyond its loops: the tensor-core
knobs the loops stated (or the model completed), and, when ptxas is on the PATH, the registers
and spills it reports (a schedule that spills is slow however well it tiles).
"""
from __future__ import annotations

from loopstack.backend.ptx import GpuTarget
from loopstack.backend.ptx.model import H100, predict_seconds
from loopstack.errors import LoopstackError

from .measure import Measurement, buffers_of, not_compiled, reported


def as_gpu_target(target) -> GpuTarget:
    return target if isinstance(target, GpuTarget) else GpuTarget(target)


def knob_lines(schedule) -> tuple:
    s = schedule
    return (f"warps {s.BLK_ROW_WARPS}x{s.BLK_COL_WARPS}, tiles {s.WARP_ROW_TILES}x{s.WARP_COL_TILES}",
            f"chunk {s.CHUNK}, stages {s.stages}, reorder {s.REORDER_INNER}")


def resource_lines(kernel) -> tuple:
    """Registers and spills (ptxas -v, when it is on the PATH), shared memory, threads, grid."""
    from loopstack.isa.ptx import ptxas

    if ptxas.ptxas_path() is None:
        regs = "regs ? (ptxas not on PATH)"
    else:
        try:
            r = ptxas.resources(kernel.ptx, kernel.target)[kernel.entry]
        except (LoopstackError, KeyError) as e:
            regs = f"ptxas: {str(e).splitlines()[0] if str(e) else 'no report'}"
        else:
            spills = r["spill_stores"] + r["spill_loads"]
            regs = f"regs {r['registers']}, " + (f"SPILLS {spills} B" if spills else "no spills")
    grid = "x".join(str(g) for g in kernel.grid)
    return (regs, f"smem {kernel.shared_bytes / 1024:.1f}K, {kernel.block[0]} threads", f"grid {grid}")


def measure_gpu(tree, seconds: float, target) -> Measurement:
    """Compile `tree` for the GPU target; time it there, or predict its speed where no GPU is."""
    from loopstack.isa.ptx import driver

    target = as_gpu_target(target)
    base = dict(target=target.arch, unit="TFLOPS", listing="PTX", bandwidth=H100.dram_gbs)
    try:
        kernel = tree.compile(target)
    except Exception as e:  # noqa: BLE001 - shown on the status line; the session must survive
        return not_compiled(tree, e, base)
    con = kernel.contraction
    base.update(flops=kernel.flops, bytes_moved=kernel.bytes_moved, compile_ms=kernel.compile_ms,
                buffers=buffers_of(kernel.tree), asm=kernel.ptx, peak=H100.mma_rate(con.mma.ab) / 1e9,
                details=(f"mma   {con.mma.shape} {con.mma.label}",) + knob_lines(kernel.schedule)
                + resource_lines(kernel), kernel_text=kernel.schedule_text())
    if not driver.available():
        predicted = kernel.flops / predict_seconds(con, kernel.schedule) / 1e9
        return Measurement(gflops=predicted, predicted=True, **base)
    try:
        gflops = kernel.benchmark(runs=3, min_seconds=seconds)
    except Exception as e:  # noqa: BLE001 - as measure(): reported, never a crash
        return Measurement(error=f"run: {reported(e)}", **base)
    return Measurement(gflops=gflops, runs=3, seconds=seconds, **base)


SIM_FLOPS = 1 << 25     # the most the quit check runs in the PTX interpreter (MM-256: about 12 s)


def gpu_result(tensor, target) -> tuple:
    """(the tensor computed by its GPU kernel, where it ran): on the GPU where one answers, else
    in the PTX interpreter (a test oracle, slow: problems of up to SIM_FLOPS)."""
    import numpy as np

    from loopstack.errors import UnsupportedError
    from loopstack.frontend.run import compiled
    from loopstack.isa.ptx import driver

    if driver.available():
        return tensor.numpy(target), " (run on the GPU)"
    kernel, reads, (shape, dtype) = compiled(tensor, target)
    if kernel.flops > SIM_FLOPS:
        raise UnsupportedError(f"no GPU here, and {kernel.flops / 1e6:.0f} MFLOP is more than the PTX "
                               f"interpreter checks in seconds (it takes up to {SIM_FLOPS / 1e6:.0f})")
    print("no GPU here: checking the kernel in the PTX interpreter ...", flush=True)
    out = np.empty(shape, dtype)
    kernel.simulate(*[r.data for r in reads], out)
    return out, " (in the PTX interpreter: no GPU here)"
