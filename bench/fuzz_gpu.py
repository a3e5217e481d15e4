"""Robustness at scale for the GPU backend: random contractions x random tensor-core schedules,
each kernel assembled by ptxas and run in the SIMT reference interpreter against numpy.

    python bench/fuzz_gpu.py --n 2000 --seed 0 [--jobs 2] [--targets sm_80,sm_90,device] [--json FILE]
    python bench/fuzz_gpu.py --case 17 --seed 0      # one case, in this process, verbosely

A case is a GEMM (B [k, n] or [n, k]; bias, relu, scale, sigmoid / tanh / gelu / erf / abs; its
result cast to another type, f16 / bf16 / int8 sums as float32, tf32 ones as f16 or bf16), a
batched GEMM (B per batch or shared), an NHWC convolution (1x1 or 3x3, stride 1 or 2, padded or not, batch 1 or 2) or an
8-bit GEMM requantized to int8/uint8, in f16, bf16, float32 (as tf32) or 8-bit integers (int8
or uint8 on either side; the batched GEMMs one type for both) with sizes drawn to straddle the
tiles (a multiple of 16 or 32, one more, one less, or anything up to 160).  Its schedule is
random knobs, the analytical model's choice, or the same knobs stated by the tree's loops
(`block` / `warp` bindings).  The kernel is compiled for one of the targets, assembled by
ptxas for it, run in the interpreter and compared with numpy: integers exactly, floats within
their rounding.  Knobs the schedule check refuses for the problem (shared memory, channels a
k-step does not divide) are counted as `refused`, which is not a failure; the other statuses
are those of `fuzz.py` (wrong, crash, hang, exception, late).

The target `device` (in `host`, the default, where a CUDA driver and GPU answer) runs each
kernel on the GPU as well: its result must agree with numpy as the interpreter's does, and with
the interpreter's (integers bit for bit, floats within two units of the output type's last place
and the tensor cores' own order of summation).  The parent never touches the driver, so each
forked child makes its own CUDA context.

The interpreter runs every thread of a CTA in numpy, so schedules are drawn up to 8 warps
and problems up to 160 per dimension: a case takes about a second.
"""
from __future__ import annotations

import math
import os
import random
import sys
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "gpu"))   # the programs the GPU tests build

import fuzz  # noqa: E402
import gpu_programs as P  # noqa: E402

import loopstack as lt  # noqa: E402
from loopstack.backend import compile as compile_tree  # noqa: E402
from loopstack.backend.ptx import GpuSchedule, GpuTarget  # noqa: E402
from loopstack.isa.ptx import ptxas  # noqa: E402
from loopstack.isa.ptx.mma import mma_for  # noqa: E402

DTYPES = ("float16", "bfloat16", "float32", "int8", "uint8")     # float32 as tf32 (allow_tf32)
INTEGER = ("int8", "uint8")
FAMILIES = ("gemm", "batched", "conv", "requant", "bound-gemm", "bound-conv")
ARCHES = ("sm_80", "sm_90")
# epilogue activations: (the DSL's, numpy's); exp is left out: it turns the sums' rounding into
# relative errors as large as the sums
ACTIVATIONS = {
    "sigmoid": (lt.nn.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (lt.nn.tanh, np.tanh),
    "gelu": (lt.nn.gelu, lambda x: 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))),
    "abs": (lt.abs, np.abs),
    "erf": (lt.erf, lambda x: np.vectorize(math.erf)(x)),
}
DEVICE = "device"


def _size(rnd: random.Random, hi: int = 160) -> int:
    """A size near a tile edge (16 and 32 divide every tile) or anything up to `hi`."""
    if rnd.random() < 0.5:
        return rnd.randint(1, hi)
    return max(1, min(hi, rnd.choice((16, 32)) * rnd.randint(1, 4) + rnd.choice((-1, 0, 1))))


def _then(f, ref):
    """The reference `ref` (computed when called) with `f` applied."""
    return lambda: f(ref())


def random_knobs(rnd: random.Random) -> GpuSchedule:
    """Knobs up to 8 warps and 4x4 tiles a warp (the interpreter's cost grows with both)."""
    while True:
        s = GpuSchedule(BLK_ROW_WARPS=rnd.choice((1, 2, 4)), BLK_COL_WARPS=rnd.choice((1, 2, 4)),
                        WARP_ROW_TILES=rnd.choice((1, 2, 4)), WARP_COL_TILES=rnd.choice((1, 2, 4)),
                        CHUNK=rnd.choice((1, 2, 4, 8)), REORDER_INNER=rnd.randint(0, 1),
                        stages=rnd.randint(1, 4))
        if s.warps <= 8 and s.WARP_ROW_TILES * s.WARP_COL_TILES <= 8:
            return s


def build_case(seed: int, index: int, targets):
    """(family, description, program or tree, arrays, reference, target, dtype, k) of one case."""
    rnd = random.Random(seed * 1_000_003 + index)
    rng = np.random.default_rng(rnd.getrandbits(32))
    family, dtype = rnd.choice(FAMILIES), rnd.choice(DTYPES)
    arch = rnd.choice([t for t in targets if t != DEVICE])
    b_dtype = rnd.choice(INTEGER) if dtype in INTEGER else dtype      # 8-bit integers mix signedness
    sched = random_knobs(rnd)
    mode = rnd.choice(("knobs", "knobs", "knobs", "model"))
    if family == "requant":
        m, n, k = _size(rnd), _size(rnd, 96), _size(rnd)
        out, zp = rnd.choice(("int8", "uint8")), rnd.choice((0, 3, -5, 100))
        zp = abs(zp) if out == "uint8" else zp
        a_dtype = rnd.choice(INTEGER)
        prog, arrays, ref = P.requantized(m, n, k, rng, out, rnd.random() < 0.5, zp, rnd.random() < 0.5, a_dtype)
        dtype, what = a_dtype, f"requant {m}x{n}x{k} x int8 -> {out} zp {zp}"
    elif family in ("gemm", "bound-gemm"):
        mk = mma_for(dtype).k
        if family == "bound-gemm":       # each bound loop is at least one block (a split no larger than its dim)
            m, n, k = (sched.bm + rnd.randint(0, 40), sched.bn + rnd.randint(0, 40),
                       sched.CHUNK * mk + rnd.randint(0, 40))
        else:
            m, n, k = _size(rnd), _size(rnd), _size(rnd)
        bt = rnd.random() < 0.4 and family == "gemm"        # `bound` orders B [k, n]'s loops
        bias, relu = rnd.random() < 0.5, rnd.random() < 0.5
        scale = rnd.choice((None, 0.5, -1.25)) if dtype not in INTEGER else None
        prog, arrays, ref = P.gemm(m, n, k, dtype, rng, b_transposed=bt, bias=bias,
                                   relu=relu, scale=scale, b_dtype=b_dtype)
        what = f"gemm {m}x{n}x{k} x {b_dtype}{' B^T' if bt else ''}{' +bias' if bias else ''}{' relu' if relu else ''}" \
               f"{f' *{scale}' if scale else ''}"
        act = rnd.choice((None, None) + tuple(ACTIVATIONS)) if dtype not in INTEGER else None
        if act is not None:          # fused on the store after the bias and relu
            prog, ref = ACTIVATIONS[act][0](prog), _then(ACTIVATIONS[act][1], ref)
            what += f" {act}"
        if family == "bound-gemm":
            P.bound(prog, sched, mk, m, n, k)
            mode = "bound"
        elif rnd.random() < 0.25:       # the result in another dtype (astype): the store converts
            cast = rnd.choice(("float16", "bfloat16")) if dtype == "float32" else "float32"
            prog = prog.astype(cast)
            what += f" as {cast}"
    elif family == "batched":
        b, m, n, k = rnd.randint(1, 3), _size(rnd, 64), _size(rnd, 64), _size(rnd, 96)
        shared, bt, bias = rnd.random() < 0.4, rnd.random() < 0.4, rnd.random() < 0.5
        prog, arrays, ref = P.batched(b, m, n, k, dtype, rng, shared, bt, bias)
        what = f"batched {b}x{m}x{n}x{k}{' B shared' if shared else ''}{' B^T' if bt else ''}"
    else:                                # conv, bound-conv
        r = 3 if family == "bound-conv" else rnd.choice((1, 3))
        batch, h, c, kout = rnd.randint(1, 2), rnd.randint(max(r, 2), 10), _size(rnd, 72), _size(rnd, 72)
        stride, pad = rnd.choice((1, 2)), (rnd.randint(0, 1) if r == 3 else 0)
        if family == "bound-conv":
            kout = sched.bn + rnd.randint(0, 24)
            bk = sched.CHUNK * mma_for(dtype).k       # the k-step splits c: at least one step
            c = bk * rnd.randint(1, 2) if sched.REORDER_INNER else bk + rnd.randint(0, 40)
        prog, arrays, ref = P.conv(batch, h, c, kout, dtype, rng, r=r, stride=stride, pad=pad, w_dtype=b_dtype)
        o = (h + 2 * pad - r) // stride + 1
        what = f"conv {batch}x{h}x{h}x{c} x {b_dtype} -> {kout} r{r} s{stride} p{pad}"
        if family == "bound-conv":
            P.bound_conv(prog, sched, mma_for(dtype).k, batch, o, c, kout)
            mode = "bound"
        k = r * r * c
    if mode == "knobs":
        target = GpuTarget(arch, sched, allow_tf32=True)
    elif mode == "bound":
        target = GpuTarget.of(arch, allow_tf32=True, stages=sched.stages)
    else:
        target = GpuTarget(arch, allow_tf32=True)
    return family, f"{dtype} {what}; {mode} {sched if mode != 'model' else ''} on {arch}", prog, arrays, ref, \
        target, dtype, k


def _tolerance(dtype: str, k: int) -> tuple[float, float]:
    """Integer products exactly; f16 / bf16 / tf32 within their rounding over a sum of k products
    (tf32 keeps f16's 10 mantissa bits)."""
    if dtype in INTEGER:
        return 0.0, 0.0
    return (2e-2, 2e-2 * np.sqrt(k)) if dtype in ("float16", "float32") else (5e-2, 8e-2 * np.sqrt(k))


def run_case(seed: int, index: int, targets, verbose: bool = False) -> dict:
    """One case in this process; returns {status, family, detail}. Never raises."""
    res = {"case": index, "status": "ok", "family": "?", "detail": ""}
    stage = "build"
    try:
        res["family"] = random.Random(seed * 1_000_003 + index).choice(FAMILIES)    # build_case's first draw
        family, what, prog, arrays, ref, target, dtype, k = build_case(seed, index, targets)
        res.update(family=family, detail=what)
        if verbose:
            print(what)
        stage = "compile"
        try:
            # requantized GEMMs are backend loop trees (the DSL has no requantization)
            kern = compile_tree(prog, target=target) if hasattr(prog, "buffers") else lt.compile(prog, target=target)
        except lt.ScheduleError as e:      # knobs the problem cannot take: the check's answer
            return {**res, "status": "refused", "detail": f"{what}: {e}"}
        if verbose:
            print(kern.schedule_text())
        stage = "ptxas"
        if ptxas.ptxas_path() is not None:
            ptxas.assemble(kern.ptx, kern.target)
        stage = "simulate"
        want = ref()
        got = np.zeros(want.shape, lt.dtypes.dtype(kern.tree.outputs[0].dtype).np)
        kern.simulate(*arrays, got)
        if not _agrees(got, want, dtype, k):
            err = float(np.abs(got.astype(np.float64) - _rounded(want, got.dtype)).max())
            return {**res, "status": "wrong", "detail": f"{what}: max error {err}"}
        if DEVICE in targets:
            stage = "device"
            dev = np.zeros_like(got)
            kern(*arrays, dev)
            if not _agrees(dev, want, dtype, k):
                err = float(np.abs(dev.astype(np.float64) - _rounded(want, got.dtype)).max())
                return {**res, "status": "wrong", "detail": f"{what}: on the GPU, max error {err} from numpy"}
            if not _same(dev, got):
                err = float(np.abs(dev.astype(np.float64) - got.astype(np.float64)).max())
                return {**res, "status": "wrong", "detail": f"{what}: the GPU and the interpreter differ by {err}"}
    except lt.LoopstackError as e:
        status = "exception" if stage == "build" else "late"
        res.update(status=status, detail=f"{res['detail']}: {stage}: {type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001 - the point is to count these
        res.update(status="exception",
                   detail=f"{res['detail']}: {stage}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}")
    return res


def _rounded(ref, dt):
    """The reference as the output type holds it (integers wrap as C's conversion does)."""
    if dt.kind in "iu":
        return ref if ref.dtype == dt else ref.astype(np.int64).astype(dt).astype(np.float64)
    return ref.astype(dt).astype(np.float64)


def _agrees(got, want, dtype, k) -> bool:
    if got.shape != want.shape:
        return False
    if got.dtype.kind in "iu":
        return bool(np.array_equal(got, want.astype(got.dtype) if want.dtype.kind in "iu" else
                                   want.astype(np.int64).astype(got.dtype)))
    rtol, atol = _tolerance(dtype, k)
    return bool(np.allclose(got.astype(np.float64), _rounded(want, got.dtype), rtol=rtol, atol=atol))


def _same(dev, sim) -> bool:
    """The GPU's result against the interpreter's: integers exactly; floats within two units in
    the last place of the output type, plus what another order of f32 summation moves."""
    if dev.dtype.kind in "iu":
        return bool(np.array_equal(dev, sim))
    d, s = dev.astype(np.float64), sim.astype(np.float64)
    eps = float(np.finfo(np.float16).eps) if dev.dtype == np.float16 else \
        2.0 ** -7 if dev.dtype.name == "bfloat16" else float(np.finfo(np.float32).eps)
    return bool(np.all(np.abs(d - s) <= 2 * eps * np.abs(s) + 1e-4 * max(1.0, float(np.abs(s).max(initial=0)))))


def warm_up(targets) -> None:
    """Build the interpreter and emitter tables here, so that every forked child inherits them."""
    rng = np.random.default_rng(0)
    prog, arrays, ref = P.gemm(16, 8, 16, "float16", rng)
    kern = lt.compile(prog, target=GpuTarget(targets[0], GpuSchedule(1, 1, 1, 1, 1, 0, 1)))
    kern.simulate(*arrays, np.zeros((16, 8), np.float16))


def _targets(text: str) -> list[str]:
    names = [t for t in text.split(",") if t] if text != "host" else list(ARCHES) + [DEVICE] * _gpu_here()
    bad = [t for t in names if t not in ARCHES + (DEVICE,)]
    if bad or not set(names) - {DEVICE}:
        raise SystemExit(f"fuzz_gpu: targets {text!r}: at least one of {', '.join(ARCHES)}, and {DEVICE} to run "
                         "on this host's GPU too")
    return names


def _gpu_here() -> bool:
    """Whether a CUDA driver and GPU answer, asked in a child process: a parent that had made a
    CUDA context could not fork children that use the GPU."""
    import subprocess
    probe = "from loopstack.isa.ptx import driver; raise SystemExit(0 if driver.available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}).returncode == 0


if __name__ == "__main__":
    sys.exit(fuzz.main(doc=__doc__, case=run_case, warm=warm_up, resolve_targets=_targets, label="ptxas+sim ",
                       targets_help="comma list of sm_80,sm_90 (each case compiles for one of them) and device "
                                    "(run on this host's GPU too); 'host': both, and device where a GPU answers",
                       name="fuzz-gpu"))
