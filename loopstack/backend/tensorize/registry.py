"""The one registry of tensorized instructions, used by every backend.

Each entry is a `TensorInstr`: a description (a loop tree from `describe.py`), the CPU features
or GPU architecture it needs, and how the description's buffers map onto the instruction's
operands. The code generators pick an instruction by asking the inspector which entry matches a
statement — never by a hand-written special case — and each entry is checked in the tests
against the real instruction (native x86, unicorn for AArch64, the PTX reference interpreter).

Dtype conventions (exact integer arithmetic, never saturating):
  - x86 `vpdpbusd` multiplies unsigned bytes (src1) by signed bytes (src2); int8 activations
    use the standard compensation (add 128, subtract 128 x the weights' sum per output).
  - The AVX2 path multiplies pairs of 16-bit values with `vpmaddwd`, whose int32 pair sums
    cannot overflow on 8-bit inputs; `vpmaddubsw` is never used, since its int16 pair sums
    saturate (255 x 127 x 2 > 32767). Its fast form (`avx2.dot.s16`, k = 2) reads operands
    already widened to int16: the rewriter packs the weights and stages the activations as
    int16 (a constant weight array once), so its inner loop is one `vpmaddwd` and one `vpaddd`
    per 16 products. The older forms (`avx2.dot.u8s8` / `.s8s8`, k = 4) widen the bytes of both
    operands in registers at every use.
  - AArch64 `sdot` / `udot` multiply signed x signed / unsigned x unsigned bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...dtypes import DTYPES
from ...errors import ScheduleError, UnsupportedError
from ...isa.ptx.mma import MMA_SHAPES, MmaShape
from ...looptree.ir import LoopTree
from .describe import dot_desc, mma_desc, tile_desc


@dataclass(frozen=True)
class TensorInstr:
    name: str                       # unique: "vpdpbusd.zmm", "sdot.4s.elem", "mma.m16n8k32.s8"
    isa: str                        # "x86_64", "aarch64", "ptx"
    features: frozenset[str]        # CPU features (cpu.cpu_features names) or {"sm_80"}
    desc: LoopTree
    mnemonic: str                   # the assembler's spelling of the core instruction
    vector_bits: int                # register width the accumulator occupies (0: warp-wide)
    operands: tuple[tuple[str, str], ...]   # (description buffer, instruction operand role)
    notes: str = ""
    scratch: int = 0                # vector registers its implementation needs besides its operands
    # (description buffer, dim) whose step is a row stride the instruction takes in a register
    # (a tile load's index): any stride matches there
    strided: frozenset[tuple[str, str]] = frozenset()
    lanes: int = field(init=False)
    k: int = field(init=False)

    def __post_init__(self):
        stmts = [s for _, s in self.desc.computes()]
        if len(stmts) != 1 or stmts[0].reduce != "add":
            raise UnsupportedError(f"{self.name}: a description is one `+=` statement")
        dims = dict(self.desc.dims)
        object.__setattr__(self, "lanes", dims.get("i", dims.get("m", 0) * dims.get("n", 0)))
        object.__setattr__(self, "k", dims.get("j", dims.get("k", 0)))
        if self.strided:        # a tile: m x n accumulators, each a sum of k groups of j bytes
            object.__setattr__(self, "k", dims["k"] * dims["j"])
        names = {b.name for b in self.desc.buffers}
        for buf, _role in self.operands:
            if buf not in names:
                raise UnsupportedError(f"{self.name}: operand map names unknown buffer {buf!r}")

    @property
    def stmt(self):
        return next(s for _, s in self.desc.computes())

    def dtypes(self) -> tuple[str, str, str]:
        """(a, b, accumulator) dtypes."""
        return tuple(self.desc.buffer(n).dtype for n in ("a", "b", "acc"))  # type: ignore[return-value]

    @property
    def broadcast(self) -> str | None:
        """The operand ("a" or "b") that is the same k values in every lane, if any."""
        return next((n for n in ("a", "b") if len(self.desc.buffer(n).shape) == 1), None)

    @property
    def tile(self) -> bool:
        """A matrix instruction on tile registers (AMX): emitted by the tile code generator."""
        return bool(self.strided)

    def runs_on(self, features) -> bool:
        return self.features <= frozenset(features)


_DOT_OPERANDS = (("acc", "dst"), ("a", "src1"), ("b", "src2"))


def _x86_dot(name, mnemonic, bits, features, a_dtype="uint8", b_dtype="int8", notes=""):
    lanes = bits // 32
    k = 4 // DTYPES[a_dtype].itemsize                # a lane reads one 32-bit group of each operand
    # the byte-widening path: the widened halves of both operands; the pairs path: the products
    scratch = (4 if k == 4 else 1) if mnemonic == "vpmaddwd" else 0
    # a broadcast operand is a 32-bit group repeated in every lane: vpbroadcastd into a
    # register (either source), or src2's embedded {1toN} memory broadcast
    return [
        TensorInstr(name + suffix, "x86_64", frozenset(features), dot_desc(lanes, k, a_dtype, b_dtype, broadcast=bc),
                    mnemonic, bits, _DOT_OPERANDS, notes + (f" {bc} broadcast" if bc else ""), scratch)
        for suffix, bc in (("", None), (".bcst_a", "a"), (".bcst_b", "b"))
    ]


def _a64_dot(signed: bool):
    t = "int8" if signed else "uint8"
    mn = "sdot" if signed else "udot"
    return [
        TensorInstr(f"{mn}.4s", "aarch64", frozenset({"asimddp"}), dot_desc(4, 4, t, t), mn, 128, _DOT_OPERANDS),
        TensorInstr(f"{mn}.4s.elem", "aarch64", frozenset({"asimddp"}), dot_desc(4, 4, t, t, broadcast="b"),
                    mn, 128, _DOT_OPERANDS, "by element: src2 is one 4-byte group v.4b[i]"),
    ]


_MMA_OPERANDS = (("acc", "c"), ("a", "a"), ("b", "b"))


def _amx(mnemonic: str, a_dtype: str, b_dtype: str) -> TensorInstr:
    """An AMX int8 tile product: 16 x 16 int32 accumulators += 16 x 64 bytes . 64 x 16 bytes, in
    4-byte groups (b packed [k/4][n][4]); rows of a, b and the accumulators are a register stride
    apart. Each signedness pair has its own instruction, so int8 activations need no compensation."""
    return TensorInstr(f"amx.{mnemonic}", "x86_64", frozenset({"amx_tile", "amx_int8"}),
                       tile_desc(16, 16, 16, 4, a_dtype, b_dtype), mnemonic, 0,
                       (("acc", "tmm1"), ("a", "tmm2"), ("b", "tmm3")),
                       f"{a_dtype} x {b_dtype} tiles", strided=frozenset({("a", "m"), ("b", "k"), ("acc", "m")}))

def _mma(row: MmaShape) -> TensorInstr:
    """A tensor-core form, from its row in the PTX backend's table (isa/ptx/mma.py): the name
    a schedule's `tensorize` gives ("mma.m16n8k16.f16", "mma.m16n8k32.u8.s8"), one warp's m x n x k tile."""
    a, b, acc = row.dtypes
    return TensorInstr(f"mma.{row.shape}.{row.label}", "ptx", frozenset({"sm_80"}),
                       mma_desc(row.m, row.n, row.k, a, b, acc), row.opcode(), 0, _MMA_OPERANDS)


REGISTRY: tuple[TensorInstr, ...] = tuple(
    _x86_dot("vpdpbusd.zmm", "vpdpbusd", 512, {"avx512_vnni"})
    + _x86_dot("vpdpbusd.ymm", "vpdpbusd", 256, {"avx512_vnni", "avx512vl"})
    + _x86_dot("vpdpbusd.xmm", "vpdpbusd", 128, {"avx512_vnni", "avx512vl"})
    + _x86_dot("vex.vpdpbusd.ymm", "{vex} vpdpbusd", 256, {"avx_vnni"})
    # ahead of the byte-widening forms: the rewriter tries entries in this order
    + _x86_dot("avx2.dot.s16", "vpmaddwd", 256, {"avx2"}, "int16", "int16",
               notes="pairs of 16-bit values (8-bit operands widened when packed and staged), k=2, exact;")
    + _x86_dot("avx2.dot.u8s8", "vpmaddwd", 256, {"avx2"},
               notes="bytes widened to 16 bits (u8 zero-, s8 sign-extended in place), two vpmaddwd, exact;")
    + _x86_dot("avx2.dot.s8s8", "vpmaddwd", 256, {"avx2"}, a_dtype="int8",
               notes="both operands sign-extended, exact;")
    # the same exact paths in zmm registers, for AVX-512 CPUs without VNNI (Skylake-X)
    + _x86_dot("avx512bw.dot.s16", "vpmaddwd", 512, {"avx512bw"}, "int16", "int16",
               notes="pairs of 16-bit values, k=2, exact;")
    + _x86_dot("avx512bw.dot.u8s8", "vpmaddwd", 512, {"avx512bw"},
               notes="bytes widened to 16 bits, two vpmaddwd, exact;")
    + _x86_dot("avx512bw.dot.s8s8", "vpmaddwd", 512, {"avx512bw"}, a_dtype="int8",
               notes="both operands sign-extended, exact;")
    + _a64_dot(True) + _a64_dot(False)
    + [_amx("tdpbusd", "uint8", "int8"), _amx("tdpbssd", "int8", "int8"),
       _amx("tdpbsud", "int8", "uint8"), _amx("tdpbuud", "uint8", "uint8")]
    + [_mma(row) for row in MMA_SHAPES]
)

_BY_NAME = {t.name: t for t in REGISTRY}
if len(_BY_NAME) != len(REGISTRY):
    raise UnsupportedError("tensorized-instruction registry: duplicate names")


def instruction(name: str) -> TensorInstr:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnsupportedError(f"no tensorized instruction {name!r} (known: {', '.join(_BY_NAME)})") from None


def instructions_for(isa: str, features) -> list[TensorInstr]:
    """The entries an ISA with these features runs, widest first (the order the rewriter tries)."""
    got = [t for t in REGISTRY if t.isa == isa and t.runs_on(features)]
    return sorted(got, key=lambda t: -t.vector_bits)


def family(name: str) -> list[TensorInstr]:
    """The entries a schedule names: one entry, or every operand form of one ("vpdpbusd.zmm"
    is vpdpbusd.zmm, .bcst_a and .bcst_b)."""
    got = [t for t in REGISTRY if t.name == name or t.name.startswith(name + ".")]
    if not got:
        raise ScheduleError(f"no tensorized instruction {name!r} (known: {', '.join(_BY_NAME)})")
    return got
