"""The AArch64 instruction-form table, in the Arm ARM's own notation.

Each row is (mnemonic, operands, fixed bits, encoding group, arrangements, feature), the operands
written as the Arm Architecture Reference Manual (DDI 0487, chapter C6/C7) prints them, the fixed
bits as the encoding diagram's 32-bit word with every operand field zero:

    ("fmla", "Vd.T, Vn.T, Vm.T",        "0x0e20cc00", "asimdsame", "sz:Q 2s 4s 2d", "ASIMD")
    ("fmla", "Vd.T, Vn.T, Vm16.h[i]",   "0x0f001000", "asimdelem", "Q 4h 8h",       "FP16")

Operand slots (what a slot accepts is the operand's `kind`, see operands.py):

    Xd Xn Xm Xa Xt Xt2      x0..x30 or xzr        Xd|SP Xn|SP     x0..x30 or sp
    Wd ...                  the same, 32-bit       Qt Dt St Ht Bt  SIMD&FP scalar registers
    Vd.T  Vn.4s  ...        a SIMD register arrangement (T: one of the row's arrangements)
    Vm.s[i] Vm.4b[i]        an element; Vm16.h[i]: the fp16 by-element form, whose Vm field has
                            only 4 bits (v0..v15) — the restriction lives in the slot
    {Vt.T, Vt2.T}           a list of consecutive registers (a Python list)   {Vt.s}[i]: one lane
    #imm  #shift  #0.0      immediates, checked against the group's field width when inserted;
    #bimm  #fimm            a logical (bitmask) immediate, an fmov immediate (immediates.py)
    [Xn|SP{, #pimm}]        unsigned scaled offset (or the unscaled ldur/stur form, chosen here)
    [Xn|SP, #simm]!         pre-index           [Xn|SP], #simm / [Xn|SP], Xm    post-index
    [Xn|SP, Xm]             register offset     label           a Label (pc-relative)
    cond  prfop  shift      condition name, prefetch operation name, LSL(n)/LSR(n)/ASR(n)
    {, x}                   an optional trailing operand
    other lowercase words   themselves (`dc cvau, Xt`, `dsb ish`)

Arrangement column: the bits the arrangement lives in, then the legal arrangements. Each
arrangement becomes one form, its bits OR-ed into the fixed bits:

    size:Q     size at 23:22 (8b/16b 0, 4h/8h 1, 2s/4s 2, 2d 3), Q at 30 (128-bit)
    size10:Q   the same with size at 11:10 (ld1/st1/ld1r)
    sz:Q       sz at 22 (2s/4s 0, 2d 1), Q at 30 (floating point)
    Q          Q only (the element size is in the fixed bits: fp16 rows, bitwise rows)

Aliases (mov, cmp, lsl, mul, cset ...) are rows of their own whose fixed bits carry the alias's
fixed fields (`mov Xd, Xm` is `orr Xd, xzr, Xm`: Rn = 31 in the fixed bits). Where one operand
list matches two rows, the first row wins.
"""
from __future__ import annotations

# Condition codes (Arm ARM C1.2.4): the 4-bit `cond` field.
CONDITIONS = {
    "eq": 0, "ne": 1, "cs": 2, "hs": 2, "cc": 3, "lo": 3, "mi": 4, "pl": 5, "vs": 6, "vc": 7,
    "hi": 8, "ls": 9, "ge": 10, "lt": 11, "gt": 12, "le": 13, "al": 14,
}

# Bits and values of each arrangement scheme (see the module docstring).
ARRANGEMENT_BITS = {
    "size:Q":   {"8b": 0, "16b": 1 << 30, "4h": 1 << 22, "8h": 1 << 22 | 1 << 30, "2s": 2 << 22,
                 "4s": 2 << 22 | 1 << 30, "2d": 3 << 22 | 1 << 30},
    "size10:Q": {"8b": 0, "16b": 1 << 30, "4h": 1 << 10, "8h": 1 << 10 | 1 << 30, "2s": 2 << 10,
                 "4s": 2 << 10 | 1 << 30, "1d": 3 << 10, "2d": 3 << 10 | 1 << 30},
    "sz:Q":     {"2s": 0, "4s": 1 << 30, "2d": 1 << 22 | 1 << 30},
    "Q":        {"8b": 0, "16b": 1 << 30, "4h": 0, "8h": 1 << 30, "2s": 0, "4s": 1 << 30, "2d": 1 << 30},
}

_LDST_ARR = "size10:Q 8b 16b 4h 8h 2s 4s 1d 2d"     # ld1/st1/ld1r: size at 11:10

_ROWS: list[tuple[str, str, str, str, str, str]] = [
    # --- general purpose: arithmetic (C6.2) ------------------------------------------------------
    ("add",   "Xd|SP, Xn|SP, #imm",            "0x91000000", "addsub_imm",   "", "BASE"),
    ("add",   "Wd|WSP, Wn|WSP, #imm",          "0x11000000", "addsub_imm",   "", "BASE"),
    ("adds",  "Xd, Xn|SP, #imm",               "0xb1000000", "addsub_imm",   "", "BASE"),
    ("sub",   "Xd|SP, Xn|SP, #imm",            "0xd1000000", "addsub_imm",   "", "BASE"),
    ("sub",   "Wd|WSP, Wn|WSP, #imm",          "0x51000000", "addsub_imm",   "", "BASE"),
    ("subs",  "Xd, Xn|SP, #imm",               "0xf1000000", "addsub_imm",   "", "BASE"),
    ("subs",  "Wd, Wn|WSP, #imm",              "0x71000000", "addsub_imm",   "", "BASE"),
    ("cmp",   "Xn|SP, #imm",                   "0xf100001f", "addsub_imm",   "", "BASE"),
    ("cmp",   "Wn|WSP, #imm",                  "0x7100001f", "addsub_imm",   "", "BASE"),
    ("mov",   "Xd, Xm",                        "0xaa0003e0", "logic_shift",  "", "BASE"),
    ("mov",   "Wd, Wm",                        "0x2a0003e0", "logic_shift",  "", "BASE"),
    ("mov",   "Xd|SP, Xn|SP",                  "0x91000000", "addsub_imm",   "", "BASE"),
    ("add",   "Xd, Xn, Xm{, shift}",           "0x8b000000", "addsub_shift", "", "BASE"),
    ("add",   "Wd, Wn, Wm{, shift}",           "0x0b000000", "addsub_shift", "", "BASE"),
    ("adds",  "Xd, Xn, Xm{, shift}",           "0xab000000", "addsub_shift", "", "BASE"),
    ("sub",   "Xd, Xn, Xm{, shift}",           "0xcb000000", "addsub_shift", "", "BASE"),
    ("sub",   "Wd, Wn, Wm{, shift}",           "0x4b000000", "addsub_shift", "", "BASE"),
    ("subs",  "Xd, Xn, Xm{, shift}",           "0xeb000000", "addsub_shift", "", "BASE"),
    ("subs",  "Wd, Wn, Wm{, shift}",           "0x6b000000", "addsub_shift", "", "BASE"),
    ("cmp",   "Xn, Xm{, shift}",               "0xeb00001f", "addsub_shift", "", "BASE"),
    ("cmp",   "Wn, Wm{, shift}",               "0x6b00001f", "addsub_shift", "", "BASE"),
    ("neg",   "Xd, Xm{, shift}",               "0xcb0003e0", "addsub_shift", "", "BASE"),
    ("and",   "Xd, Xn, Xm{, shift}",           "0x8a000000", "logic_shift",  "", "BASE"),
    ("orr",   "Xd, Xn, Xm{, shift}",           "0xaa000000", "logic_shift",  "", "BASE"),
    ("eor",   "Xd, Xn, Xm{, shift}",           "0xca000000", "logic_shift",  "", "BASE"),
    ("and",   "Xd|SP, Xn, #bimm",              "0x92000000", "logic_imm",    "", "BASE"),
    ("and",   "Wd|WSP, Wn, #bimm",             "0x12000000", "logic_imm",    "", "BASE"),
    ("orr",   "Xd|SP, Xn, #bimm",              "0xb2000000", "logic_imm",    "", "BASE"),
    ("orr",   "Wd|WSP, Wn, #bimm",             "0x32000000", "logic_imm",    "", "BASE"),
    ("eor",   "Xd|SP, Xn, #bimm",              "0xd2000000", "logic_imm",    "", "BASE"),
    ("eor",   "Wd|WSP, Wn, #bimm",             "0x52000000", "logic_imm",    "", "BASE"),
    ("ands",  "Xd, Xn, #bimm",                 "0xf2000000", "logic_imm",    "", "BASE"),
    ("ands",  "Wd, Wn, #bimm",                 "0x72000000", "logic_imm",    "", "BASE"),
    ("tst",   "Xn, #bimm",                     "0xf200001f", "logic_imm",    "", "BASE"),
    ("tst",   "Wn, #bimm",                     "0x7200001f", "logic_imm",    "", "BASE"),
    ("madd",  "Xd, Xn, Xm, Xa",                "0x9b000000", "dp3",          "", "BASE"),
    ("madd",  "Wd, Wn, Wm, Wa",                "0x1b000000", "dp3",          "", "BASE"),
    ("msub",  "Xd, Xn, Xm, Xa",                "0x9b008000", "dp3",          "", "BASE"),
    ("mul",   "Xd, Xn, Xm",                    "0x9b007c00", "dp3",          "", "BASE"),
    ("mul",   "Wd, Wn, Wm",                    "0x1b007c00", "dp3",          "", "BASE"),
    ("udiv",  "Xd, Xn, Xm",                    "0x9ac00800", "dp2",          "", "BASE"),
    ("sdiv",  "Xd, Xn, Xm",                    "0x9ac00c00", "dp2",          "", "BASE"),
    ("lsl",   "Xd, Xn, Xm",                    "0x9ac02000", "dp2",          "", "BASE"),
    ("lsr",   "Xd, Xn, Xm",                    "0x9ac02400", "dp2",          "", "BASE"),
    ("asr",   "Xd, Xn, Xm",                    "0x9ac02800", "dp2",          "", "BASE"),
    ("lsl",   "Xd, Xn, #shift",                "0xd3400000", "bf_lsl",       "", "BASE"),
    ("lsl",   "Wd, Wn, #shift",                "0x53000000", "bf_lsl",       "", "BASE"),
    ("lsr",   "Xd, Xn, #shift",                "0xd340fc00", "bf_shr",       "", "BASE"),
    ("lsr",   "Wd, Wn, #shift",                "0x53007c00", "bf_shr",       "", "BASE"),
    ("asr",   "Xd, Xn, #shift",                "0x9340fc00", "bf_shr",       "", "BASE"),
    ("asr",   "Wd, Wn, #shift",                "0x13007c00", "bf_shr",       "", "BASE"),
    ("movz",  "Xd, #imm16{, shift}",           "0xd2800000", "movewide",     "", "BASE"),
    ("movz",  "Wd, #imm16{, shift}",           "0x52800000", "movewide",     "", "BASE"),
    ("movk",  "Xd, #imm16{, shift}",           "0xf2800000", "movewide",     "", "BASE"),
    ("movk",  "Wd, #imm16{, shift}",           "0x72800000", "movewide",     "", "BASE"),
    ("movn",  "Xd, #imm16{, shift}",           "0x92800000", "movewide",     "", "BASE"),
    ("movn",  "Wd, #imm16{, shift}",           "0x12800000", "movewide",     "", "BASE"),
    ("csel",  "Xd, Xn, Xm, cond",              "0x9a800000", "condsel",      "", "BASE"),
    ("csel",  "Wd, Wn, Wm, cond",              "0x1a800000", "condsel",      "", "BASE"),
    ("csinc", "Xd, Xn, Xm, cond",              "0x9a800400", "condsel",      "", "BASE"),
    ("cset",  "Xd, cond",                      "0x9a9f07e0", "cset",         "", "BASE"),
    ("cset",  "Wd, cond",                      "0x1a9f07e0", "cset",         "", "BASE"),
    # --- general purpose: loads and stores (C6.2, "load/store register") -------------------------
    ("ldr",   "Xt, [Xn|SP{, #pimm}]",          "0xf9400000", "ldst_pos",     "", "BASE"),
    ("ldr",   "Xt, [Xn|SP, #simm]!",           "0xf8400c00", "ldst_imm9",    "", "BASE"),
    ("ldr",   "Xt, [Xn|SP], #simm",            "0xf8400400", "ldst_imm9",    "", "BASE"),
    ("ldr",   "Xt, [Xn|SP, Xm]",               "0xf8606800", "ldst_reg",     "", "BASE"),
    ("ldr",   "Xt, label",                     "0x58000000", "literal",      "", "BASE"),
    ("str",   "Xt, [Xn|SP{, #pimm}]",          "0xf9000000", "ldst_pos",     "", "BASE"),
    ("str",   "Xt, [Xn|SP, #simm]!",           "0xf8000c00", "ldst_imm9",    "", "BASE"),
    ("str",   "Xt, [Xn|SP], #simm",            "0xf8000400", "ldst_imm9",    "", "BASE"),
    ("str",   "Xt, [Xn|SP, Xm]",               "0xf8206800", "ldst_reg",     "", "BASE"),
    ("ldr",   "Wt, [Xn|SP{, #pimm}]",          "0xb9400000", "ldst_pos",     "", "BASE"),
    ("ldr",   "Wt, [Xn|SP, #simm]!",           "0xb8400c00", "ldst_imm9",    "", "BASE"),
    ("ldr",   "Wt, [Xn|SP], #simm",            "0xb8400400", "ldst_imm9",    "", "BASE"),
    ("ldr",   "Wt, label",                     "0x18000000", "literal",      "", "BASE"),
    ("str",   "Wt, [Xn|SP{, #pimm}]",          "0xb9000000", "ldst_pos",     "", "BASE"),
    ("str",   "Wt, [Xn|SP, #simm]!",           "0xb8000c00", "ldst_imm9",    "", "BASE"),
    ("str",   "Wt, [Xn|SP], #simm",            "0xb8000400", "ldst_imm9",    "", "BASE"),
    ("ldrb",  "Wt, [Xn|SP{, #pimm}]",          "0x39400000", "ldst_pos",     "", "BASE"),
    ("strb",  "Wt, [Xn|SP{, #pimm}]",          "0x39000000", "ldst_pos",     "", "BASE"),
    ("ldrh",  "Wt, [Xn|SP{, #pimm}]",          "0x79400000", "ldst_pos",     "", "BASE"),
    ("strh",  "Wt, [Xn|SP{, #pimm}]",          "0x79000000", "ldst_pos",     "", "BASE"),
    ("ldp",   "Xt, Xt2, [Xn|SP{, #simm}]",     "0xa9400000", "ldst_pair",    "", "BASE"),
    ("ldp",   "Xt, Xt2, [Xn|SP, #simm]!",      "0xa9c00000", "ldst_pair",    "", "BASE"),
    ("ldp",   "Xt, Xt2, [Xn|SP], #simm",       "0xa8c00000", "ldst_pair",    "", "BASE"),
    ("stp",   "Xt, Xt2, [Xn|SP{, #simm}]",     "0xa9000000", "ldst_pair",    "", "BASE"),
    ("stp",   "Xt, Xt2, [Xn|SP, #simm]!",      "0xa9800000", "ldst_pair",    "", "BASE"),
    ("stp",   "Xt, Xt2, [Xn|SP], #simm",       "0xa8800000", "ldst_pair",    "", "BASE"),
    ("ldp",   "Wt, Wt2, [Xn|SP{, #simm}]",     "0x29400000", "ldst_pair",    "", "BASE"),
    ("stp",   "Wt, Wt2, [Xn|SP{, #simm}]",     "0x29000000", "ldst_pair",    "", "BASE"),
    ("prfm",  "prfop, [Xn|SP{, #pimm}]",       "0xf9800000", "ldst_pos",     "", "BASE"),
    # --- branches, system ------------------------------------------------------------------------
    ("b",     "label",                         "0x14000000", "branch26",     "", "BASE"),
    ("bl",    "label",                         "0x94000000", "branch26",     "", "BASE"),
    ("cbz",   "Xt, label",                     "0xb4000000", "branch19",     "", "BASE"),
    ("cbnz",  "Xt, label",                     "0xb5000000", "branch19",     "", "BASE"),
    ("cbz",   "Wt, label",                     "0x34000000", "branch19",     "", "BASE"),
    ("cbnz",  "Wt, label",                     "0x35000000", "branch19",     "", "BASE"),
    ("adr",   "Xd, label",                     "0x10000000", "adr",          "", "BASE"),
    ("ret",   "",                              "0xd65f03c0", "system",       "", "BASE"),
    ("ret",   "Xn",                            "0xd65f0000", "system",       "", "BASE"),
    ("br",    "Xn",                            "0xd61f0000", "system",       "", "BASE"),
    ("blr",   "Xn",                            "0xd63f0000", "system",       "", "BASE"),
    ("nop",   "",                              "0xd503201f", "system",       "", "BASE"),
    ("brk",   "#imm16",                        "0xd4200000", "exception",    "", "BASE"),
    ("dc",    "cvau, Xt",                      "0xd50b7b20", "system",       "", "BASE"),
    ("ic",    "ivau, Xt",                      "0xd50b7520", "system",       "", "BASE"),
    ("dsb",   "ish",                           "0xd5033b9f", "system",       "", "BASE"),
    ("isb",   "",                              "0xd5033fdf", "system",       "", "BASE"),
    ("mrs",   "Xt, ctr_el0",                   "0xd53b0020", "system",       "", "BASE"),

    # --- AdvSIMD and FP loads and stores ---------------------------------------------------------
    ("ldr",   "Qt, [Xn|SP{, #pimm}]",          "0x3dc00000", "ldst_pos",     "", "ASIMD"),
    ("ldr",   "Qt, [Xn|SP, #simm]!",           "0x3cc00c00", "ldst_imm9",    "", "ASIMD"),
    ("ldr",   "Qt, [Xn|SP], #simm",            "0x3cc00400", "ldst_imm9",    "", "ASIMD"),
    ("ldr",   "Qt, [Xn|SP, Xm]",               "0x3ce06800", "ldst_reg",     "", "ASIMD"),
    ("ldr",   "Qt, label",                     "0x9c000000", "literal",      "", "ASIMD"),
    ("str",   "Qt, [Xn|SP{, #pimm}]",          "0x3d800000", "ldst_pos",     "", "ASIMD"),
    ("str",   "Qt, [Xn|SP, #simm]!",           "0x3c800c00", "ldst_imm9",    "", "ASIMD"),
    ("str",   "Qt, [Xn|SP], #simm",            "0x3c800400", "ldst_imm9",    "", "ASIMD"),
    ("str",   "Qt, [Xn|SP, Xm]",               "0x3ca06800", "ldst_reg",     "", "ASIMD"),
    ("ldr",   "Dt, [Xn|SP{, #pimm}]",          "0xfd400000", "ldst_pos",     "", "ASIMD"),
    ("ldr",   "Dt, [Xn|SP, #simm]!",           "0xfc400c00", "ldst_imm9",    "", "ASIMD"),
    ("ldr",   "Dt, [Xn|SP], #simm",            "0xfc400400", "ldst_imm9",    "", "ASIMD"),
    ("ldr",   "Dt, [Xn|SP, Xm]",               "0xfc606800", "ldst_reg",     "", "ASIMD"),
    ("ldr",   "Dt, label",                     "0x5c000000", "literal",      "", "ASIMD"),
    ("str",   "Dt, [Xn|SP{, #pimm}]",          "0xfd000000", "ldst_pos",     "", "ASIMD"),
    ("str",   "Dt, [Xn|SP, #simm]!",           "0xfc000c00", "ldst_imm9",    "", "ASIMD"),
    ("str",   "Dt, [Xn|SP], #simm",            "0xfc000400", "ldst_imm9",    "", "ASIMD"),
    ("str",   "Dt, [Xn|SP, Xm]",               "0xfc206800", "ldst_reg",     "", "ASIMD"),
    ("ldr",   "St, [Xn|SP{, #pimm}]",          "0xbd400000", "ldst_pos",     "", "ASIMD"),
    ("ldr",   "St, [Xn|SP, #simm]!",           "0xbc400c00", "ldst_imm9",    "", "ASIMD"),
    ("ldr",   "St, [Xn|SP], #simm",            "0xbc400400", "ldst_imm9",    "", "ASIMD"),
    ("ldr",   "St, [Xn|SP, Xm]",               "0xbc606800", "ldst_reg",     "", "ASIMD"),
    ("ldr",   "St, label",                     "0x1c000000", "literal",      "", "ASIMD"),
    ("str",   "St, [Xn|SP{, #pimm}]",          "0xbd000000", "ldst_pos",     "", "ASIMD"),
    ("str",   "St, [Xn|SP, #simm]!",           "0xbc000c00", "ldst_imm9",    "", "ASIMD"),
    ("str",   "St, [Xn|SP], #simm",            "0xbc000400", "ldst_imm9",    "", "ASIMD"),
    ("str",   "St, [Xn|SP, Xm]",               "0xbc206800", "ldst_reg",     "", "ASIMD"),
    ("ldr",   "Ht, [Xn|SP{, #pimm}]",          "0x7d400000", "ldst_pos",     "", "ASIMD"),
    ("ldr",   "Ht, [Xn|SP, #simm]!",           "0x7c400c00", "ldst_imm9",    "", "ASIMD"),
    ("ldr",   "Ht, [Xn|SP], #simm",            "0x7c400400", "ldst_imm9",    "", "ASIMD"),
    ("ldr",   "Ht, [Xn|SP, Xm]",               "0x7c606800", "ldst_reg",     "", "ASIMD"),
    ("str",   "Ht, [Xn|SP{, #pimm}]",          "0x7d000000", "ldst_pos",     "", "ASIMD"),
    ("str",   "Ht, [Xn|SP, #simm]!",           "0x7c000c00", "ldst_imm9",    "", "ASIMD"),
    ("str",   "Ht, [Xn|SP], #simm",            "0x7c000400", "ldst_imm9",    "", "ASIMD"),
    ("str",   "Ht, [Xn|SP, Xm]",               "0x7c206800", "ldst_reg",     "", "ASIMD"),
    ("ldr",   "Bt, [Xn|SP{, #pimm}]",          "0x3d400000", "ldst_pos",     "", "ASIMD"),
    ("str",   "Bt, [Xn|SP{, #pimm}]",          "0x3d000000", "ldst_pos",     "", "ASIMD"),
    # the unscaled forms by name (ldr/str choose them by themselves for offsets -256..255)
    ("ldur",  "Xt, [Xn|SP{, #simm}]",          "0xf8400000", "ldst_imm9",    "", "BASE"),
    ("stur",  "Xt, [Xn|SP{, #simm}]",          "0xf8000000", "ldst_imm9",    "", "BASE"),
    ("ldur",  "Wt, [Xn|SP{, #simm}]",          "0xb8400000", "ldst_imm9",    "", "BASE"),
    ("stur",  "Wt, [Xn|SP{, #simm}]",          "0xb8000000", "ldst_imm9",    "", "BASE"),
    ("ldur",  "Qt, [Xn|SP{, #simm}]",          "0x3cc00000", "ldst_imm9",    "", "ASIMD"),
    ("stur",  "Qt, [Xn|SP{, #simm}]",          "0x3c800000", "ldst_imm9",    "", "ASIMD"),
    ("ldur",  "Dt, [Xn|SP{, #simm}]",          "0xfc400000", "ldst_imm9",    "", "ASIMD"),
    ("stur",  "Dt, [Xn|SP{, #simm}]",          "0xfc000000", "ldst_imm9",    "", "ASIMD"),
    ("ldur",  "St, [Xn|SP{, #simm}]",          "0xbc400000", "ldst_imm9",    "", "ASIMD"),
    ("stur",  "St, [Xn|SP{, #simm}]",          "0xbc000000", "ldst_imm9",    "", "ASIMD"),
    ("ldur",  "Ht, [Xn|SP{, #simm}]",          "0x7c400000", "ldst_imm9",    "", "ASIMD"),
    ("stur",  "Ht, [Xn|SP{, #simm}]",          "0x7c000000", "ldst_imm9",    "", "ASIMD"),
    # ldp/stp of SIMD registers exist for S, D and Q only (there is no H pair)
    ("ldp",   "Qt, Qt2, [Xn|SP{, #simm}]",     "0xad400000", "ldst_pair",    "", "ASIMD"),
    ("ldp",   "Qt, Qt2, [Xn|SP, #simm]!",      "0xadc00000", "ldst_pair",    "", "ASIMD"),
    ("ldp",   "Qt, Qt2, [Xn|SP], #simm",       "0xacc00000", "ldst_pair",    "", "ASIMD"),
    ("stp",   "Qt, Qt2, [Xn|SP{, #simm}]",     "0xad000000", "ldst_pair",    "", "ASIMD"),
    ("stp",   "Qt, Qt2, [Xn|SP, #simm]!",      "0xad800000", "ldst_pair",    "", "ASIMD"),
    ("stp",   "Qt, Qt2, [Xn|SP], #simm",       "0xac800000", "ldst_pair",    "", "ASIMD"),
    ("ldp",   "Dt, Dt2, [Xn|SP{, #simm}]",     "0x6d400000", "ldst_pair",    "", "ASIMD"),
    ("ldp",   "Dt, Dt2, [Xn|SP, #simm]!",      "0x6dc00000", "ldst_pair",    "", "ASIMD"),
    ("ldp",   "Dt, Dt2, [Xn|SP], #simm",       "0x6cc00000", "ldst_pair",    "", "ASIMD"),
    ("stp",   "Dt, Dt2, [Xn|SP{, #simm}]",     "0x6d000000", "ldst_pair",    "", "ASIMD"),
    ("stp",   "Dt, Dt2, [Xn|SP, #simm]!",      "0x6d800000", "ldst_pair",    "", "ASIMD"),
    ("stp",   "Dt, Dt2, [Xn|SP], #simm",       "0x6c800000", "ldst_pair",    "", "ASIMD"),
    ("ldp",   "St, St2, [Xn|SP{, #simm}]",     "0x2d400000", "ldst_pair",    "", "ASIMD"),
    ("ldp",   "St, St2, [Xn|SP, #simm]!",      "0x2dc00000", "ldst_pair",    "", "ASIMD"),
    ("ldp",   "St, St2, [Xn|SP], #simm",       "0x2cc00000", "ldst_pair",    "", "ASIMD"),
    ("stp",   "St, St2, [Xn|SP{, #simm}]",     "0x2d000000", "ldst_pair",    "", "ASIMD"),
    ("stp",   "St, St2, [Xn|SP, #simm]!",      "0x2d800000", "ldst_pair",    "", "ASIMD"),
    ("stp",   "St, St2, [Xn|SP], #simm",       "0x2c800000", "ldst_pair",    "", "ASIMD"),
    ("ld1r",  "{Vt.T}, [Xn|SP]",               "0x0d40c000", "asimdldst",    _LDST_ARR, "ASIMD"),
    ("ld1r",  "{Vt.T}, [Xn|SP], #imm",         "0x0dc0c000", "asimdldst",    _LDST_ARR, "ASIMD"),
    ("ld1r",  "{Vt.T}, [Xn|SP], Xm",           "0x0dc0c000", "asimdldst",    _LDST_ARR, "ASIMD"),
]

# ld1/st1 of one to four registers (C7.2.170, "LD1 (multiple structures)"): opcode per count.
_LD1_OPCODE = {1: 0x7, 2: 0xA, 3: 0x6, 4: 0x2}
for _name, _load in (("ld1", 0x00400000), ("st1", 0)):
    for _n, _opcode in _LD1_OPCODE.items():
        _list = "{" + ", ".join(["Vt.T"] + [f"Vt{i}.T" for i in range(2, _n + 1)]) + "}"
        _fixed = 0x0C000000 | _load | _opcode << 12
        for _mem, _post in (("[Xn|SP]", 0), ("[Xn|SP], #imm", 0x00800000), ("[Xn|SP], Xm", 0x00800000)):
            _ROWS.append((_name, f"{_list}, {_mem}", f"{_fixed | _post:#010x}", "asimdldst", _LDST_ARR, "ASIMD"))
# ld1/st1 of one lane (C7.2.171, "LD1 (single structure)"): opcode<2:1> and size per element.
for _name, _load in (("ld1", 0x00400000), ("st1", 0)):
    for _size, _bits in (("b", 0x0000), ("h", 0x4000), ("s", 0x8000), ("d", 0x8400)):
        _fixed = 0x0D000000 | _load | _bits
        for _mem, _post in (("[Xn|SP]", 0), ("[Xn|SP], #imm", 0x00800000), ("[Xn|SP], Xm", 0x00800000)):
            _ROWS.append((_name, f"{{Vt.{_size}}}[i], {_mem}", f"{_fixed | _post:#010x}", "asimdldst", "", "ASIMD"))

_ROWS += [
    # --- AdvSIMD moves -------------------------------------------------------------------------
    ("mov",   "Vd.T, Vnm.T",                   "0x0ea01c00", "asimdsame",    "Q 8b 16b", "ASIMD"),
    ("movi",  "Vd.T, #imm8",                   "0x0f00e400", "asimdimm",     "Q 8b 16b", "ASIMD"),
    ("movi",  "Vd.T, #imm8{, shift}",          "0x0f008400", "asimdimm",     "Q 4h 8h", "ASIMD"),
    ("movi",  "Vd.T, #imm8{, shift}",          "0x0f000400", "asimdimm",     "Q 2s 4s", "ASIMD"),
    ("movi",  "Vd.2d, #bytemask",              "0x6f00e400", "asimdimm",     "", "ASIMD"),
    ("movi",  "Dd, #bytemask",                 "0x2f00e400", "asimdimm",     "", "ASIMD"),
    ("fmov",  "Vd.T, #fimm",                   "0x0f00f400", "asimdimm",     "Q 2s 4s", "ASIMD"),
    ("fmov",  "Vd.2d, #fimm",                  "0x6f00f400", "asimdimm",     "", "ASIMD"),
    ("fmov",  "Vd.T, #fimm",                   "0x0f00fc00", "asimdimm",     "Q 4h 8h", "FP16"),
    ("fmov",  "Sd, #fimm",                     "0x1e201000", "fpimm",        "", "ASIMD"),
    ("fmov",  "Dd, #fimm",                     "0x1e601000", "fpimm",        "", "ASIMD"),
    ("fmov",  "Hd, #fimm",                     "0x1ee01000", "fpimm",        "", "FP16"),
    ("fmov",  "Sd, Wn",                        "0x1e270000", "fpmov",        "", "ASIMD"),
    ("fmov",  "Wd, Sn",                        "0x1e260000", "fpmov",        "", "ASIMD"),
    ("fmov",  "Dd, Xn",                        "0x9e670000", "fpmov",        "", "ASIMD"),
    ("fmov",  "Xd, Dn",                        "0x9e660000", "fpmov",        "", "ASIMD"),
    ("fmov",  "Sd, Sn",                        "0x1e204000", "fpmov",        "", "ASIMD"),
    ("fmov",  "Dd, Dn",                        "0x1e604000", "fpmov",        "", "ASIMD"),
    ("fmov",  "Hd, Wn",                        "0x1ee70000", "fpmov",        "", "FP16"),
]
# dup (element), dup (general), ins (element), ins (general), umov: the element size and index
# live in imm5 (and imm4); one row per element size (C7.2.39, C7.2.160, C7.2.371)
_SIZE_BIT = {"b": 1 << 16, "h": 2 << 16, "s": 4 << 16, "d": 8 << 16}    # imm5's one-hot element size
for _size, _arrs in (("b", "8b 16b"), ("h", "4h 8h"), ("s", "2s 4s"), ("d", "2d")):
    _gpr = "Xn" if _size == "d" else "Wn"
    _ROWS += [
        ("dup",   f"Vd.T, Vn.{_size}[i]",            "0x0e000400", "asimdins", f"Q {_arrs}", "ASIMD"),
        ("dup",   f"Vd.T, {_gpr}", f"{0x0e000c00 | _SIZE_BIT[_size]:#010x}", "asimdins", f"Q {_arrs}", "ASIMD"),
        ("mov",   f"Vd.{_size}[i], Vn.{_size}[i]",   "0x6e000400", "asimdins", "", "ASIMD"),
        ("ins",   f"Vd.{_size}[i], Vn.{_size}[i]",   "0x6e000400", "asimdins", "", "ASIMD"),
        ("mov",   f"Vd.{_size}[i], {_gpr}",          "0x4e001c00", "asimdins", "", "ASIMD"),
        ("ins",   f"Vd.{_size}[i], {_gpr}",          "0x4e001c00", "asimdins", "", "ASIMD"),
        ("dup",   f"{_size.upper()}d, Vn.{_size}[i]", "0x5e000400", "asimdins", "", "ASIMD"),
    ]
_ROWS += [
    ("umov",  "Wd, Vn.b[i]",                   "0x0e003c00", "asimdins",     "", "ASIMD"),
    ("umov",  "Wd, Vn.h[i]",                   "0x0e003c00", "asimdins",     "", "ASIMD"),
    ("mov",   "Wd, Vn.s[i]",                   "0x0e003c00", "asimdins",     "", "ASIMD"),
    ("mov",   "Xd, Vn.d[i]",                   "0x4e003c00", "asimdins",     "", "ASIMD"),
]

# Floating-point three-same (C4.1.96 "Advanced SIMD three same", fp32/fp64 and fp16 classes):
# mnemonic -> (fixed bits of the .2s/.4s/.2d row, fixed bits of the .4h/.8h row)
_FP_SAME = {
    "fadd":   (0x0e20d400, 0x0e401400), "fsub":   (0x0ea0d400, 0x0ec01400),
    "fmul":   (0x2e20dc00, 0x2e401c00), "fdiv":   (0x2e20fc00, 0x2e403c00),
    "fmax":   (0x0e20f400, 0x0e403400), "fmin":   (0x0ea0f400, 0x0ec03400),
    "fmaxnm": (0x0e20c400, 0x0e400400), "fminnm": (0x0ea0c400, 0x0ec00400),
    "fmla":   (0x0e20cc00, 0x0e400c00), "fmls":   (0x0ea0cc00, 0x0ec00c00),
    "frecps": (0x0e20fc00, 0x0e403c00), "frsqrts": (0x0ea0fc00, 0x0ec03c00),
    "fcmeq":  (0x0e20e400, 0x0e402400), "fcmge":  (0x2e20e400, 0x2e402400),
    "fcmgt":  (0x2ea0e400, 0x2ec02400), "fabd":   (0x2ea0d400, 0x2ec01400),
    "faddp":  (0x2e20d400, 0x2e401400), "fmaxp":  (0x2e20f400, 0x2e403400),
    "fminp":  (0x2ea0f400, 0x2ec03400),
}
# Floating-point two-register misc (C4.1.96 "Advanced SIMD two-register miscellaneous (FP16)")
_FP_MISC = {
    "fabs":   (0x0ea0f800, 0x0ef8f800), "fneg":   (0x2ea0f800, 0x2ef8f800),
    "fsqrt":  (0x2ea1f800, 0x2ef9f800), "frecpe": (0x0ea1d800, 0x0ef9d800),
    "frsqrte": (0x2ea1d800, 0x2ef9d800), "frintn": (0x0e218800, 0x0e798800),
    "frintm": (0x0e219800, 0x0e799800), "frintp": (0x0ea18800, 0x0ef98800),
    "frintz": (0x0ea19800, 0x0ef99800), "frinta": (0x2e218800, 0x2e798800),
    "fcvtzs": (0x0ea1b800, 0x0ef9b800), "fcvtzu": (0x2ea1b800, 0x2ef9b800),
    "fcvtns": (0x0e21a800, 0x0e79a800), "scvtf":  (0x0e21d800, 0x0e79d800),
    "ucvtf":  (0x2e21d800, 0x2e79d800),
}
# compare with zero: "fcmgt Vd.T, Vn.T, #0.0"
_FP_CMP_ZERO = {
    "fcmgt":  (0x0ea0c800, 0x0ef8c800), "fcmge":  (0x2ea0c800, 0x2ef8c800),
    "fcmeq":  (0x0ea0d800, 0x0ef8d800), "fcmlt":  (0x0ea0e800, 0x0ef8e800),
    "fcmle":  (0x2ea0d800, 0x2ef8d800),
}
for _table, _ops in ((_FP_SAME, "Vd.T, Vn.T, Vm.T"), (_FP_MISC, "Vd.T, Vn.T"), (_FP_CMP_ZERO, "Vd.T, Vn.T, #0.0")):
    for _name, (_single, _half) in _table.items():
        _ROWS.append((_name, _ops, f"{_single:#010x}", "asimdsame", "sz:Q 2s 4s 2d", "ASIMD"))
        _ROWS.append((_name, _ops, f"{_half:#010x}", "asimdsame", "Q 4h 8h", "FP16"))

# By element (C7.2.110 FMLA (by element)): fp32 index H:L, fp64 index H, fp16 index H:L:M with
# Vm restricted to v0..v15 (M is the index's low bit)
for _name, _opcode in (("fmla", 0x1000), ("fmls", 0x5000), ("fmul", 0x9000)):
    _ROWS += [
        (_name, "Vd.T, Vn.T, Vm.s[i]",   f"{0x0f800000 | _opcode:#010x}", "asimdelem", "Q 2s 4s", "ASIMD"),
        (_name, "Vd.2d, Vn.2d, Vm.d[i]", f"{0x4fc00000 | _opcode:#010x}", "asimdelem", "", "ASIMD"),
        (_name, "Vd.T, Vn.T, Vm16.h[i]", f"{0x0f000000 | _opcode:#010x}", "asimdelem", "Q 4h 8h", "FP16"),
    ]

_ROWS += [
    # --- conversions between precisions --------------------------------------------------------
    ("fcvtl",  "Vd.4s, Vn.4h",                  "0x0e217800", "asimdsame",   "", "ASIMD"),
    ("fcvtl2", "Vd.4s, Vn.8h",                  "0x4e217800", "asimdsame",   "", "ASIMD"),
    ("fcvtl",  "Vd.2d, Vn.2s",                  "0x0e617800", "asimdsame",   "", "ASIMD"),
    ("fcvtl2", "Vd.2d, Vn.4s",                  "0x4e617800", "asimdsame",   "", "ASIMD"),
    ("fcvtn",  "Vd.4h, Vn.4s",                  "0x0e216800", "asimdsame",   "", "ASIMD"),
    ("fcvtn2", "Vd.8h, Vn.4s",                  "0x4e216800", "asimdsame",   "", "ASIMD"),
    ("fcvtn",  "Vd.2s, Vn.2d",                  "0x0e616800", "asimdsame",   "", "ASIMD"),
    ("fcvtn2", "Vd.4s, Vn.2d",                  "0x4e616800", "asimdsame",   "", "ASIMD"),
    # --- bitwise (C4.1.96 "three same", size field selects the operation) ------------------------
    ("and",   "Vd.T, Vn.T, Vm.T",              "0x0e201c00", "asimdsame",    "Q 8b 16b", "ASIMD"),
    ("bic",   "Vd.T, Vn.T, Vm.T",              "0x0e601c00", "asimdsame",    "Q 8b 16b", "ASIMD"),
    ("orr",   "Vd.T, Vn.T, Vm.T",              "0x0ea01c00", "asimdsame",    "Q 8b 16b", "ASIMD"),
    ("orn",   "Vd.T, Vn.T, Vm.T",              "0x0ee01c00", "asimdsame",    "Q 8b 16b", "ASIMD"),
    ("eor",   "Vd.T, Vn.T, Vm.T",              "0x2e201c00", "asimdsame",    "Q 8b 16b", "ASIMD"),
    ("bsl",   "Vd.T, Vn.T, Vm.T",              "0x2e601c00", "asimdsame",    "Q 8b 16b", "ASIMD"),
    ("bit",   "Vd.T, Vn.T, Vm.T",              "0x2ea01c00", "asimdsame",    "Q 8b 16b", "ASIMD"),
    ("bif",   "Vd.T, Vn.T, Vm.T",              "0x2ee01c00", "asimdsame",    "Q 8b 16b", "ASIMD"),
    ("mvn",   "Vd.T, Vn.T",                    "0x2e205800", "asimdsame",    "Q 8b 16b", "ASIMD"),
    ("ext",   "Vd.T, Vn.T, Vm.T, #index",      "0x2e000000", "asimdext",     "Q 8b 16b", "ASIMD"),
    # --- integer -------------------------------------------------------------------------------
    ("add",   "Vd.T, Vn.T, Vm.T",              "0x0e208400", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("sub",   "Vd.T, Vn.T, Vm.T",              "0x2e208400", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("mul",   "Vd.T, Vn.T, Vm.T",              "0x0e209c00", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s", "ASIMD"),
    ("addp",  "Vd.T, Vn.T, Vm.T",              "0x0e20bc00", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("cmeq",  "Vd.T, Vn.T, Vm.T",              "0x2e208c00", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("cmgt",  "Vd.T, Vn.T, Vm.T",              "0x0e203400", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("smax",  "Vd.T, Vn.T, Vm.T",              "0x0e206400", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s", "ASIMD"),
    ("smin",  "Vd.T, Vn.T, Vm.T",              "0x0e206c00", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s", "ASIMD"),
    ("umax",  "Vd.T, Vn.T, Vm.T",              "0x2e206400", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s", "ASIMD"),
    ("umin",  "Vd.T, Vn.T, Vm.T",              "0x2e206c00", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s", "ASIMD"),
    ("sshl",  "Vd.T, Vn.T, Vm.T",              "0x0e204400", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("ushl",  "Vd.T, Vn.T, Vm.T",              "0x2e204400", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("zip1",  "Vd.T, Vn.T, Vm.T",              "0x0e003800", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("zip2",  "Vd.T, Vn.T, Vm.T",              "0x0e007800", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("uzp1",  "Vd.T, Vn.T, Vm.T",              "0x0e001800", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("uzp2",  "Vd.T, Vn.T, Vm.T",              "0x0e005800", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("trn1",  "Vd.T, Vn.T, Vm.T",              "0x0e002800", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("trn2",  "Vd.T, Vn.T, Vm.T",              "0x0e006800", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("abs",   "Vd.T, Vn.T",                    "0x0e20b800", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("neg",   "Vd.T, Vn.T",                    "0x2e20b800", "asimdsame",    "size:Q 8b 16b 4h 8h 2s 4s 2d", "ASIMD"),
    ("addv",  "Sd, Vn.4s",                     "0x4eb1b800", "asimdsame",    "", "ASIMD"),
    # reductions across lanes (C4.1.96 "Advanced SIMD across lanes")
    ("fmaxv",   "Sd, Vn.4s",                   "0x6e30f800", "asimdsame",    "", "ASIMD"),
    ("fminv",   "Sd, Vn.4s",                   "0x6eb0f800", "asimdsame",    "", "ASIMD"),
    ("fmaxnmv", "Sd, Vn.4s",                   "0x6e30c800", "asimdsame",    "", "ASIMD"),
    ("fminnmv", "Sd, Vn.4s",                   "0x6eb0c800", "asimdsame",    "", "ASIMD"),
    ("fmaxv",   "Hd, Vn.T",                    "0x0e30f800", "asimdsame",    "Q 4h 8h", "FP16"),
    ("fminv",   "Hd, Vn.T",                    "0x0eb0f800", "asimdsame",    "Q 4h 8h", "FP16"),
    ("fmaxnmv", "Hd, Vn.T",                    "0x0e30c800", "asimdsame",    "Q 4h 8h", "FP16"),
    ("fminnmv", "Hd, Vn.T",                    "0x0eb0c800", "asimdsame",    "Q 4h 8h", "FP16"),
    # scalar precision conversions (C7.2.69 FCVT)
    ("fcvt",  "Sd, Hn",                        "0x1ee24000", "fpmov",        "", "ASIMD"),
    ("fcvt",  "Hd, Sn",                        "0x1e23c000", "fpmov",        "", "ASIMD"),
    ("fcvt",  "Dd, Sn",                        "0x1e22c000", "fpmov",        "", "ASIMD"),
    ("fcvt",  "Sd, Dn",                        "0x1e624000", "fpmov",        "", "ASIMD"),
    ("faddp", "Sd, Vn.2s",                     "0x7e30d800", "asimdsame",    "", "ASIMD"),
    ("faddp", "Dd, Vn.2d",                     "0x7e70d800", "asimdsame",    "", "ASIMD"),
    # dot product (C7.2.275 SDOT): four int8 products summed into each int32 lane
    ("sdot",  "Vd.4s, Vn.16b, Vm.16b",         "0x4e809400", "asimdsame",    "", "DOTPROD"),
    ("sdot",  "Vd.2s, Vn.8b, Vm.8b",           "0x0e809400", "asimdsame",    "", "DOTPROD"),
    ("udot",  "Vd.4s, Vn.16b, Vm.16b",         "0x6e809400", "asimdsame",    "", "DOTPROD"),
    ("udot",  "Vd.2s, Vn.8b, Vm.8b",           "0x2e809400", "asimdsame",    "", "DOTPROD"),
    ("sdot",  "Vd.4s, Vn.16b, Vm.4b[i]",       "0x4f80e000", "asimdelem",    "", "DOTPROD"),
    ("sdot",  "Vd.2s, Vn.8b, Vm.4b[i]",        "0x0f80e000", "asimdelem",    "", "DOTPROD"),
    ("udot",  "Vd.4s, Vn.16b, Vm.4b[i]",       "0x6f80e000", "asimdelem",    "", "DOTPROD"),
    ("udot",  "Vd.2s, Vn.8b, Vm.4b[i]",        "0x2f80e000", "asimdelem",    "", "DOTPROD"),
]
# Widening and narrowing integer forms: (mnemonic, fixed bits of the size-0 row); the second
# half ("2") sets Q and reads or writes the upper half of the 128-bit register.
_WIDE = (("8h", "8b", "16b"), ("4s", "4h", "8h"), ("2d", "2s", "4s"))
_Q = 1 << 30


def _same(mnemonic: str, operands: str, bits: int) -> tuple[str, str, str, str, str, str]:
    return (mnemonic, operands, f"{bits:#010x}", "asimdsame", "", "ASIMD")


for _name, _fixed in (("smull", 0x0e20c000), ("umull", 0x2e20c000), ("smlal", 0x0e208000),
                      ("umlal", 0x2e208000)):
    for _size, (_wide, _lo, _hi) in enumerate(_WIDE):
        _bits = _fixed | _size << 22
        _ROWS.append(_same(_name, f"Vd.{_wide}, Vn.{_lo}, Vm.{_lo}", _bits))
        _ROWS.append(_same(_name + "2", f"Vd.{_wide}, Vn.{_hi}, Vm.{_hi}", _bits | _Q))
for _name, _fixed in (("saddlp", 0x0e202800), ("uaddlp", 0x2e202800), ("sadalp", 0x0e206800),
                      ("uadalp", 0x2e206800)):
    for _size, (_wide, _lo) in enumerate((("4h", "8b"), ("2s", "4h"), ("1d", "2s"))):
        _ROWS.append(_same(_name, f"Vd.{_wide}, Vn.{_lo}", _fixed | _size << 22))
    for _size, (_wide, _lo, _hi) in enumerate(_WIDE):
        _ROWS.append(_same(_name, f"Vd.{_wide}, Vn.{_hi}", _fixed | _size << 22 | _Q))
for _name, _fixed in (("xtn", 0x0e212800), ("sqxtn", 0x0e214800), ("sqxtun", 0x2e212800), ("uqxtn", 0x2e214800)):
    for _size, (_wide, _lo, _hi) in enumerate(_WIDE):
        _ROWS.append(_same(_name, f"Vd.{_lo}, Vn.{_wide}", _fixed | _size << 22))
        _ROWS.append(_same(_name + "2", f"Vd.{_hi}, Vn.{_wide}", _fixed | _size << 22 | _Q))
# sxtl/uxtl: sshll/ushll by 0 (immh holds the source element size)
for _name, _fixed in (("sxtl", 0x0f00a400), ("uxtl", 0x2f00a400)):
    for _size, (_wide, _lo, _hi) in enumerate(_WIDE):
        _immh = (8 << _size) << 16
        _ROWS.append(_same(_name, f"Vd.{_wide}, Vn.{_lo}", _fixed | _immh))
        _ROWS.append(_same(_name + "2", f"Vd.{_wide}, Vn.{_hi}", _fixed | _immh | _Q))
# shifts by immediate (C4.1.96 "Advanced SIMD shift by immediate"): immh:immb from size and shift
_ROWS += [
    ("ushr",  "Vd.T, Vn.T, #rshift",           "0x2f000400", "asimdshift",   "Q 8b 16b 4h 8h 2s 4s", "ASIMD"),
    ("ushr",  "Vd.2d, Vn.2d, #rshift",         "0x6f000400", "asimdshift",   "", "ASIMD"),
    ("sshr",  "Vd.T, Vn.T, #rshift",           "0x0f000400", "asimdshift",   "Q 8b 16b 4h 8h 2s 4s", "ASIMD"),
    ("sshr",  "Vd.2d, Vn.2d, #rshift",         "0x4f000400", "asimdshift",   "", "ASIMD"),
    ("shl",   "Vd.T, Vn.T, #lshift",           "0x0f005400", "asimdshift",   "Q 8b 16b 4h 8h 2s 4s", "ASIMD"),
    ("shl",   "Vd.2d, Vn.2d, #lshift",         "0x4f005400", "asimdshift",   "", "ASIMD"),
]
# b.cond: one row per condition, the condition in the fixed bits (C6.2.26)
for _cond, _code in CONDITIONS.items():
    _ROWS.append((f"b.{_cond}", "label", f"{0x54000000 | _code:#010x}", "branch19", "", "BASE"))

ROWS: tuple[tuple[str, str, str, str, str, str], ...] = tuple(_ROWS)

# Instructions whose first operand is read as well as written (accumulators, bitwise selects,
# insertions into part of a register), so a register allocator must treat it as live-in.
READS_DESTINATION = frozenset({
    "fmla", "fmls", "sdot", "udot", "bsl", "bit", "bif", "ins", "movk", "smlal", "smlal2", "umlal",
    "umlal2", "sadalp", "uadalp", "fcvtn2", "xtn2", "sqxtn2", "sqxtun2", "uqxtn2",
})

# Feature names of the table -> the HWCAP names of loopstack.isa.cpu (Linux /proc/cpuinfo spelling)
FEATURE_HWCAP = {"BASE": None, "ASIMD": "asimd", "FP16": "asimdhp", "DOTPROD": "asimddp"}
