"""The seeded CI slice of bench/fuzz_gpu.py: random GEMMs, batched GEMMs, convolutions and
requantized 8-bit GEMMs under random knobs (or bound loops), each in a forked child, assembled by
ptxas and run in the SIMT reference interpreter against numpy."""
import os
import sys

import pytest

pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))

import fuzz  # noqa: E402
import fuzz_gpu  # noqa: E402

CASES = 60


def test_fuzz_gpu_slice():
    targets = list(fuzz_gpu.ARCHES)
    results = fuzz.run_cases(2026, range(CASES), targets, jobs=max(1, min(2, os.cpu_count() or 1)), timeout=120,
                             case=fuzz_gpu.run_case, warm=fuzz_gpu.warm_up)
    bad = [r for r in results if r["status"] in fuzz.COUNTED]
    assert len(results) == CASES
    assert not bad, "\n".join(f"case {r['case']} ({r['family']}): {r['status']}: {r['detail']}" for r in bad[:10])
    ran = [r for r in results if r["status"] == "ok"]
    assert len(ran) > CASES // 2, f"only {len(ran)} of {CASES} cases ran (the rest refused their knobs)"
    assert {r["family"] for r in ran} == set(fuzz_gpu.FAMILIES)
