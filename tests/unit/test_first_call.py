"""What the first compile of a process loads: only what it uses (no timing here, see
bench/frontend.py's first_call_ms): the x86 forms of the mnemonics it emits, and no database
layer when there is no tuning database."""
import json
import os
import subprocess
import sys


_CHILD = """
import json, sys
import numpy as np
import loopstack as lt
s = lt.SymbolGenerator()
A = lt.Tensor(np.ones((16, 8), np.float32)).to(s.m, s.k)
B = lt.Tensor(np.ones((8, 24), np.float32)).to(s.k, s.n)
C = lt.nn.relu((A * B).sum(s.k))
ok = bool((C.numpy() == 8).all())
from loopstack.isa.x86 import assembler, forms
print(json.dumps({"ok": ok, "whole_table": "FORMS" in vars(forms), "mnemonics": len(assembler._TABLE_MNEMONICS),
                  "all": len(forms.MNEMONICS), "modules": [m for m in ("sqlite3", "hashlib") if m in sys.modules]}))
"""


def test_first_compile_loads_only_what_it_uses(tmp_path):
    env = dict(os.environ, LOOPSTACK_TUNING_DB=str(tmp_path / "none.db"))
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, check=True)
    res = json.loads(out.stdout.splitlines()[-1])
    assert res["ok"]
    assert not res["whole_table"]
    assert 0 < res["mnemonics"] < res["all"] // 4
    assert res["modules"] == []
    assert not (tmp_path / "none.db").exists()
