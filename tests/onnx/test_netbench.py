"""The nets bench's measuring and reporting, on a small model (no timings are checked)."""
import numpy as np
import onnx

from loopstack.onnx import netbench
from loopstack.onnx.models import mlp


def test_interleaved_times_each_engine_and_loopstack_on_more_threads(tmp_path):
    path = str(tmp_path / "mlp.onnx")
    onnx.save(mlp(), path)
    x = np.random.default_rng(0).standard_normal((1, 784)).astype(np.float32)
    res = netbench.interleaved(path, x, rounds=2, threads=2)
    assert set(res) == {"loopstack", "onnxruntime", "loopstack_threads"}
    assert all(0 < best <= med for med, best in res.values())
    assert set(netbench.interleaved(path, x, rounds=1)) == {"loopstack", "onnxruntime"}


def test_steady_scaling_times_both_engines_on_one_and_more_threads(tmp_path, monkeypatch):
    path = str(tmp_path / "mlp.onnx")
    onnx.save(mlp(), path)
    x = np.random.default_rng(0).standard_normal((1, 784)).astype(np.float32)
    monkeypatch.setattr(netbench, "STEADY_WARM_S", 0.0)
    monkeypatch.setattr(netbench, "STEADY_BLOCK_S", 0.0)
    res = netbench.steady_scaling(path, x, rounds=4, threads=2)
    assert set(res) == {"loopstack", "onnxruntime"}
    assert all(one > 0 and many > 0 for one, many in res.values())


def test_the_table_and_records_carry_the_threads_columns():
    row = {"name": "m", "input": "1x4", "threads": 2, "max_abs_err": 1e-7, "output_scale": 1.0,
           "loopstack": {"ms": 2.0, "best_ms": 1.5, "compile_ms": 100.0, "peak_mib": 1.0,
                         "steady_ms": 1.8, "steady_threads_ms": 1.0},
           "onnxruntime": {"ms": 3.0, "best_ms": 2.0, "compile_ms": 50.0, "peak_mib": 2.0,
                           "steady_ms": 2.8, "steady_threads_ms": 2.0},
           "loopstack_threads": {"ms": 1.0, "best_ms": 0.9}}
    head, line = netbench.table([row]).splitlines()
    assert head.split()[-7:] == ["2t", "ms", "scaling", "ls", "x2", "ort", "x2"]
    assert line.split()[-4:] == ["1.00", "2.00x", "1.80x", "1.40x"] and "1.50x" in line
    (rec,) = netbench.records([row])
    assert rec["threads"] == 2 and rec["loopstack_threads_latency_ms"] == 1.0
    assert rec["loopstack_threads_steady_latency_ms"] == 1.0 and rec["onnxruntime_steady_latency_ms"] == 2.8
    assert "scaling" not in netbench.table([dict(row, threads=1, loopstack_threads={})]).splitlines()[0]


def test_layer_times_put_each_layer_beside_onnxruntimes_nodes(tmp_path):
    path = str(tmp_path / "mlp.onnx")
    onnx.save(mlp(), path)
    x = np.random.default_rng(0).standard_normal((1, 784)).astype(np.float32)
    ours, theirs = netbench.layer_times(path, x, rounds=2)
    assert [name for name, _ in ours][0].startswith("gemm") and all(us > 0 for _, us in ours)
    assert {op for _, op, _ in theirs} >= {"Softmax"} and all(us >= 0 for *_, us in theirs)
    lines = netbench.layer_table(ours, theirs).splitlines()
    assert len(lines) == 2 + max(len(ours), len(theirs)) and lines[-1].startswith("sum")


def test_the_bench_runs_torch_eager_and_tvm_beside_onnxruntime_and_checks_their_outputs():
    import pytest

    if set(netbench.available_peers()) != {"torch", "tvm"}:
        pytest.skip("torch and apache-tvm are in the test extra; not installed here")
    (row,) = netbench.bench(["mlp"], rounds=2, log=lambda *a: None, peers=("torch", "tvm"))
    for engine in ("loopstack", "onnxruntime", "torch", "tvm"):
        assert "error" not in row[engine] and row[engine]["ms"] > 0 and row[engine]["compile_ms"] > 0
    assert row["torch"]["max_abs_err"] <= 1e-4 * row["output_scale"]
    assert row["tvm"]["max_abs_err"] <= 1e-4 * row["output_scale"]
    head, line = netbench.table([row]).splitlines()
    assert "xtorch" in head and "xtvm" in head and "tvm first" in head
    (rec,) = netbench.records([row])
    assert rec["torch_latency_ms"] > 0 and rec["tvm_first_result_ms"] > 0 and "tvm_max_abs_err" in rec


def test_a_peer_that_fails_is_reported_in_the_table_not_hidden():
    row = {"name": "m", "input": "1x4", "max_abs_err": 1e-7, "output_scale": 1.0,
           "loopstack": {"ms": 2.0, "best_ms": 1.5, "compile_ms": 100.0, "peak_mib": 1.0},
           "onnxruntime": {"ms": 3.0, "best_ms": 2.0, "compile_ms": 50.0, "peak_mib": 2.0},
           "tvm": {"error": "UnsupportedError: no Erf"}}
    lines = netbench.table([row]).splitlines()
    assert "xtvm" in lines[0] and "error" in lines[1] and lines[-1] == "m tvm: UnsupportedError: no Erf"
