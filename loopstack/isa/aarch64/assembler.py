"""The AArch64 assembler: instructions in, machine code bytes out, with labels and a literal pool.

    asm = Assembler()
    asm.fmla(V(0).s4, V(1).s4, V(2).s[1])          # or asm.emit("fmla", ...)
    top = asm.label("loop"); asm.bind(top)
    asm.subs(X(3), X(3), 1); asm.emit("b.ne", top)  # or asm.b_ne(top)
    pool = asm.const(np.array([1, 2, 3, 4], np.float32)); asm.ldr(V(0).q, pool)
    code = asm.bytes(); print(asm.listing())

Every instruction is one 32-bit word, so a label is a word index and a branch is patched in
place once its label is bound (`bytes()` checks every label is bound and every offset fits).
The literal pool follows the code, 16-byte aligned; pc-relative literal loads (ldr Qt, label)
reach +-1 MiB, so the pool serves kernels of up to 256 Ki instructions.
"""
from __future__ import annotations

import sys
from array import array

import numpy as np

from ...errors import EncodingError
from .encode import MNEMONICS, encode, format_instruction
from .immediates import move_wide_sequence
from .operands import Gpr, Label

__all__ = ["Assembler"]

# (mnemonic, operands) -> word, shared by every Assembler of the process; bounded, as the keys
# keep their operands (and so their interned Mems) alive
_KEPT: dict[tuple, int] = {}
_KEPT_GET = _KEPT.get
_KEPT_LIMIT = 1 << 16
_NOP = 0xD503201F
_BRK = 0xD4200000          # brk #0: padding never executes quietly

# fixup kind -> (bit offset, width, what the field counts)
_RELOCS = {
    "branch26": (0, 26),
    "branch19": (5, 19),
    "literal": (5, 19),
}


class Assembler:
    """Collects instruction words; `bytes()` resolves labels and appends the literal pool."""

    def __init__(self) -> None:
        self._words: list[int] = []
        self._fixups: list[tuple[int, Label, str, str]] = []     # (word index, label, reloc, text)
        self._pool: list[tuple[Label, bytes, int]] = []          # (label, data, alignment)
        self._pool_keys: dict[tuple, Label] = {}
        self._labels: list[Label] = []

    # -- emitting -----------------------------------------------------------------------------
    def emit(self, mnemonic: str, *ops) -> None:
        """Append one instruction, chosen from the table by the kinds of `ops`."""
        # Kept instructions: operands are interned (operands.py), so (mnemonic, ops) names the
        # instruction and its word is looked up, not encoded again. A list operand (ld1/st1)
        # is unhashable: TypeError, then the encoder.
        try:
            word = _KEPT_GET((mnemonic, ops))
        except TypeError:
            word = None
        if word is None:
            word = self._encode(mnemonic, ops)
            if word is None:
                return
        self._words.append(word)

    def _encode(self, mnemonic: str, ops: tuple) -> int | None:
        """The word of an instruction not kept; a branch is recorded as a fixup (returns None)."""
        word, form = encode(mnemonic, ops)
        if form.reloc is not None:
            label = next(o for o in ops if isinstance(o, Label))
            self._fixups.append((len(self._words), label, form.reloc, format_instruction(mnemonic, ops)))
            self._words.append(word)
            return None
        if len(_KEPT) >= _KEPT_LIMIT:
            _KEPT.clear()
        # True == 1 and 0.0 == 0 hash alike: an instruction with the int 0 or 1, or with a float,
        # is not kept, so that a bool is always rejected. (An integral float such as 2.0 may still
        # find a kept int 2: the same value, encoded the same.)
        if not any(type(o) is float or (type(o) is int and 0 <= o <= 1) for o in ops):
            try:
                _KEPT[(mnemonic, ops)] = word
            except TypeError:           # a register list
                pass
        return word

    def word(self, value: int) -> None:
        """Append a raw 32-bit word (data inside the code, or an instruction not in the table)."""
        if not isinstance(value, int) or not 0 <= value < 1 << 32:
            raise EncodingError(f".word {value!r}: a 32-bit unsigned value")
        self._words.append(value)


    def mov_imm(self, reg: Gpr, value: int) -> None:
        """reg = value by the shortest movz/movn + movk sequence (1 to 4 instructions)."""
        if not isinstance(reg, Gpr) or reg.kind not in ("x", "w"):
            raise EncodingError(f"mov_imm {reg!r}: the destination must be an X or W register")
        for mnemonic, imm16, shift in move_wide_sequence(value, reg.bits):
            if shift:
                from .operands import LSL
                self.emit(mnemonic, reg, imm16, LSL(shift))
            else:
                self.emit(mnemonic, reg, imm16)

    def align(self, boundary: int = 16) -> None:
        """Pad with nops to a multiple of `boundary` bytes (loop heads)."""
        if boundary % 4 or boundary & (boundary - 1):
            raise EncodingError(f"align {boundary}: a power of two, at least 4")
        while (len(self._words) * 4) % boundary:
            self._words.append(_NOP)

    def __len__(self) -> int:
        """Instruction words emitted so far (the literal pool not counted)."""
        return len(self._words)

    # -- labels and constants -----------------------------------------------------------------
    def label(self, name: str = "") -> Label:
        lbl = Label(name or f"L{len(self._labels)}")
        self._labels.append(lbl)
        return lbl

    def bind(self, label: Label) -> None:
        """Place `label` at the next instruction."""
        if not isinstance(label, Label):
            raise EncodingError(f"bind {label!r}: not a Label")
        if label.position is not None:
            raise EncodingError(f"label {label.name} is already bound")
        label.position = len(self._words) * 4

    def const(self, data, align: int = 16) -> Label:
        """A literal-pool entry holding `data` (a numpy array or bytes); identical data is shared."""
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        if not raw:
            raise EncodingError("const: empty data")
        key = (raw, align)
        if key not in self._pool_keys:
            lbl = Label(f"const{len(self._pool)}")
            self._pool.append((lbl, raw, align))
            self._pool_keys[key] = lbl
        return self._pool_keys[key]

    # -- output -------------------------------------------------------------------------------
    def _layout_pool(self) -> bytearray:
        pool = bytearray()
        code_bytes = len(self._words) * 4
        for lbl, raw, align in self._pool:
            pad = (-(code_bytes + len(pool))) % max(align, 4)
            pool += b"\0" * pad
            lbl.position = code_bytes + len(pool)
            pool += raw
        return pool

    def _resolved_words(self) -> list[int]:
        words = list(self._words)
        for index, label, reloc, text in self._fixups:
            if label.position is None:
                raise EncodingError(f"{text}: label {label.name} is never bound")
            delta = label.position - index * 4
            if reloc == "adr":
                if not -(1 << 20) <= delta < 1 << 20:
                    raise EncodingError(f"{text}: adr reaches +-1 MiB, the label is {delta} bytes away")
                words[index] |= (delta & 3) << 29 | ((delta >> 2) & 0x7FFFF) << 5
                continue
            shift, width = _RELOCS[reloc]
            if delta % 4:
                raise EncodingError(f"{text}: target {delta} bytes away is not 4-byte aligned")
            if not -(1 << (width - 1)) <= delta >> 2 < 1 << (width - 1):
                raise EncodingError(f"{text}: imm{width} reaches +-{1 << (width + 1)} bytes, "
                                    f"the label is {delta} bytes away")
            words[index] |= ((delta >> 2) & ((1 << width) - 1)) << shift
        return words

    def bytes(self) -> bytes:
        """The machine code followed by the literal pool."""
        pool = self._layout_pool()
        words = array("I", self._resolved_words())
        if sys.byteorder != "little":
            words.byteswap()
        return words.tobytes() + bytes(pool)

    def listing(self) -> str:
        """Offset, bytes and capstone's disassembly, one instruction a line, under the names of
        the labels bound there; then the pool."""
        from capstone import CS_ARCH_ARM64, CS_MODE_ARM, Cs
        code = self.bytes()
        n = len(self._words) * 4
        md = Cs(CS_ARCH_ARM64, CS_MODE_ARM)
        lines = []
        decoded = 0
        names: dict[int, list[str]] = {}
        for lbl in self._labels:
            if lbl.position is not None:
                names.setdefault(lbl.position, []).append(lbl.name)
        for insn in md.disasm(code[:n], 0):
            lines += [f"{name}:" for name in names.get(insn.address, ())]
            lines.append(f"{insn.address:6x}:  {insn.bytes.hex(' ')}  {insn.mnemonic} {insn.op_str}".rstrip())
            decoded += insn.size
        if decoded != n:      # capstone stops at the first word it cannot decode
            lines.append(f"{decoded:6x}:  (capstone cannot decode the rest: {n - decoded} bytes)")
        for lbl, raw, _ in self._pool:
            lines.append(f"{lbl.position:6x}:  {lbl.name}: .byte {raw[:16].hex(' ')}{' ...' if len(raw) > 16 else ''}")
        return "\n".join(lines)


def _mnemonic_method(mnemonic: str):
    def method(self, *ops) -> None:
        self.emit(mnemonic, *ops)
    method.__name__ = mnemonic.replace(".", "_")
    method.__doc__ = f"emit('{mnemonic}', *ops)"
    return method


# asm.fmla(...) is asm.emit("fmla", ...); asm.b_ne(lbl) is asm.emit("b.ne", lbl)
for _mnemonic in sorted(MNEMONICS):
    if not hasattr(Assembler, _mnemonic.replace(".", "_")):
        setattr(Assembler, _mnemonic.replace(".", "_"), _mnemonic_method(_mnemonic))
