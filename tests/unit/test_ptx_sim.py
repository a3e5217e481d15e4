"""The PTX reference interpreter against numpy (and ml_dtypes, Python fractions) on hand-written
kernels that ptxas assembles for sm_80 and sm_90."""
import shutil
import subprocess
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ptx_kernels as K
from loopstack.errors import ArgumentError, LoopstackError, SimulationError
from loopstack.isa.ptx.sim import launch

KERNELS = {name: getattr(K, name) for name in dir(K) if name.isupper() and name != "HEADER"}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_assembles_with_ptxas(name, arch, tmp_path):
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas (CUDA toolkit) is not on the PATH")
    path = tmp_path / f"{name}.ptx"
    path.write_text(KERNELS[name])
    r = subprocess.run([ptxas, f"-arch={arch}", "-o", "/dev/null", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_simulation_error_is_a_loopstack_error():
    assert issubclass(SimulationError, LoopstackError)


# ---- scalar kernels ----------------------------------------------------------------------------

@settings(max_examples=15)
@given(n=st.integers(1, 700), block=st.sampled_from([32, 64, 128, 96]), seed=st.integers(0, 2**16))
def test_vadd_with_tail(n, block, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    c = np.full(n, -7.0, np.float32)
    launch(K.VADD, "vadd", grid=((n + block - 1) // block,), block=(block,), args=[a, b, c, n])
    np.testing.assert_array_equal(c, a + b)


def test_vadd_reads_past_the_end_raise_naming_instruction_thread_and_address():
    a, b, c = (np.zeros(100, np.float32) for _ in range(3))
    with pytest.raises(SimulationError) as err:
        launch(K.VADD, "vadd", grid=(1,), block=(128,), args=[a, b, c, 101])
    msg = str(err.value)
    assert "ld.global.f32 %f1" in msg and "thread (100, 0, 0)" in msg and "past the end of argument a" in msg
    assert "0x1" in msg                     # the faulting address


def test_divergent_branches_loops_and_early_exit():
    n = 96
    out = np.full(n, 12345, np.int32)
    launch(K.DIVERGE, "diverge", grid=(1,), block=(n,), args=[out])
    ref = np.full(n, 12345, np.int32)
    for t in range(n):
        if t % 7 == 6:
            continue
        x = 3 * t if t & 1 else (t + 100 if t & 2 else -t)
        ref[t] = x + sum(range(t % 5))
    np.testing.assert_array_equal(out, ref)


def test_special_registers_3d():
    grid, block = (3, 2, 2), (8, 4, 2)
    threads = np.prod(block) * np.prod(grid)
    out = np.zeros(threads * 12, np.uint32)
    launch(K.SPECIALS, "specials", grid=grid, block=block, args=[out])
    got = out.reshape(threads, 12)
    rows = []
    for cz in range(grid[2]):
        for cy in range(grid[1]):
            for cx in range(grid[0]):
                for tz in range(block[2]):
                    for ty in range(block[1]):
                        for tx in range(block[0]):
                            lin = tx + block[0] * (ty + block[1] * tz)
                            rows.append([tx, ty, tz, cx, cy, cz, lin % 32, lin // 32, block[0], grid[0],
                                         block[1], grid[1]])
    np.testing.assert_array_equal(got, np.array(rows, np.uint32))


def _int_reference(a, b, x, y):
    """The INTOPS results computed with Python integers."""
    def s32(v):
        return (v + 2**31) % 2**32 - 2**31

    def u32(v):
        return v % 2**32

    def s64(v):
        return (v + 2**63) % 2**64 - 2**63

    def tdiv(p, q):
        r = abs(p) // abs(q)
        return r if (p < 0) == (q < 0) else -r

    out, wide = [], []
    for ai, bi, xi, yi in zip(a.tolist(), b.tolist(), x.tolist(), y.tolist()):
        ua, ub = u32(ai), u32(bi)
        sh = bi & 31
        r = [s32(ai + bi), s32(ai - bi), s32(ai * bi), s32((ai * bi) >> 32), s32((ua * ub) >> 32),
             s32(tdiv(ai, bi)), s32(ai - tdiv(ai, bi) * bi), s32(ua // ub), s32(ua % ub),
             s32(ai << sh), ai >> sh, s32(ua >> sh), ai >> 31, min(ai, bi), s32(max(ua, ub)),
             int(ai < bi), int(ua < ub), max(-128, min(127, ai)), s32(((ai & 0xFF) ^ 0x80) - 0x80),
             s32(-ai), s32(abs(ai)), s32(~(ai ^ bi)), s32(ai * bi + ai),
             7 if (ai > 0 and ua < ub) else -7]
        out.append(r)
        wide.append([s64(xi + yi), s64(xi * yi), s64((xi * yi) >> 64),
                     s64(((xi % 2**64) * (yi % 2**64)) >> 64), ai * bi, s64(tdiv(xi, yi))])
    return np.array(out, np.int64).astype(np.int32), np.array(wide, dtype=object).astype(np.int64)


@settings(max_examples=10)
@given(seed=st.integers(0, 2**32 - 1))
def test_integer_semantics_wrap_like_the_hardware(seed):
    rng = np.random.default_rng(seed)
    n = 64
    edges = np.array([0, 1, -1, 2**31 - 1, -2**31, 7, -7, 40], np.int64)
    a = rng.integers(-2**31, 2**31, n)
    b = rng.integers(-2**31, 2**31, n)
    a[:8], b[8:16] = edges, edges
    b[b == 0] = 3
    a, b = a.astype(np.int32), b.astype(np.int32)
    x = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
    y = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
    x[:4] = [-2**63, 2**63 - 1, -1, 5]
    y[y == 0] = 11
    out, wide = np.zeros(n * 24, np.int32), np.zeros(n * 6, np.int64)
    launch(K.INTOPS, "intops", grid=(1,), block=(n,), args=[a, b, x, y, out, wide])
    ref_out, ref_wide = _int_reference(a, b, x, y)
    np.testing.assert_array_equal(out.reshape(n, 24), ref_out)
    np.testing.assert_array_equal(wide.reshape(n, 6), ref_wide)


def _prmt(a: int, b: int, sel: int) -> int:
    """prmt.b32's default mode, byte by byte from the PTX ISA's description."""
    pair = a | (b << 32)
    out = 0
    for i in range(4):
        nib = (sel >> (4 * i)) & 0xF
        byte = (pair >> (8 * (nib & 7))) & 0xFF
        if nib & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


@settings(max_examples=10)
@given(seed=st.integers(0, 2**32 - 1))
def test_prmt_picks_and_sign_replicates_bytes(seed):
    rng = np.random.default_rng(seed)
    n = 64
    a, b, sel = (rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) for _ in range(3))
    out = np.zeros(n * 4, np.uint32)
    launch(K.PRMT, "prmt", grid=(1,), block=(n,), args=[a, b, sel, out])
    want = [[_prmt(int(x), int(y), s) for s in (0x5140, 0x7362, 0xC8A3, int(z))] for x, y, z in zip(a, b, sel)]
    np.testing.assert_array_equal(out.reshape(n, 4), np.array(want, np.uint32))


def _nearest(exact: Fraction, dtype) -> float:
    """The value of numpy float `dtype` nearest `exact`, ties to even (an independent oracle)."""
    f = dtype(float(exact))
    cands = {f, np.nextafter(f, dtype(np.inf)), np.nextafter(f, dtype(-np.inf))}
    cands = [c for c in cands if np.isfinite(c)]
    best = min(cands, key=lambda c: (abs(Fraction(float(c)) - exact),
                                     int(np.array(c).view(np.uint16 if dtype == np.float16 else np.uint32)) & 1))
    return best


def _bf16_bits(x):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


@settings(max_examples=10)
@given(seed=st.integers(0, 2**32 - 1))
def test_float_semantics_round_once(seed):
    rng = np.random.default_rng(seed)
    n = 64
    a = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
    b = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
    c = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
    a[:6] = [np.nan, 1e30, -1e30, 65520.0, 2.5, -3.5]
    b[:6] = [1.0, 2.0, np.nan, 1.0, 1.0, 1.0]
    f, h = np.zeros(n * 8, np.float32), np.zeros(n * 8, np.uint32)
    launch(K.FLOATOPS, "floatops", grid=(1,), block=(n,), args=[a, b, c, f, h])
    f, h = f.reshape(n, 8), h.reshape(n, 8)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(f[:, 0], a + b)
        np.testing.assert_array_equal(f[:, 1], a * b)
        fma = [_nearest(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)), np.float32)
               if np.isfinite(x) and np.isfinite(y) else np.nan for x, y, z in zip(a, b, c)]
        np.testing.assert_array_equal(f[6:, 2], np.array(fma, np.float32)[6:])
        np.testing.assert_array_equal(f[:, 3], a / b)
        np.testing.assert_array_equal(f[:, 4], np.fmin(a, b))
        np.testing.assert_array_equal(f[:, 5], np.fmax(a, b))
        np.testing.assert_array_equal(f[:, 6], -a)
        np.testing.assert_array_equal(f[:, 7], np.where(~(a >= b), a, b))     # ltu: unordered or less
        half_rn = a.astype(np.float16)
        half_rn = np.where(np.isnan(half_rn), np.uint16(0x7FFF).view(np.float16), half_rn)
        half_rz = np.array([np.nextafter(v, np.float16(0)) if abs(float(v)) > abs(float(x)) else v
                            for v, x in zip(half_rn, a)], np.float16)
        low = h[:, 4] & 0xFFFF
        np.testing.assert_array_equal(low.astype(np.uint16), half_rn.view(np.uint16))
        np.testing.assert_array_equal((h[:, 4] >> 16).astype(np.uint16)[1:], half_rz.view(np.uint16)[1:])
        bf = _bf16_bits(a)
        bf = np.where(np.isnan(a), np.uint16(0x7FFF), bf)
        np.testing.assert_array_equal((h[:, 5] & 0xFFFF).astype(np.uint16), bf)
        big = np.iinfo(np.int32)
        rni = np.clip(np.nan_to_num(np.rint(a.astype(np.float64)), nan=0), big.min, big.max).astype(np.int32)
        rzi = np.clip(np.nan_to_num(np.trunc(a.astype(np.float64)), nan=0), big.min, big.max).astype(np.int32)
        np.testing.assert_array_equal(h[:, 0].view(np.int32), rni)
        np.testing.assert_array_equal(h[:, 1].view(np.int32), rzi)
        packed_h = (half_rn.view(np.uint16).astype(np.uint32) << 16) | \
            np.where(np.isnan(b), np.uint16(0x7FFF), b.astype(np.float16).view(np.uint16)).astype(np.uint32)
        np.testing.assert_array_equal(h[:, 2], packed_h)
        packed_b = (bf.astype(np.uint32) << 16) | np.where(np.isnan(b), 0x7FFF, _bf16_bits(b)).astype(np.uint32)
        np.testing.assert_array_equal(h[:, 3], packed_b)
        np.testing.assert_array_equal(h[:, 5], (bf.astype(np.uint32) << 16) | bf)
        np.testing.assert_array_equal(h[:, 6].view(np.float32), half_rn.astype(np.float32))
        np.testing.assert_array_equal(h[:, 7].view(np.float32), h[:, 0].view(np.int32).astype(np.float32))


@settings(max_examples=10)
@given(seed=st.integers(0, 2**32 - 1))
def test_packed_half_arithmetic(seed):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(seed)
    n = 32
    # values in narrow ranges so that the exact results fit the oracles' own precision
    a = rng.uniform(0.5, 2, (n, 2))
    b = rng.uniform(0.5, 2, (n, 2)) * rng.choice([-1, 1], (n, 2))
    c = rng.uniform(0.5, 4, (n, 2))
    words = [x.astype(np.float16).view(np.uint32).reshape(n) for x in (a, b, c)]
    out = np.zeros(n * 4, np.uint32)
    launch(K.HALFOPS, "halfops", grid=(1,), block=(n,), args=[*words, out])
    out = [np.ascontiguousarray(col) for col in out.reshape(n, 4).T]
    ha, hb, hc = (w.view(np.float16).reshape(n, 2) for w in words)
    np.testing.assert_array_equal(out[0].view(np.float16).reshape(n, 2), ha + hb)
    np.testing.assert_array_equal(out[1].view(np.float16).reshape(n, 2), ha * hb)
    fma = np.array([[_nearest(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)), np.float16)
                     for x, y, z in zip(*row)] for row in zip(ha, hb, hc)], np.float16)
    np.testing.assert_array_equal(out[2].view(np.float16).reshape(n, 2), fma)
    # the same words read as bf16 pairs: the exact a*b+c (< 24 bits here) rounded by ml_dtypes
    ba, bb, bc = (w.view(np.uint16).reshape(n, 2) for w in words)
    f32 = [(x.astype(np.uint32) << 16).view(np.float32).astype(np.float64) for x in (ba, bb, bc)]
    exact = f32[0] * f32[1] + f32[2]
    ok = np.abs(exact) < 2.0 ** 100
    ref = exact.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    got = out[3].view(np.uint16).reshape(n, 2)
    np.testing.assert_array_equal(got[ok], ref[ok])


# ---- shared memory and barriers ------------------------------------------------------------------

@settings(max_examples=8)
@given(n=st.integers(1, 900), seed=st.integers(0, 2**16))
def test_reduction_through_shared_memory_and_barriers(n, seed):
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    ctas = (n + 255) // 256
    out = np.zeros(ctas, np.float32)
    launch(K.REDUCE, "reduce", grid=(ctas,), block=(256,), args=[x, out, n])
    padded = np.zeros(ctas * 256, np.float32)
    padded[:n] = x
    part = padded.reshape(ctas, 256).copy()
    stride = 128
    while stride:
        part[:, :stride] += part[:, stride:2 * stride]      # the kernel's tree, in f32
        stride //= 2
    np.testing.assert_array_equal(out, part[:, 0])


def test_shared_store_out_of_bounds_raises():
    launch(K.FAULTS, "faults", grid=(1,), block=(64,), args=[1000, 0])   # nobody strays
    with pytest.raises(SimulationError, match=r"st.shared.f32.*thread \(5, 0, 0\).*shared address 0x100"):
        launch(K.FAULTS, "faults", grid=(1,), block=(64,), args=[5, 0])


def test_barrier_after_an_exit_raises():
    launch(K.FAULTS, "faults", grid=(1,), block=(64,), args=[1000, 1])
    with pytest.raises(SimulationError, match=r"bar.sync can never complete.*thread \(9, 0, 0\).*exited"):
        launch(K.FAULTS, "faults", grid=(1,), block=(64,), args=[9, 1])


def test_unsupported_instruction_raises():
    with pytest.raises(SimulationError, match="unsupported: popc.b32"):
        launch(K.UNSUPPORTED, "unsupported", grid=(1,), block=(32,), args=[np.zeros(1, np.uint32)])


def test_bad_launch_arguments():
    a = np.zeros(4, np.float32)
    with pytest.raises(ArgumentError, match="takes 4 arguments"):
        launch(K.VADD, "vadd", grid=(1,), block=(4,), args=[a, a, a])
    with pytest.raises(ArgumentError, match="no entry 'nope'"):
        launch(K.VADD, "nope", grid=(1,), block=(4,), args=[a, a, a, 4])
    with pytest.raises(ArgumentError, match="out of range"):
        launch(K.VADD, "vadd", grid=(1,), block=(4,), args=[a, a, a, -1])


def test_read_only_array_store_raises():
    a = np.zeros(4, np.float32)
    c = np.zeros(4, np.float32)
    c.flags.writeable = False
    with pytest.raises(SimulationError, match="read-only"):
        launch(K.VADD, "vadd", grid=(1,), block=(4,), args=[a, a, c, 4])


def test_endless_loop_is_stopped():
    ptx = K.HEADER + """
.visible .entry spin()
{
L:
    bra.uni L;
}
"""
    with pytest.raises(SimulationError, match="endless loop"):
        launch(ptx, "spin", grid=(1,), block=(32,), max_steps=1000)


def test_parse_errors_name_the_line():
    with pytest.raises(SimulationError, match="line 7"):
        launch(K.HEADER + "\n.visible .entry e()\n{\n  add.s32 %r1, %r2, 1;\n}\n", "e")


# ---- cp.async -------------------------------------------------------------------------------------

@pytest.mark.parametrize("nbytes", [1024, 1000, 333, 0])
def test_cp_async_lands_at_its_wait_and_zero_fills(nbytes):
    rng = np.random.default_rng(nbytes)
    src0 = rng.integers(0, 255, nbytes, dtype=np.uint8)     # exactly nbytes: a copy past it faults
    src1 = rng.integers(0, 255, 1024, dtype=np.uint8)
    out = np.zeros(64 * 32, np.uint8)
    launch(K.CPASYNC, "cpasync", grid=(1,), block=(64,), args=[src0, src1, out, nbytes, 0])
    out = out.reshape(64, 2, 16)
    filled = np.zeros(1024, np.uint8)
    filled[:nbytes] = src0
    np.testing.assert_array_equal(out[:, 0].reshape(-1), filled)   # group 0, zero-filled past nbytes
    np.testing.assert_array_equal(out[:, 1], np.roll(src1.reshape(64, 16), -1, axis=0))


@pytest.mark.parametrize("mode,error", [
    (1, r"thread \(0, 0, 0\).*reads, before its cp.async.wait, a byte an in-flight cp.async will write"),
    (2, r"ld.shared.*thread \(0, 0, 0\).*before its cp.async.wait"),
    (3, r"thread \(31, 0, 0\).*race: reads what another warp \(up to warp 1\) wrote since the last bar.sync"),
])
def test_cp_async_races_raise(mode, error):
    src = np.zeros(1024, np.uint8)
    with pytest.raises(SimulationError, match=error):
        launch(K.CPASYNC, "cpasync", grid=(1,), block=(64,), args=[src, src, np.zeros(64 * 32, np.uint8), 1024, mode])


def test_cp_async_source_past_the_array_raises_at_issue():
    src0 = np.zeros(512, np.uint8)
    with pytest.raises(SimulationError, match=r"cp.async.ca.*thread \(32, 0, 0\).*past the end of argument psrc0"):
        launch(K.CPASYNC, "cpasync", grid=(1,), block=(64,),
               args=[src0, np.zeros(1024, np.uint8), np.zeros(64 * 32, np.uint8), 1024, 0])


# ---- ldmatrix -------------------------------------------------------------------------------------

def _ldmatrix_reference(m):
    """Per lane, the words of x1, x2, x4, x1.trans, x2.trans, x4.trans (PTX ISA: lane l holds
    row l/4, columns 2(l%4), 2(l%4)+1 of each matrix; transposed: rows 2(l%4), 2(l%4)+1 of column l/4)."""
    out = np.zeros((32, 16), np.uint32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        plain = [int(m[j, g, 2 * t]) | int(m[j, g, 2 * t + 1]) << 16 for j in range(4)]
        trans = [int(m[j, 2 * t, g]) | int(m[j, 2 * t + 1, g]) << 16 for j in range(4)]
        out[lane, :14] = plain[:1] + plain[:2] + plain + trans[:1] + trans[:2] + trans
    return out


def test_ldmatrix_follows_the_ptx_isa_mapping():
    m = np.random.default_rng(1).integers(0, 2**16, (4, 8, 8), dtype=np.uint16)
    out = np.zeros(32 * 16, np.uint32)
    launch(K.LDMATRIX, "ldmatrix", grid=(1,), block=(32,), args=[m, out])
    np.testing.assert_array_equal(out.reshape(32, 16), _ldmatrix_reference(m))


# ---- mma.sync -------------------------------------------------------------------------------------
# Fragment layouts from the platform notes (checked on an H100): g = lane >> 2, t = lane & 3.

def _frag(mat, lane_i_to_rc, per_lane, dtype):
    vals = np.zeros((32, per_lane), dtype)
    for lane in range(32):
        for i in range(per_lane):
            vals[lane, i] = mat[lane_i_to_rc(lane, i)]
    return vals


def _a16(lane, i):
    g, t = lane >> 2, lane & 3
    return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)


def _b16(lane, i):
    g, t = lane >> 2, lane & 3
    return 2 * t + (i & 1) + 8 * (i >> 1), g


def _c(lane, i):
    g, t = lane >> 2, lane & 3
    return g + 8 * (i >> 1), 2 * t + (i & 1)


def _a8(lane, i):
    g, t = lane >> 2, lane & 3
    return g + 8 * ((i >> 2) & 1), 4 * t + (i & 3) + 16 * (i >> 3)


def _b8(lane, i):
    g, t = lane >> 2, lane & 3
    return 4 * t + (i & 3) + 16 * (i >> 2), g


def _run_mma(kernel, entry, a_words, b_words, c_words, warps):
    d = np.zeros_like(c_words)
    launch(kernel, entry, grid=(1,), block=(32 * warps,), args=[a_words, b_words, c_words, d])
    return d


@pytest.mark.parametrize("form", ["f16", "bf16"])
@settings(max_examples=6)
@given(seed=st.integers(0, 2**32 - 1), warps=st.integers(1, 3))
def test_mma_f16_bf16_against_numpy(form, seed, warps):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    half = np.float16 if form == "f16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((warps, 16, 16)).astype(half)
    B = rng.standard_normal((warps, 16, 8)).astype(half)
    C = rng.standard_normal((warps, 16, 8)).astype(np.float32)
    a = np.stack([_frag(A[w], _a16, 8, half) for w in range(warps)]).view(np.uint32).reshape(-1)
    b = np.stack([_frag(B[w], _b16, 4, half) for w in range(warps)]).view(np.uint32).reshape(-1)
    c = np.stack([_frag(C[w], _c, 4, np.float32) for w in range(warps)]).view(np.uint32).reshape(-1)
    kernel, entry = (K.MMA_F16, "mma_f16") if form == "f16" else (K.MMA_BF16, "mma_bf16")
    d = _run_mma(kernel, entry, a, b, c, warps).view(np.float32).reshape(warps, 32, 4)
    for w in range(warps):
        ref = (A[w].astype(np.float64) @ B[w].astype(np.float64) + C[w]).astype(np.float32)
        np.testing.assert_array_equal(d[w], _frag(ref, _c, 4, np.float32))


@pytest.mark.parametrize("sat", [False, True])
@settings(max_examples=6)
@given(seed=st.integers(0, 2**32 - 1))
def test_mma_s8_exact_with_wraparound_or_satfinite(sat, seed):
    rng = np.random.default_rng(seed)
    A = rng.integers(-128, 128, (16, 32), dtype=np.int8)
    B = rng.integers(-128, 128, (32, 8), dtype=np.int8)
    C = rng.integers(-2**31, 2**31, (16, 8), dtype=np.int64)
    C[:4] = 2**31 - 1 - rng.integers(0, 100, (4, 8))         # near the top: the sum overflows
    C[4:8] = -2**31 + rng.integers(0, 100, (4, 8))
    C = C.astype(np.int32)
    a = _frag(A, _a8, 16, np.int8).view(np.uint32).reshape(-1)
    b = _frag(B, _b8, 8, np.int8).view(np.uint32).reshape(-1)
    c = _frag(C, _c, 4, np.int32).view(np.uint32).reshape(-1)
    kernel, entry = (K.MMA_S8_SAT, "mma_s8_sat") if sat else (K.MMA_S8, "mma_s8")
    d = _run_mma(kernel, entry, a, b, c, 1).view(np.int32).reshape(32, 4)
    exact = A.astype(np.int64) @ B.astype(np.int64) + C
    ref = np.clip(exact, -2**31, 2**31 - 1) if sat else (exact + 2**31) % 2**32 - 2**31
    np.testing.assert_array_equal(d, _frag(ref.astype(np.int32), _c, 4, np.int32))


def test_mma_with_a_partial_warp_raises():
    words = np.zeros(32 * 4, np.uint32)
    with pytest.raises(SimulationError, match="warp-collective"):
        launch(K.MMA_PARTIAL, "mma_partial", grid=(1,), block=(32,),
               args=[words, np.zeros(64, np.uint32), words, words.copy()])
    with pytest.raises(SimulationError, match="needs a whole warp"):
        launch(K.MMA_F16, "mma_f16", grid=(1,), block=(48,),
               args=[np.zeros(48 * 4, np.uint32), np.zeros(96, np.uint32), np.zeros(48 * 4, np.uint32),
                     np.zeros(48 * 4, np.uint32)])


# ---- a tiled GEMM: cp.async + ldmatrix(.trans) + mma.sync ---------------------------------------

@pytest.mark.parametrize("m,n,k", [(64, 64, 32), (128, 64, 96), (64, 128, 64)])
def test_tiled_gemm_f16(m, n, k):
    rng = np.random.default_rng(m * n + k)
    A = rng.standard_normal((m, k)).astype(np.float16)
    B = rng.standard_normal((k, n)).astype(np.float16)
    C = np.zeros((m, n), np.float32)
    launch(K.GEMM_F16, "gemm_f16", grid=(n // 64, m // 64), block=(128,), args=[A, B, C, m, n, k])
    ref = A.astype(np.float64) @ B.astype(np.float64)
    # each mma rounds its 16-term partial sum into the f32 accumulator: error ~ k/16 roundings
    np.testing.assert_allclose(C, ref, rtol=0, atol=1e-5 * np.abs(A).max() * np.abs(B).max() * k)


def test_dynamic_shared_block_scopes_packing_and_float_functions():
    n = 64
    x = np.random.default_rng(3).uniform(-3, 3, n).astype(np.float32)
    x[:3] = [0.5, -2.0, 10.0]
    out = np.zeros(n * 12, np.uint32)
    launch(K.MISC, "misc", grid=(1,), block=(n,), args=[x, out], dynamic_shared_bytes=4 * n)
    out = out.reshape(n, 12)
    bits = x.view(np.uint32)
    np.testing.assert_array_equal(out[:, 0].view(np.float32), x[::-1])
    swapped = (bits >> 16) | (bits << 16)
    np.testing.assert_array_equal(out[:, 1], swapped)
    assert (out[:, 2] == 7).all()                       # the outer %h1, not the block's
    np.testing.assert_array_equal(out[:, 3], bits)
    np.testing.assert_array_equal(out[:, 4], swapped)
    np.testing.assert_allclose(out[:, 5].view(np.float32), np.exp2(x.astype(np.float64) / 4), rtol=2**-22)
    np.testing.assert_allclose(out[:, 6].view(np.float32), 1 / x.astype(np.float64), rtol=2**-22)
    np.testing.assert_array_equal(out[:, 7].view(np.float32), np.abs(x))
    scaled = np.trunc((x * np.float32(100)).astype(np.float64)).astype(np.int32)
    np.testing.assert_array_equal(out[:, 9].view(np.int32), scaled)
    np.testing.assert_array_equal(out[:, 8], np.clip(scaled, 0, 255))


def test_dynamic_shared_too_small_faults():
    with pytest.raises(SimulationError, match="st.shared.f32.*shared address"):
        launch(K.MISC, "misc", grid=(1,), block=(64,), args=[np.zeros(64, np.float32), np.zeros(64 * 12, np.uint32)],
               dynamic_shared_bytes=128)


# ---- random straight-line integer programs against a Python-integer model --------------------------

M32 = 0xFFFFFFFF


def _s(v):
    return v - (1 << 32) if v & 0x80000000 else v


def _tdiv(p, q):
    r = abs(p) // abs(q)
    return r if (p < 0) == (q < 0) else -r


# opcode -> Python semantics on 32-bit patterns (a, b, c unsigned ints)
_BINOPS = {
    "add.s32": lambda a, b: a + b,
    "sub.s32": lambda a, b: a - b,
    "mul.lo.s32": lambda a, b: a * b,
    "mul.hi.s32": lambda a, b: (_s(a) * _s(b)) >> 32,
    "mul.hi.u32": lambda a, b: (a * b) >> 32,
    "and.b32": lambda a, b: a & b,
    "or.b32": lambda a, b: a | b,
    "xor.b32": lambda a, b: a ^ b,
    "shl.b32": lambda a, b: a << b if b < 32 else 0,
    "shr.u32": lambda a, b: a >> b if b < 32 else 0,
    "shr.s32": lambda a, b: _s(a) >> min(b, 31),
    "min.s32": lambda a, b: min(_s(a), _s(b)),
    "max.u32": lambda a, b: max(a, b),
    "div.u32": lambda a, b: a // (b | 1),
    "rem.s32": lambda a, b: _s(a) - _tdiv(_s(a), _s(b | 1)) * _s(b | 1),
}
_CMPS = {"lt.s32": lambda a, b: _s(a) < _s(b), "hs.u32": lambda a, b: a >= b, "eq.s32": lambda a, b: a == b,
         "ne.b32": lambda a, b: a != b, "le.s32": lambda a, b: _s(a) <= _s(b), "hi.u32": lambda a, b: a > b}


@st.composite
def _programs(draw):
    lines, model = [], []
    for _ in range(draw(st.integers(4, 24))):
        d, a, b = (draw(st.integers(0, 7)) for _ in range(3))
        guard = draw(st.sampled_from([None, None, "@%p1 ", "@!%p1 "]))
        kind = draw(st.sampled_from(["bin", "bin", "bin", "setp", "selp", "mad", "imm"]))
        if kind == "bin":
            op = draw(st.sampled_from(sorted(_BINOPS)))
            if op in ("div.u32", "rem.s32"):    # divisors made odd, never zero
                lines.append(f"or.b32 %t, %r{b}, 1;")
                lines.append(f"{guard or ''}{op} %r{d}, %r{a}, %t;")
            else:
                lines.append(f"{guard or ''}{op} %r{d}, %r{a}, %r{b};")
        elif kind == "imm":
            op = draw(st.sampled_from(["add.s32", "shl.b32", "shr.s32", "and.b32", "xor.b32"]))
            imm = draw(st.integers(0, 40) if op.startswith("sh") else st.integers(-2**31, 2**31 - 1))
            lines.append(f"{guard or ''}{op} %r{d}, %r{a}, {imm};")
            b = ("imm", imm & M32)
        elif kind == "setp":
            op = draw(st.sampled_from(sorted(_CMPS)))
            lines.append(f"{guard or ''}setp.{op} %p1, %r{a}, %r{b};")
        elif kind == "selp":
            lines.append(f"{guard or ''}selp.b32 %r{d}, %r{a}, %r{b}, %p1;")
        else:
            c = draw(st.integers(0, 7))
            lines.append(f"{guard or ''}mad.lo.s32 %r{d}, %r{a}, %r{b}, %r{c};")
            b = (b, c)
        model.append((kind, lines[-1], d, a, b, guard))
    return lines, model


def _run_model(model, regs):
    regs = list(regs)
    p = regs[0] != 0                   # the kernel sets %p1 before the program
    for kind, line, d, a, b, guard in model:
        if guard is not None and p != (guard == "@%p1 "):
            continue
        op = line.split()[1] if guard else line.split()[0]
        if kind == "bin":
            regs[d] = _BINOPS[op](regs[a], regs[b]) & M32
        elif kind == "imm":
            regs[d] = _BINOPS[op](regs[a], b[1]) & M32
        elif kind == "setp":
            p = _CMPS[op[5:]](regs[a], regs[b])
        elif kind == "selp":
            regs[d] = regs[a] if p else regs[b]
        else:
            regs[d] = (regs[a] * regs[b[0]] + regs[b[1]]) & M32
    return regs


def _program_ptx(lines):
    body = "\n    ".join(lines)
    return K.HEADER + f"""
.visible .entry prog(.param .u64 pio)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b32 %t;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [pio];
    mov.u32 %t, %tid.x;
    mul.wide.u32 %rd2, %t, 32;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.v4.b32 {{%r0, %r1, %r2, %r3}}, [%rd3];
    ld.global.v4.b32 {{%r4, %r5, %r6, %r7}}, [%rd3+16];
    setp.ne.b32 %p1, %r0, 0;
    {body}
    st.global.v4.b32 [%rd3], {{%r0, %r1, %r2, %r3}};
    st.global.v4.b32 [%rd3+16], {{%r4, %r5, %r6, %r7}};
    ret;
}}
"""


@settings(max_examples=25)
@given(prog=_programs(), seed=st.integers(0, 2**32 - 1))
def test_random_integer_programs_match_a_python_model(prog, seed):
    lines, model = prog
    rng = np.random.default_rng(seed)
    n = 64
    io = rng.integers(0, 2**32, (n, 8), dtype=np.uint64).astype(np.uint32)
    edges = np.array([0, 1, M32, 0x80000000, 0x7FFFFFFF, 33, 31, 32], np.uint32)
    io[:8] = edges[:, None]
    io[8:16] = edges[None, :]
    ref = np.array([_run_model(model, [int(v) for v in row]) for row in io], np.uint64).astype(np.uint32)
    ptx = _program_ptx(lines)
    launch(ptx, "prog", grid=(1,), block=(n,), args=[io])
    np.testing.assert_array_equal(io, ref)
    if shutil.which("ptxas"):                 # the generated program is real PTX
        r = subprocess.run(["ptxas", "-arch=sm_80", "-o", "/dev/null", "-"], input=ptx, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


# ---- races between warps -----------------------------------------------------------------------

def test_missing_barrier_in_a_reduction_is_a_race():
    racy = K.REDUCE.replace("SKIP:\n    bar.sync 0;", "SKIP:")
    assert racy != K.REDUCE
    x = np.ones(256, np.float32)
    with pytest.raises(SimulationError, match=r"ld.shared.f32 %f2.*thread \(0, 0, 0\).*race: reads what another warp"):
        launch(racy, "reduce", grid=(1,), block=(256,), args=[x, np.zeros(1, np.float32), 256])


def test_overwriting_a_stage_other_warps_still_read_is_a_race():
    head, tail = K.GEMM_F16.split("    bar.sync 0;\n    add.s64 %rd5, %rd5, 64;")
    racy = head + "    add.s64 %rd5, %rd5, 64;" + tail        # no barrier before the next tile's copies
    A, B = np.ones((64, 64), np.float16), np.ones((64, 64), np.float16)
    with pytest.raises(SimulationError, match=r"cp.async.cg.*race: overwrites what another warp read"):
        launch(racy, "gemm_f16", grid=(1, 1), block=(128,), args=[A, B, np.zeros((64, 64), np.float32), 64, 64, 64])


def _directed(exact: Fraction, rn_bits: int, value_of, mode: str) -> int:
    """The 16-bit pattern of `exact` rounded by `mode`, chosen among the round-to-nearest pattern
    and its neighbours (on sign-magnitude patterns +-1 steps the magnitude; from a zero, the
    smallest subnormal of the other sign), compared exactly."""
    if mode == "rn":
        return rn_bits
    cands = {b for b in (rn_bits - 1, rn_bits, rn_bits + 1) if 0 <= b < 2**16}
    if rn_bits & 0x7FFF == 0:
        cands.add((rn_bits ^ 0x8000) | 1)
    key = {b: (Fraction(v) if np.isfinite(v) else v) for b in cands if not np.isnan(v := value_of(b))}
    if mode == "rz":
        ok = [b for b, k in key.items()
              if np.isfinite(value_of(b)) and abs(k) <= abs(exact) and (k == 0 or (k > 0) == (exact > 0))]
        return max(ok, key=lambda b: abs(key[b]))
    if mode == "rm":
        return max((b for b, k in key.items() if k <= exact), key=lambda b: key[b])
    return min((b for b, k in key.items() if k >= exact), key=lambda b: key[b])


@settings(max_examples=8)
@given(seed=st.integers(0, 2**32 - 1))
def test_cvt_rounding_modes_and_relu(seed):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(seed)
    n = 64
    fx = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 5, n)).astype(np.float32)
    fx[:4] = [1e6, -1e6, 0.0, -1e-9]          # f16 overflow both ways; a tiny negative
    ix = rng.integers(-2**31, 2**31, n).astype(np.int32)
    out = np.zeros(n * 12, np.uint32)
    launch(K.CVT_MODES, "cvt_modes", grid=(1,), block=(n,), args=[fx, ix, out])
    out = out.reshape(n, 12)
    halves = np.ascontiguousarray(out[:, :6]).view(np.uint16).reshape(n, 12)
    f16_of = lambda b: float(np.uint16(b).view(np.float16))                              # noqa: E731
    bf16_of = lambda b: float(np.uint16(b).view(ml_dtypes.bfloat16))                     # noqa: E731
    for i, x in enumerate(fx.tolist()):
        exact = Fraction(x)
        with np.errstate(over="ignore"):
            rn16 = int(np.float16(x).view(np.uint16))
        rnbf = int(np.float32(x).astype(ml_dtypes.bfloat16).view(np.uint16))
        want = [_directed(exact, rn16, f16_of, m) for m in ("rn", "rz", "rm", "rp")] + \
               [_directed(exact, rnbf, bf16_of, m) for m in ("rn", "rz", "rm", "rp")]
        want += [rn16 if x >= 0 else 0, rnbf if x >= 0 else 0]
        assert halves[i, :10].tolist() == want, (x, halves[i, :10].tolist(), want)
    for i, v in enumerate(ix.tolist()):
        got = out[i, [6, 7, 8, 9]].view(np.float32).tolist()
        exact = Fraction(v)
        rn = float(np.float32(v))
        nb = {rn, *(float(np.nextafter(np.float32(rn), np.float32(d))) for d in (np.inf, -np.inf))}
        assert got[0] == rn
        assert got[1] == max((c for c in nb if abs(Fraction(c)) <= abs(exact)), key=abs)
        assert got[2] == max(c for c in nb if Fraction(c) <= exact)
        assert got[3] == min(c for c in nb if Fraction(c) >= exact)


def test_divergent_bra_uni_raises():
    with pytest.raises(SimulationError, match=r"bra.uni diverges: thread \(5, 0, 0\)"):
        launch(K.BRA_UNI_DIVERGES, "bra_uni", grid=(1,), block=(32,), args=[np.zeros(1, np.uint32)])
    launch(K.BRA_UNI_DIVERGES, "bra_uni", grid=(1,), block=(5,), args=[np.zeros(1, np.uint32)])   # uniform: fine


# ---- random control flow: divergent threads against the same threads run one by one -------------

@st.composite
def _cfgs(draw):
    """A random control-flow graph of basic blocks with thread-dependent conditional branches,
    forward and backward (loops); every block spends one unit of fuel, so every thread ends."""
    nblocks = draw(st.integers(2, 7))
    lines = []
    for blk in range(nblocks):
        lines += [f"B{blk}:", "sub.s32 %fuel, %fuel, 1;", "setp.le.s32 %pf, %fuel, 0;", "@%pf bra EXIT;"]
        for _ in range(draw(st.integers(0, 3))):
            op = draw(st.sampled_from(["add.s32", "xor.b32", "mul.lo.s32", "shr.u32", "min.s32", "sub.s32"]))
            d, a, b = (draw(st.integers(0, 3)) for _ in range(3))
            lines.append(f"{op} %r{d}, %r{a}, %r{b};")
        term = draw(st.sampled_from(["fall", "cond", "cond", "jump", "exit"]))
        target = f"B{draw(st.integers(0, nblocks - 1))}"
        if term == "cond":
            cmp = draw(st.sampled_from(["lt.s32", "ne.b32", "hi.u32"]))
            a, b = draw(st.integers(0, 3)), draw(st.integers(0, 3))
            lines += [f"and.b32 %t, %r{b}, 7;", f"setp.{cmp} %p1, %r{a}, %t;", f"@%p1 bra {target};"]
        elif term == "jump":
            lines.append(f"bra.uni {target};")
        elif term == "exit":
            lines.append("bra.uni EXIT;")
    return lines


def _cfg_ptx(lines):
    body = "\n".join(line if line.endswith(":") else "    " + line for line in lines)
    return K.HEADER + f"""
.visible .entry cfg(.param .u64 pio, .param .u32 fuel)
{{
    .reg .pred %p1, %pf;
    .reg .b32 %r<4>;
    .reg .b32 %t, %fuel, %id;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [pio];
    ld.param.u32 %fuel, [fuel];
    mov.u32 %t, %ctaid.x;
    mov.u32 %id, %ntid.x;
    mov.u32 %r0, %tid.x;
    mad.lo.s32 %id, %t, %id, %r0;
    mul.wide.u32 %rd2, %id, 16;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.v4.b32 {{%r0, %r1, %r2, %r3}}, [%rd3];
{body}
EXIT:
    st.global.v4.b32 [%rd3], {{%r0, %r1, %r2, %r3}};
    ret;
}}
"""


@settings(max_examples=20)
@given(lines=_cfgs(), fuel=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_divergent_control_flow_matches_threads_run_alone(lines, fuel, seed):
    """One CTA of 64 divergent threads computes what 64 one-thread CTAs compute: the per-thread
    PCs and their reconvergence change nothing but the order of independent work."""
    rng = np.random.default_rng(seed)
    io = rng.integers(0, 2**32, (64, 4), dtype=np.uint64).astype(np.uint32)
    io[:, 0] = np.arange(64)                       # make the branches depend on the thread
    alone = io.copy()
    ptx = _cfg_ptx(lines)
    launch(ptx, "cfg", grid=(1,), block=(64,), args=[io, fuel])
    launch(ptx, "cfg", grid=(64,), block=(1,), args=[alone, fuel])
    np.testing.assert_array_equal(io, alone)
    if shutil.which("ptxas"):
        r = subprocess.run(["ptxas", "-arch=sm_80", "-o", "/dev/null", "-"], input=ptx, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_ctas_writing_each_others_output_is_a_race():
    out = np.zeros(4 * 32, np.uint32)
    launch(K.OVERLAP, "overlap", grid=(4,), block=(32,), args=[out, 32])
    np.testing.assert_array_equal(out, np.repeat(np.arange(4), 32))
    with pytest.raises(SimulationError, match=r"CTA \(1, 0, 0\).*global-memory race: overwrites what another CTA "
                                              r"wrote since the launch began"):
        launch(K.OVERLAP, "overlap", grid=(4,), block=(32,), args=[out, 31])


def test_non_coherent_load_of_data_written_in_the_launch_raises():
    x, out, check = np.arange(32, dtype=np.uint32), np.zeros(32, np.uint32), np.full(32, 9, np.uint32)
    launch(K.NC_AFTER_STORE, "nc_after_store", grid=(1,), block=(32,), args=[x, out, check])
    np.testing.assert_array_equal(out, check)
    with pytest.raises(SimulationError, match=r"ld.global.nc.u32 %r4.*non-coherent cache \(.nc\) a byte written"):
        launch(K.NC_AFTER_STORE, "nc_after_store", grid=(1,), block=(32,), args=[x, out, out])


def test_a_warp_reconverges_before_a_collective():
    assert "EVENS:" in K.LDMATRIX_AFTER_DIVERGENCE
    m = np.random.default_rng(2).integers(0, 2**16, (4, 8, 8), dtype=np.uint16)
    out = np.zeros(32 * 16, np.uint32)
    launch(K.LDMATRIX_AFTER_DIVERGENCE, "ldmatrix_diverged", grid=(1,), block=(32,), args=[m, out])
    np.testing.assert_array_equal(out.reshape(32, 16), _ldmatrix_reference(m))


def test_launch_respects_maxntid_and_reqntid():
    a = np.zeros(256, np.float32)
    capped = K.VADD.replace(".param .u32 n\n)", ".param .u32 n\n)\n.maxntid 128, 1, 1")
    exact = K.VADD.replace(".param .u32 n\n)", ".param .u32 n\n)\n.reqntid 64")
    assert capped != K.VADD and exact != K.VADD
    launch(capped, "vadd", grid=(2,), block=(128,), args=[a, a, a, 256])
    launch(exact, "vadd", grid=(4,), block=(64,), args=[a, a, a, 256])
    with pytest.raises(ArgumentError, match=r"maxntid \(128, 1, 1\)"):
        launch(capped, "vadd", grid=(1,), block=(256,), args=[a, a, a, 256])
    with pytest.raises(ArgumentError, match=r"reqntid \(64, 1, 1\)"):
        launch(exact, "vadd", grid=(2,), block=(32, 2), args=[a, a, a, 256])
