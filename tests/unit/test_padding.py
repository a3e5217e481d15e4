"""split_padded_nests and stage_padded_reads on the interpreter: padded reads become plain reads
of the input (the interior nest) or of small zero-bordered temps (the border nests), and the
trees compute what the padded tree computes."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import check_case, conv_cases, copy_cases, depthwise_cases

from loopstack.backend import compile
from loopstack.backend.padding import split_padded_nests, stage_padded_reads
from loopstack.looptree.builders import access, conv2d_tree, depthwise_conv2d_tree, make_tree, nest
from loopstack.looptree.ir import Affine, Binary, Buffer, Compute, Load, Loop, statements
from loopstack.looptree.verify import verify


def padded_reads(node):
    return [a for s in statements(node) for a in s.reads() if a.zero_pad]


def reads_of(node, buffer):
    return [a for s in statements(node) for a in s.reads() if a.buffer == buffer]


def interp(tree, inputs):
    return compile(tree, target="interp").run(*inputs)


@settings(max_examples=80)
@given(st.one_of(conv_cases(), depthwise_cases(), copy_cases()))
def test_split_and_staged_trees_compute_what_the_padded_tree_computes(case):
    split = split_padded_nests(case.tree, always=True)
    verify(split)
    staged = stage_padded_reads(split)
    verify(staged)
    assert not any(padded_reads(n) for n in staged.body)
    inputs = case.make_inputs(np.random.default_rng(0))
    check_case(case, inputs, interp(split, inputs))
    check_case(case, inputs, interp(staged, inputs))


def test_the_interior_reads_the_input_in_place():
    # stride 2 over an even image: only the top row and the left column read padding
    tree = depthwise_conv2d_tree(16, 12, 12, 3, 3, stride=2, padding=1)
    split = split_padded_nests(tree, always=True)
    top, left, interior = split.body
    assert padded_reads(top) and padded_reads(left)
    assert reads_of(interior, "X") and not padded_reads(interior)
    assert split_padded_nests(split, always=True) is split      # nothing left to split


def test_opposite_borders_share_one_nest_and_stage_two_windows():
    tree = depthwise_conv2d_tree(8, 9, 9, 3, 3, stride=1, padding=1)
    split = split_padded_nests(tree, always=True)
    assert len(split.body) == 3                 # rows at both edges, columns at both edges, interior
    staged = stage_padded_reads(split)
    temps = {b.name: b.shape for b in staged.temps}
    # the two rows and the two columns, each edge in its own window, never the span between
    assert sorted(temps.values()) == [(2, 3, 11, 8), (9, 2, 3, 8)]
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((9, 9, 8)).astype(np.float32), rng.standard_normal((3, 3, 8)).astype(np.float32)
    np.testing.assert_allclose(interp(staged, (x, w))[0], interp(tree, (x, w))[0], rtol=1e-5, atol=1e-5)


def test_staged_borders_are_a_small_part_of_the_input():
    tree = depthwise_conv2d_tree(16, 112, 112, 3, 3, stride=2, padding=1)
    staged = stage_padded_reads(split_padded_nests(tree, always=True))
    copied = sum(int(np.prod(b.shape)) for b in staged.temps)
    assert copied < 0.06 * 112 * 112 * 16      # 3 rows and 3 columns of 112


def test_a_window_wider_than_the_image_is_all_border():
    # pad 3 on a 2x2 image: no output point reads only inside the image, nothing to split
    tree = depthwise_conv2d_tree(4, 2, 2, 5, 5, padding=3)
    assert split_padded_nests(tree, always=True) is tree


def test_padding_along_a_reduction_is_not_split():
    # Y[o] += pad X[r - 1] * W[o, r]: the padded index uses no output dimension
    bufs = [Buffer("X", "float32", (4,), "input"), Buffer("W", "float32", (3, 6), "input"),
            Buffer("Y", "float32", (3,), "output")]
    stmt = Compute("Y", access("Y", "o"), Binary("mul", Load(access("X", Affine.of("r", const=-1), zero_pad=True)),
                                                 Load(access("W", "o", "r"))), reduce="add", init="identity")
    tree = make_tree(bufs, {"o": 3, "r": 6}, nest([("o", 1), ("r", 1)], stmt))
    assert split_padded_nests(tree, always=True) is tree


def test_a_statement_that_does_not_write_the_split_dimension_keeps_the_nest_whole():
    # a per-channel sum under the same c loop, re-initialised per nest if the nest were copied
    order = [("c", 1), ("oh", 1), ("ow", 1), ("r", 1), ("s", 1)]
    tree = depthwise_conv2d_tree(4, 6, 6, 3, 3, padding=1, order=order)
    conv = tree.body[0].body[0]
    total = Compute("T", access("T", "c"), Load(access("Wt", "r", "s", "c")), reduce="add", init="identity")
    body = Loop("c0", "c", 1, (conv, nest([("r", 1), ("s", 1)], total, tag="t")))
    tree = make_tree([*tree.buffers, Buffer("T", "float32", (4,), "output")], tree.dims, body)
    verify(tree)
    assert split_padded_nests(tree, always=True) is tree


def test_a_read_of_the_nest_output_at_another_point_keeps_the_nest_whole():
    # Z[h] = pad X[h - 1] then Y[h] = Z[h + 1] in the same loop: splitting h would read Z unwritten
    bufs = [Buffer("X", "float32", (6,), "input"), Buffer("Z", "float32", (7,), "temp"),
            Buffer("Y", "float32", (6,), "output")]
    z = Compute("Z", access("Z", "h"), Load(access("X", Affine.of("h", const=-1), zero_pad=True)))
    y = Compute("Y", access("Y", "h"), Load(access("Z", Affine.of("h", const=1))))
    tree = make_tree(bufs, {"h": 6}, nest([("h", 1)], (z, y)))
    assert split_padded_nests(tree, always=True) is tree


def test_the_split_is_kept_for_memory_bound_nests_only():
    from loopstack.tune.defaults import schedule_for
    from loopstack.workloads import get_workload

    def nests(name):
        w = get_workload(name)
        Y, _ = w.build(0)
        tree = schedule_for(Y).lower()
        return len(split_padded_nests(tree).body) - len(tree.body)

    assert nests("DWCONV-1") == 2          # top row, left column, interior
    assert nests("DWCONV-3") == 2          # rows at both edges, columns at both edges, interior
    assert nests("CONV-1") == 0            # hundreds of operations per staged byte: the copy is noise
    assert nests("DWCONV-4") == 0          # 14x14 under a 5x5 window: borders cost more than the image
    assert nests("MBV3-C64") == 0          # a 12x12 image: copying it costs less than two more nests


def test_a_first_layer_convolution_over_few_channels_is_split():
    # a 3-channel 224x224 image under a 3x3/2 window: 18 operations per byte of the image, whose
    # copy into a padded temp costs a sixth of the convolution; split, only its top row and
    # left column read padding
    tree = conv2d_tree(1, 3, 224, 224, 16, 3, 3, stride=2, padding=1, layout="NHWC")
    assert len(split_padded_nests(tree).body) == 3
    deep = conv2d_tree(1, 64, 56, 56, 64, 3, 3, padding=1, layout="NHWC")
    assert split_padded_nests(deep) is deep        # hundreds per byte: the copy is noise


def test_dense_convolution_split_computes_the_same():
    tree = conv2d_tree(1, 3, 7, 8, 4, 3, 3, padding=1, layout="NHWC")
    split = split_padded_nests(tree, always=True)
    assert len(split.body) == 3
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 7, 8, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(interp(stage_padded_reads(split), (x, w))[0], interp(tree, (x, w))[0],
                               rtol=1e-5, atol=1e-5)


def test_block_loops_are_kept_except_over_borders_they_cover_in_one_step():
    order = [("oh", 1), ("ow", 6), ("r", 1), ("s", 1), ("ow", 1), ("c", 1)]
    tree = depthwise_conv2d_tree(16, 24, 24, 3, 3, stride=2, padding=1, order=order)
    top, left, interior = split_padded_nests(tree, always=True).body

    def steps(node):
        return [(lp.dim, lp.step) for lp in _loops(node)]

    assert ("ow", 6) in steps(top) and ("ow_1_12", 6) in steps(interior)
    # one column: the block loop would run once, and the code generator would unroll every
    # reduction loop under it as a register block of the output
    assert [s for d, s in steps(left) if d == "ow_0_1"] == [1]


def _loops(node):
    if isinstance(node, Loop):
        yield node
        for n in node.body:
            yield from _loops(n)


def test_a_region_name_taken_by_another_dimension_keeps_the_nest_whole():
    tree = depthwise_conv2d_tree(4, 8, 8, 3, 3, stride=2, padding=1)
    assert len(split_padded_nests(tree, always=True).body) == 3       # top row: oh_0_1 of size 1
    taken = make_tree(tree.buffers, (*tree.dims, ("oh_0_1", 5)), *tree.body)
    assert split_padded_nests(taken, always=True) is taken
