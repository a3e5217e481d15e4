"""The x86-64 assembler: form choice, labels with branch relaxation, a constant pool, a listing.

    asm = Assembler()
    top = asm.label("loop"); asm.bind(top)
    asm.vfmadd231ps(ymm0, ymm1, Mem(rdi, rax, 4, 32))
    asm.emit("add", rax, 8); asm.emit("cmp", rax, rdx); asm.emit("jne", top)
    code = asm.bytes()

`emit` computes one operand kind per operand, looks up (mnemonic, kinds...) in a dict built
at import from the form table, and runs the form's encoder. An instruction it has encoded
before (the same interned register objects, e.g. ymm3 or YMM[3] rather than a new
Vec(3, 256); for memory the same fields, displacement included) is taken from what it kept
instead, and one whose memory operand differs only in its displacement from its memory
template: see "Kept instructions".

Branches to labels get no bytes there: they are recorded at their position and laid out in
`bytes()`, first all short (rel8), then lengthening any that do not reach until nothing
changes (sizes only grow, so this converges; the number of passes is capped and the last two
layouts are checked to agree, style §8). Rip-relative operands with a label (the constant
pool) get their disp32 patched after layout.
"""
from __future__ import annotations

import functools
import itertools
import operator
import struct

from ...errors import EncodingError
from .encode import compile_form, finish_mem
from .forms import ALIASES, MNEMONICS, forms_of, signatures_of
from .operands import (GPR8, GPR32, GPR64, K, NOT_TEMPLATED, RIP, TMM, XMM, YMM, ZMM, Gpr, Label,
                       MaskReg, Mem, Tmm, Vec)


def _table_entry(key: tuple, f) -> tuple:
    """(encoder, form, heads, r/m index) for one lookup key; the encoder is None for a branch.

    The key's kind for the r/m operand says whether it is memory ("m...", "b..."), so the
    encoder specialised for a register or a memory r/m is chosen here, once, not per call.
    """
    if f.rel:
        return None, f, None, -1
    reg, mem, heads, rm = compile_form(f)
    return (mem if rm >= 0 and key[1 + rm][0] in "mb" else reg), f, heads, rm


# (mnemonic, kinds...) -> (encoder, form, heads, r/m index): one dict lookup per instruction.
# A mnemonic's entries are added the first time it is encoded (forms.py builds its signatures
# then too), so a process pays only for the instructions it uses.
_TABLE: dict[tuple, tuple] = {}
_TABLE_MNEMONICS: set[str] = set()      # mnemonics whose entries are in _TABLE
_LABEL_BRANCHES: set[str] = set()       # mnemonics found to branch to a label operand (see _encode)


def _table_get(key: tuple):
    entry = _TABLE.get(key)
    if entry is None and key[0] not in _TABLE_MNEMONICS:
        mnemonic = key[0]
        for kinds, f in signatures_of(mnemonic).items():
            _TABLE[(mnemonic,) + kinds] = _table_entry((mnemonic,) + kinds, f)
        _TABLE_MNEMONICS.add(mnemonic)
        entry = _TABLE.get(key)
    return entry

# Kept instructions. A code generator emits the same instructions over and over (the same
# accumulators, the same base and index registers, often the same displacements), and an
# instruction's bytes are a function of its mnemonic and its operands' values. So each
# instruction encoded is kept, as the (bytes, (mnemonic, *operands)) pair the assembler
# records, under a key of small ints: the mnemonic; per operand its template code (operands.py:
# each interned register rax, ymm3, k1, ... has its own, other register objects None), its
# template shape for a Mem, or its value for an immediate; and last a Mem's displacement.
# `emit` then finds it with one dict lookup and records it with one append. One table per key
# layout, so that an immediate is never taken for a code:
#   _KEPT      (mnemonic, code(op0), ...)                     0-3 registers
#   _KEPT_IMM  (mnemonic, code(op0), ..., imm)                1-2 registers and an int
#   _KEPT_MEM  (mnemonic, code or shape(op0), ..., disp)      1-2 registers and a Mem, first or last
# An instruction with a Mem whose displacement is new is made from its memory template, kept
# in _HEADS under its _KEPT_MEM key without the displacement: the bytes up to the
# displacement per ModRM.mod (from `compile_form`), which `finish_mem` completes. Everything
# else (labels, rip-relative memory, masked registers, registers that are not the interned
# objects, 4 operands, a Mem alone or with an immediate) is encoded every time: no key holding
# None or NOT_TEMPLATED is kept, so none matches. The tables are shared by all assemblers and bounded
# (cleared when full). Same bytes and same errors either way: what is kept is only the output
# of the encoders, split where the displacement goes.
_KEPT: dict[tuple, tuple] = {}
_KEPT_IMM: dict[tuple, tuple] = {}
_KEPT_MEM: dict[tuple, tuple] = {}
_HEADS: dict[tuple, tuple] = {}
_TEMPLATE_LIMIT = 1 << 16
_code_of = operator.itemgetter(0)       # (bytes, instruction) -> bytes


def _remember(table: dict, key: tuple, value) -> None:
    if len(table) >= _TEMPLATE_LIMIT:
        table.clear()
    table[key] = value


@functools.lru_cache(maxsize=None)
def _branch_forms(mnemonic: str) -> tuple | None:
    """(rel8 form or None, rel32 form) of a branch mnemonic (or an alias of one); None otherwise."""
    rows = [g for g in forms_of(ALIASES.get(mnemonic, mnemonic)) if g.openc == "D"]
    if not rows:
        return None
    return next((g for g in rows if g.rel == 1), None), next(g for g in rows if g.rel == 4)

_GPR_KIND = {64: "r64", 32: "r32", 16: "r16", 8: "r8"}
_VEC_KIND = {128: "x", 256: "y", 512: "z"}
_VEC_HIGH = {128: "xh", 256: "yh", 512: "zh"}
_VEC_MASKED = {128: "xk", 256: "yk", 512: "zk"}
_MEM_KIND = {None: "m", **{b: f"m{b}" for b in (8, 16, 32, 64, 128, 256, 512)}}
_MEM_MASKED = {b: k + "k" for b, k in _MEM_KIND.items()}
_BCST_KIND = {16: "b16", 32: "b32", 64: "b64"}
_KIND_TEXT = {"x": "xmm", "y": "ymm", "z": "zmm", "xh": "xmm16-31", "yh": "ymm16-31", "zh": "zmm16-31",
              "xk": "xmm{k}", "yk": "ymm{k}", "zk": "zmm{k}", "m": "mem", "k": "k", "rel": "label",
              "i8": "imm8", "u8": "uimm8", "i32": "imm32", "u32": "uimm32", "i64": "imm64", "t": "tmm"}
# Operand kinds of the interned register objects (rax, ymm3, k1, ...), keyed by id(): these
# objects live as long as the operands module, so their ids are never reused. `_encode` looks
# kinds up here first and computes them only for memory, immediates and other registers.
_KIND_BY_ID = {id(r): _k for r, _k in
               [(r, {64: "r64", 32: "r32", 16: "r16", 8: "r8"}[r.bits]) for r in GPR64 + GPR32 + GPR8] +
               [(v, ("x" if v.bits == 128 else "y" if v.bits == 256 else "z") + ("h" if v.num >= 16 else ""))
                for v in XMM + YMM + ZMM] + [(k, "k") for k in K] + [(t, "t") for t in TMM]}
_kind_by_id = _KIND_BY_ID.get
_MAX_RELAX_PASSES = 64
_PAD = 0xCC    # int3 between the code and the constant pool


def _kind(op) -> str:
    """The operand kind of one operand (see forms.py); `emit` looks interned registers up first."""
    t = type(op)
    if t is Mem:
        if op.broadcast:
            return _BCST_KIND.get(op.bits, "b?")
        return _MEM_KIND.get(op.bits, "m?") if op.mask is None else _MEM_MASKED.get(op.bits, "m?")
    if t is Vec:
        if op.mask is not None:
            return _VEC_MASKED[op.bits]
        return _VEC_KIND[op.bits] if op.num < 16 else _VEC_HIGH[op.bits]
    if t is Gpr:
        return _GPR_KIND[op.bits]
    if t is int:
        if -0x80 <= op <= 0x7F:
            return "i8"
        if 0 <= op <= 0xFF:
            return "u8"
        if -0x80000000 <= op <= 0x7FFFFFFF:
            return "i32"
        if 0 <= op <= 0xFFFFFFFF:
            return "u32"
        if -(1 << 63) <= op < (1 << 64):
            return "i64"
        return "imm>64bit"
    if t is MaskReg:
        return "k"
    if t is Label:
        return "rel"
    if t is Tmm:
        return "t"
    return type(op).__name__


def _form_key(mnemonic: str, ops: tuple) -> tuple:
    """(mnemonic, operand kinds...): interned registers' kinds from the dict, others computed
    (unrolled for the common operand counts: this is on the way of every first encoding)."""
    if len(ops) == 3:
        a, b, c = ops
        return (mnemonic, _kind_by_id(id(a)) or _kind(a), _kind_by_id(id(b)) or _kind(b),
                _kind_by_id(id(c)) or _kind(c))
    if len(ops) == 2:
        a, b = ops
        return mnemonic, _kind_by_id(id(a)) or _kind(a), _kind_by_id(id(b)) or _kind(b)
    return (mnemonic, *[_kind_by_id(id(o)) or _kind(o) for o in ops])


def _no_form(mnemonic: str, ops: tuple) -> EncodingError:
    kinds = ", ".join(_KIND_TEXT.get(k, k) for k in map(_kind, ops))
    if mnemonic not in MNEMONICS:
        return EncodingError(f"unknown mnemonic {mnemonic!r} (operands: {kinds or 'none'})")
    forms = " | ".join(f.operands or "(none)" for f in forms_of(mnemonic))
    return EncodingError(f"no form of {mnemonic!r} takes ({kinds}); its forms: {forms}")


def format_operand(op) -> str:
    """Intel syntax for one operand, as printed by `Assembler.listing`."""
    if type(op) is int:
        return hex(op) if op >= 0 else "-" + hex(-op)
    if type(op) is Mem and op.base == RIP and op.label is not None:
        return f"[rip + {op.label.name}" + (f" + {op.disp:#x}" if op.disp else "") + "]"
    return str(op)


class Assembler:
    """Builds one function's machine code; see the module docstring."""

    def __init__(self) -> None:
        # per instruction, (its bytes, (mnemonic, *operands)); a branch's bytes are b"" here, as
        # branches are laid out by `bytes()`. An instruction that was kept (see "Kept
        # instructions") records the kept pair: one append, nothing to allocate, and the kept
        # operands are equal to the new ones.
        self._log: list[tuple[bytes, tuple]] = []
        # the bytes of the first _joined instructions of the log, joined when a position is needed
        self._buf = bytearray()
        self._joined = 0
        self._branches: list[tuple] = []  # (buf position, mnemonic, label)
        self._branch_entries: list[int] = []    # where each branch is in the log
        self._labels: dict[Label, tuple[int, int]] = {}   # label -> (buf position, branches before)
        self._fixups: list[tuple] = []    # (disp pos, insn end, branches before, label, addend)
        self._consts: list[tuple] = []    # (label, data, align)
        self._const_index: dict[tuple, Mem] = {}
        self._rip_kept: dict[tuple, tuple] = {}   # see _rip_relative
        self._nlabels = 0

    # --- instructions ----------------------------------------------------------------------

    def emit(self, mnemonic: str, *ops, vex: bool = False) -> None:
        """Append one instruction, Intel operand order (destination first)."""
        if vex:
            mnemonic = "{vex} " + mnemonic
        # The kept instruction (see "Kept instructions"), by operand count and by where the Mem
        # is; the keys are spelled out inline because this is the hot path. An operand with no
        # template code (an int or a str where a register goes) raises AttributeError here, and
        # the table is set after the key: `_encode` then gets no key and says what is wrong.
        n = len(ops)
        table = _KEPT
        try:
            if n == 3:
                a, b, c = ops
                if type(c) is Mem:
                    key = (mnemonic, a._template_code, b._template_code, c._template_shape, c.disp)
                    table = _KEPT_MEM
                elif type(c) is int:
                    key = (mnemonic, a._template_code, b._template_code, c)
                    table = _KEPT_IMM
                else:
                    key = (mnemonic, a._template_code, b._template_code, c._template_code)
            elif n == 2:
                a, b = ops
                if type(b) is Mem:
                    key = (mnemonic, a._template_code, b._template_shape, b.disp)
                    table = _KEPT_MEM
                elif type(a) is Mem:
                    key = (mnemonic, a._template_shape, b._template_code, a.disp)
                    table = _KEPT_MEM
                elif type(b) is int:
                    key = (mnemonic, a._template_code, b)
                    table = _KEPT_IMM
                else:
                    key = (mnemonic, a._template_code, b._template_code)
            elif n == 1:
                key = (mnemonic, ops[0]._template_code)
            else:
                key = (mnemonic,) if n == 0 else None      # no key for 4 operands
        except AttributeError:
            key = None
        kept = table.get(key)
        if kept is None:
            self._emit_new(mnemonic, ops, table, key)
            return
        self._log.append(kept)

    def _emit_new(self, mnemonic: str, ops: tuple, table: dict, key: tuple | None) -> None:
        """`emit` for an instruction not found in `table` under `key` (None: it has no key): made
        from its memory template if it has one (and then kept), else encoded."""
        if len(ops) == 1 and type(ops[0]) is Label and mnemonic in _LABEL_BRANCHES:
            self._branch(mnemonic, ops[0])       # a branch to a label, as _encode records one
            return
        heads = _HEADS.get(key[:-1]) if table is _KEPT_MEM else None
        if heads is None:
            if table is _KEPT_MEM:
                m = ops[-1] if type(ops[-1]) is Mem else ops[0]
                if m.label is not None and None not in key:
                    self._rip_relative(mnemonic, ops, (key, m._fields()))
                    return
            self._encode(mnemonic, ops, table, key)
            return
        m = ops[-1] if type(ops[-1]) is Mem else ops[0]          # a load's Mem, or a store's
        kept = (finish_mem(heads, m), (mnemonic, *ops))
        _remember(_KEPT_MEM, key, kept)
        self._log.append(kept)

    def _rip_relative(self, mnemonic: str, ops: tuple, key: tuple) -> None:
        """An instruction reading a constant of this function's pool (a rip-relative Mem with a
        label), kept per assembler under `key` (its registers' codes and the Mem's fields): its
        bytes do not depend on where it is, the disp32 is patched after layout."""
        kept = self._rip_kept.get(key)
        if kept is None:
            fixups = len(self._fixups)
            self._encode(mnemonic, ops, _KEPT_MEM, None)
            if len(self._fixups) > fixups:
                dpos, end, _, label, addend = self._fixups[-1]
                self._rip_kept[key] = (self._log[-1], end - dpos, label, addend)
            return
        entry, tail, label, addend = kept
        self._log.append(entry)
        end = self._position()
        self._fixups.append((end - tail, end, len(self._branches), label, addend))

    def _encode(self, mnemonic: str, ops: tuple, table: dict, key: tuple | None) -> None:
        """Form lookup and encoder; the result is kept in `table` under `key` when that names the
        instruction (see "Kept instructions"), with its memory template if it has a Mem."""
        entry = _table_get(_form_key(mnemonic, ops))
        if entry is None:
            raise _no_form(mnemonic, ops)
        enc, f, heads, _ = entry
        if enc is None:
            if len(ops) == 1 and type(ops[0]) is Label:
                _LABEL_BRANCHES.add(mnemonic)
            self._branch(mnemonic, ops[0])
            return
        buf = bytearray()
        fix = enc(buf, ops)
        done = (bytes(buf), (mnemonic, *ops))
        self._log.append(done)
        if fix is not None:
            end = self._position()
            self._fixups.append((end - f.imm - 4, end, len(self._branches), fix.label, fix.disp))
        elif key is not None and None not in key and NOT_TEMPLATED not in key:
            _remember(table, key, done)
            if table is _KEPT_MEM and heads is not None and not f.imm:
                parts = heads(ops)           # None where only the generic encoder applies
                if parts is not None:
                    _remember(_HEADS, key[:-1], parts)

    def recorded(self) -> tuple:
        """The entry of the instruction emitted last, for `again`."""
        return self._log[-1]

    def again(self, entry: tuple) -> None:
        """Emit once more the instruction whose entry `recorded` gave (here or in another
        assembler): a code generator may keep the entries of its hottest instructions and skip
        `emit`'s lookups. Only for an instruction with neither a label nor a rip-relative
        operand: those also note a position to fix up, which their entry does not hold."""
        self._log.append(entry)

    def _branch(self, mnemonic: str, label) -> None:
        """A branch to `label`: no bytes yet, laid out by `bytes()`."""
        self._branches.append((self._position(), mnemonic, label))
        self._branch_entries.append(len(self._log))
        self._log.append((b"", (mnemonic, label)))

    def _position(self) -> int:
        """The position after the last instruction in the branch-free bytes (`_buf`, brought up
        to date here)."""
        if self._joined < len(self._log):
            self._buf += b"".join(map(_code_of, self._log[self._joined:]))
            self._joined = len(self._log)
        return len(self._buf)

    def __len__(self) -> int:
        return len(self._log)

    def with_head(self, head: "Assembler", start: int, rename=lambda name: name) -> "Assembler | None":
        """A copy of this function whose first `start` instructions are `head`'s instead (a
        prologue loading other argument slots), its labels renamed by `rename`; None unless both
        are plain instructions (no branches, labels or constants in `head`, no branch or label
        among the replaced). Everything after them moves by the difference in length: branches
        and labels keep their distances, the constant pool is aligned again by `bytes()`, and
        its labels are shared (their offsets are set from the layout of the assembler that
        `bytes()` is called on)."""
        if head._branches or head._labels or head._consts or head._fixups:
            return None
        old = sum(len(code) for code, _ in self._log[:start])
        if (self._branch_entries and self._branch_entries[0] < start) or any(
                pos < old for pos, _ in self._labels.values()):
            return None
        shift = sum(len(code) for code, _ in head._log) - old
        labels = {lab: Label(rename(lab.name)) for lab in self._labels}
        moved = len(head._log) - start           # log entries move by this much
        log = head._log + self._log[start:]
        for i in self._branch_entries:           # branches to a renamed label
            code, insn = log[i + moved]
            log[i + moved] = code, (insn[0], *(labels.get(o, o) if type(o) is Label else o for o in insn[1:]))
        out = Assembler()
        out._log = log
        out._branches = [(pos + shift, mn, labels.get(lab, lab)) for pos, mn, lab in self._branches]
        out._branch_entries = [i + moved for i in self._branch_entries]
        out._labels = {labels[lab]: (pos + shift, nb) for lab, (pos, nb) in self._labels.items()}
        out._consts = list(self._consts)
        out._const_index = dict(self._const_index)
        out._fixups = [(dpos + shift, end + shift, nb, labels.get(lab, lab), addend)
                       for dpos, end, nb, lab, addend in self._fixups]
        out._nlabels = self._nlabels
        return out

    # --- labels ----------------------------------------------------------------------------

    def label(self, name: str | None = None) -> Label:
        """A new, unbound label."""
        self._nlabels += 1
        return Label(name or f".L{self._nlabels}")

    def bind(self, label: Label) -> None:
        """Bind `label` to the current position."""
        if label in self._labels:
            raise EncodingError(f"label {label.name!r} is bound twice")
        self._labels[label] = (self._position(), len(self._branches))

    # --- constants -------------------------------------------------------------------------

    def const(self, data, align: int = 32) -> Mem:
        """Place `data` (bytes or a numpy array) after the code; returns a rip-relative Mem to it."""
        raw = data.tobytes() if hasattr(data, "tobytes") else bytes(data)
        if align < 1 or align & (align - 1):
            raise EncodingError(f"constant alignment must be a power of two, got {align}")
        key = (raw, align)
        m = self._const_index.get(key)
        if m is None:
            lab = Label(f"const{len(self._consts)}")
            self._consts.append((lab, raw, align))
            m = self._const_index[key] = Mem(RIP, label=lab)
        return m

    def const_broadcast(self, value, dtype: str = "float32") -> Mem:
        """A 4-byte (or element-sized) constant for vbroadcastss / {1toN}; deduplicated."""
        fmt = {"float32": "<f", "int32": "<i", "uint32": "<I", "float16": "<e",
               "float64": "<d", "int64": "<q", "uint64": "<Q"}.get(str(dtype))
        if fmt is None:
            raise EncodingError(f"const_broadcast: unsupported dtype {dtype!r}")
        raw = struct.pack(fmt, value)
        return self.const(raw, align=len(raw))

    # --- finalisation ----------------------------------------------------------------------

    def _layout(self) -> list[int]:
        """Branch sizes after relaxation to a fixed point."""
        branches = self._branches
        labels = self._labels
        for _, mn, lab in branches:
            if lab not in labels:
                raise EncodingError(f"{mn} to label {lab.name!r}, which is never bound")
        forms = [_branch_forms(mn) for _, mn, _ in branches]
        sizes = [len(s.opcode) + 1 if s is not None else len(lng.opcode) + 4 for s, lng in forms]
        history = []
        for _ in range(_MAX_RELAX_PASSES):
            shift = self._prefix(sizes)
            changed = False
            for i, (pos, _, lab) in enumerate(branches):
                short = forms[i][0]
                if short is None or sizes[i] != len(short.opcode) + 1:
                    continue
                lpos, lnb = labels[lab]
                rel = lpos + shift[lnb] - (pos + shift[i] + sizes[i])
                if not -128 <= rel <= 127:
                    sizes[i] = len(forms[i][1].opcode) + 4
                    changed = True
            history.append(list(sizes))
            if not changed:
                break
        else:
            raise EncodingError(f"branch relaxation did not converge in {_MAX_RELAX_PASSES} passes")
        assert len(history) == 1 or history[-1] == history[-2] or not changed
        return sizes

    @staticmethod
    def _prefix(sizes: list[int]) -> list[int]:
        out = [0]
        acc = 0
        for s in sizes:
            acc += s
            out.append(acc)
        return out

    def _assemble(self) -> tuple[bytearray, list[int]]:
        sizes = self._layout()
        shift = self._prefix(sizes)
        labels = self._labels
        self._position()                  # _buf: every instruction's bytes
        buf = self._buf
        out = bytearray()
        prev = 0
        for i, (pos, mn, lab) in enumerate(self._branches):
            out += buf[prev:pos]
            prev = pos
            short, lng = _branch_forms(mn)
            f = short if short is not None and sizes[i] == len(short.opcode) + 1 else lng
            lpos, lnb = labels[lab]
            rel = lpos + shift[lnb] - (len(out) + sizes[i])
            out += f.opcode
            out += (rel & ((1 << (8 * f.rel)) - 1)).to_bytes(f.rel, "little")
        out += buf[prev:]
        for lab, (lpos, lnb) in labels.items():
            lab.offset = lpos + shift[lnb]
        # constant pool: aligned after the code, each constant at its own alignment
        if self._consts:
            top = max(a for _, _, a in self._consts)
            out += bytes([_PAD]) * (-len(out) % top)
            for lab, raw, align in self._consts:
                out += bytes(-len(out) % align)
                lab.offset = len(out)
                out += raw
        for dpos, end, nb, lab, addend in self._fixups:
            if lab.offset is None or (lab not in labels and all(lab is not c[0] for c in self._consts)):
                raise EncodingError(f"rip-relative reference to label {lab.name!r}, which is never bound")
            rel = lab.offset + addend - (end + shift[nb])
            struct.pack_into("<i", out, dpos + shift[nb], rel)
        return out, shift

    def bytes(self) -> bytes:
        """The finished code: labels resolved, branches relaxed, constant pool appended."""
        return bytes(self._assemble()[0])

    @property
    def code_size(self) -> int:
        """Bytes of instructions at the start of `bytes()`: the offset where the int3 padding before
        the constant pool (or the end of the code) begins, with branches relaxed as `bytes()` does."""
        return self._position() + sum(self._layout())

    def listing(self) -> str:
        """One line per instruction: `offset  hex bytes  intel syntax`, then the constant pool."""
        code, shift = self._assemble()
        insns = [(insn[0], insn[1:]) for _, insn in self._log]
        starts = []
        nb = 0
        for pos, (mn, ops) in zip(self._positions(), insns):
            is_branch = bool(ops) and type(ops[0]) is Label and _branch_forms(mn) is not None
            starts.append(pos + shift[nb])
            nb += is_branch
        code_end = len(self._buf) + shift[-1]
        bound = {}
        for lab, (lpos, lnb) in self._labels.items():
            bound.setdefault(lpos + shift[lnb], []).append(lab.name)
        lines = []
        for i, (mn, ops) in enumerate(insns):
            a = starts[i]
            b = starts[i + 1] if i + 1 < len(starts) else code_end
            for name in bound.get(a, ()):
                lines.append(f"{name}:")
            text = mn + (" " + ", ".join(format_operand(o) for o in ops) if ops else "")
            lines.append(f"{a:6x}  {code[a:b].hex(' '):<36}  {text}")
        for lab, raw, _ in self._consts:
            lines.append(f"{lab.offset:6x}  {raw[:16].hex(' '):<36}  {lab.name}: {len(raw)} bytes")
        return "\n".join(lines)

    def _positions(self) -> list[int]:
        """Where each instruction starts in the branch-free buffer (a branch adds no bytes there)."""
        return list(itertools.accumulate((len(code) for code, _ in self._log[:-1]), initial=0))


def _mnemonic_method(mnemonic: str):
    def method(self, *ops, vex: bool = False) -> None:
        self.emit(mnemonic, *ops, vex=vex)
    method.__name__ = method.__qualname__ = mnemonic
    method.__doc__ = f"emit({mnemonic!r}, *operands)"
    return method


# The mnemonics as methods: asm.vaddps(...) == asm.emit("vaddps", ...), and a trailing "_" is
# accepted, for the mnemonics that are Python keywords (asm.and_). Methods set on the class, not
# a __getattr__ hook: with one, every attribute read on an assembler (`emit`'s own self._log,
# a caller's asm.emit) takes the interpreter's slow unspecialised path.
for _mnemonic in MNEMONICS:
    for _name in (_mnemonic, _mnemonic + "_"):
        if not hasattr(Assembler, _name):
            setattr(Assembler, _name, _mnemonic_method(_mnemonic))
