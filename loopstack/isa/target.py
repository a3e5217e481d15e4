"""Target descriptions: the one place that says what a code-generation target is.

Register counts, vector widths, required instruction sets, FMA pipes, cache sizes and the
measured FMA peak of a target live here; the backend, the tuner's cost models and the TUI
all read them from a `Target` and from nowhere else.

    get_target("avx512")   -> Target, or UnsupportedError naming what this CPU lacks
    host_target()          -> the widest target this CPU runs (avx512, else avx2)
    peak_gflops(target)    -> single-core fp32 FMA peak, measured by a JIT'd probe (once)
    measure_peak(target)   -> the same, measured afresh
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import math
import time
from dataclasses import dataclass

from .. import dtypes
from ..errors import UnsupportedError
from . import cpu

__all__ = ["TARGETS", "Target", "fma_probe_code", "get_target", "host_target", "peak_gflops"]

@dataclass(frozen=True)
class Target:
    name: str                   # "avx2", "avx512" (later "neon", "neon_fp16")
    arch: str                   # "x86_64"
    vector_bits: int            # 256 / 512
    vector_registers: int       # architectural vector registers: 16 ymm / 32 zmm
    has_masks: bool             # AVX-512 opmask registers k1-k7
    required: frozenset[str]    # CPU features every kernel of this target may use
    fma_units: int = 2          # FMA pipes per core
    fma_latency: int = 4        # cycles from an FMA's inputs to its result
    l1d: int = 32 * 1024        # bytes; get_target / host_target fill in this machine's sizes
    l2: int = 512 * 1024
    l3: int = 8 * 1024 * 1024
    unroll_limit: int = 256     # default cap on unrolled instructions in a loop-nest body
    dtlb_entries: int = 64      # first-level data TLB: pages a loop nest may sweep without misses
    dtlb_miss_cycles: int = 7   # a first-level miss served by the second-level TLB
    stlb_entries: int = 2048    # second-level TLB
    stlb_miss_cycles: int = 30  # a page walk (its page-table entries cached)

    def lanes(self, dtype="float32") -> int:
        """Elements of `dtype` in one vector register: 8 float32 in a ymm, 16 in a zmm."""
        return self.vector_bits // 8 // dtypes.dtype(dtype).itemsize

    @property
    def accumulators(self) -> int:
        """Independent FMA chains needed to hide the FMA latency (latency x pipes)."""
        return self.fma_units * self.fma_latency

    @property
    def block_registers(self) -> int:
        """Vector registers an FMA register block may keep as accumulators: the code generator
        reserves 3 to evaluate the statement (a broadcast, loaded operands), and without
        opmask registers one more holds the mask of a vector tail."""
        return self.vector_registers - 3 - (0 if self.has_masks else 1)

    def has(self, feature: str) -> bool:
        """Whether this CPU has `feature` (a lowercase /proc/cpuinfo name such as 'avx512_vnni')."""
        if feature not in cpu.KNOWN_FEATURES:
            raise UnsupportedError(f"unknown CPU feature {feature!r}; known: {', '.join(sorted(cpu.KNOWN_FEATURES))}")
        return feature in cpu.cpu_features()

    def require(self, *features: str, needed_by: str | None = None) -> None:
        """Raise UnsupportedError naming every feature in `features` this CPU lacks."""
        missing = [f for f in features if not self.has(f)]
        if missing:
            by = needed_by or f"target {self.name}"
            raise UnsupportedError(f"this CPU lacks {', '.join(missing)} (needed by {by})")

    @property
    def identity(self) -> str:
        """Stable key for tuning databases: target name, CPU brand and a hash of its features."""
        features = ",".join(sorted(cpu.cpu_features()))
        digest = hashlib.sha256(f"{self.arch}|{features}|{self.l1d},{self.l2},{self.l3}".encode()).hexdigest()
        brand = "-".join(cpu.cpu_brand().split())
        return f"{self.name}/{brand}/{digest[:12]}"

    def describe(self) -> list[tuple[str, str]]:
        """(field, value) rows for printing, sizes in KiB / MiB."""
        def size(n):
            return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 and n % (1024 * 1024) == 0 else f"{n // 1024} KiB"
        return [
            ("name", self.name), ("arch", self.arch),
            ("vector bits", str(self.vector_bits)), ("vector registers", str(self.vector_registers)),
            ("fp32 lanes", str(self.lanes("float32"))), ("opmask registers", "yes" if self.has_masks else "no"),
            ("required", " ".join(sorted(self.required))),
            ("fma units x latency", f"{self.fma_units} x {self.fma_latency} cycles"),
            ("caches l1d / l2 / l3", f"{size(self.l1d)} / {size(self.l2)} / {size(self.l3)}"),
            ("TLB entries (miss cycles)", f"{self.dtlb_entries} ({self.dtlb_miss_cycles}) / "
                                          f"{self.stlb_entries} ({self.stlb_miss_cycles})"),
            ("unroll limit", str(self.unroll_limit)),
        ]


# Host-independent descriptions; get_target() / host_target() return them with this machine's caches.
TARGETS: dict[str, Target] = {
    "avx2": Target(name="avx2", arch="x86_64", vector_bits=256, vector_registers=16, has_masks=False,
                   required=frozenset({"avx", "avx2", "fma", "f16c"})),
    "avx512": Target(name="avx512", arch="x86_64", vector_bits=512, vector_registers=32, has_masks=True,
                     required=frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
                     l2=2 * 1024 * 1024),
}


def _with_host_caches(t: Target) -> Target:
    return dataclasses.replace(t, **cpu.cache_sizes())


def _check(t: Target, features: frozenset[str]) -> None:
    missing = sorted(t.required - features)
    if missing:
        raise UnsupportedError(f"this CPU lacks {', '.join(missing)} (needed by target {t.name})")


def get_target(target: str | Target | None = None, *, check: bool = True) -> Target:
    """The Target named `target` (None: the host target), checked against this CPU.

    Raises UnsupportedError naming the missing features before any code runs. With
    check=False the description is returned anyway, for emitting code that will not run here.
    """
    if target is None:
        return host_target()
    if isinstance(target, Target):
        t = target
    else:
        try:
            t = _with_host_caches(TARGETS[target])
        except KeyError:
            raise UnsupportedError(f"unknown target {target!r}; known: {', '.join(TARGETS)}") from None
    if check:
        _check(t, cpu.cpu_features())
    return t


def host_target() -> Target:
    """The widest target this CPU runs: avx512 with F+BW+VL+DQ, else avx2 (which needs FMA)."""
    return _host_target_for(cpu.cpu_features())


@functools.lru_cache(maxsize=8)
def _host_target_for(features: frozenset[str]) -> Target:
    if TARGETS["avx512"].required <= features:
        return _with_host_caches(TARGETS["avx512"])
    _check(TARGETS["avx2"], features)
    return _with_host_caches(TARGETS["avx2"])


# -- measured peak ------------------------------------------------------------------------------

_PEAK_CACHE: dict[tuple[str, int], float] = {}
_CHAINS = 12        # independent accumulators: > fma_units x fma_latency on every x86 we target


def peak_gflops(target: Target | str | None = None, seconds: float = 0.05) -> float:
    """Single-core fp32 FMA peak in GFLOPS, measured once per target per process.

    A JIT'd loop of 12 independent `vfmadd231ps` chains (ymm for avx2, zmm for avx512) runs
    for about `seconds` in several rounds; the best round counts (a shared machine only
    ever makes a round slower).
    """
    t = get_target(target)
    key = (t.name, t.vector_bits)
    if key not in _PEAK_CACHE:
        _PEAK_CACHE[key] = measure_peak(t, seconds)
    return _PEAK_CACHE[key]


def measure_peak(target: Target | str | None = None, seconds: float = 0.05) -> float:
    """peak_gflops measured afresh (a benchmark interleaves it with the kernels it rates, so
    that a slow phase of a shared machine slows both sides of the ratio alike)."""
    t = get_target(target)
    from .execmem import ExecutableCode
    probe = ExecutableCode(fma_probe_code(t.vector_bits), "void(*)(int64_t)")
    flops_per_iter = _CHAINS * 2 * t.lanes("float32")
    try:
        # calibrate: grow the count until one call takes >= 1 ms
        iters = 1000
        while True:
            start = time.perf_counter()
            probe(iters)
            elapsed = time.perf_counter() - start
            if elapsed >= 1e-3 or iters >= 1 << 40:
                break
            iters *= 4
        rounds = 5
        iters = max(1, int(iters * (seconds / rounds) / max(elapsed, 1e-9)))
        best = math.inf
        for _ in range(rounds):
            start = time.perf_counter()
            probe(iters)
            best = min(best, time.perf_counter() - start)
    finally:
        probe.close()
    return flops_per_iter * iters / best / 1e9


def fma_probe_code(vector_bits: int) -> bytes:
    """`void probe(int64_t n)`: n iterations of 12 independent vfmadd231ps chains (n >= 1)."""
    if importlib.util.find_spec(f"{__package__}.x86.assembler") is None:
        return _fma_probe_bytes(vector_bits)
    from .x86.assembler import Assembler   # present: its errors are real errors, not a fallback
    from .x86.operands import YMM, ZMM, rdi
    regs = {256: YMM, 512: ZMM}[vector_bits]
    asm = Assembler()
    asm.emit("vzeroall")                    # zero accumulators and sources: no NaN/denormal inputs
    top = asm.label("loop")
    asm.bind(top)
    for i in range(_CHAINS):
        asm.emit("vfmadd231ps", regs[i], regs[12], regs[13])
    asm.emit("dec", rdi)
    asm.emit("jne", top)
    asm.emit("vzeroupper")
    asm.emit("ret")
    return asm.bytes()


def _fma_probe_bytes(vector_bits: int) -> bytes:
    """Fallback while the assembler is unavailable: the same probe, hand-encoded.

    vfmadd231ps reg_i, reg12, reg13:
      ymm: VEX.256.66.0F38.W0 B8 /r  -> C4 [R̄ X̄ B̄ 00010] [W vvvv̄ L pp] B8 modrm
      zmm: EVEX.512.66.0F38.W0 B8 /r -> 62 [R̄ X̄ B̄ R̄' 0 mmm] [W vvvv̄ 1 pp] [z L'L b V̄' aaa] B8 modrm
    reg13 needs B (B̄ = 0); reg12 goes in vvvv inverted: ~12 & 0xF = 0b0011.
    """
    out = bytearray([0xC5, 0xFC, 0x77])                     # vzeroall
    loop_start = len(out)
    for i in range(_CHAINS):
        r_bar = 0 if i >= 8 else 1
        modrm = 0xC0 | ((i & 7) << 3) | (13 & 7)             # mod=11 reg=i rm=13
        if vector_bits == 256:
            out += bytes([0xC4, (r_bar << 7) | 0x40 | 0x02,  # R̄ X̄=1 B̄=0 map 0F38
                          (0b0011 << 3) | 0x04 | 0x01,        # W0 vvvv̄ L=1 pp=66
                          0xB8, modrm])
        else:
            out += bytes([0x62, (r_bar << 7) | 0x40 | 0x10 | 0x02,   # R̄ X̄=1 B̄=0 R̄'=1 map 0F38
                          (0b0011 << 3) | 0x04 | 0x01,               # W0 vvvv̄ 1 pp=66
                          0x40 | 0x08,                               # z=0 L'L=10 b=0 V̄'=1 aaa=0
                          0xB8, modrm])
    out += bytes([0x48, 0xFF, 0xCF])                        # dec rdi
    rel = loop_start - (len(out) + 2)
    out += bytes([0x75, rel & 0xFF])                        # jne loop (rel8)
    out += bytes([0xC5, 0xF8, 0x77, 0xC3])                  # vzeroupper; ret
    return bytes(out)
