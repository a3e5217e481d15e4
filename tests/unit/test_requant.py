"""The requantization epilogue, bit for bit against onnxruntime's QLinearMatMul.

A loop tree `Y[m, n] = requant(sum_k (A - a_zp) * (B - b_zp))` with the combined scale
`a_scale * b_scale / y_scale` (float32, per tensor or per output column) runs in the reference
interpreter; onnxruntime runs the ONNX operator on the same bytes. Every output byte must agree.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from loopstack.backend import compile
from loopstack.errors import DTypeError, ScheduleError, ShapeError
from loopstack.looptree.builders import access, make_tree, nest
from loopstack.looptree.ir import Binary, Buffer, Compute, Const, Load, Requant
from loopstack.looptree.verify import verify

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle for QLinearMatMul")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

NP_TO_ONNX = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def qlinear_matmul_ort(A, a_scale, a_zp, B, b_scale, b_zp, y_scale, y_zp):
    names = ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"]
    vals = [A, np.float32(a_scale), a_zp, B, np.asarray(b_scale, np.float32), b_zp, np.float32(y_scale), y_zp]
    inits = [helper.make_tensor(n, NP_TO_ONNX.get(np.asarray(v).dtype, TensorProto.FLOAT), np.shape(v),
                                np.asarray(v).flatten().tolist()) for n, v in zip(names, vals) if n not in ("a",)]
    inits = [i for i in inits if i.name != "b"] + [helper.make_tensor("b", NP_TO_ONNX[B.dtype], B.shape, B.flatten().tolist())]
    y_type = NP_TO_ONNX[np.asarray(y_zp).dtype]
    graph = helper.make_graph(
        [helper.make_node("QLinearMatMul", names, ["y"])], "q",
        [helper.make_tensor_value_info("a", NP_TO_ONNX[A.dtype], A.shape)],
        [helper.make_tensor_value_info("y", y_type, (A.shape[0], B.shape[1]))], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"a": A})[0]


def requant_tree(M, N, K, a_dt, b_dt, y_dt, a_zp, b_zp, scale, y_zp):
    per_column = np.ndim(scale) == 1
    bufs = [Buffer("A", a_dt, (M, K), "input"), Buffer("B", b_dt, (K, N), "input")]
    if per_column:
        bufs.append(Buffer("S", "float32", (N,), "input"))
    bufs.append(Buffer("Y", y_dt, (M, N), "output"))
    product = Binary("mul", Binary("sub", Load(access("A", "m", "k")), Const(a_zp)),
                     Binary("sub", Load(access("B", "k", "n")), Const(b_zp)))
    s = Load(access("S", "n")) if per_column else Const(float(scale))
    stmt = Compute("Y", access("Y", "m", "n"), product, reduce="add", init="identity", requant=Requant(s, y_zp))
    return make_tree(bufs, {"m": M, "n": N, "k": K}, nest([("m", 1), ("n", 1), ("k", 1)], stmt))


def ints(rng, dt, shape):
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, shape).astype(dt)


@settings(max_examples=30, deadline=None)
@given(M=st.integers(1, 6), N=st.integers(1, 12), K=st.integers(1, 40),
       a_dt=st.sampled_from(["uint8", "int8"]), per_column=st.booleans(), seed=st.integers(0, 2**31))
def test_requant_matches_onnxruntime_qlinearmatmul(M, N, K, a_dt, per_column, seed):
    y_dt = a_dt     # onnxruntime implements QLinearMatMul with y of a's type
    rng = np.random.default_rng(seed)
    A, B = ints(rng, a_dt, (M, K)), ints(rng, "int8", (K, N))
    a_zp, b_zp, y_zp = (ints(rng, a_dt, ()), np.int8(0), ints(rng, y_dt, ()))
    a_scale = np.float32(rng.uniform(0.001, 0.05))
    b_scale = rng.uniform(0.001, 0.05, N).astype(np.float32) if per_column else np.float32(rng.uniform(0.001, 0.05))
    y_scale = np.float32(rng.uniform(0.01, 2.0))
    scale = (np.float32(a_scale) * b_scale) / y_scale     # float32 throughout, as onnxruntime does
    want = qlinear_matmul_ort(A, a_scale, a_zp, B, b_scale, b_zp, y_scale, y_zp)
    tree = requant_tree(M, N, K, a_dt, "int8", y_dt, int(a_zp), int(b_zp), scale, int(y_zp))
    args = [A, B] + ([np.asarray(scale, np.float32)] if per_column else [])
    got = np.zeros((M, N), y_dt)
    compile(tree, target="interp")(*args, got)
    np.testing.assert_array_equal(got, want)


def test_requant_saturates_and_rounds_half_to_even():
    # acc = 5, 15, 25, -5 with scale 0.1 -> 0.5, 1.5, 2.5, -0.5 -> 0, 2, 2, -0 (half to even)
    tree = requant_tree(1, 4, 1, "int8", "int8", "int8", 0, 0, 0.1, 0)
    Y = np.zeros((1, 4), np.int8)
    compile(tree, target="interp")(np.array([[5]], np.int8), np.array([[1, 3, 5, -1]], np.int8), Y)
    np.testing.assert_array_equal(Y, [[0, 2, 2, 0]])
    big = requant_tree(1, 2, 4, "uint8", "int8", "uint8", 0, 0, 1.0, 10)
    Y = np.zeros((1, 2), np.uint8)
    compile(big, target="interp")(np.full((1, 4), 255, np.uint8), np.array([[127, -128]] * 4, np.int8), Y)
    np.testing.assert_array_equal(Y, [[255, 0]])    # 129550 and -130560, saturated after + 10


@pytest.mark.parametrize("change, error, words", [
    (dict(y_dt="int32"), DTypeError, "requant writes int8 or uint8"),
    (dict(y_zp=300), ShapeError, "zero point 300 is outside int8"),
])
def test_malformed_requant_is_refused(change, error, words):
    kw = dict(M=2, N=2, K=2, a_dt="uint8", b_dt="int8", y_dt="int8", a_zp=0, b_zp=0, scale=0.5, y_zp=0)
    kw.update(change)
    with pytest.raises(error, match=words):
        verify(requant_tree(**kw))


def test_a_requantized_sum_needs_an_init():
    tree = requant_tree(2, 2, 2, "uint8", "int8", "int8", 0, 0, 0.5, 0)
    (stack, stmt), = tree.computes()
    from dataclasses import replace
    from loopstack.looptree.ir import LoopTree
    bad = LoopTree(tree.buffers, tree.dims, (nest([("m", 1), ("n", 1), ("k", 1)], replace(stmt, init=None)),))
    with pytest.raises(ScheduleError, match="needs an init"):
        verify(bad)
