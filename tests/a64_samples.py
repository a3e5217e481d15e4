"""Operand instances for every form of the AArch64 table, drawn from a random.Random.

Used by the encoding tests: one llvm-mc run over all of them, and hypothesis draws decoded by capstone.
"""
from __future__ import annotations

import random

from loopstack.errors import EncodingError
from loopstack.isa.aarch64.encode import FORMS, encode, format_instruction
from loopstack.isa.aarch64.operands import (
    LSL, LSR, ASR, PREFETCH_OPS, SP, WSP, WZR, XZR, Label, Mem, V, W, X)
from loopstack.isa.aarch64.forms import CONDITIONS

_ESIZE = {"b": 1, "h": 2, "s": 4, "d": 8, "4b": 4}


def _gpr(kind, rng):
    n = rng.randrange(31)
    return {"x": lambda: X(n), "w": lambda: W(n), "xzr": lambda: XZR, "wzr": lambda: WZR,
            "sp": lambda: SP, "wsp": lambda: WSP}[kind]()


def _vec(kind, rng, limit=32):
    n = rng.randrange(limit)
    if kind.startswith("v."):
        arr = kind[2:]
        attr = {"8b": "b8", "16b": "b16", "4h": "h4", "8h": "h8", "2s": "s2", "4s": "s4",
                "1d": "d1", "2d": "d2"}[arr]
        return getattr(V(n), attr)
    reg = getattr(V(n), kind)
    return reg


def _element(kind, rng, limit=32):
    size = kind[2:-2]
    n = rng.randrange(limit)
    lanes = 16 // _ESIZE[size]
    view = V(n).b4 if size == "4b" else getattr(V(n), size)
    return view[rng.randrange(lanes)]


def _imm(form, slot_index, rng):
    """An in-range immediate for the slot: the form's operand text says which field."""
    slot = _slots(form)[slot_index]
    g = form.group
    bits = 32 if form.operands.startswith("W") else 64
    if g == "addsub_imm":
        return rng.choice([rng.randrange(4096), rng.randrange(1, 4096) << 12])
    if g in ("movewide", "exception"):
        return rng.randrange(1 << 16)
    if g in ("bf_lsl", "bf_shr"):
        return rng.randrange(bits)
    if slot == "#bimm":
        from loopstack.isa.aarch64.immediates import decode_bitmask
        for _ in range(100):
            try:
                n = rng.randrange(2) if bits == 64 else 0
                return decode_bitmask(n, rng.randrange(bits), rng.randrange(64), bits)
            except EncodingError:
                continue
        # an ExtremeRandom draws the same fields every time: the extremes that do encode
        return (0xFFFFFFFFFFFFFFFE & ((1 << bits) - 1)) if isinstance(rng, ExtremeRandom) and rng.largest else 1
    if slot == "#fimm":
        from loopstack.isa.aarch64.immediates import fp_imm8_value
        return fp_imm8_value(rng.randrange(256))
    if slot == "#bytemask":
        return sum(0xFF << (8 * k) for k in range(8) if rng.random() < 0.5)
    if slot == "#imm8":
        return rng.randrange(256)
    arr = form.operands.split(",")[0].split(".")[-1]
    esize = {"8b": 8, "16b": 8, "4h": 16, "8h": 16, "2s": 32, "4s": 32, "2d": 64}.get(arr, 8)
    if slot == "#index":
        return rng.randrange(16 if arr == "16b" else 8)
    if slot == "#rshift":
        return rng.randint(1, esize)
    if slot == "#lshift":
        return rng.randrange(esize)
    if slot == "#0.0":
        return 0
    if slot == "#imm":          # ld1/ld1r/st1 post-index by the transfer size: filled by _mem
        return None
    raise AssertionError(slot)


def _slots(form):
    from loopstack.isa.aarch64.encode import _split
    return [s for s, _ in _split(form.operands)]


def _mem(kind, form, slot_text, rng, ops_so_far):
    base = SP if rng.random() < 0.1 else X(rng.randrange(31))
    g = form.group
    from loopstack.isa.aarch64.encode import _access_bytes
    scale = _access_bytes(_slots(form), form.mnemonic)
    if kind == "[mem,reg]":
        return Mem(base, X(rng.randrange(31)))
    if kind == "[mem],reg":
        return Mem.post(base, X(rng.randrange(31)))
    if g == "asimdldst":
        if kind == "[mem]":
            return Mem(base)
        lst = ops_so_far[0]
        first = lst[0]
        if form.mnemonic == "ld1r" or hasattr(first, "index"):
            nbytes = first.esize
        else:
            nbytes = (16 if first.kind in ("v.16b", "v.8h", "v.4s", "v.2d") else 8) * len(lst)
        return Mem.post(base, nbytes)
    if g == "ldst_pos":
        off = rng.choice([rng.randrange(4096) * scale, rng.randrange(-256, 256)])
        return Mem(base, off)
    if g == "ldst_imm9":
        off = rng.randrange(-256, 256)
        return {"[mem]": Mem, "[mem]!": Mem.pre, "[mem],imm": Mem.post}[kind](base, off)
    if g == "ldst_pair":
        off = rng.randrange(-64, 64) * scale
        return {"[mem]": Mem, "[mem]!": Mem.pre, "[mem],imm": Mem.post}[kind](base, off)
    raise AssertionError((kind, g))


def _shift(form, rng):
    bits = 32 if form.operands.startswith("W") else 64
    g = form.group
    if g == "movewide":
        return LSL(rng.randrange(0, bits, 16))
    if g == "asimdimm":
        arr = form.operands.split(",")[0].split(".")[-1]
        return LSL(rng.choice((0, 8) if arr in ("4h", "8h") else (0, 8, 16, 24)))
    op = rng.choice([LSL, LSR, ASR])
    return op(rng.randrange(bits))


def sample(mnemonic, kinds, form, rng, label=None):
    """One operand tuple for the form keyed (mnemonic, kinds)."""
    ops = []
    slots = _slots(form)
    for i, kind in enumerate(kinds):
        slot = slots[i] if i < len(slots) else ""
        limit = 16 if "16." in slot else 32
        if kind in ("x", "w", "xzr", "wzr", "sp", "wsp"):
            ops.append(_gpr(kind, rng))
        elif kind in ("q", "d", "s", "h", "b") or (kind.startswith("v.") and not kind.endswith("[]")):
            op = _vec(kind, rng)
            if slot.startswith("Vnm"):
                op = _vec(kind, rng)
            ops.append(op)
        elif kind.startswith("v.") and kind.endswith("[]"):
            ops.append(_element(kind, rng, limit))
        elif kind.startswith("{"):
            inner, count = kind[1:].split("}x")
            count = int(count)
            if inner.endswith("[]"):
                ops.append([_element(inner, rng)])
            else:
                first = rng.randrange(32)
                ops.append([_vec(inner, rng) for _ in range(count)])
                ops[-1] = [type(ops[-1][0])((first + k) % 32, inner, "", 0, 0) for k in range(count)]
                ops[-1] = [_vec_num(inner, (first + k) % 32) for k in range(count)]
        elif kind.startswith("[mem"):
            ops.append(_mem(kind, form, slot, rng, ops))
        elif kind == "fimm":
            ops.append(0.0 if slot == "#0.0" else float(_imm(form, i, rng)))
        elif kind == "imm" and slot == "#fimm":        # an int that is an fmov immediate: 1, 2, ... 31
            from loopstack.isa.aarch64.immediates import fp_imm8_value
            ops.append(rng.choice([int(v) for v in map(fp_imm8_value, range(256)) if v == int(v)]))
        elif kind == "imm":
            ops.append(_imm(form, i, rng))
        elif kind == "shift":
            ops.append(_shift(form, rng))
        elif kind == "label":
            ops.append(label)
        elif kind.startswith("="):
            ops.append(kind[1:])
        else:
            raise AssertionError(kind)
    return tuple(ops)


def _vec_num(kind, n):
    attr = {"8b": "b8", "16b": "b16", "4h": "h4", "8h": "h8", "2s": "s2", "4s": "s4",
            "1d": "d1", "2d": "d2"}[kind[2:]]
    return getattr(V(n), attr)


def all_samples(rng, per_form=1, label=None):
    """[(mnemonic, ops)] with `per_form` instances of every table key."""
    out = []
    for (mnemonic, kinds), form in FORMS.items():
        for _ in range(per_form):
            for _attempt in range(50):      # redraw UNPREDICTABLE register choices (ldp x1, x1, ...)
                ops = sample(mnemonic, kinds, form, rng, label)
                try:
                    encode(mnemonic, ops)
                except EncodingError:
                    continue
                out.append((mnemonic, ops))
                break
    return out


class ExtremeRandom:
    """A stand-in for random.Random whose every draw is the largest (or the smallest) value:
    registers 30/31 (or 0), immediates at the ends of their fields, the last (or first) choice."""

    def __init__(self, largest: bool):
        self.largest = largest

    def randrange(self, start, stop=None, step=1):
        if stop is None:
            start, stop = 0, start
        return (stop - 1 - (stop - 1 - start) % step) if self.largest else start

    def randint(self, a, b):
        return b if self.largest else a

    def choice(self, seq):
        return seq[-1] if self.largest else seq[0]

    def random(self):
        return 0.999 if self.largest else 0.0


def extreme_samples(label=None):
    """[(mnemonic, ops)]: every form with its largest and with its smallest draws (those that encode)."""
    out = []
    for (mnemonic, kinds), form in FORMS.items():
        for largest in (True, False):
            ops = sample(mnemonic, kinds, form, ExtremeRandom(largest), label)
            try:
                encode(mnemonic, ops)
            except EncodingError:           # e.g. ldp x30, x30: the same register twice
                continue
            out.append((mnemonic, ops))
    return out


def llvm_text(mnemonic, ops) -> str:
    """The instruction as LLVM's assembler spells it (it has no prfm alias for prfum)."""
    word, form = encode(mnemonic, ops)
    if mnemonic == "prfm" and not word >> 24 & 1:
        mnemonic = "prfum"
    return format_instruction(mnemonic, ops)
