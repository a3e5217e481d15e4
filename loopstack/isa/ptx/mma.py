"""The mma.sync forms loopstack emits, one row each, with their fragment layouts.

A row is the single source of truth for an mma form: the emitter builds its instruction
text and its operand registers from it, and the SIMT reference interpreter can import the
same layouts to scatter and gather fragments.  Each layout maps (lane, i) -> (row, col) of
the operand's tile, where i counts a thread's elements from the low half (f16) or low byte
(s8) of its first register (PTX ISA "Matrix fragments for mma.m16n8k16 / m16n8k32"; checked
on an H100, see the platform notes).  A is row-major (row = m, col = k), B is described as
(row = k, col = n), C/D as (row = m, col = n).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...errors import UnsupportedError

Layout = Callable[[int, int], tuple[int, int]]


def _f16_a(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)


def _f16_b(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return 2 * t + (i & 1) + 8 * (i >> 1), g


def _acc(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return g + 8 * (i >> 1), 2 * t + (i & 1)


def _tf32_a(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return g + 8 * (i & 1), t + 4 * (i >> 1)


def _tf32_b(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return t + 4 * i, g


def _s8_a(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return g + 8 * ((i >> 2) & 1), 4 * t + (i & 3) + 16 * (i >> 3)


def _s8_b(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return 4 * t + (i & 3) + 16 * (i >> 2), g


@dataclass(frozen=True)
class MmaShape:
    """One mma.sync form: shape, element types, registers per thread and fragment layouts."""

    shape: str            # "m16n8k16"
    ab: str               # PTX type of A's elements, and of B's where `b` is "": "f16", "bf16", "tf32", "s8", "u8"
    acc: str              # PTX type of C and D: "f32", "s32"
    m: int
    n: int
    k: int
    regs: tuple[int, int, int]   # 32-bit registers per thread for A, B, C/D
    a_layout: Layout
    b_layout: Layout
    c_layout: Layout
    b: str = ""           # B's element type where it differs from A's (the integer forms mix u8 and s8)

    @property
    def b_type(self) -> str:
        return self.b or self.ab

    @property
    def label(self) -> str:
        """The operand types as a name: "f16", "s8", or "u8.s8" where A's and B's differ."""
        return self.ab if self.b_type == self.ab else f"{self.ab}.{self.b_type}"

    @property
    def ab_bytes(self) -> int:
        return {"s8": 1, "u8": 1, "tf32": 4}.get(self.ab, 2)

    @property
    def exact(self) -> bool:
        """Whether the instruction computes its description exactly (up to the order of f32
        sums): not tf32, which reads float32 operands rounded to 10-bit mantissas."""
        return self.ab != "tf32"

    @property
    def per_reg(self) -> int:
        """A/B elements packed into one 32-bit register."""
        return 4 // self.ab_bytes

    @property
    def acc_reg_type(self) -> str:
        return self.acc   # "f32" or "s32": one element per register

    def elements(self, operand: str) -> int:
        """Elements of `operand` ("a", "b", "c") that one thread holds."""
        ra, rb, rc = self.regs
        return {"a": ra * self.per_reg, "b": rb * self.per_reg, "c": rc}[operand]

    def layout(self, operand: str) -> Layout:
        return {"a": self.a_layout, "b": self.b_layout, "c": self.c_layout}[operand]

    def opcode(self) -> str:
        """The instruction's full name, e.g. mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32."""
        return f"mma.sync.aligned.{self.shape}.row.col.{self.acc}.{self.ab}.{self.b_type}.{self.acc}"

    @property
    def dtypes(self) -> tuple[str, str, str]:
        """numpy dtype names of A's elements, of B's and of the accumulator."""
        names = {v: k for k, v in _BY_DTYPE.items()}
        return names[self.ab], names[self.b_type], {"f32": "float32", "s32": "int32"}[self.acc]

    def description(self):
        """The instruction's semantics as a loopstack program (UNIT's tensor-instruction
        description): D[m, n] = C[m, n] + sum_k A[m, k] * B[k, n] over one m x n x k tile,
        accumulating in the accumulator's type.  Arguments: A, B, C, then D."""
        from ...looptree.ir import Binary, Buffer, Compute, Load, Loop, LoopTree
        from ...looptree.builders import access
        a, b, acc = self.dtypes
        bufs = (Buffer("A", a, (self.m, self.k), "input"), Buffer("B", b, (self.k, self.n), "input"),
                Buffer("C", acc, (self.m, self.n), "input"), Buffer("D", acc, (self.m, self.n), "output"))
        stmt = Compute("D", access("D", "m", "n"),
                       Binary("mul", Load(access("A", "m", "k")), Load(access("B", "k", "n"))),
                       reduce="add", init=Load(access("C", "m", "n")))
        body = (Loop("m", "m", 1, (Loop("n", "n", 1, (Loop("k", "k", 1, (stmt,)),)),)),)
        return LoopTree(bufs, (("m", self.m), ("n", self.n), ("k", self.k)), body)

    def __post_init__(self):
        # every (lane, i) must land on a distinct element of each tile, covering it exactly
        for op, (rows, cols) in (("a", (self.m, self.k)), ("b", (self.k, self.n)), ("c", (self.m, self.n))):
            seen = {self.layout(op)(lane, i) for lane in range(32) for i in range(self.elements(op))}
            if len(seen) != rows * cols or not all(0 <= r < rows and 0 <= c < cols for r, c in seen):
                raise ValueError(f"MmaShape {self.shape}.{self.label}: the {op} layout does not tile {rows}x{cols}")


# the registry of tensor-core instructions: each row its semantics (`description()`), its
# operand layouts, and the PTX the emitter writes for it
MMA_SHAPES: tuple[MmaShape, ...] = (
    MmaShape("m16n8k16", "f16", "f32", 16, 8, 16, (4, 2, 4), _f16_a, _f16_b, _acc),
    MmaShape("m16n8k16", "bf16", "f32", 16, 8, 16, (4, 2, 4), _f16_a, _f16_b, _acc),
    # float32 operands as TF32 (8-bit exponent, 10-bit mantissa; the emitter rounds them with
    # cvt.rna.tf32.f32): 32 bytes of k per row like the others, so the same ldmatrix tiles
    MmaShape("m16n8k8", "tf32", "f32", 16, 8, 8, (4, 2, 4), _tf32_a, _tf32_b, _acc),
    MmaShape("m16n8k32", "s8", "s32", 16, 8, 32, (4, 2, 4), _s8_a, _s8_b, _acc),
    # 8-bit integers of either signedness on either side (uint8 activations, int8 weights: ONNX's
    # usual quantization), with the s8 layouts: the fragments hold bytes either way
    MmaShape("m16n8k32", "u8", "s32", 16, 8, 32, (4, 2, 4), _s8_a, _s8_b, _acc, b="s8"),
    MmaShape("m16n8k32", "s8", "s32", 16, 8, 32, (4, 2, 4), _s8_a, _s8_b, _acc, b="u8"),
    MmaShape("m16n8k32", "u8", "s32", 16, 8, 32, (4, 2, 4), _s8_a, _s8_b, _acc),
)

# numpy dtype names of the inputs -> PTX element type of the mma form
_BY_DTYPE = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32", "int8": "s8", "uint8": "u8"}


def mma_for(a_dtype: str, b_dtype: str | None = None) -> MmaShape:
    """The mma.sync form that multiplies A of numpy dtype `a_dtype` by B of `b_dtype` (A's by default)."""
    a, b = _BY_DTYPE.get(a_dtype), _BY_DTYPE.get(b_dtype or a_dtype)
    for row in MMA_SHAPES:
        if (row.ab, row.b_type) == (a, b):
            return row
    what = a_dtype if b_dtype in (None, a_dtype) else f"{a_dtype} by {b_dtype}"
    raise UnsupportedError(f"no mma.sync form multiplies {what} inputs (supported: float16, bfloat16, "
                           f"float32 as tf32, and int8 or uint8 on either side)")
