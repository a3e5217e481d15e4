"""`loopstack bench` on an AArch64 host: the paper's workloads on `neon` and on `neon_fp16`, and,
under qemu, the word that the timings are emulated."""
import argparse

import pytest

from loopstack.commands import bench
from loopstack.isa import cpu

pytestmark = [
    pytest.mark.aarch64,
    pytest.mark.skipif(not cpu.is_aarch64(), reason="needs an aarch64 host (on x86 this file runs under "
                       "qemu-aarch64: tests/aarch64/test_qemu_stage.py)"),
]


def test_the_bench_runs_the_suite_on_neon_and_neon_fp16_and_says_when_it_is_emulated(capsys, tmp_path):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["-w", "MM-64", "--runs", "1", "--rounds", "1", "--compare", "", "--no-progress",
                              "--db", "off", "--json", str(tmp_path / "r.json")])
    assert bench.run(args) == 0
    out = capsys.readouterr().out
    assert "neon_fp16 (fp16 storage and arithmetic" in out
    assert ("EMULATED" in out) == bench.emulated()
    import json
    records = json.loads((tmp_path / "r.json").read_text())
    assert [r["target"] for r in records] == ["neon", "neon_fp16"]
