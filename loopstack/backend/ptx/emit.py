"""Contraction + GpuSchedule -> PTX text: a multistage cp.async / ldmatrix / mma.sync kernel.

One CTA computes a BM x BN block of C.  Its threads copy the A and B tiles of each k-step
(BK wide) from global to shared memory with cp.async (zero-filling whatever lies past the
matrix or in a convolution's padding), `stages` tiles ahead of the tensor cores; each warp
loads its mma fragments from shared memory with ldmatrix and keeps its block of C in
registers; the epilogue applies bias / scale / relu and converts on the store, each element
guarded by its own bounds check (predicated tails).

Sizes are baked into the kernel (one kernel per shape), so every index is computed with
constants that ptxas strength-reduces.  The kernel's parameters are the device pointers of
the loop tree's buffers, in `tree.arguments` order.
"""
from __future__ import annotations

from ...errors import UnsupportedError
from ...isa.ptx.builder import Addr, KernelBuilder, Reg, Vec
from ...looptree.ir import Acc, Binary, Const, Load, Unary
from ..vmath import ERF_CLAMP, ERF_P, ERF_Q
from .knobs import SMEM_PAD, GpuSchedule
from .match import Contraction, bias_loads

LOG2E = 1.4426950408889634
GELU_C = 0.7978845608028654      # sqrt(2 / pi)
ACTIVATIONS = ("exp", "sigmoid", "tanh", "gelu", "erf")      # GemmEmitter._<name>(x) computes each
OUT_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int32": "s32", "int8": "s8", "uint8": "u8"}
MAX_OFFSET = 2 ** 31 - 1      # byte offsets are computed in 32 bits
# chunks of a tile a thread copies in straight-line code, their addresses set up once; past this
# (rows a byte or two wide: hundreds of chunks a thread) a loop keeps the kernel small for the JIT
COPY_UNROLL = 8


def _vec_bytes(*row_bytes: int) -> int:
    """The widest cp.async size (16, 8, 4) dividing every row's length in bytes; 0: none does."""
    for v in (16, 8, 4):
        if all(r % v == 0 for r in row_bytes):
            return v
    return 0


def magic_divisor(d: int, bound: int) -> tuple[int, int] | None:
    """(m, s) with x // d == (x * m) >> (32 + s) for every 0 <= x <= bound (m < 2**32: one
    mul.hi.u32 and a shift), or None. Round-up reciprocal: m = ceil(2**(32+s) / d) overshoots
    1/d by e / (d * 2**(32+s)), e = m*d - 2**(32+s), which stays below 1/d while x * e < 2**(32+s)."""
    for s in range(33):
        m = -(-(1 << (32 + s)) // d)
        if m >= 1 << 32:
            return None
        if bound * (m * d - (1 << (32 + s))) < 1 << (32 + s):
            return m, s
    return None


# u32 arithmetic op3 folds when both operands are constants
_FOLD = {"add.u32": lambda a, b: a + b, "sub.u32": lambda a, b: a - b, "mul.lo.u32": lambda a, b: a * b,
         "div.u32": lambda a, b: a // b, "rem.u32": lambda a, b: a % b}


class _Tile:
    """How one operand's k-step tile lies in shared memory and where its chunks come from."""

    def __init__(self, rows: int, row_elems: int, es: int, vec: int):
        self.rows, self.row_elems, self.es = rows, row_elems, es
        self.stride = row_elems * es + SMEM_PAD             # bytes per shared row
        self.vec = vec if vec else es                        # bytes per copy
        self.per_row = row_elems * es // self.vec
        self.chunks = rows * self.per_row
        self.bytes = rows * self.stride


class GemmEmitter:
    def __init__(self, con: Contraction, sched: GpuSchedule, mma, target: str, name: str, arg_names: list[str],
                 arg_dtypes: dict):
        self.c, self.s, self.mma, self.target = con, sched, mma, target
        self.k = KernelBuilder(name, target)
        self.args = arg_names
        self.dtypes = arg_dtypes
        es = mma.ab_bytes
        self.es = es
        self.bm, self.bn, self.bk = sched.bm, sched.bn, sched.bk(mma)
        conv = con.conv
        if conv is not None:
            a_rows = (conv.c * es,)
            self.kt_count = (conv.r * conv.s * (conv.c // self.bk)) if sched.REORDER_INNER else -(-con.k // self.bk)
        else:
            a_rows = (con.k * es,)
            self.kt_count = -(-con.k // self.bk)
        b_rows = (con.n * es,) if con.b_kmajor else (con.k * es,)
        self.ta = _Tile(self.bm, self.bk, es, _vec_bytes(*a_rows))
        self.tb = (_Tile(self.bk, self.bn, es, _vec_bytes(*b_rows)) if con.b_kmajor
                   else _Tile(self.bn, self.bk, es, _vec_bytes(*b_rows)))
        # bounds that hold by construction need no check: a size that is a multiple of its tile
        self.m_exact = con.m % self.bm == 0
        self.n_exact = con.n % self.bn == 0
        self.k_exact = con.k % self.bk == 0 or bool(conv is not None and sched.REORDER_INNER)
        self.stage_bytes = self.ta.bytes + self.tb.bytes
        # an 8- or 32-bit k-major B is transposed into [n][k] rows once per k-step (ldmatrix
        # moves 16-bit elements: it can transpose f16 but not bytes or words); the copy lies
        # after the stages
        self.tt_stride = self.bk * es + SMEM_PAD
        self.tt_offset = sched.stages * self.stage_bytes
        self.transposes_b = con.b_kmajor and es != 2
        self.shared_bytes = sched.shared_bytes(mma, con.b_kmajor)
        out_elems = con.batch * con.m * con.n
        a_count, b_count = (con.batch if con.a_batched else 1), (con.batch if con.b_batched else 1)
        for nbytes in (a_count * con.m * con.k * es, b_count * con.k * con.n * es, out_elems * 4):
            if nbytes > MAX_OFFSET:
                raise UnsupportedError(f"an operand of {nbytes} bytes: the GPU kernels address at most 2 GiB each")
        if conv is not None and conv.batch * conv.h * conv.w * conv.c * es > MAX_OFFSET:
            raise UnsupportedError("a convolution input over 2 GiB")

    # ------------------------------------------------------------------ small helpers
    def u32(self, value=None) -> Reg:
        r = self.k.reg("u32")
        if value is not None:
            self.k.ins("mov.u32", r, value)
        return r

    def op3(self, opcode, a, b) -> Reg | int:
        """A fresh register of the opcode's type holding `opcode a, b`; two constants are folded
        (the pipeline's prologue knows its k-steps and stages: fewer instructions to JIT)."""
        if isinstance(a, int) and isinstance(b, int) and opcode in _FOLD:
            return _FOLD[opcode](a, b) & 0xFFFFFFFF
        if opcode.startswith("add.") and b == 0:
            return a
        r = self.k.reg(opcode.split(".")[-1])
        self.k.ins(opcode, r, a, b)
        return r

    def divmod(self, x, d: int, bound: int) -> tuple:
        """(x // d, x % d) for 0 <= x <= bound: shifts for a power of two, else a multiply by a
        magic reciprocal (integer division by a constant is what costs the driver's JIT most)."""
        if isinstance(x, int):
            return x // d, x % d
        if d & (d - 1) == 0:
            return self.op3("shr.u32", x, d.bit_length() - 1), self.op3("and.b32", x, d - 1)
        magic = magic_divisor(d, bound)
        if magic is None:
            return self.op3("div.u32", x, d), self.op3("rem.u32", x, d)
        m, sh = magic
        q = self.op3("mul.hi.u32", x, m)
        if sh:
            q = self.op3("shr.u32", q, sh)
        return q, self.mad(q, (1 << 32) - d, x)          # x - q*d, modulo 2**32

    def mad(self, a, b, c) -> Reg | int:
        if isinstance(a, int) and isinstance(b, int):
            return self.op3("add.u32", c, a * b) if not isinstance(c, int) else (a * b + c) & 0xFFFFFFFF
        r = self.k.reg("u32")
        self.k.ins("mad.lo.u32", r, a, b, c)
        return r

    def pred(self, cmp, a, b, typ="u32") -> Reg:
        p = self.k.reg("pred")
        self.k.ins(f"setp.{cmp}.{typ}", p, a, b)
        return p

    def below(self, x, bound: int, exact: bool):
        """The predicate x < bound, or None where it always holds."""
        return None if exact else self.pred("lt", x, bound)

    def select(self, x, otherwise, ok):
        """ok ? x : otherwise (x itself where ok always holds)."""
        if ok is None:
            return x
        r = self.k.reg("u32")
        self.k.ins("selp.u32", r, x, otherwise, ok)
        return r

    def pand(self, a, b) -> Reg:
        if a is None:
            return b
        if b is None:
            return a
        p = self.k.reg("pred")
        self.k.ins("and.pred", p, a, b)
        return p

    def wide(self, base: Reg, offset32: Reg) -> Reg:
        """base (u64) + offset32 (u32, bytes)."""
        r = self.k.reg("u64")
        self.k.ins("mad.wide.u32", r, offset32, 1, base)
        return r

    # ------------------------------------------------------------------ the kernel
    def emit(self) -> str:
        k, s, c = self.k, self.s, self.c
        k.maxntid = s.threads
        k.comment(f"{'conv' if c.conv else 'gemm'} M={c.m} N={c.n} K={c.k} {c.dtype}->{c.out_dtype} "
                  f"knobs {s.knobs()} BM={self.bm} BN={self.bn} BK={self.bk}")
        self.ptrs = {}
        for name in self.args:
            k.param("u64", f"p_{name}")
        for name in self.args:
            raw = k.ld_param("u64", f"p_{name}")
            g = k.reg("u64")
            k.ins("cvta.to.global.u64", g, raw)
            self.ptrs[name] = g
        k.extern_shared("smem", 128)
        self.smem = self.u32("smem")
        tid = k.special("%tid.x")
        self.tid = tid
        self.lane = self.op3("and.b32", tid, 31)
        self.warp = self.op3("shr.u32", tid, 5)
        self.wm, self.wn = self.divmod(self.warp, s.BLK_COL_WARPS, s.warps - 1)
        bx, by = k.special("%ctaid.x"), k.special("%ctaid.y")
        if s.REORDER_INNER and c.conv is None:
            bx, by = by, bx          # grid x walks M: consecutive CTAs share a panel of B
        self.m0 = self.op3("mul.lo.u32", by, self.bm)
        self.n0 = self.op3("mul.lo.u32", bx, self.bn)
        self.bz = k.special("%ctaid.z") if c.batch > 1 else None       # a batched GEMM's product
        self.acc = [[k.regs(self.mma.acc, 4) for _ in range(2 * s.WARP_COL_TILES)] for _ in range(s.WARP_ROW_TILES)]
        zero = 0.0 if self.mma.acc == "f32" else 0
        for row in self.acc:
            for frag in row:
                for r in frag:
                    k.ins(f"mov.{self.mma.acc}", r, zero)
        self._loader_setup()
        self._fragment_setup()
        self._main_loop()
        self._epilogue()
        k.ins("ret")
        return k.text()

    # ------------------------------------------------------------------ global -> shared copies
    def _loader_setup(self):
        """Per thread, per chunk it copies: the row-invariant part of its address and bounds, once
        (a tile copied in more than COPY_UNROLL chunks a thread, narrow rows a byte or two at a
        time, is copied by a loop instead, each chunk set up where it is copied: _load_stage)."""
        self.a_chunk = lambda *at: self._chunk(self.ta, True, *at)
        self.b_chunk = lambda *at: self._chunk(self.tb, False, *at)
        self.a_chunks = self._setup_each(self.ta.chunks, self.a_chunk)
        self.b_chunks = self._setup_each(self.tb.chunks, self.b_chunk)

    def _setup_each(self, total: int, make) -> list:
        """make(idx, live, bound) for each item this thread handles of `total` (thread t: items t,
        t + T, ...; `live` where the last may lie past them), or [] where there are more than
        COPY_UNROLL a thread: _each then sets each up in a loop."""
        T = self.s.threads
        per = -(-total // T)
        if per > COPY_UNROLL:
            return []
        out = []
        for i in range(per):
            idx = self.op3("add.u32", self.tid, i * T)
            live = self.pred("lt", idx, total) if (i + 1) * T > total else None
            out.append(make(idx, live, (i + 1) * T - 1))
        return out

    def _each(self, total: int, unrolled: list, make):
        """The items this thread handles of `total`, for the caller's loop body: those set up once
        (_setup_each), or one at a time in a loop this emits around the body, each set up there."""
        k, T = self.k, self.s.threads
        per = -(-total // T)
        if per <= COPY_UNROLL:
            yield from unrolled
            return
        i = self.u32(0)
        top = k.label("each")
        k.place(top)
        idx = self.mad(i, T, self.tid)
        yield make(idx, self.pred("lt", idx, total) if per * T > total else None, per * T - 1)
        k.ins("add.u32", i, i, 1)
        k.ins("bra.uni", top, pred=self.pred("lt", i, per))

    def _chunk(self, tile: _Tile, is_a: bool, idx, live, bound: int) -> dict:
        """Chunk number `idx` (at most `bound`) of a tile: where it lies in shared memory, and the
        row-invariant part of its global address and bounds."""
        c = self.c
        row, col = self._chunk_place(idx, tile, bound)
        col_e = self.op3("mul.lo.u32", col, tile.vec // self.es)          # element within the k-step row
        soff = self.mad(row, tile.stride, self.op3("mul.lo.u32", col, tile.vec))
        ch = {"live": live, "soff": soff, "col_e": col_e, "row": row}
        if is_a:
            self._a_rows(ch)
            return ch
        # B rows are k (the column is n), or n
        n = self.op3("add.u32", self.n0, col_e if c.b_kmajor else row)
        ch["ok"] = self.pand(live, self.below(n, c.n, self.n_exact))
        start = (self.op3("mul.lo.u32", n, self.es) if c.b_kmajor else
                 self.op3("mul.lo.u32", self.select(n, 0, ch["ok"]), c.k * self.es))
        ch["base"] = self.wide(self.ptrs[c.b], self._batched(start, c.b_batched, c.k * c.n * self.es))
        return ch

    def _chunk_place(self, idx, tile: _Tile, bound: int):
        """(row, chunk within the row) that chunk number `idx` of a tile is copied to.  In row order
        a quarter-warp's eight 16-byte copies fill two rows of 4 chunks (or four of 2), whose
        padded rows overlap in a few banks (SMEM_PAD keeps ldmatrix's reads conflict-free, and
        shifts each row 4 banks): so each quarter takes rows that share none, rows r and r + 4
        (4 chunks a row) or rows of one parity among 8 (2 chunks).  The same 32 copies per warp,
        so the same global sectors; rows of 8 chunks or more fill a quarter's 32 banks alone."""
        C = tile.per_row
        if tile.vec != 16 or C not in (2, 4) or tile.chunks % 32:
            return self.divmod(idx, C, bound)
        shr, band = (lambda x, n: self.op3("shr.u32", x, n)), (lambda x, m: self.op3("and.b32", x, m))
        if C == 4:      # row (idx / 32) * 8 + quarter + 4 * (bit 2), chunk idx % 4
            row = self.mad(shr(idx, 5), 8, self.mad(band(shr(idx, 2), 1), 4, band(shr(idx, 3), 3)))
        else:           # row (idx / 32) * 16 + 8 * (bit 4) + (bit 3) + 2 * (bits 1-2), chunk idx % 2
            row = self.mad(shr(idx, 5), 16, self.mad(band(shr(idx, 4), 1), 8,
                                                     self.mad(band(shr(idx, 1), 3), 2, band(shr(idx, 3), 1))))
        return row, band(idx, C - 1)

    def _a_rows(self, ch):
        c = self.c
        m = self.op3("add.u32", self.m0, ch["row"])
        ok = self.pand(ch["live"], self.below(m, c.m, self.m_exact))
        mc = self.select(m, 0, ok)             # rows past M read row 0 (and are zero-filled)
        ch["ok"] = ok
        g = c.conv
        if g is None:
            ch["base"] = self.wide(self.ptrs[c.a], self._batched(self.op3("mul.lo.u32", mc, c.k * self.es),
                                                                 c.a_batched, c.m * c.k * self.es))
            return
        hw = g.oh * g.ow
        b, pix = self.divmod(mc, hw, c.m - 1)
        oh, ow = self.divmod(pix, g.ow, hw - 1)
        ch["ih0"] = self.op3("sub.s32", self.op3("mul.lo.u32", oh, g.stride), g.pad)
        ch["iw0"] = self.op3("sub.s32", self.op3("mul.lo.u32", ow, g.stride), g.pad)
        ch["base"] = self.wide(self.ptrs[c.a], self.op3("mul.lo.u32", b, g.h * g.w * g.c * self.es))

    def _batched(self, offset, batched: bool, per_batch: int):
        """`offset` into this CTA's product of a batched operand (`per_batch` bytes apart)."""
        if self.bz is None or not batched:
            return offset
        return self.mad(self.bz, per_batch, offset)

    def _k_origin(self, kt: Reg) -> Reg:
        """The flattened reduction index of the k-step's first column."""
        c, s = self.c, self.s
        if c.conv is not None and s.REORDER_INNER:
            g = c.conv
            cb, rs = self.divmod(kt, g.r * g.s, self.kt_count)
            return self.mad(rs, g.c, self.op3("mul.lo.u32", cb, self.bk))
        return self.op3("mul.lo.u32", kt, self.bk)

    def _copy(self, tile, ch, stage_off: Reg, gaddr: Reg, ok: Reg):
        """One chunk: cp.async with zero fill past the bounds, or (narrow rows) a guarded ld/st."""
        k = self.k
        dst = self.op3("add.u32", stage_off, ch["soff"])
        live = ch["live"]            # the thread's last chunk may lie past the tile: no copy at all
        if tile.vec >= 4:             # zero-fill what is out of bounds (src-size 0)
            size = None if ok is None else self.select(tile.vec, 0, ok)
            k.cp_async(Addr(dst), Addr(gaddr), tile.vec, src_size=size, pred=live)
            return
        t = {1: "u8", 2: "u16"}[tile.vec]
        v = self.k.reg("u16")
        k.ins("mov.b16", v, 0)
        k.ins(f"ld.global.{t}", v, Addr(gaddr), pred=ok)
        k.ins(f"st.shared.{t}", Addr(dst), v, pred=live)

    def _load_stage(self, kt, stage):
        """Issue the copies of k-step `kt` into shared stage `stage` (0..stages-1): registers in
        the main loop, constants in the prologue."""
        c = self.c
        base = self.mad(stage, self.stage_bytes, self.smem)
        b_base = self.op3("add.u32", base, self.ta.bytes)
        k0 = self._k_origin(kt)
        # a k-step within one filter tap (BK divides C): its (r, s) and first channel, once
        window = self._conv_tap(k0) if c.conv is not None and c.conv.c % self.bk == 0 else None
        for ch in self._each(self.ta.chunks, self.a_chunks, self.a_chunk):
            self._copy_a(ch, base, k0, window)
        for ch in self._each(self.tb.chunks, self.b_chunks, self.b_chunk):
            self._copy_b(ch, b_base, k0)

    def _copy_a(self, ch, base, k0, window):
        """A's chunk of the k-step starting at k0: rows are m, columns are k."""
        c = self.c
        kk = self.op3("add.u32", k0, ch["col_e"])
        if c.conv is None:
            ok = self.pand(ch["ok"], self.below(kk, c.k, self.k_exact))
            off = self.select(self.op3("mul.lo.u32", kk, self.es), 0, ok)
        else:
            ok, off = self._conv_a_offset(ch, kk, window)
        self._copy(self.ta, ch, base, self.wide(ch["base"], off), ok)

    def _copy_b(self, ch, b_base, k0):
        """B's chunk of the k-step starting at k0: rows are k (k-major) or n."""
        c = self.c
        if c.b_kmajor:
            kk = self.op3("add.u32", k0, ch["row"])
            ok = self.pand(ch["ok"], self.below(kk, c.k, self.k_exact))
            off = self.select(self.op3("mul.lo.u32", kk, c.n * self.es), 0, ok)
        else:
            kk = self.op3("add.u32", k0, ch["col_e"])
            ok = self.pand(ch["ok"], self.below(kk, c.k, self.k_exact))
            off = self.select(self.op3("mul.lo.u32", kk, self.es), 0, ok)
        self._copy(self.tb, ch, b_base, self.wide(ch["base"], off), ok)

    def _conv_tap(self, k0: Reg):
        """(first channel, r, s) of the k-step starting at reduction index k0."""
        g = self.c.conv
        rs, c0 = self.divmod(k0, g.c, self.c.k)
        return (c0, *self.divmod(rs, g.s, g.r * g.s))

    def _conv_a_offset(self, ch, kk: Reg, window=None):
        """Bounds and byte offset of input element (ih0 + r, iw0 + s, c) for reduction index kk
        (`window`: the k-step's (first channel, r, s), when the whole k-step has one (r, s))."""
        g, c = self.c.conv, self.c
        ok = self.pand(ch["ok"], self.below(kk, c.k, self.k_exact))
        if window is None:
            rs, ci = self.divmod(kk, g.c, c.k + self.bk)          # kk runs past K in the last k-step
            r, sx = self.divmod(rs, g.s, (c.k + self.bk) // g.c)
        else:
            c0, r, sx = window
            ci = self.op3("add.u32", c0, ch["col_e"])
        ih = self.op3("add.s32", ch["ih0"], r)
        iw = self.op3("add.s32", ch["iw0"], sx)
        ok = self.pand(ok, self.pred("lt", ih, g.h))        # unsigned: a negative row is huge
        ok = self.pand(ok, self.pred("lt", iw, g.w))
        pix = self.mad(ih, g.w, iw)
        elem = self.mad(pix, g.c, ci)
        return ok, self.select(self.op3("mul.lo.u32", elem, self.es), 0, ok)

    # ------------------------------------------------------------------ shared -> fragments -> mma
    def _fragment_setup(self):
        """Each lane's ldmatrix row address within a stage (the warp's block, the lane's row)."""
        s, lane = self.s, self.lane
        q = self.op3("shr.u32", lane, 3)
        r8 = self.op3("and.b32", lane, 7)
        q_lo = self.op3("and.b32", q, 1)
        q_hi = self.op3("shr.u32", q, 1)
        # A: matrix q covers rows (q&1)*8.., bytes (q>>1)*16..
        a_row = self.mad(self.wm, 16 * s.WARP_ROW_TILES, self.mad(q_lo, 8, r8))
        self.a_lane = self.mad(a_row, self.ta.stride, self.op3("mul.lo.u32", q_hi, 16))
        warp_n = self.op3("mul.lo.u32", self.wn, 16 * s.WARP_COL_TILES)
        if self.c.b_kmajor and self.es == 2:
            # .trans: matrix q covers k rows (q&1)*8.., n columns (q>>1)*8..
            k_row = self.mad(q_lo, 8, r8)
            n_col = self.mad(q_hi, 8, warp_n)
            self.b_lane = self.mad(k_row, self.tb.stride, self.op3("mul.lo.u32", n_col, self.es))
        else:
            # B rows are n (as stored, or the transposed copy of a k-major B): matrix q
            # covers n rows (q>>1)*8.., bytes (q&1)*16..
            stride = self.tt_stride if self.transposes_b else self.tb.stride
            n_row = self.mad(q_hi, 8, self.op3("add.u32", warp_n, r8))
            self.b_lane = self.mad(n_row, stride, self.op3("mul.lo.u32", q_lo, 16))
        if self.transposes_b:
            self._transpose_setup()

    def _compute_stage(self, stage):
        k, s, mma = self.k, self.s, self.mma
        base = self.mad(stage, self.stage_bytes, self.smem)
        a_addr = self.op3("add.u32", base, self.a_lane)
        b_tile = self.op3("add.u32", base, self.ta.bytes)
        b_stride = self.tb.stride
        if self.transposes_b:
            self._transpose_b(b_tile)
            k.bar_sync()              # every warp reads rows of the copy other warps wrote
            b_tile, b_stride = self.tt_base, self.tt_stride
        b_addr = self.op3("add.u32", b_tile, self.b_lane)
        kbytes = mma.k * self.es                    # bytes of one k-step in a row (32 for every form)
        for kk in range(s.CHUNK):
            afr = []
            for i in range(s.WARP_ROW_TILES):
                regs = k.regs("b32", 4)
                k.ldmatrix(regs, Addr(a_addr, i * 16 * self.ta.stride + kk * kbytes))
                afr.append(self._operand(regs))
            bfr = []      # two n8 fragments per 16-wide tile
            for j in range(s.WARP_COL_TILES):
                regs = k.regs("b32", 4)
                if self.c.b_kmajor and not self.transposes_b:
                    k.ldmatrix(regs, Addr(b_addr, kk * mma.k * b_stride + j * 16 * self.es), trans=True)
                else:
                    k.ldmatrix(regs, Addr(b_addr, j * 16 * b_stride + kk * kbytes))
                regs = self._operand(regs)
                bfr += [regs[0:2], regs[2:4]]
            for i in range(s.WARP_ROW_TILES):
                for jj in range(2 * s.WARP_COL_TILES):
                    acc = self.acc[i][jj]
                    k.mma(mma, acc, afr[i], bfr[jj], acc)

    def _operand(self, regs: list[Reg]) -> list[Reg]:
        """Fragment registers as the mma reads them: float32 rounded to tf32 (cvt.rna, so that
        the product does not depend on how the tensor cores treat the 13 bits they ignore)."""
        if self.mma.ab == "tf32":
            for r in regs:
                self.k.ins("cvt.rna.tf32.f32", r, r)
        return regs

    def _transpose_setup(self):
        """Per block of the k-major B tile a thread transposes (see _transpose_b), 4 rows of k
        by 4 bytes of n (4 bytes, or one float32): whether it exists, its offset in a stage's B
        tile and its address in the [n][k] copy (which blocks a warp takes: _transpose_block)."""
        self.tt_count = (self.bk // 4) * (self.bn * self.es // 4)
        self.tt_base = self.op3("add.u32", self.smem, self.tt_offset)      # the [n][k] copy
        self.tt_blocks = self._setup_each(self.tt_count, self._block_addresses)

    def _block_addresses(self, b, live, _bound):
        """(live, offset in a stage's B tile, address in the [n][k] copy) of transpose block b."""
        es = self.es
        kb, nb = self._transpose_block(b, self.bk // 4, self.bn * es // 4)
        src = self.mad(kb, 4 * self.tb.stride, self.op3("mul.lo.u32", nb, 4))     # row 4kb, byte 4nb
        # the block's 4 / es rows of n in the copy, from byte 4kb * es of k
        return live, src, self.mad(nb, 4 // es * self.tt_stride, self.mad(kb, 4 * es, self.tt_base))

    def _transpose_block(self, b, kb4: int, nb4: int):
        """(k-block, n-block) of transpose block number b, so that a warp's reads and writes meet
        in as few banks as the padded rows allow.  Both tiles' rows are 16-byte multiples plus 16
        bytes apart, so a read's bank is 16 kb + nb and a write's 16 nb + kb (mod 32; bytes: four
        rows of n a block) or, tf32, a 16-byte store at bank group (2 CHUNK + 1) nb + kb (mod 8):
          - tf32: a warp takes 2 k-blocks by 16 n-blocks, each quarter-warp one k-block by 8
            n-blocks: conflict-free both ways;
          - bytes, both tiles 64 bytes wide or more: in each 16 x 16 square of blocks, warp c
            takes kb = 2i + x, nb = 2((i + c) mod 8) + y for i < 8 and bits x, y: the 32 values
            16x + nb, and 16y + kb, are distinct, and the 8 warps cover the square;
          - otherwise 4 k-blocks (or all, where fewer) by 8 or more n-blocks (reads 2, writes up to
            4 wavefronts a warp).  Every count is a power of two."""
        op = self.op3
        if self.es == 4:
            nb16 = nb4 // 16
            g = op("shr.u32", b, 5)
            nb = op("or.b32", op("shl.b32", op("and.b32", g, nb16 - 1), 4), op("and.b32", b, 15))
            kb = op("or.b32", op("shl.b32", op("shr.u32", g, nb16.bit_length() - 1), 1),
                    op("and.b32", op("shr.u32", b, 4), 1))
            return kb, nb
        if kb4 >= 16 and nb4 >= 16:
            i, x, y = op("and.b32", b, 7), op("and.b32", op("shr.u32", b, 3), 1), op("and.b32", op("shr.u32", b, 4), 1)
            c = op("and.b32", op("shr.u32", b, 5), 7)
            square, squares_n = op("shr.u32", b, 8), nb4 // 16
            kb_hi = op("shl.b32", op("shr.u32", square, squares_n.bit_length() - 1), 4)
            nb_hi = op("shl.b32", op("and.b32", square, squares_n - 1), 4)
            kb = op("add.u32", kb_hi, self.mad(i, 2, x))
            nb = op("add.u32", nb_hi, self.mad(op("and.b32", op("add.u32", i, c), 7), 2, y))
            return kb, nb
        kq = min(4, kb4)
        rest = op("shr.u32", b, kq.bit_length() - 1)
        nb = op("and.b32", rest, nb4 - 1)
        kb = op("or.b32", op("and.b32", b, kq - 1),
                op("shl.b32", op("shr.u32", rest, nb4.bit_length() - 1), kq.bit_length() - 1))
        return kb, nb

    def _transpose_b(self, b_tile: Reg):
        """The stage's k-major B tile (BK rows of BN elements) into the [n][k] copy that ldmatrix
        reads: per block, four words read down k; bytes (4 k x 4 n) transposed with eight prmt
        and written as four words along n, float32 (4 k x 1 n) written as one v4 along k."""
        k = self.k
        for live, src_off, dst in self._each(self.tt_count, self.tt_blocks, self._block_addresses):
            src = self.op3("add.u32", b_tile, src_off)
            w = [k.reg("b32") for _ in range(4)]
            for r, reg in enumerate(w):                  # w[r] = B[4kb + r][nb] (bytes: 4nb + j)
                k.ins("ld.shared.b32", reg, Addr(src, r * self.tb.stride), pred=live)
            if self.es == 4:
                k.ins("st.shared.v4.b32", Addr(dst), Vec(tuple(w)), pred=live)
                continue
            pairs = [self._prmt(w[0], w[1], 0x5140, live), self._prmt(w[0], w[1], 0x7362, live),
                     self._prmt(w[2], w[3], 0x5140, live), self._prmt(w[2], w[3], 0x7362, live)]
            for j in range(4):                           # word j byte r = B[4kb + r][4nb + j]
                lo, hi = pairs[j // 2], pairs[2 + j // 2]
                out = self._prmt(lo, hi, 0x7632 if j % 2 else 0x5410, live)
                k.ins("st.shared.b32", Addr(dst, j * self.tt_stride), out, pred=live)

    def _prmt(self, a: Reg, b: Reg, selector: int, pred) -> Reg:
        r = self.k.reg("b32")
        self.k.ins("prmt.b32", r, a, b, selector, pred=pred)
        return r

    def _main_loop(self):
        """The software pipeline: stages-1 k-steps in flight while one is multiplied."""
        k, S, KT = self.k, self.s.stages, self.kt_count
        if S == 1:
            kt = self.u32(0)
            top = k.label("k")
            k.place(top)
            self._load_stage(kt, 0)
            k.cp_async_commit()
            k.cp_async_wait(0)
            k.bar_sync()
            self._compute_stage(0)
            k.bar_sync()
            k.ins("add.u32", kt, kt, 1)
            more = self.pred("lt", kt, KT)
            k.ins("bra.uni", top, pred=more)
            return
        for st in range(S - 1):
            if st < KT:
                self._load_stage(st, st)
            k.cp_async_commit()
        kt, rd, wr = self.u32(0), self.u32(0), self.u32(S - 1)
        top = k.label("k")
        k.place(top)
        k.cp_async_wait(S - 2)
        k.bar_sync()
        nxt = self.op3("add.u32", kt, S - 1)
        skip = k.label("skip")
        k.ins("bra.uni", skip, pred=self.pred("ge", nxt, KT))
        self._load_stage(nxt, wr)
        k.place(skip)
        k.cp_async_commit()
        self._compute_stage(rd)
        for r in (rd, wr):             # advance the ring
            k.ins("add.u32", r, r, 1)
            k.ins("selp.u32", r, 0, r, self.pred("eq", r, S))
        k.ins("add.u32", kt, kt, 1)
        k.ins("bra.uni", top, pred=self.pred("lt", kt, KT))
        k.cp_async_wait(0)

    # ------------------------------------------------------------------ epilogue
    def _epilogue(self):
        s, c = self.s, self.c
        g = self.op3("shr.u32", self.lane, 2)
        t = self.op3("and.b32", self.lane, 3)
        row0 = self.op3("add.u32", self.m0, self.mad(self.wm, 16 * s.WARP_ROW_TILES, g))
        col0 = self.op3("add.u32", self.n0, self.mad(self.wn, 16 * s.WARP_COL_TILES, self.op3("mul.lo.u32", t, 2)))
        ot = OUT_TYPES.get(c.out_dtype)
        if ot is None:
            raise UnsupportedError(f"GPU kernels store float32, float16, bfloat16, int32, int8 or uint8, "
                                   f"not {c.out_dtype}")
        osz = {"f32": 4, "s32": 4, "f16": 2, "bf16": 2, "s8": 1, "u8": 1}[ot]
        # the thread's first element; every other one lies a constant number of bytes past it
        # (the output's shape is the kernel's), so a store is [base + immediate]: fewer
        # instructions for the driver's JIT to compile
        first = self.mad(row0, c.n * osz, self.op3("mul.lo.u32", col0, osz))
        base = self.wide(self.ptrs[c.out], self._batched(first, True, c.m * c.n * osz))
        pair = c.n % 2 == 0           # col is even: both elements in bounds or neither
        rows = [None if self.m_exact else self.below(self.op3("add.u32", row0, r), c.m, False)
                for r in range(0, 16 * s.WARP_ROW_TILES, 8)]
        for jj in range(2 * s.WARP_COL_TILES):
            col = self.op3("add.u32", col0, jj * 8)
            cok = [self.below(col, c.n, self.n_exact), self.below(col, c.n - 1, self.n_exact)]
            loads = {}
            for ld in bias_loads(c.init, c.post):
                loads[ld] = [self._load_vec(ld, col, e, cok[e]) for e in range(2)]
            scales = self._scales(col, cok)
            for i in range(s.WARP_ROW_TILES):
                for h in range(2):
                    rok = rows[2 * i + h]
                    vals = [self._value(self.acc[i][jj][2 * h + e], ot, {ld: v[e] for ld, v in loads.items()})
                            for e in range(2)]
                    if c.requant is not None:
                        vals = [self._requant(v, scales[e], ot) for e, v in enumerate(vals)]
                    at = ((i * 16 + 8 * h) * c.n + jj * 8) * osz
                    self._store(ot, base, at, vals, [self.pand(rok, cok[0]), self.pand(rok, cok[1])], pair)

    def _load_vec(self, ld: Load, col: Reg, e: int, ok: Reg, ct: str | None = None):
        """Element col+e of an epilogue vector (bias), as `ct` (the epilogue's compute type)."""
        k = self.k
        buf = ld.access.buffer
        dt = self.dtypes[buf]
        es = {"float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1}.get(dt)
        if es is None:
            raise UnsupportedError(f"epilogue vector {buf} of {dt}")
        addr = self.wide(self.ptrs[buf], self.op3("mul.lo.u32", self.op3("add.u32", col, e), es))
        ct = ct or self._compute_type()
        if dt in ("float32", "int32"):
            r = k.reg("f32" if dt == "float32" else "s32")
            k.ins(f"mov.{'f32' if dt == 'float32' else 's32'}", r, 0.0 if dt == "float32" else 0)
            k.ins(f"ld.global.{'f32' if dt == 'float32' else 's32'}", r, Addr(addr), pred=ok)
            if (ct == "f32") == (dt == "float32"):
                return r
            return self._cvt(r, ct)
        if es == 1:
            r = k.reg("s32")
            k.ins("mov.s32", r, 0)
            k.ins(f"ld.global.{'s8' if dt == 'int8' else 'u8'}", r, Addr(addr), pred=ok)
            return r if ct == "s32" else self._cvt(r, ct)
        h = k.reg("b16")
        k.ins("mov.b16", h, 0)
        k.ins("ld.global.b16", h, Addr(addr), pred=ok)
        f = k.reg("f32")
        k.ins(f"cvt.f32.{'f16' if dt == 'float16' else 'bf16'}", f, h)
        return f if ct == "f32" else self._cvt(f, ct)

    def _compute_type(self) -> str:
        return "f32" if self.c.out_dtype in ("float32", "float16", "bfloat16") or self.mma.acc == "f32" else "s32"

    def _cvt(self, r: Reg, to: str) -> Reg:
        d = self.k.reg(to)
        if to == "f32":
            self.k.ins(f"cvt.rn.f32.{r.type}", d, r)
        else:
            self.k.ins(f"cvt.rzi.{to}.{r.type}" if r.type == "f32" else f"cvt.{to}.{r.type}", d, r)   # C truncates
        return d

    def _value(self, acc: Reg, ot: str, loads: dict) -> Reg:
        """One output element before its store: acc (+ init), then, when an epilogue follows,
        the value as stored (loopstack's semantics: post reads the stored value back; a
        requantized statement stores an int32 sum, see ir.Requant)."""
        c = self.c
        v = acc
        if c.init is not None:
            v = self._post(Binary("add", Acc(), c.init), acc, loads)
        if c.post is None:
            return v
        return self._post(c.post, v if c.requant is not None else self._as_stored(v, ot), loads)

    def _scales(self, col: Reg, cok: list) -> list:
        """A requantization's scale for elements col and col+1: float32 registers or constants."""
        rq = self.c.requant
        if rq is None:
            return [None, None]
        if isinstance(rq.scale, Load):
            return [self._load_vec(rq.scale, col, e, cok[e], ct="f32") for e in range(2)]
        return [float(rq.scale.value)] * 2

    def _requant(self, v: Reg, scale, ot: str) -> Reg:
        """saturate(round_half_even(float32(v) * scale) + zero_point) as an s32 register, in
        float32 step by step as the reference interpreter (and onnxruntime) compute it."""
        k, rq = self.k, self.c.requant
        lo, hi = (-128.0, 127.0) if ot == "s8" else (0.0, 255.0)
        f = self._cvt(v, "f32")
        for op, x in (("mul.rn", scale), ("cvt.rni", None), ("add.rn", float(rq.zero_point)),
                      ("max", lo), ("min", hi)):
            r = k.reg("f32")
            if x is None:
                k.ins("cvt.rni.f32.f32", r, f)
            else:
                k.ins(f"{op}.f32", r, f, x)
            f = r
        return self._cvt(f, "s32")       # an integer in range: exact

    def _as_stored(self, v: Reg, ot: str) -> Reg:
        """v converted to the output type and back to the compute type."""
        k = self.k
        if ot in ("f16", "bf16"):
            h, f = k.reg("b16"), k.reg("f32")
            k.ins(f"cvt.rn.{ot}.f32", h, v if v.type == "f32" else self._cvt(v, "f32"))
            k.ins(f"cvt.f32.{ot}", f, h)
            return f if self._compute_type() == "f32" else self._cvt(f, "s32")
        if ot in ("s8", "u8"):
            return self._wrap8(v if v.type == "s32" else self._cvt(v, "s32"), ot == "s8")
        if ot == "s32" and v.type == "f32":
            return self._cvt(self._cvt(v, "s32"), "f32")
        return v

    def _wrap8(self, v: Reg, signed: bool = True) -> Reg:
        """The low byte of v, sign- or zero-extended: C's int32 -> int8 / uint8 conversion."""
        w = self.k.reg("s32")
        self.k.ins("shl.b32", w, v, 24)
        self.k.ins("shr.s32" if signed else "shr.u32", w, w, 24)
        return w

    def _post(self, e, acc: Reg, loads: dict) -> Reg:
        """The epilogue expression for one element, in the compute type (f32, or s32 for int outputs)."""
        if e is None:
            return acc
        ct = self._compute_type()
        k = self.k
        if isinstance(e, Acc):
            return acc if acc.type == ct else self._cvt(acc, ct)
        if isinstance(e, Load):
            return loads[e]
        if isinstance(e, Const):
            r = k.reg(ct)
            if ct == "s32" and float(e.value) != int(e.value):
                raise UnsupportedError(f"constant {e.value} in an integer epilogue")
            k.ins(f"mov.{ct}", r, float(e.value) if ct == "f32" else int(e.value))
            return r
        if isinstance(e, Unary):
            x = self._post(e.x, acc, loads)
            if e.op in ACTIVATIONS:
                return getattr(self, f"_{e.op}")(x)
            r = k.reg(ct)
            if e.op == "relu":
                k.ins(f"max.{ct}", r, x, 0.0 if ct == "f32" else 0)
            else:                     # neg, abs
                k.ins(f"{e.op}.{ct}", r, x)
            return r
        a, b = self._post(e.a, acc, loads), self._post(e.b, acc, loads)
        r = k.reg(ct)
        op = "mul.lo" if (e.op, ct) == ("mul", "s32") else e.op
        k.ins(f"{op}.{ct}", r, a, b)
        return r

    # ---- float activations (f32; loopstack's definitions, interp.py): exp as ex2.approx of x log2 e
    # (2 ulp, and the rounding of x log2 e: relative 6e-8 |x|); sigmoid 1 / (1 + exp(-x)) with an
    # IEEE reciprocal; tanh 2 sigmoid(2x) - 1 (absolute error ~1e-7 near 0); gelu, the tanh form,
    # as x sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)), which does not cancel (as vmath.py does)
    def _f32(self, op: str, *xs) -> Reg:
        r = self.k.reg("f32")
        self.k.ins(op, r, *xs)
        return r

    def _exp(self, x, sign: float = 1.0) -> Reg:
        return self._f32("ex2.approx.ftz.f32", self._f32("mul.rn.f32", x, sign * LOG2E))

    def _sigmoid(self, x) -> Reg:
        return self._f32("rcp.rn.f32", self._f32("add.rn.f32", self._exp(x, -1.0), 1.0))

    def _tanh(self, x) -> Reg:
        s = self._sigmoid(self._f32("add.rn.f32", x, x))
        return self._f32("fma.rn.f32", s, 2.0, -1.0)

    def _gelu(self, x) -> Reg:
        x2 = self._f32("mul.rn.f32", x, x)
        inner = self._f32("fma.rn.f32", x2, 2 * GELU_C * 0.044715, 2 * GELU_C)       # 2c (1 + 0.044715 x^2)
        return self._f32("mul.rn.f32", x, self._sigmoid(self._f32("mul.rn.f32", x, inner)))

    def _erf(self, x) -> Reg:
        """erf as the CPU's vector code computes it (vmath.py's coefficients, one table): x P(x^2) /
        Q(x^2) on x clamped to +-ERF_CLAMP, beyond which erf is 1 in float32; relative error 4e-7."""
        xc = self._f32("min.f32", self._f32("max.f32", x, -ERF_CLAMP), ERF_CLAMP)
        t = self._f32("mul.rn.f32", xc, xc)

        def horner(coefficients):
            acc = coefficients[-1]
            for c in reversed(coefficients[:-1]):
                acc = self._f32("fma.rn.f32", t, acc, c)
            return acc
        return self._f32("div.rn.f32", self._f32("mul.rn.f32", xc, horner(ERF_P)), horner(ERF_Q))

    def _store(self, ot: str, addr: Reg, at: int, vals: list[Reg], oks: list[Reg], pair: bool):
        """Two adjacent output elements at byte `at` past `addr`."""
        k = self.k
        if ot in ("f16", "bf16"):
            fs = [v if v.type == "f32" else self._cvt(v, "f32") for v in vals]
            if pair:                  # one conversion packs both: the second element is the upper half
                w = k.reg("b32")
                k.ins(f"cvt.rn.{ot}x2.f32", w, fs[1], fs[0])
                k.ins("st.global.b32", Addr(addr, at), w, pred=oks[0])
                return
            for e, f in enumerate(fs):
                h = k.reg("b16")
                k.ins(f"cvt.rn.{ot}.f32", h, f)
                k.ins("st.global.b16", Addr(addr, at + 2 * e), h, pred=oks[e])
            return
        if ot in ("s8", "u8"):       # st.s8 stores the low byte: int8 wraps, as C's conversion does
            for e, v in enumerate(vals):
                k.ins(f"st.global.{ot}", Addr(addr, at + e), v if v.type == "s32" else self._cvt(v, "s32"),
                      pred=oks[e])
            return
        vals = [v if v.type == ot else self._cvt(v, ot) for v in vals]
        if pair:
            k.ins(f"st.global.v2.{ot}", Addr(addr, at), Vec(tuple(vals)), pred=oks[0])
        else:
            for e in range(2):
                k.ins(f"st.global.{ot}", Addr(addr, at + 4 * e), vals[e], pred=oks[e])
