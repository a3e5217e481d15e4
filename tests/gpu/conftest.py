"""Every PTX kernel a GPU test compiles is assembled by ptxas for its target, the oracle.

A test's kernels (those `lt.compile` / `backend.compile` make for an sm_* target, hypothesis'
examples included) are collected while it runs and assembled when it ends, one ptxas call per
target for all of them; a kernel ptxas rejects fails the test that made it. A kernel already
assembled by an earlier test (the same text) is not assembled again.
"""
import hashlib

import pytest

import loopstack.backend.ptx as ptx_backend
from loopstack.isa.ptx import ptxas

_assembled: set = set()


@pytest.fixture(autouse=True)
def every_kernel_assembles(monkeypatch):
    made = []
    compile_ptx = ptx_backend.compile_ptx

    def recorded(*args, **kwargs):
        kernel = compile_ptx(*args, **kwargs)
        made.append(kernel)
        return kernel

    monkeypatch.setattr(ptx_backend, "compile_ptx", recorded)
    yield
    if ptxas.ptxas_path() is None:       # the skip is the test files' own (needs_ptxas)
        return
    fresh: dict = {}
    for kernel in made:
        digest = hashlib.sha1(kernel.ptx.encode()).digest()
        if digest not in _assembled:
            _assembled.add(digest)
            fresh.setdefault(kernel.target, []).append(kernel.ptx)
    for arch, texts in fresh.items():
        ptxas.assemble(texts, arch)
