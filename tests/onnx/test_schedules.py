"""The layer schedules of the ONNX compile path (loopstack/onnx/schedules.py) and its prepared calls: which layers are
row reductions, that a value read many times is computed once, and that the adjusted layers
still compute what onnxruntime computes."""
import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import loopstack as lt
from loopstack.frontend.run import program
from loopstack.looptree.ir import Unary, statements
from loopstack.onnx.schedules import layer_schedule, row_reductions


def _model(nodes, x_shape, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _softmax(shape):
    return _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], shape)


def _layer_norm(shape, rng):
    n = shape[-1]
    return _model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)], shape,
                  [("s", rng.standard_normal(n).astype(np.float32)), ("b", rng.standard_normal(n).astype(np.float32))])


def _gelu_chain(shape):
    """BERT's exported Gelu: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    c = [("c0", np.float32(np.sqrt(2))), ("c1", np.float32(1)), ("c2", np.float32(0.5))]
    return _model([helper.make_node("Div", ["x", "c0"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                   helper.make_node("Add", ["e", "c1"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
                   helper.make_node("Mul", ["m", "c2"], ["y"])], shape, [(n, np.asarray(v)) for n, v in c])


def _conv(rng, group=1):
    w = rng.standard_normal((8, 8 // group, 3, 3)).astype(np.float32)
    return _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=group)], (1, 8, 6, 6),
                  [("w", w)])


def _matmul(rng, k=24):
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], (5, k),
                  [("w", rng.standard_normal((k, 20)).astype(np.float32))])


def _is_rows(m) -> list:
    net = lt.onnx.load(m)
    return [row_reductions(program(L.tensor).graph) for L in net.layers
            if any(n.op == "reduce" for n in program(L.tensor).graph.nodes)]


def test_row_reductions_are_told_from_contractions():
    rng = np.random.default_rng(0)
    assert _is_rows(_softmax((3, 4, 40))) == [True]
    assert _is_rows(_layer_norm((6, 40), rng)) == [True]
    assert _is_rows(_model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1])], (6, 40))) == [True]
    # channels-last inside: the channel a depthwise convolution or a pool keeps is innermost
    assert _is_rows(_conv(rng)) == [False]
    assert _is_rows(_conv(rng, group=8)) == [False]
    w = rng.standard_normal((8, 8, 1, 1)).astype(np.float32)
    pooled = _model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("GlobalAveragePool", ["c"], ["y"])],
                    (1, 8, 5, 5), [("w", w)])
    assert _is_rows(pooled) == [False, False]
    # the network's NCHW input itself: a pool over its rows
    assert _is_rows(_model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], (1, 8, 5, 5))) == [True]
    assert _is_rows(_matmul(rng)) == [False]


def _check(m, x):
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = lt.onnx.compile(m, threads=1)(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * max(1.0, float(np.abs(want).max())))


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 3), st.integers(1, 5), st.integers(1, 70), st.sampled_from(["softmax", "layer_norm", "gelu"]))
def test_adjusted_layers_compute_what_onnxruntime_computes(a, b, n, kind):
    """Row lengths with vector tails and rows shorter than a vector."""
    rng = np.random.default_rng(n)
    shape = (a, b, n)
    m = {"softmax": lambda: _softmax(shape), "layer_norm": lambda: _layer_norm(shape, rng),
         "gelu": lambda: _gelu_chain(shape)}[kind]()
    _check(m, (rng.standard_normal(shape) * 3).astype(np.float32))


def _unaries(tree, op) -> int:
    def count(e):
        if isinstance(e, Unary):
            return (e.op == op) + count(e.x)
        return sum(count(x) for x in (getattr(e, "a", None), getattr(e, "b", None)) if x is not None)
    return sum(count(s.expr) for n in tree.body for s in statements(n))


def _shared_sigmoid(shape):
    """HardSwish(sigmoid(x)): one layer, whose HardSwish reads the sigmoid twice."""
    return _model([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("HardSwish", ["s"], ["y"])], shape, [])


def test_a_value_read_many_times_is_computed_once():
    """A sigmoid read by both terms of the HardSwish after it is computed once, stored in a
    temp of one vector, and the layer computes what onnxruntime does."""
    m = _shared_sigmoid((4, 64))
    net = lt.onnx.load(m)
    (layer,) = net.layers
    tree, origin = layer_schedule(layer.tensor)
    assert origin == "default"
    lowered = tree.lower()
    assert _unaries(lowered, "sigmoid") == 1
    assert all(t.size <= 64 for t in lowered.temps)
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(lt.onnx.compile(m)(x), want, rtol=1e-5, atol=1e-6)


def test_gelu_evaluates_one_erf():
    """BERT's exported Gelu chain: one erf instruction sequence per vector, nothing staged."""
    (layer,) = lt.onnx.load(_gelu_chain((4, 64))).layers
    lowered = layer_schedule(layer.tensor)[0].lower()
    assert _unaries(lowered, "erf") == 1 and not lowered.temps


@pytest.mark.parametrize("kind", ["softmax", "layer_norm"])
def test_each_row_reduction_runs_in_a_loop_of_its_own(kind):
    """No innermost loop holds a reduction beside another statement (it would stay scalar)."""
    rng = np.random.default_rng(1)
    m = _softmax((2, 3, 50)) if kind == "softmax" else _layer_norm((6, 50), rng)
    (layer,) = lt.onnx.load(m).layers
    tree, _ = layer_schedule(layer.tensor)
    lowered = tree.lower()

    def innermost(node):
        from loopstack.looptree.ir import Loop
        kids = [c for c in node.body if isinstance(c, Loop)]
        if not kids:
            yield node
        for c in kids:
            yield from innermost(c)

    loops = [lp for top in lowered.body for lp in innermost(top)]
    assert loops
    for lp in loops:
        stmts = list(statements(lp))
        assert len(stmts) == 1 or not any(s.reduce for s in stmts), lp


def _gemm(m, k, n, rng):
    return _model([helper.make_node("Gemm", ["x", "w", "b"], ["y"])], (m, k),
                  [("w", rng.standard_normal((k, n)).astype(np.float32)),
                   ("b", rng.standard_normal(n).astype(np.float32))])


def _copies(m) -> list:
    return [sum(n.op == "copy" for n in layer_schedule(L.tensor)[0].graph.nodes) for L in lt.onnx.load(m).layers]


def test_a_matvec_packs_its_constant_matrix_and_a_matmul_keeps_the_default():
    rng = np.random.default_rng(2)
    assert _copies(_gemm(1, 300, 200, rng)) == [1]
    # a matmul's default packs B itself (or not) by its own rules: nothing is added here
    from loopstack.tune.defaults import chosen_schedule
    (layer,) = lt.onnx.load(_gemm(32, 300, 200, rng)).layers
    default = sum(n.op == "copy" for n in chosen_schedule(layer.tensor)[0].graph.nodes)
    assert _copies(_gemm(32, 300, 200, rng)) == [default]


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 300), st.integers(1, 200))
def test_packed_matvecs_compute_what_onnxruntime_computes(k, n):
    rng = np.random.default_rng(k * 1000 + n)
    _check(_gemm(1, k, n, rng), rng.standard_normal((1, k)).astype(np.float32))


def test_a_convolution_reduces_taps_then_channels():
    """Channels-last activations: the channels are the innermost reduced axis (r s c), as the
    convolution schedules expect (their channel tile is the innermost reduced axis)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    m = _model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                helper.make_node("Conv", ["c", "w"], ["y"], pads=[1, 1, 1, 1])], (1, 8, 6, 6), [("w", w)])
    second = lt.onnx.load(m).layers[-1]
    g = program(second.tensor).graph
    (red,) = [n for n in g.nodes if n.op == "reduce"]
    reduced = [v for v in g.domain(red) if v in g.reduced(red)]
    assert [g.size(v) for v in reduced] == [3, 3, 8]


def test_a_model_on_two_threads_computes_what_it_computes_on_one():
    """A layer large enough to run its outer loop in parallel: bound calls on 1 and 2 threads,
    and a model switched between them, give the same bits."""
    rng = np.random.default_rng(4)
    m = _gemm(64, 512, 512, rng)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    one = lt.onnx.compile(m, threads=1)
    two = lt.onnx.compile(m, threads=2)
    assert any(parallel for L in two.layers for _, _, parallel in L.kernel._steps)
    want = one(x)
    np.testing.assert_array_equal(two(x), want)
    one.threads = 2
    np.testing.assert_array_equal(one(x), want)
    with pytest.raises(lt.ArgumentError, match="threads"):
        one.threads = 0


@pytest.mark.parametrize("relu", [True, False])
def test_a_max_pool_after_a_relu_pads_with_zeros_and_any_other_with_the_lowest_float(relu):
    """After a ReLU zero padding is the max's own (every window holds a value >= 0); without
    one a window at the border of a negative image must not see the zeros."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    b = np.full(8, -4.0, np.float32)        # mostly negative before the ReLU
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
    nodes.append(helper.make_node("MaxPool", ["r" if relu else "c"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1, 1, 1, 1]))
    m = _model(nodes, (1, 3, 9, 9), [("w", w), ("b", b)])
    pool = lt.onnx.load(m).layers[-1]
    constants = [n for n in program(pool.tensor).graph.nodes if n.op == "read" and n.constant]
    assert len(constants) == (0 if relu else 1)      # the border
    _check(m, rng.standard_normal((1, 3, 9, 9)).astype(np.float32))


@pytest.mark.parametrize("channels", [64, 24])
def test_a_max_pool_block_spans_whole_pixels(channels):
    """A pool is bound by reading its input: its block is as wide as the channels (up to four
    vectors), so that each pass reads whole pixels rather than one line of each, and it still
    computes what onnxruntime computes (24 channels: a vector tail in the block)."""
    from loopstack.isa.target import get_target

    rng = np.random.default_rng(7)
    w = rng.standard_normal((channels, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    m = _model(nodes, (1, 3, 30, 30), [("w", w)])
    pool = lt.onnx.load(m).layers[-1]
    tree, origin = layer_schedule(pool.tensor, "avx512")
    lanes = get_target("avx512").lanes()
    (order,) = [ns.order for i, ns in tree.schedule if tree.graph.reduced(tree.graph.node(i))]
    assert origin == "default" and order[-1][1] == min(channels, 4 * lanes)
    _check(m, rng.standard_normal((1, 3, 30, 30)).astype(np.float32))


def test_the_input_is_read_in_place_and_each_call_sees_its_contents():
    """A float32, C-contiguous input is read where it lies (no copy): another array, the same
    array changed in place, and inputs that must be copied (float64, a strided view) all give
    onnxruntime's answer, in any order."""
    rng = np.random.default_rng(6)
    m = _gemm(3, 40, 24, rng)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    model = lt.onnx.compile(m, threads=1)
    a = rng.standard_normal((3, 40)).astype(np.float32)
    b = rng.standard_normal((3, 40)).astype(np.float32)
    wide = rng.standard_normal((3, 80)).astype(np.float32)
    for x in (a, b, a, a.astype(np.float64), wide[:, ::2], a):
        want = sess.run(None, {"x": np.ascontiguousarray(x, np.float32)})[0]
        np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-5)
    assert model._pointed["x"] is a
    a[...] = rng.standard_normal((3, 40))
    np.testing.assert_allclose(model(a), sess.run(None, {"x": a})[0], rtol=1e-5, atol=1e-5)


def test_a_prepared_call_repoints_only_plain_inputs_and_checks_the_array():
    rng = np.random.default_rng(7)
    model = lt.onnx.compile(_gemm(3, 40, 24, rng), threads=1)
    (layer, call), = model._calls
    consts = [i for i, a in enumerate(layer.args) if a[0] == "const"]
    with pytest.raises(lt.ArgumentError, match="plain input"):
        call.point(consts[0], layer.args[consts[0]][1])
    (_, index, shape), = model._readers["x"]
    with pytest.raises(lt.ArgumentError, match="shape"):
        call.point(index, np.zeros((2, 40), np.float32))
    with pytest.raises(lt.ArgumentError, match="dtype"):
        call.point(index, np.zeros(shape, np.float64))


def _staged_pads(model) -> list:
    """Per layer, {border key: address} of the zero-bordered copies its prepared call fills."""
    from loopstack.isa.execmem import ffi

    found = []
    for L, call in model._calls:
        lowered = L.kernel.lowered
        names = [b.name for b in lowered.arguments + lowered.temps]
        keys = L.kernel._zero_bordered()
        found.append({k: int(ffi.cast("uintptr_t", call.keep[0].buffers[names.index(n)])) for n, k in keys.items()})
    return found


def test_layers_with_one_border_geometry_fill_one_zero_bordered_buffer():
    """Three 3x3 convolutions (pads 1) over 8 x 12 x 12: each stages its input into a
    zero-bordered copy. The layers run one after the other, so the copies share one buffer (in
    cache from the layer before) and the results are still onnxruntime's: no copy writes the
    border, so it stays zero whoever filled the buffer last. The 5x5 convolution, whose border
    is wider, keeps a buffer of its own. (Without the network's zero borders, which leave
    only the first layer a copy to make: test_borders.py.)"""
    rng = np.random.default_rng(3)
    inits, nodes, x = [], [], "x"
    for i, k in enumerate((3, 3, 5, 3)):
        w = (rng.standard_normal((8, 8, k, k)) * 0.3).astype(np.float32)
        inits.append((f"w{i}", w))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[k // 2] * 4))
        nodes.append(helper.make_node("Relu", [f"c{i}"], ["y" if i == 3 else f"r{i}"]))
        x = f"r{i}"
    m = _model(nodes, (1, 8, 12, 12), inits)
    model = lt.onnx.compile(m, threads=1, borders=False)
    pads = [p for p in _staged_pads(model) if p]
    assert len(pads) == 4
    three = [next(iter(p.values())) for i, p in enumerate(pads) if i != 2]
    assert len(set(three)) == 1 and next(iter(pads[2].values())) not in three
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=2e-6 * max(1.0, float(np.abs(want).max())))
    _check(m, x)            # and with the borders


@pytest.mark.parametrize("shape, perm, tiled", [((64, 3, 20), (1, 2, 0), True), ((128, 12, 64), (1, 2, 0), True),
                                                ((64, 3, 20), (1, 0, 2), False), ((40, 3, 20), (1, 2, 0), False)])
def test_a_transpose_that_moves_the_innermost_axis_is_tiled(shape, perm, tiled):
    """BERT's K^T ([128, 12, 64] -> [12, 64, 128]): one vector of output lanes reads source
    rows a whole row apart; tiled, the loop over the source's innermost axis runs inside the
    vector tile loop. A transpose keeping the innermost axis, or whose vector loop has a tail,
    keeps the default. Each computes what onnxruntime computes."""
    m = _model([helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))], shape)
    (layer,) = lt.onnx.load(m).layers
    tree, _ = layer_schedule(layer.tensor, "avx512")
    (order,) = {ns.order for i, ns in tree.schedule}
    vec = order[-1][0]
    assert (len(order) > 2 and order[-3][0] == vec != order[-2][0] and order[-1][1] == 16) == tiled
    _check(m, np.random.default_rng(1).standard_normal(shape).astype(np.float32))


def _conv_hardswish(rng, group=1, stride=1):
    w = rng.standard_normal((16, 16 // group, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    return _model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=group,
                                    strides=[stride, stride]),
                   helper.make_node("HardSwish", ["c"], ["h"]),
                   # a layer after it: the network's output is written channels-first, a transpose
                   helper.make_node("GlobalAveragePool", ["h"], ["y"])], (1, 16, 9, 9), [("w", w), ("b", b)])


@pytest.mark.parametrize("stride", [1, 2])
def test_a_convolutions_hardswish_is_applied_on_its_store(stride):
    """HardSwish reads the convolution (plus bias) twice: both reads are the accumulator, and
    the block applies it on its store, dense or depthwise."""
    rng = np.random.default_rng(3)
    posts = []
    for group in (1, 16):
        m = _conv_hardswish(rng, group, stride)
        (layer,) = [L for L in lt.onnx.load(m).layers if "HardSwish" in L.name]
        lowered = layer_schedule(layer.tensor)[0].lower()
        reds = [s for n in lowered.body for s in statements(n) if s.reduce]
        posts.append(all(s.post is not None and s.out.buffer == "out" for s in reds))
        _check(m, rng.standard_normal((1, 16, 9, 9)).astype(np.float32))
    assert posts == [True, True]
