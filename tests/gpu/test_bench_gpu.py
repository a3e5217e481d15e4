"""bench/gpu.py where no GPU is: a clear message and a failing status, or compile times only."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopstack.isa.ptx import driver

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gpu.py"


@pytest.mark.skipif(driver.available(), reason="this host has a CUDA driver and GPU")
def test_without_a_gpu_the_benchmark_says_so():
    r = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(BENCH.parents[1])})
    assert r.returncode != 0
    assert "no CUDA driver and GPU here" in r.stderr and "--compile-only" in r.stderr


def test_the_records_are_numbers_beside_a_name(tmp_path, monkeypatch):
    sys.path.insert(0, str(BENCH.parent))
    import gpu as bench
    monkeypatch.setattr(bench, "workloads", lambda: bench.workloads_small())
    out = tmp_path / "gpu.json"
    monkeypatch.setattr(sys, "argv", ["gpu.py", "--compile-only", "--json", str(out)])
    bench.main()
    records = json.loads(out.read_text())
    assert [r["name"] for r in records] == ["GEMM-256-float16", "CONV-small"]
    for r in records:
        assert all(isinstance(v, (int, float)) for k, v in r.items() if k != "name")
        assert r["compile_ms"] > 0 and r["predicted_tflops"] > 0
        if "ptxas_ms" in r:         # ptxas on the PATH: its registers, and the CTAs they leave an SM
            assert 0 < r["registers"] <= 255 and r["spill_bytes"] == 0 and r["ctas_per_sm"] >= 1


def test_only_names_the_workloads_and_a_wrong_name_is_refused(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, str(BENCH.parent))
    import gpu as bench
    monkeypatch.setattr(bench, "workloads", lambda: bench.workloads_small())
    monkeypatch.setattr(bench, "NAMES", [w[0] for w in bench.workloads_small()])
    out = tmp_path / "gpu.json"
    monkeypatch.setattr(sys, "argv", ["gpu.py", "--compile-only", "--only", "CONV-small", "--json", str(out)])
    bench.main()
    assert [r["name"] for r in json.loads(out.read_text())] == ["CONV-small"]
    monkeypatch.setattr(sys, "argv", ["gpu.py", "--compile-only", "--only", "CONV-9"])
    with pytest.raises(SystemExit):
        bench.main()
    assert "--only: no workload CONV-9 (there are GEMM-256-float16, CONV-small)" in capsys.readouterr().err
