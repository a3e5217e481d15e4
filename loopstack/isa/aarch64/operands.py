"""AArch64 operands: registers and their views, memory references, shifts, labels.

Plain values, never changed once made. Each carries `kind`, the string the instruction table
matches on (see forms.py), and prints itself in the Arm ARM's assembler syntax, so that a
listing line can be fed back to LLVM's assembler as it is.

Every operand is interned: X(3) is X(3), V(2).s[1] is V(2).s[1], and Mem(X(1), 16) built twice
is one object. Equality is identity, and hashing is the object's own (fast, C-level), which is
what lets the assembler keep each encoded instruction under its operands (assembler.py).

    X(3), W(3), XZR, WZR, SP                     x3, w3, xzr, wzr, sp
    V(3).s4  .h8 .b16 .d2 .s2 .h4 .b8            v3.4s ...            (arrangements)
    V(3).q   .d .s .h .b                         q3, d3, s3, h3, b3   (scalars)
    V(3).s[1] .h[i] .b[i] .d[i]  V(3).b4[i]      v3.s[1], v3.4b[1]    (elements)
    Mem(X(1), 16)  Mem.pre(X(1), -16)  Mem.post(X(1), 32)  Mem.post(X(1), X(2))
    LSL(3) LSR(3) ASR(3)                         shift of a shifted-register operand
    "pldl1keep" ...                              prefetch operations are plain strings
"""
from __future__ import annotations

import weakref

from ...errors import EncodingError

__all__ = [
    "ASR", "Element", "Gpr", "LSL", "LSR", "Label", "Mem", "PREFETCH_OPS", "SP", "Shift", "V", "Vec",
    "VecReg", "W", "WSP", "WZR", "X", "XZR",
]


class Gpr:
    """A general-purpose register view: x0-x30 / w0-w30, the zero register or the stack pointer.

    The zero register and sp share number 31; which one an instruction means is decided by the
    slot (`Xn|SP` versus `Xm`), so they are different kinds here and the table rejects the wrong one.
    """

    __slots__ = ("num", "bits", "kind", "name")

    def __init__(self, num: int, bits: int, kind: str, name: str):
        self.num, self.bits, self.kind, self.name = num, bits, kind, name

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__



def _gprs(prefix: str, bits: int) -> tuple[Gpr, ...]:
    return tuple(Gpr(n, bits, prefix, f"{prefix}{n}") for n in range(31))


_X = _gprs("x", 64)
_W = _gprs("w", 32)
XZR = Gpr(31, 64, "xzr", "xzr")
WZR = Gpr(31, 32, "wzr", "wzr")
SP = Gpr(31, 64, "sp", "sp")
WSP = Gpr(31, 32, "wsp", "wsp")


def X(n: int) -> Gpr:
    """64-bit register xN, N in 0..30 (use XZR / SP for number 31)."""
    if not isinstance(n, int) or not 0 <= n <= 30:
        raise EncodingError(f"x{n}: general registers are x0..x30 (use XZR or SP for 31)")
    return _X[n]


def W(n: int) -> Gpr:
    """32-bit register wN, N in 0..30 (use WZR for number 31)."""
    if not isinstance(n, int) or not 0 <= n <= 30:
        raise EncodingError(f"w{n}: general registers are w0..w30 (use WZR or WSP for 31)")
    return _W[n]


class VecReg:
    """One view of a SIMD&FP register: an arrangement (v3.4s) or a scalar (q3, s3)."""

    __slots__ = ("num", "kind", "name", "lanes", "esize")

    def __init__(self, num: int, kind: str, name: str, lanes: int, esize: int):
        self.num, self.kind, self.name, self.lanes, self.esize = num, kind, name, lanes, esize

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__



class Element:
    """An element of a SIMD register, `v3.s[1]`, or the sdot/udot 4-byte group `v3.4b[1]`."""

    __slots__ = ("num", "kind", "name", "index", "esize")

    def __init__(self, num: int, size: str, index: int):
        esize = {"b": 1, "h": 2, "s": 4, "d": 8, "4b": 4}[size]
        if not isinstance(index, int) or not 0 <= index < 16 // esize:
            raise EncodingError(f"v{num}.{size}[{index}]: element index 0..{16 // esize - 1}")
        self.num, self.index, self.esize = num, index, esize
        self.kind = f"v.{size}[]"
        self.name = f"v{num}.{size}[{index}]"

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__



def _element_getter(num: int, size: str):
    elements = tuple(Element(num, size, i) for i in range(16 // {"b": 1, "h": 2, "s": 4, "d": 8, "4b": 4}[size]))

    def get(index: int) -> Element:
        if type(index) is not int or not 0 <= index < len(elements):
            Element(num, size, index)       # raises, naming the range
        return elements[index]
    return get


class _Lanes:
    """`V(n).b4`: V(n).b4[i] is the sdot/udot element v<n>.4b[i]."""

    __slots__ = ("_get",)

    def __init__(self, num: int, size: str):
        self._get = _element_getter(num, size)

    def __getitem__(self, index: int) -> Element:
        return self._get(index)


# arrangement attribute -> (Arm spelling, lanes, element bytes)
ARRANGEMENTS = {
    "b8": ("8b", 8, 1), "b16": ("16b", 16, 1), "h4": ("4h", 4, 2), "h8": ("8h", 8, 2),
    "s2": ("2s", 2, 4), "s4": ("4s", 4, 4), "d1": ("1d", 1, 8), "d2": ("2d", 2, 8),
}
SCALAR_BYTES = {"b": 1, "h": 2, "s": 4, "d": 8, "q": 16}


class Vec:
    """SIMD&FP register vN (0..31); its views are attributes, as in the module docstring."""

    __slots__ = ("num", "b8", "b16", "h4", "h8", "s2", "s4", "d1", "d2", "q", "d", "s", "h", "b", "b4")

    def __init__(self, num: int):
        self.num = num
        for attr, (spelling, lanes, esize) in ARRANGEMENTS.items():
            setattr(self, attr, VecReg(num, "v." + spelling, f"v{num}.{spelling}", lanes, esize))
        self.q = VecReg(num, "q", f"q{num}", 1, 16)
        for size in "dshb":
            setattr(self, size, _ScalarLanes(num, size))
        self.b4 = _Lanes(num, "4b")

    def __repr__(self) -> str:
        return f"V({self.num})"


class _ScalarLanes(VecReg):
    """`V(n).s`: the scalar register s<n> (a VecReg of kind "s"), and `V(n).s[i]` its element i."""

    __slots__ = ("_get",)

    def __init__(self, num: int, size: str):
        super().__init__(num, size, f"{size}{num}", 1, SCALAR_BYTES[size])
        self._get = _element_getter(num, size)

    def __getitem__(self, index: int) -> Element:
        return self._get(index)


_V = tuple(Vec(n) for n in range(32))


def V(n: int) -> Vec:
    """SIMD&FP register vN, N in 0..31."""
    if not isinstance(n, int) or not 0 <= n <= 31:
        raise EncodingError(f"v{n}: SIMD registers are v0..v31")
    return _V[n]


class Shift:
    """`lsl #3` and friends: the shift of a shifted-register operand (or a movz/movk half)."""

    __slots__ = ("op", "amount", "kind")

    def __init__(self, op: str, amount: int):
        self.op, self.amount, self.kind = op, amount, "shift"

    def __repr__(self) -> str:
        return f"{self.op} #{self.amount}"

    __str__ = __repr__



_SHIFTS: dict[tuple, Shift] = {}


def _shift(op: str, n: int) -> Shift:
    key = (op, n, type(n))
    s = _SHIFTS.get(key)
    if s is None:
        s = _SHIFTS.setdefault(key, Shift(op, n))
    return s


def LSL(n: int) -> Shift:
    return _shift("lsl", n)


def LSR(n: int) -> Shift:
    return _shift("lsr", n)


def ASR(n: int) -> Shift:
    return _shift("asr", n)


class Mem:
    """A memory operand on base register `base` (an X register or SP).

    Mem(base, off)          [base, #off]       unsigned scaled offset, or the unscaled (ldur) form
    Mem(base, xm)           [base, xm]         register offset (ldr/str of GPRs and SIMD registers)
    Mem.pre(base, off)      [base, #off]!      pre-index: base += off, then access
    Mem.post(base, off)     [base], #off       post-index: access, then base += off
    Mem.post(base, xm)      [base], xm         ld1/st1 post-index by a register
    """

    __slots__ = ("base", "offset", "mode", "kind", "__weakref__")
    _interned: "weakref.WeakValueDictionary[tuple, Mem]" = weakref.WeakValueDictionary()

    def __new__(cls, base: Gpr, offset=0, mode: str = "offset"):
        key = (base, offset, type(offset), mode)
        try:
            return cls._interned[key]
        except (KeyError, TypeError):       # TypeError: an unhashable offset, reported by __init__
            pass
        m = object.__new__(cls)
        m._make(base, offset, mode)
        try:
            cls._interned[key] = m
        except TypeError:
            pass
        return m

    def __init__(self, base: Gpr, offset=0, mode: str = "offset"):
        pass                                # made by __new__ (interned)

    def _make(self, base: Gpr, offset, mode: str) -> None:
        if not isinstance(base, Gpr) or base.kind not in ("x", "sp"):
            raise EncodingError(f"memory base {base!r}: must be an X register or SP")
        if isinstance(offset, Gpr):
            if offset.kind not in ("x", "xzr") or mode == "pre":
                raise EncodingError(f"memory index {offset!r}: must be an X register (offset or post-index)")
            kind = "[mem,reg]" if mode == "offset" else "[mem],reg"
        elif isinstance(offset, int) and not isinstance(offset, bool):
            kind = {"offset": "[mem]", "pre": "[mem]!", "post": "[mem],imm"}[mode]
        else:
            raise EncodingError(f"memory offset {offset!r}: must be an int or an X register")
        self.base, self.offset, self.mode, self.kind = base, offset, mode, kind

    @classmethod
    def pre(cls, base: Gpr, offset: int) -> "Mem":
        return cls(base, offset, "pre")

    @classmethod
    def post(cls, base: Gpr, offset) -> "Mem":
        return cls(base, offset, "post")

    def __repr__(self) -> str:
        b = self.base.name
        off = self.offset
        if self.mode == "post":
            return f"[{b}], {off.name}" if isinstance(off, Gpr) else f"[{b}], #{off}"
        if isinstance(off, Gpr):
            return f"[{b}, {off.name}]"
        inner = f"[{b}, #{off}]" if off or self.mode == "pre" else f"[{b}]"
        return inner + ("!" if self.mode == "pre" else "")

    __str__ = __repr__



class Label:
    """A position in the code, bound by `Assembler.bind`; branches and literal loads refer to it."""

    __slots__ = ("name", "position", "kind")

    def __init__(self, name: str = ""):
        self.name, self.position, self.kind = name, None, "label"

    def __repr__(self) -> str:
        return f"Label({self.name or hex(id(self))})"

    __str__ = __repr__


# prfm's <prfop>: (type, target, policy) -> the 5-bit Rt field (Arm ARM C6.2.248)
PREFETCH_OPS = {
    f"{t}l{level}{policy}": (tcode << 3) | ((level - 1) << 1) | pcode
    for t, tcode in (("pld", 0), ("pli", 1), ("pst", 2))
    for level in (1, 2, 3)
    for policy, pcode in (("keep", 0), ("strm", 1))
}
