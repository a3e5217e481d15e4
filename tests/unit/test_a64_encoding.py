"""AArch64 encodings checked against two oracles nobody here wrote: LLVM's assembler and capstone.

* Every form of the table (every row x arrangement x optional operand) is drawn three times with
  random registers and immediates, and twice more with every register and immediate at the largest
  and at the smallest value its field holds; all of them go through ONE `llvm-mc --show-encoding` run and
  must come back byte for byte. The same run assembles capstone's disassembly of our bytes, which
  must give the bytes again (capstone read the instruction we meant, aliases and all).
* Hypothesis draws more operands, decoded by capstone in-process: one 4-byte instruction whose
  registers are ours, in order.
* Out-of-range fields, wrong kinds and UNPREDICTABLE register choices raise EncodingError naming
  the field and its range.
"""
from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from a64_samples import all_samples, extreme_samples, llvm_text, sample  # noqa: E402

from loopstack.errors import EncodingError  # noqa: E402
from loopstack.isa.aarch64.assembler import Assembler  # noqa: E402
from loopstack.isa.aarch64.encode import FORMS, encode, format_instruction  # noqa: E402
from loopstack.isa.aarch64.forms import CONDITIONS, ROWS  # noqa: E402
from loopstack.isa.aarch64.immediates import (decode_bitmask, encode_bitmask, encode_fp_imm8,  # noqa: E402
                                              fp_imm8_value, move_wide_sequence, move_wide_value)
from loopstack.isa.aarch64.operands import (LSL, SP, XZR, Label, Mem, V, W, X)  # noqa: E402

pytestmark = pytest.mark.aarch64

capstone = pytest.importorskip("capstone")
_CS = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
LLVM_MC = shutil.which("llvm-mc")
SEED = 2026
_BRANCH_BASE = 0x10000         # capstone prints branch targets as addresses: decode at a base


def _capstone_one(word: int, address: int = 0):
    data = word.to_bytes(4, "little")
    insns = list(_CS.disasm(data, address))
    assert len(insns) == 1 and insns[0].size == 4, f"capstone cannot decode {data.hex()}"
    return insns[0]


def _capstone_text(insn, address: int, word: int) -> str:
    """capstone's text, with an absolute branch target turned back into the offset llvm-mc takes."""
    text = f"{insn.mnemonic} {insn.op_str}"
    if insn.mnemonic == "mov" and (word >> 23) & 0xFF == 0x64 and "#" in text:
        # `mov x4, #-0x3ff1` is both orr x4, xzr, #... and a movn; llvm-mc picks movn: spell out the orr
        reg, imm = insn.op_str.split(", ")
        return f"orr {reg}, {'wzr' if reg.startswith('w') else 'xzr'}, {imm}"
    if insn.mnemonic == "brk":      # capstone 5 prints brk's imm16 as signed
        return f"brk #{int(insn.op_str.lstrip('#'), 0) & 0xFFFF}"
    if insn.mnemonic.startswith(("b", "cb", "adr", "ldr")) and re.search(r"#0x[0-9a-f]+$", text) \
            and "[" not in text:
        target = int(text.rsplit("#", 1)[1], 16)
        text = text.rsplit("#", 1)[0] + f"#{target - address}"
    return text


def _branch_samples(rng: random.Random):
    """(llvm text, word) for every label form, the label 64 words either side."""
    out = []
    for (mnemonic, kinds), form in FORMS.items():
        if form.reloc is None:
            continue
        for _ in range(3):
            asm = Assembler()
            lbl = asm.label()
            before = rng.randrange(64)
            after = rng.randrange(64)
            back = rng.random() < 0.5
            for _ in range(before):
                asm.nop()
            if back:
                asm.bind(lbl)
            at = len(asm)
            ops = sample(mnemonic, kinds, form, rng, lbl)
            asm.emit(mnemonic, *ops)
            for _ in range(after):
                asm.nop()
            if not back:
                asm.bind(lbl)
            asm.nop()
            word = int.from_bytes(asm.bytes()[4 * at:4 * at + 4], "little")
            delta = lbl.position - 4 * at
            text = format_instruction(mnemonic, ops).replace(lbl.name, f"#{delta}")
            out.append((text, word))
    return out


@pytest.fixture(scope="module")
def llvm_batch():
    """One llvm-mc run: our text of every sample, then capstone's text of every sample's bytes."""
    if LLVM_MC is None:
        pytest.skip("llvm-mc is not on the PATH (apt-get install llvm)")
    rng = random.Random(SEED)
    drawn = all_samples(rng, per_form=3) + extreme_samples()     # random, and each field at its ends
    ours = [(llvm_text(m, ops), encode(m, ops)[0]) for m, ops in drawn if encode(m, ops)[1].reloc is None]
    ours += _branch_samples(rng)
    theirs = []
    for text, word in ours:
        address = _BRANCH_BASE
        theirs.append((_capstone_text(_capstone_one(word, address), address, word), word))
    lines = [t for t, _ in ours + theirs]
    proc = subprocess.run([LLVM_MC, "-triple=aarch64", "-mattr=+neon,+fullfp16,+dotprod", "--show-encoding"],
                          input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    errors = {int(n) for n in re.findall(r"<stdin>:(\d+):\d+: error", proc.stderr)}
    encodings = iter(re.findall(r"encoding: \[([^\]]*)\]", proc.stdout))
    results = []
    for lineno, (text, word) in enumerate(ours + theirs, 1):
        got = None if lineno in errors else bytes(int(b, 16) for b in next(encodings).split(","))
        results.append((text, word, got))
    return results[:len(ours)], results[len(ours):], proc.stderr


def _mismatches(results):
    return [f"{text}: ours {word.to_bytes(4, 'little').hex()}, llvm-mc "
            f"{got.hex() if got is not None else 'rejects it'}"
            for text, word, got in results if got != word.to_bytes(4, "little")]


def test_every_form_matches_llvm_mc(llvm_batch):
    ours, _, stderr = llvm_batch
    bad = _mismatches(ours)
    assert not bad, f"{len(bad)} of {len(ours)} differ:\n" + "\n".join(bad[:40]) + "\n" + stderr[:2000]
    assert len(ours) >= 3 * len(FORMS) * 0.9


def test_capstone_reads_what_we_meant(llvm_batch):
    """capstone's disassembly of our bytes, assembled by llvm-mc, is our bytes again."""
    _, theirs, stderr = llvm_batch
    bad = _mismatches(theirs)
    assert not bad, f"{len(bad)} of {len(theirs)} differ:\n" + "\n".join(bad[:40]) + "\n" + stderr[:2000]


def test_samples_cover_every_form():
    rng = random.Random(SEED)
    lbl = Label("t")
    drawn = {(m, tuple(_kind_of(o) for o in ops)) for m, ops in all_samples(rng, per_form=1, label=lbl)}
    missing = [k for k in FORMS if k not in drawn and not _never_encodable(k)]
    assert not missing, missing[:20]


def _never_encodable(key) -> bool:
    """`ldp xzr, xzr, ...` loads one register twice: UNPREDICTABLE, so no operands encode."""
    return key[0] == "ldp" and key[1][:2] in (("xzr", "xzr"), ("wzr", "wzr"))


def _kind_of(o):
    from loopstack.isa.aarch64.encode import operand_kind
    return operand_kind(o)


def test_issue_forms_are_in_the_table():
    have = {row[0] for row in ROWS}
    wanted = """add sub madd mov movz movk ldr str ldp stp b b.eq b.ne cbz cbnz ret ld1 st1 ld1r dup ins
        movi fmla fmls fmul fadd fsub fmax fmin fdiv fneg fabs fsqrt frecpe frecps fcmgt bsl bif faddp
        fmaxp fminp fcvtl fcvtl2 fcvtn fcvtn2 sdot udot fmaxnm fminnm frintn fcvtzs scvtf and orr eor
        ext zip1 zip2 uzp1 uzp2 addp smull sadalp ushr shl prfm subs cmp csel lsl adr""".split()
    assert not [m for m in wanted if m not in have]
    # both by-element and vector fmla, in .4s and .8h
    for ops in ((V(0).s4, V(1).s4, V(2).s4), (V(0).s4, V(1).s4, V(2).s[3]),
                (V(0).h8, V(1).h8, V(2).h8), (V(0).h8, V(1).h8, V(15).h[7])):
        assert encode("fmla", ops)[1].feature in ("ASIMD", "FP16")


# -- hypothesis: capstone in-process ------------------------------------------------------------

_KEYS = sorted((k for k in FORMS if not _never_encodable(k)), key=repr)
_REG = re.compile(r"\b([xwvqdshb])(\d+)\b|\b(sp|xzr|wzr|wsp)\b")


def _registers(text: str) -> list[str]:
    text = re.sub(r"#\S+", "", text)
    return [m.group(0) for m in _REG.finditer(text)]


@given(st.sampled_from(_KEYS), st.randoms(use_true_random=False))
def test_capstone_decodes_drawn_operands(key, rng):
    mnemonic, kinds = key
    lbl = Label("t")
    lbl.position = 0
    for _ in range(50):
        ops = sample(mnemonic, kinds, FORMS[key], rng, lbl)
        try:
            word, form = encode(mnemonic, ops)
            break
        except EncodingError:       # an UNPREDICTABLE draw (ldp x1, x1, ...): draw again
            continue
    insn = _capstone_one(word)
    # as sets: capstone prints the preferred alias, which may leave out a zero register
    # (cset x0, hs for csinc x0, xzr, xzr, lo) but never names one we did not encode
    ours = set(_registers(format_instruction(mnemonic, ops)))
    theirs = set(_registers(insn.op_str))
    assert theirs <= ours and (theirs or not ours), \
        f"{format_instruction(mnemonic, ops)} -> capstone {insn.mnemonic} {insn.op_str}"


# -- movz / movk / movn --------------------------------------------------------------------------

@given(st.integers(0, 2**64 - 1))
def test_mov_imm_sequence_builds_the_value(value):
    seq = move_wide_sequence(value, 64)
    assert move_wide_value(seq, 64) == value
    assert 1 <= len(seq) <= 4
    halves = [(value >> s) & 0xFFFF for s in range(0, 64, 16)]
    # shortest: never longer than either plain strategy
    assert len(seq) <= max(1, sum(h != 0 for h in halves))
    assert len(seq) <= max(1, sum(h != 0xFFFF for h in halves))


@given(st.integers(-2**31, 2**32 - 1))
def test_mov_imm_sequence_32_bit(value):
    seq = move_wide_sequence(value, 32)
    assert move_wide_value(seq, 32) == value & 0xFFFFFFFF
    assert len(seq) <= 2


def test_mov_imm_emits_the_sequence():
    asm = Assembler()
    asm.mov_imm(X(2), 123456789)
    asm.mov_imm(X(3), -2)
    asm.mov_imm(W(4), 0xFFFF0000)
    text = [f"{i.mnemonic} {i.op_str}" for i in _CS.disasm(asm.bytes(), 0)]
    assert text == ["mov x2, #0xcd15", "movk x2, #0x75b, lsl #16", "mov x3, #-2", "mov w4, #-0x10000"]
    with pytest.raises(EncodingError, match="does not fit in 32 bits"):
        asm.mov_imm(W(1), 1 << 32)


# -- logical and fmov immediates: every encodable value round-trips -------------------------------

@pytest.mark.aarch64
@pytest.mark.parametrize("bits, count", [(64, 5334), (32, 1302)])
def test_every_bitmask_immediate_round_trips(bits, count):
    values = set()
    for n in ((0, 1) if bits == 64 else (0,)):
        for immr in range(bits):
            for imms in range(64):
                try:
                    v = decode_bitmask(n, immr, imms, bits)
                except EncodingError:
                    continue
                fields = encode_bitmask(v, bits)
                assert fields is not None and decode_bitmask(*fields, bits) == v, (n, immr, imms)
                values.add(v)
    assert len(values) == count            # the number of distinct logical immediates (Arm ARM)
    for v in (0, (1 << bits) - 1, 0x1234, 5):
        assert encode_bitmask(v, bits) is None


@pytest.mark.aarch64
def test_every_fmov_immediate_round_trips():
    values = {fp_imm8_value(i): i for i in range(256)}
    assert len(values) == 256 and 1.0 in values and -31.0 in values and 0.125 in values
    for v, imm8 in values.items():
        assert encode_fp_imm8(v) == imm8
    for v in (0.0, 33.0, 0.1, float("nan"), "1"):
        assert encode_fp_imm8(v) is None


# -- errors --------------------------------------------------------------------------------------

@pytest.mark.parametrize("mnemonic, ops, message", [
    ("ldr", (V(0).q, Mem(X(1), 65536)), r"ldr q0, \[x1, #65536\]: imm12 0..4095 x16"),
    ("ldr", (V(0).q, Mem(X(1), 4100)), r"imm12 0..4095 x16 \(or imm9 -256..255 unscaled\)"),
    ("ldr", (V(0).q, Mem.pre(X(1), 256)), r"imm9 -256..255"),
    ("ldp", (V(0).q, V(1).q, Mem(X(1), 1024)), r"imm7 -64..63 x16"),
    ("ldp", (X(0), X(0), Mem(X(1), 16)), r"Rt2 != Rt"),
    ("ldr", (X(1), Mem.post(X(1), 8)), r"Rn != Rt"),
    ("add", (X(0), X(1), 4097), r"imm12 0..4095"),
    ("movz", (X(0), 65536), r"imm16 0..65535"),
    ("movz", (W(0), 1, LSL(32)), r"hw lsl #0..16"),
    ("fmla", (V(0).h8, V(1).h8, V(16).h[1]), r"Vm v0..v15"),
    ("ext", (V(0).b16, V(1).b16, V(2).b16, 16), r"imm4 0..15"),
    ("ushr", (V(0).s4, V(1).s4, 0), r"shift 1..32"),
    ("shl", (V(0).h8, V(1).h8, 16), r"shift 0..15"),
    ("ld1", ([V(0).s4, V(2).s4], Mem(X(0))), r"consecutive"),
    ("ld1", ([V(0).s4, V(1).s4], Mem.post(X(0), 16)), r"post-index immediate 32"),
    ("ld1", ([V(0).s4], Mem(X(0), 16)), r"offset 0..0"),
    ("movi", (V(0).d2, 0x1234), r"bytemask"),
    ("fmla", (V(0).s4, V(1).h8, V(2).s4), r"no form of fmla takes \(v.4s, v.8h, v.4s\)"),
    ("add", (X(0), XZR, 1), r"no form of add"),
    ("add", (SP, X(1), X(2)), r"no form of add"),
    ("frobnicate", (X(0),), r"unknown AArch64 mnemonic"),
    ("cset", (X(0), "al"), r"no form of cset"),
    ("and", (X(0), X(1), 0x1234), r"bitmask immediate"),
    ("orr", (W(0), W(1), 0), r"bitmask immediate"),
    ("fmov", (V(0).s4, 0.0), r"fmov immediate .* use movi #0"),
    ("fmov", (V(0).s, 33), r"fmov immediate"),
])
def test_errors_name_the_field(mnemonic, ops, message):
    with pytest.raises(EncodingError, match=message):
        encode(mnemonic, ops)
    with pytest.raises(EncodingError, match=message):
        Assembler().emit(mnemonic, *ops)


def test_operand_constructors_check_ranges():
    for bad in (lambda: X(31), lambda: W(-1), lambda: V(32), lambda: V(0).s[4], lambda: V(0).h[8],
                lambda: V(0).b4[4], lambda: Mem(V(0).q, 0), lambda: Mem(X(0), "8")):
        with pytest.raises(EncodingError):
            bad()


def test_operands_are_interned():
    assert X(3) is X(3) and V(2).s[1] is V(2).s[1] and Mem(X(1), 16) is Mem(X(1), 16)
    assert Mem(X(1), 16) is not Mem.pre(X(1), 16) and LSL(3) is LSL(3)
    assert str(V(3).b4[1]) == "v3.4b[1]" and str(V(3).q) == "q3" and str(Mem.post(X(1), X(2))) == "[x1], x2"


def test_a_bool_or_a_stray_value_is_no_operand():
    with pytest.raises(EncodingError, match="bool"):
        encode("movz", (X(0), True))
    asm = Assembler()
    asm.movz(X(0), 1)                   # True == 1: the kept movz x0, #1 must not accept True
    with pytest.raises(EncodingError, match="bool"):
        asm.movz(X(0), True)
    asm.fmov(V(0).s4, 2)
    with pytest.raises(EncodingError, match="fmov immediate"):
        asm.fmov(V(0).s4, 2.3)
    with pytest.raises(EncodingError, match="not an AArch64 operand"):
        encode("ret", (object(),))


# -- the assembler: labels, fixups, literal pool, listing ----------------------------------------

def test_labels_and_fixups_both_directions():
    asm = Assembler()
    top, done = asm.label("top"), asm.label("done")
    asm.bind(top)
    asm.subs(X(0), X(0), 1)
    asm.emit("b.eq", done)
    asm.cbnz(X(0), top)
    asm.b(top)
    asm.bind(done)
    asm.ret()
    text = [f"{i.mnemonic} {i.op_str}".strip() for i in _CS.disasm(asm.bytes(), 0)]
    assert text == ["subs x0, x0, #1", "b.eq #0x10", "cbnz x0, #0", "b #0", "ret"]
    assert len(asm) == 5


def test_label_errors():
    asm = Assembler()
    lbl = asm.label("nowhere")
    asm.b(lbl)
    with pytest.raises(EncodingError, match="label nowhere is never bound"):
        asm.bytes()
    asm.bind(lbl)
    with pytest.raises(EncodingError, match="already bound"):
        asm.bind(lbl)


@pytest.mark.parametrize("mnemonic, ops, reach", [
    ("b", (), 1 << 27), ("bl", (), 1 << 27), ("b.ne", (), 1 << 20), ("cbz", (X(3),), 1 << 20),
    ("cbnz", (W(7),), 1 << 20), ("ldr", (V(1).q,), 1 << 20), ("ldr", (X(2),), 1 << 20), ("adr", (X(9),), 1 << 20),
])
def test_fixups_at_the_ends_of_their_reach(mnemonic, ops, reach):
    """The label at the farthest offset each side (set directly: no need for megabytes of code),
    decoded by capstone at an address that keeps both targets positive."""
    step = 1 if mnemonic == "adr" else 4
    for delta in (reach - step, -reach):
        asm = Assembler()
        lbl = asm.label("far")
        asm.emit(mnemonic, *ops, lbl)
        asm.bind(lbl)
        lbl.position = delta
        base = 1 << 28
        insn = _capstone_one(int.from_bytes(asm.bytes()[:4], "little"), base)
        assert int(insn.op_str.rsplit("#", 1)[1], 16) == base + delta, (mnemonic, delta, insn.op_str)
        lbl.position = delta + (step if delta > 0 else -step)      # one step further: out of reach
        with pytest.raises(EncodingError, match="reach"):
            asm.bytes()


def test_branch_range_is_checked():
    asm = Assembler()
    far = asm.label("far")
    asm.emit("b.ne", far)
    for _ in range(1 << 18):            # 1 MiB of code: just past b.cond's reach
        asm.word(0xD503201F)
    asm.bind(far)
    with pytest.raises(EncodingError, match="imm19 reaches"):
        asm.bytes()


def test_literal_pool_loads_and_is_shared():
    asm = Assembler()
    c = asm.const(np.arange(4, dtype=np.float32))
    assert asm.const(np.arange(4, dtype=np.float32)) is c
    asm.ldr(V(0).q, c)
    asm.adr(X(9), c)
    asm.ret()
    code = asm.bytes()
    assert c.position % 16 == 0 and c.position >= 12
    assert code[c.position:c.position + 16] == np.arange(4, dtype=np.float32).tobytes()
    insns = list(_CS.disasm(code[:12], 0))
    # capstone prints the target address (decoded at 0), the same for both
    assert insns[0].op_str == f"q0, #{c.position:#x}" and insns[1].op_str == f"x9, #{c.position:#x}"
    listing = asm.listing()
    assert "ldr q0" in listing and "const0" in listing
    asm = Assembler()
    top = asm.label("top")
    asm.bind(top)
    asm.nop()
    asm.b(top)
    assert asm.listing().splitlines()[:2] == ["top:", "     0:  1f 20 03 d5  nop"]


def test_methods_and_align():
    asm = Assembler()
    asm.fmla(V(0).s4, V(1).s4, V(2).s[1])
    asm.b_ne(asm.label("x"))
    asm.bind(asm._labels[0])
    asm.align(16)
    assert len(asm) == 4 and asm.bytes()[:4] == bytes.fromhex("2010a24f")
    with pytest.raises(AttributeError):
        asm.frobnicate


def test_forms_say_whether_they_read_their_destination():
    def rw(mnemonic, *ops):
        return encode(mnemonic, ops)[1].reads_destination
    assert rw("fmla", V(0).s4, V(1).s4, V(2).s[1]) and rw("sdot", V(0).s4, V(1).b16, V(2).b4[0])
    assert rw("bif", V(0).b16, V(1).b16, V(2).b16) and rw("mov", V(0).s[1], V(1).s[0])
    assert rw("ld1", [V(0).s[1]], Mem(X(0))) and rw("movk", X(0), 1) and rw("fcvtn2", V(0).h8, V(1).s4)
    assert not rw("fmul", V(0).s4, V(1).s4, V(2).s4) and not rw("ld1", [V(0).s4], Mem(X(0)))
    assert not rw("mov", V(0).b16, V(1).b16) and not rw("add", X(0), X(1), 1)


def test_all_conditions_have_branches():
    for cond, code in CONDITIONS.items():
        word, form = encode(f"b.{cond}", (Label(),))
        assert word == 0x54000000 | code and form.reloc == "branch19"
