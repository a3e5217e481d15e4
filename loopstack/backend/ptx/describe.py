"""The loop nest a GPU kernel runs, with each loop's binding: grid, warps, pipeline, mma tiles.

    print(kernel.schedule())

The knobs decide every loop of it: `block.y/x` loops are the CTAs of the grid, `warp` loops
the warps of a CTA, the k-step loop is the cp.async pipeline (`stages` deep), and the
innermost loop is `tensorize`d into mma.sync.  It is what `GpuSchedule` means, written out.
"""
from __future__ import annotations

from ...looptree.ir import GPU_BINDINGS


def schedule_text(kernel) -> str:
    c, s, e = kernel.contraction, kernel.schedule, kernel
    mma = c.mma
    bk = s.bk(mma)
    gx, gy, _ = e.grid
    grid_m, grid_n = ("block.x", "block.y") if s.REORDER_INNER and c.conv is None else ("block.y", "block.x")
    outer = [("mb", -(-c.m // s.bm), grid_m, f"M {c.m} in blocks of BM {s.bm}"),
             ("nb", -(-c.n // s.bn), grid_n, f"N {c.n} in blocks of BN {s.bn}")]
    if grid_m == "block.x":
        outer.reverse()
    if c.conv is not None:
        g = c.conv
        red = ("channel blocks outermost, then (r, s)" if s.REORDER_INNER else "(r, s, c) flattened")
        what = (f"implicit GEMM of conv {g.batch}x{g.h}x{g.w}x{g.c} * {g.r}x{g.s}x{g.c}x{c.n}, "
                f"stride {g.stride} pad {g.pad}: M = b*oh*ow, K = r*s*c, {red}")
    else:
        what = f"GEMM {c.m}x{c.n}x{c.k}, B {'[k, n]' if c.b_kmajor else '[n, k]'}"
        if c.batch > 1:
            shared = " and ".join(op for op, batched in (("A", c.a_batched), ("B", c.b_batched)) if not batched)
            what = f"{c.batch} x {what} (block.z: the batch{'; ' + shared + ' shared' if shared else ''})"
    k_steps = -(-c.k // bk) if not (c.conv is not None and s.REORDER_INNER) else \
        c.conv.r * c.conv.s * (c.conv.c // bk)
    b_load = ("ldmatrix.trans" if c.b_kmajor and mma.ab_bytes == 2 else
              "ldmatrix (of B transposed in shared memory)" if c.b_kmajor else "ldmatrix")
    rows = [
        f"// {what}; {c.dtype}{f' x {c.b_dtype}' if c.b_dtype else ''} -> {c.out_dtype}, {mma.acc} accumulators",
        f"// grid {e.grid} x {e.block[0]} threads, {e.shared_bytes} bytes of shared memory",
    ]
    bound = [f"{lp.var} ({lp.dim}) {kind}" for lp in c.loops for kind in GPU_BINDINGS if kind in lp.annotations]
    if bound:
        rows.append(f"// knobs stated by the tree's loops: {', '.join(bound)}")
    depth = 0
    for var, n, bind, note in outer + [("wm", s.BLK_ROW_WARPS, "warp", "BLK_ROW_WARPS"),
                                       ("wn", s.BLK_COL_WARPS, "warp", "BLK_COL_WARPS")]:
        rows.append(f"{'  ' * depth}for {var} in {n} : {bind}    // {note}")
        depth += 1
    rows.append(f"{'  ' * depth}for kt in {k_steps} : cp.async pipeline, {s.stages} stage(s)    "
                f"// A {s.bm}x{bk}, B {bk}x{s.bn} tiles -> shared, zero-filled past the bounds")
    depth += 1
    rows.append(f"{'  ' * depth}for kk in {s.CHUNK} : unroll    // CHUNK, {mma.k} of k each")
    depth += 1
    rows.append(f"{'  ' * depth}ldmatrix A x{s.WARP_ROW_TILES}, {b_load} B x{s.WARP_COL_TILES}")
    rows.append(f"{'  ' * depth}for i in {s.WARP_ROW_TILES} : unroll    // WARP_ROW_TILES (16 rows)")
    rows.append(f"{'  ' * (depth + 1)}for j in {2 * s.WARP_COL_TILES} : tensorize {mma.opcode()}"
                f"    // WARP_COL_TILES x 2 (8 columns)")
    value = "acc" if c.init is None else f"(acc + {c.init})"
    if c.post is not None:
        value = f"{c.post}".replace("acc", value)
    rows.append(f"{'  ' * 4}store {value} -> {c.out_dtype}"
                f"{'' if kernel_exact(kernel) else ', predicated per element'}")
    return "\n".join(rows)


def kernel_exact(kernel) -> bool:
    c, s = kernel.contraction, kernel.schedule
    return c.m % s.bm == 0 and c.n % s.bn == 0
