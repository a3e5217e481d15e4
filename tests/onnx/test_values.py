"""Constant arrays laid out for the kernels: the tiled transposition is numpy's."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loopstack.onnx import values


@st.composite
def arrays_and_axes(draw):
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=4)))
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape), tuple(draw(st.permutations(range(len(shape)))))


@settings(max_examples=60, deadline=None)
@given(arrays_and_axes(), st.integers(1, 4))
def test_tiled_transposition_is_numpys(case, block):
    """Tiles of 1-4 elements (the real tile is 64) over small shapes: every tail and permutation."""
    arr, axes = case
    got = values.transposed(arr, axes, block)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, np.transpose(arr, axes))
