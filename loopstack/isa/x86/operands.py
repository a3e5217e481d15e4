"""x86-64 operands: registers, memory references, labels.

Plain immutable values; the encoder reads their fields, the listing prints them in
Intel syntax. Nothing here knows about instructions.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gpr:
    """A general-purpose register. `bits` is 64, 32, 16 or 8."""

    num: int
    bits: int = 64

    @property
    def name(self) -> str:
        return _GPR_NAMES[self.bits][self.num]

    @property
    def needs_rex(self) -> bool:
        # r8-r15 need REX.R/B; spl/bpl/sil/dil need a REX prefix to not mean ah/ch/dh/bh
        return self.num >= 8 or (self.bits == 8 and 4 <= self.num <= 7)

    def __str__(self) -> str:
        return self.name


_GPR_NAMES = {
    64: ["rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi"] + [f"r{i}" for i in range(8, 16)],
    32: ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi"] + [f"r{i}d" for i in range(8, 16)],
    16: ["ax", "cx", "dx", "bx", "sp", "bp", "si", "di"] + [f"r{i}w" for i in range(8, 16)],
    8: ["al", "cl", "dl", "bl", "spl", "bpl", "sil", "dil"] + [f"r{i}b" for i in range(8, 16)],
}


@dataclass(frozen=True)
class Vec:
    """xmm/ymm/zmm register `num` (0-31); `bits` is 128, 256 or 512.

    `mask` and `zeroing` give AVX-512 write masking: zmm1.masked(k2) merges,
    zmm1.masked(k2, zero=True) zeroes the masked-off lanes (`{k2}{z}`).
    """

    num: int
    bits: int
    mask: "MaskReg | None" = None
    zeroing: bool = False

    @property
    def name(self) -> str:
        return {128: "xmm", 256: "ymm", 512: "zmm"}[self.bits] + str(self.num)

    def masked(self, k: "MaskReg", zero: bool = False) -> "Vec":
        return Vec(self.num, self.bits, k, zero)

    @property
    def x(self) -> "Vec":
        return Vec(self.num, 128)

    @property
    def y(self) -> "Vec":
        return Vec(self.num, 256)

    @property
    def z(self) -> "Vec":
        return Vec(self.num, 512)

    def __str__(self) -> str:
        s = self.name
        if self.mask is not None:
            s += "{%s}" % self.mask.name
            if self.zeroing:
                s += "{z}"
        return s


@dataclass(frozen=True)
class MaskReg:
    """An AVX-512 opmask register k0-k7."""

    num: int

    @property
    def name(self) -> str:
        return f"k{self.num}"

    def __str__(self) -> str:
        return self.name


RIP = "rip"


@dataclass(frozen=True)
class Mem:
    """[base + index*scale + disp], or [rip + label + disp] for the constant pool.

    `bits` is the access size when the form needs it (8..512); `broadcast` marks an
    AVX-512 embedded broadcast `{1toN}` of a single element of `bits` bits.
    """

    base: Gpr | str | None = None   # a Gpr, RIP, or None (absolute disp32 / index only)
    index: Gpr | None = None
    scale: int = 1
    disp: int = 0
    bits: int | None = None
    broadcast: bool = False
    label: "Label | None" = None    # with base=RIP: address of this label + disp
    mask: "MaskReg | None" = None   # AVX-512 masked store destination `[mem]{k}`

    def with_bits(self, bits: int) -> "Mem":
        return Mem(self.base, self.index, self.scale, self.disp, bits, self.broadcast, self.label, self.mask)

    def bcst(self, element_bits: int = 32) -> "Mem":
        return Mem(self.base, self.index, self.scale, self.disp, element_bits, True, self.label, self.mask)

    def masked(self, k: "MaskReg") -> "Mem":
        """A masked store destination, `vmovups [rdi]{k1}, zmm0` (stores only merge, never zero)."""
        return Mem(self.base, self.index, self.scale, self.disp, self.bits, self.broadcast, self.label, k)

    def __add__(self, delta: int) -> "Mem":
        return Mem(self.base, self.index, self.scale, self.disp + delta, self.bits, self.broadcast, self.label,
                   self.mask)

    def __str__(self) -> str:
        parts = []
        if self.base is RIP or self.base == RIP:
            parts.append("rip")
            if self.label is not None:
                parts.append(self.label.name)
        elif self.base is not None:
            parts.append(self.base.name)
        if self.index is not None:
            parts.append(f"{self.index.name}*{self.scale}" if self.scale != 1 else self.index.name)
        s = " + ".join(parts)
        if self.disp or not parts:
            s += f" {'-' if self.disp < 0 else '+'} {abs(self.disp):#x}" if parts else f"{self.disp:#x}"
        size = _PTR_NAMES.get(self.bits, "") if not self.broadcast else _PTR_NAMES.get(self.bits, "")
        out = f"{size} [{s}]" if size else f"[{s}]"
        if self.mask is not None:
            out += "{%s}" % self.mask.name
        return out + ("{1toN}" if self.broadcast else "")


_PTR_NAMES = {8: "byte ptr", 16: "word ptr", 32: "dword ptr", 64: "qword ptr",
              128: "xmmword ptr", 256: "ymmword ptr", 512: "zmmword ptr"}


class Label:
    """A position in the code, bound once by `Assembler.bind`. Compared by identity."""

    __slots__ = ("name", "offset")

    def __init__(self, name: str):
        self.name = name
        self.offset: int | None = None

    def __repr__(self) -> str:
        return f"Label({self.name!r})"

    def __str__(self) -> str:
        return self.name


def mem(base=None, index=None, scale=1, disp=0, bits=None) -> Mem:
    return Mem(base, index, scale, disp, bits)


# The register file, by name: `from loopstack.isa.x86.operands import rax, ymm3, zmm17, k1`
rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8, r9, r10, r11, r12, r13, r14, r15 = (Gpr(i) for i in range(16))
GPR64 = (rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8, r9, r10, r11, r12, r13, r14, r15)
GPR32 = tuple(Gpr(i, 32) for i in range(16))
GPR8 = tuple(Gpr(i, 8) for i in range(16))
XMM = tuple(Vec(i, 128) for i in range(32))
YMM = tuple(Vec(i, 256) for i in range(32))
ZMM = tuple(Vec(i, 512) for i in range(32))
K = tuple(MaskReg(i) for i in range(8))

globals().update({r.name: r for r in GPR32 + GPR8 + XMM + YMM + ZMM + K})

# System V AMD64 calling convention
ARG_REGS = (rdi, rsi, rdx, rcx, r8, r9)
CALLEE_SAVED = (rbx, rbp, r12, r13, r14, r15)
