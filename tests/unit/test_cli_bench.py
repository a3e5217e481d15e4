"""The `loopstack bench / asm / show` commands, the workload registry and the default schedules."""
import json

import numpy as np
import pytest

from loopstack import LoopstackError
from loopstack.cli import build_parser, main
from loopstack.commands import bench
from loopstack.workloads import WORKLOADS, get_workload, suite


def test_registry_names_suites_and_flops():
    assert {"MM-64", "MM-512", "CONV-1", "CONV-4", "DWCONV-1", "DWCONV-4", "MLP-8x256", "MLP-64x1024"} <= set(WORKLOADS)
    assert get_workload("conv-2") is WORKLOADS["CONV-2"]
    assert [w.name for w in suite("mm")] == ["MM-64", "MM-128", "MM-256", "MM-512"]
    assert len(suite("all")) == len(WORKLOADS)
    assert WORKLOADS["MM-256"].flops == 2 * 256 ** 3
    assert WORKLOADS["CONV-1"].flops == 2 * 56 * 56 * 128 * 64 * 9
    assert WORKLOADS["DWCONV-1"].flops == 2 * 56 * 56 * 16 * 9
    with pytest.raises(LoopstackError, match="unknown workload 'nope'; known: MM-64"):
        get_workload("nope")
    with pytest.raises(LoopstackError, match="unknown suite"):
        suite("bogus")


def test_parsing():
    args = build_parser().parse_args(["bench", "--suite", "conv", "--json", "x.json", "--compare", "numpy,halide",
                                      "--threads", "1", "--plot", "p.png"])
    assert (args.suite, args.json, args.threads, args.plot) == ("conv", "x.json", 1, "p.png")
    assert bench.parse_peers(args.compare) == ["numpy", "halide"]
    assert bench.parse_peers("") == []
    with pytest.raises(LoopstackError, match="unknown peer"):
        bench.parse_peers("numpy,tvm")
    assert main(["bench", "--suite", "nosuch"]) == 2            # argparse usage error


@pytest.mark.parametrize("argv,msg", [
    (["show", "MM-7"], "unknown workload 'MM-7'"),
    (["asm", "nope"], "unknown workload"),
    (["bench", "--compare", "tvm", "-w", "MM-64"], "unknown peer"),
    (["bench", "--threads", "0", "-w", "MM-64"], "expected a positive thread count"),
    (["bench", "-w", "MM-3"], "unknown workload"),
    (["asm", "MM-64", "--target", "avx9000"], ""),
])
def test_error_paths_are_one_line(argv, msg, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("loopstack: error:") and msg in err and "\n" not in err and "Traceback" not in err


def test_show_and_asm(capsys):
    assert main(["show", "mm-64", "--target", "avx2"]) == 0
    out = capsys.readouterr().out
    assert "for n in 4" in out and "multiply" in out          # 64 columns in panels of 2 x 8 lanes
    assert main(["asm", "MM-64"]) == 0
    assert "vfmadd231ps" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["MM-64", "DWCONV-3", "MLP-8x256", "MBV3-C64"])
def test_default_schedule_is_correct(name):
    from loopstack.tune.defaults import default_schedule

    Y, ref = get_workload(name).build(seed=1)
    Y.set(default_schedule(Y))
    np.testing.assert_allclose(Y.numpy(), ref(), rtol=1e-4, atol=1e-4)


def test_default_block_from_the_target():
    from loopstack.isa.target import get_target
    from loopstack.tune.defaults import choose_block

    b = choose_block(256, 32, get_target("avx2"))
    assert (b.mr, b.nv) == (6, 2)          # the 6 x 16 AVX2 micro-kernel


def test_bench_end_to_end_json(tmp_path, capsys):
    path = tmp_path / "r.json"
    rc = main(["bench", "-w", "MM-64", "--compare", "numpy,halide,torch", "--runs", "2", "--rounds", "1",
               "--json", str(path), "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "MM-64" in out and "target" in out
    (rec,) = json.loads(path.read_text())
    for key in ("name", "gflops", "peak_gflops", "compile_ms", "max_abs_err", "peers", "peer_compile_ms"):
        assert key in rec
    assert rec["name"] == "MM-64" and rec["gflops"] > 0 and rec["max_abs_err"] < 1e-3
    assert set(rec["peers"]) == {"numpy", "halide", "torch"}
    assert rec["peers"]["numpy"] > 0
    for p, v in rec["peers"].items():      # a peer that is missing is None and says why
        assert v is None and p in rec["skipped"] or v > 0
    assert rec["status"] in ("ok", "miss")


def test_bench_threads_reports_one_and_n_thread_figures(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main(["bench", "-w", "MM-256", "-w", "MM-64", "--compare", "", "--threads", "2", "--runs", "2",
                 "--rounds", "1", "--json", str(path), "--no-progress"]) == 0
    assert "2 thr GF" in capsys.readouterr().out
    big, small = json.loads(path.read_text())
    assert big["threads"] == 2 and big["parallel"] and big["gflops"] > 0 and big["gflops_threads"] > 0
    assert not small["parallel"] and small["gflops_threads"] > 0     # too small to split: one thread


def test_bench_uses_the_tuning_database(tmp_path):
    from loopstack.frontend.run import program
    from loopstack.isa.target import host_target
    from loopstack.tune import db as tdb
    from loopstack.tune.defaults import default_schedule

    Y, _ = get_workload("MM-64").build()
    tuned = default_schedule(Y).split(0, 1)       # a distinct schedule: one more (unit) loop
    db_path = str(tmp_path / "t.db")
    with tdb.TuningDB(db_path) as db:
        db.record(tdb.program_key(program(Y).graph), host_target().identity,
                  [[a.kind, list(a.args)] for a in tuned.actions], 10.0)
    for db_arg, origin in ((db_path, "tuned"), ("off", "default")):
        path = tmp_path / f"{origin}.json"
        assert main(["bench", "-w", "MM-64", "--compare", "", "--runs", "1", "--rounds", "1", "--db", db_arg,
                     "--json", str(path), "--no-progress"]) == 0
        (rec,) = json.loads(path.read_text())
        assert rec["schedule_origin"] == origin and rec["max_abs_err"] < 1e-3
    default_text = json.loads((tmp_path / "default.json").read_text())[0]["schedule"]
    assert json.loads((tmp_path / "tuned.json").read_text())[0]["schedule"] != default_text


def test_missing_peer_is_skipped_not_faked(monkeypatch):
    from loopstack import peers

    monkeypatch.setattr(peers, "available", lambda name: name == "numpy")
    row = bench.measure_workload(get_workload("MM-64"), ["numpy", "torch"], runs=1, rounds=1)
    assert row["peers"]["torch"] is None and "not installed" in row["skipped"]["torch"]
    assert "skipped" in bench.format_table([row], ["numpy", "torch"])


def test_verdict_columns():
    row = {"name": "MM-256", "gflops": 95.0, "peak_gflops": 100.0, "compile_ms": 4.0,
           "peers": {"numpy": 90.0}, "peer_compile_ms": {}, "peer_layouts": {}}
    assert bench.verdict(row) == ("ok", [])
    row["gflops"] = 80.0
    status, missed = bench.verdict(row)
    assert status == "miss" and ">=1.0x numpy" in missed and ">=90% peak" in missed


def test_default_schedule_packs_wide_matmul_panels():
    from loopstack.isa.target import TARGETS
    from loopstack.tune.defaults import default_schedule

    Y, ref = get_workload("MM-128").build(seed=2)
    tree = default_schedule(Y, TARGETS["avx2"])               # 32 KiB of L1 (the description's own)
    assert any(tree.graph.node(tree.ir_node(r)).op == "copy" for r in tree.nodes)
    temps = [b for b in tree.lower().temps]
    assert [tuple(b.shape) for b in temps] == [(128, 16)]     # one 16-wide panel of B
    Y.set(tree)
    np.testing.assert_allclose(Y.numpy(), ref(), rtol=1e-4, atol=1e-4)
    Y, _ = get_workload("MM-64").build(seed=2)                 # B fits half of L1: no packing
    tree = default_schedule(Y, TARGETS["avx2"])
    assert all(tree.graph.node(tree.ir_node(r)).op != "copy" for r in tree.nodes)



def test_percent_of_peak_is_each_rounds_share_of_the_peak_probed_beside_it(monkeypatch):
    """A machine whose speed halves and doubles between rounds: the kernel keeps pace with the
    probe beside it, so its share is 50 % in every round, where one peak probed at the start
    would rate the rounds at 50, 25 and 100 %."""
    import loopstack.isa.target as T
    from loopstack.backend.kernel_base import KernelBase

    speeds = iter([100.0, 50.0, 200.0])
    current = {}

    def probe(target=None, seconds=0.05):
        current["peak"] = next(speeds)
        return current["peak"]

    monkeypatch.setattr(T, "measure_peak", probe)
    monkeypatch.setattr(KernelBase, "benchmark", lambda self, *a, **k: current["peak"] / 2)
    row = bench.measure_workload(get_workload("MM-64"), [], runs=1, rounds=3)
    assert row["peak_percent"] == 50.0 and row["peak_gflops"] == 100.0 and row["gflops"] == 50.0
    assert bench.percent_of_peak(row) == 50.0 and "50.0%" in bench.format_table([row], [])
    assert bench.record(row)["peak_percent"] == 50.0


def test_bench_records_are_written_as_the_json_convention_says(tmp_path):
    from loopstack.timing import write_records

    path = tmp_path / "r.json"
    write_records(str(path), ({"name": "MM-64", "gflops": 1.0} for _ in range(2)))
    assert json.loads(path.read_text()) == [{"name": "MM-64", "gflops": 1.0}] * 2
    with pytest.raises(ValueError, match="need a 'name'"):
        write_records(str(tmp_path / "bad.json"), [{"gflops": 1.0}])
    assert not (tmp_path / "bad.json").exists()
