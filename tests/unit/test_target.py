"""CPU feature detection, Target selection, the FMA peak probe and `loopstack info`."""
import json
import math
import platform

import pytest

from loopstack.cli import main
from loopstack.errors import UnsupportedError
from loopstack.isa import cpu, target
from loopstack.isa.target import TARGETS, Target, get_target, host_target, peak_gflops

X86 = platform.machine().lower() in ("x86_64", "amd64")
needs_x86 = pytest.mark.skipif(not X86, reason="runs x86-64 machine code")
HOST = cpu.cpu_features() if X86 else frozenset()
RUNS_AVX2 = TARGETS["avx2"].required <= HOST

AVX2_CPU = frozenset({"avx", "avx2", "fma", "f16c"})
AVX512_CPU = AVX2_CPU | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}


def fake_cpu(monkeypatch, features):
    monkeypatch.setattr(cpu, "cpu_features", lambda: frozenset(features))


# -- feature detection --------------------------------------------------------------------------

@needs_x86
@pytest.mark.skipif(cpu.proc_cpuinfo_features() is None, reason="no /proc/cpuinfo")
def test_jit_cpuid_agrees_with_proc_cpuinfo():
    jit, proc = cpu.cpu_features(), cpu.proc_cpuinfo_features()
    core = {"avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl"}
    assert jit & core == proc & core
    # the kernel may lack names for newer features, and may hide some; it never adds any
    assert proc & cpu.KNOWN_FEATURES <= jit


@needs_x86
def test_cpuid_basics():
    max_leaf, *vendor = cpu.cpuid(0)
    assert max_leaf >= 1
    assert isinstance(cpu.cpu_brand(), str) and cpu.cpu_brand()
    if cpu.cpuid(1)[2] >> 27 & 1:       # OSXSAVE: XCR0 always has x87 state (bit 0)
        assert cpu.xgetbv() & 1


def test_the_host_target_knows_whose_prefetchers_stream_tiles():
    """CPUID's vendor string, as /proc/cpuinfo's vendor_id names it; an AMD core's host target
    lets the default schedules rely on its prefetchers (Target.streams_prefetched), another's
    does not, and the host-independent descriptions never do."""
    if platform.machine() not in ("x86_64", "AMD64"):
        assert cpu.cpu_vendor() == ""
        return
    with open("/proc/cpuinfo") as f:
        vendor = next(line.split(":", 1)[1].strip() for line in f if line.startswith("vendor_id"))
    assert cpu.cpu_vendor() == vendor
    assert host_target().streams_prefetched == (vendor == "AuthenticAMD")
    assert not any(t.streams_prefetched for t in TARGETS.values())


def test_l1d_ways_come_from_sysfs_or_cpuid(tmp_path):
    """The L1 data cache's associativity, as the kernel reports it (an instruction cache of the
    same level is skipped), else CPUID's, on the host target too."""
    for i, (level, kind, ways) in enumerate([(1, "Instruction", 4), (1, "Data", 12), (2, "Unified", 16)]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "ways_of_associativity").write_text(f"{ways}\n")
    assert cpu.l1d_ways(str(tmp_path)) == 12
    assert host_target().l1d_ways == cpu.l1d_ways() >= 2
    if platform.machine() in ("x86_64", "AMD64"):
        assert cpu.l1d_ways(str(tmp_path / "none")) == cpu.l1d_ways()      # CPUID agrees with sysfs


def test_non_x86_detects_nothing_and_runs_no_code(monkeypatch):
    monkeypatch.setattr(cpu, "is_x86_64", lambda: False)
    monkeypatch.setattr(cpu, "cpuid", lambda *a: pytest.fail("ran CPUID on a non-x86 machine"))
    assert cpu.cpu_features.__wrapped__() == frozenset()


def test_cache_sizes_are_sane():
    caches = cpu.cache_sizes()
    assert set(caches) == {"l1d", "l2", "l3"}
    assert 4096 <= caches["l1d"] <= caches["l2"] <= caches["l3"]
    caches["l1d"] = 0                   # a copy: the cached answer is not mutable
    assert cpu.cache_sizes()["l1d"] > 0


def test_cache_sizes_parse_sysfs(tmp_path):
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"),
                                             (2, "Unified", "2048K"), (3, "Unified", "105M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert cpu._caches_from_sysfs(str(tmp_path)) == {"l1d": 48 << 10, "l2": 2 << 20, "l3": 105 << 20}


# -- targets ------------------------------------------------------------------------------------

def test_host_target_picks_the_widest(monkeypatch):
    fake_cpu(monkeypatch, AVX512_CPU)
    t = host_target()
    assert (t.name, t.vector_bits, t.vector_registers, t.has_masks) == ("avx512", 512, 32, True)
    assert get_target("avx2").name == "avx2"
    fake_cpu(monkeypatch, AVX2_CPU)
    t = host_target()
    assert (t.name, t.vector_bits, t.vector_registers, t.has_masks) == ("avx2", 256, 16, False)
    assert get_target(None) == t and get_target(t) is t


def test_missing_features_raise_before_any_code_runs(monkeypatch):
    fake_cpu(monkeypatch, AVX2_CPU)
    with pytest.raises(UnsupportedError, match=r"this CPU lacks avx512bw, avx512dq, avx512f, avx512vl "
                                               r"\(needed by target avx512\)"):
        get_target("avx512")
    fake_cpu(monkeypatch, {"avx", "avx2", "f16c"})
    with pytest.raises(UnsupportedError, match=r"lacks fma \(needed by target avx2\)"):
        host_target()
    with pytest.raises(UnsupportedError, match=r"unknown target 'sse2'; known: avx2, avx512"):
        get_target("sse2")
    assert get_target("avx512", check=False).name == "avx512"   # for code that will not run here


@pytest.mark.skipif(not RUNS_AVX2 or "avx512f" in HOST, reason="needs an AVX2 CPU without AVX-512")
def test_avx512_on_this_cpu_names_avx512f():
    with pytest.raises(UnsupportedError, match="avx512f"):
        get_target("avx512")


def test_require(monkeypatch):
    fake_cpu(monkeypatch, AVX512_CPU)
    t = get_target("avx512")
    assert t.has("avx512_vnni") and not t.has("avx512_fp16")
    t.require("avx512f", "avx512_vnni")
    with pytest.raises(UnsupportedError, match=r"^this CPU lacks avx512_fp16, avx512_bf16 \(needed by fp16 matmul\)$"):
        t.require("avx512_fp16", "avx512f", "avx512_bf16", needed_by="fp16 matmul")
    with pytest.raises(UnsupportedError, match=r"needed by target avx512"):
        t.require("amx_tile")
    with pytest.raises(UnsupportedError, match="unknown CPU feature 'avx512vnni'"):
        t.has("avx512vnni")


def test_lanes_and_fields():
    avx2, avx512 = get_target("avx2", check=False), get_target("avx512", check=False)
    assert [avx2.lanes(d) for d in ("float32", "float16", "int8", "int32")] == [8, 16, 32, 8]
    assert avx2.lanes() == 8 and avx512.lanes() == 16 and avx512.lanes("int8") == 64
    assert avx2.fma_units == 2 and avx2.fma_latency == 4 and avx2.accumulators == 8
    assert avx2.required == {"avx", "avx2", "fma", "f16c"}
    assert avx512.required == {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
    assert (avx2.l1d, avx2.l2, avx2.l3) == tuple(cpu.cache_sizes().values())
    assert avx2.unroll_limit > 0
    with pytest.raises(AttributeError):
        avx2.vector_bits = 512            # frozen


def test_identity_is_stable_and_names_the_target(monkeypatch):
    fake_cpu(monkeypatch, AVX512_CPU)
    a, b = get_target("avx512"), get_target("avx512")
    assert a.identity == b.identity and a.identity.startswith("avx512/")
    assert get_target("avx2").identity != a.identity
    before = a.identity
    fake_cpu(monkeypatch, AVX512_CPU | {"avx512_fp16"})
    assert get_target("avx512").identity != before      # another CPU model: other tuning records


# -- the FMA peak probe -------------------------------------------------------------------------

@pytest.mark.parametrize("bits, reg", [(256, "ymm"), (512, "zmm")])
def test_probe_decodes_to_twelve_fma_chains(bits, reg):
    iced = pytest.importorskip("iced_x86")
    for code in {target.fma_probe_code(bits), target._fma_probe_bytes(bits)}:
        fmt = iced.Formatter(iced.FormatterSyntax.INTEL)
        ins = list(iced.Decoder(64, code))
        assert sum(i.len for i in ins) == len(code)
        text = [fmt.format(i) for i in ins]
        fmas = [t for t in text if t.startswith("vfmadd231ps")]
        assert fmas == [f"vfmadd231ps {reg}{i},{reg}12,{reg}13" for i in range(12)]
        assert text[0] == "vzeroall" and text[-2:] == ["vzeroupper", "ret"]


@pytest.mark.skipif(not RUNS_AVX2, reason="CPU lacks avx2+fma")
def test_peak_probe_avx2():
    target._PEAK_CACHE.clear()
    g = peak_gflops("avx2", seconds=0.01)
    assert math.isfinite(g) and g > 0
    assert peak_gflops("avx2") == g        # cached per target


@pytest.mark.skipif("avx512f" not in HOST or not TARGETS["avx512"].required <= HOST,
                    reason="CPU lacks avx512f")
def test_peak_probe_avx512():
    g = peak_gflops("avx512", seconds=0.01)
    assert math.isfinite(g) and g > 0


# -- loopstack info -----------------------------------------------------------------------------

@pytest.mark.skipif(not RUNS_AVX2, reason="CPU lacks avx2+fma")
def test_info(capsys, tmp_path):
    out_json = tmp_path / "info.json"
    assert main(["info", "--seconds", "0.01", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    t = host_target()
    assert f"target         {t.name}" in out and "GFLOPS" in out and cpu.cpu_brand() in out
    assert "gpu            sm_80, sm_90 compile here" in out
    records = json.loads(out_json.read_text())
    assert records[0]["name"] == f"peak_fp32_fma_{t.name}" and records[0]["peak_gflops"] > 0


def test_info_on_a_target_of_another_architecture_describes_it_without_a_peak(capsys):
    other = "avx2" if cpu.is_aarch64() else "neon"
    assert main(["info", "--target", other]) == 0
    out = capsys.readouterr().out
    assert f"target         {other}" in out and "peak           not measured" in out


def test_info_error_is_one_line(capsys, monkeypatch):
    fake_cpu(monkeypatch, AVX2_CPU)
    assert main(["info", "--target", "avx512", "--no-peak"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopstack: error: this CPU lacks avx512bw") and err.count("\n") == 1
    assert "Traceback" not in err


def test_cli_usage_errors_return_2(capsys):
    assert main([]) == 2
    assert main(["no-such-command"]) == 2
    assert main(["--help"]) == 0
    assert "info" in capsys.readouterr().out


def test_target_is_a_dataclass_of_plain_fields():
    fields = {f for f in Target.__dataclass_fields__}
    assert {"name", "arch", "vector_bits", "vector_registers", "has_masks", "required", "fma_units",
            "fma_latency", "l1d", "l2", "l3", "unroll_limit"} <= fields
