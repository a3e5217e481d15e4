"""Shared-memory bank conflicts of the GPU benchmark's kernels, counted by the PTX interpreter.

bench/gpu.py's workloads (GEMM 4096^3 in fp16, bf16, tf32 and int8, CONV-1..4 fp16) with the
knobs `lt.compile` picks for them, each run in the interpreter on a problem of the same kind cut
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


def small_tree(kind: str, dtype: str, tree, sched):
    """The workload cut to 2 x 2 CTAs of its knobs and three k-steps (convolutions: the same
    channels and filter, a few output rows)."""
    if kind == "gemm":
        s = lt.SymbolGenerator()
        m, n, k = 2 * sched.bm, 2 * sched.bn, 3 * sched.bk(match(tree).mma)
        A = lt.Tensor(np.zeros((m, k), G._np(dtype))).to(s.m, s.k)
        B = lt.Tensor(np.zeros((n, k) if dtype in G.K_CONTIGUOUS_B else (k, n), G._np(dtype)))
        B = B.to(s.n, s.k) if dtype in G.K_CONTIGUOUS_B else B.to(s.k, s.n)
        return (A * B).sum(s.k).loop_tree.lower()
    con = match(tree)
    g = con.conv
    rows = max(1, -(-2 * sched.bm // g.w))           # output rows for about two CTAs of pixels
    return G.conv_tree(g.c, min(con.n, 2 * sched.bn), rows + 2, batch=1)


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
    for name, tree, kind, dtype in G.workloads():
        con = match(tree)
        sched = tune_gpu(tree, "sm_90", allow_tf32=True).best if args.search else default_schedule(con, "sm_90")
        row = profile(name, kind, dtype, tree, sched)
        rows.append(row)
        cells = [f"{op} {row[op + '_x_ideal']:.2f}x ({100 * row[op + '_share']:.0f}%)"
                 for op in ("cp.async", "ld.shared", "st.shared", "ldmatrix") if op + "_x_ideal" in row]
        print(f"{name:<18} all {row['x_ideal']:.2f}x   " + "   ".join(cells) + f"\n{'':<18} {row['knobs']}", flush=True)
    if args.json:
        from loopstack.timing import write_records
        write_records(args.json, rows)


if __name__ == "__main__":
    main()
