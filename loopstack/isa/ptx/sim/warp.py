"""The warp-collective instructions: ldmatrix and mma.sync.

Both need every lane of each participating warp (`.aligned`): a warp with only some lanes
executing raises SimulationError.  Fragment layouts follow the PTX ISA, as checked on an H100
(platform notes, "mma.sync fragment layouts"): with g = lane >> 2 and t = lane & 3, element i of a
thread counts from the low half (f16/bf16) or low byte (s8/u8) of its first register (tf32: one
element per register).

Accumulation: f16/bf16/tf32 products are exact in float64 and their sum with C is rounded once to f32.
The tensor cores add in a different order, with f32 intermediate rounding (and, on some chips,
truncation), so a hardware result differs from this one by up to about k * 2**-23 * sum|a*b|
(k = 16 products per mma): compare with that tolerance, not bit for bit.  s8 mma is exact in
int32 (wrapping, or clamped with .satfinite), as on the hardware, for u8 and s8 operands alike.
"""
from __future__ import annotations

import numpy as np

from ....errors import SimulationError
from .numeric import TF32_MASK, bf16_to_f32
from .ops import builder, unsupported

WARP = 32


def whole_warps(B, instr, mask) -> np.ndarray:
    """Indices of the warps executing `instr`; each must have all 32 lanes in `mask`."""
    lanes = np.flatnonzero(mask)
    warps = np.unique(lanes // WARP)
    if B.n < (warps[-1] + 1) * WARP:
        B.fault.raise_for(instr, lanes[-1], f"warp {warps[-1]} has only {B.n - warps[-1] * WARP} threads: "
                          f"{instr.opcode} needs a whole warp")
    lanes_of = warps[:, None] * WARP + np.arange(WARP)
    full = mask[lanes_of]
    if not full.all():
        w = int(np.argmin(full.all(axis=1)))
        missing = int(lanes_of[w][np.argmin(full[w])])
        B.fault.raise_for(instr, missing, f"{instr.opcode} is warp-collective (.aligned) but this lane of "
                          f"warp {warps[w]} does not execute it")
    return warps


# ---- fragment layouts: (lane, i) -> (row, col) as index arrays of shape (32, elements) ---------

_LANE = np.arange(WARP)[:, None]
_G, _T = _LANE >> 2, _LANE & 3


def _grid(count):
    return np.arange(count)[None, :]


def _layouts():
    i8, i4, i16, i2 = _grid(8), _grid(4), _grid(16), _grid(2)
    return {
        # m16n8k16 f16/bf16: A 16x16 row-major (8 per thread), B 16x8 (k, n) (4 per thread)
        ("m16n8k16", "a"): (_G + 8 * ((i8 >> 1) & 1), 2 * _T + (i8 & 1) + 8 * (i8 >> 2)),
        ("m16n8k16", "b"): (2 * _T + (i4 & 1) + 8 * (i4 >> 1), np.broadcast_to(_G, (WARP, 4))),
        # m16n8k8 tf32: A 16x8 (4 per thread), B 8x8 (2 per thread), one element per register
        ("m16n8k8", "a"): (_G + 8 * (i4 & 1), _T + 4 * (i4 >> 1)),
        ("m16n8k8", "b"): (_T + 4 * i2, np.broadcast_to(_G, (WARP, 2))),
        # m16n8k32 s8: A 16x32 (16 per thread), B 32x8 (8 per thread)
        ("m16n8k32", "a"): (_G + 8 * ((i16 >> 2) & 1), 4 * _T + (i16 & 3) + 16 * (i16 >> 3)),
        ("m16n8k32", "b"): (4 * _T + (i8 & 3) + 16 * (i8 >> 2), np.broadcast_to(_G, (WARP, 8))),
        # C/D 16x8 (4 per thread), both shapes
        "c": (_G + 8 * (i4 >> 1), 2 * _T + (i4 & 1)),
    }


LAYOUTS = _layouts()

# shape, A element type, B element type, accumulator type -> (m, n, k, A regs, B regs); the
# 8-bit integer forms take u8 or s8 on either side
MMA_FORMS = {
    ("m16n8k16", "f16", "f16", "f32"): (16, 8, 16, 4, 2),
    ("m16n8k16", "bf16", "bf16", "f32"): (16, 8, 16, 4, 2),
    ("m16n8k8", "tf32", "tf32", "f32"): (16, 8, 8, 4, 2),
    **{("m16n8k32", ta, tb, "s32"): (16, 8, 32, 4, 2) for ta in ("s8", "u8") for tb in ("s8", "u8")},
}


def _elements(regs: np.ndarray, ab: str) -> np.ndarray:
    """(W, 32, nregs) uint32 -> (W, 32, elements) values, low half/byte of each register first."""
    regs = np.ascontiguousarray(regs)
    if ab == "f16":
        return regs.view(np.float16).astype(np.float64)
    if ab == "bf16":
        return bf16_to_f32(regs.view(np.uint16)).astype(np.float64)
    if ab == "tf32":         # the operand's low 13 bits are not read: a float32 not rounded is truncated
        return (regs & TF32_MASK).view(np.float32).astype(np.float64)
    return regs.view(np.int8 if ab == "s8" else np.uint8).astype(np.int64)


def _scatter(values, layout, rows, cols):
    r, c = layout
    out = np.zeros((values.shape[0], rows, cols), dtype=values.dtype)
    out[:, r, c] = values
    return out


@builder("mma")
def mma(instr, B):
    sat = "satfinite" in instr.mods
    core = tuple(m for m in instr.mods if m != "satfinite")
    if len(core) != 9 or core[:2] != ("sync", "aligned") or core[3:5] != ("row", "col"):
        unsupported(instr, "mma.sync.aligned.SHAPE.row.col.D.A.B.C")
    shape, td, ta, tb, tc = core[2], core[5], core[6], core[7], core[8]
    form = MMA_FORMS.get((shape, ta, tb, td))
    if form is None or td != tc or (sat and td != "s32"):
        unsupported(instr, f"mma form {shape} {td}.{ta}.{tb}.{tc}")
    m, n, k, na, nb = form
    if len(instr.operands) != 4:
        raise SimulationError(f"{instr.where()}: mma takes {{d}}, {{a}}, {{b}}, {{c}}")
    counts = (4, na, nb, 4)
    regs = [[B.ops.storage(instr, r, 4) for r in B.ops.vector(instr, op, c)]
            for op, c in zip(instr.operands, counts)]
    d_regs, a_regs, b_regs, c_regs = regs
    la, lb, lc = LAYOUTS[(shape, "a")], LAYOUTS[(shape, "b")], LAYOUTS["c"]

    def gather(rs, lanes):
        return np.stack([r[lanes] for r in rs], axis=-1)            # (W, 32, nregs) uint32

    def run(mask):
        warps = whole_warps(B, instr, mask)
        lanes = warps[:, None] * WARP + np.arange(WARP)             # (W, 32)
        a = _scatter(_elements(gather(a_regs, lanes), ta), la, m, k)
        b = _scatter(_elements(gather(b_regs, lanes), tb), lb, k, n)
        c_bits = gather(c_regs, lanes)
        if td == "f32":
            c = _scatter(c_bits.view(np.float32).astype(np.float64), lc, m, n)
            d = (np.matmul(a, b) + c).astype(np.float32)            # one rounding: see the module docstring
            out = d[:, lc[0], lc[1]].view(np.uint32)
        else:
            c = _scatter(c_bits.view(np.int32).astype(np.int64), lc, m, n)
            d = np.matmul(a, b) + c                                  # exact in int64
            d = np.clip(d, -2**31, 2**31 - 1) if sat else d
            out = d.astype(np.int32)[:, lc[0], lc[1]].view(np.uint32)
        for i, r in enumerate(d_regs):
            r[lanes] = out[..., i]
    return run


@builder("ldmatrix")
def ldmatrix(instr, B):
    mods = [m.split("::")[0] for m in instr.mods]
    flags = set(mods)
    count = next((int(m[1]) for m in mods if m in ("x1", "x2", "x4")), None)
    if not {"sync", "aligned", "m8n8", "shared", "b16"} <= flags or count is None or \
            flags - {"sync", "aligned", "m8n8", "shared", "b16", "trans", f"x{count}"}:
        unsupported(instr, "ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16")
    trans = "trans" in flags
    if len(instr.operands) != 2:
        raise SimulationError(f"{instr.where()}: ldmatrix takes {{d..}}, [addr]")
    dests = [B.ops.storage(instr, r, 4) for r in B.ops.vector(instr, instr.operands[0], count)]
    _, addr = B.ops.address(instr, instr.operands[1])
    g, t = np.arange(WARP) >> 2, np.arange(WARP) & 3
    # lane l receives, of each 8x8 matrix j, the pair at row g, columns 2t, 2t+1 (low half first);
    # with .trans the pair at rows 2t, 2t+1 of column g
    row_lo, col_lo, row_hi, col_hi = (2 * t, g, 2 * t + 1, g) if trans else (g, 2 * t, g, 2 * t + 1)

    def run(mask):
        warps = whole_warps(B, instr, mask)
        # lanes 8j..8j+7 of a warp give the row addresses of matrix j; the others are not read
        providers = (warps[:, None] * WARP + np.arange(8 * count)).reshape(-1)
        a = np.broadcast_to(addr(), (B.n,))[providers]
        rows = B.shared.load(instr, B.fault, providers, a, 16).view(np.uint16)
        mats = rows.reshape(len(warps), count, 8, 8)                 # (W, matrix, row, col)
        lo = mats[:, :, row_lo, col_lo].astype(np.uint32)             # (W, matrix, 32)
        hi = mats[:, :, row_hi, col_hi].astype(np.uint32)
        words = lo | (hi << np.uint32(16))
        lanes = warps[:, None] * WARP + np.arange(WARP)
        for j, r in enumerate(dests):
            r[lanes] = words[:, j, :]
    return run
