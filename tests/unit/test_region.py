"""backend/region.py: the huge-page region a compiled model carves its arrays from."""
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopstack.backend.region import HUGE_PAGE, Region

DTYPES = st.sampled_from([np.float32, np.int8, np.uint8, np.int32, np.float64])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 70), min_size=1, max_size=3), DTYPES), min_size=1, max_size=12))
def test_arrays_are_zeroed_aligned_and_disjoint(requests):
    """A small chunk, so that the requests span several and some fill one exactly."""
    region = Region(chunk=HUGE_PAGE)
    arrays = [region.array(tuple(shape), dt) for shape, dt in requests]
    spans = []
    for a, (shape, dt) in zip(arrays, requests):
        assert a.shape == tuple(shape) and a.dtype == dt and a.flags.c_contiguous and a.flags.writeable
        assert not a.any()
        if a.nbytes:     # (an empty array addresses nothing: numpy need not advance its pointer)
            assert a.ctypes.data % 64 == 0
            spans.append((a.ctypes.data, a.ctypes.data + a.nbytes))
    spans.sort()
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    for i, a in enumerate(arrays):       # each keeps its values however the others are written
        a.reshape(-1)[...] = i + 1
    for i, a in enumerate(arrays):
        assert (a == i + 1).all()
    assert region.used >= sum(a.nbytes for a in arrays)
    assert all(region.holds(a) for a in arrays if a.nbytes) and not region.holds(np.zeros(4))


def test_an_array_larger_than_a_chunk_gets_one_of_its_own():
    region = Region(chunk=HUGE_PAGE)
    small = region.array((10,), np.float32)
    big = region.array((3 * HUGE_PAGE // 4 + 5,), np.float32)
    big[-1], small[0] = 7.0, 3.0
    assert region.chunks == 2 and big[-1] == 7.0 and small[0] == 3.0


def test_copy_holds_the_values_in_the_region():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    region = Region()
    c = region.copy(a)
    np.testing.assert_array_equal(c, a)
    assert not np.shares_memory(c, a) and c.ctypes.data % 64 == 0


def _thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.index("[") + 1: text.index("]")]


def test_the_region_is_advised_onto_huge_pages_where_the_kernel_has_them():
    mode = _thp_mode()
    if mode not in ("always", "madvise") or os.name != "posix":
        pytest.skip(f"transparent huge pages are not offered here (mode {mode!r})")
    region = Region()
    a = region.array((1000,), np.float32)
    assert region.huge and a.ctypes.data % HUGE_PAGE == 0      # the first array opens a huge page


def test_a_compiled_models_layers_read_its_region():
    """Every constant a layer reads and every intermediate buffer are the model's region's;
    the model still computes what onnxruntime does."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    import loopstack as lt

    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    dw = rng.standard_normal((16, 1, 3, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["r"]),
                           helper.make_node("Conv", ["r", "dw"], ["y"], pads=[1, 1, 1, 1], group=16)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(dw, "dw")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    model = lt.onnx.compile(m, threads=1)
    consts = [a[1] for L in model.layers for i, a in enumerate(L.args)
              if a[0] == "const" and i in L.kernel.per_call_reads()]
    assert consts and all(model._region.holds(c) for c in consts)
    assert all(model._region.holds(v) for v in model._views.values())
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-5)


def test_a_constant_only_packed_at_bind_time_is_not_copied():
    """A Gemm at batch 1 packs its matrix when bound: the calls read the packed copy (made in
    the region), so the matrix itself is not copied; its bias, read by every call, is."""
    from onnx import TensorProto, helper, numpy_helper

    import loopstack as lt

    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((300, 200)).astype(np.float32), rng.standard_normal(200).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 300])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    model = lt.onnx.compile(m, threads=1)
    (layer,) = model.layers
    consts = {a[1].shape: a[1] for a in layer.args if a[0] == "const"}
    assert not model._region.holds(consts[(300, 200)]) and model._region.holds(consts[(200,)])
    x = rng.standard_normal((1, 300)).astype(np.float32)
    np.testing.assert_allclose(model(x), x @ w + b, rtol=1e-4, atol=1e-4)
