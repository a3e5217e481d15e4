"""The x86 form table is built per mnemonic on first use: the same lookups as building it whole;
and the operand copies the code generator makes are the operands it would build."""
import itertools
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from loopstack.isa.x86 import forms
from loopstack.isa.x86.assembler import Assembler
from loopstack.isa.x86.operands import GPR64, RIP, K, Gpr, Mem, rax, rdi, ymm0, ymm1


def _eager_lookup():
    """The whole table built at once from the rows: first row wins, VEX beats EVEX, aliases copied."""
    lookup = {}
    for f in (forms.parse_form(r) for r in forms._ROWS):
        for kinds in itertools.product(*f.slots):
            old = lookup.get((f.mnemonic,) + kinds)
            if old is None or (old.prefix == "evex" and f.prefix == "vex"):
                lookup[(f.mnemonic,) + kinds] = f
    for alias, target in forms.ALIASES.items():
        for key in [k for k in lookup if k[0] == target]:
            lookup[(alias,) + key[1:]] = lookup[key]
    return lookup


def test_per_mnemonic_signatures_are_the_whole_table():
    eager = _eager_lookup()
    lazy = {(m,) + kinds: f for m in forms.MNEMONICS for kinds, f in forms.signatures_of(m).items()}
    assert lazy == eager
    assert forms.LOOKUP == eager
    assert forms.MNEMONICS == frozenset(k[0] for k in eager)
    assert forms.FORMS == tuple(forms.parse_form(r) for r in forms._ROWS)
    assert forms.signatures_of("nosuch") == {} and forms.forms_of("nosuch") == ()


def test_assembling_builds_only_the_mnemonics_it_uses():
    # a fresh interpreter: nothing has asked for the whole table yet
    code = ("from loopstack.isa.x86 import forms, assembler as a\n"
            "from loopstack.isa.x86.operands import Mem, rdi, ymm0, ymm1\n"
            "asm = a.Assembler(); asm.emit('vfmadd231ps', ymm0, ymm1, Mem(rdi, disp=32)); asm.emit('ret')\n"
            "asm.bytes()\n"
            "print(sorted(a._TABLE_MNEMONICS), 'FORMS' in vars(forms), forms.forms_of.cache_info().currsize)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:2] == ["['ret',", "'vfmadd231ps']"]
    assert out[2] == "False" and int(out[3]) == 2


def test_lazy_entries_encode_like_before():
    asm = Assembler()
    asm.emit("vfmadd231ps", ymm0, ymm1, Mem(rdi, disp=32))
    top = asm.label("top")
    asm.bind(top)
    asm.emit("add", rax, 8)
    asm.emit("jz", top)                      # an alias of je: its branch forms come from je's rows
    asm.emit("ret")
    assert asm.bytes().hex() == "c4e275b84720" + "4883c008" + "74fa" + "c3"


_BASES = st.sampled_from(list(GPR64) + [None, RIP, Gpr(3)])
_INDEXES = st.sampled_from([None] + list(GPR64) + [Gpr(5)])
_SIZES = st.sampled_from([None, 8, 16, 32, 64, 128, 256, 512, 24, True, 8.0])


@settings(max_examples=300)
@given(_BASES, _INDEXES, st.sampled_from([1, 2, 4, 8, 3]), st.sampled_from([0, 8, -64, 1 << 20, 2.0]), _SIZES,
       st.booleans(), st.sampled_from([None, K[1], K[7]]), _SIZES)
def test_with_bits_is_the_mem_built_with_those_bits(base, index, scale, disp, bits, bcst, mask, new_bits):
    """Mem.with_bits copies the template shape with the size field replaced: the same operand,
    the same template shape (the assembler's key for kept encodings) as Mem(...) builds."""
    m = Mem(base, index, scale, disp, bits, bcst, None, mask)
    got, want = m.with_bits(new_bits), Mem(base, index, scale, disp, new_bits, bcst, None, mask)
    assert got == want and got.bits is new_bits
    assert got._template_shape == want._template_shape
