"""The x86-64 assembler: form choice, labels with branch relaxation, a constant pool, a listing.

    asm = Assembler()
    top = asm.label("loop"); asm.bind(top)
    asm.vfmadd231ps(ymm0, ymm1, Mem(rdi, rax, 4, 32))
    asm.emit("add", rax, 8); asm.emit("cmp", rax, rdx); asm.emit("jne", top)
    code = asm.bytes()

`emit` computes one operand kind per operand, looks up (mnemonic, kinds...) in a dict built
at import from the form table, and runs the form's encoder into one bytearray. An
instruction of a shape it has encoded before (the same interned register objects, e.g. ymm3
or YMM[3] rather than a new Vec(3, 256); for memory the same base, index, scale, size and
mask, any displacement) is copied from a template instead: see "Instruction templates".

Branches to labels are not written into that bytearray: they are recorded at their position
and laid out in `bytes()`, first all short (rel8), then lengthening any that do not reach
until nothing changes (sizes only grow, so this converges; the number of passes is capped
and the last two layouts are checked to agree, style §8). Rip-relative operands with a label
(the constant pool) get their disp32 patched after layout.
"""
from __future__ import annotations

import functools
import struct

from ...errors import EncodingError
from .encode import BASE_NUM, INDEX_NUM, compile_form, put_mem
from .forms import FORMS_BY_MNEMONIC, LOOKUP, MNEMONICS
from .operands import GPR8, GPR32, GPR64, K, RIP, XMM, YMM, ZMM, Gpr, Label, MaskReg, Mem, Vec


def _table_entry(key: tuple, f) -> tuple:
    """(encoder, form, heads, r/m index) for one lookup key; the encoder is None for a branch.

    The key's kind for the r/m operand says whether it is memory ("m...", "b..."), so the
    encoder specialised for a register or a memory r/m is chosen here, once, not per call.
    """
    if f.rel:
        return None, f, None, -1
    reg, mem, heads, rm = compile_form(f)
    return (mem if rm >= 0 and key[1 + rm][0] in "mb" else reg), f, heads, rm


# (mnemonic, kinds...) -> (encoder, form, heads, r/m index): one dict lookup per instruction
_TABLE = {key: _table_entry(key, f) for key, f in LOOKUP.items()}
_table_get = _TABLE.get

# Instruction templates. A code generator emits the same instruction shapes over and over
# (the same accumulators, the same base and index registers; what changes is the displacement),
# and an instruction's bytes are a function of its form, its registers, its immediate and, for
# a memory operand, its base, index, scale, size, broadcast and mask, plus the displacement.
# So once an instruction has been encoded, what it became is kept under a key made of the
# mnemonic, the id() of each register and the memory operand's fields other than the
# displacement. Only the interned register objects of operands.py (rax, ymm3, k1, ...) are
# keyed by id(): they live as long as the process, so no other object can have their id, and
# a key holding any other object's id never matches. Key layouts, per table:
#   _REG_TEMPLATES    (mnemonic, id(op0), ...)                     -> code     0-3 registers
#   _IMM_TEMPLATES    (mnemonic, id(op0), ..., imm)                -> code     1-2 registers + an int
#   _LOAD_TEMPLATES   (mnemonic, id(op0), ..., *_mem_key(last op)) -> heads   1-2 registers + memory
#   _STORE_TEMPLATES  (mnemonic, *_mem_key(op0), id(op1))          -> heads   memory + 1 register
# where code is (bytes, the first such instruction's operands: the record keeps that tuple
# instead of the equal new one) and heads is what `put_mem` takes. Everything else (labels,
# rip-relative memory, masked registers, registers that are not the interned objects, 4
# operands, memory with an immediate) goes through `_encode` every time. The tables are shared
# by all assemblers and bounded (cleared when full). Same bytes and same errors either way:
# a template is only the output of the encoders for an operand shape, split where the
# displacement goes.
_REG_TEMPLATES: dict[tuple, tuple] = {}
_IMM_TEMPLATES: dict[tuple, tuple] = {}
_LOAD_TEMPLATES: dict[tuple, tuple] = {}
_STORE_TEMPLATES: dict[tuple, tuple] = {}
_TEMPLATE_LIMIT = 1 << 16
_reg_template = _REG_TEMPLATES.get
_imm_template = _IMM_TEMPLATES.get
_load_template = _LOAD_TEMPLATES.get
_store_template = _STORE_TEMPLATES.get
_INTERNED_MASKS = frozenset(id(k) for k in K) | {id(None)}
_pack_disp32 = struct.Struct("<i").pack      # raises struct.error outside -2**31 .. 2**31-1


def _mem_key(m: Mem) -> tuple:
    """The fields of `m` in a template key (emit spells this out inline)."""
    return id(m.base), id(m.index), m.scale, m.bits, m.broadcast, id(m.mask)


def _remember(table: dict, key: tuple, value) -> None:
    if len(table) >= _TEMPLATE_LIMIT:
        table.clear()
    table[key] = value


# branch mnemonic -> (rel8 form or None, rel32 form)
_BRANCHES: dict[str, tuple] = {}
for _key, _f in LOOKUP.items():
    if _f.openc == "D":
        _rows = [g for g in FORMS_BY_MNEMONIC[_f.mnemonic] if g.openc == "D"]
        _BRANCHES[_key[0]] = (next((g for g in _rows if g.rel == 1), None),
                              next(g for g in _rows if g.rel == 4))

_GPR_KIND = {64: "r64", 32: "r32", 16: "r16", 8: "r8"}
_VEC_KIND = {128: "x", 256: "y", 512: "z"}
_VEC_HIGH = {128: "xh", 256: "yh", 512: "zh"}
_VEC_MASKED = {128: "xk", 256: "yk", 512: "zk"}
_MEM_KIND = {None: "m", **{b: f"m{b}" for b in (8, 16, 32, 64, 128, 256, 512)}}
_MEM_MASKED = {b: k + "k" for b, k in _MEM_KIND.items()}
_BCST_KIND = {16: "b16", 32: "b32", 64: "b64"}
_KIND_TEXT = {"x": "xmm", "y": "ymm", "z": "zmm", "xh": "xmm16-31", "yh": "ymm16-31", "zh": "zmm16-31",
              "xk": "xmm{k}", "yk": "ymm{k}", "zk": "zmm{k}", "m": "mem", "k": "k", "rel": "label",
              "i8": "imm8", "u8": "uimm8", "i32": "imm32", "u32": "uimm32", "i64": "imm64"}
# Operand kinds of the interned register objects (rax, ymm3, k1, ...), keyed by id(): these
# objects live as long as the operands module, so their ids are never reused. The hot path
# looks kinds up here first and computes them only for memory, immediates and masked registers.
_KIND_BY_ID = {id(r): _k for r, _k in
               [(r, {64: "r64", 32: "r32", 16: "r16", 8: "r8"}[r.bits]) for r in GPR64 + GPR32 + GPR8] +
               [(v, ("x" if v.bits == 128 else "y" if v.bits == 256 else "z") + ("h" if v.num >= 16 else ""))
                for v in XMM + YMM + ZMM] + [(k, "k") for k in K]}
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
    return type(op).__name__


def _no_form(mnemonic: str, ops: tuple) -> EncodingError:
    kinds = ", ".join(_KIND_TEXT.get(k, k) for k in map(_kind, ops))
    if mnemonic not in MNEMONICS:
        return EncodingError(f"unknown mnemonic {mnemonic!r} (operands: {kinds or 'none'})")
    name = next(k[0] for k in LOOKUP if k[0] == mnemonic)
    forms = " | ".join(f.operands or "(none)" for f in FORMS_BY_MNEMONIC.get(name, ()))
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
        self._buf = bytearray()           # all non-branch bytes, in order
        # per instruction, its mnemonic and its operands (two appends are the cheapest record: no
        # tuple to allocate and for the garbage collector to trace). Positions are not kept:
        # `listing` finds them again by encoding the instructions once more.
        self._mnemonics: list[str] = []
        self._operands: list[tuple] = []
        self._branches: list[tuple] = []  # (buf position, mnemonic, label)
        self._labels: dict[Label, tuple[int, int]] = {}   # label -> (buf position, branches before)
        self._fixups: list[tuple] = []    # (disp pos, insn end, branches before, label, addend)
        self._consts: list[tuple] = []    # (label, data, align)
        self._const_index: dict[tuple, Mem] = {}
        self._nlabels = 0

    # --- instructions ----------------------------------------------------------------------

    def emit(self, mnemonic: str, *ops, vex: bool = False) -> None:
        """Append one instruction, Intel operand order (destination first)."""
        if vex:
            mnemonic = "{vex} " + mnemonic
        # A template (see above) if there is one, unrolled by operand count and by where the
        # memory operand is; the keys are spelled out inline because this is the hot path.
        n = len(ops)
        if n == 3:
            a, b, m = ops
            if type(m) is Mem:
                heads = _load_template((mnemonic, id(a), id(b), id(m.base), id(m.index), m.scale, m.bits,
                                        m.broadcast, id(m.mask)))
            else:
                code = _reg_template((mnemonic, id(a), id(b), id(m)))
                if code is None and type(m) is int:
                    code = _imm_template((mnemonic, id(a), id(b), m))
                if code is not None:
                    self._buf += code[0]
                    self._mnemonics.append(mnemonic)
                    self._operands.append(code[1])
                    return
                heads = None
        elif n == 2:
            a, m = ops
            if type(m) is Mem:
                heads = _load_template((mnemonic, id(a), id(m.base), id(m.index), m.scale, m.bits, m.broadcast,
                                        id(m.mask)))
            elif type(a) is Mem:
                heads = _store_template((mnemonic, id(a.base), id(a.index), a.scale, a.bits, a.broadcast,
                                         id(a.mask), id(m)))
                m = a
            else:
                code = _reg_template((mnemonic, id(a), id(m)))
                if code is None and type(m) is int:
                    code = _imm_template((mnemonic, id(a), m))
                if code is not None:
                    self._buf += code[0]
                    self._mnemonics.append(mnemonic)
                    self._operands.append(code[1])
                    return
                heads = None
        else:
            if n < 2:
                code = _reg_template((mnemonic, *map(id, ops)))
                if code is not None:
                    self._buf += code[0]
                    self._mnemonics.append(mnemonic)
                    self._operands.append(code[1])
                    return
            heads = None
        if heads is None:
            self._encode(mnemonic, ops)
            return
        # a memory template: `put_mem`, inlined
        h0, h8, h32, n = heads
        buf = self._buf
        disp = m.disp
        if disp == 0 and h0 is not None:
            buf += h0
        elif n == 1 and -128 <= disp <= 127:
            buf += h8
            buf.append(disp & 0xFF)
        elif n != 1 and disp % n == 0 and -128 <= disp // n <= 127:
            buf += h8
            buf.append((disp // n) & 0xFF)
        else:
            try:
                d = _pack_disp32(disp)
            except struct.error:                # out of range or not an int: the reference
                put_mem(buf, heads, m)          # path raises what the encoders raise
            else:
                buf += h32
                buf += d
        self._mnemonics.append(mnemonic)
        self._operands.append(ops)

    def _encode(self, mnemonic: str, ops: tuple) -> None:
        """`emit` without a template: form lookup, encoder, and a new template where one applies."""
        # kinds: interned registers' from the dict (None for other operands), the rest computed
        n = len(ops)
        if n == 3:
            a, b, c = ops
            kinds = (_kind_by_id(id(a)), _kind_by_id(id(b)), _kind_by_id(id(c)))
            key = (mnemonic, kinds[0] or _kind(a), kinds[1] or _kind(b), kinds[2] or _kind(c))
        elif n == 2:
            a, b = ops
            kinds = (_kind_by_id(id(a)), _kind_by_id(id(b)))
            key = (mnemonic, kinds[0] or _kind(a), kinds[1] or _kind(b))
        elif n == 1:
            a = ops[0]
            kinds = (_kind_by_id(id(a)),)
            key = (mnemonic, kinds[0] or _kind(a))
        else:
            kinds = tuple(_kind_by_id(id(o)) for o in ops)
            key = (mnemonic, *[k or _kind(o) for k, o in zip(kinds, ops)])
        entry = _table_get(key)
        if entry is None:
            raise _no_form(mnemonic, ops)
        enc, f, heads, rm = entry
        buf = self._buf
        start = len(buf)
        if enc is None:
            self._branches.append((start, mnemonic, ops[0]))
            self._mnemonics.append(mnemonic)
            self._operands.append(ops)
            return
        try:
            fix = enc(buf, ops)
        except EncodingError:
            del buf[start:]
            raise
        self._mnemonics.append(mnemonic)
        self._operands.append(ops)
        if fix is not None:
            end = len(buf)
            self._fixups.append((end - f.imm - 4, end, len(self._branches), fix.label, fix.disp))
            return
        # a new template, when every operand but at most one (an int, or the memory operand) is an
        # interned register: see the key layouts above
        other = kinds.count(None)
        if n > 3 or other > 1:
            return
        if other == 0:
            _remember(_REG_TEMPLATES, (mnemonic, *map(id, ops)), (bytes(buf[start:]), ops))
        elif n < 2:
            return
        elif kinds[-1] is None and type(ops[-1]) is int:
            _remember(_IMM_TEMPLATES, (mnemonic, *map(id, ops[:-1]), ops[-1]), (bytes(buf[start:]), ops))
        elif heads is not None and kinds[rm] is None and not f.imm:
            m = ops[rm]
            if (type(m) is Mem and id(m.base) in BASE_NUM and id(m.index) in INDEX_NUM
                    and id(m.mask) in _INTERNED_MASKS):
                parts = heads(ops)           # None where only the generic encoder applies
                if parts is not None and rm == n - 1:
                    _remember(_LOAD_TEMPLATES, (mnemonic, *map(id, ops[:-1]), *_mem_key(m)), parts)
                elif parts is not None and rm == 0 and n == 2:
                    _remember(_STORE_TEMPLATES, (mnemonic, *_mem_key(m), id(ops[1])), parts)

    def __getattr__(self, name: str):
        # asm.vaddps(...) == asm.emit("vaddps", ...); Python keywords take a trailing "_" (asm.and_)
        if name.startswith("_"):
            raise AttributeError(name)
        mnemonic = name[:-1] if name.endswith("_") else name
        if mnemonic not in MNEMONICS:
            raise AttributeError(f"{type(self).__name__!r} has no attribute or mnemonic {name!r}")
        fn = functools.partial(self.emit, mnemonic)
        self.__dict__[name] = fn          # cached: later calls skip __getattr__
        return fn

    def __len__(self) -> int:
        return len(self._mnemonics)

    # --- labels ----------------------------------------------------------------------------

    def label(self, name: str | None = None) -> Label:
        """A new, unbound label."""
        self._nlabels += 1
        return Label(name or f".L{self._nlabels}")

    def bind(self, label: Label) -> None:
        """Bind `label` to the current position."""
        if label in self._labels:
            raise EncodingError(f"label {label.name!r} is bound twice")
        self._labels[label] = (len(self._buf), len(self._branches))

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
        forms = [_BRANCHES[mn] for _, mn, _ in branches]
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
        buf = self._buf
        out = bytearray()
        prev = 0
        for i, (pos, mn, lab) in enumerate(self._branches):
            out += buf[prev:pos]
            prev = pos
            short, lng = _BRANCHES[mn]
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
        return len(self._buf) + sum(self._layout())

    def listing(self) -> str:
        """One line per instruction: `offset  hex bytes  intel syntax`, then the constant pool."""
        code, shift = self._assemble()
        insns = list(zip(self._mnemonics, self._operands))
        starts = []
        nb = 0
        for pos, (mn, ops) in zip(self._positions(), insns):
            is_branch = mn in _BRANCHES and ops and type(ops[0]) is Label
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
        """Where each instruction starts in the branch-free buffer, found by encoding them again
        (into a scratch assembler: same encoders, same lengths; a branch adds no bytes there)."""
        scratch = Assembler()
        out = []
        for mn, ops in zip(self._mnemonics, self._operands):
            out.append(len(scratch._buf))
            scratch.emit(mn, *ops)
        assert scratch._buf == self._buf
        return out
