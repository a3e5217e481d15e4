"""A small, table-driven PTX builder: typed virtual registers, checked instruction forms, labels.

    k = KernelBuilder("gemm", target="sm_90")
    a = k.param("u64", "A")                    # .param .u64 A; read with k.ld_param
    r = k.reg("u32")                           # %r1, declared by a generated .reg line
    k.ins("mov.u32", r, SpecialReg("%tid.x"))
    k.ins("add.s32", r, r, 4)
    p = k.reg("pred"); k.ins("setp.lt.u32", p, r, 100)
    k.ins("st.global.f32", Addr(ptr, 8), f, pred=p)
    print(k.text())

Every instruction is checked against `FORMS` before it is written: its opcode tokens
(modifiers and type suffixes), the number and kinds of its operands, and that each register's
width fits the type it is used as.  A mismatch raises EncodingError naming the instruction and
the operand, so malformed PTX is caught here rather than by the driver's JIT.  Register
allocation is left to ptxas: every value gets a fresh virtual register (tinygrad's renderer
does the same), and the `.reg` lines declare exactly the registers used.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Union

from ...errors import EncodingError

# ---------------------------------------------------------------------------- registers and operands

# register class of each declared type: (name prefix, .reg type, bits)
REG_CLASSES = {
    "pred": ("%p", "pred", 1),
    "b16": ("%h", "b16", 16), "f16": ("%h", "b16", 16), "bf16": ("%h", "b16", 16),
    "u16": ("%h", "b16", 16), "s16": ("%h", "b16", 16),
    "b32": ("%r", "b32", 32), "u32": ("%r", "b32", 32), "s32": ("%r", "b32", 32),
    "f16x2": ("%r", "b32", 32), "bf16x2": ("%r", "b32", 32),
    "f32": ("%f", "f32", 32),
    "b64": ("%rd", "b64", 64), "u64": ("%rd", "b64", 64), "s64": ("%rd", "b64", 64),
    "f64": ("%fd", "f64", 64),
}

# bits of each instruction type suffix
TYPE_BITS = {"pred": 1, "b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16,
             "b32": 32, "u32": 32, "s32": 32, "f32": 32, "tf32": 32, "f16x2": 32, "bf16x2": 32,
             "b64": 64, "u64": 64, "s64": 64, "f64": 64}


@dataclass(frozen=True)
class Reg:
    name: str
    type: str

    @property
    def bits(self) -> int:
        return REG_CLASSES[self.type][2]

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class SpecialReg:
    """%tid.x, %ctaid.y, %laneid, ... (32-bit unsigned)."""
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Addr:
    """A memory operand [base + offset]; base is a register or a symbol (a shared array's name)."""
    base: Union[Reg, str]
    offset: int = 0

    def __str__(self) -> str:
        b = str(self.base)
        return f"[{b}+{self.offset}]" if self.offset > 0 else f"[{b}-{-self.offset}]" if self.offset else f"[{b}]"


@dataclass(frozen=True)
class Vec:
    """A vector operand {%r1, %r2, ...} (ld/st .v2/.v4, mma fragments, ldmatrix results)."""
    regs: tuple

    def __str__(self) -> str:
        return "{" + ", ".join(str(r) for r in self.regs) + "}"


@dataclass(frozen=True)
class Label:
    name: str

    def __str__(self) -> str:
        return self.name


Operand = Union[Reg, SpecialReg, Addr, Vec, Label, int, float, str]

# ---------------------------------------------------------------------------- the instruction table

INT = ("s32", "u32", "s64", "u64")
BITS = ("b16", "b32", "b64")
FLOAT = ("f32",)
HALF = ("f16", "f16x2", "bf16", "bf16x2")
MEM_TYPES = ("u8", "s8", "u16", "s16", "b16", "f16", "u32", "s32", "b32", "f32", "u64", "s64", "b64")
CMP = ("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs")


@dataclass(frozen=True)
class Form:
    """One instruction shape.

    op        the mnemonic before the first dot
    mods      modifier groups: each tuple lists alternatives, at most one of which appears
              (a group containing "" is optional; one without "" is required)
    types     allowed type suffixes, `ntypes` of which end the opcode
    operands  operand kinds: d = destination register, s = source register or immediate,
              r = source register, p = predicate destination, q = predicate source,
              m = memory address, v = vector of registers, l = label, x = special or register
    widths    whether register widths must match the type (arithmetic); loads, stores and cvt
              allow a wider register than the memory type
    """
    op: str
    mods: tuple
    types: tuple
    operands: str
    ntypes: int = 1
    widths: bool = True


FORMS: dict[str, Form] = {f.op: f for f in (
    Form("mov", (), INT + BITS + FLOAT + ("pred", "f16", "bf16"), "dx"),
    Form("add", (("", "sat", "rn"),), INT + FLOAT + HALF, "dss"),
    Form("sub", (("", "sat", "rn"),), INT + FLOAT + HALF, "dss"),
    Form("mul", (("", "lo", "wide", "hi", "rn"),), INT + FLOAT + HALF, "dss"),
    Form("mad", (("lo", "wide", "hi"),), INT, "dsss"),
    Form("fma", (("rn",),), FLOAT + HALF, "dsss"),
    Form("div", (("", "rn", "approx", "full"),), INT + FLOAT, "dss"),
    Form("rem", (), INT, "dss"),
    Form("min", (), INT + FLOAT, "dss"),
    Form("max", (), INT + FLOAT, "dss"),
    Form("neg", (), ("s32", "s64") + FLOAT, "ds"),
    Form("abs", (), ("s32", "s64") + FLOAT, "ds"),
    Form("ex2", (("approx",), ("", "ftz")), ("f32",), "ds"),
    Form("rcp", (("rn", "approx"), ("", "ftz")), ("f32", "f64"), "ds"),
    Form("and", (), BITS + ("pred",), "dss"),
    Form("or", (), BITS + ("pred",), "dss"),
    Form("xor", (), BITS + ("pred",), "dss"),
    Form("not", (), BITS + ("pred",), "ds"),
    Form("shl", (), BITS, "dss"),
    Form("shr", (), BITS + INT, "dss"),
    Form("selp", (), INT + BITS + FLOAT, "dssq"),
    Form("prmt", (), ("b32",), "dsss"),          # the default mode: four selector nibbles
    Form("setp", (CMP, ("", "and", "or")), INT + FLOAT + BITS, "pss"),
    Form("cvt", (("", "rn", "rna", "rz", "rni", "rzi", "rmi", "rpi"), ("", "sat")),
         ("f32", "f16", "bf16", "tf32", "s32", "u32", "s8", "u8", "s16", "u16", "s64", "u64", "f16x2", "bf16x2"),
         "ds", ntypes=2, widths=False),
    Form("cvta", (("to",), ("global", "shared")), ("u64",), "ds"),
    Form("ld", (("param", "global", "shared"), ("", "nc"), ("", "v2", "v4")), MEM_TYPES, "dm", widths=False),
    Form("st", (("global", "shared"), ("", "v2", "v4")), MEM_TYPES, "ms", widths=False),
    Form("bra", (("", "uni"),), (), "l", ntypes=0),
    Form("bar", (("sync",),), (), "s", ntypes=0),
    Form("ret", (), (), "", ntypes=0),
)}


def _bits_of(op: Operand) -> int | None:
    return op.bits if isinstance(op, Reg) else None


def _fmt(x: Operand, type_: str | None) -> str:
    if isinstance(x, bool):
        raise EncodingError(f"a bool is not an operand: {x!r}")
    if isinstance(x, float) or (isinstance(x, int) and type_ in ("f32",)):
        return "0f%08X" % struct.unpack("<I", struct.pack("<f", float(x)))[0]
    return str(x)


def check(opcode: str, operands: tuple) -> Form:
    """Check `opcode operands` against FORMS; the Form, or EncodingError naming what is wrong."""
    tokens = opcode.split(".")
    form = FORMS.get(tokens[0])
    if form is None:
        raise EncodingError(f"{opcode}: no such instruction in the PTX table")
    rest = tokens[1:]
    types = rest[len(rest) - form.ntypes:] if form.ntypes else []
    mods = rest[:len(rest) - form.ntypes] if form.ntypes else rest
    for t in types:
        if t not in form.types:
            raise EncodingError(f"{opcode}: type .{t} not allowed (allowed: {', '.join(form.types)})")
    groups = list(form.mods)
    for m in mods:
        for gi, g in enumerate(groups):
            if m in g:
                groups.pop(gi)
                break
        else:
            raise EncodingError(f"{opcode}: modifier .{m} not allowed here")
    for g in groups:
        if "" not in g:
            raise EncodingError(f"{opcode}: needs one of .{', .'.join(g)}")
    kinds = form.operands + ("q" if form.op == "setp" and ("and" in mods or "or" in mods) else "")
    if form.op == "cvt" and types[:1] in (["f16x2"], ["bf16x2"]):
        kinds = "dss"       # cvt.rn.f16x2.f32 d, a, b packs two: a into the upper half, b the lower
    if len(operands) != len(kinds):
        raise EncodingError(f"{opcode}: {len(kinds)} operands expected, {len(operands)} given")
    vec = next((int(m[1]) for m in mods if m in ("v2", "v4")), 0)
    for pos, (kind, x) in enumerate(zip(kinds, operands)):
        _check_operand(f"{opcode} operand {pos}", tokens[0], form, mods, types, pos, kind, x, vec)
    return form


def _check_operand(where, op, form, mods, types, pos, kind, x, vec) -> None:
    if kind == "l":
        if not isinstance(x, Label):
            raise EncodingError(f"{where}: a label is needed, not {x!r}")
        return
    if kind == "m":
        if not isinstance(x, Addr):
            raise EncodingError(f"{where}: a memory address is needed, not {x!r}")
        return
    if kind in "pq":
        if not (isinstance(x, Reg) and x.type == "pred"):
            raise EncodingError(f"{where}: a predicate register is needed, not {x!r}")
        return
    if vec and ((kind == "d" and op == "ld") or (kind == "s" and op == "st")):
        _check_vec(where, x, vec)
        regs = x.regs
    elif kind == "d":
        if not isinstance(x, Reg):
            raise EncodingError(f"{where}: a register is needed, not {x!r}")
        regs = (x,)
    elif kind == "x":
        if not isinstance(x, (Reg, SpecialReg, int, float, Vec, str)):
            raise EncodingError(f"{where}: {x!r} is not a source")
        regs = x.regs if isinstance(x, Vec) else (x,) if isinstance(x, Reg) else ()
    else:
        if not isinstance(x, (Reg, int, float)):
            raise EncodingError(f"{where}: a register or an immediate is needed, not {x!r}")
        regs = (x,) if isinstance(x, Reg) else ()
    if not types:
        return
    # the type this operand is used as: cvt's destination has the first type, its source the second
    t = types[0] if (op == "cvt" and kind == "d") else types[-1]
    for r in regs:
        if (r.type == "pred") != (t == "pred"):
            raise EncodingError(f"{where}: {r.type} register {r} used as .{t}")
        want = TYPE_BITS[t]
        if op == "mul" and "wide" in mods and kind == "d":
            want *= 2
        if op == "mad" and "wide" in mods and pos in (0, 3):
            want *= 2
        if op in ("shl", "shr") and pos == 2:
            want = 32
        if op == "mov" and isinstance(x, Vec):     # packing mov.b32 %r, {%h0, %h1}
            want //= len(x.regs)
        # loads, stores and cvt take a register at least as wide as the type (extend / truncate)
        if (r.bits < want) if not form.widths else (r.bits != want):
            raise EncodingError(f"{where}: {r.type} register {r} does not fit .{t} ({want} bits)")


def _check_vec(where: str, x, n: int) -> None:
    if not (isinstance(x, Vec) and len(x.regs) == n and all(isinstance(r, Reg) for r in x.regs)):
        raise EncodingError(f"{where}: a vector of {n} registers is needed, not {x!r}")


# ---------------------------------------------------------------------------- the tensor-core and async forms
# These have fixed operand shapes; their opcodes are assembled from the rows below.

LDMATRIX_NUM = {"x1": 1, "x2": 2, "x4": 4}
CP_ASYNC_SIZES = {"ca": (4, 8, 16), "cg": (16,)}

# ---------------------------------------------------------------------------- the builder


class KernelBuilder:
    """Builds the text of one `.visible .entry` kernel."""

    def __init__(self, name: str, target: str = "sm_90", version: str = "8.0"):
        self.name = name
        self.target = target
        self.version = version
        self.params: list[tuple[str, str]] = []
        self.counts: dict[str, int] = {}
        self.body: list[str] = []
        self.shared: list[str] = []
        self.labels = 0
        self.maxntid: int | None = None     # .maxntid: ptxas keeps registers within what fits

    # -- declarations
    def param(self, type_: str, name: str) -> str:
        if type_ not in ("u64", "u32", "s32", "f32"):
            raise EncodingError(f".param .{type_} {name}: only .u64/.u32/.s32/.f32 parameters")
        self.params.append((type_, name))
        return name

    def reg(self, type_: str) -> Reg:
        if type_ not in REG_CLASSES:
            raise EncodingError(f"no register class for .{type_}")
        prefix = REG_CLASSES[type_][0]
        n = self.counts.get(prefix, 0)
        self.counts[prefix] = n + 1
        return Reg(f"{prefix}{n}", type_)

    def regs(self, type_: str, n: int) -> list[Reg]:
        return [self.reg(type_) for _ in range(n)]

    def extern_shared(self, name: str, align: int = 16) -> str:
        """Dynamic shared memory (its size is given at launch)."""
        self.shared.append(f".extern .shared .align {align} .b8 {name}[];")
        return name

    def label(self, hint: str = "L") -> Label:
        self.labels += 1
        return Label(f"$L_{hint}_{self.labels}")

    def place(self, label: Label) -> None:
        self.body.append(f"{label.name}:")

    def comment(self, text: str) -> None:
        self.body.append(f"\t// {text}")

    # -- instructions
    def ins(self, opcode: str, *operands: Operand, pred: Reg | None = None, negate: bool = False) -> None:
        """Emit a checked instruction, optionally guarded by @pred (or @!pred)."""
        check(opcode, operands)
        tokens = opcode.split(".")
        type_ = tokens[-1] if tokens[-1] in TYPE_BITS else None
        if tokens[0] == "cvt":
            type_ = tokens[-1]
        text = ", ".join(_fmt(x, type_) for x in operands)
        self._emit(f"{opcode} {text}" if operands else opcode, pred, negate)

    def _emit(self, text: str, pred: Reg | None, negate: bool) -> None:
        if pred is not None:
            if pred.type != "pred":
                raise EncodingError(f"guard {pred} of `{text}` is not a predicate")
            text = f"@{'!' if negate else ''}{pred} {text}"
        self.body.append(f"\t{text};")

    def ld_param(self, type_: str, name: str) -> Reg:
        r = self.reg(type_)
        self.ins(f"ld.param.{type_}", r, Addr(name))
        return r

    def special(self, name: str) -> Reg:
        r = self.reg("u32")
        self.ins("mov.u32", r, SpecialReg(name))
        return r

    def cp_async(self, dst: Addr, src: Addr, size: int, src_size: Reg | int | None = None,
                 cache: str | None = None, pred: Reg | None = None) -> None:
        """cp.async.{ca,cg}.shared.global [dst], [src], size(, src_size): zero-fills past src_size."""
        cache = cache or ("cg" if size == 16 else "ca")
        if size not in CP_ASYNC_SIZES[cache]:
            raise EncodingError(f"cp.async.{cache}: size {size} not in {CP_ASYNC_SIZES[cache]}")
        if not (isinstance(dst, Addr) and isinstance(src, Addr)):
            raise EncodingError("cp.async: shared and global addresses are needed")
        if isinstance(src_size, Reg) and src_size.bits != 32:
            raise EncodingError(f"cp.async: src-size {src_size} must be a 32-bit register")
        extra = "" if src_size is None else f", {src_size}"
        self._emit(f"cp.async.{cache}.shared.global {dst}, {src}, {size}{extra}", pred, False)

    def cp_async_commit(self) -> None:
        self._emit("cp.async.commit_group", None, False)

    def cp_async_wait(self, n: int) -> None:
        if not (isinstance(n, int) and 0 <= n <= 7):
            raise EncodingError(f"cp.async.wait_group {n}: 0..7")
        self._emit(f"cp.async.wait_group {n}", None, False)

    def ldmatrix(self, dst: list[Reg], addr: Addr, trans: bool = False) -> None:
        num = {1: "x1", 2: "x2", 4: "x4"}.get(len(dst))
        if num is None or not all(isinstance(r, Reg) and r.bits == 32 and r.type != "f32" for r in dst):
            raise EncodingError(f"ldmatrix: 1, 2 or 4 b32 destination registers, not {dst}")
        if not isinstance(addr, Addr):
            raise EncodingError("ldmatrix: a shared address is needed")
        op = f"ldmatrix.sync.aligned.m8n8.{num}{'.trans' if trans else ''}.shared.b16"
        self._emit(f"{op} {Vec(tuple(dst))}, {addr}", None, False)

    def mma(self, shape, d: list[Reg], a: list[Reg], b: list[Reg], c: list[Reg]) -> None:
        """mma.sync per an MmaShape row: register counts and types are checked against it."""
        ra, rb, rc = shape.regs

        def fits(r, kind):   # A/B fragments are packed b32; C/D are the accumulator's type
            if not isinstance(r, Reg) or r.bits != 32:
                return False
            return r.type != "f32" if kind in ("b32", "s32") else r.type == kind

        for what, regs, n, kind in (("a", a, ra, "b32"), ("b", b, rb, "b32"), ("c", c, rc, shape.acc),
                                    ("d", d, rc, shape.acc)):
            if len(regs) != n or not all(fits(r, kind) for r in regs):
                raise EncodingError(f"{shape.opcode()}: operand {what} needs {n} {kind} registers, not {regs}")
        self._emit(f"{shape.opcode()} {Vec(tuple(d))}, {Vec(tuple(a))}, {Vec(tuple(b))}, {Vec(tuple(c))}", None, False)

    def bar_sync(self) -> None:
        self._emit("bar.sync 0", None, False)

    # -- output
    def text(self) -> str:
        regtype = {}
        for prefix, rt, _ in REG_CLASSES.values():
            regtype.setdefault(prefix, rt)
        decls = [f"\t.reg .{regtype[prefix]} {prefix}<{n}>;" for prefix, n in self.counts.items()]
        params = ",\n".join(f"\t.param .{t} {n}" for t, n in self.params)
        return "\n".join([
            f".version {self.version}", f".target {self.target}", ".address_size 64", "",
            *self.shared, "",
            f".visible .entry {self.name}(", params, ")",
            *([f".maxntid {self.maxntid}, 1, 1"] if self.maxntid else []), "{", *decls, *self.body, "}", ""])
