"""The x86-64 instruction-form table, in the Intel SDM's own notation.

Each row is (mnemonic, operands, encoding, Op/En class, ISA extension), copied in the form
felixcloutier.com / SDM vol. 2 print them, so a reviewer can check a row in seconds:

    ("vfmadd231ps", "ymm1, ymm2, ymm3/m256",                  "VEX.256.66.0F38.W0 B8 /r",  "RVM", "FMA")
    ("vfmadd231ps", "zmm1{k1}{z}, zmm2, zmm3/m512/m32bcst",   "EVEX.512.66.0F38.W0 B8 /r", "RVM", "AVX512F")

`parse_form` turns each row into a frozen `Form` at import. Operand kinds (what the assembler
computes for an actual operand, and what a slot accepts):

    r64 r32 r16 r8          general-purpose registers          k      opmask register
    t                       AMX tile register tmm0-7            sibmem memory with an index (AMX)
    x y z                   xmm/ymm/zmm 0-15, unmasked          xh yh zh  xmm/ymm/zmm 16-31 (EVEX only)
    xk yk zk                masked xmm/ymm/zmm (EVEX only)     rel    a Label (branches)
    m m8 .. m512            memory, untyped or sized            mk m512k ...  masked store destination
    b16 b32 b64             embedded broadcast {1toN}           i8 u8 i32 u32 i64  immediates by range

Form choice (SDM has no rule; this is ours): rows are tried in table order and the first row
that accepts every operand kind wins, except that a VEX row always beats an EVEX row that
accepts the same kinds. So EVEX is used only when an operand needs it (zmm, register >= 16,
a mask, a broadcast) or when the instruction has no VEX form. Untyped memory takes the first
row that accepts memory in that slot: give `Mem(bits=...)` to choose another size.

AVX-VNNI: the VEX-encoded `vpdpbusd` family is keyed "{vex} vpdpbusd" (the GNU as / Intel
pseudo-prefix spelling), reachable with `emit("vpdpbusd", ..., vex=True)`. Plain "vpdpbusd"
always means the EVEX (AVX512_VNNI) encoding, because a CPU with AVX512_VNNI but no AVX-VNNI
(Cascade Lake, Ice Lake) faults on the VEX one, so it must never be chosen silently.
"""
from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------
# Instruction facts as named sets (style §10)
# ---------------------------------------------------------------------------------------------

# Legacy opcodes whose imm8 is sign-extended to the operand size: an imm8 slot there takes
# only -128..127 (200 would silently become -56). Elsewhere imm8 also takes 128..255.
SIGN_EXTENDED_IMM8 = frozenset({0x83, 0x6B})

# Condition codes (SDM vol. 1 app. B, "EFLAGS Condition Codes"): tttn nibble of 70+cc / 0F 80+cc.
CONDITIONS = {
    "jo": 0x0, "jno": 0x1, "jb": 0x2, "jae": 0x3, "je": 0x4, "jne": 0x5, "jbe": 0x6, "ja": 0x7,
    "js": 0x8, "jns": 0x9, "jp": 0xA, "jnp": 0xB, "jl": 0xC, "jge": 0xD, "jle": 0xE, "jg": 0xF,
}

# Other spellings of the same instruction; the assembler accepts both, the table holds one.
ALIASES = {
    "jz": "je", "jnz": "jne", "jc": "jb", "jnae": "jb", "jnc": "jae", "jnb": "jae", "jna": "jbe",
    "jnbe": "ja", "jnge": "jl", "jnl": "jge", "jng": "jle", "jnle": "jg", "jpe": "jp", "jpo": "jnp",
    "sal": "shl",
}

# ISA extensions whose forms are only chosen when asked for by name (see module docstring).
EXPLICIT_ONLY = frozenset({"AVX_VNNI"})

# ---------------------------------------------------------------------------------------------
# The rows
# ---------------------------------------------------------------------------------------------

_ROWS: list[tuple[str, ...]] = [
    # --- general purpose: moves --------------------------------------------------------------
    ("mov",        "r/m64, r64",        "REX.W 89 /r",        "MR",  "X64"),
    ("mov",        "r/m32, r32",        "89 /r",              "MR",  "X64"),
    ("mov",        "r/m8, r8",          "88 /r",              "MR",  "X64"),
    ("mov",        "r64, r/m64",        "REX.W 8B /r",        "RM",  "X64"),
    ("mov",        "r32, r/m32",        "8B /r",              "RM",  "X64"),
    ("mov",        "r8, r/m8",          "8A /r",              "RM",  "X64"),
    ("mov",        "r/m64, imm32",      "REX.W C7 /0 id",     "MI",  "X64"),
    ("mov",        "r32, imm32",        "B8+rd id",           "OI",  "X64"),
    ("mov",        "r/m32, imm32",      "C7 /0 id",           "MI",  "X64"),
    ("mov",        "r64, imm64",        "REX.W B8+rd io",     "OI",  "X64"),
    ("movzx",      "r32, r/m8",         "0F B6 /r",           "RM",  "X64"),
    ("movzx",      "r64, r/m8",         "REX.W 0F B6 /r",     "RM",  "X64"),
    ("movzx",      "r32, r/m16",        "0F B7 /r",           "RM",  "X64"),
    ("movzx",      "r64, r/m16",        "REX.W 0F B7 /r",     "RM",  "X64"),
    ("movsx",      "r32, r/m8",         "0F BE /r",           "RM",  "X64"),
    ("movsx",      "r64, r/m8",         "REX.W 0F BE /r",     "RM",  "X64"),
    ("movsx",      "r32, r/m16",        "0F BF /r",           "RM",  "X64"),
    ("movsx",      "r64, r/m16",        "REX.W 0F BF /r",     "RM",  "X64"),
    ("movsxd",     "r64, r/m32",        "REX.W 63 /r",        "RM",  "X64"),
    ("lea",        "r64, m",            "REX.W 8D /r",        "RM",  "X64"),
    ("lea",        "r32, m",            "8D /r",              "RM",  "X64"),
    ("push",       "r64",               "50+rd",              "O",   "X64"),
    ("pop",        "r64",               "58+rd",              "O",   "X64"),
    # --- general purpose: arithmetic (ALU rows are generated below, same notation) -------------
    ("test",       "r/m64, r64",        "REX.W 85 /r",        "MR",  "X64"),
    ("test",       "r/m32, r32",        "85 /r",              "MR",  "X64"),
    ("test",       "r/m64, imm32",      "REX.W F7 /0 id",     "MI",  "X64"),
    ("test",       "r/m32, imm32",      "F7 /0 id",           "MI",  "X64"),
    ("imul",       "r64, r/m64",        "REX.W 0F AF /r",     "RM",  "X64"),
    ("imul",       "r32, r/m32",        "0F AF /r",           "RM",  "X64"),
    ("imul",       "r64, r/m64, imm8",  "REX.W 6B /r ib",     "RMI", "X64"),
    ("imul",       "r32, r/m32, imm8",  "6B /r ib",           "RMI", "X64"),
    ("imul",       "r64, r/m64, imm32", "REX.W 69 /r id",     "RMI", "X64"),
    ("imul",       "r32, r/m32, imm32", "69 /r id",           "RMI", "X64"),
    ("inc",        "r/m64",             "REX.W FF /0",        "M",   "X64"),
    ("inc",        "r/m32",             "FF /0",              "M",   "X64"),
    ("dec",        "r/m64",             "REX.W FF /1",        "M",   "X64"),
    ("dec",        "r/m32",             "FF /1",              "M",   "X64"),
    ("not",        "r/m64",             "REX.W F7 /2",        "M",   "X64"),
    ("not",        "r/m32",             "F7 /2",              "M",   "X64"),
    ("neg",        "r/m64",             "REX.W F7 /3",        "M",   "X64"),
    ("neg",        "r/m32",             "F7 /3",              "M",   "X64"),
    # --- control flow ------------------------------------------------------------------------
    ("jmp",        "rel8",              "EB cb",              "D",   "X64"),
    ("jmp",        "rel32",             "E9 cd",              "D",   "X64"),
    ("jmp",        "r/m64",             "FF /4",              "M",   "X64"),
    ("call",       "rel32",             "E8 cd",              "D",   "X64"),
    ("call",       "r/m64",             "FF /2",              "M",   "X64"),
    ("ret",        "",                  "C3",                 "ZO",  "X64"),
    # --- misc --------------------------------------------------------------------------------
    ("nop",        "",                  "90",                 "ZO",  "X64"),
    ("int3",       "",                  "CC",                 "ZO",  "X64"),
    ("ud2",        "",                  "0F 0B",              "ZO",  "X64"),
    ("cpuid",      "",                  "0F A2",              "ZO",  "X64"),
    ("xgetbv",     "",                  "0F 01 D0",           "ZO",  "XSAVE"),
    ("rdtsc",      "",                  "0F 31",              "ZO",  "X64"),
    # --- threads: spin-waits, atomic exchanges (full barriers), futex system calls --------
    ("pause",      "",                  "F3 90",              "ZO",  "X64"),
    ("xchg",       "r/m64, r64",        "REX.W 87 /r",        "MR",  "X64"),
    ("xchg",       "r/m32, r32",        "87 /r",              "MR",  "X64"),
    # always LOCKed: its one use is an atomic compare-and-exchange with memory
    ("cmpxchg",    "m64, r64",          "REX.W F0 0F B1 /r",  "MR",  "X64"),
    ("syscall",    "",                  "0F 05",              "ZO",  "X64"),
    ("prefetchnta", "m8",               "0F 18 /0",           "M",   "SSE"),
    ("prefetcht0", "m8",                "0F 18 /1",           "M",   "SSE"),
    ("prefetcht1", "m8",                "0F 18 /2",           "M",   "SSE"),
    ("prefetcht2", "m8",                "0F 18 /3",           "M",   "SSE"),
    ("prefetchw",  "m8",                "0F 0D /1",           "M",   "PRFCHW"),

    # --- VEX: moves --------------------------------------------------------------------------
    ("vmovups",    "xmm1, xmm2/m128",   "VEX.128.0F.WIG 10 /r",        "RM",  "AVX"),
    ("vmovups",    "ymm1, ymm2/m256",   "VEX.256.0F.WIG 10 /r",        "RM",  "AVX"),
    ("vmovups",    "xmm2/m128, xmm1",   "VEX.128.0F.WIG 11 /r",        "MR",  "AVX"),
    ("vmovups",    "ymm2/m256, ymm1",   "VEX.256.0F.WIG 11 /r",        "MR",  "AVX"),
    ("vmovaps",    "xmm1, xmm2/m128",   "VEX.128.0F.WIG 28 /r",        "RM",  "AVX"),
    ("vmovaps",    "ymm1, ymm2/m256",   "VEX.256.0F.WIG 28 /r",        "RM",  "AVX"),
    ("vmovaps",    "xmm2/m128, xmm1",   "VEX.128.0F.WIG 29 /r",        "MR",  "AVX"),
    ("vmovaps",    "ymm2/m256, ymm1",   "VEX.256.0F.WIG 29 /r",        "MR",  "AVX"),
    ("vmovdqu",    "xmm1, xmm2/m128",   "VEX.128.F3.0F.WIG 6F /r",     "RM",  "AVX"),
    ("vmovdqu",    "ymm1, ymm2/m256",   "VEX.256.F3.0F.WIG 6F /r",     "RM",  "AVX"),
    ("vmovdqu",    "xmm2/m128, xmm1",   "VEX.128.F3.0F.WIG 7F /r",     "MR",  "AVX"),
    ("vmovdqu",    "ymm2/m256, ymm1",   "VEX.256.F3.0F.WIG 7F /r",     "MR",  "AVX"),
    ("vmovss",     "xmm1, m32",         "VEX.LIG.F3.0F.WIG 10 /r",     "RM",  "AVX"),
    ("vmovss",     "m32, xmm1",         "VEX.LIG.F3.0F.WIG 11 /r",     "MR",  "AVX"),
    ("vmovss",     "xmm1, xmm2, xmm3",  "VEX.LIG.F3.0F.WIG 10 /r",     "RVM", "AVX"),
    ("vmovsd",     "xmm1, m64",         "VEX.LIG.F2.0F.WIG 10 /r",     "RM",  "AVX"),
    ("vmovsd",     "m64, xmm1",         "VEX.LIG.F2.0F.WIG 11 /r",     "MR",  "AVX"),
    ("vmovd",      "xmm1, r32/m32",     "VEX.128.66.0F.W0 6E /r",      "RM",  "AVX"),
    ("vmovd",      "r32/m32, xmm1",     "VEX.128.66.0F.W0 7E /r",      "MR",  "AVX"),
    ("vpinsrw",    "xmm1, xmm2, m16, imm8", "VEX.128.66.0F.W0 C4 /r ib", "RVMI", "AVX"),
    ("vpextrw",    "m16, xmm1, imm8",   "VEX.128.66.0F3A.W0 15 /r ib", "MRI", "AVX"),
    ("vpinsrb",    "xmm1, xmm2, m8, imm8", "VEX.128.66.0F3A.W0 20 /r ib", "RVMI", "AVX"),
    ("vpextrb",    "m8, xmm1, imm8",    "VEX.128.66.0F3A.W0 14 /r ib", "MRI", "AVX"),
    ("vmovq",      "xmm1, xmm2/m64",    "VEX.128.F3.0F.WIG 7E /r",     "RM",  "AVX"),
    ("vmovq",      "xmm1/m64, xmm2",    "VEX.128.66.0F.WIG D6 /r",     "MR",  "AVX"),
    ("vmovq",      "xmm1, r64/m64",     "VEX.128.66.0F.W1 6E /r",      "RM",  "AVX"),
    ("vmovq",      "r64/m64, xmm1",     "VEX.128.66.0F.W1 7E /r",      "MR",  "AVX"),
    ("vmaskmovps", "xmm1, xmm2, m128",  "VEX.128.66.0F38.W0 2C /r",    "RVM", "AVX"),
    ("vmaskmovps", "ymm1, ymm2, m256",  "VEX.256.66.0F38.W0 2C /r",    "RVM", "AVX"),
    ("vmaskmovps", "m128, xmm1, xmm2",  "VEX.128.66.0F38.W0 2E /r",    "MVR", "AVX"),
    ("vmaskmovps", "m256, ymm1, ymm2",  "VEX.256.66.0F38.W0 2E /r",    "MVR", "AVX"),
    ("vbroadcastss", "xmm1, m32",       "VEX.128.66.0F38.W0 18 /r",    "RM",  "AVX"),
    ("vbroadcastss", "ymm1, m32",       "VEX.256.66.0F38.W0 18 /r",    "RM",  "AVX"),
    ("vbroadcastss", "xmm1, xmm2",      "VEX.128.66.0F38.W0 18 /r",    "RM",  "AVX2"),
    ("vbroadcastss", "ymm1, xmm2",      "VEX.256.66.0F38.W0 18 /r",    "RM",  "AVX2"),
    ("vbroadcastsd", "ymm1, xmm2/m64",  "VEX.256.66.0F38.W0 19 /r",    "RM",  "AVX2"),
    ("vbroadcastf128", "ymm1, m128",    "VEX.256.66.0F38.W0 1A /r",    "RM",  "AVX"),
    ("vpbroadcastb", "xmm1, xmm2/m8",   "VEX.128.66.0F38.W0 78 /r",    "RM",  "AVX2"),
    ("vpbroadcastb", "ymm1, xmm2/m8",   "VEX.256.66.0F38.W0 78 /r",    "RM",  "AVX2"),
    ("vpbroadcastw", "xmm1, xmm2/m16",  "VEX.128.66.0F38.W0 79 /r",    "RM",  "AVX2"),
    ("vpbroadcastw", "ymm1, xmm2/m16",  "VEX.256.66.0F38.W0 79 /r",    "RM",  "AVX2"),
    ("vpbroadcastd", "xmm1, xmm2/m32",  "VEX.128.66.0F38.W0 58 /r",    "RM",  "AVX2"),
    ("vpbroadcastd", "ymm1, xmm2/m32",  "VEX.256.66.0F38.W0 58 /r",    "RM",  "AVX2"),
    ("vpbroadcastq", "ymm1, xmm2/m64",  "VEX.256.66.0F38.W0 59 /r",    "RM",  "AVX2"),
    # --- VEX: conversions, permutes, lane moves ------------------------------------------------
    ("vcvtph2ps",  "xmm1, xmm2/m64",    "VEX.128.66.0F38.W0 13 /r",    "RM",  "F16C"),
    ("vcvtph2ps",  "ymm1, xmm2/m128",   "VEX.256.66.0F38.W0 13 /r",    "RM",  "F16C"),
    ("vcvtps2ph",  "xmm1/m64, xmm2, imm8",  "VEX.128.66.0F3A.W0 1D /r ib", "MRI", "F16C"),
    ("vcvtps2ph",  "xmm1/m128, ymm2, imm8", "VEX.256.66.0F3A.W0 1D /r ib", "MRI", "F16C"),
    ("vpermps",    "ymm1, ymm2, ymm3/m256", "VEX.256.66.0F38.W0 16 /r",    "RVM",  "AVX2"),
    ("vpermd",     "ymm1, ymm2, ymm3/m256", "VEX.256.66.0F38.W0 36 /r",    "RVM",  "AVX2"),
    ("vperm2f128", "ymm1, ymm2, ymm3/m256, imm8", "VEX.256.66.0F3A.W0 06 /r ib", "RVMI", "AVX"),
    ("vperm2i128", "ymm1, ymm2, ymm3/m256, imm8", "VEX.256.66.0F3A.W0 46 /r ib", "RVMI", "AVX2"),
    ("vextractf128", "xmm1/m128, ymm2, imm8",     "VEX.256.66.0F3A.W0 19 /r ib", "MRI",  "AVX"),
    ("vextracti128", "xmm1/m128, ymm2, imm8",     "VEX.256.66.0F3A.W0 39 /r ib", "MRI",  "AVX2"),
    ("vinsertf128", "ymm1, ymm2, xmm3/m128, imm8", "VEX.256.66.0F3A.W0 18 /r ib", "RVMI", "AVX"),
    ("vinserti128", "ymm1, ymm2, xmm3/m128, imm8", "VEX.256.66.0F3A.W0 38 /r ib", "RVMI", "AVX2"),
    ("vblendvps",  "xmm1, xmm2, xmm3/m128, xmm4", "VEX.128.66.0F3A.W0 4A /r /is4", "RVMR", "AVX"),
    ("vblendvps",  "ymm1, ymm2, ymm3/m256, ymm4", "VEX.256.66.0F3A.W0 4A /r /is4", "RVMR", "AVX"),
    ("vpermq",     "ymm1, ymm2/m256, imm8", "VEX.256.66.0F3A.W1 00 /r ib", "RMI", "AVX2"),
    ("vpmovzxbd",  "xmm1, xmm2/m32",    "VEX.128.66.0F38.WIG 31 /r",   "RM",  "AVX"),
    ("vpmovzxbd",  "ymm1, xmm2/m64",    "VEX.256.66.0F38.WIG 31 /r",   "RM",  "AVX2"),
    ("vpmovsxbd",  "xmm1, xmm2/m32",    "VEX.128.66.0F38.WIG 21 /r",   "RM",  "AVX"),
    ("vpmovsxbd",  "ymm1, xmm2/m64",    "VEX.256.66.0F38.WIG 21 /r",   "RM",  "AVX2"),
    ("vpmovzxwd",  "ymm1, xmm2/m128",   "VEX.256.66.0F38.WIG 33 /r",   "RM",  "AVX2"),
    ("vpmovsxwd",  "ymm1, xmm2/m128",   "VEX.256.66.0F38.WIG 23 /r",   "RM",  "AVX2"),
    ("vzeroupper", "",                  "VEX.128.0F.WIG 77",           "ZO",  "AVX"),
    ("vzeroall",   "",                  "VEX.256.0F.WIG 77",           "ZO",  "AVX"),
    # --- VEX: scalar single precision (LIG: VEX.L is ignored, encoded 0) -------------------------
    ("vaddss",     "xmm1, xmm2, xmm3/m32", "VEX.LIG.F3.0F.WIG 58 /r",    "RVM", "AVX"),
    ("vmulss",     "xmm1, xmm2, xmm3/m32", "VEX.LIG.F3.0F.WIG 59 /r",    "RVM", "AVX"),
    ("vsubss",     "xmm1, xmm2, xmm3/m32", "VEX.LIG.F3.0F.WIG 5C /r",    "RVM", "AVX"),
    ("vminss",     "xmm1, xmm2, xmm3/m32", "VEX.LIG.F3.0F.WIG 5D /r",    "RVM", "AVX"),
    ("vdivss",     "xmm1, xmm2, xmm3/m32", "VEX.LIG.F3.0F.WIG 5E /r",    "RVM", "AVX"),
    ("vmaxss",     "xmm1, xmm2, xmm3/m32", "VEX.LIG.F3.0F.WIG 5F /r",    "RVM", "AVX"),
    ("vsqrtss",    "xmm1, xmm2, xmm3/m32", "VEX.LIG.F3.0F.WIG 51 /r",    "RVM", "AVX"),
    ("vfmadd132ss", "xmm1, xmm2, xmm3/m32", "VEX.LIG.66.0F38.W0 99 /r",  "RVM", "FMA"),
    ("vfmadd213ss", "xmm1, xmm2, xmm3/m32", "VEX.LIG.66.0F38.W0 A9 /r",  "RVM", "FMA"),
    ("vfmadd231ss", "xmm1, xmm2, xmm3/m32", "VEX.LIG.66.0F38.W0 B9 /r",  "RVM", "FMA"),
    ("vfnmadd231ss", "xmm1, xmm2, xmm3/m32", "VEX.LIG.66.0F38.W0 BD /r", "RVM", "FMA"),
    # --- AVX-VNNI: explicit only, see module docstring ------------------------------------------
    ("{vex} vpdpbusd",  "xmm1, xmm2, xmm3/m128", "VEX.128.66.0F38.W0 50 /r", "RVM", "AVX_VNNI"),
    ("{vex} vpdpbusd",  "ymm1, ymm2, ymm3/m256", "VEX.256.66.0F38.W0 50 /r", "RVM", "AVX_VNNI"),
    ("{vex} vpdpbusds", "ymm1, ymm2, ymm3/m256", "VEX.256.66.0F38.W0 51 /r", "RVM", "AVX_VNNI"),
    ("{vex} vpdpwssd",  "ymm1, ymm2, ymm3/m256", "VEX.256.66.0F38.W0 52 /r", "RVM", "AVX_VNNI"),
    # --- AMX: tile registers tmm0-7, their shapes set by the 64-byte tile configuration ---------
    # (ldtilecfg). `sibmem` is memory addressed through a SIB byte whose index register holds
    # the row stride in bytes ([base + stride*1 + disp]); a tile load or store without an index
    # is refused here (the CPU would read every row from one address). TILERELEASE's ModRM is
    # fixed (C0); TILEZERO's register is in ModRM.reg (Op/En "R"); the TDP* products take their
    # second source from VEX.vvvv (Op/En "RMV": dst = reg, src1 = r/m, src2 = vvvv).
    ("ldtilecfg",   "m512",             "VEX.128.NP.0F38.W0 49 /0",    "M",   "AMX_TILE"),
    ("sttilecfg",   "m512",             "VEX.128.66.0F38.W0 49 /0",    "M",   "AMX_TILE"),
    ("tilerelease", "",                 "VEX.128.NP.0F38.W0 49 C0",    "ZO",  "AMX_TILE"),
    ("tilezero",    "tmm1",             "VEX.128.F2.0F38.W0 49 /r",    "R",   "AMX_TILE"),
    ("tileloadd",   "tmm1, sibmem",     "VEX.128.F2.0F38.W0 4B /r",    "RM",  "AMX_TILE"),
    ("tileloaddt1", "tmm1, sibmem",     "VEX.128.66.0F38.W0 4B /r",    "RM",  "AMX_TILE"),
    ("tilestored",  "sibmem, tmm1",     "VEX.128.F3.0F38.W0 4B /r",    "MR",  "AMX_TILE"),
    ("tdpbssd",     "tmm1, tmm2, tmm3", "VEX.128.F2.0F38.W0 5E /r",    "RMV", "AMX_INT8"),
    ("tdpbsud",     "tmm1, tmm2, tmm3", "VEX.128.F3.0F38.W0 5E /r",    "RMV", "AMX_INT8"),
    ("tdpbusd",     "tmm1, tmm2, tmm3", "VEX.128.66.0F38.W0 5E /r",    "RMV", "AMX_INT8"),
    ("tdpbuud",     "tmm1, tmm2, tmm3", "VEX.128.NP.0F38.W0 5E /r",    "RMV", "AMX_INT8"),
    ("tdpbf16ps",   "tmm1, tmm2, tmm3", "VEX.128.F3.0F38.W0 5C /r",    "RMV", "AMX_BF16"),
    # --- opmask (VEX-encoded, AVX-512) ----------------------------------------------------------
    ("kmovw",      "k1, r32",           "VEX.L0.0F.W0 92 /r",          "RM",  "AVX512F"),
    ("kmovw",      "r32, k1",           "VEX.L0.0F.W0 93 /r",          "RM",  "AVX512F"),
    ("kmovw",      "k1, k2/m16",        "VEX.L0.0F.W0 90 /r",          "RM",  "AVX512F"),
    ("kmovw",      "m16, k1",           "VEX.L0.0F.W0 91 /r",          "MR",  "AVX512F"),
    ("kmovd",      "k1, r32",           "VEX.L0.F2.0F.W0 92 /r",       "RM",  "AVX512BW"),
    ("kmovd",      "r32, k1",           "VEX.L0.F2.0F.W0 93 /r",       "RM",  "AVX512BW"),
    ("kmovq",      "k1, r64",           "VEX.L0.F2.0F.W1 92 /r",       "RM",  "AVX512BW"),
    ("kmovq",      "r64, k1",           "VEX.L0.F2.0F.W1 93 /r",       "RM",  "AVX512BW"),
    ("kmovq",      "k1, k2/m64",        "VEX.L0.0F.W1 90 /r",          "RM",  "AVX512BW"),
    ("kxnorw",     "k1, k2, k3",        "VEX.L1.0F.W0 46 /r",          "RVM", "AVX512F"),
    ("kxnorq",     "k1, k2, k3",        "VEX.L1.0F.W1 46 /r",          "RVM", "AVX512BW"),
    ("kxorw",      "k1, k2, k3",        "VEX.L1.0F.W0 47 /r",          "RVM", "AVX512F"),
    ("kandw",      "k1, k2, k3",        "VEX.L1.0F.W0 41 /r",          "RVM", "AVX512F"),
    ("korw",       "k1, k2, k3",        "VEX.L1.0F.W0 45 /r",          "RVM", "AVX512F"),
    ("knotw",      "k1, k2",            "VEX.L0.0F.W0 44 /r",          "RM",  "AVX512F"),
    ("kortestw",   "k1, k2",            "VEX.L0.0F.W0 98 /r",          "RM",  "AVX512F"),

    # --- EVEX: moves and broadcasts (disp8*N: N = memory operand size, SDM §2.7.5) ---------------
    ("vmovss",     "xmm1{k1}{z}, m32",        "EVEX.LLIG.F3.0F.W0 10 /r",  "RM",  "AVX512F"),
    ("vmovss",     "m32{k1}, xmm1",           "EVEX.LLIG.F3.0F.W0 11 /r",  "MR",  "AVX512F"),
    ("vmovss",     "xmm1{k1}{z}, xmm2, xmm3", "EVEX.LLIG.F3.0F.W0 10 /r",  "RVM", "AVX512F"),
    ("vmovd",      "xmm1, r32/m32",           "EVEX.128.66.0F.W0 6E /r",   "RM",  "AVX512F"),
    ("vmovd",      "r32/m32, xmm1",           "EVEX.128.66.0F.W0 7E /r",   "MR",  "AVX512F"),
    ("vpinsrw",    "xmm1, xmm2, m16, imm8",   "EVEX.128.66.0F.W0 C4 /r ib",  "RVMI", "AVX512BW"),
    ("vpextrw",    "m16, xmm1, imm8",         "EVEX.128.66.0F3A.W0 15 /r ib", "MRI", "AVX512BW"),
    ("vmovq",      "xmm1, xmm2/m64",          "EVEX.128.F3.0F.W1 7E /r",   "RM",  "AVX512F"),
    ("vmovq",      "xmm1/m64, xmm2",          "EVEX.128.66.0F.W1 D6 /r",   "MR",  "AVX512F"),
    ("vmovq",      "xmm1, r64/m64",           "EVEX.128.66.0F.W1 6E /r",   "RM",  "AVX512F"),
    ("vmovq",      "r64/m64, xmm1",           "EVEX.128.66.0F.W1 7E /r",   "MR",  "AVX512F"),
    ("vbroadcastf32x4", "ymm1{k1}{z}, m128",  "EVEX.256.66.0F38.W0 1A /r", "RM",  "AVX512VL"),
    ("vbroadcastf32x4", "zmm1{k1}{z}, m128",  "EVEX.512.66.0F38.W0 1A /r", "RM",  "AVX512F"),
    ("vbroadcastf32x8", "zmm1{k1}{z}, m256",  "EVEX.512.66.0F38.W0 1B /r", "RM",  "AVX512DQ"),
    ("vpbroadcastd", "xmm1{k1}{z}, r32",      "EVEX.128.66.0F38.W0 7C /r", "RM",  "AVX512VL"),
    ("vpbroadcastd", "ymm1{k1}{z}, r32",      "EVEX.256.66.0F38.W0 7C /r", "RM",  "AVX512VL"),
    ("vpbroadcastd", "zmm1{k1}{z}, r32",      "EVEX.512.66.0F38.W0 7C /r", "RM",  "AVX512F"),
    ("vpmovdb",    "xmm1/m64{k1}{z}, ymm2",   "EVEX.256.F3.0F38.W0 31 /r", "MR",  "AVX512VL"),
    ("vpmovdb",    "xmm1/m128{k1}{z}, zmm2",  "EVEX.512.F3.0F38.W0 31 /r", "MR",  "AVX512F"),
    ("vpmovdw",    "xmm1/m128{k1}{z}, ymm2",  "EVEX.256.F3.0F38.W0 33 /r", "MR",  "AVX512VL"),
    ("vpmovdw",    "ymm1/m256{k1}{z}, zmm2",  "EVEX.512.F3.0F38.W0 33 /r", "MR",  "AVX512F"),
    ("vextractf32x4", "xmm1/m128{k1}{z}, ymm2, imm8", "EVEX.256.66.0F3A.W0 19 /r ib", "MRI", "AVX512VL"),
    ("vextractf32x4", "xmm1/m128{k1}{z}, zmm2, imm8", "EVEX.512.66.0F3A.W0 19 /r ib", "MRI", "AVX512F"),
    ("vextractf32x8", "ymm1/m256{k1}{z}, zmm2, imm8", "EVEX.512.66.0F3A.W0 1B /r ib", "MRI", "AVX512DQ"),
    ("vinsertf32x4", "ymm1{k1}{z}, ymm2, xmm3/m128, imm8", "EVEX.256.66.0F3A.W0 18 /r ib", "RVMI", "AVX512VL"),
    ("vinsertf32x4", "zmm1{k1}{z}, zmm2, xmm3/m128, imm8", "EVEX.512.66.0F3A.W0 18 /r ib", "RVMI", "AVX512F"),
    ("vinsertf32x8", "zmm1{k1}{z}, zmm2, ymm3/m256, imm8", "EVEX.512.66.0F3A.W0 1A /r ib", "RVMI", "AVX512DQ"),
    ("vcmpps",     "k1, xmm2, xmm3/m128/m32bcst, imm8", "EVEX.128.0F.W0 C2 /r ib",  "RVMI", "AVX512VL"),
    ("vcmpps",     "k1, ymm2, ymm3/m256/m32bcst, imm8", "EVEX.256.0F.W0 C2 /r ib",  "RVMI", "AVX512VL"),
    ("vcmpps",     "k1, zmm2, zmm3/m512/m32bcst, imm8", "EVEX.512.0F.W0 C2 /r ib",  "RVMI", "AVX512F"),
    # scalar single precision (LLIG: EVEX.L'L ignored, encoded 0; Tuple1 Scalar, N = 4)
    ("vaddss",     "xmm1{k1}{z}, xmm2, xmm3/m32", "EVEX.LLIG.F3.0F.W0 58 /r",   "RVM", "AVX512F"),
    ("vmulss",     "xmm1{k1}{z}, xmm2, xmm3/m32", "EVEX.LLIG.F3.0F.W0 59 /r",   "RVM", "AVX512F"),
    ("vsubss",     "xmm1{k1}{z}, xmm2, xmm3/m32", "EVEX.LLIG.F3.0F.W0 5C /r",   "RVM", "AVX512F"),
    ("vminss",     "xmm1{k1}{z}, xmm2, xmm3/m32", "EVEX.LLIG.F3.0F.W0 5D /r",   "RVM", "AVX512F"),
    ("vdivss",     "xmm1{k1}{z}, xmm2, xmm3/m32", "EVEX.LLIG.F3.0F.W0 5E /r",   "RVM", "AVX512F"),
    ("vmaxss",     "xmm1{k1}{z}, xmm2, xmm3/m32", "EVEX.LLIG.F3.0F.W0 5F /r",   "RVM", "AVX512F"),
    ("vfmadd132ss", "xmm1{k1}{z}, xmm2, xmm3/m32", "EVEX.LLIG.66.0F38.W0 99 /r", "RVM", "AVX512F"),
    ("vfmadd213ss", "xmm1{k1}{z}, xmm2, xmm3/m32", "EVEX.LLIG.66.0F38.W0 A9 /r", "RVM", "AVX512F"),
    ("vfmadd231ss", "xmm1{k1}{z}, xmm2, xmm3/m32", "EVEX.LLIG.66.0F38.W0 B9 /r", "RVM", "AVX512F"),
]

# The six classic ALU operations share one shape (SDM "ADD", "SUB", ...): /digit for the
# 81/83 immediate group, the MR opcode, the RM opcode. Rows are spelled out in SDM notation.
_ALU = {"add": (0, "01", "03"), "or": (1, "09", "0B"), "and": (4, "21", "23"),
        "sub": (5, "29", "2B"), "xor": (6, "31", "33"), "cmp": (7, "39", "3B")}
for _m, (_d, _mr, _rm) in _ALU.items():
    _ROWS += [
        (_m, "r/m64, r64",   f"REX.W {_mr} /r",     "MR", "X64"),
        (_m, "r/m32, r32",   f"{_mr} /r",           "MR", "X64"),
        (_m, "r64, r/m64",   f"REX.W {_rm} /r",     "RM", "X64"),
        (_m, "r32, r/m32",   f"{_rm} /r",           "RM", "X64"),
        (_m, "r/m64, imm8",  f"REX.W 83 /{_d} ib",  "MI", "X64"),   # imm8 first: shortest wins
        (_m, "r/m32, imm8",  f"83 /{_d} ib",        "MI", "X64"),
        (_m, "r/m64, imm32", f"REX.W 81 /{_d} id",  "MI", "X64"),
        (_m, "r/m32, imm32", f"81 /{_d} id",        "MI", "X64"),
    ]
# Shifts: C1 /digit ib by an immediate, D3 /digit by CL (SDM "SAL/SAR/SHL/SHR").
for _m, _d in {"shl": 4, "shr": 5, "sar": 7}.items():
    _ROWS += [
        (_m, "r/m64, imm8",  f"REX.W C1 /{_d} ib",  "MI", "X64"),
        (_m, "r/m32, imm8",  f"C1 /{_d} ib",        "MI", "X64"),
        (_m, "r/m64, CL",    f"REX.W D3 /{_d}",     "MC", "X64"),
        (_m, "r/m32, CL",    f"D3 /{_d}",           "MC", "X64"),
    ]
# Jcc: 70+cc cb (rel8) and 0F 80+cc cd (rel32); the assembler picks by distance.
for _m, _cc in CONDITIONS.items():
    _ROWS += [
        (_m, "rel8",  f"{0x70 + _cc:02X} cb",     "D", "X64"),
        (_m, "rel32", f"0F {0x80 + _cc:02X} cd",  "D", "X64"),
    ]

# Packed rows that exist at 128, 256 (AVX512VL) and 512 bits (Full / Full Mem tuple types).
# `{v}` is replaced by xmm/ymm/zmm, `{L}` by 128/256/512; `bcst` adds the /mNNbcst alternative.
_VEX_PACKED = [
    # mnemonic,      encoding (VEX.{L}...),                      Op/En,  ISA
    ("vaddps",       "VEX.{L}.0F.WIG 58 /r",       "RVM",  "AVX"),
    ("vmulps",       "VEX.{L}.0F.WIG 59 /r",       "RVM",  "AVX"),
    ("vsubps",       "VEX.{L}.0F.WIG 5C /r",       "RVM",  "AVX"),
    ("vminps",       "VEX.{L}.0F.WIG 5D /r",       "RVM",  "AVX"),
    ("vdivps",       "VEX.{L}.0F.WIG 5E /r",       "RVM",  "AVX"),
    ("vmaxps",       "VEX.{L}.0F.WIG 5F /r",       "RVM",  "AVX"),
    ("vandps",       "VEX.{L}.0F.WIG 54 /r",       "RVM",  "AVX"),
    ("vandnps",      "VEX.{L}.0F.WIG 55 /r",       "RVM",  "AVX"),
    ("vorps",        "VEX.{L}.0F.WIG 56 /r",       "RVM",  "AVX"),
    ("vxorps",       "VEX.{L}.0F.WIG 57 /r",       "RVM",  "AVX"),
    ("vunpcklps",    "VEX.{L}.0F.WIG 14 /r",       "RVM",  "AVX"),
    ("vunpckhps",    "VEX.{L}.0F.WIG 15 /r",       "RVM",  "AVX"),
    ("vhaddps",      "VEX.{L}.F2.0F.WIG 7C /r",    "RVM",  "AVX"),
    ("vshufps",      "VEX.{L}.0F.WIG C6 /r ib",    "RVMI", "AVX"),
    ("vcmpps",       "VEX.{L}.0F.WIG C2 /r ib",    "RVMI", "AVX"),
    ("vblendps",     "VEX.{L}.66.0F3A.WIG 0C /r ib", "RVMI", "AVX"),
    ("vroundps",     "VEX.{L}.66.0F3A.WIG 08 /r ib", "RMI",  "AVX"),
    ("vsqrtps",      "VEX.{L}.0F.WIG 51 /r",       "RM",   "AVX"),
    ("vrcpps",       "VEX.{L}.0F.WIG 53 /r",       "RM",   "AVX"),
    ("vrsqrtps",     "VEX.{L}.0F.WIG 52 /r",       "RM",   "AVX"),
    ("vcvtdq2ps",    "VEX.{L}.0F.WIG 5B /r",       "RM",   "AVX"),
    ("vcvtps2dq",    "VEX.{L}.66.0F.WIG 5B /r",    "RM",   "AVX"),
    ("vcvttps2dq",   "VEX.{L}.F3.0F.WIG 5B /r",    "RM",   "AVX"),
    ("vfmadd132ps",  "VEX.{L}.66.0F38.W0 98 /r",   "RVM",  "FMA"),
    ("vfmadd213ps",  "VEX.{L}.66.0F38.W0 A8 /r",   "RVM",  "FMA"),
    ("vfmadd231ps",  "VEX.{L}.66.0F38.W0 B8 /r",   "RVM",  "FMA"),
    ("vfmsub231ps",  "VEX.{L}.66.0F38.W0 BA /r",   "RVM",  "FMA"),
    ("vfnmadd132ps", "VEX.{L}.66.0F38.W0 9C /r",   "RVM",  "FMA"),
    ("vfnmadd213ps", "VEX.{L}.66.0F38.W0 AC /r",   "RVM",  "FMA"),
    ("vfnmadd231ps", "VEX.{L}.66.0F38.W0 BC /r",   "RVM",  "FMA"),
    ("vpaddb",       "VEX.{L}.66.0F.WIG FC /r",    "RVM",  "AVX2"),
    ("vpaddw",       "VEX.{L}.66.0F.WIG FD /r",    "RVM",  "AVX2"),
    ("vpaddd",       "VEX.{L}.66.0F.WIG FE /r",    "RVM",  "AVX2"),
    ("vpaddq",       "VEX.{L}.66.0F.WIG D4 /r",    "RVM",  "AVX2"),
    ("vpsubd",       "VEX.{L}.66.0F.WIG FA /r",    "RVM",  "AVX2"),
    ("vpmulld",      "VEX.{L}.66.0F38.WIG 40 /r",  "RVM",  "AVX2"),
    ("vpmaddubsw",   "VEX.{L}.66.0F38.WIG 04 /r",  "RVM",  "AVX2"),
    ("vpmaddwd",     "VEX.{L}.66.0F.WIG F5 /r",    "RVM",  "AVX2"),
    ("vpackssdw",    "VEX.{L}.66.0F.WIG 6B /r",    "RVM",  "AVX2"),
    ("vpacksswb",    "VEX.{L}.66.0F.WIG 63 /r",    "RVM",  "AVX2"),
    ("vpackuswb",    "VEX.{L}.66.0F.WIG 67 /r",    "RVM",  "AVX2"),
    ("vpabsd",       "VEX.{L}.66.0F38.WIG 1E /r",  "RM",   "AVX2"),
    ("vpmaxsd",      "VEX.{L}.66.0F38.WIG 3D /r",  "RVM",  "AVX2"),
    ("vpminsd",      "VEX.{L}.66.0F38.WIG 39 /r",  "RVM",  "AVX2"),
    ("vpcmpeqd",     "VEX.{L}.66.0F.WIG 76 /r",    "RVM",  "AVX2"),
    ("vpcmpgtd",     "VEX.{L}.66.0F.WIG 66 /r",    "RVM",  "AVX2"),
    ("vpand",        "VEX.{L}.66.0F.WIG DB /r",    "RVM",  "AVX2"),
    ("vpandn",       "VEX.{L}.66.0F.WIG DF /r",    "RVM",  "AVX2"),
    ("vpor",         "VEX.{L}.66.0F.WIG EB /r",    "RVM",  "AVX2"),
    ("vpxor",        "VEX.{L}.66.0F.WIG EF /r",    "RVM",  "AVX2"),
    ("vpsllw",       "VEX.{L}.66.0F.WIG 71 /6 ib", "VMI",  "AVX2"),
    ("vpsrlw",       "VEX.{L}.66.0F.WIG 71 /2 ib", "VMI",  "AVX2"),
    ("vpsraw",       "VEX.{L}.66.0F.WIG 71 /4 ib", "VMI",  "AVX2"),
    ("vpslld",       "VEX.{L}.66.0F.WIG 72 /6 ib", "VMI",  "AVX2"),
    ("vpsrld",       "VEX.{L}.66.0F.WIG 72 /2 ib", "VMI",  "AVX2"),
    ("vpsrad",       "VEX.{L}.66.0F.WIG 72 /4 ib", "VMI",  "AVX2"),
    ("vpsllq",       "VEX.{L}.66.0F.WIG 73 /6 ib", "VMI",  "AVX2"),
    ("vpsrlq",       "VEX.{L}.66.0F.WIG 73 /2 ib", "VMI",  "AVX2"),
]

_EVEX_PACKED = [
    # mnemonic,      encoding (EVEX.{L}...),        Op/En,  ISA,         broadcast element bits
    ("vmovups",      "EVEX.{L}.0F.W0 10 /r",        "RM",   "AVX512F",   0),
    ("vmovaps",      "EVEX.{L}.0F.W0 28 /r",        "RM",   "AVX512F",   0),
    ("vmovdqu32",    "EVEX.{L}.F3.0F.W0 6F /r",     "RM",   "AVX512F",   0),
    ("vmovdqu8",     "EVEX.{L}.F2.0F.W0 6F /r",     "RM",   "AVX512BW",  0),
    ("vmovdqu16",    "EVEX.{L}.F2.0F.W1 6F /r",     "RM",   "AVX512BW",  0),
    ("vaddps",       "EVEX.{L}.0F.W0 58 /r",        "RVM",  "AVX512F",   32),
    ("vmulps",       "EVEX.{L}.0F.W0 59 /r",        "RVM",  "AVX512F",   32),
    ("vsubps",       "EVEX.{L}.0F.W0 5C /r",        "RVM",  "AVX512F",   32),
    ("vminps",       "EVEX.{L}.0F.W0 5D /r",        "RVM",  "AVX512F",   32),
    ("vdivps",       "EVEX.{L}.0F.W0 5E /r",        "RVM",  "AVX512F",   32),
    ("vmaxps",       "EVEX.{L}.0F.W0 5F /r",        "RVM",  "AVX512F",   32),
    ("vandps",       "EVEX.{L}.0F.W0 54 /r",        "RVM",  "AVX512DQ",  32),
    ("vandnps",      "EVEX.{L}.0F.W0 55 /r",        "RVM",  "AVX512DQ",  32),
    ("vorps",        "EVEX.{L}.0F.W0 56 /r",        "RVM",  "AVX512DQ",  32),
    ("vxorps",       "EVEX.{L}.0F.W0 57 /r",        "RVM",  "AVX512DQ",  32),
    ("vunpcklps",    "EVEX.{L}.0F.W0 14 /r",        "RVM",  "AVX512F",   32),
    ("vunpckhps",    "EVEX.{L}.0F.W0 15 /r",        "RVM",  "AVX512F",   32),
    ("vshufps",      "EVEX.{L}.0F.W0 C6 /r ib",     "RVMI", "AVX512F",   32),
    ("vsqrtps",      "EVEX.{L}.0F.W0 51 /r",        "RM",   "AVX512F",   32),
    ("vrcp14ps",     "EVEX.{L}.66.0F38.W0 4C /r",   "RM",   "AVX512F",   32),
    ("vcvtdq2ps",    "EVEX.{L}.0F.W0 5B /r",        "RM",   "AVX512F",   32),
    ("vcvtps2dq",    "EVEX.{L}.66.0F.W0 5B /r",     "RM",   "AVX512F",   32),
    ("vcvttps2dq",   "EVEX.{L}.F3.0F.W0 5B /r",     "RM",   "AVX512F",   32),
    ("vfmadd132ps",  "EVEX.{L}.66.0F38.W0 98 /r",   "RVM",  "AVX512F",   32),
    ("vfmadd213ps",  "EVEX.{L}.66.0F38.W0 A8 /r",   "RVM",  "AVX512F",   32),
    ("vfmadd231ps",  "EVEX.{L}.66.0F38.W0 B8 /r",   "RVM",  "AVX512F",   32),
    ("vfmsub231ps",  "EVEX.{L}.66.0F38.W0 BA /r",   "RVM",  "AVX512F",   32),
    ("vfnmadd132ps", "EVEX.{L}.66.0F38.W0 9C /r",   "RVM",  "AVX512F",   32),
    ("vfnmadd213ps", "EVEX.{L}.66.0F38.W0 AC /r",   "RVM",  "AVX512F",   32),
    ("vfnmadd231ps", "EVEX.{L}.66.0F38.W0 BC /r",   "RVM",  "AVX512F",   32),
    ("vpaddd",       "EVEX.{L}.66.0F.W0 FE /r",     "RVM",  "AVX512F",   32),
    ("vpsubd",       "EVEX.{L}.66.0F.W0 FA /r",     "RVM",  "AVX512F",   32),
    ("vpmulld",      "EVEX.{L}.66.0F38.W0 40 /r",   "RVM",  "AVX512F",   32),
    ("vpmaxsd",      "EVEX.{L}.66.0F38.W0 3D /r",   "RVM",  "AVX512F",   32),
    ("vpminsd",      "EVEX.{L}.66.0F38.W0 39 /r",   "RVM",  "AVX512F",   32),
    ("vpandd",       "EVEX.{L}.66.0F.W0 DB /r",     "RVM",  "AVX512F",   32),
    ("vpandnd",      "EVEX.{L}.66.0F.W0 DF /r",     "RVM",  "AVX512F",   32),
    ("vpord",        "EVEX.{L}.66.0F.W0 EB /r",     "RVM",  "AVX512F",   32),
    ("vpxord",       "EVEX.{L}.66.0F.W0 EF /r",     "RVM",  "AVX512F",   32),
    ("vpmaddwd",     "EVEX.{L}.66.0F.WIG F5 /r",    "RVM",  "AVX512BW",  0),
    ("vpmaddubsw",   "EVEX.{L}.66.0F38.WIG 04 /r",  "RVM",  "AVX512BW",  0),
    ("vpsllw",       "EVEX.{L}.66.0F.WIG 71 /6 ib", "VMI",  "AVX512BW",  0),
    ("vpsrlw",       "EVEX.{L}.66.0F.WIG 71 /2 ib", "VMI",  "AVX512BW",  0),
    ("vpsraw",       "EVEX.{L}.66.0F.WIG 71 /4 ib", "VMI",  "AVX512BW",  0),
    ("vpabsd",       "EVEX.{L}.66.0F38.W0 1E /r",   "RM",   "AVX512F",   32),
    ("vpermt2ps",    "EVEX.{L}.66.0F38.W0 7F /r",   "RVM",  "AVX512F",   32),
    ("vpermi2ps",    "EVEX.{L}.66.0F38.W0 77 /r",   "RVM",  "AVX512F",   32),
    ("vblendmps",    "EVEX.{L}.66.0F38.W0 65 /r",   "RVM",  "AVX512F",   32),
    ("vpslld",       "EVEX.{L}.66.0F.W0 72 /6 ib",  "VMI",  "AVX512F",   32),
    ("vpsrld",       "EVEX.{L}.66.0F.W0 72 /2 ib",  "VMI",  "AVX512F",   32),
    ("vpsrad",       "EVEX.{L}.66.0F.W0 72 /4 ib",  "VMI",  "AVX512F",   32),
    ("vpdpbusd",     "EVEX.{L}.66.0F38.W0 50 /r",   "RVM",  "AVX512_VNNI", 32),
    ("vpdpbusds",    "EVEX.{L}.66.0F38.W0 51 /r",   "RVM",  "AVX512_VNNI", 32),
    ("vpdpwssd",     "EVEX.{L}.66.0F38.W0 52 /r",   "RVM",  "AVX512_VNNI", 32),
    ("vdpbf16ps",    "EVEX.{L}.F3.0F38.W0 52 /r",   "RVM",  "AVX512_BF16", 32),
    ("vcvtne2ps2bf16", "EVEX.{L}.F2.0F38.W0 72 /r", "RVM",  "AVX512_BF16", 32),
    ("vaddph",       "EVEX.{L}.NP.MAP5.W0 58 /r",   "RVM",  "AVX512_FP16", 16),
    ("vmulph",       "EVEX.{L}.NP.MAP5.W0 59 /r",   "RVM",  "AVX512_FP16", 16),
    ("vfmadd132ph",  "EVEX.{L}.66.MAP6.W0 98 /r",   "RVM",  "AVX512_FP16", 16),
    ("vfmadd213ph",  "EVEX.{L}.66.MAP6.W0 A8 /r",   "RVM",  "AVX512_FP16", 16),
    ("vfmadd231ph",  "EVEX.{L}.66.MAP6.W0 B8 /r",   "RVM",  "AVX512_FP16", 16),
]
_VL = {128: "xmm", 256: "ymm", 512: "zmm"}
_OPERANDS_BY_OPENC = {   # operand text per Op/En for the packed families; {v} vector, {M} r/m slot
    "RVM":  "{v}1{k1}{z}, {v}2, {v}3/{M}",
    "RVMI": "{v}1{k1}{z}, {v}2, {v}3/{M}, imm8",
    "RM":   "{v}1{k1}{z}, {v}2/{M}",
    "RMI":  "{v}1{k1}{z}, {v}2/{M}, imm8",
    "VMI":  "{v}1{k1}{z}, {v}2/{M}, imm8",
}
for _m, _enc, _oe, _isa in _VEX_PACKED:
    for _L in (128, 256):
        _ops = _OPERANDS_BY_OPENC[_oe].replace("{k1}{z}", "").replace("{v}", _VL[_L]).replace("{M}", f"m{_L}")
        if _oe == "VMI":                  # VEX shifts by immediate take no memory source (EVEX ones do)
            _ops = _ops.replace(f"/m{_L}", "")
        _ROWS.append((_m, _ops, _enc.format(L=_L), _oe, _isa))
for _m, _enc, _oe, _isa, _bc in _EVEX_PACKED:
    for _L in (128, 256, 512):
        _M = f"m{_L}" + (f"/m{_bc}bcst" if _bc else "")
        _ops = _OPERANDS_BY_OPENC[_oe].replace("{v}", _VL[_L]).replace("{M}", _M)
        _ROWS.append((_m, _ops, _enc.format(L=_L), _oe, _isa if _L == 512 else _isa + "+VL"))
        if _m in ("vmovups", "vmovaps", "vmovdqu32", "vmovdqu8", "vmovdqu16"):   # the store, MR: 11/29/7F /r
            _op = {"10": "11", "28": "29", "6F": "7F"}[_enc.split()[1]]
            _ROWS.append((_m, f"{_VL[_L]}2/m{_L}{{k1}}, {_VL[_L]}1",
                          _enc.format(L=_L).replace(" " + _enc.split()[1] + " ", f" {_op} "), "MR",
                          _isa if _L == 512 else _isa + "+VL"))
# EVEX rows whose memory operand is narrower than the vector (Half / Quarter / Tuple1 tuple types).
_ROWS += [
    ("vbroadcastss", "xmm1{k1}{z}, xmm2/m32",       "EVEX.128.66.0F38.W0 18 /r",  "RM",  "AVX512VL"),
    ("vbroadcastss", "ymm1{k1}{z}, xmm2/m32",       "EVEX.256.66.0F38.W0 18 /r",  "RM",  "AVX512VL"),
    ("vbroadcastss", "zmm1{k1}{z}, xmm2/m32",       "EVEX.512.66.0F38.W0 18 /r",  "RM",  "AVX512F"),
    ("vpbroadcastd", "xmm1{k1}{z}, xmm2/m32",       "EVEX.128.66.0F38.W0 58 /r",  "RM",  "AVX512VL"),
    ("vpbroadcastd", "ymm1{k1}{z}, xmm2/m32",       "EVEX.256.66.0F38.W0 58 /r",  "RM",  "AVX512VL"),
    ("vpbroadcastd", "zmm1{k1}{z}, xmm2/m32",       "EVEX.512.66.0F38.W0 58 /r",  "RM",  "AVX512F"),
    ("vpermps",      "ymm1{k1}{z}, ymm2, ymm3/m256/m32bcst", "EVEX.256.66.0F38.W0 16 /r", "RVM", "AVX512VL"),
    ("vpermps",      "zmm1{k1}{z}, zmm2, zmm3/m512/m32bcst", "EVEX.512.66.0F38.W0 16 /r", "RVM", "AVX512F"),
    ("vshuff32x4",   "ymm1{k1}{z}, ymm2, ymm3/m256/m32bcst, imm8", "EVEX.256.66.0F3A.W0 23 /r ib", "RVMI",
     "AVX512VL"),
    ("vshuff32x4",   "zmm1{k1}{z}, zmm2, zmm3/m512/m32bcst, imm8", "EVEX.512.66.0F3A.W0 23 /r ib", "RVMI",
     "AVX512F"),
    ("vcvtph2ps",    "xmm1{k1}{z}, xmm2/m64",       "EVEX.128.66.0F38.W0 13 /r",  "RM",  "AVX512VL"),
    ("vcvtph2ps",    "ymm1{k1}{z}, xmm2/m128",      "EVEX.256.66.0F38.W0 13 /r",  "RM",  "AVX512VL"),
    ("vcvtph2ps",    "zmm1{k1}{z}, ymm2/m256",      "EVEX.512.66.0F38.W0 13 /r",  "RM",  "AVX512F"),
    ("vcvtps2ph",    "xmm1/m64{k1}{z}, xmm2, imm8", "EVEX.128.66.0F3A.W0 1D /r ib", "MRI", "AVX512VL"),
    ("vcvtps2ph",    "xmm1/m128{k1}{z}, ymm2, imm8", "EVEX.256.66.0F3A.W0 1D /r ib", "MRI", "AVX512VL"),
    ("vcvtps2ph",    "ymm1/m256{k1}{z}, zmm2, imm8", "EVEX.512.66.0F3A.W0 1D /r ib", "MRI", "AVX512F"),
    ("vpmovzxbd",    "xmm1{k1}{z}, xmm2/m32",       "EVEX.128.66.0F38.WIG 31 /r", "RM",  "AVX512VL"),
    ("vpmovzxbd",    "ymm1{k1}{z}, xmm2/m64",       "EVEX.256.66.0F38.WIG 31 /r", "RM",  "AVX512VL"),
    ("vpmovzxbd",    "zmm1{k1}{z}, xmm2/m128",      "EVEX.512.66.0F38.WIG 31 /r", "RM",  "AVX512F"),
    ("vpmovsxbd",    "xmm1{k1}{z}, xmm2/m32",       "EVEX.128.66.0F38.WIG 21 /r", "RM",  "AVX512VL"),
    ("vpmovsxbd",    "ymm1{k1}{z}, xmm2/m64",       "EVEX.256.66.0F38.WIG 21 /r", "RM",  "AVX512VL"),
    ("vpmovsxbd",    "zmm1{k1}{z}, xmm2/m128",      "EVEX.512.66.0F38.WIG 21 /r", "RM",  "AVX512F"),
    ("vpmovzxwd",    "zmm1{k1}{z}, ymm2/m256",      "EVEX.512.66.0F38.WIG 33 /r", "RM",  "AVX512F"),
    ("vpmovsxwd",    "zmm1{k1}{z}, ymm2/m256",      "EVEX.512.66.0F38.WIG 23 /r", "RM",  "AVX512F"),
]

# ---------------------------------------------------------------------------------------------
# Parsing rows into Forms
# ---------------------------------------------------------------------------------------------

_GPR_KINDS = {"r64", "r32", "r16", "r8"}
_MEM_SIZES = (8, 16, 32, 64, 128, 256, 512)
_ALL_MEM = frozenset({"m"} | {f"m{b}" for b in _MEM_SIZES})
_VEC_LETTER = {"xmm": "x", "ymm": "y", "zmm": "z"}
_MAPS = {"0F": 1, "0F38": 2, "0F3A": 3, "MAP5": 5, "MAP6": 6}
_PP = {"NP": 0, "66": 1, "F3": 2, "F2": 3}
_IMM_BYTES = {"ib": 1, "iw": 2, "id": 4, "io": 8}


@dataclass(frozen=True)
class Form:
    """One parsed row. Fields after `isa` are what the encoders read on the hot path."""

    mnemonic: str
    operands: str             # the row's operand text, as written
    encoding: str             # the row's encoding text, as written
    openc: str                # Op/En class: RM, MR, MI, RVM, VMI, RVMI, RVMR, MVR, M, MC, O, OI, ZO, D
    isa: str
    slots: tuple              # per operand: frozenset of accepted operand kinds
    prefix: str               # "legacy" | "vex" | "evex"
    opcode: bytes             # legacy: all opcode bytes; VEX/EVEX: the one opcode byte
    digit: int                # /0-/7 ModRM.reg opcode extension, or -1 for /r
    imm: int                  # immediate bytes (is4 counts as one)
    rel: int                  # branch displacement bytes (1 or 4), 0 otherwise
    rex: int                  # legacy: 0x48 for REX.W, else 0
    mandatory: bytes          # legacy mandatory prefix (66/F2/F3; F0: LOCK), usually empty
    byte_regs: bool           # legacy: a slot is r8, so spl/bpl/sil/dil force a REX prefix
    L: int                    # VEX.L / EVEX.L'L (LIG -> 0)
    pp: int                   # implied prefix: 0 none, 1 66, 2 F3, 3 F2
    mmmmm: int                # opcode map: 1 0F, 2 0F38, 3 0F3A, 5 MAP5, 6 MAP6
    W: int                    # VEX/EVEX.W (WIG -> 0)
    zero_ok: bool             # destination slot allows {z}
    mem_n: int                # EVEX disp8*N scale for a full memory operand (its size in bytes)
    bcst_n: int               # EVEX disp8*N scale under {1toN} (the element size), 0 if no bcst
    vex2_ok: bool             # 2-byte VEX possible: map 0F and W0 (then X, B decide at encode time)
    t0: int                   # VEX3 byte 1 / EVEX P0 template, R X B (R') set = "no extension"
    t1: int                   # VEX3 byte 2 / EVEX P1 template, vvvv = 1111
    t2: int                   # VEX2 byte 1 / EVEX P2 template
    sibmem: bool = False      # AMX tile load/store: the memory operand must have an index (the stride)

    @property
    def signature(self) -> str:
        return self.operands


def _slot_kinds(text: str, prefix: str, opcode: bytes, rex_w: bool) -> tuple[frozenset, bool, bool, int, int]:
    """Accepted kinds for one operand slot, plus (masked, zeroing, mem bytes, bcst bytes)."""
    masked = "{k" in text
    zeroing = "{z}" in text
    text = re.sub(r"\{[^}]*\}", "", text).strip()
    text = re.sub(r"\br/m(\d+)", r"r\1/m\1", text)        # "r/m64" means "r64/m64"
    kinds: set[str] = set()
    mem_n = bcst_n = 0
    for alt in text.split("/"):
        alt = alt.strip()
        m = re.fullmatch(r"(xmm|ymm|zmm)\d*", alt)
        if m:
            v = _VEC_LETTER[m.group(1)]
            kinds.add(v)
            if prefix == "evex":
                kinds.add(v + "h")
                if masked:
                    kinds.add(v + "k")
            continue
        if re.fullmatch(r"k\d", alt):
            kinds.add("k")
            continue
        if re.fullmatch(r"tmm\d", alt):
            kinds.add("t")
            continue
        if alt == "sibmem":
            kinds |= set(_ALL_MEM)
            continue
        m = re.fullmatch(r"m(\d+)bcst", alt)
        if m:
            kinds.add("b" + m.group(1))
            bcst_n = int(m.group(1)) // 8
            continue
        m = re.fullmatch(r"m(\d*)", alt)
        if m:
            if m.group(1):
                size = int(m.group(1))
                mem_n = size // 8
                new = {"m", f"m{size}"}
            else:
                new = set(_ALL_MEM)
            kinds |= new
            if masked:
                kinds |= {k + "k" for k in new}
            continue
        if alt in _GPR_KINDS:
            kinds.add(alt)
            continue
        if alt == "CL":
            kinds.add("r8")                    # the MC encoder checks that it is cl
            continue
        if alt == "imm8":
            kinds |= {"i8"} if opcode and opcode[-1] in SIGN_EXTENDED_IMM8 else {"i8", "u8"}
            continue
        if alt == "imm32":
            kinds |= {"i8", "u8", "i32"} if rex_w else {"i8", "u8", "i32", "u32"}
            continue
        if alt == "imm64":
            kinds |= {"i8", "u8", "i32", "u32", "i64"}
            continue
        if alt in ("rel8", "rel32"):
            kinds.add("rel")
            continue
        raise ValueError(f"unknown operand {alt!r} in {text!r}")
    return frozenset(kinds), masked, zeroing, mem_n, bcst_n


def parse_form(row: tuple[str, ...]) -> Form:
    mnemonic, operands, encoding, openc, isa = row
    toks = encoding.replace("/is4", "is4").split()
    prefix = "legacy"
    L = pp = W = 0
    mmmmm = 1
    rex = 0
    mandatory = b""
    opcode = bytearray()
    digit = -1
    imm = rel = 0
    if toks[0].startswith(("VEX.", "EVEX.")):
        head = toks.pop(0).split(".")
        prefix = head[0].lower()
        for f in head[1:]:
            if f in ("128", "L0", "LZ", "LIG", "LLIG"):
                L = 0
            elif f in ("256", "L1"):
                L = 1
            elif f == "512":
                L = 2
            elif f in _PP:
                pp = _PP[f]
            elif f in _MAPS:
                mmmmm = _MAPS[f]
            elif f in ("W0", "WIG"):
                W = 0
            elif f == "W1":
                W = 1
            else:
                raise ValueError(f"bad {prefix} field {f!r} in {encoding!r}")
    else:
        if toks[0] == "REX.W":
            rex = 0x48
            toks.pop(0)
        while len(toks) > 1 and toks[0] in ("66", "F2", "F3", "F0") and toks[1] in ("REX.W", "0F"):
            mandatory += bytes.fromhex(toks.pop(0))
    for t in toks:
        if re.fullmatch(r"[0-9A-F]{2}", t):
            opcode.append(int(t, 16))
        elif re.fullmatch(r"[0-9A-F]{2}\+r[bwdo]", t):
            opcode.append(int(t[:2], 16))
        elif t == "/r":
            digit = -1
        elif re.fullmatch(r"/[0-7]", t):
            digit = int(t[1])
        elif t in _IMM_BYTES:
            imm = _IMM_BYTES[t]
        elif t == "is4":
            imm = 1
        elif t in ("cb", "cd"):
            rel = 1 if t == "cb" else 4
        else:
            raise ValueError(f"bad encoding token {t!r} in {encoding!r}")
    slots = []
    zero_ok = False
    mem_n = bcst_n = 0
    byte_regs = False
    for i, text in enumerate(s for s in operands.split(",") if s.strip()):
        kinds, masked, zeroing, mn, bn = _slot_kinds(text, prefix, bytes(opcode), bool(rex))
        slots.append(kinds)
        zero_ok |= zeroing and i == 0
        mem_n = mem_n or mn
        bcst_n = bcst_n or bn
        byte_regs |= "r8" in kinds
    if prefix == "vex":
        # VEX3: C4 | R X B m-mmmm | W vvvv L pp ; VEX2: C5 | R vvvv L pp  (inverted R X B vvvv)
        t0 = 0xE0 | mmmmm
        t1 = (W << 7) | 0x78 | (L << 2) | pp
        t2 = 0xF8 | (L << 2) | pp
    elif prefix == "evex":
        # P0: R X B R' 0 m m m ; P1: W vvvv 1 pp ; P2: z L'L b V' a a a  (R X B R' vvvv V' inverted)
        t0 = 0xF0 | mmmmm
        t1 = (W << 7) | 0x78 | 0x04 | pp
        t2 = (L << 5) | 0x08
    else:
        t0 = t1 = t2 = 0
    return Form(mnemonic, operands, encoding, openc, isa, tuple(slots), prefix, bytes(opcode), digit, imm, rel,
                rex, mandatory, byte_regs, L, pp, mmmmm, W, zero_ok, mem_n, bcst_n,
                mmmmm == 1 and W == 0, t0, t1, t2, "sibmem" in operands)


# ---------------------------------------------------------------------------------------------
# Lookups, built per mnemonic on first use
# ---------------------------------------------------------------------------------------------
# Parsing every row and expanding every signature takes tens of milliseconds, which every
# process would pay at import although a kernel uses a few dozen mnemonics. So import only
# groups the rows by mnemonic; a mnemonic's Forms and signatures are built the first time it is
# asked for, from the same rows. FORMS, LOOKUP and FORMS_BY_MNEMONIC, the whole table at once,
# are built on first access (tests and tools).

_ROWS_BY_MNEMONIC: dict[str, list[tuple[str, ...]]] = {}
for _row in _ROWS:
    _ROWS_BY_MNEMONIC.setdefault(_row[0], []).append(_row)

MNEMONICS: frozenset[str] = frozenset(_ROWS_BY_MNEMONIC) | frozenset(
    a for a, t in ALIASES.items() if t in _ROWS_BY_MNEMONIC)


@functools.lru_cache(maxsize=None)
def forms_of(mnemonic: str) -> tuple[Form, ...]:
    """The parsed rows of `mnemonic` (not an alias), in table order; () if it has none."""
    return tuple(parse_form(r) for r in _ROWS_BY_MNEMONIC.get(mnemonic, ()))


@functools.lru_cache(maxsize=None)
def signatures_of(mnemonic: str) -> dict[tuple, Form]:
    """(kind, kind, ...) -> Form for `mnemonic` or an alias of it: every operand-kind signature
    its rows accept, the first row winning, except that VEX beats EVEX for operands both can
    encode. Empty for an unknown mnemonic. Do not modify the dict: it is shared."""
    out: dict[tuple, Form] = {}
    for f in forms_of(ALIASES.get(mnemonic, mnemonic)):
        for kinds in itertools.product(*f.slots):
            old = out.get(kinds)
            if old is None or (old.prefix == "evex" and f.prefix == "vex"):
                out[kinds] = f
    return out


def _whole_table() -> dict:
    taken = dict.fromkeys(_ROWS_BY_MNEMONIC, 0)
    forms = []
    for row in _ROWS:                     # table order: each row's Form, as forms_of parsed it
        forms.append(forms_of(row[0])[taken[row[0]]])
        taken[row[0]] += 1
    lookup = {(m,) + kinds: f for m in sorted(MNEMONICS) for kinds, f in signatures_of(m).items()}
    by_mnemonic = {m: list(forms_of(m)) for m in _ROWS_BY_MNEMONIC}
    return {"FORMS": tuple(forms), "LOOKUP": lookup, "FORMS_BY_MNEMONIC": by_mnemonic}


def __getattr__(name: str):
    # FORMS: every Form in table order; LOOKUP: (mnemonic, kind, ...) -> Form;
    # FORMS_BY_MNEMONIC: mnemonic -> [Form]. Built once, on first access.
    if name in ("FORMS", "LOOKUP", "FORMS_BY_MNEMONIC"):
        globals().update(_whole_table())
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
