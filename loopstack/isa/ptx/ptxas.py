"""Assemble PTX with NVIDIA's ptxas (the oracle for every kernel loopstack emits).

    assemble([ptx, ...], "sm_90")      raises EncodingError with ptxas's messages on failure

Several modules for the same target are merged into one (entries renamed apart, module-scope
declarations kept once), so a test suite pays ptxas's start-up once per architecture.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time

from ...errors import EncodingError, UnsupportedError

_ENTRY = re.compile(r"^\.visible \.entry (\w+)\(", re.M)


def ptxas_path() -> str | None:
    return shutil.which("ptxas")


def merge(modules: list[str]) -> str:
    """One module holding every entry of `modules` (entry i's name gets suffix _i)."""
    head, scope, bodies = None, [], []
    for i, ptx in enumerate(modules):
        start = _ENTRY.search(ptx)
        if start is None:
            raise EncodingError(f"module {i} has no .visible .entry")
        lines = ptx[:start.start()].splitlines()
        h = [ln for ln in lines if ln.startswith((".version", ".target", ".address_size"))]
        if head is None:
            head = h
        elif h != head:
            raise EncodingError(f"module {i} has header {h}, module 0 {head}: merge per target")
        scope += [ln for ln in lines if ln.strip() and ln not in h and ln not in scope]
        bodies.append(_ENTRY.sub(lambda m: f".visible .entry {m.group(1)}_{i}(", ptx[start.start():]))
    return "\n".join(head + [""] + scope + [""] + bodies)


def assemble(modules: list[str] | str, arch: str) -> float:
    """Assemble for `arch` (sm_80, sm_90); the seconds ptxas took."""
    return _run(modules, arch, [])[0]


_PROPS = re.compile(r"Compiling entry function '(\w+)'.*?(\d+) bytes spill stores, (\d+) bytes spill loads.*?"
                    r"Used (\d+) registers", re.S)


def resources(modules: list[str] | str, arch: str) -> dict:
    """Per entry (named as in `merge`): registers and spill bytes, from `ptxas -v`."""
    log = _run(modules, arch, ["-v"])[1]
    return {m.group(1): {"registers": int(m.group(4)), "spill_stores": int(m.group(2)),
                         "spill_loads": int(m.group(3))} for m in _PROPS.finditer(log)}


def _run(modules, arch: str, flags: list) -> tuple[float, str]:
    exe = ptxas_path()
    if exe is None:
        raise UnsupportedError("ptxas is not on the PATH")
    text = modules if isinstance(modules, str) else merge(list(modules))
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(text)
        t0 = time.perf_counter()
        r = subprocess.run([exe, *flags, f"-arch={arch}", "-o", os.devnull, src], capture_output=True, text=True)
        took = time.perf_counter() - t0
    if r.returncode != 0:
        raise EncodingError(f"ptxas -arch={arch} rejected the PTX:\n{r.stderr.strip()}")
    return took, r.stdout + r.stderr
