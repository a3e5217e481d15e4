"""x86-64 operands: registers, memory references, labels.

Plain values, never changed once made; the encoder reads their fields, the listing prints them
in Intel syntax. Nothing here knows about instructions.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gpr:
    """A general-purpose register. `bits` is 64, 32, 16 or 8."""

    num: int
    bits: int = 64

    # not fields: see "Template codes" below
    _template_code = None
    _base_field = None
    _index_field = None

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

    _template_code = None           # not a field: see "Template codes" below

    @property
    def name(self) -> str:
        return {128: "xmm", 256: "ymm", 512: "zmm"}[self.bits] + str(self.num)

    def masked(self, k: "MaskReg", zero: bool = False) -> "Vec":
        if self._template_code is None or k._template_code is None or type(zero) is not bool:
            return Vec(self.num, self.bits, k, zero)
        # an interned register under an interned k register: interned too, with a template code
        # of its own (see "Template codes"), so that masked instructions are kept as others are
        key = (self._template_code, k._template_code, zero)
        v = _MASKED.get(key)
        if v is None:
            v = _MASKED[key] = Vec(self.num, self.bits, k, zero)
            _set_attribute(v, "_template_code", _MASKED_CODES + len(_MASKED))
        return v

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

    # not fields: see "Template codes" below
    _template_code = None
    _mask_field = None

    @property
    def name(self) -> str:
        return f"k{self.num}"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Tmm:
    """An AMX tile register tmm0-tmm7 (its shape is set by the tile configuration, ldtilecfg)."""

    num: int

    _template_code = None           # not a field: see "Template codes" below

    @property
    def name(self) -> str:
        return f"tmm{self.num}"

    def __str__(self) -> str:
        return self.name


RIP = "rip"


_set_attribute = object.__setattr__      # sets what is not a field, past a frozen dataclass's __setattr__
_new_mem = object.__new__                 # a Mem without __init__ (Mem.with_bits fills every slot)
_MEM_FIELDS = ("base", "index", "scale", "disp", "bits", "broadcast", "label", "mask")


class Mem:
    """[base + index*scale + disp], or [rip + label + disp] for the constant pool.

    `bits` is the access size when the form needs it (8..512); `broadcast` marks an
    AVX-512 embedded broadcast `{1toN}` of a single element of `bits` bits.

    A value, equal and hashed by its fields, which are never assigned after `__init__`. Not a
    frozen dataclass: the code generator builds one per memory operand, and plain slot stores
    cost a fraction of a frozen dataclass's `object.__setattr__` calls.
    """

    __slots__ = _MEM_FIELDS + ("_template_shape",)
    __match_args__ = _MEM_FIELDS
    _template_code = None           # a Mem is no register: see "Template codes" below

    def __init__(self, base: Gpr | str | None = None, index: Gpr | None = None, scale: int = 1, disp: int = 0,
                 bits: int | None = None, broadcast: bool = False, label: Label | None = None,
                 mask: MaskReg | None = None):
        self.base = base            # a Gpr, RIP, or None (absolute disp32 / index only)
        self.index = index
        self.scale = scale
        self.disp = disp
        self.bits = bits
        self.broadcast = broadcast
        self.label = label          # with base=RIP: address of this label + disp
        self.mask = mask            # AVX-512 masked store destination `[mem]{k}`
        # the template shape (see "Template codes" below). A field with no value there fails:
        # AttributeError for a base that is no Gpr (rip, none) or an index or mask of another
        # class, TypeError for the None of a register with no value in its place (one that is not
        # interned, rsp as an index), KeyError for a scale or size not in its dict
        try:
            shape = (base._base_field | (_NO_INDEX if index is None else index._index_field)
                     | _SCALE_FIELD[scale] | _BITS_FIELD[bits] | (_BROADCAST_BIT if broadcast else 0)
                     | (0 if mask is None else mask._mask_field))
        except (AttributeError, TypeError, KeyError):
            shape = NOT_TEMPLATED
        # numbers of type int only: the displacement is a dict key next to the shape, and 2.0 or
        # True would find the entries of 2 and 1, while they print differently
        if type(disp) is not int or type(scale) is not int or not (bits is None or type(bits) is int):
            shape = NOT_TEMPLATED
        self._template_shape = shape

    def _fields(self) -> tuple:
        return (self.base, self.index, self.scale, self.disp, self.bits, self.broadcast, self.label, self.mask)

    def __eq__(self, other) -> bool:
        if type(other) is not Mem:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __reduce__(self) -> tuple:
        return Mem, self._fields()

    def __repr__(self) -> str:
        return "Mem(" + ", ".join(f"{n}={v!r}" for n, v in zip(_MEM_FIELDS, self._fields())) + ")"

    def with_bits(self, bits: int) -> "Mem":
        # the code generator sizes most operands it builds: a copy whose template shape differs
        # from this one's only in the size field, unless either is no template (then __init__)
        field = _BITS_FIELD.get(bits) if bits is None or type(bits) is int else None
        shape = self._template_shape
        if field is None or shape is NOT_TEMPLATED:
            return Mem(self.base, self.index, self.scale, self.disp, bits, self.broadcast, self.label, self.mask)
        m = _new_mem(Mem)
        m.base, m.index, m.scale, m.disp = self.base, self.index, self.scale, self.disp
        m.bits, m.broadcast, m.label, m.mask = bits, self.broadcast, self.label, self.mask
        m._template_shape = shape & ~_BITS_FIELD_MASK | field
        return m

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
    _template_code = None           # no register: see "Template codes" below

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
TMM = tuple(Tmm(i) for i in range(8))

globals().update({r.name: r for r in GPR32 + GPR8 + XMM + YMM + ZMM + K + TMM})

# Template codes. The assembler keeps the bytes of instructions it has encoded under keys made
# of the mnemonic and one small int per operand (small ints hash and compare fastest):
#   - Each register object above (rax, eax, al, xmm3, ymm3, zmm3, k1, tmm0, ...) has its own template
#     code, 1 to 160, set once here, and each masked one made from them (zmm1.masked(k1)) its
#     own from _MASKED_CODES on. Other register objects, e.g. Vec(3, 256), keep the class value
#     None, and an instruction with one of those is encoded in full every time.
#   - A Mem's template shape packs its base, index, scale, size, broadcast and mask into
#     _SHAPE_BITS bits, the top one set so that no shape is a register code; the assembler puts
#     the displacement next to it. `Mem.__init__` works it out from the field values below,
#     which the interned registers carry as attributes (a base, index or mask register adds its
#     own, with no dict lookup) and the dicts hold for the other fields. A Mem with a field
#     outside these values (a rip base, a register that is not one of the objects above, a
#     displacement that is no int, ...) has NOT_TEMPLATED.
# Both stand for the operand's value, not for the object, so a copy (pickled, say) may keep them.
for _code, _reg in enumerate(GPR64 + GPR32 + GPR8 + XMM + YMM + ZMM + K + TMM, start=1):
    _set_attribute(_reg, "_template_code", _code)

# The masked registers (zmm3{k1}, zmm3{k1}{z}, ...) of interned registers are interned when first
# asked for (Vec.masked), numbered from _MASKED_CODES on: above every register's code, below every
# Mem shape (_SHAPE_TAG), as the at most 96 x 8 x 2 of them fit between.
_MASKED: dict[tuple, Vec] = {}
_MASKED_CODES = 1024

NOT_TEMPLATED = "not templated"         # a str: it pickles as itself and is no register code
_SHAPE_BITS = 19
# each field's values, already shifted into place; the base, which every shape has, sets the tag
_SHAPE_TAG = 1 << (_SHAPE_BITS - 1)
for _reg in GPR64:
    _set_attribute(_reg, "_base_field", _SHAPE_TAG | _reg.num)                    # bits 0-3
    if _reg.num != 4:                                                              # rsp is no index
        _set_attribute(_reg, "_index_field", _reg.num << 4)                        # bits 4-7
_NO_INDEX = 4 << 4
_SCALE_FIELD = {1: 0 << 8, 2: 1 << 8, 4: 2 << 8, 8: 3 << 8}                        # bits 8-9
_BITS_FIELD = {b: i << 10 for i, b in enumerate((None, 8, 16, 32, 64, 128, 256, 512))}  # bits 10-12
_BITS_FIELD_MASK = 7 << 10
_BROADCAST_BIT = 1 << 13
for _reg in K:
    _set_attribute(_reg, "_mask_field", (_reg.num + 1) << 14)                      # bits 14-17 (0: none)


# System V AMD64 calling convention
ARG_REGS = (rdi, rsi, rdx, rcx, r8, r9)
CALLEE_SAVED = (rbx, rbp, r12, r13, r14, r15)
