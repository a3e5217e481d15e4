"""Shared-memory bank conflicts of the GPU benchmark's kernels, counted by the PTX interpreter.

bench/gpu.py's workloads (GEMM 4096^3 in fp16, bf16, tf32 and int8, CONV-1..4 fp16), and the
layouts that transpose B in shared memory (GEMM 4096^3 int8 and tf32 with B [k, n], CONV-2 in
int8: every int8 convolution's weights are k-major), with the knobs `lt.compile` picks for them, each run in the interpreter on a problem of the same kind cut
down to a few CTAs and k-steps: the same tiles, copies, transposes and fragment loads, so the
same access patterns (bank conflicts depend on addresses within a CTA, not on the problem's
size).  Per kernel and shared-memory instruction kind: wavefronts per ideal wavefront (1.00 is
conflict-free; see loopstack/isa/ptx/sim/banks.py), and the share of the kernel's shared-memory
wavefronts each kind takes.  Runs anywhere.

    python bench/ptx_banks.py [--json FILE] [--search]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import gpu as G  # noqa: E402

import loopstack as lt  # noqa: E402
from loopstack.backend.kernel_base import random_array  # noqa: E402
from loopstack.backend.ptx import compile_ptx  # noqa: E402
from loopstack.backend.ptx.match import match  # noqa: E402
from loopstack.backend.ptx.model import default_schedule  # noqa: E402
from loopstack.isa.ptx.sim.banks import by_opcode  # noqa: E402
from loopstack.tune.gpu import tune_gpu  # noqa: E402

SHORT = {"cp.async": "cp.async", "ldmatrix": "ldmatrix", "ld.shared": "ld.shared", "st.shared": "st.shared"}


def gemm_tree(m: int, n: int, k: int, dtype: str, b_kmajor: bool):
    s = lt.SymbolGenerator()
    A = lt.Tensor(np.zeros((m, k), G._np(dtype))).to(s.m, s.k)
    B = lt.Tensor(np.zeros((k, n) if b_kmajor else (n, k), G._np(dtype)))
    B = B.to(s.k, s.n) if b_kmajor else B.to(s.n, s.k)
    return (A * B).sum(s.k).loop_tree.lower()


def conv_tree(c: int, k: int, h: int, dtype: str, batch: int):
    s = lt.SymbolGenerator()
    X = lt.Tensor(np.zeros((batch, h, h, c), G._np(dtype))).to(s.b, s.h, s.w, s.c)
    Xp = lt.nn.pad(X, (s.h, 1), (s.w, 1))
    hh, ww = Xp.symbolic_shape[1:3]
    Xw = Xp.to(s.b, s.oh, s.ow, s.r, s.s, s.c, constraints=[(hh, s.oh + s.r), (ww, s.ow + s.s)])
    W = lt.Tensor(np.zeros((3, 3, c, k), G._np(dtype))).to(s.r, s.s, s.c, s.k)
    return (Xw * W).sum(s.r, s.s, s.c).loop_tree.lower()


def workloads():
    """(name, tree, kind, dtype): bench/gpu.py's, and the transposing layouts."""
    extra = [(f"GEMM-4096-{dt}-Bkn", gemm_tree(4096, 4096, 4096, dt, True), "gemm", dt) for dt in ("int8", "float32")]
    extra.append(("CONV-2-int8", conv_tree(128, 256, 28, "int8", G.BATCH), "conv", "int8"))
    return G.workloads() + extra


def small_tree(kind: str, dtype: str, tree, sched):
    """The workload cut to 2 x 2 CTAs of its knobs and three k-steps (convolutions: the same
    channels and filter, a few output rows)."""
    con = match(tree)
    if kind == "gemm":
        return gemm_tree(2 * sched.bm, 2 * sched.bn, 3 * sched.bk(con.mma), dtype, con.b_kmajor)
    g = con.conv
    rows = max(1, -(-2 * sched.bm // g.w))           # output rows for about two CTAs of pixels
    return conv_tree(g.c, min(con.n, 2 * sched.bn), rows + 2, dtype, 1)


def profile(name, kind, dtype, tree, sched):
    small = small_tree(kind, dtype, tree, sched)
    kern = compile_ptx(small, "sm_90", sched, allow_tf32=True)
    rng = np.random.default_rng(0)
    arrays = [random_array(b, rng) if b.kind == "input" else np.zeros(b.shape, lt.dtypes.dtype(b.dtype).np)
              for b in kern.tree.arguments]
    prof = {}
    kern.simulate(*arrays, bank_profile=prof)
    ops = {}
    for op, s in by_opcode(prof).items():
        short = next(v for k, v in SHORT.items() if op.startswith(k))
        agg = ops.setdefault(short, [0, 0])
        agg[0] += s.wavefronts
        agg[1] += s.ideal
    total = sum(w for w, _ in ops.values())
    row = {"name": name, "knobs": " ".join(f"{k}={v}" for k, v in sched.knobs().items())}
    for op, (w, ideal) in sorted(ops.items()):
        row[f"{op}_x_ideal"] = round(w / ideal, 3)
        row[f"{op}_share"] = round(w / total, 3)
    row["x_ideal"] = round(total / sum(i for _, i in ops.values()), 3)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the records to this file")
    ap.add_argument("--search", action="store_true", help="the knobs the model's search picks instead")
    args = ap.parse_args()
    rows = []
    for name, tree, kind, dtype in workloads():
        con = match(tree)
        sched = tune_gpu(tree, "sm_90", allow_tf32=True).best if args.search else default_schedule(con, "sm_90")
        row = profile(name, kind, dtype, tree, sched)
        rows.append(row)
        cells = [f"{op} {row[op + '_x_ideal']:.2f}x ({100 * row[op + '_share']:.0f}%)"
                 for op in ("cp.async", "ld.shared", "st.shared", "ldmatrix") if op + "_x_ideal" in row]
        print(f"{name:<22} all {row['x_ideal']:.2f}x   " + "   ".join(cells) + f"\n{'':<22} {row['knobs']}", flush=True)
    if args.json:
        from loopstack.timing import write_records
        write_records(args.json, rows)


if __name__ == "__main__":
    main()
