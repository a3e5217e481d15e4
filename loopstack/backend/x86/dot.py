"""x86 implementations of the tensorized dot-product instructions (backend.tensorize.registry).

`emit_dot(asm, instr, acc, a, b, scratch)` adds `instr`'s dot product of the bytes in `a` and
`b` to the int32 lanes of `acc`, in registers the caller owns. The registry entry decides what
is emitted; this module only spells it:
  - `vpdpbusd` (AVX512_VNNI, EVEX) and `{vex} vpdpbusd` (AVX-VNNI): one instruction;
    `b` may also be memory (the r/m operand).
  - the exact AVX2 path on pairs of 16-bit values (`avx2.dot.s16`, operands widened when they
    were packed and staged): `vpmaddwd t, a, b` and `vpaddd acc, acc, t`; `b` may be memory.
  - the exact AVX2 path on bytes (`avx2.dot.u8s8`, `.s8s8`): bytes are widened to 16 bits
    inside each 16-bit word (even bytes by masking or shifting up and back, odd bytes by
    shifting down; zero- or sign-extended per operand dtype) and multiplied with two
    `vpmaddwd`, whose int32 sums of two products of 8-bit values cannot overflow.
`vpmaddubsw` is never used: its int16 sums saturate (255 x 127 + 255 x 127 > 32767).
"""
from __future__ import annotations

from ...errors import UnsupportedError
from ...isa.x86.operands import Vec

def emit_dot(asm, instr, acc: Vec, a: Vec, b, scratch: list[Vec], byte_mask=None) -> None:
    """`acc += dot(a, b)` as `instr` defines it. `byte_mask` (the widening path, unsigned `a` only: a
    register or memory) holds 0x00FF in every 16-bit word; `scratch` gives `instr.scratch` free
    registers."""
    if instr.isa != "x86_64":
        raise UnsupportedError(f"{instr.name} is not an x86 instruction")
    if instr.mnemonic == "vpdpbusd":
        asm.emit("vpdpbusd", acc, a, b)
    elif instr.mnemonic == "{vex} vpdpbusd":
        asm.emit("vpdpbusd", acc, a, b, vex=True)
    elif instr.mnemonic == "vpmaddwd" and instr.k == 2:
        if len(scratch) < 1:
            raise UnsupportedError(f"{instr.name} needs a scratch register for its products")
        asm.emit("vpmaddwd", scratch[0], a, b)
        asm.emit("vpaddd", acc, acc, scratch[0])
    elif instr.mnemonic == "vpmaddwd":
        _avx2_dot(asm, instr, acc, a, b, scratch, byte_mask)
    else:
        raise UnsupportedError(f"no x86 implementation of {instr.name} ({instr.mnemonic})")


def _widen(asm, src: Vec, even: Vec, odd: Vec, signed: bool, byte_mask) -> None:
    """Bytes 0, 2 of each 32-bit lane into the 16-bit words of `even`, bytes 1, 3 into `odd`."""
    if signed:
        asm.emit("vpsllw", even, src, 8)
        asm.emit("vpsraw", even, even, 8)
        asm.emit("vpsraw", odd, src, 8)
    else:
        if byte_mask is None:
            raise UnsupportedError("the AVX2 dot of unsigned bytes needs the 0x00FF word mask register")
        asm.emit("vpandd" if src.bits == 512 else "vpand", even, src, byte_mask)
        asm.emit("vpsrlw", odd, src, 8)


def _avx2_dot(asm, instr, acc, a, b, scratch, byte_mask) -> None:
    if len(scratch) < instr.scratch:
        raise UnsupportedError(f"{instr.name} needs {instr.scratch} scratch registers")
    if not isinstance(b, Vec):
        raise UnsupportedError(f"{instr.name} reads both operands from registers")
    a_dtype, b_dtype, _ = instr.dtypes()
    ae, ao, be, bo = scratch[:4]
    _widen(asm, a, ae, ao, a_dtype == "int8", byte_mask)
    _widen(asm, b, be, bo, b_dtype == "int8", byte_mask)
    asm.emit("vpmaddwd", ae, ae, be)
    asm.emit("vpmaddwd", ao, ao, bo)
    asm.emit("vpaddd", acc, acc, ae)
    asm.emit("vpaddd", acc, acc, ao)


def probe_chains(instr) -> int:
    """Independent accumulators of `instr`'s probe: 12 for the one-instruction forms and the pairs
    path (whose one scratch register every chain shares); 8 for the byte-widening path, whose
    four scratch registers take the rest of the 16."""
    return 8 if instr.scratch > 1 else 12


def dot_probe_code(instr) -> bytes:
    """`void probe(int64_t n)`: n iterations of `probe_chains(instr)` independent accumulators
    updated by `instr` — the int8 peak this CPU reaches with that instruction."""
    from ...isa.x86.assembler import Assembler
    from ...isa.x86.operands import YMM, ZMM, rdi

    regs = {512: ZMM, 256: YMM}[instr.vector_bits]
    chains = probe_chains(instr)
    asm = Assembler()
    asm.emit("vzeroall")                 # zero sources: the sums stay 0, no data dependence on memory
    a, b = regs[chains], regs[chains + 1]
    scratch = [regs[chains + 2 + i] for i in range(instr.scratch)]
    mask = asm.const(bytes([0xFF, 0x00]) * (instr.vector_bits // 16), align=instr.vector_bits // 8)
    top = asm.label("loop")
    asm.bind(top)
    for i in range(chains):
        emit_dot(asm, instr, regs[i], a, b, scratch, mask.with_bits(instr.vector_bits))
    asm.emit("dec", rdi)
    asm.emit("jne", top)
    asm.emit("vzeroupper")
    asm.emit("ret")
    return asm.bytes()
