"""Reading and writing an instruction's operands as typed numpy arrays over a CTA's threads.

A register is a raw-bit array (one element per thread); `reader` returns a function giving the
operand viewed through a PTX type (a zero-copy view where the widths agree, a truncation where the
register is wider, as PTX allows for integer operands); `writer` returns a function storing a
typed value into the lanes of a mask, extending it (sign or zero, by the type) into a wider register.
"""
from __future__ import annotations

import numpy as np

from ....errors import SimulationError
from .numeric import SINT, UINT, PType, round_to
from .parse import Addr, Imm, Reg, Sink, Special, Sym, Vec


def parse_imm(instr, text: str, t: PType):
    """An immediate operand as a numpy scalar of `t`'s view.  Hex float literals (0f/0d) are
    values for float types and bit patterns for the others; integer literals are values for
    f32/f64 and bit patterns (wrapped to the width) for integers, f16, bf16 and packed types."""
    neg = text.startswith("-")
    body = text[1:] if neg else text
    lower = body.lower()
    if lower[:2] in ("0f", "0d"):
        bits = int(body[2:], 16)
        if t.kind in ("f", "bf"):
            value = np.uint32(bits).view(np.float32) if lower[1] == "f" else np.uint64(bits).view(np.float64)
            return _float_imm(-value if neg else value, t)
        if neg:
            raise SimulationError(f"{instr.where()}: a negated float literal for .{t.name}")
        return UINT[t.size].type(bits & ((1 << t.bits) - 1)).view(t.view)
    if not lower.startswith("0x") and ("." in lower or "e" in lower):
        if t.kind not in ("f", "bf"):
            raise SimulationError(f"{instr.where()}: float literal {text} for .{t.name}")
        return _float_imm(float(text), t)
    value = int(lower.rstrip("u"), 0) * (-1 if neg else 1)
    if t.kind == "pred":
        return np.bool_(value != 0)
    if t.name in ("f32", "f64"):
        return t.view.type(value)
    return UINT[t.size].type(value & ((1 << t.bits) - 1)).view(t.view)


def _float_imm(value, t: PType):
    if t.name in ("f32", "f64"):
        return t.view.type(value)
    if t.name == "f16":
        return np.float16(value)
    if t.name == "bf16":
        return np.uint16(round_to(np.array([value]), "bf16")[0])
    raise SimulationError(f"a float literal for type {t.name}")


class Operands:
    """Binds operands of a kernel to a register file, special registers and symbol addresses."""

    def __init__(self, regs: dict, reg_types: dict, specials: dict, symbols: dict):
        self.regs = regs              # unique name -> storage array
        self.reg_types = reg_types    # unique name -> PType
        self.specials = specials      # "%tid.x" -> uint32 array (updated in place per CTA)
        self.symbols = symbols        # name -> (space, address)

    def reader(self, instr, op, t: PType):
        if isinstance(op, Reg):
            store = self.regs[op.name]
            rt = self.reg_types[op.name]
            if t.kind == "pred" or rt.kind == "pred":
                if t.kind != rt.kind:
                    raise SimulationError(f"{instr.where()}: {op.name} is .{rt.name}, used as .{t.name}")
                return (lambda: ~store) if op.neg else (lambda: store)
            if rt.size == t.size:
                view = store.view(t.view)
                return lambda: view
            if rt.size > t.size and (t.is_int or t.kind in ("f", "bf")):
                narrow = UINT[t.size]
                return lambda: store.astype(narrow).view(t.view)
            raise SimulationError(f"{instr.where()}: {op.name} is .{rt.name}, too narrow for .{t.name}")
        if isinstance(op, Imm):
            value = parse_imm(instr, op.text, t)
            return lambda: value
        if isinstance(op, Special):
            arr = self.specials[op.name]
            if t.size == 4:
                view = arr.view(t.view)
                return lambda: view
            return lambda: arr.astype(t.view)
        if isinstance(op, Sym):
            space, address = self.symbol(instr, op.name)
            value = t.view.type(address) if t.is_int else None
            if value is None:
                raise SimulationError(f"{instr.where()}: the address of {op.name} read as .{t.name}")
            return lambda: value
        raise SimulationError(f"{instr.where()}: operand {op} cannot be read as .{t.name}")

    def writer(self, instr, op, t: PType):
        if isinstance(op, Sink):
            return lambda value, mask: None
        if not isinstance(op, Reg):
            raise SimulationError(f"{instr.where()}: cannot write to {op}")
        store = self.regs[op.name]
        rt = self.reg_types[op.name]
        if (t.kind == "pred") != (rt.kind == "pred"):
            raise SimulationError(f"{instr.where()}: {op.name} is .{rt.name}, written as .{t.name}")
        if rt.kind == "pred":
            return lambda value, mask: np.copyto(store, value, where=mask)
        if rt.size == t.size:
            view = store.view(t.view)
            return lambda value, mask: np.copyto(view, value, where=mask, casting="unsafe")
        if rt.size > t.size:
            wide = (SINT if t.signed else UINT)[rt.size]
            return lambda value, mask: np.copyto(
                store, np.asarray(value, dtype=t.view).astype(wide).view(store.dtype), where=mask)
        raise SimulationError(f"{instr.where()}: {op.name} is .{rt.name}, too narrow for .{t.name}")

    def address(self, instr, op):
        """`[base+offset]` -> (space of a symbol base or None, function giving uint64 addresses)."""
        if not isinstance(op, Addr):
            raise SimulationError(f"{instr.where()}: expected an address [..], found {op}")
        off = np.uint64(op.offset & (2 ** 64 - 1))
        if op.base is None:
            return None, lambda: off
        if isinstance(op.base, Sym):
            space, address = self.symbol(instr, op.base.name)
            value = np.uint64((address + op.offset) & (2 ** 64 - 1))
            return space, lambda: value
        if isinstance(op.base, Reg):
            rt = self.reg_types[op.base.name]
            if rt.size not in (4, 8) or rt.kind == "pred":
                raise SimulationError(f"{instr.where()}: address register {op.base.name} is .{rt.name}")
            store = self.regs[op.base.name]
            if rt.size == 8:
                return None, (lambda: store + off) if op.offset else (lambda: store)
            return None, lambda: store.astype(np.uint64) + off
        raise SimulationError(f"{instr.where()}: bad address base {op.base}")

    def symbol(self, instr, name):
        if name not in self.symbols:
            raise SimulationError(f"{instr.where()}: unknown symbol {name}")
        return self.symbols[name]

    def vector(self, instr, op, count=None):
        items = op.items if isinstance(op, Vec) else (op,)
        if count is not None and len(items) != count:
            raise SimulationError(f"{instr.where()}: expected {count} registers in {{..}}, found {len(items)}")
        return items

    def storage(self, instr, op, size):
        """The raw storage array of register `op`, which must be `size` bytes wide."""
        if not isinstance(op, Reg) or self.reg_types[op.name].size != size or \
                self.reg_types[op.name].kind == "pred":
            raise SimulationError(f"{instr.where()}: expected a {8 * size}-bit register, found {op}")
        return self.regs[op.name]

