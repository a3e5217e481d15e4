"""Every core by default: default and tuned schedules split a large nest's outermost output loop
over threads, and the result is bit-identical to one thread."""
import numpy as np
import pytest

from loopstack.backend.kernel_base import empty_aligned
from loopstack.frontend.run import program
from loopstack.tune.defaults import PARALLEL_MIN_FLOPS, default_schedule
from loopstack.tune.space import Plan, main_node, realize
from loopstack.workloads import get_workload


def _parallel_loops(tree):
    return [a.args[0] for a in tree.actions if a.kind == "annotate" and a.args[1] == "parallel"]


@pytest.mark.parametrize("name", ["MM-256", "CONV-1", "MLP-8x1024", "MLP-64x256"])
def test_default_schedules_of_large_nests_run_bit_identical_on_any_thread_count(name):
    Y, reference = get_workload(name).build(seed=3)
    tree = default_schedule(Y)
    assert _parallel_loops(tree), f"{name}: no parallel loop in its default schedule"
    Y.set(tree)
    kernel = Y.compile()
    inputs = [r.data for r in program(Y).reads]
    outs = {}
    for threads in (1, 2, 3):          # 3: chunks of unequal size, on a 2-core machine too
        kernel.threads = threads
        out = empty_aligned(Y.shape, np.float32)
        kernel(*inputs, out)
        outs[threads] = out
    np.testing.assert_array_equal(outs[1], outs[2])
    np.testing.assert_array_equal(outs[1], outs[3])
    np.testing.assert_allclose(outs[1], reference(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", ["MM-64", "MM-128", "MLP-8x256", "DWCONV-1"])
def test_small_nests_stay_on_one_thread(name):
    Y, _ = get_workload(name).build(seed=0)
    assert get_workload(name).flops < 3 * PARALLEL_MIN_FLOPS
    assert not _parallel_loops(default_schedule(Y))


def _outer_entry(tree):
    nid = main_node(tree)
    return tree.loop(tree.path(tree.ref_of(nid))[0]).entry


def test_a_reduction_outermost_stays_serial():
    """CONV-4 for one core: its channel tiles (weights beyond L2) are the nest's outermost
    loop, a reduction no thread may split."""
    Y, _ = get_workload("CONV-4").build(seed=0)
    tree = default_schedule(Y, _cores(1))
    assert _outer_entry(tree)[0] in tree.graph.reduced(tree.graph.node(main_node(tree)))
    assert not _parallel_loops(tree)


def test_channel_tiles_for_several_cores_go_inside_the_vector_panels():
    """CONV-4 (ResNet-18's 7x7 layers) for two cores: the vector panels walk every channel tile,
    outermost, and the panels split between threads, bit-identical to one thread."""
    Y, reference = get_workload("CONV-4").build(seed=2)
    tree = default_schedule(Y, _cores(2))
    g = tree.graph
    nid = main_node(tree)
    assert _outer_entry(tree)[0] == g.node(nid).vars[-1]                    # the output channels
    assert any(tree.loop(r).entry[0] in g.reduced(g.node(nid)) for r in tree.path(tree.ref_of(nid))[1:2])
    assert _parallel_loops(tree)
    Y.set(tree)
    kernel = Y.compile()
    inputs = [r.data for r in program(Y).reads]
    outs = []
    for threads in (1, 2, 3):
        kernel.threads = threads
        out = empty_aligned(Y.shape, np.float32)
        kernel(*inputs, out)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    np.testing.assert_allclose(outs[0], reference(), rtol=1e-3, atol=1e-3)


def test_the_tuners_candidates_are_parallel_too():
    """The search space's candidates get the default's parallel outer loop, so a search compares
    schedules as they will run (and the default's plan rebuilds the default exactly)."""
    Y, _ = get_workload("MM-256").build(seed=0)
    base = Y.loop_tree
    nid = main_node(base)
    plan = Plan((("m", (6,)), ("k", ()), ("n", (32,))), ("n", "m", "k", "m'", "n'"))
    tree = realize(base, plan, nid)
    assert _parallel_loops(tree) == [0]
    Y.set(tree)
    kernel = Y.compile()
    assert kernel._parallel


def _cores(n):
    import dataclasses

    from loopstack.isa.target import host_target

    return dataclasses.replace(host_target(), cores=n)


def _parallel_entries(tree):
    return [tree.loop(ref).entry for ref in _parallel_loops(tree)]


def test_chained_layers_split_their_rows_between_the_cores():
    """MLP-64x256's layers each read the whole layer before: each core takes 32 of the 64 rows
    of every layer (it then reads only rows it wrote), not half of every layer's columns."""
    Y, _ = get_workload("MLP-64x256").build(seed=0)
    assert _parallel_entries(default_schedule(Y, _cores(2))) == [("b", 2, 0)] * 3
    assert _parallel_entries(default_schedule(Y, _cores(4))) == [("b", 4, 0)] * 3
    one = _parallel_entries(default_schedule(Y, _cores(1)))      # one core: the panels, as before
    assert [v for v, _, _ in one] == ["j", "l", "o"]


@pytest.mark.parametrize("name, why", [("MLP-64x1024", "4 MiB of weights per layer: each core reads half"),
                                       ("MLP-8x1024", "8 rows: fewer than a register block per core"),
                                       ("MM-512", "one matmul: no layer before or after it")])
def test_other_nests_split_their_column_panels(name, why):
    Y, _ = get_workload(name).build(seed=0)
    entries = _parallel_entries(default_schedule(Y, _cores(2)))
    assert entries and all(v != "b" and v != "m" for v, _, _ in entries), (why, entries)


@pytest.mark.parametrize("name", ["CONV-3", "CONV-4"])
def test_a_convolution_for_several_cores_keeps_its_channels_whole_where_one_core_would_tile_them(name):
    """Weights beyond L2 get channel tiles small enough to prefetch, for one core; those tiles
    would be the nest's outermost loop, a reduction no thread can split, so a schedule for
    several cores keeps the block model's tile (CONV-3: all channels, its output loop parallel)."""
    import dataclasses

    from loopstack.isa.target import get_target

    t = dataclasses.replace(get_target("avx512"), streams_prefetched=False)   # tiles shrunk to prefetch
    tiles = {}
    for cores in (1, 2):
        Y, _ = get_workload(name).build(seed=0)
        tree = default_schedule(Y, dataclasses.replace(t, cores=cores))
        g = tree.graph
        nid = main_node(tree)
        outer = tree.loop(tree.path(tree.ref_of(nid))[0])
        tiles[cores] = outer.entry if outer.entry[0] in g.reduced(g.node(nid)) else None
        if cores == 2 and name == "CONV-3":
            assert _parallel_loops(tree)
    assert tiles[1] is not None and tiles[1] != tiles[2]      # one core: smaller channel tiles
