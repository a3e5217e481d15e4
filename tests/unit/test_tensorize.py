"""The tensorized-instruction registry and its inspector.

The inspector's answer is checked against a brute-force oracle that enumerates every
iteration point of a small int8 matmul nest and tests, point by point, whether the innermost
loops read exactly the elements an instruction's operands hold. The AArch64 entries are held
against the real `sdot` / `udot`: assembled by llvm-mc, executed by unicorn (CPU model MAX).
"""
import shutil
import subprocess

import numpy as np
import pytest
from aarch64_unicorn import run_a64
from hypothesis import given, settings, strategies as st

from loopstack.backend import compile
from loopstack.backend.tensorize import REGISTRY, Match, Mismatch, dot_desc, inspect, instruction, instructions_for
from loopstack.errors import LoopstackError, UnsupportedError
from loopstack.looptree.builders import access, make_tree, nest
from loopstack.looptree.ir import Access, Affine, Binary, Buffer, Compute, Load

K_IN = 4


def int8_matmul(M, N, KO, a_layout, b_layout, order, a_dtype="uint8", b_dtype="int8"):
    """C[m, n] += A * B over dims m, n, ko, ki (k = 4 ko + ki), A and B in the given layouts."""
    k = Affine.of(("ko", K_IN), "ki")
    K = KO * K_IN
    a_shape, a_ix = ((M, K), (Affine.of("m"), k)) if a_layout == "mk" else ((K, M), (k, Affine.of("m")))
    b_layouts = {
        "kn": ((K, N), (k, Affine.of("n"))),
        "nk": ((N, K), (Affine.of("n"), k)),
        "packed": ((KO, N, K_IN), (Affine.of("ko"), Affine.of("n"), Affine.of("ki"))),
    }
    b_shape, b_ix = b_layouts[b_layout]
    bufs = (Buffer("A", a_dtype, a_shape, "input"), Buffer("B", b_dtype, b_shape, "input"),
            Buffer("C", "int32", (M, N), "output"))
    stmt = Compute("s", access("C", "m", "n"), Binary("mul", Load(Access("A", a_ix)), Load(Access("B", b_ix))),
                   reduce="add", init="identity")
    return make_tree(bufs, {"m": M, "n": N, "ko": KO, "ki": K_IN}, nest(order, stmt))


def _points(tree):
    """(outer loop offsets, inner two loops' offsets, {buffer: flat element offset}) per point."""
    (stack, stmt), = tree.computes()
    sizes = dict(tree.dims)
    accesses = [stmt.out] + list(stmt.reads())
    out = []

    def flat(acc, val):
        buf = tree.buffer(acc.buffer)
        return sum((ix.const + sum(c * val[n] for n, c in ix.terms)) * s for ix, s in zip(acc.index, buf.strides))

    def rec(depth, val, rng, offs):
        if depth == len(stack):
            out.append((tuple(offs[:-2]), tuple(offs[-2:]), {a.buffer: flat(a, val) for a in accesses}))
            return
        lp = stack[depth]
        r = rng.get(lp.dim, sizes[lp.dim])
        for off in range(0, r, lp.step):
            rec(depth + 1, {**val, lp.dim: val.get(lp.dim, 0) + off}, {**rng, lp.dim: min(lp.step, r - off)},
                offs + [off])
    rec(0, {}, {}, [])
    return out


def brute_force_applies(tree, instr) -> bool:
    """Whether every group of innermost-loop points reads exactly what `instr`'s operands hold."""
    lanes, k = instr.lanes, instr.k
    binding = {"acc": "C", "a": "A", "b": "B"}
    groups: dict[tuple, list] = {}
    for outer, inner, offs in _points(tree):
        groups.setdefault(outer, []).append((inner, offs))
    for pts in groups.values():
        if sorted(inner for inner, _ in pts) != [(i, j) for i in range(lanes) for j in range(k)]:
            return False
        base = dict(next(offs for inner, offs in pts if inner == (0, 0)))
        for (i, j), offs in pts:
            want = {"acc": i, "a": i * k + j, "b": i * k + j}
            if instr.broadcast:
                want[instr.broadcast] = j
            if any(offs[binding[n]] - base[binding[n]] != w for n, w in want.items()):
                return False
    return True


@st.composite
def int8_matmuls(draw):
    M = draw(st.integers(1, 3))
    N = draw(st.sampled_from([4, 8, 16, 24]))
    KO = draw(st.integers(1, 3))
    per_dim = {
        "m": draw(st.sampled_from([[("m", 1)], [("m", 2), ("m", 1)]])),
        "n": draw(st.sampled_from([[("n", 1)], [("n", 4), ("n", 1)], [("n", 8), ("n", 1)], [("n", 16), ("n", 1)]])),
        "ko": [("ko", 1)],
        "ki": draw(st.sampled_from([[("ki", 1)], [("ki", 2), ("ki", 1)]])),
    }
    # interleave the dims' loops at random, keeping each dim's own loops outer to inner
    order, queues = [], {d: list(v) for d, v in per_dim.items()}
    while any(queues.values()):
        d = draw(st.sampled_from(sorted(d for d, q in queues.items() if q)))
        order.append(queues[d].pop(0))
    return int8_matmul(M, N, KO, draw(st.sampled_from(["mk", "km"])),
                       draw(st.sampled_from(["kn", "nk", "packed"])), order)


DOT_U8S8 = [t for t in REGISTRY if t.isa == "x86_64" and t.dtypes()[:2] == ("uint8", "int8")]


@settings(max_examples=150, deadline=None)
@given(tree=int8_matmuls(), which=st.integers(0, len(DOT_U8S8) - 1))
def test_the_inspector_agrees_with_a_brute_force_enumeration(tree, which):
    instr = DOT_U8S8[which]
    (stack, stmt), = tree.computes()
    got = inspect(tree, stack, stmt, instr)
    assert bool(got) == brute_force_applies(tree, instr), str(got) if not got else "matched"
    if got:
        assert got.buffers == {"acc": "C", "a": "A", "b": "B"}
        assert [got.loops["i"], got.loops["j"]] == list(stack[-2:])


def _packed_tree(n_split=16):
    return int8_matmul(2, 32, 2, "mk", "packed", [("m", 1), ("ko", 1), ("n", n_split), ("n", 1), ("ki", 1)])


def test_a_packed_int8_matmul_matches_vpdpbusd_with_its_activations_broadcast():
    tree = _packed_tree()
    (stack, stmt), = tree.computes()
    m = inspect(tree, stack, stmt, instruction("vpdpbusd.zmm.bcst_a"))
    assert isinstance(m, Match) and m.loops["i"].dim == "n" and m.loops["j"].dim == "ki"


@pytest.mark.parametrize("name, tree, words", [
    ("vpdpbusd.ymm.bcst_a", _packed_tree(16), ["runs [16] iterations", "exactly 8", "split n by 8"]),
    ("vpdpbusd.zmm.bcst_a", int8_matmul(2, 16, 2, "mk", "kn", [("m", 1), ("ko", 1), ("n", 1), ("ki", 1)]),
     ["%B moves 1 elements per step of n0", "4 elements apart along i"]),
    ("sdot.4s.elem", _packed_tree(4), ["uint8 x int8", "sdot multiplies int8 x int8"]),
    ("vpdpbusd.zmm.bcst_a", int8_matmul(2, 16, 2, "mk", "packed", [("m", 1), ("ko", 1), ("ki", 1), ("n", 1)]),
     ["loop ki0 (ki) must be an output dimension"]),
    ("mma.m16n8k16.f16", _packed_tree(), ["accumulates float32"]),
])
def test_a_mismatch_says_why(name, tree, words):
    (stack, stmt), = tree.computes()
    got = inspect(tree, stack, stmt, instruction(name))
    assert isinstance(got, Mismatch)
    for w in words:
        assert w in got.reason, got.reason


def test_registry_lookups_and_errors():
    assert instructions_for("x86_64", {"avx2"})[0].name.startswith("avx2.dot")
    names = [t.name for t in instructions_for("x86_64", {"avx2", "avx512_vnni", "avx512vl", "avx_vnni"})]
    assert names[0].startswith("vpdpbusd.zmm") and "vex.vpdpbusd.ymm" in names
    assert [t.name for t in instructions_for("aarch64", {"asimddp"})][:2] == ["sdot.4s", "sdot.4s.elem"]
    with pytest.raises(UnsupportedError, match="no tensorized instruction 'vpdpbusd.qmm'"):
        instruction("vpdpbusd.qmm")
    with pytest.raises(LoopstackError):
        dot_desc(4, 4, "uint7", "int8")


# -- AArch64: sdot / udot, assembled by llvm-mc and run by unicorn ------------------------------

def _llvm_mc_bytes(lines: list[str]) -> bytes:
    out = subprocess.run(["llvm-mc", "-triple=aarch64", "-mattr=+neon,+dotprod", "-show-encoding"],
                         input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    code = bytearray()
    for line in out.splitlines():
        if "encoding: [" in line:
            code += bytes(int(x, 16) for x in line.split("encoding: [")[1].rstrip("]").split(","))
    return bytes(code)


@pytest.mark.skipif(shutil.which("llvm-mc") is None, reason="llvm-mc (LLVM) is not installed")
@pytest.mark.parametrize("instr", [t for t in REGISTRY if t.isa == "aarch64"], ids=lambda t: t.name)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), lane=st.integers(0, 3))
def test_aarch64_descriptions_match_sdot_and_udot(instr, seed, lane):
    rng = np.random.default_rng(seed)
    dt = np.dtype(instr.dtypes()[0])
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max + 1, (4, 4)).astype(dt)
    b = rng.integers(info.min, info.max + 1, (4, 4)).astype(dt)
    acc = rng.integers(-2**20, 2**20, 4).astype(np.int32)
    src2 = f"v2.4b[{lane}]" if instr.broadcast else "v2.16b"
    code = _llvm_mc_bytes(["ldr q0, [x0]", "ldr q1, [x1]", "ldr q2, [x2]",
                           f"{instr.mnemonic} v0.4s, v1.16b, {src2}", "str q0, [x0]", "ret"])
    got = acc.copy()
    run_a64(code, [got, a, b])
    want = acc.copy()
    compile(instr.desc, target="interp")(a, b[lane] if instr.broadcast else b, want)
    np.testing.assert_array_equal(got, want)
