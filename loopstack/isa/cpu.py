"""What this CPU can do: instruction-set features, brand string, cache sizes.

On AArch64 Linux the features are the kernel's HWCAP bits, read with `getauxval(AT_HWCAP)`
(not /proc/cpuinfo, which under user-mode emulation describes the host): `asimdhp` for fp16
arithmetic (fmla .8h), `asimddp` for sdot/udot. On macOS arm64 they come from
`sysctlbyname("hw.optional.arm.FEAT_FP16" / "FEAT_DotProd")`.

On x86-64 the features come from CPUID and XGETBV, run through our own JIT (two tiny
hand-encoded functions made executable by `execmem`), so detection works on any OS and
needs no C compiler. `/proc/cpuinfo` is read only to cross-check (`proc_cpuinfo_features`).

A feature counts as present only when the CPU has it AND the OS saves its register state
(SDM vol. 1, 13.2 / 15.2): CPUID.1:ECX.OSXSAVE, then XCR0 & 0x6 == 0x6 for the AVX family
and XCR0 & 0xE0 == 0xE0 for AVX-512 (opmask, upper zmm0-15, zmm16-31).
"""
from __future__ import annotations

import functools
import glob
import os
import platform
import struct

__all__ = [
    "KNOWN_FEATURES", "cache_sizes", "cpu_brand", "cpu_features", "cpuid", "darwin_arm64_features",
    "hwcap_features", "is_aarch64", "is_x86_64", "midr_name", "proc_cpuinfo_features", "xgetbv",
]

# -- the two JIT'd helpers ----------------------------------------------------------------------
# void cpuid(uint32_t leaf, uint32_t subleaf, uint32_t out[4])     rdi = leaf, rsi = subleaf, rdx = out
_CPUID_CODE = bytes([
    0x53,                       # push rbx            ; rbx is callee-saved and CPUID writes it
    0x49, 0x89, 0xD0,           # mov  r8, rdx        ; keep `out`, CPUID overwrites edx
    0x89, 0xF8,                 # mov  eax, edi       ; leaf
    0x89, 0xF1,                 # mov  ecx, esi       ; subleaf
    0x0F, 0xA2,                 # cpuid
    0x41, 0x89, 0x00,           # mov  [r8], eax
    0x41, 0x89, 0x58, 0x04,     # mov  [r8 + 4], ebx
    0x41, 0x89, 0x48, 0x08,     # mov  [r8 + 8], ecx
    0x41, 0x89, 0x50, 0x0C,     # mov  [r8 + 12], edx
    0x5B,                       # pop  rbx
    0xC3,                       # ret
])
_CPUID_CDECL = "void(*)(uint32_t, uint32_t, uint32_t *)"

# uint64_t xgetbv0(void): XCR0, the OS-enabled register-state mask. #UD unless OSXSAVE is set.
_XGETBV_CODE = bytes([
    0x31, 0xC9,                 # xor  ecx, ecx       ; XCR0
    0x0F, 0x01, 0xD0,           # xgetbv              ; edx:eax = XCR[ecx]
    0x48, 0xC1, 0xE2, 0x20,     # shl  rdx, 32
    0x48, 0x09, 0xD0,           # or   rax, rdx
    0xC3,                       # ret
])
_XGETBV_CDECL = "uint64_t(*)(void)"

# (name, leaf, subleaf, register, bit): the bits of SDM vol. 2A, CPUID, table 3-8 / 3-10.
# Names follow /proc/cpuinfo.
_FEATURE_BITS = (
    ("sse4_2",       1, 0, "ecx", 20),
    ("fma",          1, 0, "ecx", 12),
    ("avx",          1, 0, "ecx", 28),
    ("f16c",         1, 0, "ecx", 29),
    ("avx2",         7, 0, "ebx", 5),
    ("bmi2",         7, 0, "ebx", 8),
    ("avx512f",      7, 0, "ebx", 16),
    ("avx512dq",     7, 0, "ebx", 17),
    ("avx512bw",     7, 0, "ebx", 30),
    ("avx512vl",     7, 0, "ebx", 31),
    ("avx512_vnni",  7, 0, "ecx", 11),
    ("avx512_fp16",  7, 0, "edx", 23),
    ("amx_bf16",     7, 0, "edx", 22),
    ("amx_tile",     7, 0, "edx", 24),
    ("amx_int8",     7, 0, "edx", 25),
    ("avx_vnni",     7, 1, "eax", 4),
    ("avx512_bf16",  7, 1, "eax", 5),
)
# AArch64 Linux: (name, bit) of AT_HWCAP and AT_HWCAP2 (arch/arm64/include/uapi/asm/hwcap.h);
# names as /proc/cpuinfo prints them. The crypto bits are left out: "aes" is also an x86 flag,
# and KNOWN_FEATURES names one feature per name.
AT_HWCAP, AT_HWCAP2 = 16, 26
_HWCAP_BITS = (
    ("fp", 0), ("asimd", 1), ("crc32", 7), ("atomics", 8), ("fphp", 9), ("asimdhp", 10), ("asimdrdm", 12),
    ("fcma", 14), ("asimddp", 20),
    ("sve", 22),
)
_HWCAP2_BITS = (("i8mm", 13), ("bf16", 14))
# macOS arm64: sysctl hw.optional.arm.<name> -> the Linux names it stands for
_DARWIN_SYSCTLS = (
    ("FEAT_FP16", ("fphp", "asimdhp")), ("FEAT_DotProd", ("asimddp",)), ("FEAT_I8MM", ("i8mm",)),
    ("FEAT_BF16", ("bf16",)),
)
KNOWN_FEATURES = frozenset(f[0] for f in _FEATURE_BITS) | frozenset(
    f[0] for f in _HWCAP_BITS + _HWCAP2_BITS)

# Which OS-saved state each feature needs (XCR0 bits); AMX also needs XTILECFG/XTILEDATA (bits 17, 18).
_AVX_FAMILY = {"avx", "avx2", "fma", "f16c", "avx_vnni"}
_XCR0_AVX, _XCR0_AVX512, _XCR0_AMX = 0x6, 0xE0, 0x60000
_REG_INDEX = {"eax": 0, "ebx": 1, "ecx": 2, "edx": 3}


def is_x86_64() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def is_aarch64() -> bool:
    return platform.machine().lower() in ("aarch64", "arm64")


def hwcap_features(hwcap: int, hwcap2: int = 0) -> frozenset[str]:
    """Feature names of AArch64 Linux's AT_HWCAP / AT_HWCAP2 bit masks."""
    return frozenset([name for name, bit in _HWCAP_BITS if (hwcap >> bit) & 1]
                     + [name for name, bit in _HWCAP2_BITS if (hwcap2 >> bit) & 1])


def darwin_arm64_features(lib, ffi) -> frozenset[str]:
    """Feature names on macOS arm64 from sysctlbyname (every Apple core has fp and asimd)."""
    found = {"fp", "asimd"}
    for sysctl, names in _DARWIN_SYSCTLS:
        value = ffi.new("int *")
        size = ffi.new("size_t *", ffi.sizeof("int"))
        if lib.sysctlbyname(f"hw.optional.arm.{sysctl}".encode(), value, size, ffi.NULL, 0) == 0 and value[0]:
            found.update(names)
    return frozenset(found)


def _aarch64_features() -> frozenset[str]:
    from .execmem import _lib, ffi
    import sys
    if sys.platform == "darwin":
        return darwin_arm64_features(_lib(), ffi)
    lib = _lib()
    return hwcap_features(lib.getauxval(AT_HWCAP), lib.getauxval(AT_HWCAP2))


@functools.lru_cache(maxsize=None)
def _jit():
    # imported here so that importing this module never maps memory
    from .execmem import ExecutableCode, ffi
    return ffi, ExecutableCode(_CPUID_CODE, _CPUID_CDECL), ExecutableCode(_XGETBV_CODE, _XGETBV_CDECL)


def cpuid(leaf: int, subleaf: int = 0) -> tuple[int, int, int, int]:
    """(eax, ebx, ecx, edx) of CPUID `leaf`.`subleaf`, run as JIT'd code. x86-64 only."""
    if not is_x86_64():
        raise OSError("cpuid exists only on x86-64")
    ffi, fn, _ = _jit()
    out = ffi.new("uint32_t[4]")
    fn(leaf & 0xFFFFFFFF, subleaf & 0xFFFFFFFF, out)
    return tuple(out)


def xgetbv() -> int:
    """XCR0. Only call it when CPUID.1:ECX.OSXSAVE (bit 27) is set, else the CPU faults."""
    _, _, fn = _jit()
    return fn()


@functools.lru_cache(maxsize=None)
def cpu_features() -> frozenset[str]:
    """Instruction-set features this CPU has and this OS enables (x86-64: CPUID + XGETBV;
    AArch64: HWCAP); empty on other machines."""
    if is_aarch64():
        return _aarch64_features()
    if not is_x86_64():
        return frozenset()
    max_leaf = cpuid(0)[0]
    zero = (0, 0, 0, 0)
    regs = {(1, 0): cpuid(1) if max_leaf >= 1 else zero,
            (7, 0): cpuid(7, 0) if max_leaf >= 7 else zero}
    # EAX of leaf 7.0 is the highest valid subleaf of leaf 7
    regs[7, 1] = cpuid(7, 1) if regs[7, 0][0] >= 1 else zero
    found = {name for name, leaf, sub, reg, bit in _FEATURE_BITS
             if (regs[leaf, sub][_REG_INDEX[reg]] >> bit) & 1}
    osxsave = (regs[1, 0][2] >> 27) & 1
    xcr0 = xgetbv() if osxsave else 0
    if xcr0 & _XCR0_AVX != _XCR0_AVX:
        found -= _AVX_FAMILY
    avx512_ok = xcr0 & (_XCR0_AVX | _XCR0_AVX512) == (_XCR0_AVX | _XCR0_AVX512)
    if not avx512_ok:
        found = {f for f in found if not f.startswith("avx512")}
    if xcr0 & _XCR0_AMX != _XCR0_AMX:
        found = {f for f in found if not f.startswith("amx")}
    return frozenset(found)


# Linux's arch_prctl (syscall 158 on x86-64): a process must ask for the AMX tile data state
# (XFEATURE_XTILEDATA, 18) before its first tile instruction, which otherwise faults (SIGILL)
_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18


@functools.lru_cache(maxsize=None)
def amx_permission() -> tuple[bool, str]:
    """(granted, why not): asks Linux once per process for the AMX tile state. Code with tile
    instructions is only chosen when granted; the reason says what stopped it otherwise."""
    if not is_x86_64() or not {"amx_tile", "amx_int8"} <= cpu_features():
        return False, "this CPU (or its OS) has no AMX tiles (amx_tile, amx_int8)"
    if platform.system() != "Linux":
        return False, f"AMX tile state is requested with Linux's arch_prctl; this is {platform.system()}"
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) != 0:
        err = ctypes.get_errno()
        return False, f"Linux refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: {os.strerror(err)})"
    return True, ""


def proc_cpuinfo_features(path: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The `flags` (x86) or `Features` (ARM) of the first processor in /proc/cpuinfo; None if absent."""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        return None
    return None


@functools.lru_cache(maxsize=None)
def cpu_brand() -> str:
    """The CPU's brand string (CPUID 0x80000002-0x80000004), e.g. 'AMD EPYC 7B13 64-Core Processor'."""
    if is_x86_64() and cpuid(0x80000000)[0] >= 0x80000004:
        raw = b"".join(struct.pack("<4I", *cpuid(leaf)) for leaf in (0x80000002, 0x80000003, 0x80000004))
        brand = raw.split(b"\0", 1)[0].decode("ascii", "replace").strip()
        if brand:
            return " ".join(brand.split())
    if is_aarch64():
        name = midr_name(_read_midr())
        if name:
            return name
    return platform.processor() or platform.machine() or "unknown CPU"


# MIDR_EL1 implementer and part numbers of the cores loopstack has presets or users for
_MIDR_IMPLEMENTERS = {0x41: "Arm", 0x61: "Apple", 0x51: "Qualcomm", 0x4E: "NVIDIA", 0xC0: "Ampere"}
_MIDR_PARTS = {
    (0x41, 0xD03): "Cortex-A53", (0x41, 0xD07): "Cortex-A57", (0x41, 0xD08): "Cortex-A72",
    (0x41, 0xD09): "Cortex-A73", (0x41, 0xD0B): "Cortex-A76", (0x41, 0xD0C): "Neoverse-N1",
    (0x41, 0xD40): "Neoverse-V1", (0x41, 0xD49): "Neoverse-N2", (0x41, 0xD4F): "Neoverse-V2",
    (0x4E, 0x003): "Denver 2", (0x61, 0x022): "M1 Icestorm", (0x61, 0x023): "M1 Firestorm",
}


def midr_name(midr: int | None) -> str | None:
    """'Arm Cortex-A57 r1p3' from a MIDR_EL1 value (implementer 31:24, variant 23:20, part 15:4,
    revision 3:0); None without one."""
    if not midr:
        return None
    implementer, part = (midr >> 24) & 0xFF, (midr >> 4) & 0xFFF
    vendor = _MIDR_IMPLEMENTERS.get(implementer, f"implementer {implementer:#x}")
    core = _MIDR_PARTS.get((implementer, part), f"part {part:#x}")
    return f"{vendor} {core} r{(midr >> 20) & 0xF}p{midr & 0xF}"


def _read_midr(path: str = "/sys/devices/system/cpu/cpu0/regs/identification/midr_el1") -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip(), 16)
    except (OSError, ValueError):
        return None


_DEFAULT_CACHES = {"l1d": 32 * 1024, "l2": 512 * 1024, "l3": 8 * 1024 * 1024}


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def _sysfs_data_caches(root: str, field: str, parse=int):
    """(level, parse(its `field` file)) of each data or unified cache sysfs describes under `root`."""
    for d in sorted(glob.glob(os.path.join(root, "index*"))):
        try:
            with open(os.path.join(d, "level")) as f:
                level = int(f.read())
            with open(os.path.join(d, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(d, field)) as f:
                value = parse(f.read())
        except (OSError, ValueError):
            continue
        if kind != "Instruction":
            yield level, value


def _caches_from_sysfs(root: str) -> dict[str, int]:
    found = {}
    for level, size in _sysfs_data_caches(root, "size", _parse_size):
        key = "l1d" if level == 1 else f"l{level}"
        if key in _DEFAULT_CACHES:
            found[key] = size
    return found


@functools.lru_cache(maxsize=None)
def l1d_ways(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """The L1 data cache's associativity: sysfs on Linux, else CPUID (leaf 4 / 0x8000001D), else 8."""
    for level, ways in _sysfs_data_caches(root, "ways_of_associativity"):
        if level == 1 and ways > 0:
            return ways
    if is_x86_64():
        leaf = _cache_leaf()
        for sub in range(16) if leaf else ():
            eax, ebx, _, _ = cpuid(leaf, sub)
            if eax & 0x1F == 0:
                break
            if eax & 0x1F != 2 and (eax >> 5) & 0x7 == 1:
                return (ebx >> 22) + 1
    return 8


def _cache_leaf() -> int:
    """CPUID's deterministic cache parameters leaf: 4 (Intel) or 0x8000001D (AMD), 0 if none."""
    if cpu_vendor() == "AuthenticAMD":
        return 0x8000001D if cpuid(0x80000000)[0] >= 0x8000001D else 0
    return 4 if cpuid(0)[0] >= 4 else 0


@functools.lru_cache(maxsize=None)
def cpu_vendor() -> str:
    """The x86 vendor string of CPUID leaf 0 ('AuthenticAMD', 'GenuineIntel'); '' elsewhere."""
    if not is_x86_64():
        return ""
    return struct.pack("<3I", *(cpuid(0)[i] for i in (1, 3, 2))).decode("ascii", "replace")


def _caches_from_cpuid() -> dict[str, int]:
    """Deterministic cache parameters: leaf 4 (Intel) or 0x8000001D (AMD), same layout."""
    leaf = _cache_leaf()
    if not leaf:
        return {}
    found = {}
    for sub in range(16):
        eax, ebx, ecx, _ = cpuid(leaf, sub)
        kind, level = eax & 0x1F, (eax >> 5) & 0x7
        if kind == 0:           # no more caches
            break
        if kind == 2:           # instruction cache
            continue
        ways, parts, line = (ebx >> 22) + 1, ((ebx >> 12) & 0x3FF) + 1, (ebx & 0xFFF) + 1
        key = "l1d" if level == 1 else f"l{level}"
        if key in _DEFAULT_CACHES:
            found[key] = ways * parts * line * (ecx + 1)
    return found


def cache_sizes() -> dict[str, int]:
    """{'l1d', 'l2', 'l3'} in bytes: sysfs on Linux, else CPUID, else 32 KiB / 512 KiB / 8 MiB."""
    return dict(_cache_sizes())


@functools.lru_cache(maxsize=None)
def _cache_sizes() -> tuple[tuple[str, int], ...]:
    sizes = _caches_from_sysfs("/sys/devices/system/cpu/cpu0/cache")
    if len(sizes) < 3 and is_x86_64():
        sizes = {**_caches_from_cpuid(), **sizes}
    return tuple((key, sizes.get(key, default)) for key, default in _DEFAULT_CACHES.items())
