"""Target descriptions: the one place that says what a code-generation target is.

Register counts, vector widths, required instruction sets, FMA pipes, cache sizes and the
measured FMA peak of a target live here; the backend, the tuner's cost models and the TUI
all read them from a `Target` and from nowhere else.

    get_target("avx512")   -> Target, or UnsupportedError naming what this CPU lacks
    get_target("neon_fp16", cpu="apple-m1")   -> an AArch64 target with a CPU model's pipes and caches
    host_target()          -> the widest target this CPU runs (avx512, else avx2; neon on AArch64)
    peak_gflops(target)    -> single-core FMA peak (fp32; fp16 for neon_fp16), measured by a JIT'd probe
    measure_peak(target)   -> the same, measured afresh

A target of another architecture than the host's (neon on x86-64) is returned without a feature
check: emitting its code anywhere is cross-compilation. Running it is the code generator's
business, which raises UnsupportedError on the wrong host.

AArch64 targets: `neon` computes fp32 in 4 lanes of the 32 128-bit registers; `neon_fp16` adds
fp16 arithmetic (fmla .8h, 8 lanes; FEAT_FP16, Linux HWCAP `asimdhp`). CPU presets (CPU_PRESETS)
give FMA pipes, the latency of dependent accumulations, caches and clock: `apple-m1` (Firestorm
core) and `cortex-a57`; their names are also llvm-mca's -mcpu names.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import math
import os
import time
from dataclasses import dataclass

from .. import dtypes
from ..errors import UnsupportedError
from . import cpu

__all__ = ["TARGETS", "Target", "fma_probe_code", "get_target", "host_target", "peak_gflops"]

@dataclass(frozen=True)
class Target:
    name: str                   # "avx2", "avx512", "neon", "neon_fp16"
    arch: str                   # "x86_64", "aarch64"
    vector_bits: int            # 256 / 512
    vector_registers: int       # architectural vector registers: 16 ymm / 32 zmm
    has_masks: bool             # AVX-512 opmask registers k1-k7
    required: frozenset[str]    # CPU features every kernel of this target may use
    # features its kernels may also use where the compiling host has them (the dot-product
    # extensions: VEX AVX-VNNI runs wherever AVX2 code runs, EVEX AVX512_VNNI beside AVX-512);
    # a target with none is what a CPU without them runs
    extensions: frozenset[str] = frozenset()
    fma_units: int = 2          # FMA pipes per core
    fma_latency: int = 4        # cycles from an FMA's inputs to its result
    l1d: int = 32 * 1024        # bytes; get_target / host_target fill in this machine's sizes
    l2: int = 512 * 1024
    l3: int = 8 * 1024 * 1024
    l1d_ways: int = 8           # L1d associativity: lines of one set (4 KiB apart on x86) it holds
    unroll_limit: int = 256     # default cap on unrolled instructions in a loop-nest body
    load_ports: int = 2         # vector loads issued per cycle
    dtlb_entries: int = 64      # first-level data TLB: pages a loop nest may sweep without misses
    dtlb_miss_cycles: int = 7   # a first-level miss served by the second-level TLB
    stlb_entries: int = 2048    # second-level TLB
    stlb_miss_cycles: int = 30  # a page walk (its page-table entries cached)
    # whether the core's hardware prefetchers bring a packed weight tile streaming from beyond L2
    # in ahead of the passes over it: default schedules then keep such a tile as large as the
    # caches hold, not as small as the passes over the one before can prefetch it in (measured
    # on a Zen 4, the AMD cores' host targets set it; an AVX-512 Xeon's stalled without)
    streams_prefetched: bool = False
    compute_dtype: str = "float32"  # what the vector arithmetic computes in (neon_fp16: float16)
    cpu: str = ""               # CPU preset (an llvm-mca -mcpu name) or "" for the host / a generic core
    clock_ghz: float = 0.0      # the preset's clock, for predicted GFLOPS (0: unknown)
    cores: int = 1              # threads a default schedule splits its work for (host targets: this machine's)

    def lanes(self, dtype=None) -> int:
        """Elements of `dtype` (default: the compute dtype) in one vector register: 8 float32
        in a ymm, 16 in a zmm, 8 float16 in a neon_fp16 q register."""
        return self.vector_bits // 8 // dtypes.dtype(dtype or self.compute_dtype).itemsize

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
            ("caches l1d / l2 / l3", f"{size(self.l1d)} ({self.l1d_ways}-way) / {size(self.l2)} / {size(self.l3)}"),
            ("TLB entries (miss cycles)", f"{self.dtlb_entries} ({self.dtlb_miss_cycles}) / "
                                          f"{self.stlb_entries} ({self.stlb_miss_cycles})"),
            ("unroll limit", str(self.unroll_limit)),
            ("streamed tiles", "hardware prefetch" if self.streams_prefetched else "software prefetch"),
        ] + ([("compute dtype", self.compute_dtype)] if self.compute_dtype != "float32" else []) + (
            [("cpu model", f"{self.cpu}" + (f" at {self.clock_ghz} GHz" if self.clock_ghz else ""))]
            if self.cpu else [])


# Host-independent descriptions; get_target() / host_target() return them with this machine's caches.
TARGETS: dict[str, Target] = {
    "avx2": Target(name="avx2", arch="x86_64", vector_bits=256, vector_registers=16, has_masks=False,
                   required=frozenset({"avx", "avx2", "fma", "f16c"}), extensions=frozenset({"avx_vnni"})),
    "avx512": Target(name="avx512", arch="x86_64", vector_bits=512, vector_registers=32, has_masks=True,
                     required=frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
                     extensions=frozenset({"avx512_vnni", "avx_vnni", "amx_tile", "amx_int8"}), l2=2 * 1024 * 1024),
    # AArch64 AdvSIMD, Apple M1 (Firestorm) preset: 4 FMA pipes of 4 cycles, 128 KiB L1d, 12 MiB L2
    "neon": Target(name="neon", arch="aarch64", vector_bits=128, vector_registers=32, has_masks=False,
                   required=frozenset({"asimd"}), extensions=frozenset({"asimddp"}), fma_units=4, fma_latency=4,
                   l1d=128 * 1024, l2=12 * 1024 * 1024, l3=8 * 1024 * 1024),
    "neon_fp16": Target(name="neon_fp16", arch="aarch64", vector_bits=128, vector_registers=32, has_masks=False,
                        required=frozenset({"asimd", "asimdhp"}), fma_units=4, fma_latency=4, l1d=128 * 1024,
                        l2=12 * 1024 * 1024, l3=8 * 1024 * 1024, compute_dtype="float16"),
}
# (an AArch64 target cross-compiled without a `cpu` keeps these Apple M1 figures; on an aarch64
# host the host's caches replace them; CPU_PRESETS below name a core explicitly)

KiB, MiB = 1024, 1024 * 1024
# CPU presets: the features the core has, and the fields they set on a target of its architecture.
# fma_latency is the latency of dependent accumulations (accumulator forwarding), as llvm-mca's
# model of the core predicts it; fma_units counts 128-bit FMLA issued per cycle.
CPU_PRESETS: dict[str, tuple[str, frozenset[str], dict]] = {
    # Firestorm (M1 performance core): four 128-bit FP pipes, FMLA latency 4; 128 KiB L1d,
    # 12 MiB L2 shared by the cluster, 8 MiB system-level cache behind it
    "apple-m1": ("aarch64", frozenset({"fp", "asimd", "fphp", "asimdhp", "asimddp"}),
                 dict(fma_units=4, fma_latency=4, l1d=128 * KiB, l2=12 * MiB, l3=8 * MiB, clock_ghz=3.2,
                      dtlb_entries=160, stlb_entries=3072)),
    # Cortex-A57: one 128-bit FMLA per cycle (two 64-bit FP pipes), no fp16 arithmetic;
    # 32 KiB L1d, 2 MiB shared L2, no L3
    "cortex-a57": ("aarch64", frozenset({"fp", "asimd"}),
                   dict(fma_units=1, fma_latency=4, load_ports=1, l1d=32 * KiB, l2=2 * MiB, l3=2 * MiB, clock_ghz=1.9,
                        dtlb_entries=32, stlb_entries=1024)),
}


def host_arch() -> str:
    """'x86_64', 'aarch64', or the machine name of anything else."""
    if cpu.is_x86_64():
        return "x86_64"
    if cpu.is_aarch64():
        return "aarch64"
    import platform
    return platform.machine().lower()


def _with_host_caches(t: Target) -> Target:
    """`t` with this machine's caches, cores and prefetchers."""
    return dataclasses.replace(t, **cpu.cache_sizes(), l1d_ways=cpu.l1d_ways(), cores=os.cpu_count() or 1,
                               streams_prefetched=cpu.cpu_vendor() == "AuthenticAMD")


def _with_preset(t: Target, name: str) -> Target:
    if name not in CPU_PRESETS:
        raise UnsupportedError(f"unknown cpu {name!r}; known: {', '.join(CPU_PRESETS)}")
    arch, features, fields = CPU_PRESETS[name]
    if arch != t.arch:
        raise UnsupportedError(f"cpu {name} is an {arch} core; target {t.name} is {t.arch}")
    missing = sorted(t.required - features)
    if missing:
        raise UnsupportedError(f"{name} lacks {', '.join(missing)} (needed by target {t.name})")
    return dataclasses.replace(t, cpu=name, **fields)


def _check(t: Target, features: frozenset[str]) -> None:
    missing = sorted(t.required - features)
    if missing:
        raise UnsupportedError(f"this CPU lacks {', '.join(missing)} (needed by target {t.name})")


def get_target(target: str | Target | None = None, *, check: bool = True, cpu: str | None = None) -> Target:
    """The Target named `target` (None: the host target), checked against this CPU.

    Raises UnsupportedError naming the missing features before any code runs. With
    check=False the description is returned anyway, for emitting code that will not run here;
    a target of another architecture is never checked (cross-compilation). `cpu` names a
    preset of CPU_PRESETS, whose pipes, caches and clock replace the host's.
    """
    if target is None and cpu is None:
        return host_target()
    if isinstance(target, Target):
        t = target
    else:
        name = host_target().name if target is None else target
        try:
            base = TARGETS[name]
        except KeyError:
            raise UnsupportedError(f"unknown target {name!r}; known: {', '.join(TARGETS)}") from None
        t = base if cpu is not None or base.arch != host_arch() else _with_host_caches(base)
    if cpu is not None:
        t = _with_preset(t, cpu)
    if check and t.arch == host_arch():
        _check(t, _cpu_features())
    return t


def _cpu_features() -> frozenset[str]:
    return cpu.cpu_features()


def host_target() -> Target:
    """The widest target this CPU runs: avx512 with F+BW+VL+DQ, else avx2 (which needs FMA);
    on AArch64 neon, fp32 arithmetic, which float32 programs compute in (neon_fp16 computes in
    float16: asked for by name, and checked for asimdhp)."""
    return _host_target_for(cpu.cpu_features(), host_arch())


@functools.lru_cache(maxsize=8)
def _host_target_for(features: frozenset[str], arch: str = "x86_64") -> Target:
    if arch == "aarch64":
        _check(TARGETS["neon"], features)
        return _with_host_caches(TARGETS["neon"])
    if TARGETS["avx512"].required <= features:
        return _with_host_caches(TARGETS["avx512"])
    _check(TARGETS["avx2"], features)
    return _with_host_caches(TARGETS["avx2"])


# -- measured peak ------------------------------------------------------------------------------

_PEAK_CACHE: dict[tuple[str, int], float] = {}
_CHAINS = 12        # independent accumulators: > fma_units x fma_latency on every x86 we target


def peak_gflops(target: Target | str | None = None, seconds: float = 0.05) -> float:
    """Single-core FMA peak in GFLOPS (fp32; fp16 for neon_fp16), measured once per target per process.

    A JIT'd loop of 12 independent `vfmadd231ps` chains (ymm for avx2, zmm for avx512; 24
    `fmla` chains on AArch64) runs
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
    if t.arch != host_arch():
        raise UnsupportedError(f"cannot measure the peak of target {t.name} ({t.arch}) on this {host_arch()} host")
    from .execmem import ExecutableCode
    if t.arch == "aarch64":
        code, chains = neon_fma_probe_code(fp16=t.compute_dtype == "float16"), _NEON_CHAINS
    else:
        code, chains = fma_probe_code(t.vector_bits), _CHAINS
    probe = ExecutableCode(code, "void(*)(int64_t)")
    flops_per_iter = chains * 2 * t.lanes(t.compute_dtype)
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


_NEON_CHAINS = 24    # > 4 pipes x 4 cycles (Apple M1), the most of any AArch64 preset


def neon_fma_probe_code(fp16: bool = False) -> bytes:
    """AArch64 `void probe(int64_t n)`: n iterations of 24 independent fmla chains (.4s, or
    .8h with fp16), v0-v23 from v30 x v31; v8-v15 are callee-saved, so their low halves are kept."""
    from .aarch64.assembler import Assembler
    from .aarch64.operands import SP, Mem, V, X
    asm = Assembler()
    asm.stp(V(8).d, V(9).d, Mem.pre(SP, -64))
    for i, off in ((10, 16), (12, 32), (14, 48)):
        asm.stp(V(i).d, V(i + 1).d, Mem(SP, off))
    for i in list(range(_NEON_CHAINS)) + [30, 31]:
        asm.movi(V(i).d2, 0)           # no NaN or denormal inputs
    top = asm.label("loop")
    asm.bind(top)
    for i in range(_NEON_CHAINS):
        if fp16:
            asm.fmla(V(i).h8, V(30).h8, V(31).h8)
        else:
            asm.fmla(V(i).s4, V(30).s4, V(31).s4)
    asm.subs(X(0), X(0), 1)
    asm.b_ne(top)
    for i, off in ((14, 48), (12, 32), (10, 16)):
        asm.ldp(V(i).d, V(i + 1).d, Mem(SP, off))
    asm.ldp(V(8).d, V(9).d, Mem.post(SP, 64))
    asm.ret()
    return asm.bytes()


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
