"""The whole package on aarch64: `scripts/aarch64-env.sh test` runs the tests marked aarch64 in an
aarch64 CPython under qemu-aarch64-static -cpu max (code JIT-compiled and executed natively
there), and must pass. Skips, saying why, only where the environment has not been built
(`scripts/aarch64-env.sh build`; CI builds it in .ci/run) or on an aarch64 host, where the
marked tests run natively in this very session."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from loopstack.isa import cpu

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "aarch64-env.sh"


def _environment() -> Path:
    out = subprocess.run(["bash", str(SCRIPT), "dir"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def test_marked_tests_pass_under_qemu_aarch64(capsys):
    if cpu.is_aarch64():
        pytest.skip("aarch64 host: the marked tests run natively in this session")
    env = _environment()
    if not (env / ".complete").exists():
        pytest.skip(f"aarch64 environment not built ({env}): run `bash scripts/aarch64-env.sh build`")
    proc = subprocess.run(["bash", str(SCRIPT), "test", "-rs"], capture_output=True, text=True, timeout=900)
    summary = [ln for ln in proc.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    with capsys.disabled():
        print(f"\naarch64 (qemu-aarch64-static -cpu max): {summary[-1] if summary else '(no summary)'}")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert summary and " passed" in summary[-1] and "failed" not in summary[-1]
    # the native kernels really ran there (they skip only on a host that is not aarch64)
    assert "needs an aarch64 host" not in proc.stdout, proc.stdout[-3000:]
