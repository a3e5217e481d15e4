"""The int8 ONNX operators against onnxruntime, bit-exact: random QLinearConv, QLinearMatMul,
ConvInteger and MatMulInteger graphs (hypothesis), the int8 kernels they compile to, and the
QuantizeLinear / DequantizeLinear steps."""
import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import loopstack as lt
from loopstack.onnx import models
from loopstack.isa import cpu
from loopstack.looptree.ir import Loop

ONNX_TYPE = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8, "int32": TensorProto.INT32,
             "float32": TensorProto.FLOAT}


def ints(rng, dt, shape):
    info = np.iinfo(dt)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dt)


def model(nodes, inputs, out_dtype, inits=(), opset=13):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, ONNX_TYPE[a.dtype.name], a.shape)
                                       for n, a in inputs.items()],
                          [helper.make_tensor_value_info("y", ONNX_TYPE[out_dtype], None)],
                          [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def ort_run(m, inputs):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)[0]


def check_exact(m, inputs, target=None):
    """loopstack's result equals onnxruntime's, bit for bit; the compiled model."""
    want = ort_run(m, inputs)
    compiled = lt.onnx.compile(m, target=target)
    got = compiled.run(inputs)["y"]
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{len(bad)} of {got.size} differ, first at {bad[0]}: {got[tuple(bad[0])]} != " \
                          f"{want[tuple(bad[0])]}"
    return compiled


def quantized_layers(compiled):
    return [L for L in compiled.layers if L.schedule.startswith("int8")]


def check_random_graph(build, p, integer=False):
    """The graph `build(p, rng, integer)` makes, bit-exact against onnxruntime, on int8 kernels."""
    m, inputs = build(p, np.random.default_rng(p["seed"]), integer)
    assert quantized_layers(check_exact(m, inputs))


# ---------------------------------------------------------------------------- convolutions
@st.composite
def qconvs(draw):
    depthwise = draw(st.booleans())
    groups = draw(st.integers(2, 5)) if depthwise else draw(st.sampled_from([1, 1, 1, 2]))
    cg = 1 if depthwise else draw(st.integers(1, 6))
    kg = 1 if depthwise else draw(st.integers(1, 5))
    k = [draw(st.integers(1, 3)) for _ in range(2)]
    stride = [draw(st.integers(1, 2)) for _ in range(2)]
    dil = [draw(st.integers(1, 2)) for _ in range(2)]
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    hw = [draw(st.integers((k[i] - 1) * dil[i] + 1, 8)) for i in range(2)]
    x_dt = draw(st.sampled_from(["uint8", "int8"]))
    w_dt = draw(st.sampled_from(["int8", "int8", "uint8"])) if x_dt == "uint8" else "int8"
    if draw(st.integers(0, 4)) == 0:       # a 1-D convolution
        k, stride, dil, pads, hw = k[1:], stride[1:], dil[1:], pads[1::2], hw[1:]
    # onnxruntime's QLinearConv writes the activations' dtype
    return dict(groups=groups, cg=cg, kg=kg, k=k, stride=stride, dil=dil, pads=pads, hw=hw, x_dt=x_dt, w_dt=w_dt,
                auto_pad=draw(st.sampled_from(["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])),
                y_dt=x_dt, per_channel=draw(st.booleans()),
                w_zp=draw(st.booleans()), bias=draw(st.booleans()), batch=draw(st.sampled_from([1, 1, 2])),
                seed=draw(st.integers(0, 2 ** 16)))


def qconv_model(p, rng, integer=False):
    C, K = p["groups"] * p["cg"], p["groups"] * p["kg"]
    x = ints(rng, p["x_dt"], (p["batch"], C, *p["hw"]))
    w = ints(rng, p["w_dt"], (K, p["cg"], *p["k"]))
    x_zp = ints(rng, p["x_dt"], ())
    # onnxruntime's int8 x int8 kernels take symmetric weights only (zero point 0)
    w_zp = ints(rng, p["w_dt"], (K,) if p["per_channel"] else ()) if p["w_zp"] or p["w_dt"] == "uint8" else \
        np.zeros((K,) if p["per_channel"] else (), p["w_dt"])
    if p["x_dt"] == "int8" or p["w_dt"] == "int8" and not integer:
        w_zp = np.zeros_like(w_zp)
    attrs = dict(kernel_shape=p["k"], strides=p["stride"], dilations=p["dil"], group=p["groups"])
    if p.get("auto_pad", "NOTSET") == "NOTSET":
        attrs["pads"] = p["pads"]
    else:
        attrs["auto_pad"] = p["auto_pad"]
        if p["auto_pad"] != "VALID":       # onnxruntime: no dilation with SAME padding
            attrs.pop("dilations")
    if integer:
        node = helper.make_node("ConvInteger", ["x", "w", "x_zp", "w_zp"], ["y"], **attrs)
        return model([node], {"x": x}, "int32", [("w", w), ("x_zp", x_zp), ("w_zp", w_zp)], opset=10), {"x": x}
    bias = rng.integers(-20000, 20000, K).astype(np.int32) if p["bias"] else None
    return qlinear_model("QLinearConv", x, x_zp, w, w_zp, (K,) if p["per_channel"] else (),
                         p["cg"] * int(np.prod(p["k"])), rng, p["y_dt"], bias, **attrs)


def qlinear_model(op, x, x_zp, w, w_zp, w_scales, taps, rng, y_dt, bias=None, **attrs):
    """A QLinearConv / QLinearMatMul graph with random scales: the output scale spreads the
    sums of `taps` products over the output range, with some saturation."""
    x_s = np.float32(rng.uniform(0.005, 0.05))
    w_s = rng.uniform(0.005, 0.05, w_scales).astype(np.float32)
    y_s = np.float32(x_s * float(np.max(w_s)) * 128 * np.sqrt(taps) / 64)
    inits = [("x_s", x_s), ("x_zp", x_zp), ("w", w), ("w_s", w_s), ("w_zp", w_zp), ("y_s", y_s),
             ("y_zp", ints(rng, y_dt, ()))]
    names = ["x", "x_s", "x_zp", "w", "w_s", "w_zp", "y_s", "y_zp"]
    if bias is not None:
        inits.append(("b", bias))
        names.append("b")
    node = helper.make_node(op, names, ["y"], **attrs)
    return model([node], {"x": x}, y_dt, inits, opset=10), {"x": x}


@settings(max_examples=25, deadline=None)
@given(qconvs())
def test_qlinear_conv_matches_onnxruntime(p):
    check_random_graph(qconv_model, p)


@settings(max_examples=12, deadline=None)
@given(qconvs())
def test_conv_integer_matches_onnxruntime(p):
    # onnxruntime's ConvInteger takes uint8 activations and one weight zero point
    check_random_graph(qconv_model, dict(p, x_dt="uint8", per_channel=False), integer=True)


def reference_run(m, inputs):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(m).run(None, inputs)[0]


@settings(max_examples=15, deadline=None)
@given(qconvs(), st.sampled_from(["uint8", "int8"]))
def test_conv_integer_with_any_zero_points_matches_the_onnx_reference(p, w_dt):
    """Every zero point onnxruntime's kernels decline: int8 activations, per-channel and non-zero
    weight zero points of either dtype (ONNX's reference evaluator is the oracle; int32 out)."""
    assume(len(p["k"]) == 2)     # the reference evaluator's 1-D ConvInteger mis-broadcasts a per-channel zero point
    p = dict(p, w_dt=w_dt, w_zp=True)
    rng = np.random.default_rng(p["seed"])
    C, K = p["groups"] * p["cg"], p["groups"] * p["kg"]
    x = ints(rng, p["x_dt"], (p["batch"], C, *p["hw"]))
    w = ints(rng, w_dt, (K, p["cg"], *p["k"]))
    inits = [("w", w), ("x_zp", ints(rng, p["x_dt"], ())), ("w_zp", ints(rng, w_dt, (K,) if p["per_channel"] else ()))]
    attrs = dict(kernel_shape=p["k"], strides=p["stride"], dilations=p["dil"], group=p["groups"], pads=p["pads"])
    m = model([helper.make_node("ConvInteger", ["x", "w", "x_zp", "w_zp"], ["y"], **attrs)], {"x": x}, "int32", inits,
              opset=10)
    want = reference_run(m, {"x": x})
    got = lt.onnx.compile(m).run({"x": x})["y"]
    assert got.dtype == np.int32 and np.array_equal(got, want)


# ---------------------------------------------------------------------------- matrix products
@st.composite
def qmatmuls(draw):
    a_dt = draw(st.sampled_from(["uint8", "int8"]))
    return dict(a_dt=a_dt, b_dt=draw(st.sampled_from(["int8", "uint8"])) if a_dt == "uint8" else "int8",
                y_dt=a_dt, batch=draw(st.sampled_from([(), (), (2,), (2, 3)])),
                m=draw(st.integers(1, 20)), k=draw(st.integers(1, 40)), n=draw(st.integers(1, 40)),
                per_column=draw(st.booleans()), b_zp=draw(st.booleans()), seed=draw(st.integers(0, 2 ** 16)))


def qmatmul_model(p, rng, integer=False):
    a = ints(rng, p["a_dt"], (*p["batch"], p["m"], p["k"]))
    b = ints(rng, p["b_dt"], (p["k"], p["n"]))
    a_zp = ints(rng, p["a_dt"], ())
    shape = (p["n"],) if p["per_column"] else ()
    b_zp = ints(rng, p["b_dt"], shape) if p["b_zp"] or p["b_dt"] == "uint8" else np.zeros(shape, p["b_dt"])
    if integer:
        node = helper.make_node("MatMulInteger", ["a", "b", "a_zp", "b_zp"], ["y"])
        return model([node], {"a": a}, "int32", [("b", b), ("a_zp", a_zp), ("b_zp", b_zp)], opset=10), {"a": a}
    if p["b_dt"] == "int8":     # onnxruntime: symmetric int8 weights
        b_zp = np.zeros_like(b_zp)
    return qlinear_model("QLinearMatMul", a, a_zp, b, b_zp, shape, p["k"], rng, p["y_dt"])


@settings(max_examples=25, deadline=None)
@given(qmatmuls())
def test_qlinear_matmul_matches_onnxruntime(p):
    check_random_graph(qmatmul_model, p)


@settings(max_examples=12, deadline=None)
@given(qmatmuls())
def test_matmul_integer_matches_onnxruntime(p):
    check_random_graph(qmatmul_model, p, integer=True)


@settings(max_examples=15, deadline=None)
@given(qmatmuls(), st.sampled_from(["uint8", "int8"]), st.booleans())
def test_matmul_integer_with_any_zero_points_matches_the_onnx_reference(p, b_dt, per_row):
    """int8 A, either B dtype, a zero point per row of A and per column of B (numpy's int64
    arithmetic is the oracle: onnxruntime takes one A zero point, and the reference evaluator
    subtracts a per-row one along the wrong axis)."""
    rng = np.random.default_rng(p["seed"])
    a = ints(rng, p["a_dt"], (*p["batch"], p["m"], p["k"]))
    b = ints(rng, b_dt, (p["k"], p["n"]))
    a_zp = ints(rng, p["a_dt"], (p["m"],) if per_row else ())
    b_zp = ints(rng, b_dt, (p["n"],) if p["per_column"] else ())
    inits = [("b", b), ("a_zp", a_zp), ("b_zp", b_zp)]
    m = model([helper.make_node("MatMulInteger", ["a", "b", "a_zp", "b_zp"], ["y"])], {"a": a}, "int32", inits,
              opset=10)
    want = ((a.astype(np.int64) - np.asarray(a_zp, np.int64).reshape(-1, 1)) @ (b.astype(np.int64) - b_zp)
            ).astype(np.int32)
    got = lt.onnx.compile(m).run({"a": a})["y"]
    assert got.dtype == np.int32 and np.array_equal(got, want)


@settings(max_examples=10, deadline=None)
@given(qmatmuls())
def test_qlinear_matmul_quantized_per_row_matches_numpy(p):
    """A scale and zero point per row of A (which onnxruntime's kernel declines), per-column B:
    numpy's int64 sums, requantized as onnxruntime requantizes (float32 multiplier a_s*b_s/y_s)."""
    rng = np.random.default_rng(p["seed"])
    M, N, K = p["m"], p["n"], p["k"]
    a, b = ints(rng, p["a_dt"], (*p["batch"], M, K)), ints(rng, p["b_dt"], (K, N))
    a_s, a_zp = rng.uniform(0.005, 0.05, M).astype(np.float32), ints(rng, p["a_dt"], (M,))
    b_s, b_zp = rng.uniform(0.005, 0.05, N).astype(np.float32), ints(rng, p["b_dt"], (N,))
    y_s, y_zp = np.float32(0.05 * np.sqrt(K) / 64), ints(rng, p["y_dt"], ())
    inits = [("a_s", a_s), ("a_zp", a_zp), ("b", b), ("b_s", b_s), ("b_zp", b_zp), ("y_s", y_s), ("y_zp", y_zp)]
    node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_zp", "b", "b_s", "b_zp", "y_s", "y_zp"], ["y"])
    m = model([node], {"a": a}, p["y_dt"], inits, opset=10)
    acc = (a.astype(np.int64) - a_zp.astype(np.int64)[:, None]) @ (b.astype(np.int64) - b_zp.astype(np.int64))
    mult = (a_s[:, None] * b_s[None, :]) / y_s
    info = np.iinfo(p["y_dt"])
    want = np.clip(np.rint(acc.astype(np.float32) * mult) + int(y_zp), info.min, info.max).astype(p["y_dt"])
    got = lt.onnx.compile(m).run({"a": a})["y"]
    assert got.dtype == want.dtype and np.array_equal(got, want)


# ---------------------------------------------------------------------------- every x86 target
def x86_targets():
    """(name, Target) for each x86 target this CPU runs, and each without its dot-product
    extensions (the exact widening path of a CPU without VNNI)."""
    import dataclasses

    from loopstack.isa.target import get_target

    feats = cpu.cpu_features()
    out = []
    for name, need in (("avx2", "avx2"), ("avx512", "avx512f")):
        if need in feats:
            t = get_target(name)
            out += [(name, t), (f"{name}-widening", dataclasses.replace(t, extensions=frozenset()))]
    return out


@pytest.mark.skipif(not x86_targets(), reason="needs an x86 CPU with AVX2")
@settings(max_examples=10, deadline=None)
@given(st.sampled_from(x86_targets() or [None]), st.booleans(), qconvs(), qmatmuls())
def test_qlinear_graphs_on_every_x86_target(target, conv, pc, pm):
    """The same bytes as onnxruntime whichever instruction the target's kernels use."""
    name, t = target
    if conv:
        pc = dict(pc, kg=pc["kg"] * 7)    # some filter counts past one vector, whole or not
        m, inputs = qconv_model(pc, np.random.default_rng(pc["seed"]))
    else:
        m, inputs = qmatmul_model(dict(pm, n=pm["n"] * 3), np.random.default_rng(pm["seed"]))
    assert quantized_layers(check_exact(m, inputs, target=t)), name


# ---------------------------------------------------------------------------- the kernels they run on
def _dot_instructions():
    feats = cpu.cpu_features()
    return "avx512_vnni" in feats or "avxvnni" in feats or "avx2" in feats


def _layer(op, rng, w_dt, size, hw=(10, 10), batch=(2,)):
    """A QLinearConv of `size` -> 2 x `size` channels over `hw`, or a QLinearMatMul of 24 x
    `size` by `size` x 48; uint8 weights get a zero point per channel or column."""
    if op == "QLinearConv":
        p = dict(groups=1, cg=size, kg=2 * size, k=[3, 3], stride=[1, 1], dil=[1, 1], pads=[1, 1, 1, 1],
                 hw=list(hw), x_dt="uint8", w_dt=w_dt, y_dt="uint8", per_channel=True, w_zp=w_dt == "uint8",
                 bias=True, batch=1, seed=0)
        return qconv_model(p, rng)
    p = dict(a_dt="uint8", b_dt=w_dt, y_dt="uint8", batch=batch, m=24, k=size, n=48, per_column=True,
             b_zp=w_dt == "uint8", seed=0)
    return qmatmul_model(p, rng)


@pytest.mark.skipif(not _dot_instructions(), reason="this CPU has no 8-bit dot product the x86 backend uses")
@pytest.mark.parametrize("op", ["QLinearConv", "QLinearMatMul"])
def test_layer_shapes_run_on_the_dot_product_instruction(op):
    """A network's usual shapes (channels a multiple of 16) compile to the tensorized kernel,
    the worst-case zero points (uint8 weights, a per-channel weight zero point) included."""
    m, inputs = _layer(op, np.random.default_rng(0), "uint8", 32 if op == "QLinearConv" else 64)
    compiled = check_exact(m, inputs)
    kernels = [L.kernel for L in quantized_layers(compiled)]
    assert kernels and all(k.tensorized for k in kernels), [k.tensorized for k in kernels]


@pytest.mark.skipif(not _dot_instructions(), reason="this CPU has no 8-bit dot product the x86 backend uses")
@pytest.mark.parametrize("op", ["QLinearConv", "QLinearMatMul"])
def test_quantized_layers_split_their_rows_between_threads(op):
    """On two threads a quantized layer's tensorized block loop is its outermost, parallel loop,
    and the model computes onnxruntime's result bit for bit, as on one thread."""
    m, inputs = _layer(op, np.random.default_rng(3), "int8", 64 if op == "QLinearConv" else 1024, hw=(28, 28),
                       batch=(8,))
    want = ort_run(m, inputs)
    for threads in (1, 2):
        compiled = lt.onnx.compile(m, threads=threads)
        np.testing.assert_array_equal(compiled.run(inputs)["y"], want)
        (layer,) = quantized_layers(compiled)
        assert layer.kernel.tensorized
        parallel = [n for n in layer.kernel.lowered.body if isinstance(n, Loop) and "parallel" in n.annotations]
        assert len(parallel) == (threads > 1), (threads, layer.kernel.lowered)


def _dw576():
    """A 5x5 depthwise layer of 576 channels over 7x7 (MobileNetV3's last blocks)."""
    p = dict(groups=576, cg=1, kg=1, k=[5, 5], stride=[1, 1], dil=[1, 1], pads=[2, 2, 2, 2], hw=[7, 7],
             x_dt="uint8", w_dt="int8", y_dt="uint8", per_channel=True, w_zp=False, bias=True, batch=1, seed=3)
    return qconv_model(p, np.random.default_rng(3))


def test_a_depthwise_layer_keeps_its_sums_in_registers():
    """Its int32 sums are a register block of channels by output columns over which the taps
    run, requantized on their store: no int32 temp holds them between taps."""
    m, inputs = _dw576()
    (layer,) = quantized_layers(check_exact(m, inputs))
    assert not [b.name for b in layer.kernel.lowered.temps if b.dtype == "int32"]


def test_a_sum_requantized_apart_has_the_same_bytes():
    """Where the backend cannot requantize a sum on its store (split over several nests), the
    layer stores int32 and requantizes in a statement of its own: the same bytes."""
    from loopstack.backend import compile as compile_tree
    from loopstack.onnx.qlayers import requant_apart

    m, inputs = _dw576()
    (layer,) = quantized_layers(lt.onnx.compile(m))
    tree = layer.kernel.tree
    apart = compile_tree(requant_apart(tree))
    assert [b.name for b in apart.lowered.temps if b.dtype == "int32"] == ["S32"]
    rng = np.random.default_rng(5)
    args = [a[1] if a[0] == "const" else rng.integers(0, 256, a[2]).astype(np.uint8) for a in layer.args]
    want, got = (np.zeros(layer.shape, np.uint8) for _ in range(2))
    layer.kernel(*args, want)
    apart(*args, got)
    np.testing.assert_array_equal(got, want)


def test_extreme_values_are_exact():
    """All 255 x all -128 through a 3x3x64 window, both zero points at their extremes."""
    C, K = 64, 16
    x = np.full((1, C, 5, 5), 255, np.uint8)
    w = np.full((K, C, 3, 3), -128, np.int8)
    for y_zp, y_s in ((np.uint8(0), 1.0), (np.uint8(255), 1e6)):
        inits = [("x_s", np.float32(1.0)), ("x_zp", np.uint8(0)), ("w", w), ("w_s", np.float32(1.0)),
                 ("w_zp", np.int8(0)), ("y_s", np.float32(y_s)), ("y_zp", y_zp)]
        node = helper.make_node("QLinearConv", ["x", "x_s", "x_zp", "w", "w_s", "w_zp", "y_s", "y_zp"], ["y"],
                                kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        check_exact(model([node], {"x": x}, "uint8", inits, opset=10), {"x": x})
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], kernel_shape=[3, 3])
    check_exact(model([node], {"x": x}, "int32", [("w", np.full((K, C, 3, 3), 255, np.uint8))], opset=10), {"x": x})


# ---------------------------------------------------------------------------- quantize / dequantize
@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["uint8", "int8"]), st.booleans(), st.integers(0, 2 ** 16))
def test_quantize_dequantize_match_onnxruntime(dt, per_axis, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((2, 3, 4, 5)) * 3).astype(np.float32)
    # ties: values that land exactly on .5 after the division
    x.flat[:8] = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1000, -1000], np.float32) * 0.02
    shape = (3,) if per_axis else ()
    s = (rng.uniform(0.01, 0.05, shape) if per_axis else np.float32(0.02)).astype(np.float32)
    zp = ints(rng, dt, shape)
    q = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=1)
    dq = helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=1)
    m = model([q, dq], {"x": x}, "float32", [("s", s), ("zp", zp)], opset=13)
    m.graph.output.insert(0, helper.make_tensor_value_info("q", ONNX_TYPE[dt], None))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want_q, want_y = sess.run(["q", "y"], {"x": x})
    compiled = lt.onnx.compile(m)
    got = compiled.run({"x": x})
    assert got["q"].dtype == want_q.dtype and np.array_equal(got["q"], want_q)
    assert np.array_equal(got["y"], want_y)
    # both are kernels of their own on x86 (DequantizeLinear's float statement converts the bytes,
    # QuantizeLinear's requantizes its float quotient), but a QuantizeLinear of several zero points
    (dq_layer,) = [L for L in compiled.layers if "DequantizeLinear" in L.name]
    (q_layer,) = [L for L in compiled.layers if "QuantizeLinear" in L.name and "Dequantize" not in L.name]
    assert dq_layer.schedule == ("native" if cpu.is_x86_64() else "host")
    assert q_layer.schedule == ("native" if cpu.is_x86_64() and np.unique(zp).size == 1 else "host")


def test_unsupported_quantized_inputs_say_what():
    x = np.zeros((1, 2, 4, 4), np.uint8)
    inits = [("x_s", np.float32(1)), ("x_zp", np.uint8(0)), ("w", np.zeros((2, 2, 1, 1, 1), np.int8)),
             ("w_s", np.float32(1)), ("w_zp", np.int8(0)), ("y_s", np.float32(1)), ("y_zp", np.uint8(0))]
    node = helper.make_node("QLinearConv", ["x", "x_s", "x_zp", "w", "w_s", "w_zp", "y_s", "y_zp"], ["y"])
    x3 = np.zeros((1, 2, 4, 4, 4), np.uint8)
    with pytest.raises(lt.UnsupportedError, match="only 1-D and 2-D"):
        lt.onnx.compile(model([node], {"x": x3}, "uint8", inits, opset=10))
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"])
    f = np.zeros((4,), np.float32)
    with pytest.raises(lt.UnsupportedError, match="int16"):
        lt.onnx.compile(model([node], {"x": f}, "int32", [("s", np.float32(1)), ("zp", np.int16(0))], opset=13))
    del x


# ---------------------------------------------------------------------------- quantized models
def test_qdq_cnn_runs_on_int8_kernels_and_matches_onnxruntime():
    """The QDQ groups (DQ -> Conv [-> Relu] -> Q, DQ -> MatMul -> Q) run as QLinear kernels, as
    onnxruntime runs them: the same bytes at every output."""
    from loopstack.onnx import qmodels

    m = qmodels.qdq_cnn()
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    compiled = lt.onnx.compile(m)
    assert np.array_equal(compiled(x), want)
    fused = [L for L in compiled.layers if L.schedule.startswith("int8")]
    assert len(fused) == 4, compiled.summary()      # three convolutions and the matmul
    assert any(L.kernel.tensorized for L in fused)
    assert not any(op.startswith(("Conv", "MatMul")) and not L.schedule.startswith("int8")
                   for L in compiled.layers for op in L.ops), compiled.summary()


QUANTIZED_MODELS = {
    "resnet18": lambda: models.resnet18(resolution=32, width=8, blocks=(1, 1, 1, 1), classes=10),
    "mobilenet_v3_small": lambda: models.mobilenet_v3_small(resolution=32, width=0.25, classes=10),
}


@pytest.mark.parametrize("name", sorted(QUANTIZED_MODELS))
def test_statically_quantized_model_matches_onnxruntime(name):
    """A reduced ResNet-18 and MobileNetV3-Small quantized by onnxruntime.quantization (QDQ,
    per-channel weights): every convolution an int8 kernel, the output equal to onnxruntime's."""
    import logging

    from loopstack.onnx import qmodels

    pytest.importorskip("onnxruntime.quantization")
    m = QUANTIZED_MODELS[name]()
    rng = np.random.default_rng(0)
    logging.disable(logging.WARNING)     # the quantizer's advice
    try:
        qm = qmodels.quantize(m, [{"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(3)])
    finally:
        logging.disable(logging.NOTSET)
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(qm.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    compiled = lt.onnx.compile(qm)
    got = compiled(x)
    assert np.array_equal(got, want), np.abs(got - want).max()
    convs = sum(1 for n in qm.graph.node if n.op_type == "Conv")
    int8 = [L for L in compiled.layers if L.schedule.startswith("int8")]
    assert sum(1 for L in int8 if L.ops[:1] and L.ops[0].startswith("conv")) == convs
