"""What a fresh process's first float compile and call load: nothing a float program does not
use (each module costs its import on the first `.numpy()`, bench/frontend.py's first_call_ms)."""
from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loopstack.isa import cpu, execmem
from loopstack.isa.target import host_arch

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import json, sys
import numpy as np
import loopstack as lt
s = lt.SymbolGenerator()
a = np.ones((16, 32), np.float32)
b = np.ones((32, 24), np.float32)
C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
assert (C.numpy() == 32).all()
from loopstack.tune.defaults import default_schedule
C.set(default_schedule(C))
assert (C.numpy() == 32).all()
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.skipif(host_arch() != "x86_64", reason="the x86 code generator runs the first call here")
def test_a_float_programs_first_call_loads_no_c_parser_gpu_backend_or_tensorizer():
    """(nor the tuner's search space: the default schedule of a float program needs none of it)"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert "loopstack.backend.native" in loaded          # the child did compile to machine code
    unwanted = {m for m in loaded if m.split(".")[0] == "pycparser" or m.startswith("cffi")
                or m.startswith("loopstack.backend.ptx") or m.startswith("loopstack.isa.ptx")
                or m.startswith("loopstack.backend.tensorize") or m in ("loopstack.tune.tensorized",
                                                                          "loopstack.tune.space")}
    assert not unwanted, sorted(unwanted)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="getauxval is Linux's")
def test_libc_functions_are_looked_up_with_their_declared_types():
    libc = execmem._lib()
    assert libc.getauxval(6) == mmap.PAGESIZE            # AT_PAGESZ
    with pytest.raises(AttributeError, match="no C type is declared for 'printf'"):
        libc.printf
    with pytest.raises(OSError):
        execmem._Library("libloopstack-absent.so.1", {})


@pytest.mark.skipif("avx2" not in cpu.cpu_features(), reason="the bench's first calls run avx2 code")
def test_the_first_call_bench_caches_bytecode_itself_whatever_the_environment(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    import frontend as bench

    warm, cold = bench.bytecode_caches(["mm512"], "avx2", str(tmp_path))
    package = str(ROOT / "loopstack").lstrip(os.sep)

    def cached(prefix, *parts):
        return sorted(p.name for p in Path(prefix, *parts).glob("*.pyc"))

    assert "native.cpython-%d%d.pyc" % sys.version_info[:2] in cached(warm, package, "backend")
    assert cached(warm, package, "frontend") and not Path(cold, package).exists()
    numpy_dir = str(Path(np.__file__).parent).lstrip(os.sep)
    assert cached(cold, numpy_dir) == cached(warm, numpy_dir) != []     # the rest stays cached
    figures = bench.first_call("mm512", "avx2", runs=1, cache=cold)
    assert len(figures) == 3 and all(isinstance(x, float) for x in figures)
    assert not Path(cold, package).exists()          # the timed children write no bytecode
