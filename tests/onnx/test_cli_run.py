"""`loopstack run MODEL.onnx` and `loopstack bench --suite nets` from the command line."""
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort

from loopstack.onnx import models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "loopstack", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)


def test_run_saves_the_outputs_onnxruntime_computes(tmp_path):
    m = models.mlp(sizes=(64, 32, 10))
    path = tmp_path / "mlp.onnx"
    onnx.save(m, path)
    x = np.random.default_rng(3).standard_normal((1, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    res = _cli("run", str(path), "--input", f"input={tmp_path / 'x.npy'}", "--output", str(tmp_path / "y.npz"))
    assert res.returncode == 0, res.stderr
    assert "output output [1, 10] float32" in res.stdout
    got = np.load(tmp_path / "y.npz")["output"]
    want = ort.InferenceSession(str(path)).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_run_bench_prints_the_layers_and_onnxruntime(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(models.resnet18(resolution=16, width=4, blocks=(1, 1, 1, 1), classes=5), path)
    res = _cli("run", str(path), "--bench", "--runs", "2")
    assert res.returncode == 0, res.stderr
    assert "seeded random" in res.stdout
    assert "ms per run" in res.stdout and "onnxruntime" in res.stdout
    assert "conv" in res.stdout and "GFLOPS" in res.stdout


def test_run_names_a_bad_input(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(sizes=(8, 4)), path)
    res = _cli("run", str(path), "--input", "nope=x.npy")
    assert res.returncode == 2
    assert "no input of that name" in res.stderr
    res = _cli("run", str(tmp_path / "missing.onnx"))
    assert res.returncode == 2 and "no such ONNX file" in res.stderr
