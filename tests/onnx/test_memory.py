"""Buffer placement by liveness: buffers alive at the same time never share a byte."""
from hypothesis import given
from hypothesis import strategies as st

from loopstack.onnx.memory import ALIGN, Interval, peak_live, plan


@st.composite
def intervals(draw):
    n = draw(st.integers(1, 30))
    out = []
    for i in range(n):
        start = draw(st.integers(0, 40))
        end = start + draw(st.integers(0, 10))
        out.append(Interval(f"b{i}", draw(st.integers(1, 5000)), start, end))
    return out


@given(intervals())
def test_overlapping_lifetimes_never_share_bytes(ivs):
    offsets, arena = plan(ivs)
    assert set(offsets) == {iv.name for iv in ivs}
    for i, a in enumerate(ivs):
        assert offsets[a.name] % ALIGN == 0
        assert offsets[a.name] + a.nbytes <= arena
        for b in ivs[i + 1:]:
            if a.start <= b.end and b.start <= a.end:
                lo_a, lo_b = offsets[a.name], offsets[b.name]
                assert lo_a + a.nbytes <= lo_b or lo_b + b.nbytes <= lo_a, (a, b, lo_a, lo_b)


@given(intervals())
def test_arena_is_at_least_the_peak_and_reuses_dead_buffers(ivs):
    offsets, arena = plan(ivs)
    assert arena >= peak_live(ivs)
    assert arena <= sum(-(-iv.nbytes // ALIGN) * ALIGN for iv in ivs)


def test_a_chain_reuses_two_buffers():
    ivs = [Interval(f"t{i}", 1024, i, i + 1) for i in range(10)]
    offsets, arena = plan(ivs)
    assert arena == 2 * 1024
    assert len(set(offsets.values())) == 2
