"""The scheduling TUI on a GPU target: a GPU schedule built key by key, its PTX, knobs and
registers on the status panel, the model's figure where no GPU is and a timing where one is."""
import subprocess
import sys

import numpy as np
import pytest

import loopstack as lt
from loopstack.backend.ptx import GpuSchedule, GpuTarget
from loopstack.backend.ptx.kernel import PtxKernel
from loopstack.backend.ptx.model import predict_seconds
from loopstack.isa.ptx import driver, ptxas
from loopstack.workloads import get_workload
from tui import gpu as tui_gpu
from tui.measure import innermost_asm, measure
from tui.screen import as_text, layout, pane_lines
from tui.state import Session

TF32 = GpuTarget("sm_90", allow_tf32=True)
needs_ptxas = pytest.mark.skipif(ptxas.ptxas_path() is None, reason="ptxas is not on the PATH")


def session(name="MM-64", target=TF32):
    tensor, reference = get_workload(name).build(seed=0)
    s = Session(tensor.loop_tree, name=name, measurer=lambda t, sec: measure(t, sec, target=target), in_steps=True)
    return s, tensor, reference


def goto(s, ref):
    while s.cursor < ref:
        s.key("DOWN")
    while s.cursor > ref:
        s.key("UP")


def press(s, at, *keys):
    goto(s, at)
    for k in keys:
        s.key(k)


def test_a_gpu_schedule_built_key_by_key(monkeypatch):
    """MM-64 as two CTAs by two, one warp each of 2x2 mma tiles, k-steps of 16: splits, swaps and
    two `g` presses.  The tree between the bindings does not compile and is kept with its error;
    the end is the kernel of those knobs, and it computes the matmul."""
    monkeypatch.setattr(driver, "available", lambda: False)
    s, tensor, reference = session()
    assert not s.measurement.error and s.measurement.predicted      # unbound: the model's knobs
    for at, factor in ((0, 32), (1, 16), (3, 16), (5, 32), (6, 16)):
        press(s, at, "s", *str(factor), "ENTER")
    press(s, 5, "S-UP", "S-UP", "S-UP", "S-UP")      # n above m', m'', k, k'
    press(s, 4, "S-UP", "S-UP")                      # k above m', m''
    press(s, 6, "S-UP", "S-UP")                      # n' above k', m''
    press(s, 6, "S-UP")                              # k' above m''
    assert [ln.split(" in ")[0].strip() for ln in str(s.tree).splitlines()[:8]] == \
        ["for m", "for n", "for k", "for m'", "for n'", "for k'", "for m''", "for n''"]
    press(s, 0, "g")
    assert s.error and "no loop over n is bound to blocks" in s.message
    assert "[block]" in str(s.tree)                 # kept: the next step completes it
    press(s, 1, "g")
    m = s.measurement
    assert not m.error and not s.error, m.error
    assert str(s.tree).startswith("for m in 2 : L0 [block]\n for n in 2 : L1 [block]")
    assert "warps 1x1, tiles 2x2" in m.details and any(d.startswith("chunk 2,") for d in m.details)
    kernel = s.tree.compile(TF32)
    knobs = GpuSchedule(1, 1, 2, 2, 2, 0, kernel.schedule.stages)
    assert kernel.schedule == knobs and m.asm == lt.compile(tensor, target=GpuTarget("sm_90", knobs,
                                                                                     allow_tf32=True)).ptx
    tensor.set(s.tree)
    got, where = tui_gpu.gpu_result(tensor, TF32)
    assert "interpreter" in where
    # TF32 products: 10-bit mantissas, so about 1e-3 of each term
    np.testing.assert_allclose(got, reference(), rtol=2e-2, atol=2e-2 * np.sqrt(64))
    s.key("z")                                       # undo the second binding: the error is back
    assert s.measurement.error and "[block]" in str(s.tree)


def test_the_model_predicts_where_no_gpu_is_and_a_gpu_times(monkeypatch):
    tensor, _ = get_workload("MM-128").build(seed=0)
    tree = tensor.loop_tree
    monkeypatch.setattr(driver, "available", lambda: False)
    m = measure(tree, 0.01, target=TF32)
    kernel = tree.compile(TF32)
    assert m.predicted and not m.error and m.unit == "TFLOPS" and m.listing == "PTX"
    assert m.gflops == pytest.approx(kernel.flops / predict_seconds(kernel.contraction, kernel.schedule) / 1e9)
    assert m.peak == pytest.approx(1365 * 132 * 1.755)          # the H100 model's tf32 mma.sync rate
    assert m.rate().endswith("TFLOPS (predicted)")
    screen = "\n".join(as_text(layout(Session(tree, measurer=lambda t, sec: m), 24, 80)))
    assert "predicted" in screen and "no GPU here" in screen and "TF/s" in screen
    s = Session(tree, measurer=lambda t, sec: m)
    s.key("t")                                    # the schedule pane ends with the kernel's loops
    _, body = pane_lines(s, 100)
    listed = body[body.index("the GPU kernel:") + 1:]
    assert listed == kernel.schedule_text().splitlines() and any(": block.y" in ln for ln in listed)
    s = Session(tree, measurer=lambda t, sec: m)
    s.key("b")
    assert "no GPU here; the model predicts" in s.message

    timed = []
    monkeypatch.setattr(driver, "available", lambda: True)
    monkeypatch.setattr(PtxKernel, "benchmark", lambda self, runs, min_seconds: timed.append(min_seconds) or 1234.5)
    m = measure(tree, 0.25, target=TF32)
    assert timed == [0.25] and not m.predicted and m.gflops == 1234.5 and m.rate() == "1.2 TFLOPS"
    monkeypatch.setattr(PtxKernel, "benchmark", lambda self, runs, min_seconds: 1 / 0)
    m = measure(tree, 0.01, target=TF32)
    assert m.error.startswith("run: internal error, please report: ZeroDivisionError")


def test_a_float32_gemm_without_tf32_is_refused_with_the_way_to_ask():
    m = measure(get_workload("MM-64").build(seed=0)[0].loop_tree, 0.01, target="sm_90")
    assert m.error.startswith("compile: float32 operands") and "allow_tf32=True" in m.error
    assert m.flops == 2 * 64 ** 3 and m.unit == "TFLOPS"


@needs_ptxas
def test_registers_and_spills_from_ptxas(monkeypatch):
    kernel = get_workload("MM-128").build(seed=0)[0].loop_tree.compile(TF32)
    regs = ptxas.resources(kernel.ptx, "sm_90")[kernel.entry]["registers"]
    lines = tui_gpu.resource_lines(kernel)
    assert lines[0] == f"regs {regs}, no spills"
    assert lines[1] == f"smem {kernel.shared_bytes / 1024:.1f}K, {kernel.block[0]} threads"
    monkeypatch.setattr(ptxas, "resources", lambda ptx, arch: {kernel.entry: {"registers": 255, "spill_stores": 64,
                                                                              "spill_loads": 32}})
    assert tui_gpu.resource_lines(kernel)[0] == "regs 255, SPILLS 96 B"
    monkeypatch.setattr(ptxas, "ptxas_path", lambda: None)
    assert tui_gpu.resource_lines(kernel)[0] == "regs ? (ptxas not on PATH)"


def test_the_ptx_pane_shows_the_k_loop():
    """The PTX listing's innermost loop is the k-step loop: from its label to the branch back,
    through the forward skip inside it (a label no branch returns to is not a loop)."""
    ptx = get_workload("MM-128").build(seed=0)[0].loop_tree.compile(TF32).ptx
    loop = innermost_asm(ptx)
    assert loop[0].startswith("$L_k_") and loop[0].endswith(":")
    assert loop[-1].split()[-1] == loop[0][:-1] + ";" and "bra" in loop[-1]
    assert any("mma.sync" in ln for ln in loop) and any(ln.startswith("$L_skip") for ln in loop)
    assert len(loop) < len(ptx.splitlines())
    listing = "$L_a:\n\tadd.u32 %r1, %r1, 1;\n$L_b:\n\tmul.lo.u32 %r2, %r2, 3;\n\t@%p1 bra $L_b;\n\t@%p2 bra.uni $L_a;\n"
    assert innermost_asm(listing) == ["$L_b:", "    mul.lo.u32 %r2, %r2, 3;", "    @%p1 bra $L_b;"]


@pytest.mark.parametrize("argv, says", [
    (["--allow-tf32"], "--allow-tf32 is for a GPU target (--target sm_80 or sm_90)"),
    (["--target", "sm_70"], "--target sm_70: the GPU targets are sm_80, sm_90"),
])
def test_the_command_names_a_wrong_gpu_target(argv, says):
    r = subprocess.run([sys.executable, "-m", "loopstack", "tui", "MM-64", *argv], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert r.returncode == 2 and says in r.stderr
