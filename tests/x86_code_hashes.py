"""sha256 of the x86 code the backend emits for a fixed set of loop trees, for both x86 targets.

    python3 tests/x86_code_hashes.py --record     rewrite tests/x86_code_hashes.json (deliberately)
    python3 tests/x86_code_hashes.py              compare and list the trees whose code changed

The trees: every workload of loopstack.workloads with its default schedule and unscheduled, every
operator of bench/loopnest.py with its hand-written schedule, and loop trees drawn by the test
strategies under a fixed seed. The targets are the host-independent
descriptions (fixed caches), so the code does not depend on the machine that emits it.
Refactorings of the code generator keep these hashes; a change of the generated code re-records them.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORD = HERE / "x86_code_hashes.json"
TARGET_NAMES = ("avx2", "avx512")
DRAWN = 120          # strategy-drawn trees


def _digest(segments) -> str:
    h = hashlib.sha256()
    for asm, _ in segments:
        h.update(asm.bytes())
    return h.hexdigest()


def workload_trees(target):
    """Every workload with its default schedule (the small ones unscheduled too), and every
    operator of bench/loopnest.py with its hand-written schedule."""
    from loopstack.tune.defaults import default_schedule
    from loopstack.workloads import WORKLOADS

    for name, w in WORKLOADS.items():
        Y, _ = w.build(seed=0)
        yield f"{name}/default", default_schedule(Y, target).lower()
        if w.kind in ("mm", "conv", "dwconv") and w.flops < 2e8:
            yield f"{name}/plain", Y.loop_tree.lower()
    sys.path.insert(0, str(HERE.parent / "bench"))
    from loopnest import operators

    for name, (build, _) in operators(target.name).items():
        yield f"loopnest-{name}", build()


def drawn_trees():
    """Loop trees drawn by tests/strategies.py with a fixed seed (the same on every run)."""
    from hypothesis import HealthCheck, given, settings

    sys.path.insert(0, str(HERE))
    from strategies import random_case

    trees = []

    @settings(max_examples=DRAWN, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(random_case())
    def collect(case):
        if not any(b.dtype in ("int8", "uint8", "int32") for b in case.tree.buffers):
            trees.append(case.tree)

    collect()
    return [(f"drawn-{i}", t) for i, t in enumerate(trees)]


def compute() -> dict[str, str]:
    from loopstack.backend.x86.compile import emit_x86
    from loopstack.isa.target import TARGETS

    out = {}
    drawn = drawn_trees()
    for tname in TARGET_NAMES:
        target = TARGETS[tname]
        for name, tree in list(workload_trees(target)) + drawn:
            for limit in (None, 24) if name.startswith("drawn") else (None,):
                _, _, segments, _ = emit_x86(tree, target, limit)
                out[f"{tname}/{name}" + (f"/unroll{limit}" if limit is not None else "")] = _digest(segments)
    return out



def changed_trees(got: dict[str, str]) -> list[str]:
    """Names whose code differs from the record. Drawn trees depend on hypothesis's version (its
    derandomized draws); under another version only the workloads are compared."""
    import hypothesis

    record = json.loads(RECORD.read_text())
    want = record["hashes"]
    if record["hypothesis"] != hypothesis.__version__:
        want = {k: v for k, v in want.items() if "/drawn-" not in k}
        got = {k: v for k, v in got.items() if "/drawn-" not in k}
    return sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))


def main(argv) -> int:
    import hypothesis

    got = compute()
    if "--record" in argv:
        RECORD.write_text(json.dumps({"hypothesis": hypothesis.__version__, "hashes": got}, indent=0,
                                     sort_keys=True) + "\n")
        print(f"recorded {len(got)} hashes in {RECORD}")
        return 0
    changed = changed_trees(got)
    for k in changed:
        print("changed:", k)
    print(f"{len(got)} trees, {len(changed)} changed")
    return 1 if changed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main(sys.argv[1:]))
