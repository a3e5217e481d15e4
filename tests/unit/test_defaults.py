"""The default schedule generator (tune/defaults.py) for dense convolutions and its block model."""
import numpy as np
import pytest

import loopstack as lt
from loopstack.isa.target import TARGETS
from loopstack.tune.defaults import choose_block, default_schedule, rank_blocks
from loopstack.workloads import conv_reference, conv_tensor, get_workload

AVX2 = TARGETS["avx2"]      # the host-independent description: 32 KiB L1, 512 KiB L2 (Zen 3)


def _conv(h, c, k, stride=1, pad=1, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((h, h, c)).astype(np.float32)
    w = (rng.standard_normal((3, 3, c, k)) / np.sqrt(9 * c)).astype(np.float32)
    s = lt.SymbolGenerator()
    Y = conv_tensor(lt.Tensor(x).to(s.h, s.w, s.c), lt.Tensor(w).to(s.r, s.s, s.c, s.k), s.c, pad=pad, stride=stride)
    return Y, conv_reference(x, w, stride, pad)


def _weight_panel(tree):
    """Shape of the staged weight temp (the packed panel), or None when nothing is staged."""
    temps = [b for b in tree.lower().temps if len(b.shape) == 4]
    return tuple(temps[0].shape) if temps else None


@pytest.mark.parametrize("name", ["CONV-3", "CONV-4"])
def test_wide_channel_convolutions_pack_l1_sized_weight_tiles(name):
    """C = 256, 512: no block's whole weight panel streams from L2 fast enough, so the weights
    are packed per (channel tile, vector panel) into a contiguous tile that stays in L1, and the
    channel tile is the outermost loop."""
    Y, _ = get_workload(name).build(seed=0)
    tree = default_schedule(Y, AVX2)
    r, s, ct, width = _weight_panel(tree)
    assert ct < 256 and r * s * ct * width * 4 <= AVX2.l1d
    (order,) = [ns.order for i, ns in tree.schedule if tree.graph.reduced(tree.graph.node(i))]
    assert order[0] == ("c", 256 // ct if name == "CONV-3" else 512 // ct, 0)


@pytest.mark.parametrize("name,channels", [("CONV-1", 64), ("CONV-2", 128)])
def test_narrow_channel_convolutions_stream_the_whole_panel(name, channels):
    """C = 64, 128: the block's weight panel over all channels streams from L2 no faster than L2
    delivers, so the channels are not tiled (no zeroing pass, no accumulator reloads)."""
    Y, _ = get_workload(name).build(seed=0)
    tree = default_schedule(Y, AVX2)
    assert _weight_panel(tree)[:3] == (3, 3, channels)


def test_a_core_whose_prefetchers_stream_tiles_keeps_whole_weight_panels():
    """ResNet-18's 14 x 14 256 -> 256 layer and CONV-4 (7 x 7 x 512) on one core with a 1 MiB L2.
    A core that prefetches streamed tiles in software (an AVX-512 Xeon) keeps the 14 x 14 layer's
    295 KB panels out of L2 and shrinks CONV-4's tiles to what the passes over each can
    prefetch; one whose hardware prefetchers stream them (Target.streams_prefetched, a Zen 4)
    streams the whole 14 x 14 panel from L2 and keeps CONV-4's L1 tile as large as L1 holds."""
    import dataclasses

    def panel(Y, streams):
        tgt = dataclasses.replace(TARGETS["avx512"], l1d=32 << 10, l2=1 << 20, cores=1, streams_prefetched=streams)
        return _weight_panel(default_schedule(Y, tgt)), tgt

    Y, want = _conv(14, 256, 256, 1, 1)
    (_, _, ct, width), tgt = panel(Y, True)
    assert ct == 256 and 9 * ct * width * 4 <= tgt.l2 // 2
    (_, _, ct, width), tgt = panel(Y, False)
    assert ct < 256 and 9 * ct * width * 4 <= tgt.l1d
    Y4, _ = get_workload("CONV-4").build(seed=0)
    (_, _, hw, width), tgt = panel(Y4, True)
    assert hw < 512 and 9 * hw * width * 4 <= tgt.l1d and 2 * 9 * hw * width * 4 > tgt.l1d * 7 // 8
    (_, _, sw, _), _ = panel(Y4, False)
    assert sw < hw
    Y.set(default_schedule(Y, panel(Y, True)[1]))
    np.testing.assert_allclose(Y.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("h,c,k,stride,pad", [
    (8, 32, 32, 1, 1), (7, 64, 40, 1, 1), (9, 24, 20, 2, 0), (5, 512, 13, 1, 1), (14, 96, 56, 1, 1)])
def test_default_convolution_schedules_are_correct(h, c, k, stride, pad):
    Y, want = _conv(h, c, k, stride, pad)
    tree = default_schedule(Y)
    Y.set(tree)
    np.testing.assert_allclose(Y.numpy(), want, rtol=1e-4, atol=1e-4)


def test_fourteen_wide_rows_take_a_block_that_divides_them():
    assert 14 % choose_block(14, 64, AVX2, packed=True).mr == 0


def test_one_vector_tails_are_not_chosen_for_seven_wide_rows():
    """7 x 64 vectors: a 4 x 3 block leaves a one-vector panel tail (a whole extra pass over the
    input for 1/64 of the work); the model ranks it below a block whose tail is wider."""
    best = choose_block(7, 64, AVX2, packed=True)
    assert 64 % best.nv == 0 or 64 % best.nv > best.nv // 2


def test_block_model_counts_columns_reloaded_for_lack_of_registers():
    """The model's loads per FMA: a 2 x 6 block (12 accumulators, a broadcast, 3 registers for 6
    columns) re-reads 3 columns for its second row, so it ranks below 6 x 2 and 4 x 3 on a
    matrix that all of them divide."""
    order = [(b.mr, b.nv) for b in rank_blocks(48, 48, AVX2, packed=True) if b.mr * b.nv == 12]
    assert order.index((4, 3)) < order.index((6, 2)) < order.index((2, 6))


def test_small_blocks_are_modelled_with_a_second_accumulator_set():
    """A one-row block of 4 vectors has 4 chains; with a second set it is limited by its loads
    (5 a step on 2 ports), not by the FMA latency (4 cycles a step)."""
    eff = {(b.mr, b.nv): b.efficiency for b in rank_blocks(1, 4, AVX2)}
    assert eff[(1, 4)] > 0.5 * 4 / 2 / (4 + 1)


@pytest.mark.parametrize("name", ["avx2", "avx512"])
@pytest.mark.parametrize("depthwise", [False, True])
def test_every_ranked_block_is_one_the_backend_holds_in_registers(name, depthwise):
    """Rows of 13 or 26 once gave a depthwise block of 13 accumulators on AVX2, one more than the
    backend keeps in registers (Target.block_registers), so the schedule compiled to another nest."""
    tgt = TARGETS[name]
    for rows in (7, 13, 26, 56):
        for vectors in (1, 2, 3, 30):
            for b in rank_blocks(rows, vectors, tgt, depthwise=depthwise):
                assert b.mr * b.nv <= tgt.block_registers, (rows, vectors, b)


def _block_fma_destinations(tree, tgt):
    """Registers written by the FMAs of `tree` compiled for `tgt` (emitted only: no AVX-512 CPU
    needed), in the loop that writes the most of them: the main block's reduction loop."""
    import re

    from loopstack.backend.x86.compile import emit_x86

    _, _, segments, _ = emit_x86(tree.lower(), tgt)
    most = set()
    for asm, _ in segments:
        lines = asm.listing().splitlines()
        for i, top in enumerate(lines):
            if not re.match(r"\w+_top:$", top):
                continue
            end = next(j for j in range(i, len(lines)) if re.search(rf"\bjne {top[:-1]}$", lines[j]))
            dest = {re.search(r"vfmadd231ps (\w+)", line).group(1) for line in lines[i:end] if "vfmadd231ps" in line}
            most = max(most, dest, key=len)
    return most


@pytest.mark.parametrize("name", ["MM-256", "CONV-1"])
def test_avx512_dense_blocks_use_the_wide_register_file(name):
    """AVX-512 has 32 registers: a dense block takes up to Target.block_registers (29)
    accumulators, not AVX2's dozen, and the backend keeps every one in a register."""
    tgt = TARGETS["avx512"]
    Y, _ = get_workload(name).build(seed=0)
    tree = default_schedule(Y, tgt)
    mr, nv = _block(tree, tgt)
    assert 13 < mr * nv <= tgt.block_registers
    assert len(_block_fma_destinations(tree, tgt)) == mr * nv


def test_avx512_depthwise_blocks_stay_small():
    tgt = TARGETS["avx512"]
    for rows in (14, 28, 56):
        b = choose_block(rows, 5, tgt, depthwise=True)
        assert b.mr * b.nv <= 13


def _block(tree, tgt):
    """(rows, vectors) of the register block: the two innermost loops of the reduction."""
    (order,) = [ns.order for i, ns in tree.schedule if tree.graph.reduced(tree.graph.node(i))]
    (_, rows, _), (_, width, _) = order[-2:]
    return rows, -(-width // tgt.lanes())


def _matmul(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    s = lt.SymbolGenerator()
    return (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k), a @ b


@pytest.mark.parametrize("m, k, n, tiled", [(2048, 256, 256, True), (256, 256, 256, False), (64, 512, 512, False)])
def test_matmuls_whose_rows_leave_l2_pack_b_for_a_tile_of_panels(m, k, n, tiled):
    """A[m, k] larger than L2 would stream from L3 once per 16-column panel of B: where B stays
    in L2, the default then packs B for a vector tile of panels (its packed tile in a quarter of
    L2), and each row block, once in L1, serves every panel of the tile.  A smaller A keeps one
    panel per pass (and a B beyond L2 streams in k tiles: see the next test)."""
    C, want = _matmul(m, k, n)
    tree = default_schedule(C, AVX2)
    (order,) = [ns.order for i, ns in tree.schedule if tree.graph.reduced(tree.graph.node(i))]
    steps = [s for v, s, _ in order if v == "n"]
    panel = [b for b in tree.lower().temps if len(b.shape) == 2]
    if tiled:
        assert len(steps) == 3 and steps[0] * steps[1] * steps[2] == n
        width = steps[1] * steps[2]
        assert 16 < width < n and k * width * 4 <= AVX2.l2 // 4
        assert [tuple(b.shape) for b in panel] == [(k, width)]      # B packed per tile, not per panel
    else:
        assert len(steps) == 2
    C.set(tree)
    np.testing.assert_allclose(C.numpy(), want, rtol=1e-3, atol=1e-3)


def test_a_core_with_one_load_port_takes_depthwise_blocks_its_loads_keep_up_with():
    """A depthwise block loads an input vector per FMA and a weight vector per column: on the
    Cortex-A57 (one 128-bit load a cycle) a one-row block would issue two loads per FMA; the
    chosen block shares its weight vectors over rows, unlike the choice for two load ports."""
    import dataclasses

    from loopstack.isa.target import get_target

    a57 = get_target("neon", cpu="cortex-a57", check=False)
    assert a57.load_ports == 1 and TARGETS["avx2"].load_ports == 2
    one = rank_blocks(14, 60, a57, depthwise=True)[0]
    two = rank_blocks(14, 60, dataclasses.replace(a57, load_ports=2), depthwise=True)[0]
    assert one.mr > 1 and (one.mr + 1) / one.mr < 1.5          # loads per FMA: 1 + 1/mr
    assert (one.mr, one.nv) != (two.mr, two.nv)


def test_a_full_reduction_to_a_scalar_gets_a_default_schedule():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    a, b = lt.symbols("a b")
    for Y in (lt.Tensor(x).to(a, b).sum(a, b), lt.Tensor(x).to(a, b).sum(b).sum(a) * 2):
        Y.set(default_schedule(Y))          # raised IndexError on the 0-d output
        assert float(Y.numpy()) in (x.sum(), 2 * x.sum())


def _dense(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    s = lt.SymbolGenerator()
    return (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(w, constant=True).to(s.k, s.n)).sum(s.k), a @ w


@pytest.mark.parametrize("k, n", [(768, 3072), (3072, 768), (768, 768)])
def test_a_dense_layer_streaming_its_weights_takes_a_block_without_a_row_tail(k, n):
    """BERT-base's 128-row products: their weights leave L2 and A stays there. The modelled best
    (14 x 2) leaves a 2-row tail that walks every packed panel again; a block dividing the rows,
    modelled within 2 %, is taken, the narrower of those modelled alike (8 x 3) where L1's ways
    hold its 8 rows beside the panel (a Xeon's 48 KiB 12-way L1), else one of 4 rows (4 x 6: a
    Zen 4's 32 KiB 8-way L1, whose 24 KB panel leaves 2 ways)."""
    import dataclasses

    Y, want = _dense(128, k, n)
    for l1d, ways, block in ((48 << 10, 12, (8, 3)), (32 << 10, 8, (4, 6))):
        tgt = dataclasses.replace(TARGETS["avx512"], l1d=l1d, l1d_ways=ways, l2=2 << 20, cores=1)
        rows, vectors = _block(default_schedule(Y, tgt), tgt)
        best = rank_blocks(128, n // tgt.lanes(), tgt, packed=True)[0]
        assert 128 % best.mr and 128 % rows == 0 and (rows, vectors) == block
        Y2, _ = _dense(128, 128, n)                              # weights in L2: the modelled best
        assert _block(default_schedule(Y2, tgt), tgt) == (best.mr, best.nv)


@pytest.mark.parametrize("m, k, n, l1d", [(128, 3072, 768, 32 << 10), (128, 768, 3072, 32 << 10),
                                           (128, 768, 3072, 48 << 10), (8, 1024, 1024, 32 << 10)])
def test_weights_streaming_from_beyond_l2_are_packed_in_k_tiles_that_l1_and_the_prefetch_hold(m, k, n, l1d):
    """Weights beyond L2 (whether A stays in L2 or not: 3072 x 768's A is 1.5 MiB against 1 MiB)
    are packed in k tiles: each panel at most 3/4 of L1 and no more than its passes can
    prefetch the next one in (32 lines each), down to a quarter of L1 for a few passes."""
    import dataclasses

    from loopstack.backend.prefetch import LINE, MAX_LINES_PER_PASS

    tgt = dataclasses.replace(TARGETS["avx512"], l1d=l1d, l2=1 << 20, cores=1)
    Y, want = _dense(m, k, n)
    tree = default_schedule(Y, tgt)
    rows, vectors = _block(tree, tgt)
    (panel,) = [b for b in tree.lower().temps if len(b.shape) == 2]
    kc, width = panel.shape
    assert width == vectors * tgt.lanes() and kc < k and k % kc == 0
    passes = -(-m // rows)
    bound = max(l1d // 4, min(l1d * 3 // 4, passes * MAX_LINES_PER_PASS * LINE))
    assert l1d // 8 < kc * width * 4 <= bound
    Y.set(tree)
    np.testing.assert_allclose(Y.numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_dense_layer_with_a_whole_row_block_computes_the_same():
    Y, want = _dense(32, 1024, 640, seed=4)                     # 2.5 MiB of weights, 8-row blocks
    import dataclasses

    from loopstack.isa.target import get_target

    tree = default_schedule(Y, dataclasses.replace(get_target(None), l2=2 << 20, cores=1))
    Y.set(tree)
    np.testing.assert_allclose(Y.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k, packed", [(96, True), (576, False)])
def test_a_pointwise_convolution_over_a_small_map_counts_all_its_rows_to_pack(k, packed):
    """A 1x1 convolution over a 7x7 map has 7 rows of its block's row variable but 49 output
    rows sweep each weight panel: its weights are packed per panel when the panel fits untiled
    (K = 96), and not when a panel would be tiled along K (576: the accumulators would be stored
    and reloaded per tile)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((7, 7, k)).astype(np.float32)
    w = (rng.standard_normal((k, 576 if k == 96 else 96)) / np.sqrt(k)).astype(np.float32)
    s = lt.SymbolGenerator()
    Y = (lt.Tensor(x).to(s.h, s.w, s.c) * lt.Tensor(w).to(s.c, s.n)).sum(s.c)
    tree = default_schedule(Y, TARGETS["avx512"])
    panels = [b for b in tree.lower().temps if len(b.shape) == 2]
    assert bool(panels) == packed
    Y.set(tree)
    np.testing.assert_allclose(Y.numpy(target="interp"), np.einsum("hwc,cn->hwn", x, w), rtol=1e-4, atol=1e-4)
