"""Speed without an ARM machine: LLVM's machine-code analyser (llvm-mca) as the cost model.

    predict(asm_text, "apple-m1")    -> cycles per iteration of the loop body asm_text
    fma_bound(asm_text, "apple-m1")  -> the same model's cycles for the body's FMA-class
                                        instructions alone (fmla/fmls/fmul/sdot/udot)
    body_text(code)                  -> asm text of machine code (capstone), for the two above

llvm-mca simulates `iterations` back-to-back copies of the body on its scheduling model of the
core (-mcpu=apple-m1 is its Cyclone-family model, -mcpu=cortex-a57 the A57's) and reports the
total cycles; cycles / iterations is the steady-state cost of one iteration (the pipeline
filling up is spread over many iterations). Measured sanity points (platform.md): an 8x12 fp32
register block, 24 `fmla .4s` by element and 5 loads, predicts 8.0 cycles on apple-m1 and 24 on
cortex-a57. A body's efficiency is fma_bound / predict (1.0: it issues FMAs as fast as the
model allows).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from ...errors import UnsupportedError

__all__ = ["FMA_MNEMONICS", "Prediction", "analyse", "body_text", "fma_bound", "predict"]

MCPUS = ("apple-m1", "cortex-a57")
FMA_MNEMONICS = frozenset({"fmla", "fmls", "fmul", "sdot", "udot"})
_MATTR = "+neon,+fullfp16,+dotprod"     # every form the encoder emits, whatever the model's core has


@dataclass(frozen=True)
class Prediction:
    mcpu: str
    iterations: int
    instructions: int           # per iteration
    total_cycles: int
    block_rthroughput: float    # llvm-mca's resource-bound lower estimate of one iteration

    @property
    def cycles_per_iteration(self) -> float:
        return self.total_cycles / self.iterations


def _llvm_mca() -> str:
    path = shutil.which("llvm-mca")
    if path is None:
        raise UnsupportedError("llvm-mca is not on the PATH (install LLVM: apt-get install llvm)")
    return path


def analyse(asm_text: str, mcpu: str, iterations: int = 200) -> Prediction:
    """Run llvm-mca over `asm_text` (one instruction a line) and parse its summary."""
    lines = [ln.strip() for ln in asm_text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("//", "#", ";"))]
    if not lines:
        raise UnsupportedError("llvm-mca: no instructions to analyse")
    proc = subprocess.run(
        [_llvm_mca(), "-mtriple=aarch64", f"-mcpu={mcpu}", f"-mattr={_MATTR}", f"-iterations={iterations}",
         "-summary-view", "-resource-pressure=false", "-instruction-info=false"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise UnsupportedError(f"llvm-mca -mcpu={mcpu} failed: {proc.stderr.strip()[:2000]}")
    fields = dict(re.findall(r"^(Iterations|Instructions|Total Cycles|Block RThroughput):\s+([\d.]+)",
                             proc.stdout, re.M))
    if {"Iterations", "Instructions", "Total Cycles", "Block RThroughput"} - set(fields):
        raise UnsupportedError(f"llvm-mca printed no summary:\n{proc.stdout[:2000]}")
    iters = int(fields["Iterations"])
    return Prediction(mcpu, iters, int(fields["Instructions"]) // iters, int(fields["Total Cycles"]),
                      float(fields["Block RThroughput"]))


def predict(asm_text: str, mcpu: str, iterations: int = 200) -> float:
    """Predicted cycles per iteration of the loop body `asm_text` on core `mcpu`."""
    return analyse(asm_text, mcpu, iterations).cycles_per_iteration


def fma_lines(asm_text: str) -> str:
    return "\n".join(ln for ln in asm_text.splitlines() if ln.strip().split(" ", 1)[0] in FMA_MNEMONICS)


def fma_bound(asm_text: str, mcpu: str, iterations: int = 200) -> float:
    """The cycles per iteration the same model predicts for the body's FMA instructions alone."""
    only = fma_lines(asm_text)
    if not only:
        raise UnsupportedError("fma_bound: the loop body has no fmla/fmls/fmul/sdot/udot")
    return predict(only, mcpu, iterations)


def body_text(code: bytes) -> str:
    """capstone's text of AArch64 machine code, one instruction a line (all of it must decode)."""
    from capstone import CS_ARCH_ARM64, CS_MODE_ARM, Cs
    out, decoded = [], 0
    for insn in Cs(CS_ARCH_ARM64, CS_MODE_ARM).disasm(code, 0):
        out.append(f"{insn.mnemonic} {insn.op_str}".strip())
        decoded += insn.size
    if decoded != len(code):
        raise UnsupportedError(f"capstone decoded {decoded} of {len(code)} bytes")
    return "\n".join(out)
