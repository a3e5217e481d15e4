"""AArch64 platform pieces that run on any host: HWCAP feature names, the macOS JIT call sequence
(with a fake libc), the JIT'd instruction-cache flush (under unicorn), and the neon targets."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loopstack.errors import UnsupportedError  # noqa: E402
from loopstack.isa import cpu, execmem  # noqa: E402
from loopstack.isa import target as target_mod  # noqa: E402
from loopstack.isa.target import CPU_PRESETS, TARGETS, get_target, host_target  # noqa: E402

ffi = execmem.ffi


# -- feature detection --------------------------------------------------------------------------

@pytest.mark.aarch64
def test_hwcap_bits_name_the_features():
    assert cpu.hwcap_features(0) == frozenset()
    assert cpu.hwcap_features(1 << 10) == {"asimdhp"}
    assert cpu.hwcap_features(1 << 20) == {"asimddp"}
    assert cpu.hwcap_features(1 << 9) == {"fphp"}
    assert cpu.hwcap_features(0b11 | 1 << 9 | 1 << 10 | 1 << 20, 1 << 13) == {
        "fp", "asimd", "fphp", "asimdhp", "asimddp", "i8mm"}
    assert {"asimd", "asimdhp", "asimddp", "fphp"} <= cpu.KNOWN_FEATURES


class _FakeSysctl:
    def __init__(self, values):
        self.values, self.asked = values, []

    def sysctlbyname(self, name, old, size, new, newlen):
        key = name.decode()
        self.asked.append(key)
        if key not in self.values:
            return -1                   # ENOENT: an older macOS without the key
        old[0] = self.values[key]
        return 0


@pytest.mark.aarch64
def test_darwin_features_from_sysctl():
    fake = _FakeSysctl({"hw.optional.arm.FEAT_FP16": 1, "hw.optional.arm.FEAT_DotProd": 1,
                        "hw.optional.arm.FEAT_I8MM": 0})
    found = cpu.darwin_arm64_features(fake, ffi)
    assert found == {"fp", "asimd", "fphp", "asimdhp", "asimddp"}
    assert "hw.optional.arm.FEAT_BF16" in fake.asked


# -- executable memory: the macOS arm64 call sequence -------------------------------------------

class _FakeDarwinLibc:
    """Records the calls, and what the page held when the write protection was toggled."""

    def __init__(self, fail_write_protect=False):
        self.calls, self.buffers = [], []
        self.fail = fail_write_protect

    def mmap(self, addr, length, prot, flags, fd, offset):
        buf = ffi.new("char[]", length)
        self.buffers.append(buf)
        self.calls.append(("mmap", length, prot, flags))
        return ffi.cast("void *", buf)

    def pthread_jit_write_protect_np(self, enabled):
        head = bytes(ffi.buffer(self.buffers[-1], 4))
        self.calls.append(("pthread_jit_write_protect_np", enabled, head))

    def sys_icache_invalidate(self, start, length):
        self.calls.append(("sys_icache_invalidate", int(ffi.cast("uintptr_t", start)), length))

    def munmap(self, addr, length):
        self.calls.append(("munmap", length))
        return 0

    def mprotect(self, *args):
        raise AssertionError("macOS JIT pages are never mprotect-ed")


@pytest.mark.aarch64
def test_darwin_jit_call_sequence():
    lib = _FakeDarwinLibc()
    code = bytes.fromhex("c0035fd6")                           # ret
    address, size = execmem.map_darwin_jit(lib, code)
    names = [c[0] for c in lib.calls]
    assert names == ["mmap", "pthread_jit_write_protect_np", "pthread_jit_write_protect_np",
                     "sys_icache_invalidate"]
    _, length, prot, flags = lib.calls[0]
    assert prot == execmem.PROT_READ | execmem.PROT_WRITE | execmem.PROT_EXEC
    assert flags & execmem.MAP_JIT and flags & execmem.MAP_ANONYMOUS and length == size
    # writable (0) before the copy, executable (1) after it; then the written range is invalidated
    assert lib.calls[1][1:] == (0, b"\0\0\0\0") and lib.calls[2][1:] == (1, code)
    assert lib.calls[3][1:] == (address, len(code))


@pytest.mark.aarch64
def test_darwin_jit_unmaps_and_reprotects_when_writing_fails(monkeypatch):
    lib = _FakeDarwinLibc()

    def broken_fill(ptr, size, image):
        raise MemoryError("copy failed")
    monkeypatch.setattr(execmem, "_fill", broken_fill)
    with pytest.raises(MemoryError):
        execmem.map_darwin_jit(lib, b"\0" * 8)
    assert [c[0] for c in lib.calls] == ["mmap", "pthread_jit_write_protect_np",
                                         "pthread_jit_write_protect_np", "munmap"]
    assert lib.calls[2][1] == 1                                 # executable again, not left writable


@pytest.mark.aarch64
def test_padding_traps_on_each_architecture(monkeypatch):
    monkeypatch.setattr(execmem, "_IS_ARM64", True)
    assert execmem._trap_fill(10) == bytes.fromhex("000020d4000020d40000")
    monkeypatch.setattr(execmem, "_IS_ARM64", False)
    assert execmem._trap_fill(3) == b"\xcc\xcc\xcc"


def test_icache_flush_stub_runs_over_a_range():
    unicorn_oracle = pytest.importorskip("aarch64_unicorn")
    code = execmem.icache_flush_code()
    begin = unicorn_oracle.CODE_BASE
    unicorn_oracle.run_a64(code, [begin, begin + len(code)])
    from capstone import CS_ARCH_ARM64, CS_MODE_ARM, Cs
    text = [f"{i.mnemonic} {i.op_str}".strip() for i in Cs(CS_ARCH_ARM64, CS_MODE_ARM).disasm(code, 0)]
    assert "mrs x3, ctr_el0" in text and "dc cvau, x7" in text and "ic ivau, x7" in text
    assert text[-3:] == ["dsb ish", "isb", "ret"] and len(text) * 4 == len(code)


# -- targets ------------------------------------------------------------------------------------

def _fake_host(monkeypatch, arch, features):
    monkeypatch.setattr(target_mod, "host_arch", lambda: arch)
    monkeypatch.setattr(cpu, "cpu_features", lambda: frozenset(features))
    target_mod._host_target_for.cache_clear()


@pytest.mark.aarch64
def test_neon_targets_fields():
    neon, half = TARGETS["neon"], TARGETS["neon_fp16"]
    assert (neon.arch, neon.vector_bits, neon.vector_registers, neon.has_masks) == ("aarch64", 128, 32, False)
    assert neon.lanes() == 4 and half.lanes() == 8 and half.lanes("float32") == 4
    assert half.compute_dtype == "float16" and half.required == {"asimd", "asimdhp"}
    assert neon.block_registers == 28


@pytest.mark.aarch64
def test_cpu_presets():
    m1 = get_target("neon", cpu="apple-m1", check=False)
    a57 = get_target("neon", cpu="cortex-a57", check=False)
    assert (m1.cpu, m1.fma_units, m1.fma_latency, m1.l1d, m1.l2, m1.clock_ghz) == (
        "apple-m1", 4, 4, 128 << 10, 12 << 20, 3.2)
    assert (a57.cpu, a57.fma_units, a57.l1d, a57.l2, a57.clock_ghz) == ("cortex-a57", 1, 32 << 10, 2 << 20, 1.9)
    assert m1.accumulators == 16 and a57.accumulators == 4
    assert get_target("neon_fp16", cpu="apple-m1", check=False).compute_dtype == "float16"
    with pytest.raises(UnsupportedError, match=r"cortex-a57 lacks asimdhp \(needed by target neon_fp16\)"):
        get_target("neon_fp16", cpu="cortex-a57", check=False)
    with pytest.raises(UnsupportedError, match=r"unknown cpu 'm1'; known: apple-m1, cortex-a57"):
        get_target("neon", cpu="m1")
    with pytest.raises(UnsupportedError, match=r"apple-m1 is an aarch64 core; target avx2 is x86_64"):
        get_target("avx2", cpu="apple-m1")
    assert set(CPU_PRESETS) == {"apple-m1", "cortex-a57"}
    assert ("cpu model", "apple-m1 at 3.2 GHz") in m1.describe()


def test_neon_on_an_x86_host_is_cross_compilation(monkeypatch):
    _fake_host(monkeypatch, "x86_64", {"avx", "avx2", "fma", "f16c"})
    t = get_target("neon_fp16")                        # no feature check: another architecture
    assert t.name == "neon_fp16" and t.l1d == TARGETS["neon_fp16"].l1d   # not this host's caches
    assert get_target("neon", cpu="apple-m1").cpu == "apple-m1"
    assert host_target().name == "avx2"
    with pytest.raises(UnsupportedError, match="cannot measure the peak of target neon"):
        target_mod.measure_peak("neon")


def test_host_target_on_aarch64(monkeypatch):
    _fake_host(monkeypatch, "aarch64", {"fp", "asimd", "fphp", "asimdhp", "asimddp"})
    assert host_target().name == "neon"                 # float32 programs compute in fp32
    assert get_target("neon_fp16").name == "neon_fp16"
    _fake_host(monkeypatch, "aarch64", {"fp", "asimd"})
    assert host_target().name == "neon"
    with pytest.raises(UnsupportedError, match=r"lacks asimdhp \(needed by target neon_fp16\)"):
        get_target("neon_fp16")
    assert get_target("avx512").name == "avx512"        # x86 code from an aarch64 host: cross-compiled
    _fake_host(monkeypatch, "aarch64", set())
    with pytest.raises(UnsupportedError, match=r"lacks asimd \(needed by target neon\)"):
        host_target()
    _fake_host(monkeypatch, "x86_64", {"avx", "avx2", "fma", "f16c"})   # the M1 figures when cross-compiling
    assert (get_target("neon").l1d, get_target("neon").fma_units) == (128 << 10, 4)
    target_mod._host_target_for.cache_clear()


def test_neon_probe_runs_under_unicorn():
    oracle = pytest.importorskip("aarch64_unicorn")
    for fp16 in (False, True):
        oracle.run_a64(target_mod.neon_fma_probe_code(fp16), [3])    # keeps d8-d15 (the oracle checks)
