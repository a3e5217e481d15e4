"""backend.prefetch: which operands get a prefetch of their next tile, and where its lines land.

Host-independent: the trees are emitted (not run) for the AVX2 description with Zen 3's caches."""
import dataclasses
import itertools
import re

import pytest

from loopstack.backend.analysis import byte_map, loop_delta
from loopstack.backend import prefetch
from loopstack.backend.prefetch import LINE, prefetch_plans
from loopstack.backend.x86.compile import emit_x86
from loopstack.isa.target import TARGETS
from loopstack.looptree.builders import matmul_tree
from loopstack.looptree.ir import Loop
from loopstack.looptree.stats import loop_ranges
from loopstack.tune.defaults import default_schedule
from loopstack.workloads import get_workload

AVX2 = TARGETS["avx2"]


def _lowered(name, target=AVX2):
    Y, _ = get_workload(name).build(seed=0)
    lowered, _, segments, _ = emit_x86(default_schedule(Y, target).lower(), target)
    return lowered, segments


def _plans(lowered, cache):
    return [(node, p) for node in lowered.body for p in prefetch_plans(lowered, node, cache)]


XEON = dataclasses.replace(TARGETS["avx512"], l1d=48 << 10)   # 7-row blocks, 16-channel tiles


@pytest.mark.parametrize("name,target", [("CONV-3", AVX2), ("CONV-4", AVX2), ("CONV-4", XEON)])
def test_each_tile_of_streamed_weights_is_prefetched_by_the_passes_over_the_one_before(
        name, target, monkeypatch):
    # (a larger per-pass share than a block starts with is allowed here: the plan's geometry is
    # checked whatever the tile; the default's tile fits the limit, see the next test)
    monkeypatch.setattr(prefetch, "MAX_LINES_PER_PASS", 128)
    lowered, _ = _lowered(name, target)
    (node, plan), = _plans(lowered, target.l2)
    assert lowered.buffer(plan.buffer).kind == "temp"           # the packed weights
    path = _path(node, plan.passes[-1])
    ranges = loop_ranges(lowered)
    (advance,) = [lp for lp in path if lp.body[0].var == plan.passes[0]]
    passes = [lp for lp in path if lp.var in plan.passes]
    # the prefetch pointer moves on by one tile per iteration of the loop around the passes,
    # as the operand's own pointer does
    (read,) = [a for a in plan.stmt.reads() if a.buffer == plan.buffer]
    distance = loop_delta(dict(byte_map(lowered, read).coeffs), advance)
    assert dict(plan.coeffs)[f"@{advance.var}"] * advance.step == distance
    assert plan.const == byte_map(lowered, read).const + distance
    # every pass over a tile prefetches `lines` lines; together they cover the next tile once
    covered, points = [], list(itertools.product(*(range(-(-ranges[lp.var][0] // lp.step)) for lp in passes)))
    for index in points:
        disp = plan.displacement({f"@{lp.var}": i * lp.step for lp, i in zip(passes, index)})
        covered += [disp + LINE * j for j in range(plan.lines)]
    assert len(covered) == len(set(covered))
    tile = set(range(plan.const, plan.const + distance, LINE))
    assert tile <= set(covered)
    assert len(covered) - len(tile) < len(points) * (plan.lines - len(tile) // len(points))


def _path(node, var):
    """The loops from `node` down to the loop `var`."""
    if node.var == var:
        return [node]
    for child in node.body:
        if isinstance(child, Loop):
            found = _path(child, var)
            if found:
                return [node] + found
    return []


@pytest.mark.parametrize("name", ["CONV-3", "CONV-4"])
def test_a_default_convolution_whose_weights_stream_takes_tiles_its_passes_can_prefetch(name):
    """On AVX-512 a 64-wide panel of all the channels would need more lines per pass than a block
    starts with (CONV-4: 83): the default tiles the channels so that it does not (4 and 16)."""
    lowered, _ = _lowered(name, XEON)
    (node, plan), = _plans(lowered, XEON.l2)
    assert plan.lines <= prefetch.MAX_LINES_PER_PASS
    assert lowered.buffer(plan.buffer).kind == "temp"


def test_the_emitted_block_starts_with_its_share_of_the_next_tile():
    _, segments = _lowered("CONV-4")
    listing = "\n".join(asm.listing() for asm, _ in segments)
    prefetches = re.findall(r"prefetcht0 byte ptr \[(\w+) \+ 0x[0-9a-f]+\]", listing)
    assert prefetches and len(set(prefetches)) == 1
    # the prefetch pointer advances between passes
    assert re.search(rf"add {prefetches[0]}, 0x", listing)


def test_weights_that_stay_in_cache_are_not_prefetched():
    lowered, _ = _lowered("CONV-4")
    assert _plans(lowered, 64 << 20) == []                      # they would fit a 64 MiB cache
    lowered, _ = _lowered("CONV-1")                              # 295 KB of weights: L2 holds them
    assert _plans(lowered, AVX2.l2) == []


def test_a_tile_that_is_not_contiguous_is_not_prefetched():
    # B[k, n] read in 16-column panels of a 2048-wide matrix: a k step moves 8 KiB, but the
    # panel is 64 bytes of each row, not a tile the next iteration's offset would find whole
    tree = matmul_tree(64, 2048, 2048, (("n", 16), ("k", 256), ("m", 6), ("k", 1), ("m", 1), ("n", 1)))
    lowered, _, _, _ = emit_x86(tree, AVX2)
    assert _plans(lowered, AVX2.l2) == []


def _dense_layer(m, k, n, seed=0):
    """A network's dense layer: rows of activations times constant weights, plus a constant bias
    (four access streams in one nest)."""
    import numpy as np

    import loopstack as lt

    rng = np.random.default_rng(seed)
    s = lt.SymbolGenerator()
    x = lt.Tensor(rng.standard_normal((m, k)).astype(np.float32)).to(s.m, s.k)
    w = lt.Tensor(rng.standard_normal((k, n)).astype(np.float32), constant=True).to(s.k, s.n)
    b = lt.Tensor(rng.standard_normal(n).astype(np.float32), constant=True).to(s.n)
    return (x * w).sum(s.k) + b


@pytest.mark.parametrize("k, n", [(768, 3072), (3072, 768), (768, 768)])
def test_a_dense_layer_whose_weights_stream_prefetches_panels_that_fit_l1_beside_the_next(k, n):
    """BERT-base's products (128 rows): the weights leave L2, so each packed panel is read from
    memory by its first pass unless the passes over the panel before fetch it. The default keeps
    a panel within 3/4 of L1 (the block's rows of A take the rest) and to what its passes can
    prefetch the next one in, the prefetch of the next panel takes a pointer register, and the
    loop counters keep theirs."""
    Y = _dense_layer(128, k, n)
    lowered, segments = _lowered_tree(default_schedule(Y, XEON), XEON)
    (node, plan), = _plans(lowered, XEON.l2)
    assert lowered.buffer(plan.buffer).kind == "temp"
    (read,) = [a for a in plan.stmt.reads() if a.buffer == plan.buffer]
    tile = plan.const - byte_map(lowered, read).const
    assert 8 << 10 <= tile <= XEON.l1d * 3 // 4
    assert plan.lines <= prefetch.MAX_LINES_PER_PASS
    listing = "\n".join(asm.listing() for asm, _ in segments)
    assert "prefetcht0" in listing
    assert not re.search(r"dec qword ptr \[rsp", listing)       # no counter left on the stack


def test_a_dense_layer_whose_weights_stay_in_l2_keeps_whole_panels():
    Y = _dense_layer(128, 256, 768)                             # 768 KB of weights
    lowered, segments = _lowered_tree(default_schedule(Y, XEON), XEON)
    assert _plans(lowered, XEON.l2) == []
    assert not any("prefetcht0" in asm.listing() for asm, _ in segments)


def _lowered_tree(tree, target):
    lowered, _, segments, _ = emit_x86(tree.lower(), target)
    return lowered, segments


def test_a_pass_loop_of_one_iteration_does_not_stop_the_prefetch():
    """ResNet-18's 3x3/2 convolution to 7 x 7 x 512: its 7-pixel row blocks make the block-row
    loop one iteration of step 7, whose offset is always 0. The lines per pass must not have to
    be a multiple of 7 bytes' worth for it (35 lines would exceed the limit; 31 are needed)."""
    import numpy as np

    import loopstack as lt
    from loopstack.workloads import conv_tensor

    rng = np.random.default_rng(0)
    s = lt.SymbolGenerator()
    X = lt.Tensor(rng.standard_normal((14, 14, 256)).astype(np.float32)).to(s.h, s.w, s.c)
    W = lt.Tensor(rng.standard_normal((3, 3, 256, 512)).astype(np.float32), constant=True)
    Y = conv_tensor(X, W.to(s.kr, s.ks, s.c, s.k), s.c, stride=2)
    tgt = dataclasses.replace(XEON, cores=1)
    lowered, segments = _lowered_tree(default_schedule(Y, tgt), tgt)
    (node, plan), = _plans(lowered, tgt.l2)
    assert plan.lines <= prefetch.MAX_LINES_PER_PASS
    assert "prefetcht0" in "\n".join(asm.listing() for asm, _ in segments)
