"""Turns the rows of forms.py into encoders: one `Form` per (row, arrangement), found by the kinds
of the actual operands, each a 32-bit word of fixed bits plus one field placer per operand.

A placer takes the operand and returns its bits, already shifted into place; fields of different
operands never overlap, so the word is fixed ^ placer(op1) ^ placer(op2) ... The one placer that
changes a fixed bit is the unsigned-offset load/store's, which turns the form into its unscaled
twin (ldr -> ldur: bit 24 cleared) when the offset is negative or not a multiple of the size.
Every value is range-checked when it is inserted, and `EncodingError` names the instruction, the
field and its range: `ldr q0, [x1, #65536]: imm12 0..4095 x16`.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from ...errors import EncodingError
from .forms import ARRANGEMENT_BITS, CONDITIONS, READS_DESTINATION, ROWS
from .immediates import encode_bitmask, encode_fp_imm8
from .operands import PREFETCH_OPS, Element, Gpr, Label, Mem, Shift, VecReg

__all__ = ["FORMS", "Form", "encode", "find_form", "format_instruction", "operand_kind"]


class FieldError(Exception):
    """Raised by a placer; `encode` re-raises it as EncodingError with the instruction's text."""


class Inline(str):
    """A placer that is a plain expression of the operand `o` (a register's field, say): it is
    compiled into the form's encoder instead of being called, which makes encoding about
    twice as fast as calling one function per operand."""


@dataclass(eq=False)
class Form:
    mnemonic: str
    operands: str               # the row's operand text with the arrangement filled in
    fixed: int
    group: str
    feature: str
    placers: tuple
    reloc: str | None           # label fixup kind: "branch26", "branch19", "literal", "adr"
    check: object = None        # operands -> None, raising FieldError for UNPREDICTABLE register choices
    encoder: object = None      # encoder(*ops) -> the word: fixed bits ^ every placer, compiled on first use

    def __post_init__(self):
        if self.encoder is None:    # compiling all ~2000 forms at import would cost ~0.2 s
            self.encoder = self._compile_on_first_call

    def _compile_on_first_call(self, *ops) -> int:
        self.encoder = _compile(self.fixed, self.placers)
        return self.encoder(*ops)

    @property
    def reads_destination(self) -> bool:
        """The first operand is read too: an accumulator (fmla, sdot), a select (bsl, bif), or a
        register only partly written (ins, `mov v.s[i], ...`, ld1 of one lane, movk, fcvtn2)."""
        first = _split(self.operands)[0][0] if self.operands else ""
        return (self.mnemonic in READS_DESTINATION or (self.mnemonic == "mov" and first.endswith("[i]"))
                or first.startswith("{Vt.") and first.endswith("[i]") and self.mnemonic == "ld1")


# -- operand kinds ------------------------------------------------------------------------------

def operand_kind(op) -> str:
    """The kind string the table matches (see operands.py); plain Python values get theirs here."""
    kind = getattr(op, "kind", None)
    if kind is not None:
        return kind
    if isinstance(op, bool):
        raise EncodingError(f"operand {op!r}: a bool is not an immediate")
    if isinstance(op, int):
        return "imm"
    if isinstance(op, str):
        return "=" + op.lower()
    if isinstance(op, float):
        return "fimm"
    if isinstance(op, (list, tuple)) and op:
        first = op[0]
        if isinstance(first, Element):
            return "{" + first.kind + "}" + f"x{len(op)}"
        if isinstance(first, VecReg):
            return "{" + first.kind + "}" + f"x{len(op)}"
    raise EncodingError(f"operand {op!r} ({type(op).__name__}) is not an AArch64 operand")


def format_operand(op) -> str:
    if isinstance(op, bool):
        return repr(op)
    if isinstance(op, int):
        return f"#{op}"
    if isinstance(op, float):
        return f"#{op!r}"
    if isinstance(op, (list, tuple)) and op and isinstance(op[0], Element):
        e = op[0]
        size = e.kind[2:-2]
        return "{" + ", ".join(f"v{x.num}.{size}" for x in op) + "}" + f"[{e.index}]"
    if isinstance(op, (list, tuple)):
        return "{" + ", ".join(str(x) for x in op) + "}"
    if isinstance(op, Label):
        return op.name or "label"
    return str(op)


def format_instruction(mnemonic: str, ops) -> str:
    return f"{mnemonic} {', '.join(format_operand(o) for o in ops)}".rstrip()


# -- field placers ------------------------------------------------------------------------------

def _check(value: int, lo: int, hi: int, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise FieldError(f"{field} {lo}..{hi}")
    return value


def _scaled(offset: int, scale: int, lo: int, hi: int, field: str) -> int:
    if not isinstance(offset, int) or offset % scale or not lo <= offset // scale <= hi:
        raise FieldError(f"{field} {lo}..{hi} x{scale}")
    return offset // scale


_REG_SHIFT = {"d": 0, "t": 0, "n": 5, "m": 16, "a": 10, "t2": 10}


def _reg_placer(field: str, limit: int = 32):
    if field == "nm":           # `mov Vd.16b, Vn.16b` is `orr Vd.16b, Vn.16b, Vn.16b`
        return Inline("o.num * 0x10020")
    shift = _REG_SHIFT[field]
    if limit < 32:
        def place(op):
            if op.num >= limit:
                raise FieldError(f"V{field} v0..v{limit - 1} (the fp16 by-element Vm field has 4 bits)")
            return op.num << shift
        return place
    return Inline(f"o.num << {shift}") if shift else Inline("o.num")


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _element_placer(group: str, field: str, size: str, first_element: bool, limit: int):
    esize = {"b": 1, "h": 2, "s": 4, "d": 8, "4b": 4}[size]
    reg = _reg_placer(field, limit)
    if group == "asimdelem":
        if size == "h":         # index H:L:M
            index = "(o.index >> 2) << 11 | ((o.index >> 1) & 1) << 21 | (o.index & 1) << 20"
        elif size == "d":       # index H
            index = "o.index << 11"
        else:                   # index H:L
            index = "(o.index >> 1) << 11 | (o.index & 1) << 21"
    elif group == "asimdins":
        s = _log2(esize)
        if first_element:       # imm5: the index above a one-hot element size
            index = f"(o.index << {s + 1} | {1 << s}) << 16"
        else:                   # imm4 of ins (element)
            index = f"o.index << {s + 11}"
    else:
        raise AssertionError(f"element slot in group {group}")
    if isinstance(reg, Inline):
        return Inline(f"{reg} | {index}")
    index_of = eval(f"lambda o: {index}")
    return lambda o: reg(o) | index_of(o)


def _lane_list_placer(size: str):
    """{Vt.s}[i]: the index is spread over Q (30), S (12) and size (11:10)."""
    def place(ops):
        if len(ops) != 1:
            raise FieldError("one register in a single-lane list")
        e = ops[0]
        i = e.index
        if size == "b":
            bits = (i >> 3) << 30 | ((i >> 2) & 1) << 12 | (i & 3) << 10
        elif size == "h":
            bits = (i >> 2) << 30 | ((i >> 1) & 1) << 12 | (i & 1) << 11
        elif size == "s":
            bits = (i >> 1) << 30 | (i & 1) << 12
        else:
            bits = i << 30
        return bits | e.num
    return place


def _list_placer(count: int):
    def place(ops):
        first = ops[0].num
        for k, op in enumerate(ops):
            if op.num != (first + k) % 32 or op.kind != ops[0].kind:
                raise FieldError("Vt a list of consecutive registers of one arrangement")
        return first
    return place


def _mem_placer(mode: str, group: str, scale: int):
    """[Xn|SP ...] operands; `scale` is the bytes one access moves."""
    if mode == "[mem]" and group in ("ldst_pos",):
        def place(m):
            off = m.offset
            if off % scale == 0 and 0 <= off <= 4095 * scale:
                return (off // scale) << 10 | m.base.num << 5
            if -256 <= off <= 255:      # the unscaled twin (ldur/stur/prfum): clear bit 24
                return 1 << 24 | (off & 0x1FF) << 12 | m.base.num << 5
            raise FieldError(f"imm12 0..4095 x{scale} (or imm9 -256..255 unscaled)")
        return place
    if group == "ldst_imm9":
        return lambda m: (_check(m.offset, -256, 255, "imm9") & 0x1FF) << 12 | m.base.num << 5
    if group == "ldst_pair":
        return lambda m: (_scaled(m.offset, scale, -64, 63, "imm7") & 0x7F) << 15 | m.base.num << 5
    if group == "ldst_reg":
        return Inline("o.offset.num << 16 | o.base.num << 5")
    if group == "asimdldst":
        if mode == "[mem]":
            return lambda m: _check(m.offset, 0, 0, "offset") | m.base.num << 5
        if mode == "[mem],imm":
            def place(m):
                if m.offset != scale:
                    raise FieldError(f"post-index immediate {scale} (the bytes transferred; or use a register)")
                return 31 << 16 | m.base.num << 5
            return place
        def place(m):
            if m.offset.kind == "xzr":
                raise FieldError("Xm x0..x30 (xzr means the immediate form)")
            return m.offset.num << 16 | m.base.num << 5
        return place
    raise AssertionError(f"memory slot {mode} in group {group}")


def _movi_imm8(v):
    _check(v, 0, 255, "imm8")
    return (v >> 5) << 16 | (v & 31) << 5


def _bytemask(v):
    if not isinstance(v, int) or not 0 <= v < 1 << 64 or any(
            (v >> (8 * k)) & 0xFF not in (0, 0xFF) for k in range(8)):
        raise FieldError("bytemask: a 64-bit value whose bytes are each 0x00 or 0xff")
    imm8 = sum(1 << k for k in range(8) if (v >> (8 * k)) & 1)
    return (imm8 >> 5) << 16 | (imm8 & 31) << 5


def _shift_placer(group: str, bits: int, arrangement: str | None):
    if group in ("addsub_shift", "logic_shift"):
        ops = {"lsl": 0, "lsr": 1, "asr": 2} | ({"ror": 3} if group == "logic_shift" else {})
        def place(s):
            if s.op not in ops:
                raise FieldError(f"shift {'/'.join(ops)}")
            return ops[s.op] << 22 | _check(s.amount, 0, bits - 1, "imm6") << 10
        return place
    if group == "movewide":
        def place(s):
            if s.op != "lsl" or s.amount not in range(0, bits, 16):
                raise FieldError(f"hw lsl #0..{bits - 16} in steps of 16")
            return (s.amount // 16) << 21
        return place
    if group == "asimdimm":
        amounts = (0, 8) if arrangement in ("4h", "8h") else (0, 8, 16, 24)
        def place(s):
            if s.op != "lsl" or s.amount not in amounts:
                raise FieldError(f"cmode lsl #{'/'.join(map(str, amounts))}")
            return (s.amount // 8) << 13
        return place
    raise AssertionError(f"shift slot in group {group}")


def _bitmask_placer(bits: int):
    def place(v):
        fields = encode_bitmask(v, bits) if isinstance(v, int) and -(1 << (bits - 1)) <= v < 1 << bits else None
        if fields is None:
            raise FieldError(f"bitmask immediate: a rotated run of ones repeated in 2..{bits}-bit elements "
                             f"(not 0, not all ones)")
        n, immr, imms = fields
        return n << 22 | immr << 16 | imms << 10
    return place


def _fp_imm8(v) -> int:
    imm8 = encode_fp_imm8(v) if not isinstance(v, bool) else None
    if imm8 is None:
        raise FieldError("fmov immediate +-(16..31)/16 x 2^-3..2^4 (0.0: use movi #0)")
    return imm8


def _imm_placer(name: str, group: str, bits: int, arrangement: str | None, row_mnemonic: str):
    if name == "bimm":
        return _bitmask_placer(bits)
    if name == "fimm":
        if group == "fpimm":
            return lambda v: _fp_imm8(v) << 13
        def place(v):
            imm8 = _fp_imm8(v)
            return (imm8 >> 5) << 16 | (imm8 & 31) << 5
        return place
    if group == "addsub_imm":
        def place(v):
            if isinstance(v, int) and 0 <= v <= 4095:
                return v << 10
            if isinstance(v, int) and v > 0 and v % 4096 == 0 and v >> 12 <= 4095:
                return 1 << 22 | (v >> 12) << 10        # `lsl #12`
            raise FieldError("imm12 0..4095 (or 4096..16773120 in steps of 4096: lsl #12)")
        return place
    if group == "movewide" or group == "exception":
        return lambda v: _check(v, 0, 0xFFFF, "imm16") << 5
    if group == "bf_lsl":
        return lambda v: ((-_check(v, 0, bits - 1, "shift")) % bits) << 16 | (bits - 1 - v) << 10
    if group == "bf_shr":
        return lambda v: _check(v, 0, bits - 1, "shift") << 16
    if group == "asimdimm":
        return _bytemask if name == "bytemask" else _movi_imm8
    esize = {"8b": 8, "16b": 8, "4h": 16, "8h": 16, "2s": 32, "4s": 32, "2d": 64}.get(arrangement, 0)
    if name == "index":
        nbytes = 16 if arrangement == "16b" else 8
        return lambda v: _check(v, 0, nbytes - 1, "imm4") << 11
    if name == "rshift":
        return lambda v: (2 * esize - _check(v, 1, esize, "shift")) << 16
    if name == "lshift":
        return lambda v: (esize + _check(v, 0, esize - 1, "shift")) << 16
    if name == "0.0":
        def place(v):
            if v != 0:
                raise FieldError("#0.0 (compare with zero)")
            return 0
        return place
    raise AssertionError(f"immediate #{name} in group {group} ({row_mnemonic})")


_zero = Inline("0")


def _compile(fixed: int, placers) -> object:
    """encoder(*ops) -> fixed ^ placer(op) ..., with Inline placers written into its source."""
    args = ", ".join(f"o{i}" for i in range(len(placers))) or ""
    terms, env = [f"{fixed:#x}"], {}
    for i, place in enumerate(placers):
        if isinstance(place, Inline):
            if place != "0":
                terms.append("(" + re.sub(r"\bo\b", f"o{i}", place) + ")")
        else:
            env[f"p{i}"] = place
            terms.append(f"p{i}(o{i})")
    exec(f"def encoder({args}):\n    return {' ^ '.join(terms)}\n", env)
    return env["encoder"]


# -- parsing rows -------------------------------------------------------------------------------

_GPR = re.compile(r"^([XW])(d|n|m|a|t2|t)(\|W?SP)?$")
_SCALAR = re.compile(r"^([QDSHB])(d|n|m|t2|t)$")
_VREG = re.compile(r"^V(d|n|m|t|nm)(16)?\.(\w+)$")
_ELEM = re.compile(r"^V(d|n|m)(16)?\.(4b|b|h|s|d)\[i\]$")
_LIST = re.compile(r"^\{([^}]*)\}(\[i\])?$")


def _split(operands: str) -> list[tuple[str, bool]]:
    """Operand text -> [(slot text, optional)]; `[Xn|SP], #simm` stays one slot (post-index)."""
    if not operands:
        return []
    optional = None
    m = re.search(r"\{, ([^}]*)\}$", operands)
    if m and not operands.startswith("{"):
        optional = m.group(1)
        operands = operands[:m.start()]
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in operands:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            if cur.strip().endswith("]") and cur.strip().startswith("["):
                cur += ch
                continue
            parts.append(cur.strip())
            cur = ""
            continue
        cur += ch
    parts.append(cur.strip())
    slots = [(p, False) for p in parts]
    if optional:
        slots.append((optional, True))
    return slots


def _access_bytes(slots: list[str], mnemonic: str = "") -> int:
    """The bytes one load/store moves, from its first register slot (prfm: 8; ldrb/ldrh: 1/2)."""
    if mnemonic[-1:] in ("b", "h") and mnemonic[:3] in ("ldr", "str"):
        return 1 if mnemonic.endswith("b") else 2
    first = slots[0]
    if first.startswith("X"):
        return 8
    if first.startswith("W"):
        return 4
    return {"Q": 16, "D": 8, "S": 4, "H": 2, "B": 1}.get(first[0], 8)


def _expand(row) -> list[tuple[Form, list[frozenset[str]]]]:
    mnemonic, operand_text, fixed_text, group, arrangements, feature = row
    if arrangements:
        scheme, *legal = arrangements.split()
        variants = [(a, ARRANGEMENT_BITS[scheme][a]) for a in legal]
    else:
        variants = [(None, 0)]
    out = []
    for arrangement, arr_bits in variants:
        text = operand_text.replace(".T", f".{arrangement}") if arrangement else operand_text
        slots = _split(text)
        slot_texts = [s for s, _ in slots]
        placers, kind_sets = [], []
        reloc = None
        element_seen = False
        bits = 32 if slot_texts and slot_texts[0][:1] == "W" else 64
        first_arr = re.match(r"V\w+\.(\w+)", text)    # rows with a literal arrangement
        arr = arrangement or (first_arr.group(1) if first_arr else None)
        for slot, _optional in slots:
            kinds, placer = _slot(slot, group, mnemonic, bits, arr, slot_texts, element_seen)
            if _ELEM.match(slot):
                element_seen = True
            if slot == "label":
                reloc = group
            placers.append(placer)
            kind_sets.append(kinds)
        fixed = int(fixed_text, 16) | arr_bits
        check = _constraint(mnemonic, group, slot_texts)
        optional_count = sum(1 for _, opt in slots if opt)
        for drop in range(optional_count + 1):
            n = len(slots) - drop
            shortened = Form(mnemonic, text, fixed, group, feature, tuple(placers[:n]), reloc, check)
            out.append((shortened, kind_sets[:n]))
    return out


def _constraint(mnemonic: str, group: str, slot_texts: list[str]):
    """The register choices the Arm ARM makes CONSTRAINED UNPREDICTABLE for loads and stores:
    ldp with Rt == Rt2, and GPR writeback (pre/post-index) whose base is also a transfer register."""
    if group not in ("ldst_pair", "ldst_imm9"):
        return None
    is_pair_load = mnemonic == "ldp"
    gprs = [i for i, s in enumerate(slot_texts) if _GPR.match(s)]
    writeback = bool(gprs) and any(s.endswith("]!") or "], #" in s for s in slot_texts)
    if not (is_pair_load or writeback):
        return None
    mem_index = next(i for i, s in enumerate(slot_texts) if s.startswith("["))

    def check(ops):
        if is_pair_load and ops[0].num == ops[1].num:
            raise FieldError("Rt2 != Rt (ldp of one register twice is UNPREDICTABLE)")
        if writeback:
            base = ops[mem_index].base
            if base.kind == "x" and any(ops[i].num == base.num for i in gprs):
                raise FieldError("Rn != Rt (writeback to a transfer register is UNPREDICTABLE)")
    return check


def _slot(slot: str, group: str, mnemonic: str, bits: int, arrangement, slot_texts, element_seen):
    """(accepted kinds, placer) of one operand slot."""
    if m := _GPR.match(slot):
        width, field, sp = m.groups()
        base = "x" if width == "X" else "w"
        other = {"X": "sp", "W": "wsp"}[width] if sp else base + "zr"
        return frozenset({base, other}), _reg_placer(field)
    if m := _SCALAR.match(slot):
        return frozenset({m.group(1).lower()}), _reg_placer(m.group(2))
    if m := _ELEM.match(slot):
        field, narrow, size = m.groups()
        placer = _element_placer(group, field, size, not element_seen, 16 if narrow else 32)
        return frozenset({f"v.{size}[]"}), placer
    if m := _VREG.match(slot):
        field, narrow, arr = m.groups()
        return frozenset({f"v.{arr}"}), _reg_placer(field, 16 if narrow else 32)
    if m := _LIST.match(slot):
        items = [s.strip() for s in m.group(1).split(",")]
        if m.group(2):          # {Vt.s}[i]
            size = items[0].split(".")[1]
            return frozenset({"{v." + size + "[]}x1"}), _lane_list_placer(size)
        arr = items[0].split(".")[1]
        return frozenset({"{v." + arr + "}" + f"x{len(items)}"}), _list_placer(len(items))
    if slot.startswith("["):
        if slot.endswith("]!"):
            mode = "[mem]!"
        elif "], #" in slot:
            mode = "[mem],imm"
        elif "], X" in slot:
            mode = "[mem],reg"
        elif ", Xm]" in slot:
            mode = "[mem,reg]"
        else:
            mode = "[mem]"
        scale = _access_bytes(slot_texts, mnemonic)
        if group == "asimdldst":
            scale = _transfer_bytes(slot_texts[0], arrangement)
        return frozenset({mode}), _mem_placer(mode, group, scale)
    if slot.startswith("#"):
        name = slot[1:]
        kinds = frozenset({"imm", "fimm"}) if name in ("0.0", "fimm") else frozenset({"imm"})
        return kinds, _imm_placer(name, group, bits, arrangement, mnemonic)
    if slot == "label":
        return frozenset({"label"}), _zero
    if slot == "shift":
        return frozenset({"shift"}), _shift_placer(group, bits, arrangement)
    if slot == "cond":
        if group == "cset":     # cset is csinc with the inverted condition; al/nv have no inverse
            return (frozenset("=" + c for c in CONDITIONS if c != "al"),
                    lambda c: (CONDITIONS[c.lower()] ^ 1) << 12)
        return frozenset("=" + c for c in CONDITIONS), lambda c: CONDITIONS[c.lower()] << 12
    if slot == "prfop":
        return frozenset("=" + p for p in PREFETCH_OPS), lambda p: PREFETCH_OPS[p.lower()]
    if re.fullmatch(r"[a-z_0-9]+", slot):
        return frozenset({"=" + slot}), _zero
    raise AssertionError(f"unknown operand slot {slot!r} in {mnemonic}")


def _transfer_bytes(list_slot: str, arrangement) -> int:
    """Bytes moved by ld1/st1/ld1r: the post-index immediate must equal it."""
    m = _LIST.match(list_slot)
    items = m.group(1).split(",")
    if m.group(2):                                  # one lane
        return {"b": 1, "h": 2, "s": 4, "d": 8}[items[0].split(".")[1]]
    reg_bytes = 16 if arrangement in ("16b", "8h", "4s", "2d") else 8
    return reg_bytes * len(items)                   # (ld1r: corrected by _ld1r_form)


def _build() -> dict[tuple, Form]:
    table: dict[tuple, Form] = {}
    for row in ROWS:
        for form, kind_sets in _expand(row):
            if row[0] == "ld1r":     # ld1r moves one element, whatever the register list holds
                form = _ld1r_form(form, kind_sets)
            for kinds in itertools.product(*kind_sets):
                table.setdefault((row[0], kinds), form)
    return table


def _ld1r_form(form: Form, kind_sets) -> Form:
    arrangement = next(iter(kind_sets[0]))[3:-3]    # "{v.4s}x1" -> "4s"
    esize = {"b": 1, "h": 2, "s": 4, "d": 8}[arrangement[-1]]
    if len(kind_sets) > 1 and "[mem],imm" in kind_sets[1]:
        placers = (form.placers[0], _mem_placer("[mem],imm", "asimdldst", esize))
        return Form(form.mnemonic, form.operands, form.fixed, form.group, form.feature, placers, form.reloc)
    return form


FORMS: dict[tuple, Form] = _build()
MNEMONICS = frozenset(m for m, _ in FORMS)


def find_form(mnemonic: str, ops) -> Form:
    kinds = tuple(operand_kind(o) for o in ops)
    form = FORMS.get((mnemonic, kinds))
    if form is None:
        raise _no_form(mnemonic, ops, kinds)
    return form


def _no_form(mnemonic: str, ops, kinds) -> EncodingError:
    text = format_instruction(mnemonic, ops)
    if mnemonic not in MNEMONICS:
        return EncodingError(f"{text}: unknown AArch64 mnemonic {mnemonic!r}")
    known = sorted({f.operands for (m, _), f in FORMS.items() if m == mnemonic})
    shown = "; ".join(known[:12]) + (" ..." if len(known) > 12 else "")
    return EncodingError(f"{text}: no form of {mnemonic} takes ({', '.join(kinds)}); forms: {shown}")


def encode(mnemonic: str, ops) -> tuple[int, Form]:
    """(32-bit instruction word, its Form). Label operands leave their field zero (see Form.reloc)."""
    form = FORMS.get((mnemonic, tuple([getattr(o, "kind", None) or operand_kind(o) for o in ops])))
    if form is None:
        raise _no_form(mnemonic, ops, tuple(map(operand_kind, ops)))
    try:
        if form.check is not None:
            form.check(ops)
        word = form.encoder(*ops)
    except FieldError as exc:
        raise EncodingError(f"{format_instruction(mnemonic, ops)}: {exc}") from None
    return word, form
