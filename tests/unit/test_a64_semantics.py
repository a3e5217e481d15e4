"""What the table's instructions compute, checked by executing them: each row below names an
instruction as the code generator writes it (v0 the destination, v1 and v2 the sources, v0 also
an input where the instruction reads it) and a numpy model of the Arm ARM's description; unicorn
(CPU model MAX) runs the encoded instruction on hypothesis-drawn register contents and the
results must agree bit for bit. This pins down operand roles a byte-level oracle cannot (bsl
against bif, fcvtn's halves, zip against uzp, the by-element lane)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("unicorn")

from aarch64_unicorn import run_a64  # noqa: E402

from loopstack.isa.aarch64.assembler import Assembler  # noqa: E402
from loopstack.isa.aarch64.operands import Mem, V, X  # noqa: E402

f32, f16, i8, u8, i16, i32, u32 = np.float32, np.float16, np.int8, np.uint8, np.int16, np.int32, np.uint32
d, a, b = V(0), V(1), V(2)


def _f(dtype, fn):
    """A model computed in float64 and rounded once to `dtype` (exact for +, -, x, /, sqrt of
    float32/float16 inputs: float64 has more than twice their precision plus two bits)."""
    return lambda D, A, B: fn(D.astype(np.float64), A.astype(np.float64), B.astype(np.float64)).astype(dtype)


def _pairwise(x, y, op):
    both = np.concatenate([x, y])
    return op(both[0::2], both[1::2])


def _round_half_away(x):
    return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5))


def _sat(x, dtype):
    info = np.iinfo(dtype)
    return np.clip(x, info.min, info.max).astype(dtype)


# (name, mnemonic, operands, register dtype of (v0, v1, v2), value range, model(D, A, B) -> new v0)
CASES = [
    ("fadd.4s", "fadd", (d.s4, a.s4, b.s4), f32, 1e3, _f(f32, lambda D, A, B: A + B)),
    ("fsub.4s", "fsub", (d.s4, a.s4, b.s4), f32, 1e3, _f(f32, lambda D, A, B: A - B)),
    ("fmul.4s", "fmul", (d.s4, a.s4, b.s4), f32, 1e3, _f(f32, lambda D, A, B: A * B)),
    ("fdiv.4s", "fdiv", (d.s4, a.s4, b.s4), f32, 1e3, _f(f32, lambda D, A, B: A / B)),
    ("fmla.4s", "fmla", (d.s4, a.s4, b.s4), f32, 2, _f(f32, lambda D, A, B: D + A * B)),
    ("fmls.4s", "fmls", (d.s4, a.s4, b.s4), f32, 2, _f(f32, lambda D, A, B: D - A * B)),
    ("fmla.4s[3]", "fmla", (d.s4, a.s4, b.s[3]), f32, 2, _f(f32, lambda D, A, B: D + A * B[3])),
    ("fmul.4s[1]", "fmul", (d.s4, a.s4, b.s[1]), f32, 1e3, _f(f32, lambda D, A, B: A * B[1])),
    ("fmax.4s", "fmax", (d.s4, a.s4, b.s4), f32, 1e3, lambda D, A, B: np.maximum(A, B)),
    ("fmin.4s", "fmin", (d.s4, a.s4, b.s4), f32, 1e3, lambda D, A, B: np.minimum(A, B)),
    ("fmaxnm.4s", "fmaxnm", (d.s4, a.s4, b.s4), f32, 1e3, lambda D, A, B: np.fmax(A, B)),
    ("faddp.4s", "faddp", (d.s4, a.s4, b.s4), f32, 1e3, _f(f32, lambda D, A, B: _pairwise(A, B, np.add))),
    ("fmaxp.4s", "fmaxp", (d.s4, a.s4, b.s4), f32, 1e3, lambda D, A, B: _pairwise(A, B, np.maximum)),
    ("fabs.4s", "fabs", (d.s4, a.s4), f32, 1e3, lambda D, A, B: np.abs(A)),
    ("fneg.4s", "fneg", (d.s4, a.s4), f32, 1e3, lambda D, A, B: -A),
    ("fsqrt.4s", "fsqrt", (d.s4, a.s4), f32, 1e3, _f(f32, lambda D, A, B: np.sqrt(A))),    # A >= 0 (below)
    ("frintn.4s", "frintn", (d.s4, a.s4), f32, 1e3, lambda D, A, B: np.rint(A)),
    ("frintm.4s", "frintm", (d.s4, a.s4), f32, 1e3, lambda D, A, B: np.floor(A)),
    ("frinta.4s", "frinta", (d.s4, a.s4), f32, 1e3, lambda D, A, B: _round_half_away(A).astype(f32)),
    ("fcvtzs.4s", "fcvtzs", (d.s4, a.s4), f32, 1e3, lambda D, A, B: np.trunc(A).astype(i32).view(f32)),
    ("fcvtns.4s", "fcvtns", (d.s4, a.s4), f32, 1e3, lambda D, A, B: np.rint(A).astype(i32).view(f32)),
    ("scvtf.4s", "scvtf", (d.s4, a.s4), i32, 2**31, lambda D, A, B: A.astype(f32).view(i32)),
    ("fcmgt.4s", "fcmgt", (d.s4, a.s4, b.s4), f32, 4, lambda D, A, B: np.where(A > B, -1, 0).astype(i32).view(f32)),
    ("fcmgt.4s #0", "fcmgt", (d.s4, a.s4, 0.0), f32, 4, lambda D, A, B: np.where(A > 0, -1, 0).astype(i32).view(f32)),
    ("fadd.8h", "fadd", (d.h8, a.h8, b.h8), f16, 100, _f(f16, lambda D, A, B: A + B)),
    ("fmul.8h", "fmul", (d.h8, a.h8, b.h8), f16, 100, _f(f16, lambda D, A, B: A * B)),
    ("fdiv.8h", "fdiv", (d.h8, a.h8, b.h8), f16, 100, _f(f16, lambda D, A, B: A / B)),
    ("fmla.8h", "fmla", (d.h8, a.h8, b.h8), f16, 2, _f(f16, lambda D, A, B: D + A * B)),
    ("fmla.8h[7]", "fmla", (d.h8, a.h8, b.h[7]), f16, 2, _f(f16, lambda D, A, B: D + A * B[7])),
    ("fmax.8h", "fmax", (d.h8, a.h8, b.h8), f16, 100, lambda D, A, B: np.maximum(A, B)),
    ("fcvtl", "fcvtl", (d.s4, a.h4), f16, 100, lambda D, A, B: A[:4].astype(f32).view(f16)),
    ("fcvtl2", "fcvtl2", (d.s4, a.h8), f16, 100, lambda D, A, B: A[4:].astype(f32).view(f16)),
    ("fcvtn", "fcvtn", (d.h4, a.s4), f32, 100,
     lambda D, A, B: np.concatenate([A.astype(f16), np.zeros(4, f16)]).view(f32)),
    ("fcvtn2", "fcvtn2", (d.h8, a.s4), f32, 100,
     lambda D, A, B: np.concatenate([D.view(f16)[:4], A.astype(f16)]).view(f32)),
    ("and", "and", (d.b16, a.b16, b.b16), u8, 256, lambda D, A, B: A & B),
    ("orr", "orr", (d.b16, a.b16, b.b16), u8, 256, lambda D, A, B: A | B),
    ("eor", "eor", (d.b16, a.b16, b.b16), u8, 256, lambda D, A, B: A ^ B),
    ("bic", "bic", (d.b16, a.b16, b.b16), u8, 256, lambda D, A, B: A & ~B),
    ("bsl", "bsl", (d.b16, a.b16, b.b16), u8, 256, lambda D, A, B: (D & A) | (~D & B)),
    ("bit", "bit", (d.b16, a.b16, b.b16), u8, 256, lambda D, A, B: (D & ~B) | (A & B)),
    ("bif", "bif", (d.b16, a.b16, b.b16), u8, 256, lambda D, A, B: (D & B) | (A & ~B)),
    ("mov.16b", "mov", (d.b16, a.b16), u8, 256, lambda D, A, B: A),
    ("ext #5", "ext", (d.b16, a.b16, b.b16, 5), u8, 256, lambda D, A, B: np.concatenate([A, B])[5:21]),
    ("zip1.4s", "zip1", (d.s4, a.s4, b.s4), u32, 2**32, lambda D, A, B: np.stack([A[:2], B[:2]], 1).ravel()),
    ("zip2.4s", "zip2", (d.s4, a.s4, b.s4), u32, 2**32, lambda D, A, B: np.stack([A[2:], B[2:]], 1).ravel()),
    ("uzp1.4s", "uzp1", (d.s4, a.s4, b.s4), u32, 2**32, lambda D, A, B: np.concatenate([A, B])[0::2]),
    ("uzp2.4s", "uzp2", (d.s4, a.s4, b.s4), u32, 2**32, lambda D, A, B: np.concatenate([A, B])[1::2]),
    ("trn1.4s", "trn1", (d.s4, a.s4, b.s4), u32, 2**32, lambda D, A, B: np.stack([A[0::2], B[0::2]], 1).ravel()),
    ("dup.4s[2]", "dup", (d.s4, a.s[2]), u32, 2**32, lambda D, A, B: np.full(4, A[2], u32)),
    ("ins.s[1]<-s[3]", "ins", (d.s[1], a.s[3]), u32, 2**32, lambda D, A, B: np.array([D[0], A[3], D[2], D[3]], u32)),
    ("add.4s", "add", (d.s4, a.s4, b.s4), i32, 2**31, lambda D, A, B: A + B),
    ("sub.8h", "sub", (d.h8, a.h8, b.h8), i16, 2**15, lambda D, A, B: A - B),
    ("mul.4s", "mul", (d.s4, a.s4, b.s4), i32, 2**31, lambda D, A, B: A * B),
    ("addp.4s", "addp", (d.s4, a.s4, b.s4), i32, 2**31, lambda D, A, B: _pairwise(A, B, np.add)),
    ("cmgt.4s", "cmgt", (d.s4, a.s4, b.s4), i32, 4, lambda D, A, B: np.where(A > B, -1, 0).astype(i32)),
    ("smax.16b", "smax", (d.b16, a.b16, b.b16), i8, 128, lambda D, A, B: np.maximum(A, B)),
    ("umin.16b", "umin", (d.b16, a.b16, b.b16), u8, 256, lambda D, A, B: np.minimum(A, B)),
    ("ushr.4s #7", "ushr", (d.s4, a.s4, 7), u32, 2**32, lambda D, A, B: A >> 7),
    ("sshr.4s #31", "sshr", (d.s4, a.s4, 31), i32, 2**31, lambda D, A, B: A >> 31),
    ("shl.8h #3", "shl", (d.h8, a.h8, 3), i16, 2**15, lambda D, A, B: A << 3),
    ("abs.4s", "abs", (d.s4, a.s4), i32, 2**31, lambda D, A, B: np.abs(A)),
    ("smull.8h", "smull", (d.h8, a.b8, b.b8), i8, 128,
     lambda D, A, B: (A[:8].astype(i16) * B[:8].astype(i16)).view(i8)),
    ("smull2.4s", "smull2", (d.s4, a.h8, b.h8), i16, 2**15,
     lambda D, A, B: (A[4:].astype(i32) * B[4:].astype(i32)).view(i16)),
    ("sadalp.4s", "sadalp", (d.s4, a.h8), i16, 2**15,
     lambda D, A, B: (D.view(i32) + A[0::2].astype(i32) + A[1::2].astype(i32)).view(i16)),
    ("saddlp.8h", "saddlp", (d.h8, a.b16), i8, 128, lambda D, A, B: (A[0::2].astype(i16) + A[1::2]).view(i8)),
    ("sxtl.8h", "sxtl", (d.h8, a.b8), i8, 128, lambda D, A, B: A[:8].astype(i16).view(i8)),
    ("xtn.4h", "xtn", (d.h4, a.s4), i32, 2**31,
     lambda D, A, B: np.concatenate([A.astype(i16), np.zeros(4, i16)]).view(i32)),
    ("sqxtn.4h", "sqxtn", (d.h4, a.s4), i32, 2**31,
     lambda D, A, B: np.concatenate([_sat(A, i16), np.zeros(4, i16)]).view(i32)),
    ("sdot", "sdot", (d.s4, a.b16, b.b16), i8, 128,
     lambda D, A, B: (D.view(i32) + (A.astype(i32) * B).reshape(4, 4).sum(1).astype(i32)).view(i8)),
    ("udot[2]", "udot", (d.s4, a.b16, b.b4[2]), u8, 256,
     lambda D, A, B: (D.view(u32) + (A.astype(u32) * np.tile(B[8:12], 4)).reshape(4, 4).sum(1).astype(u32)).view(u8)),
]


def _kernel(mnemonic, ops) -> bytes:
    """void f(const v128 *a, const v128 *b, v128 *d): v0 = d, v1 = a, v2 = b; op; *d = v0."""
    asm = Assembler()
    asm.ldr(V(1).q, Mem(X(0)))
    asm.ldr(V(2).q, Mem(X(1)))
    asm.ldr(V(0).q, Mem(X(2)))
    asm.emit(mnemonic, *ops)
    asm.str(V(0).q, Mem(X(2)))
    asm.ret()
    return asm.bytes()


def _draw(rng: np.random.Generator, dtype, scale) -> np.ndarray:
    n = 16 // np.dtype(dtype).itemsize
    if np.issubdtype(dtype, np.floating):
        x = rng.uniform(-scale, scale, n)
        ties = rng.random(n) < 0.25             # exact halves: the rounding instructions' ties
        x[ties] = np.round(x[ties]) + 0.5
        return x.astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -scale), min(info.max, scale - 1), n, endpoint=True).astype(dtype)


@pytest.mark.parametrize("name, mnemonic, ops, dtype, scale, model", CASES, ids=[c[0] for c in CASES])
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_instruction_computes_its_model(name, mnemonic, ops, dtype, scale, model, seed):
    rng = np.random.default_rng(seed)
    A, B, D = (_draw(rng, dtype, scale) for _ in range(3))
    if mnemonic == "fdiv":
        B[B == 0] = 1
    if mnemonic == "fsqrt":
        A = np.abs(A)
    out = D.copy()
    run_a64(_kernel(mnemonic, ops), [A, B, out])
    want = np.ascontiguousarray(model(D.copy(), A, B)).view(np.uint8)
    got = out.view(np.uint8)
    assert np.array_equal(got, want), f"{name}: a={A} b={B} d={D}\ngot  {out}\nwant {want.view(dtype)}"
