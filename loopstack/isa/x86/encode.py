"""x86-64 encoders: prefix builders, ModRM/SIB/displacement, one encoder per Op/En class.

Layout of one instruction (SDM vol. 2 §2.1, §2.3 VEX, §2.7 EVEX):

    [66/F2/F3] [REX]  opcode...          ModRM [SIB] [disp8|disp32] [imm]     legacy
    C5 xx | C4 xx xx  opcode              ModRM [SIB] [disp]         [imm]     VEX (map implied)
    62 P0 P1 P2       opcode              ModRM [SIB] [disp8*N|32]   [imm]     EVEX

An Op/En class only says which operand goes where (ModRM.reg, VEX.vvvv, ModRM.rm, imm);
the prefix kind says how the register bits are packed. So each class encoder picks the
operands for its roles and calls the prefix encoder of the form (`legacy`, `vex`, `evex`).

Class encoders take (form, buf, operands, prefix encoder); every encoder appends to a caller-owned bytearray and returns None, or the `Mem` whose
rip-relative disp32 needs a label fixup (it is the last 4 bytes before the immediate).

These generic encoders are the reference. The hot path runs `compile_form`'s specialised
closures (end of this file), which give the same bytes and errors in fewer Python calls.
"""
from __future__ import annotations

import functools

from ...errors import EncodingError
from .forms import Form
from .operands import GPR64, RIP, TMM, Gpr, Mem, Vec

_SCALE_BITS = {1: 0, 2: 1, 4: 2, 8: 3}


# ---------------------------------------------------------------------------------------------
# Small pure prefix builders (reference versions; the hot path inlines the same arithmetic)
# ---------------------------------------------------------------------------------------------

def rex(w: int, r: int, x: int, b: int) -> int:
    """REX byte, SDM §2.2.1.

        7   6   5   4   3   2   1   0
      | 0   1   0   0 | W | R | X | B |    R extends ModRM.reg, X SIB.index, B ModRM.rm / SIB.base
    """
    assert w in (0, 1) and r in (0, 1) and x in (0, 1) and b in (0, 1)
    return 0x40 | (w << 3) | (r << 2) | (x << 1) | b


def modrm(mod: int, reg: int, rm: int) -> int:
    """ModRM byte, SDM §2.1.5.

        7   6   5   4   3   2   1   0
      |  mod  |    reg    |    r/m    |    mod 11 = register, 00/01/10 = memory with no/8/32-bit disp
    """
    assert 0 <= mod < 4 and 0 <= reg < 8 and 0 <= rm < 8
    return (mod << 6) | (reg << 3) | rm


def sib(scale: int, index: int, base: int) -> int:
    """SIB byte, SDM §2.1.5 table 2-3: scale 1/2/4/8, index 100 = none, base 101 + mod 00 = disp32."""
    assert scale in _SCALE_BITS and 0 <= index < 8 and 0 <= base < 8
    return (_SCALE_BITS[scale] << 6) | (index << 3) | base


def vex(r: int, x: int, b: int, mmmmm: int, w: int, vvvv: int, l: int, pp: int) -> bytes:
    """VEX prefix, SDM §2.3.5: two bytes when X = B = 0, map 0F and W0, else three.

      C5:  | R̄ | v̄ v̄ v̄ v̄ | L | p p |
      C4:  | R̄ | X̄ | B̄ | m m m m m |   | W | v̄ v̄ v̄ v̄ | L | p p |      (̄ = stored inverted)
    """
    assert all(v in (0, 1) for v in (r, x, b, w, l)) and 0 <= vvvv < 16 and 0 <= pp < 4 and 0 < mmmmm < 32
    if x == 0 and b == 0 and mmmmm == 1 and w == 0:
        return bytes((0xC5, ((r ^ 1) << 7) | ((vvvv ^ 15) << 3) | (l << 2) | pp))
    return bytes((0xC4, ((r ^ 1) << 7) | ((x ^ 1) << 6) | ((b ^ 1) << 5) | mmmmm,
                  (w << 7) | ((vvvv ^ 15) << 3) | (l << 2) | pp))


def evex(r: int, x: int, b: int, r2: int, mmm: int, w: int, vvvv: int, pp: int,
         z: int, ll: int, bcst: int, v2: int, aaa: int) -> bytes:
    """EVEX prefix, SDM §2.7.1 (four bytes, 62 then P0 P1 P2).

      P0: | R̄ | X̄ | B̄ | R̄'| 0 | m m m |     R' = bit 4 of ModRM.reg; X = bit 4 of rm for registers
      P1: | W | v̄ v̄ v̄ v̄ | 1 | p p |
      P2: | z | L'L | b | V̄'| a a a |         z zeroing, b broadcast, V' = bit 4 of vvvv, aaa opmask
    """
    assert all(v in (0, 1) for v in (r, x, b, r2, w, z, bcst, v2)) and 0 <= vvvv < 16
    assert 0 < mmm < 8 and 0 <= pp < 4 and 0 <= ll < 3 and 0 <= aaa < 8
    return bytes((0x62,
                  ((r ^ 1) << 7) | ((x ^ 1) << 6) | ((b ^ 1) << 5) | ((r2 ^ 1) << 4) | mmm,
                  (w << 7) | ((vvvv ^ 15) << 3) | 0x04 | pp,
                  (z << 7) | (ll << 5) | (bcst << 4) | ((v2 ^ 1) << 3) | aaa))


# ---------------------------------------------------------------------------------------------
# ModRM + SIB + displacement for a memory operand
# ---------------------------------------------------------------------------------------------

def modrm_mem(buf: bytearray, reg: int, m: Mem, n: int) -> Mem | None:
    """Append ModRM [SIB] [disp] for memory operand `m` with ModRM.reg = reg & 7.

    `n` is the EVEX disp8*N scale (1 for legacy/VEX, SDM §2.7.5): a displacement that is a
    multiple of N with disp/N in -128..127 is stored as one byte. Returns `m` when a
    rip-relative label needs patching, else None.
    """
    base = m.base
    index = m.index
    disp = m.disp
    reg = (reg & 7) << 3
    if type(base) is not Gpr:
        if base is None:
            # no base: SIB with base 101 and mod 00 means [index*scale + disp32] (SDM table 2-3);
            # ModRM rm 101 alone would be rip-relative in 64-bit mode
            buf.append(0x04 | reg)
            buf.append(_sib_index(m) | 0x05)
            _disp32(buf, disp, m)
            return None
        if base is RIP or base == RIP:
            if index is not None:
                raise EncodingError(f"rip-relative memory cannot have an index: {m}")
            buf.append(0x05 | reg)                    # mod 00, rm 101: [rip + disp32]
            if m.label is not None:
                buf += b"\0\0\0\0"                    # patched by the assembler
                return m
            _disp32(buf, disp, m)
            return None
        raise EncodingError(f"bad memory base {base!r} in {m}")
    if base.bits != 64:
        raise EncodingError(f"memory base must be a 64-bit register, got {base.name} in {m}")
    lo = base.num & 7
    # mod: 00 no disp (not for rbp/r13: rm/base 101 with mod 00 means disp32/rip), 01 disp8, 10 disp32
    mod, disp = _mod_disp(disp, lo, n)
    if index is None and lo != 4:
        buf.append(mod | reg | lo)
    else:
        # rsp/r12 as base (rm 100) always needs a SIB byte, SDM table 2-2 note
        buf.append(mod | reg | 0x04)
        buf.append(_sib_index(m) | lo)
    if mod == 0x40:
        buf.append(disp & 0xFF)
    elif mod == 0x80:
        _disp32(buf, disp, m)
    return None


def _sib_index(m: Mem) -> int:
    """SIB scale and index fields of `m` (index 100 = none)."""
    index = m.index
    if index is None:
        return 0x20
    if type(index) is not Gpr or index.bits != 64 or index.num == 4:
        raise EncodingError(f"bad index register in {m} (rsp cannot be an index)")
    ss = _SCALE_BITS.get(m.scale)
    if ss is None:
        raise EncodingError(f"scale must be 1, 2, 4 or 8 in {m}")
    return (ss << 6) | ((index.num & 7) << 3)


def _disp32(buf: bytearray, disp: int, m: Mem) -> None:
    if not -0x80000000 <= disp <= 0x7FFFFFFF:
        raise EncodingError(f"displacement does not fit in 32 bits: {m}")
    buf += (disp & 0xFFFFFFFF).to_bytes(4, "little")


def _mem_xb(m: Mem) -> tuple[int, int]:
    """(X, B): bit 3 of the index and of the base register."""
    i = m.index
    b = m.base
    return ((i.num >> 3) & 1 if i is not None else 0), (b.num >> 3 if type(b) is Gpr else 0)


def _imm(buf: bytearray, f: Form, imm: int) -> None:
    n = f.imm
    buf += (imm & ((1 << (8 * n)) - 1)).to_bytes(n, "little")


# ---------------------------------------------------------------------------------------------
# Prefix-kind encoders: reg (ModRM.reg number or /digit), v (VEX.vvvv number, 0 if none),
# rm (register or Mem, None for no ModRM), imm (int or None), dst (operand 0, for masking)
# ---------------------------------------------------------------------------------------------

def encode_legacy(f: Form, buf: bytearray, reg: int, v: int, rm, imm, dst) -> Mem | None:
    r = f.rex | ((reg >> 1) & 4)                      # REX.R
    if type(rm) is Mem:
        i = rm.index
        b = rm.base
        if i is not None:
            r |= (i.num >> 2) & 2                      # REX.X
        if type(b) is Gpr:
            r |= b.num >> 3                            # REX.B
    else:
        r |= rm.num >> 3
        if f.byte_regs and 4 <= rm.num < 8 and rm.bits == 8:
            r |= 0x40                                  # spl/bpl/sil/dil, not ah/ch/dh/bh
    if f.byte_regs and 4 <= reg < 8 and f.digit < 0 and (f.openc == "MR" or dst.bits == 8):
        r |= 0x40                                      # ModRM.reg is a byte register (88/8A)
    if f.mandatory:
        buf += f.mandatory
    if r:
        buf.append(r | 0x40)
    buf += f.opcode
    if type(rm) is Mem:
        fix = modrm_mem(buf, reg, rm, 1)
    else:
        buf.append(0xC0 | ((reg & 7) << 3) | (rm.num & 7))
        fix = None
    if imm is not None:
        _imm(buf, f, imm)
    return fix


def encode_vex(f: Form, buf: bytearray, reg: int, v: int, rm, imm, dst) -> Mem | None:
    t = type(rm)
    if t is Mem:
        i = rm.index
        b = rm.base
        xb = ((i.num >> 2) & 2 if i is not None else 0) | (b.num >> 3 if type(b) is Gpr else 0)
    elif rm is None:
        xb = 0
    else:
        xb = rm.num >> 3
    r = (reg >> 3) & 1
    if xb == 0 and f.vex2_ok:
        buf += bytes((0xC5, f.t2 ^ (r << 7) ^ (v << 3), f.opcode[0]))
    else:
        buf += bytes((0xC4, f.t0 ^ (r << 7) ^ (xb << 5), f.t1 ^ (v << 3), f.opcode[0]))
    if rm is None:
        return None
    if t is Mem:
        fix = modrm_mem(buf, reg, rm, 1)
    else:
        buf.append(0xC0 | ((reg & 7) << 3) | (rm.num & 7))
        fix = None
    if imm is not None:
        buf.append(imm & 0xFF)
    return fix


def encode_evex(f: Form, buf: bytearray, reg: int, v: int, rm, imm, dst) -> Mem | None:
    p0 = f.t0 ^ (((reg >> 3) & 1) << 7) ^ (((reg >> 4) & 1) << 4)     # R̄, R̄'
    p1 = f.t1 ^ ((v & 15) << 3)                                      # v̄vvv
    p2 = f.t2 ^ (((v >> 4) & 1) << 3)                                # V̄'
    if type(rm) is Mem:
        i = rm.index
        b = rm.base
        if i is not None:
            p0 ^= ((i.num >> 3) & 1) << 6                            # X̄
        if type(b) is Gpr:
            p0 ^= (b.num >> 3) << 5                                  # B̄
        if rm.broadcast:
            p2 |= 0x10                                               # EVEX.b: {1toN}
            n = f.bcst_n
        else:
            n = f.mem_n
        mk = rm.mask if rm is dst else None
    else:
        rn = rm.num
        p0 ^= (((rn >> 4) & 1) << 6) ^ (((rn >> 3) & 1) << 5)         # X̄ is bit 4 for a register rm
        n = 0
        mk = None
    if type(dst) is Vec:
        mk = dst.mask
        if dst.zeroing:
            if not f.zero_ok:
                raise EncodingError(f"{f.mnemonic} {f.operands}: zeroing-masking {{z}} not allowed here")
            p2 |= 0x80
    if mk is not None:
        if mk.num == 0:                 # aaa = 000 means "no mask" (SDM §2.7.1); k0 is no write mask
            raise EncodingError(f"{f.mnemonic} {f.operands}: k0 cannot be used as a write mask")
        p2 |= mk.num
    buf += bytes((0x62, p0, p1, p2, f.opcode[0]))
    if n:
        fix = modrm_mem(buf, reg, rm, n)
    else:
        buf.append(0xC0 | ((reg & 7) << 3) | (rm.num & 7))
        fix = None
    if imm is not None:
        buf.append(imm & 0xFF)
    return fix


CORES = {"legacy": encode_legacy, "vex": encode_vex, "evex": encode_evex}


# ---------------------------------------------------------------------------------------------
# One encoder per Op/En class (SDM "Instruction Operand Encoding" tables)
# ---------------------------------------------------------------------------------------------

def enc_rm(f, buf, ops, core):      # reg <- r/m
    return core(f, buf, ops[0].num, 0, ops[1], None, ops[0])


def enc_mr(f, buf, ops, core):      # r/m <- reg
    return core(f, buf, ops[1].num, 0, ops[0], None, ops[0])


def enc_rmi(f, buf, ops, core):     # reg <- r/m, imm8
    return core(f, buf, ops[0].num, 0, ops[1], ops[2], ops[0])


def enc_mri(f, buf, ops, core):     # r/m <- reg, imm8 (vextractf128, vcvtps2ph)
    return core(f, buf, ops[1].num, 0, ops[0], ops[2], ops[0])


def enc_mi(f, buf, ops, core):      # r/m, imm with /digit in ModRM.reg
    return core(f, buf, f.digit, 0, ops[0], ops[1], ops[0])


def enc_m(f, buf, ops, core):       # r/m with /digit
    return core(f, buf, f.digit, 0, ops[0], None, ops[0])


def enc_mc(f, buf, ops, core):      # r/m, CL (shift count must be cl)
    if ops[1].num != 1:
        raise EncodingError(f"{f.mnemonic} {f.operands}: the count register must be cl, got {ops[1].name}")
    return core(f, buf, f.digit, 0, ops[0], None, ops[0])


def enc_rvm(f, buf, ops, core):     # reg <- vvvv, r/m
    return core(f, buf, ops[0].num, ops[1].num, ops[2], None, ops[0])


def enc_mvr(f, buf, ops, core):     # r/m <- vvvv, reg (vmaskmovps store)
    return core(f, buf, ops[2].num, ops[1].num, ops[0], None, ops[0])


def enc_rvmi(f, buf, ops, core):    # reg <- vvvv, r/m, imm8
    return core(f, buf, ops[0].num, ops[1].num, ops[2], ops[3], ops[0])


def enc_rvmr(f, buf, ops, core):    # reg <- vvvv, r/m, is4: register number in imm8[7:4] (SDM §2.3.9)
    return core(f, buf, ops[0].num, ops[1].num, ops[2], ops[3].num << 4, ops[0])


def enc_vmi(f, buf, ops, core):     # vvvv <- r/m, imm8 with /digit (vpslld ymm, ymm, imm8)
    return core(f, buf, f.digit, ops[0].num, ops[1], ops[2], ops[0])


def enc_o(f, buf, ops, core):       # opcode + rd: register in the low 3 opcode bits, REX.B
    n = ops[0].num
    if f.rex or n >= 8:
        buf.append(f.rex | 0x40 | (n >> 3))
    buf += f.opcode[:-1]
    buf.append(f.opcode[-1] + (n & 7))
    return None


def enc_oi(f, buf, ops, core):      # opcode + rd, imm32/imm64
    enc_o(f, buf, ops, core)
    _imm(buf, f, ops[1])
    return None


def enc_zo(f, buf, ops, core):      # no operands
    if f.prefix == "vex":
        encode_vex(f, buf, 0, 0, None, None, None)
        buf += f.opcode[1:]           # a fixed ModRM byte (tilerelease: 49 C0)
        return None
    buf += f.opcode
    return None


def enc_r(f, buf, ops, core):       # reg only, ModRM.rm = 000 (tilezero tmm: 11:rrr:000)
    return core(f, buf, ops[0].num, 0, TMM[0], None, ops[0])


def enc_rmv(f, buf, ops, core):     # reg <- r/m, vvvv (AMX tdp*: tmm1, tmm2, tmm3)
    return core(f, buf, ops[0].num, ops[2].num, ops[1], None, ops[0])


def enc_d(f, buf, ops, core):       # branch with a known displacement (the assembler's relaxation uses this)
    rel = ops[0]
    buf += f.opcode
    buf += (rel & ((1 << (8 * f.rel)) - 1)).to_bytes(f.rel, "little")
    return None


ENCODERS = {
    "RM": enc_rm, "MR": enc_mr, "RMI": enc_rmi, "MRI": enc_mri, "MI": enc_mi, "M": enc_m, "MC": enc_mc,
    "RVM": enc_rvm, "MVR": enc_mvr, "RVMI": enc_rvmi, "RVMR": enc_rvmr, "VMI": enc_vmi,
    "O": enc_o, "OI": enc_oi, "ZO": enc_zo, "D": enc_d, "R": enc_r, "RMV": enc_rmv,
}


# ---------------------------------------------------------------------------------------------
# Specialised encoders: the hot path
#
# `compile_form` turns one form into closures: one for a register in the r/m slot, one for
# memory there (the assembler knows which from the operand kinds it looked the form up by),
# and one that gives the bytes of a memory form up to its displacement (the assembler keeps
# those as templates). Each does the work of the class encoder, the prefix encoder and
# `modrm_mem` above in one call, with the form's constant parts (prefix templates, opcode,
# operand roles) bound once: the generic functions cost three or four Python calls and a
# dozen attribute reads per instruction. Anything unusual (memory with a rip, absolute or
# non-interned base or index register, byte registers, the cl check, classes without a
# ModRM byte) goes to the generic functions, which remain the reference: both must give
# identical bytes and identical errors. `encode` runs the specialised closures, so the
# decoder tests of every row check them.
# ---------------------------------------------------------------------------------------------

# Op/En class -> operand index of (ModRM.reg, VEX.vvvv, ModRM.rm, immediate); -1: not an
# operand (ModRM.reg is then the /digit, vvvv is 0, there is no immediate). RVMR's
# "immediate" is the is4 register.
_ROLES = {
    "RM": (0, -1, 1, -1), "MR": (1, -1, 0, -1), "RMI": (0, -1, 1, 2), "MRI": (1, -1, 0, 2),
    "MI": (-1, -1, 0, 1), "M": (-1, -1, 0, -1), "RVM": (0, 1, 2, -1), "MVR": (2, 1, 0, -1),
    "RVMI": (0, 1, 2, 3), "RVMR": (0, 1, 2, 3), "VMI": (-1, 0, 1, 2), "RMV": (0, 2, 1, -1),
}

# Register numbers of the interned 64-bit registers, keyed by id() (they live as long as the
# operands module, so their ids are never reused): one dict lookup both checks that a memory
# base or index is a valid 64-bit register and gives its number. No index is 4 (SIB index
# 100, X = 0); rsp cannot be an index, so it is absent and takes the generic path's error.
BASE_NUM = {id(r): r.num for r in GPR64}
INDEX_NUM = {id(r): r.num for r in GPR64 if r.num != 4}
INDEX_NUM[id(None)] = 4
_base_num = BASE_NUM.get
_index_num = INDEX_NUM.get
_SS = {1: 0x00, 2: 0x40, 4: 0x80, 8: 0xC0}          # SIB.scale, in place


def _mod_disp(disp: int, lo: int, n: int) -> tuple[int, int]:
    """ModRM.mod and the displacement to write: none (not for rbp/r13, whose rm/base 101
    with mod 00 means disp32/rip), disp8 (EVEX: scaled by N, SDM §2.7.5), or disp32."""
    if disp == 0 and lo != 5:
        return 0x00, 0
    if n == 1:
        return (0x40 if -128 <= disp <= 127 else 0x80), disp
    if disp % n == 0 and -128 <= disp // n <= 127:
        return 0x40, disp // n
    return 0x80, disp


def _mem_heads(pre: bytes, reg3: int, lo: int, xi: int, m: Mem, n: int) -> tuple:
    """The bytes of an instruction up to the displacement of its memory operand `m`, per mod.

    `pre` is everything before ModRM (prefixes, opcode), `reg3` ModRM.reg already shifted into
    place, `lo` the low bits of the base register, `xi` the index register number (4 = none),
    `n` the disp8*N scale. Returns (mod 00 head or None for rbp/r13 bases, mod 01 head, mod 10
    head, n) for `finish_mem`; the choices and errors are those of `modrm_mem`.
    """
    if xi == 4:
        if lo == 4:                                   # rsp/r12 base: SIB with no index
            rm, sib = 0x04, b"\x24"
        else:
            rm, sib = lo, b""
    else:
        ss = _SS.get(m.scale)
        if ss is None:
            raise EncodingError(f"scale must be 1, 2, 4 or 8 in {m}")
        rm, sib = 0x04, bytes((ss | ((xi & 7) << 3) | lo,))
    rm |= reg3
    return (pre + bytes((rm,)) + sib if lo != 5 else None,       # base 101 with mod 00 is disp32/rip
            pre + bytes((0x40 | rm,)) + sib, pre + bytes((0x80 | rm,)) + sib, n)


def _mem_tail(buf: bytearray, reg3: int, lo: int, xi: int, m: Mem, n: int) -> None:
    """`modrm_mem` for a base register (low bits `lo`) and index (`xi`, 4 = none) known to be valid.

    Arguments as for `_mem_heads`; this writes the one encoding the displacement needs.
    """
    disp = m.disp
    mod, disp = _mod_disp(disp, lo, n)
    if xi == 4:
        if lo == 4:                                   # rsp/r12 base: SIB with no index
            buf += bytes((mod | reg3 | 0x04, 0x24))
        else:
            buf.append(mod | reg3 | lo)
    else:
        ss = _SS.get(m.scale)
        if ss is None:
            raise EncodingError(f"scale must be 1, 2, 4 or 8 in {m}")
        buf += bytes((mod | reg3 | 0x04, ss | ((xi & 7) << 3) | lo))
    if mod == 0x40:
        buf.append(disp & 0xFF)
    elif mod == 0x80:
        _disp32(buf, disp, m)


def finish_mem(heads: tuple, m: Mem) -> bytes:
    """An instruction's bytes: the head from `_mem_heads` that the displacement of `m` needs,
    then the displacement."""
    h0, h8, h32, n = heads
    disp = m.disp
    if disp == 0 and h0 is not None:
        return h0
    if n == 1:
        if -128 <= disp <= 127:
            return h8 + bytes((disp & 0xFF,))
    elif disp % n == 0 and -128 <= disp // n <= 127:     # EVEX compressed disp8*N
        return h8 + bytes(((disp // n) & 0xFF,))
    if not -0x80000000 <= disp <= 0x7FFFFFFF:
        raise EncodingError(f"displacement does not fit in 32 bits: {m}")
    return h32 + (disp & 0xFFFFFFFF).to_bytes(4, "little")


def _generic(f: Form):
    """The reference encoder of `f` as a closure with the specialised encoders' signature."""
    enc = ENCODERS[f.openc]
    core = CORES[f.prefix]

    def generic(buf, ops):
        return enc(f, buf, ops, core)
    return generic


def _memory_encoders(prefix, put_imm, ri: int, mi: int, digit: int, generic):
    """(mem, heads) of one form, from its `prefix(ops, m, bn, xi) -> (bytes, disp8 scale N)`
    (N = 0: a memory operand the fast path leaves to `generic`) and its immediate writer.

    mem(buf, ops) appends the whole instruction; heads(ops) gives the memory template (the
    bytes up to the displacement) or None where there is none."""

    def fields(ops):
        m = ops[mi]
        bn = _base_num(id(m.base))
        xi = _index_num(id(m.index))
        if bn is None or xi is None:
            return None
        pre, n = prefix(ops, m, bn, xi)
        if not n:
            return None
        reg = ops[ri].num if ri >= 0 else digit
        return pre, (reg & 7) << 3, bn & 7, xi, m, n

    def mem(buf, ops):
        parts = fields(ops)
        if parts is None:
            return generic(buf, ops)
        buf += parts[0]
        _mem_tail(buf, *parts[1:])
        if put_imm is not None:
            put_imm(buf, ops)
        return None

    def heads(ops):
        parts = fields(ops)
        return None if parts is None else _mem_heads(*parts)

    return mem, heads


def _compile_vex(f: Form, generic):
    ri, vi, mi, ii = _ROLES[f.openc]
    digit, t0, t1, t2, op, vex2 = f.digit, f.t0, f.t1, f.t2, f.opcode[0], f.vex2_ok
    is4 = f.openc == "RVMR"

    def vex_reg(buf, ops):
        reg = ops[ri].num if ri >= 0 else digit
        v = ops[vi].num if vi >= 0 else 0
        rn = ops[mi].num
        xb = rn >> 3
        r = (reg >> 3) & 1
        modrm = 0xC0 | ((reg & 7) << 3) | (rn & 7)
        if xb == 0 and vex2:
            buf += bytes((0xC5, t2 ^ (r << 7) ^ (v << 3), op, modrm))
        else:
            buf += bytes((0xC4, t0 ^ (r << 7) ^ (xb << 5), t1 ^ (v << 3), op, modrm))
        if ii >= 0:
            buf.append((ops[ii].num << 4 if is4 else ops[ii]) & 0xFF)
        return None

    def vex_prefix(ops, m, bn, xi) -> tuple:
        """(VEX prefix and opcode, 1) for a memory r/m `m` with base number bn and index number xi."""
        reg = ops[ri].num if ri >= 0 else digit
        v = ops[vi].num if vi >= 0 else 0
        xb = ((xi >> 2) & 2) | (bn >> 3)
        r = (reg >> 3) & 1
        if xb == 0 and vex2:
            return bytes((0xC5, t2 ^ (r << 7) ^ (v << 3), op)), 1
        return bytes((0xC4, t0 ^ (r << 7) ^ (xb << 5), t1 ^ (v << 3), op)), 1

    def vex_imm(buf, ops):
        buf.append((ops[ii].num << 4 if is4 else ops[ii]) & 0xFF)

    vex_mem, vex_heads = _memory_encoders(vex_prefix, vex_imm if ii >= 0 else None, ri, mi, digit, generic)
    return vex_reg, vex_mem, vex_heads


def _compile_evex(f: Form, generic):
    ri, vi, mi, ii = _ROLES[f.openc]
    digit, t0, t1, t2, op = f.digit, f.t0, f.t1, f.t2, f.opcode[0]
    mem_n, bcst_n, zero_ok = f.mem_n, f.bcst_n, f.zero_ok

    def mask_bits(dst, mk) -> int:
        """EVEX.z and EVEX.aaa for destination `dst` (mk: the mask of a memory destination)."""
        p2 = 0
        if type(dst) is Vec:
            mk = dst.mask
            if dst.zeroing:
                if not zero_ok:
                    raise EncodingError(f"{f.mnemonic} {f.operands}: zeroing-masking {{z}} not allowed here")
                p2 = 0x80
        if mk is not None:
            if mk.num == 0:             # aaa = 000 means "no mask" (SDM §2.7.1); k0 is no write mask
                raise EncodingError(f"{f.mnemonic} {f.operands}: k0 cannot be used as a write mask")
            p2 |= mk.num
        return p2

    def evex_reg(buf, ops):
        reg = ops[ri].num if ri >= 0 else digit
        v = ops[vi].num if vi >= 0 else 0
        rn = ops[mi].num
        p0 = t0 ^ (((reg >> 3) & 1) << 7) ^ (((reg >> 4) & 1) << 4) ^ (((rn >> 4) & 1) << 6) ^ (((rn >> 3) & 1) << 5)
        p2 = t2 ^ (((v >> 4) & 1) << 3)
        dst = ops[0]
        if type(dst) is Vec and (dst.mask is not None or dst.zeroing):
            p2 |= mask_bits(dst, None)
        buf += bytes((0x62, p0, t1 ^ ((v & 15) << 3), p2, op, 0xC0 | ((reg & 7) << 3) | (rn & 7)))
        if ii >= 0:
            buf.append(ops[ii] & 0xFF)
        return None

    def evex_prefix(ops, m, bn, xi):
        """(EVEX prefix and opcode, disp8*N scale) for a memory r/m `m`; N is 0 where the form
        has no scale for it (left to the generic encoder)."""
        if m.broadcast:
            p2 = t2 | 0x10                                           # EVEX.b: {1toN}
            n = bcst_n
        else:
            p2 = t2
            n = mem_n
        if not n:
            return b"", 0
        reg = ops[ri].num if ri >= 0 else digit
        v = ops[vi].num if vi >= 0 else 0
        p0 = t0 ^ (((reg >> 3) & 1) << 7) ^ (((reg >> 4) & 1) << 4) ^ (((xi >> 3) & 1) << 6) ^ ((bn >> 3) << 5)
        p2 ^= ((v >> 4) & 1) << 3
        dst = ops[0]
        mk = m.mask if mi == 0 else None
        if mk is not None or type(dst) is Vec and (dst.mask is not None or dst.zeroing):
            p2 |= mask_bits(dst, mk)
        return bytes((0x62, p0, t1 ^ ((v & 15) << 3), p2, op)), n

    def evex_imm(buf, ops):
        buf.append(ops[ii] & 0xFF)

    evex_mem, evex_heads = _memory_encoders(evex_prefix, evex_imm if ii >= 0 else None, ri, mi, digit, generic)
    return evex_reg, evex_mem, evex_heads


def _compile_legacy(f: Form, generic):
    ri, vi, mi, ii = _ROLES[f.openc]
    digit, rex, mandatory, opcode = f.digit, f.rex, f.mandatory, f.opcode
    isize = f.imm
    imask = (1 << (8 * isize)) - 1

    def legacy_reg(buf, ops):
        reg = ops[ri].num if ri >= 0 else digit
        rn = ops[mi].num
        r = rex | ((reg >> 1) & 4) | (rn >> 3)
        if mandatory:
            buf += mandatory
        if r:
            buf.append(r | 0x40)
        buf += opcode
        buf.append(0xC0 | ((reg & 7) << 3) | (rn & 7))
        if ii >= 0:
            buf += (ops[ii] & imask).to_bytes(isize, "little")
        return None

    def legacy_prefix(ops, m, bn, xi) -> tuple:
        """(Mandatory prefix, REX and opcode, 1) for a memory r/m with base number bn, index number xi."""
        reg = ops[ri].num if ri >= 0 else digit
        r = rex | ((reg >> 1) & 4) | ((xi >> 2) & 2) | (bn >> 3)
        return (mandatory + bytes((r | 0x40,)) + opcode if r else mandatory + opcode), 1

    def legacy_imm(buf, ops):
        buf += (ops[ii] & imask).to_bytes(isize, "little")

    legacy_mem, legacy_heads = _memory_encoders(legacy_prefix, legacy_imm if ii >= 0 else None, ri, mi, digit,
                                                generic)
    return legacy_reg, legacy_mem, legacy_heads


@functools.lru_cache(maxsize=None)
def compile_form(f: Form) -> tuple:
    """(reg, mem, heads, rm) for form `f`.

    reg(buf, ops) and mem(buf, ops) encode with a register or a memory operand in the r/m slot
    and return what the class encoders return; heads(ops) gives the `_mem_heads` tuple of a
    memory operand (None where only the generic path applies; `heads` itself is None for forms
    without a specialised encoder); rm is the index of the r/m operand, -1 if none.
    """
    generic = _generic(f)
    amx = f.sibmem or f.openc == "RMV"
    if amx:
        generic = _amx_checked(f, generic)
    roles = _ROLES.get(f.openc)
    if roles is None or f.openc == "MC" or f.byte_regs:     # rare: no ModRM, cl check, spl/sil REX
        return generic, generic, None, roles[2] if roles else -1
    if f.prefix == "vex":
        reg, mem, heads = _compile_vex(f, generic)
    elif f.prefix == "evex":
        reg, mem, heads = _compile_evex(f, generic)
    else:
        reg, mem, heads = _compile_legacy(f, generic)
    if amx:
        reg, mem = _amx_checked(f, reg), _amx_checked(f, mem)
    return reg, mem, heads, roles[2]


def _amx_checked(f: Form, enc):
    """`enc` refusing what an AMX instruction faults on (#UD) instead of encoding it: tile memory
    without an index register (the row stride), or a tile product naming one tile twice."""
    rm = _ROLES[f.openc][2]

    def checked(buf, ops):
        if f.sibmem:
            m = ops[rm]
            if type(m) is Mem and m.index is None:
                raise EncodingError(f"{f.mnemonic}: the tile memory operand needs an index register holding "
                                    f"the row stride ([base + stride]), got {m}")
        elif len({op.num for op in ops}) != len(ops):
            raise EncodingError(f"{f.mnemonic}: its three tiles must differ, got {', '.join(map(str, ops))}")
        return enc(buf, ops)
    return checked


def encode(form: Form, *ops) -> bytes:
    """Encode one instruction with a given form (no form choice, no labels): for tests and tools.

    A rip-relative Mem with a label gets a zero disp32; branches take the displacement as an int.
    It runs the same specialised encoders as the assembler.
    """
    buf = bytearray()
    reg, mem, _, rm = compile_form(form)
    (mem if rm >= 0 and type(ops[rm]) is Mem else reg)(buf, ops)
    return bytes(buf)
