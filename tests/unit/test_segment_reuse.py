"""Top-level nodes of the same shape (backend.reuse) share their code: an MLP's layers are
compiled once and the others take that code with their own prologue. The shared code must be
what compiling each node on its own gives, byte for byte and line for line of the listing."""
import pytest

from loopstack.backend import native, nest
from loopstack.backend.reuse import segment_shape, segment_shapes
from loopstack.isa.target import get_target
from loopstack.tune.defaults import default_schedule
from loopstack.workloads import WORKLOADS

TARGETS = ("avx2", "avx512")


def _emit(tree, target, reuse: bool, monkeypatch):
    """emit_native's segments and how many nodes the nest walk compiled."""
    walked = []
    real = nest.SegmentCompiler.compile

    def counting(self):
        walked.append(self.node)
        return real(self)

    with monkeypatch.context() as m:
        m.setattr(nest.SegmentCompiler, "compile", counting)
        if not reuse:
            m.setattr(native, "segment_shapes", lambda tree, nodes: [None] * len(nodes))
        _, _, segments, _ = native.emit_native(tree, target)
    return segments, len(walked)


@pytest.mark.parametrize("target_name", TARGETS)
@pytest.mark.parametrize("name", ["MLP-8x256", "MLP-64x1024", "MBV3-C64"])
def test_shared_code_is_the_code_each_node_compiles_to(name, target_name, monkeypatch):
    target = get_target(target_name)
    Y, _ = WORKLOADS[name].build(seed=0)
    tree = default_schedule(Y, target).lower()
    shared, walked = _emit(tree, target, True, monkeypatch)
    alone, walked_alone = _emit(tree, target, False, monkeypatch)
    assert walked_alone == len(alone)
    for (a, node), (b, _) in zip(shared, alone):
        assert a.bytes() == b.bytes(), node
        assert a.listing() == b.listing(), node
    if name.startswith("MLP"):            # three layers and their three weight packs: two of each
        assert walked == walked_alone - 4     # share the code of the first


def test_an_mlps_layers_have_one_shape_and_differ_from_their_packs():
    target = get_target("avx512")
    Y, _ = WORKLOADS["MLP-8x256"].build(seed=0)
    tree = default_schedule(Y, target).lower()
    lowered, _, segments, once = native.emit_native(tree, target)
    keys = [segment_shape(lowered, node).key for _, node in segments]
    assert len(set(keys[:once])) == 1 and len(set(keys[once:])) == 1
    assert keys[0] != keys[-1]


def test_a_node_over_another_size_or_dtype_has_another_shape():
    from loopstack.looptree.builders import packed_matmul_tree

    small, large = packed_matmul_tree(64, 64, 64), packed_matmul_tree(64, 64, 128)
    assert segment_shape(small, small.body[-1]).key != segment_shape(large, large.body[-1]).key
    assert segment_shape(small, small.body[-1]).key == segment_shape(small, small.body[-1]).key


@pytest.mark.parametrize("name", ["MLP-8x256", "MBV3-C64", "DWCONV-3"])
def test_a_node_left_without_a_shape_matches_no_other(name):
    """segment_shapes skips the full shape of a node whose outline no other node has: that may
    never lose a match, and nodes of equal outline get their full shapes."""
    from loopstack.looptree.builders import depthwise_conv2d_tree

    target = get_target("avx512")
    if name == "DWCONV-3":      # bench/loopnest.py's schedule: padded, split into border nests
        order = [("oh", 1), ("ow", 6), ("c", 32), ("r", 1), ("s", 1), ("ow", 1), ("c", 1)]
        tree = depthwise_conv2d_tree(88, 28, 28, 3, 3, stride=1, padding=1, order=order)
    else:
        Y, _ = WORKLOADS[name].build(seed=0)
        tree = default_schedule(Y, target).lower()
    lowered, _, segments, _ = native.emit_native(tree, target)
    nodes = [node for _, node in segments]
    full = [segment_shape(lowered, node) for node in nodes]
    shapes = segment_shapes(lowered, nodes)
    assert any(s is None for s in shapes) or name.startswith("MLP")
    for i, (kept, whole) in enumerate(zip(shapes, full)):
        if kept is None:
            others = [f.key for j, f in enumerate(full) if j != i and f is not None]
            assert whole is None or whole.key not in others, nodes[i]
        else:
            assert kept.key == whole.key
