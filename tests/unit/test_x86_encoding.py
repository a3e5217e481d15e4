"""x86-64 encodings checked against decoders nobody here wrote (iced-x86, capstone).

Every table row is encoded with a spread of registers (low, r8-r15 / xmm8-15, 16-31 for EVEX)
and addressing modes, decoded, and compared operand by operand (not byte by byte, so legal
alternative encodings do not fail). Hypothesis draws further registers and displacements.
"""
import pickle
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopstack.errors import EncodingError
from loopstack.isa.x86.assembler import Assembler, format_operand
from loopstack.isa.x86.encode import encode
from loopstack.isa.x86.forms import FORMS, LOOKUP
from loopstack.isa.x86.operands import (GPR8, GPR32, GPR64, K, NOT_TEMPLATED, RIP, TMM, XMM, YMM, ZMM, Gpr,
                                        Label, MaskReg, Mem, Tmm, Vec, cl, eax, k1, k2, k7, r8, r12, r13, rax,
                                        rbp, rbx, rcx, rdi, rdx, rsi, rsp, xmm0, xmm3, ymm0, ymm1, ymm2, ymm3,
                                        ymm8, zmm0, zmm1, zmm2, zmm3, zmm8, zmm9, zmm17, zmm29, zmm30, zmm31)

iced = pytest.importorskip("iced_x86")
capstone = pytest.importorskip("capstone")

_MNEM = {getattr(iced.Mnemonic, n): n.lower() for n in dir(iced.Mnemonic) if n.isupper()}
_CODE = {getattr(iced.Code, n): n for n in dir(iced.Code) if n.isupper()}
_CS = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
# capstone 5 decodes none of these (platform.md): checked by iced only
_NO_CAPSTONE = ("AVX_VNNI", "AVX512_BF16", "AVX512_FP16", "AMX_TILE", "AMX_INT8", "AMX_BF16")
_REG_NAMES = {r.name for r in GPR64 + GPR32 + GPR8 + XMM + YMM + ZMM + K + TMM} | {"rip"} | {
    Gpr(i, 16).name for i in range(16)}


def _iced_reg(name: str):
    m = re.fullmatch(r"r(\d+)b", name)          # iced spells r8b as R8L
    return getattr(iced.Register, f"R{m.group(1)}L" if m else name.upper())


def _decode_one(data: bytes):
    dec = iced.Decoder(64, data, ip=0)
    ins = dec.decode()
    assert ins.code != iced.Code.INVALID, f"iced cannot decode {data.hex()}"
    assert ins.len == len(data), f"decoded {ins.len} of {len(data)} bytes: {data.hex()}"
    return ins


def check_iced(mnemonic: str, ops: tuple, data: bytes, prefix: str | None = None, imm_bytes: int = 1):
    """Decode `data` as one instruction and compare it with (mnemonic, ops)."""
    ins = _decode_one(data)
    text = iced.Formatter(iced.FormatterSyntax.INTEL).format(ins)
    want = mnemonic.replace("{vex} ", "")
    assert _MNEM[ins.mnemonic] == want, f"{data.hex()}: iced says {text!r}, wanted {mnemonic}"
    assert ins.has_lock_prefix == (data[0] == 0xF0), f"{data.hex()}: iced says {text!r}"
    code = _CODE[ins.code]
    if prefix == "vex":
        assert code.startswith("VEX_"), (code, text)
    elif prefix == "evex":
        assert code.startswith("EVEX_"), (code, text)
    elif prefix == "legacy":
        assert not code.startswith(("VEX_", "EVEX_")), (code, text)
    assert ins.op_count == len(ops), f"{text!r} has {ins.op_count} operands, wanted {len(ops)}"
    want_mask, want_zero = None, False
    for i, op in enumerate(ops):
        kind = ins.op_kind(i)
        if isinstance(op, (Vec, Gpr, MaskReg, Tmm)):
            assert kind == iced.OpKind.REGISTER, (i, text)
            assert ins.op_register(i) == _iced_reg(op.name), (i, op.name, text)
            if isinstance(op, Vec) and op.mask is not None:
                want_mask, want_zero = op.mask, op.zeroing
        elif isinstance(op, Mem):
            assert kind == iced.OpKind.MEMORY, (i, text)
            base = iced.Register.NONE if op.base is None else (
                iced.Register.RIP if op.base == RIP else _iced_reg(op.base.name))
            assert ins.memory_base == base, (text, op)
            assert ins.memory_index == (iced.Register.NONE if op.index is None else _iced_reg(op.index.name)), text
            if op.index is not None:
                assert ins.memory_index_scale == op.scale, text
            disp = (len(data) + op.disp) if op.base == RIP else op.disp
            assert ins.memory_displacement == disp & (2**64 - 1), (text, op)
            assert ins.is_broadcast == op.broadcast, text
            if op.mask is not None:
                want_mask = op.mask
        elif isinstance(op, int) and kind in (iced.OpKind.NEAR_BRANCH64,):
            assert ins.near_branch_target == (len(data) + op) & (2**64 - 1), text
        elif isinstance(op, int):
            assert kind != iced.OpKind.REGISTER and kind != iced.OpKind.MEMORY, text
            m = (1 << (8 * imm_bytes)) - 1
            assert ins.immediate(i) & m == op & m, (text, op)
        else:
            raise AssertionError(op)
    if want_mask is None:
        assert ins.op_mask == iced.Register.NONE, text
    else:
        assert ins.op_mask == _iced_reg(want_mask.name), text
        assert ins.zeroing_masking == want_zero, text
    return ins


def _regs_in_order(ops) -> list[str]:
    out = []
    for op in ops:
        if isinstance(op, (Vec, Gpr, MaskReg, Tmm)):
            out.append(op.name)
            if isinstance(op, Vec) and op.mask is not None:
                out.append(op.mask.name)
        elif isinstance(op, Mem):
            if op.base is not None:
                out.append("rip" if op.base == RIP else op.base.name)
            if op.index is not None:
                out.append(op.index.name)
            if op.mask is not None:
                out.append(op.mask.name)
    return out


def check_capstone(mnemonic: str, ops: tuple, data: bytes):
    insns = list(_CS.disasm(data, 0))
    assert sum(i.size for i in insns) == len(data), f"capstone stops early on {data.hex()}"
    (ins,) = insns
    got = ins.mnemonic
    if data[0] == 0xF0:                     # a LOCKed form (cmpxchg): capstone names the prefix
        got = got.removeprefix("lock ")
    ok = got == mnemonic or (mnemonic == "mov" and got == "movabs") or (
        mnemonic.startswith("vcmp") and got.startswith("vcmp") and got.endswith(mnemonic[-2:]))
    assert ok, f"{data.hex()}: capstone says {got} {ins.op_str}, wanted {mnemonic}"
    regs = [t for t in re.findall(r"[a-z][a-z0-9]*", ins.op_str) if t in _REG_NAMES]
    assert regs == _regs_in_order(ops), f"{data.hex()}: capstone says {got} {ins.op_str}"


# ---------------------------------------------------------------------------------------------
# Operand choices per slot kind
# ---------------------------------------------------------------------------------------------

_GPR_CHOICES = {
    "r64": [rax, rcx, rsp, r8, r12, r13, GPR64[15], rdi],
    "r32": [eax, GPR32[7], GPR32[8], GPR32[15], GPR32[4]],
    "r16": [Gpr(0, 16), Gpr(9, 16), Gpr(6, 16)],
    "r8": [GPR8[0], GPR8[6], GPR8[10], GPR8[15], GPR8[3]],   # sil needs a bare REX
}
_VEC_FILE = {"x": XMM, "y": YMM, "z": ZMM}
_LOW_VEC = [0, 7, 8, 15, 3, 12]
_HIGH_VEC = [16, 31, 23]


def _mem_variants(n: int) -> list[Mem]:
    """Addressing modes; n is the disp8*N scale of the form (1 when not EVEX)."""
    return [
        Mem(rdi),                                   # [base]
        Mem(rsp),                                   # rsp base: SIB required
        Mem(r12, disp=8 * n),                       # r12 base: SIB required, disp8
        Mem(rbp),                                   # rbp base: disp8 0 forced
        Mem(r13),                                   # r13 base: disp8 0 forced
        Mem(rax, disp=-128 * n),                    # smallest compressed disp8
        Mem(rsi, disp=127 * n + (1 if n > 1 else 0)),   # not a multiple of N (EVEX) -> disp32
        Mem(rcx, disp=0x12345),                     # disp32
        Mem(rdx, rcx, 4, 64),                       # base + index*scale + disp
        Mem(GPR64[9], GPR64[14], 8, -0x40),         # high base and index
        Mem(rbp, r12, 2),                           # rbp base with index, r12 as index is fine
        Mem(RIP, disp=0x100),                       # rip-relative
        Mem(None, rax, 8, 0x1000),                  # no base: SIB base 101
    ]


def _imm_choices(kinds) -> list[int]:
    out = [v for k, vals in (("i8", [0, -5, 127, -128]), ("u8", [200, 255]), ("i32", [0x12345678, -100000]),
                             ("u32", [0xFFFFFFF0]), ("i64", [0x123456789ABC])) if k in kinds for v in vals]
    return out


def slot_choices(form, i: int, kinds) -> list:
    out: list = []
    if form.openc == "MC" and i == 1:
        return [cl]
    for k in ("r64", "r32", "r16", "r8"):
        if k in kinds:
            out += _GPR_CHOICES[k]
    if "k" in kinds:
        out += [k1, K[7], K[0], K[5]]
    if "t" in kinds:
        out += [TMM[0], TMM[7], TMM[3], TMM[5]]
    for v in "xyz":
        if v in kinds:
            out += [_VEC_FILE[v][n] for n in _LOW_VEC]
        if v + "h" in kinds:
            out += [_VEC_FILE[v][n] for n in _HIGH_VEC]
        if v + "k" in kinds:
            out += [_VEC_FILE[v][5].masked(k2), _VEC_FILE[v][20].masked(K[7], zero=form.zero_ok)]
    if any(k.startswith("m") for k in kinds):
        ms = _mem_variants(form.mem_n if form.prefix == "evex" else 1)
        if form.sibmem:                     # a tile's row stride is the index register
            ms = [m for m in ms if m.index is not None] + [Mem(rsp, rcx, 1, 64), Mem(r13, r8, 1)]
        out += ms
        if any(k.endswith("k") and k.startswith("m") for k in kinds):
            out += [m.masked(K[3]) for m in ms[:4]]
    for bits in (16, 32, 64):
        if f"b{bits}" in kinds:
            n = bits // 8
            out += [Mem(rax, disp=8 * n).bcst(bits),              # compressed with N = element size
                    Mem(r13).bcst(bits),                            # r13: forced disp8 0
                    Mem(GPR64[3], disp=3 * n + 1).bcst(bits),       # not a multiple of N: disp32
                    Mem(rdx, rcx, 2, -4 * n).bcst(bits)]
    out += _imm_choices(kinds)
    if "rel" in kinds:
        out += [-128, 5, 127] if form.rel == 1 else [-100000, 5, 0x1000]
    assert out, (form, i, kinds)
    return out


def combos(form) -> list[tuple]:
    if form.openc == "RMV":                 # AMX tile products: three different tiles
        return [tuple(TMM[n] for n in t) for t in ((0, 1, 2), (7, 6, 5), (3, 0, 7), (5, 4, 1))]
    lists = [slot_choices(form, i, k) for i, k in enumerate(form.slots)]
    if not lists:
        return [()]
    n = max(len(x) for x in lists)
    # slots step through their choices at different rates so fields are never all equal
    return [tuple(lst[(j * (i + 1) + i) % len(lst)] for i, lst in enumerate(lists)) for j in range(n)]


def _check_form(form, ops):
    data = encode(form, *ops)
    check_iced(form.mnemonic, ops, data, form.prefix, max(form.imm, 1))
    if form.isa.split("+")[0] not in _NO_CAPSTONE and form.openc != "RVMR":
        check_capstone(form.mnemonic, ops, data)


@pytest.mark.parametrize("form", FORMS, ids=[f"{f.mnemonic}:{f.operands}:{f.prefix}" for f in FORMS])
def test_every_form_against_decoders(form):
    for ops in combos(form):
        _check_form(form, ops)


# ---------------------------------------------------------------------------------------------
# Hypothesis: random registers and displacements for random rows
# ---------------------------------------------------------------------------------------------

_DISPS = st.one_of(st.integers(-2**31, 2**31 - 1), st.integers(-300, 300),
                   st.sampled_from([0, 1, -1, 127, 128, -128, -129, 64, 63, 4096, -8192, 8128, 8192]))


@st.composite
def _mem(draw, n, indexed=False):
    base = draw(st.sampled_from(GPR64))
    indexes = st.sampled_from([r for r in GPR64 if r.num != 4])
    index = draw(indexes if indexed else st.one_of(st.none(), indexes))
    scale = draw(st.sampled_from([1, 2, 4, 8]))
    disp = draw(st.one_of(_DISPS, st.integers(-130, 130).map(lambda k: k * n)))
    return Mem(base, index, scale if index is not None else 1, disp)


@st.composite
def _operands(draw, form):
    if form.openc == "RMV":                 # AMX tile products: three different tiles
        return tuple(draw(st.permutations(TMM))[:3])
    ops = []
    for i, kinds in enumerate(form.slots):
        choices = []
        if form.openc == "MC" and i == 1:
            ops.append(cl)
            continue
        for k in ("r64", "r32", "r8"):
            if k in kinds:
                choices.append(st.sampled_from({"r64": GPR64, "r32": GPR32, "r8": GPR8}[k]))
        if "k" in kinds:
            choices.append(st.sampled_from(K))
        if "t" in kinds:
            choices.append(st.sampled_from(TMM))
        for v in "xyz":
            lim = 32 if v + "h" in kinds else 16
            if v in kinds:
                choices.append(st.integers(0, lim - 1).map(lambda n, v=v: _VEC_FILE[v][n]))
            if v + "k" in kinds:
                choices.append(st.tuples(st.integers(0, 31), st.integers(1, 7), st.booleans()).map(
                    lambda t, v=v: _VEC_FILE[v][t[0]].masked(K[t[1]], zero=t[2] and form.zero_ok)))
        if any(k.startswith("m") for k in kinds):
            choices.append(_mem(form.mem_n if form.prefix == "evex" else 1, form.sibmem))
        for bits in (16, 32, 64):
            if f"b{bits}" in kinds:
                choices.append(_mem(bits // 8).map(lambda m, bits=bits: m.bcst(bits)))
        imms = _imm_choices(kinds)
        if imms:
            choices.append(st.sampled_from(imms))
        if "rel" in kinds:
            choices.append(st.integers(-128, 127) if form.rel == 1 else st.integers(-2**31, 2**31 - 6))
        ops.append(draw(st.one_of(choices)))
    return tuple(ops)


@st.composite
def _form_and_operands(draw):
    form = draw(st.sampled_from(FORMS))
    return form, draw(_operands(form))


@settings(max_examples=400)
@given(_form_and_operands())
def test_random_operands_against_decoders(case):
    form, ops = case
    _check_form(form, ops)


def _needs_evex(op) -> bool:
    return (isinstance(op, Vec) and (op.num >= 16 or op.mask is not None or op.bits == 512)) or (
        isinstance(op, Mem) and (op.broadcast or op.mask is not None)) or isinstance(op, MaskReg)


@settings(max_examples=300)
@given(_form_and_operands())
def test_assembler_form_choice(case):
    """Through Assembler.emit: the chosen form decodes to the same instruction; EVEX only when needed."""
    form, ops = case
    if form.rel:
        return
    asm = Assembler()
    asm.emit(form.mnemonic, *ops)
    data = asm.bytes()
    chosen = LOOKUP[(form.mnemonic,) + tuple(_kind(o) for o in ops)]
    ins = check_iced(form.mnemonic, ops, data, chosen.prefix, max(chosen.imm, 1))
    if form.prefix in ("vex", "evex") and not form.mnemonic.startswith("k"):
        evex = _CODE[ins.code].startswith("EVEX_")
        kinds = [_kind(o) for o in ops]
        has_vex_row = any(f.mnemonic == form.mnemonic and f.prefix == "vex" and len(f.slots) == len(kinds)
                          and all(k in slot for k, slot in zip(kinds, f.slots)) for f in FORMS)
        assert evex == (any(_needs_evex(o) for o in ops) or not has_vex_row), _CODE[ins.code]


def _kind(op):
    from loopstack.isa.x86.assembler import _kind as k
    return k(op)


# ---------------------------------------------------------------------------------------------
# Golden byte strings, each one corner case
# ---------------------------------------------------------------------------------------------

GOLDEN = [
    ("488B0424",             "mov",          (rax, Mem(rsp))),                 # rsp base needs a SIB byte
    ("498B0424",             "mov",          (rax, Mem(r12))),                 # r12 base: SIB, plus REX.B
    ("488B4500",             "mov",          (rax, Mem(rbp))),                 # rbp base needs disp8 0
    ("498B4500",             "mov",          (rax, Mem(r13))),                 # r13 base needs disp8 0, REX.B
    ("4883C008",             "add",          (rax, 8)),                        # imm8 short form 83 /0
    ("4881C0C8000000",       "add",          (rax, 200)),                      # 200 is no sign-extended imm8
    ("48B89078563412000000", "mov",          (rax, 0x1234567890)),             # imm64 needs B8+r io
    ("C4E26DB8CB",           "vfmadd231ps",  (ymm1, ymm2, ymm3)),              # VEX3: map 0F38
    ("C5F458C2",             "vaddps",       (ymm0, ymm1, ymm2)),              # VEX2: map 0F, W0, no X/B
    ("C4C17458C0",           "vaddps",       (ymm0, ymm1, ymm8)),              # VEX3 because rm needs B
    ("C57458C2",             "vaddps",       (ymm8, ymm1, ymm2)),              # VEX2 still fine with R
    ("62F16C48584801",       "vaddps",       (zmm1, zmm2, Mem(rax, disp=64))),   # disp8*N: 64/64 = 1
    ("62F16C48588841000000", "vaddps",       (zmm1, zmm2, Mem(rax, disp=65))),   # not a multiple of 64: disp32
    ("62F16C58584802",       "vaddps",       (zmm1, zmm2, Mem(rax, disp=8).bcst(32))),  # {1to16}: N = 4
    ("62010C4058FD",         "vaddps",       (zmm31, zmm30, zmm29)),           # R' R X B V' all used
    ("62F16CC958CB",         "vaddps",       (zmm1.masked(k1, zero=True), zmm2, zmm3)),  # {k1}{z}
]


@pytest.mark.parametrize("hexbytes,mnemonic,ops", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden(hexbytes, mnemonic, ops):
    asm = Assembler()
    asm.emit(mnemonic, *ops)
    assert asm.bytes().hex().upper() == hexbytes
    check_iced(mnemonic, ops, bytes.fromhex(hexbytes), imm_bytes=8 if mnemonic == "mov" else 4)


# ---------------------------------------------------------------------------------------------
# Labels and branch relaxation
# ---------------------------------------------------------------------------------------------

def _branches(code: bytes):
    return [(ins.ip, ins.len, ins.near_branch_target, _MNEM[ins.mnemonic])
            for ins in iced.Decoder(64, code, ip=0) if ins.op_count and ins.op_kind(0) == iced.OpKind.NEAR_BRANCH64]


def test_backward_short_jump():
    asm = Assembler()
    top = asm.label("top")
    asm.bind(top)
    for _ in range(10):
        asm.nop()
    asm.jne(top)
    code = asm.bytes()
    assert code[-2:] == bytes([0x75, (-12) & 0xFF])
    assert _branches(code) == [(10, 2, 0, "jne")]


def test_forward_short_jump():
    asm = Assembler()
    end = asm.label("end")
    asm.jmp(end)
    for _ in range(10):
        asm.nop()
    asm.bind(end)
    asm.ret()
    assert asm.bytes()[:2] == b"\xEB\x0A"
    assert end.offset == 12


@pytest.mark.parametrize("gap,size", [(127, 2), (128, 5)])
def test_forward_boundary(gap, size):
    asm = Assembler()
    end = asm.label()
    asm.jmp(end)
    for _ in range(gap):
        asm.nop()
    asm.bind(end)
    code = asm.bytes()
    assert _branches(code) == [(0, size, size + gap, "jmp")]


@pytest.mark.parametrize("gap,size", [(126, 2), (127, 6)])
def test_backward_boundary(gap, size):
    # rel8 reaches back 128 bytes from the end of a 2-byte jcc: 126 nops + 2
    asm = Assembler()
    top = asm.label()
    asm.bind(top)
    for _ in range(gap):
        asm.nop()
    asm.je(top)
    code = asm.bytes()
    assert _branches(code) == [(gap, size, 0, "je")]


def test_relaxation_cascade_reaches_fixed_point():
    # each forward jump spans 125 bytes plus the next jump; growing one pushes the previous out
    asm = Assembler()
    labels = [asm.label() for _ in range(6)]
    for i, lab in enumerate(labels):
        asm.jmp(lab)
        for _ in range(121):
            asm.nop()
        if i:
            asm.bind(labels[i - 1])
    asm.bind(labels[-1])
    asm.ret()
    code = asm.bytes()
    got = _branches(code)
    assert len(got) == 6
    for (ip, ln, target, _), lab in zip(got, labels):
        assert target == lab.offset
        assert ln == (2 if -128 <= target - (ip + 2) <= 127 else 5) or ln == 5
    # decoded lengths cover the whole buffer
    assert sum(i.len for i in iced.Decoder(64, code)) == len(code)


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 60), st.sampled_from(["jmp", "jne", "jl", "ja"])),
                min_size=1, max_size=25))
def test_random_branches_resolve(program):
    """Random jumps forward and backward over random gaps: every target decodes to its label."""
    asm = Assembler()
    labels = [asm.label() for _ in range(6)]
    bound = set()
    for lab_i, gap, mn in program:
        asm.emit(mn, labels[lab_i])
        asm.emit("vfmadd231ps", ymm0, ymm1, Mem(rdi, disp=gap * 4)) if gap % 2 else None
        for _ in range(gap):
            asm.emit("add", rax, 1)
        if lab_i not in bound and gap % 3 == 0:
            asm.bind(labels[lab_i])
            bound.add(lab_i)
    for i, lab in enumerate(labels):
        if i not in bound:
            asm.bind(lab)
    asm.ret()
    code = asm.bytes()
    assert sum(i.len for i in iced.Decoder(64, code)) == len(code)
    want = [lab.offset for lab_i, _, _ in program for lab in [labels[lab_i]]]
    got = _branches(code)
    assert [t for _, _, t, _ in got] == want
    for ip, ln, target, _ in got:
        if ln == 5 or ln == 6:
            assert not -128 <= target - (ip + 2) <= 127 or True


def test_all_conditions_short_and_long():
    from loopstack.isa.x86.forms import CONDITIONS
    for mn in CONDITIONS:
        for gap in (3, 300):
            asm = Assembler()
            lab = asm.label()
            asm.emit(mn, lab)
            for _ in range(gap):
                asm.nop()
            asm.bind(lab)
            (b,) = _branches(asm.bytes())
            assert b[3] == mn and b[2] == lab.offset and b[1] == (2 if gap < 128 else 6)


def test_rip_relative_constant_pool():
    asm = Assembler()
    c = asm.const(bytes(range(32)), align=32)
    one = asm.const_broadcast(1.0)
    assert asm.const_broadcast(1.0) == one             # deduplicated
    skip = asm.label()
    asm.jmp(skip)                                       # a branch before the fixup shifts it
    asm.bind(skip)
    asm.vmovups(ymm0, c)
    asm.vbroadcastss(ymm1, one)
    asm.vaddps(zmm1, zmm2, Mem(RIP, label=one.label).bcst(32))
    asm.ret()
    code = asm.bytes()
    assert c.label.offset % 32 == 0 and code[c.label.offset:c.label.offset + 32] == bytes(range(32))
    assert code[one.label.offset:one.label.offset + 4] == b"\x00\x00\x80\x3f"
    targets = [ins.ip_rel_memory_address for ins in iced.Decoder(64, code[:c.label.offset])
               if ins.is_ip_rel_memory_operand]
    assert targets == [c.label.offset, one.label.offset, one.label.offset]


def test_rip_relative_instructions_kept_per_assembler_match_the_encoders():
    """An instruction reading the constant pool is kept by its assembler and copied when emitted
    again, anywhere in the function (its disp32 is patched after layout); a Mem of another size
    or broadcast on the same constant, or another register, is another instruction."""
    asm = Assembler()
    one = asm.const_broadcast(1.0)
    full = asm.const(bytes(64), align=64)
    program = [("vmaxps", zmm8, zmm8, full.with_bits(512)), ("vaddps", zmm1, zmm2, Mem(RIP, label=one.label).bcst(32)),
               ("vbroadcastss", ymm1, one.with_bits(32)), ("vmaxps", zmm9, zmm8, full.with_bits(512)),
               ("vmaxps", ymm8, ymm8, full.with_bits(256))]
    for round_ in range(3):
        for mnemonic, *ops in program:
            asm.emit(mnemonic, *ops)
        skip = asm.label()
        asm.jmp(skip)                                   # a branch between the rounds moves the rest
        asm.emit("vzeroupper")
        asm.bind(skip)
    asm.ret()
    code = asm.bytes()
    insns = list(iced.Decoder(64, code[:asm.code_size]))
    expected = [full.label.offset, one.label.offset, one.label.offset, full.label.offset, full.label.offset]
    assert [ins.ip_rel_memory_address for ins in insns if ins.is_ip_rel_memory_operand] == expected * 3
    fresh = [encode(LOOKUP[(mn,) + tuple(_kind(o) for o in ops)], *ops) for mn, *ops in program]
    starts = [ins.ip for ins in insns if ins.is_ip_rel_memory_operand]
    for i, start in enumerate(starts):     # the same bytes as the encoder's but for the disp32
        want = fresh[i % len(program)]
        assert code[start:start + len(want) - 4] == want[:-4]


def test_listing_and_len():
    asm = Assembler()
    top = asm.label("loop")
    asm.bind(top)
    asm.emit("vfmadd231ps", ymm0, ymm1, Mem(rdi, rax, 4, 32))
    asm.emit("add", rax, 8)
    asm.emit("cmp", rax, rdx)
    asm.emit("jne", top)
    assert len(asm) == 4
    lines = asm.listing().splitlines()
    assert lines[0] == "loop:"
    assert lines[1].split()[0] == "0" and "vfmadd231ps ymm0, ymm1" in lines[1]
    assert lines[-1].endswith("jne loop") and "75" in lines[-1]


def test_vex_vnni_is_explicit():
    asm = Assembler()
    asm.emit("vpdpbusd", ymm1, ymm2, ymm3)               # EVEX (AVX512_VNNI) unless asked
    asm.emit("vpdpbusd", ymm1, ymm2, ymm3, vex=True)     # AVX-VNNI
    asm.emit("{vex} vpdpbusd", ymm1, ymm2, Mem(rdi))
    code = asm.bytes()
    codes = [_CODE[i.code] for i in iced.Decoder(64, code)]
    assert codes[0].startswith("EVEX_") and codes[1].startswith("VEX_") and codes[2].startswith("VEX_")


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mnemonic,ops,pattern", [
    ("vaddps", (ymm0, zmm1, ymm2), r"vaddps.*\(ymm, zmm, ymm\)"),
    ("add", (rax, xmm0), r"'add'.*xmm"),
    ("vblendvps", (ymm1.masked(k1), ymm2, ymm3, ymm0), r"vblendvps.*ymm\{k\}"),
    ("vfrobnicate", (ymm0,), r"unknown mnemonic 'vfrobnicate'"),
    ("shl", (rax, GPR8[2]), r"shl.*cl"),
    ("mov", (rax, Mem(rax, rsp)), r"index"),
    ("vmovups", (Mem(rdi), ZMM[0].masked(k1, zero=True)), r"vmovups"),
    ("vaddps", (ymm0, ymm1, Mem(rax, disp=2**31)), r"32 bits"),
    ("add", (rax, 2**70), r"add"),
    ("jmp", (ymm0,), r"jmp"),
    ("vaddps", (zmm1.masked(K[0]), zmm2, zmm3), r"k0"),
])
def test_errors(mnemonic, ops, pattern):
    asm = Assembler()
    with pytest.raises(EncodingError, match=pattern):
        asm.emit(mnemonic, *ops)
    assert asm.bytes() == b""                          # a failed instruction leaves nothing behind


def test_unbound_label():
    asm = Assembler()
    asm.jmp(asm.label("nowhere"))
    with pytest.raises(EncodingError, match="nowhere"):
        asm.bytes()


def test_bind_twice():
    asm = Assembler()
    lab = asm.label("x")
    asm.bind(lab)
    with pytest.raises(EncodingError, match="bound twice"):
        asm.bind(lab)


def test_getattr_sugar():
    asm = Assembler()
    asm.and_(rax, rcx)
    asm.vxorps(ymm0, ymm0, ymm0)
    with pytest.raises(AttributeError):
        asm.not_an_instruction
    assert len(asm) == 2
    assert isinstance(Label("x"), Label) and xmm0.bits == 128 and r8.num == 8 and k2.num == 2


# ---------------------------------------------------------------------------------------------
# Kept instructions and memory templates: an instruction seen before (same registers, same memory
# fields) is copied from what was kept, one new only in its displacement is made from its memory
# template with the displacement spliced in; both must match the encoders exactly
# ---------------------------------------------------------------------------------------------

@settings(max_examples=300)
@given(_form_and_operands(), st.lists(_DISPS, min_size=1, max_size=4))
def test_templates_match_encoders(case, disps):
    form, ops = case
    if form.rel:
        return
    chosen = LOOKUP[(form.mnemonic,) + tuple(_kind(o) for o in ops)]
    # the same shape again with other displacements: the second and later emits use the template
    variants = [ops] + [tuple(Mem(o.base, o.index, o.scale, d, o.bits, o.broadcast, o.label, o.mask)
                              if isinstance(o, Mem) else o for o in ops) for d in disps]
    for v in variants:
        try:
            want = encode(chosen, *v)
        except EncodingError as e:
            with pytest.raises(EncodingError, match=re.escape(str(e))):
                Assembler().emit(form.mnemonic, *v)
            continue
        asm = Assembler()
        asm.emit(form.mnemonic, *v)
        asm.emit(form.mnemonic, *v)
        assert asm.bytes() == want * 2, (v, asm.bytes().hex(), want.hex())


def _replaced(m: Mem, **changes) -> Mem:
    """A new Mem with the fields of `m` but for `changes`."""
    return Mem(**{f: changes.get(f, getattr(m, f)) for f in Mem.__match_args__})


def test_mem_is_a_value():
    m = Mem(rdi, rax, 4, 64, 512, False, None, k1)
    assert m == _replaced(m) and hash(m) == hash(_replaced(m)) and m is not _replaced(m)
    assert m != _replaced(m, disp=0) and m != (rdi, rax, 4, 64, 512, False, None, k1)
    assert pickle.loads(pickle.dumps(m)) == m and {m: 1}[Mem(rdi, rax, 4, 64, 512, mask=k1)] == 1
    assert repr(Mem(rdi, disp=8)) == ("Mem(base=Gpr(num=7, bits=64), index=None, scale=1, disp=8, bits=None, "
                                      "broadcast=False, label=None, mask=None)")
    assert (m + 8).disp == 72 and m.with_bits(256).bits == 256 and m.bcst(32).broadcast and m.masked(k2).mask == k2


def test_template_codes_and_shapes():
    """One code per interned register; a Mem's shape changes with every field but the
    displacement, is never a register code, and stands for values, not objects."""
    regs = GPR64 + GPR32 + GPR8 + XMM + YMM + ZMM + K
    codes = {r._template_code for r in regs}
    assert len(codes) == len(regs) and None not in codes
    assert Vec(3, 256)._template_code is None and Vec(3, 256).masked(k1)._template_code is None
    assert ymm3.masked(MaskReg(1))._template_code is None
    # a masked interned register is interned with a code of its own, one per (register, k, {z})
    masked = [r.masked(k, z) for r in (ymm3, zmm3, zmm17, xmm3) for k in (k1, k2) for z in (False, True)]
    masked_codes = {m._template_code for m in masked}
    assert len(masked_codes) == len(masked) and not masked_codes & codes and None not in masked_codes
    assert all(r.masked(k, z) is r.masked(k, z) for r in (zmm3, ymm3) for k in (k1, k7) for z in (False, True))
    assert zmm3.masked(k1) == Vec(3, 512, k1) and zmm3.masked(k1, True) == Vec(3, 512, k1, True)
    base = Mem(rdi, rax, 4, 64, 512, False, None, k1)
    others = [_replaced(base, **{field: value}) for field, value in (
        ("base", rsi), ("index", rcx), ("index", None), ("scale", 8), ("bits", 256), ("bits", None),
        ("broadcast", True), ("mask", k2), ("mask", None))]
    shapes = [m._template_shape for m in [base] + others]
    assert len(set(shapes)) == len(shapes) and not set(shapes) & codes and NOT_TEMPLATED not in shapes
    assert _replaced(base, disp=-8)._template_shape == shapes[0]
    assert (base + 8)._template_shape == shapes[0]
    assert pickle.loads(pickle.dumps(base))._template_shape == shapes[0]
    for m in (Mem(RIP, disp=8), Mem(None, rax, 8), Mem(Gpr(7)), Mem(eax), Mem(ymm3), Mem(rdi, disp=1.0),
              Mem(rdi, rax, 2.0), Mem(rdi, rax, True), Mem(rdi, bits=64.0), Mem(rdi, rax, 3), Mem(rdi, rsp),
              Mem(rdi, Gpr(0)), Mem(rdi, mask=MaskReg(1)), Mem(rdi, mask=ymm1), Mem(rdi, bits=100),
              Mem(rdi, scale=[1])):
        assert m._template_shape == NOT_TEMPLATED, m


def test_kept_instructions_follow_operand_values():
    """Emitted again and again, with equal operands made anew and with one field changed at a
    time: every copy gives the encoders' bytes and its own listing line."""
    m = Mem(rdi, rax, 4, 64)
    cases = [
        ("vfmadd231ps", (zmm1, zmm2, m.bcst(32))),
        ("vfmadd231ps", (zmm1, zmm2, m)),
        ("vfmadd231ps", (zmm1, zmm2, Mem(rdi, rax, 8, 64).bcst(32))),
        ("vfmadd231ps", (zmm1, zmm2, Mem(rdi, rcx, 4, 64).bcst(32))),
        ("vfmadd231ps", (zmm1, zmm2, Mem(rsi, rax, 4, 64).bcst(32))),
        ("vfmadd231ps", (zmm1, zmm2, (m + 4).bcst(32))),
        ("vfmadd231ps", (zmm1, zmm2, (m + -128).bcst(32))),
        ("vfmadd231ps", (Vec(1, 512), zmm2, m.bcst(32))),
        ("vfmadd231ps", (zmm1.masked(k1), zmm2, m.bcst(32))),
        ("vfmadd231ps", (ymm1, ymm2, m)),
        ("vfmadd231ps", (ymm1, ymm2, Mem(rdi, rax, 2.0, 64))),
        ("vmovups", (m.masked(k1), zmm0)),
        ("vmovups", (m.masked(k2), zmm0)),
        ("vmovups", (m, zmm0)),
        ("vmovups", (m.with_bits(512), zmm0)),
        ("vmovups", (ymm3, m)),
        ("vmaskmovps", (m, ymm1, ymm2)),
        ("add", (rax, 8)), ("add", (rax, 200)), ("add", (rcx, 8)), ("add", (Mem(rsp, disp=8, bits=64), 8)),
        ("imul", (rax, Mem(rdi, disp=8), 3)), ("imul", (rax, Mem(rdi, disp=16), 3)),
        ("inc", (Mem(rdi, disp=8, bits=64),)), ("push", (rbx,)), ("vzeroupper", ()),
    ]
    asm = Assembler()
    want = b""
    for _ in range(3):                      # the first round encodes, later ones find what was kept
        for mnemonic, ops in cases:
            ops = tuple(_replaced(o) if isinstance(o, Mem) else o for o in ops)
            asm.emit(mnemonic, *ops)
            want += encode(LOOKUP[(mnemonic,) + tuple(_kind(o) for o in ops)], *ops)
    assert asm.bytes() == want
    texts = [line[6 + 2 + 36 + 2:] for line in asm.listing().splitlines()]     # offset, bytes, text
    want_texts = [mn + (" " + ", ".join(map(format_operand, ops)) if ops else "") for mn, ops in cases]
    assert texts == want_texts * 3


def test_code_size():
    asm = Assembler()
    c = asm.const(bytes(range(32)), align=32)
    top = asm.label("top")
    asm.bind(top)
    asm.vmovups(ymm0, c)
    for _ in range(40):
        asm.vfmadd231ps(ymm1, ymm2, Mem(rdi, rax, 4, 0x1000))
    asm.add(rax, 8)
    asm.jne(top)                                        # relaxed to rel32: 40 x 8 bytes back
    asm.ret()
    code = asm.bytes()
    n = asm.code_size
    assert n == len(asm.bytes()[:c.label.offset].rstrip(b"\xcc"))
    assert sum(i.len for i in iced.Decoder(64, code[:n])) == n
    assert code[n - 1] == 0xC3 and set(code[n:c.label.offset]) <= {0xCC}
    plain = Assembler()
    plain.ret()
    assert plain.code_size == len(plain.bytes()) == 1


# ---------------------------------------------------------------------------------------------
# AMX: every tile form byte for byte against llvm-mc (LLVM 11+ assembles them); iced above
# ---------------------------------------------------------------------------------------------

_AMX_CASES = [
    ("ldtilecfg", (Mem(rdi),), "ldtilecfg (%rdi)"),
    ("ldtilecfg", (Mem(r12, disp=64),), "ldtilecfg 64(%r12)"),
    ("sttilecfg", (Mem(rsp, disp=-8),), "sttilecfg -8(%rsp)"),
    ("tilerelease", (), "tilerelease"),
    ("tilezero", (TMM[0],), "tilezero %tmm0"),
    ("tilezero", (TMM[7],), "tilezero %tmm7"),
    ("tileloadd", (TMM[1], Mem(rdi, rax, 1, 64)), "tileloadd 64(%rdi,%rax), %tmm1"),
    ("tileloadd", (TMM[6], Mem(r13, GPR64[9], 1)), "tileloadd (%r13,%r9), %tmm6"),
    ("tileloaddt1", (TMM[2], Mem(rsp, GPR64[15], 1, 0x1000)), "tileloaddt1 4096(%rsp,%r15), %tmm2"),
    ("tilestored", (Mem(GPR64[9], GPR64[10], 1), TMM[7]), "tilestored %tmm7, (%r9,%r10)"),
    ("tilestored", (Mem(rcx, rdx, 1, -128), TMM[4]), "tilestored %tmm4, -128(%rcx,%rdx)"),
    ("tdpbusd", (TMM[0], TMM[4], TMM[6]), "tdpbusd %tmm6, %tmm4, %tmm0"),
    ("tdpbssd", (TMM[3], TMM[5], TMM[7]), "tdpbssd %tmm7, %tmm5, %tmm3"),
    ("tdpbsud", (TMM[1], TMM[2], TMM[0]), "tdpbsud %tmm0, %tmm2, %tmm1"),
    ("tdpbuud", (TMM[7], TMM[0], TMM[1]), "tdpbuud %tmm1, %tmm0, %tmm7"),
    ("tdpbf16ps", (TMM[2], TMM[3], TMM[4]), "tdpbf16ps %tmm4, %tmm3, %tmm2"),
]


def _llvm_mc_encodings(lines: list[str]) -> list[bytes]:
    """llvm-mc's bytes for each line of AT&T assembly (the test skips where llvm-mc is missing)."""
    import shutil
    import subprocess
    llvm_mc = shutil.which("llvm-mc")
    if llvm_mc is None:
        pytest.skip("llvm-mc is not on the PATH (apt-get install llvm)")
    out = subprocess.run([llvm_mc, "-triple=x86_64", "-show-encoding"], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True).stdout
    want = [bytes(int(b, 16) for b in re.findall(r"0x([0-9a-f]{2})", line.split("encoding:")[1]))
            for line in out.splitlines() if "encoding:" in line]
    assert len(want) == len(lines)
    return want


def test_amx_forms_against_llvm_mc():
    want = _llvm_mc_encodings([t for _, _, t in _AMX_CASES])
    for (mnemonic, ops, text), expected in zip(_AMX_CASES, want):
        asm = Assembler()
        asm.emit(mnemonic, *ops)
        assert asm.bytes() == expected, (text, asm.bytes().hex(), expected.hex())
        check_iced(mnemonic, ops, expected, "vex")


def test_prefetchw_against_llvm_mc():
    """prefetchw (the tile blocks ask for their output lines with it): byte for byte against
    llvm-mc, decoded by iced."""
    cases = [(Mem(rcx, disp=64, bits=8), "prefetchw 64(%rcx)"),
             (Mem(r13, disp=0x4000, bits=8), "prefetchw 16384(%r13)"),
             (Mem(rsp, disp=-8, bits=8), "prefetchw -8(%rsp)")]
    for (mem, text), expected in zip(cases, _llvm_mc_encodings([t for _, t in cases])):
        asm = Assembler()
        asm.emit("prefetchw", mem)
        assert asm.bytes() == expected, (text, asm.bytes().hex(), expected.hex())
        check_iced("prefetchw", (mem,), expected, "legacy")


def test_tile_product_needs_three_tiles():
    with pytest.raises(EncodingError, match="three tiles must differ"):
        Assembler().emit("tdpbusd", TMM[0], TMM[1], TMM[0])


def test_tile_memory_needs_a_stride_register():
    for mnemonic, ops in (("tileloadd", (TMM[0], Mem(rdi, disp=64))), ("tilestored", (Mem(rsp), TMM[1])),
                          ("tileloaddt1", (TMM[2], Mem(RIP, disp=8)))):
        with pytest.raises(EncodingError, match="row stride"):
            Assembler().emit(mnemonic, *ops)
