"""Default schedules from the target's registers and caches (the autotuner's starting point).

For every reduction statement `out[O] += f(in...)` of the program (matmul, convolution, depthwise
convolution, linear layers), the generator picks

* a **register block**: `mr` rows of the output variable just outside the unit-stride one times
  `nv` vectors of the unit-stride one (the vectorised loop), from an issue model of the target:
  per reduction step a block issues `mr*nv` FMAs and loads a broadcast per row and a vector per
  column (a depthwise block, which has no reuse, loads one vector per FMA); `fma_units` FMAs
  issue per cycle and each accumulator chain takes `fma_latency` cycles per step. A dense block
  takes at most the accumulators the backend allows (`Target.block_registers`: 12 of 16 on
  AVX2, 29 of 32 on AVX-512) and at most MAX_BLOCK_VECTORS vectors across; columns that find
  no register beside them and the broadcast are re-read by every further row, and a block
  with fewer chains than the latency needs gets a second accumulator set from the backend.
  Row and vector tails are costed as smaller blocks (a vector tail narrower than half a block
  as half a block), so 7- and 14-wide outputs pick blocks that divide them when that pays.
  (Goto & van de Geijn / Smith: the micro-kernel is the largest block the registers hold whose
  loads the FMAs hide.)
* **cache tiles**: the slice of the reduced operand that one output block walks must stay close
  while the rows stream. Matmul: the `kc x nv*lanes` panel of B in half of L1, else k is tiled;
  B is packed per panel when it does not sit in L1, and for a tile of panels (in a quarter of
  L2) when A does not stay in L2, so that each row block serves the tile's panels from L1.
  Direct convolution (the slicing analysis of paper 004 §4.1): the weights are packed per
  vector panel, and the input channels are tiled only when the packed panel
  `R*S*C x nv*lanes` can neither stream from L2 (it fits the L2 share and the block reads it no
  faster than L2 delivers) nor stay in L1; then the channel tile is the largest whose weight
  tile stays in L1, and the block and the tile are chosen together. Weights larger than L2 come
  from memory: the tile is then small enough for the passes over it to prefetch the next one.

Loop order (outer to inner):

    matmul  n(nb) [k(kc)] m(mr) k m(1) n(1)                 6 x 16 block on AVX2
            n(nt) m(mr) n(nb) k m(1) n(1)                   A larger than L2 (MM-512: nt = 64)
    conv    [c(ct)] k(kb) oh ow(owb) r s c ow(1) k(1)       NHWC, W packed per (c, k) tile
    dwconv  c(cb) oh ow(owb) r s ow(1) c(1)                 input in L2
            oh c(cb) ow(owb) r s ow(1) c(1)                 larger input: each band of input
                                                            rows read once for all channels

Element-wise consumers (bias, ReLU, the write) take the same order without the reduction loops,
so they fuse into the store of the output block.

**Every core** (`parallelize`): the outermost loop of a reduction's nest runs in parallel when it
walks the output (never a reduction: the threads would race), has at least two iterations, and
the nest does at least PARALLEL_MIN_FLOPS of work (AWAKE_PARALLEL_MIN_FLOPS for a network's
layers, whose workers are kept awake from layer to layer); an outermost loop of one iteration
is removed first, so the loop inside it splits; for several cores, the rows of a layer whose
packed weights are less than twice its output split instead of its panels (_rows_past_packs).
For several cores a reduction's tile loop (channel tiles) goes inside the first output loop of
two or more iterations, never outermost.
That loop walks the column panels, except in a layer of a chain (an MLP) whose weights sit in
L2: its rows are cut into one part per core (`Target.cores`) first, so that each thread reads
only the rows it wrote in the layer before. Each thread then computes whole output panels in
the serial order, so results are bit-identical to one thread; a kernel runs on
`kernel.threads` threads (every core by default, 1 to compare with single-threaded peers). The
annotation changes no loop order (a network's layers may have their rows swapped outside the
panels first): a kernel run on one thread is the same code, with the same results.

`schedule_for(tensor, target)` is what the benchmark compiles: the tuning database's best schedule
for the program on this target (`best_known_schedule`) when one was recorded, else
`default_schedule`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

__all__ = ["default_schedule", "best_known_schedule", "chosen_schedule", "schedule_for", "BlockChoice", "plan",
           "parallelize"]

_BYTES = 4              # fp32
_LINE = 64
_POOL_VECTORS = 4       # a pool's block takes up to this many vectors of channels (a 64-float pixel)
_DEPTHWISE_MAX_ACC = 13  # a depthwise block reuses no loaded vector: more accumulators only add tails
# vectors across a dense block: a wider one re-reads most of its columns for every row (AVX-512
# MLP-8x1024: a 2 x 14 block ran at 0.73x a 4 x 6 one); the search space offers no wider either
MAX_BLOCK_VECTORS = 6
_PACK_MIN_ROWS = 8      # pack B panels when at least this many output rows sweep each one
_PACK_PANEL = 64 << 10  # the largest packed panel (bytes) left untiled along k
# the largest packed panel of weights that stream from beyond L2, as a share of L1 (and no larger
# than its passes can prefetch the next one in, backend/prefetch.py): see _streamed_panel
_STREAMED_PANEL_L1 = 3 / 4
_STREAMED_PANEL_MIN_L1 = 1 / 4   # ... and never less (a few passes prefetch little: MLP-8x1024)
_WHOLE_ROWS_SLACK = 0.02  # modelled efficiency a matmul streaming its weights gives up for a block without a row tail
_L1_SHARE = 7 / 8       # of L1 a stationary weight tile may fill (the input rows take the rest)
_L2_SHARE = 1 / 4       # of L2 a weight tile streamed from L2 may fill (input and output share it)
# of L2 a convolution block's whole weight panel (all input channels) streamed from L2 may fill
# on a core whose prefetchers stream it (Target.streams_prefetched): a layer's input rows and
# output block take the rest. (Measured on a Zen 4, 1 MiB L2, one thread,
# inside the model: ResNet-18's 14 x 14 256 -> 256 layers, 295 KB panels, 2110 -> 1990 us against
# 16-channel tiles; onnxruntime 2025.)
_L2_PANEL_SHARE = 1 / 2
_L2_STREAM = 24         # bytes per cycle a block may stream from L2 (of the 32 the L2 -> L1 path moves)
_TILING_COST = 0.03     # modelled efficiency a convolution loses by tiling its input channels
# work of a nest below which its loop is not split over threads: ~40 us of one AVX-512 core.
# The thread team hands a call over in about a microsecond while its workers spin, and in a
# core's wake-up (50-100 us on a virtual machine) when they sleep (backend/threads.py), so a
# layer this size gains when calls follow each other (MLP-64x256: 8.4 MFLOP per layer)
PARALLEL_MIN_FLOPS = 1 << 23
# the same for a nest whose workers are known to be awake: a network's layers on several threads
# (onnx/model.py), called one after another, each call handing its steps to workers that still
# spin from the layer before (a microsecond or two per step). ~5 us of one AVX-512 core
AWAKE_PARALLEL_MIN_FLOPS = 1 << 19
# elements of an element-wise nest below which a network's layer does not split it (~3 us)
AWAKE_PARALLEL_MIN_ELEMENTS = 1 << 14


def _target(target):
    from ..isa.target import get_target, host_target

    if target is None or target in ("x86", "native", "interp"):
        return host_target()
    if isinstance(target, str):
        return get_target(target)
    return target


@dataclass(frozen=True)
class BlockChoice:
    """A register block: `mr` rows of `row`, `nv` vectors of `vec`, and its modelled efficiency."""
    row: str | None
    mr: int
    nv: int
    efficiency: float


def block_limit(tgt, depthwise=False) -> int:
    """Accumulators of a register block: what the backend leaves after reserving registers to
    evaluate the statement (Target.block_registers: 12 on AVX2, 29 on AVX-512), and for a
    depthwise block at most _DEPTHWISE_MAX_ACC.

    (Measured on an AVX-512 Xeon in interleaved rounds, blocks of up to 29 accumulators against
    13: MM-512 14x2 against 3x4 1.18x, MLP-64x1024 1.48x, CONV-1..4 1.08-1.18x; depthwise
    DWCONV-2 lost a sixth with 28-row blocks.)"""
    if depthwise:
        return min(_DEPTHWISE_MAX_ACC, tgt.block_registers)
    return tgt.block_registers


def _dense_loads(mr, nv, tgt):
    """Loads per reduction step of a dense block: a broadcast per row and a vector per column;
    columns that find no register beside the accumulators and the broadcast are re-read (as FMA
    memory operands) by every further row."""
    held = max(0, min(nv, tgt.vector_registers - mr * nv - 1))
    return mr + nv + (mr - 1) * (nv - held)


def _accumulator_sets(fmas, tgt, depthwise):
    """1, or 2 where the backend gives a dense block with fewer chains than the FMA latency
    needs a second accumulator set (alternate steps update it; its loop runs step pairs)."""
    if not depthwise and fmas < tgt.accumulators and 2 * fmas <= block_limit(tgt):
        return 2
    return 1


def _block_cycles(mr, nv, tgt, depthwise):
    fmas = mr * nv
    loads = mr * nv + nv if depthwise else _dense_loads(mr, nv, tgt)
    sets = _accumulator_sets(fmas, tgt, depthwise)
    latency = tgt.fma_latency / sets
    # + one cycle per trip of the innermost loop for its counter and address arithmetic
    return max(fmas / tgt.fma_units, latency, loads / tgt.load_ports) + 1 / sets


def _fits(mr, nv, tgt, depthwise):
    """Whether an (mr, nv) block stays in registers: at most the backend's block limit, and
    (depthwise) with a register beside the accumulators for each weight vector and the input."""
    acc = mr * nv
    if acc > block_limit(tgt, depthwise):
        return False
    return not depthwise or acc + nv + 1 <= tgt.vector_registers


def _output_cycles(mr, nv, row_extent, vec_vectors, tgt, depthwise):
    """Modelled cycles per reduction step of the whole output in (mr, nv) blocks, tails included.

    A dense vector tail narrower than half the block costs what half a block does: its panel
    pass re-reads the input rows and re-stages the weights like a full one (measured: a one-vector
    tail costs 3-4 % of a convolution whatever its share of the work)."""
    cycles = 0.0
    for extent_r, count_r in ((mr, row_extent // mr), (row_extent % mr, 1)):
        if not extent_r or not count_r:
            continue
        for extent_v, count_v in ((nv, vec_vectors // nv), (vec_vectors % nv, 1)):
            if not extent_v or not count_v:
                continue
            if not depthwise and extent_v < nv:
                extent_v = max(extent_v, -(-nv // 2))
            cycles += count_r * count_v * _block_cycles(extent_r, extent_v, tgt, depthwise)
    return cycles


def rank_blocks(row_extent: int, vec_vectors: int, tgt, depthwise=False, packed=False) -> list:
    """Every (mr, nv) block that fits, best first: modelled efficiency over the whole output, then
    more accumulators, then (dense) fewer loads per FMA, then wider.

    `packed`: the reduced operand is staged in panels of the block's width, so a block whose
    width is not a whole number of cache lines does not split lines."""
    return list(_ranked_blocks(row_extent, vec_vectors, tgt, bool(depthwise), bool(packed)))


@functools.lru_cache(maxsize=1024)
def _ranked_blocks(row_extent: int, vec_vectors: int, tgt, depthwise: bool, packed: bool) -> tuple:
    """rank_blocks, once per output shape and target (a network's layers share them)."""
    ranked = []
    widest = tgt.vector_registers if depthwise else MAX_BLOCK_VECTORS
    for nv in range(1, min(vec_vectors, widest) + 1):
        for mr in range(1, max(1, row_extent) + 1):
            if not _fits(mr, nv, tgt, depthwise):
                break
            cycles = _output_cycles(mr, nv, row_extent, vec_vectors, tgt, depthwise)
            eff = row_extent * vec_vectors / tgt.fma_units / cycles
            straddles = (nv * tgt.lanes() * _BYTES) % _LINE and (vec_vectors * tgt.lanes() * _BYTES) % _LINE == 0
            if straddles and not packed:
                eff *= 0.85     # vector blocks that straddle cache lines split their loads
            if depthwise:
                key = (round(eff, 3), mr * nv, nv)
            else:
                key = (round(eff, 3), mr * nv, -_dense_loads(mr, nv, tgt) / (mr * nv), nv)
            ranked.append((key, BlockChoice(None, mr, nv, eff)))
    ranked.sort(key=lambda kb: kb[0], reverse=True)
    return tuple(b for _, b in ranked)


def _window_pool_block(row_extent, vec_vectors, tgt):
    """The block of a pool over windows of channels-last pixels (no product: each input vector
    is loaded for one max or add), or None: the best-ranked one as wide as the channels, up to
    _POOL_VECTORS vectors. A pool is bound by reading its input, not by its few operations; a
    narrower block walks the image once per channel tile and reads one line of each pixel per
    walk, a stride the prefetchers follow worse than whole pixels. (Measured on an AVX-512 Xeon,
    one thread, inside the model: ResNet-18's 3x3/2 max pool over 112 x 112 x 64, 12 x 1 blocks
    245 us, 3 x 4 blocks 183 us; onnxruntime 162 us.)"""
    wide = min(vec_vectors, _POOL_VECTORS)
    return next((b for b in rank_blocks(row_extent, vec_vectors, tgt, True) if b.nv == wide), None)


def choose_block(row_extent: int, vec_vectors: int, tgt, depthwise=False, packed=False) -> BlockChoice:
    """The (mr, nv) block of best modelled efficiency over the whole output (tails included)."""
    return rank_blocks(row_extent, vec_vectors, tgt, depthwise, packed)[0]


def _panel_balanced_block(row_extent: int, vec_vectors: int, tgt, depthwise: bool) -> BlockChoice:
    """The block of an output with fewer rows than cores (a batch-1 dense layer, a
    squeeze-excitation 1x1 convolution): its threads split the vector panels, so the rank is
    the modelled efficiency times how evenly `tgt.cores` threads share the panels. MLP 784 ->
    512 on two threads: 6-vector panels split 3/2.33 (288 and 224 columns) and the layer takes
    as long as the 288; 4-vector panels split 4/4."""
    from ..backend.threads import split_bound

    def shared(b):
        panels = vec_vectors / b.nv
        return b.efficiency * split_bound(-(-vec_vectors // b.nv), tgt.cores, panels) / tgt.cores
    return max(rank_blocks(row_extent, vec_vectors, tgt, depthwise), key=shared)


def _entries(var, extent, step):
    """The outer entry of `var` stepping by `step` (`(var, count, tail)`)."""
    return (var, extent // step, extent % step)


def _vector_tile(extent, vb, budget, column_bytes):
    """The widest multiple of the block width `vb` that divides `extent` and whose panel
    (`column_bytes` per column) fits `budget` bytes, when it is wider than a block and narrower
    than the extent; else None."""
    vt = _divisor_at_most(extent, budget // column_bytes, vb)
    return vt if vb < vt < extent else None


def _divisor_at_most(n, limit, multiple=1):
    best = multiple
    for d in range(multiple, min(n, limit) + 1, multiple):
        if n % d == 0:
            best = d
    return best


@dataclass(frozen=True)
class Plan:
    """The chosen order for one reduction statement (and the statements fused into its store)."""
    order: tuple            # entries, outer to inner, for the reduction
    out_order: tuple        # the same without the reduction loops (element-wise consumers)
    block: BlockChoice
    vec: str
    reduce_tile: tuple | None   # (var, tile)
    vec_tile: int | None
    pack: int | None = None     # the input of the multiply staged per vector panel (copy_input)


def plan(graph, node, tgt) -> Plan:
    """The default order of a reduction node (`graph.reduced(node)` non-empty)."""
    size = graph.size
    out = tuple(node.vars)
    red = tuple(v for v in graph.domain(node) if v not in out)
    lanes = tgt.lanes()
    vec = out[-1]
    nvec_total = max(1, -(-size(vec) // lanes))
    row = out[-2] if len(out) >= 2 else None
    depthwise = False
    # a depthwise statement: the reduced operand is not shared across the vector variable
    # (every input of the multiply indexes `vec`) -> no reuse of loaded vectors across rows
    mult = _producer(graph, node)
    if mult is not None:
        ins = list(mult.inputs)
        depthwise = all(vec in _read_vars(graph, i) for i in ins) and len(ins) >= 2
    if mult is None or mult.fn != "mul":
        # no product (a pool, a sum over windows): no loaded vector serves more than one
        # accumulator either, so its blocks are a depthwise convolution's (measured: ResNet-18's
        # 3x3/2 max pool over 112x112x64, 14x2 blocks 264 us, 4x4 152 us: one sweep of the image)
        depthwise = True
    if len(red) > 1 and row and not depthwise:
        weights = _packable_weights(graph, mult, red, vec, out, tgt)
        if weights is not None:
            return _direct_conv_plan(graph, node, tgt, red, weights)
    rext = size(row) if row else 1
    if tgt.cores > 1 and rext < tgt.cores:      # no rows to share: the threads split the panels
        blk = _panel_balanced_block(rext, nvec_total, tgt, depthwise)
    else:
        blk = choose_block(rext, nvec_total, tgt, depthwise)
    streamed = _streams_packed_weights(graph, mult, red, vec, row, depthwise, tgt, min(blk.nv * lanes, size(vec)))
    if streamed:
        blk = _whole_row_block(rext, nvec_total, tgt) or blk
    if (mult is None or mult.fn != "mul") and len(out) > 2:
        blk = _window_pool_block(rext, nvec_total, tgt) or blk
    blk = replace(blk, row=row)
    vb = min(blk.nv * lanes, size(vec))     # a block as wide as a short vector extent takes all of it
    mr = blk.mr

    # cache tiles (slicing analysis): the reduced operand's slice one block walks
    reduce_tile = None
    red_elems = 1
    for v in red:
        red_elems *= size(v)
    if red and not depthwise:
        inner = red[-1]
        other = red_elems // size(inner)
        # matmul: the kc x nb panel in half of L1 (A's rows stream beside it); convolution: the
        # weight slice of a channel tile may take all of L1 (its input rows are re-read from L2)
        budget = tgt.l1d if len(red) > 1 else tgt.l1d // 2
        if red_elems * vb * _BYTES > budget:
            fit = max(1, budget // (other * vb * _BYTES))
            t = _divisor_at_most(size(inner), fit, 8 if size(inner) % 8 == 0 and fit >= 8 else 1)
            if t < size(inner):
                reduce_tile = (inner, t)
    vec_tile = None
    if red and not depthwise:
        k_span = reduce_tile[1] * (red_elems // size(reduce_tile[0])) if reduce_tile else red_elems
        panel = k_span * size(vec) * _BYTES
        # (a vector tile is a multiple of the block dividing the extent: none when the block
        # leaves a tail, which the outer vector loop then takes)
        if panel > tgt.l2 // 2 and size(vec) % vb == 0:
            vec_tile = _vector_tile(size(vec), vb, tgt.l2 // 2, k_span * _BYTES)

    # packing (matmul): the reduced operand B[k, n] has rows N*4 bytes apart, which alias in L1
    # and split cache lines; staged per panel (copy_input under the panel loop) its rows are
    # vb*4 bytes apart and contiguous. Worth it when B does not sit in L1 anyway. The rows that
    # sweep a panel are every output row: a 1x1 convolution over a 7x7 map has 7 of the block's
    # row variable but 49 in all; counted only by the outer ones, the panel must fit untiled
    # (a k-tiled panel stores and reloads the accumulators per tile). MobileNetV3-Small's
    # 96 -> 576 layers at 7x7, alone, one thread on an AVX-512 Xeon: 40 -> 30 us packed;
    # its 576 -> 96 ones, which would be k-tiled, 28 -> 30 us.
    pack = None
    if mult is not None and len(red) == 1 and not depthwise and row and size(vec) > vb:
        ins = list(mult.inputs)
        bs = [i for i, x in enumerate(ins) if _read_vars(graph, x) == {red[0], vec}]
        rows = size(row) if size(row) >= _PACK_MIN_ROWS or red_elems * vb * _BYTES > _PACK_PANEL \
            else _points(graph, out[:-1])
        if bs and rows >= _PACK_MIN_ROWS and red_elems * size(vec) * _BYTES > tgt.l1d // 2:
            pack = bs[0]
            vec_tile = None
            reduce_tile = None
            largest = _streamed_panel(tgt, size(row), mr) if streamed else _PACK_PANEL
            whole_panel = red_elems * vb * _BYTES
            if (size(row) * red_elems * _BYTES > tgt.l2 and size(vec) % vb == 0
                    and whole_panel <= _PACK_PANEL):
                # A's rows do not stay in L2 between panels, so each panel would stream all of A
                # from L3 again: a vector tile of panels packed together in an L2 share lets
                # each row block, once in L1, serve every panel of the tile
                vec_tile = _vector_tile(size(vec), vb, int(tgt.l2 * _L2_SHARE), red_elems * _BYTES)
            elif whole_panel > largest:
                reduce_tile = (red[0], _divisor_at_most(red_elems, largest // (vb * _BYTES), 8))

    # a depthwise block sweeps the image once per channel tile; when the input does not fit in
    # L2 each sweep streams it from memory again (and uses only part of every cache line), so
    # the channel tiles go inside the outer output rows: a band of input rows is then read
    # from memory once, for all channels
    channels_inside = depthwise and row is not None and len(out) > 2 and \
        max(_source_bytes(graph, i) for i in (mult or node).inputs) > tgt.l2
    vec_entry = _entries(vec, size(vec), vec_tile or vb)
    order = [] if channels_inside else [vec_entry]
    for v in out[:-2]:
        order.append((v, size(v), 0))
    if reduce_tile:
        order.insert(_tile_position(order, len(order) - len(out[:-2]), tgt.cores),
                     _entries(reduce_tile[0], size(reduce_tile[0]), reduce_tile[1]))
    if channels_inside:
        order.append(vec_entry)
    if row:
        order.append(_entries(row, size(row), mr))
    if vec_tile:
        order.append((vec, vec_tile // vb, 0))
    for v in red:
        if reduce_tile and v == reduce_tile[0]:
            order.append((v, reduce_tile[1], 0))
        else:
            order.append((v, size(v), 0))
    if row and mr > 1:
        order.append((row, mr, 0))
    order.append((vec, vb, 0))
    order = _clean(order, graph, node)
    out_order = tuple(e for e in order if e[0] not in red)
    return Plan(tuple(order), _clean(list(out_order), graph, node, out), blk, vec, reduce_tile, vec_tile, pack)


def _streams_packed_weights(graph, mult, red, vec, row, depthwise, tgt, vb) -> bool:
    """A matmul whose B[k, n] is packed in panels (see plan) and leaves L2: a network's dense
    layer, a large matmul, whose block then divides its rows (_whole_row_block). Its weights
    arrive from beyond L2 during the first pass over each panel unless the passes before
    prefetch it (backend/prefetch.py), so its panel is at most what L1 holds beside the
    block's rows of A (_streamed_panel) where others take up to _PACK_PANEL. (Measured on an
    AVX-512 Xeon, one thread, BERT-base's layer: its 768 x 3072 and 3072 x 768 products in
    14 x 2 blocks, k tiles of 384-512 rows without prefetch 147 and 143 GFLOPS inside the
    model, tiles of 96 rows prefetched 189 and 175.) Where A leaves L2 too, only when a
    whole-k panel `vb` wide (the block's) is more than _PACK_PANEL: one that fits is served by
    a vector tile of panels (plan; on a Zen 4 MM-1024 on AVX2, 110 GFLOPS against 102 in
    streamed k tiles), a larger one would run every pass from L2 (Zen 4, AVX-512: BERT's
    3072 x 768 product, whose A is 1.5 MB against a 1 MB L2, 86-88 in 14 x 2 blocks and 64 KB
    k tiles, 109-113 in whole-row blocks and 24 KB ones; MM-1024 87 -> 107, MM-2048 85 -> 98)."""
    if mult is None or len(red) != 1 or depthwise or row is None or graph.size(vec) <= tgt.lanes():
        return False
    size = graph.size
    if not any(_read_vars(graph, x) == {red[0], vec} for x in mult.inputs) or size(row) < _PACK_MIN_ROWS:
        return False
    k = size(red[0])
    return k * size(vec) * _BYTES > tgt.l2 and (size(row) * k * _BYTES <= tgt.l2 or k * vb * _BYTES > _PACK_PANEL)


def _streamed_panel(tgt, rows: int, mr: int) -> int:
    """The largest packed panel (bytes) of weights that stream from beyond L2: _STREAMED_PANEL_L1
    of L1, the rest for the block's rows of A, and no more than the passes over it (its row
    blocks) can prefetch the next one in, MAX_LINES_PER_PASS lines each, down to
    _STREAMED_PANEL_MIN_L1 of L1 for a panel of few passes. (Measured on a Zen 4, one thread,
    k tiles of BERT's 768 x 3072 product in 8 x 3 blocks: 32 rows (6 KB) 83 GFLOPS, 64 rows
    94-96, 128 rows (24 KB) 97-104; its 3072 x 768 product, whose A is 1.5 MB against a 1 MB
    L2, 88 in 64 KB k tiles, 111 in 24 KB ones; MM-1024 and MM-2048 87 and 85 in 64 KB tiles,
    100 and 88 in 12 KB ones, 108 and 98 in 24 KB ones. Its hardware prefetchers fetch a panel
    as well as the software prefetch does.)"""
    from ..backend.prefetch import LINE, MAX_LINES_PER_PASS

    passes = -(-rows // mr)
    prefetchable = passes * MAX_LINES_PER_PASS * LINE
    return max(int(tgt.l1d * _STREAMED_PANEL_MIN_L1), min(int(tgt.l1d * _STREAMED_PANEL_L1), prefetchable))


def _rows_beside_panel(mr: int, panel: int, tgt) -> bool:
    """Whether a block's `mr` rows of A fit in the L1 ways that a packed panel of up to `panel`
    bytes leaves free in every set: at most two rows a free way (a row's lines, K x 4 bytes
    apart, fall in one or a few set positions). (Measured, one thread, BERT-base's 128-row
    products streaming their weights: on a Zen 4, 32 KiB 8-way L1, 24 KB panels fill 6 ways
    and 4 x 6 blocks ran 2-8 % faster than 8 x 3 ones, the layer 19.0 -> 18.3 ms; on an
    AVX-512 Xeon, 48 KiB 12-way, 12 KB panels left 9 ways and 8 x 3 ran 3 % faster than 4 x 6.)"""
    way = tgt.l1d // tgt.l1d_ways
    return mr <= 2 * (tgt.l1d_ways - -(-panel // way))


def _whole_row_block(row_extent, vec_vectors, tgt):
    """For such a matmul, the best-ranked block whose rows divide the row extent, when it is
    within _WHOLE_ROWS_SLACK of the modelled best; else None. A row tail walks every packed
    panel once more for its few rows, and the panels arrive from memory. (Measured on an
    AVX-512 Xeon, one thread, BERT-base's layer inside the model, interleaved: its 128-row
    products in 14 x 2 blocks with a 2-row tail against 8 x 3 blocks, the layer 13.1 -> 12.1 ms;
    13 x 2 (an 11-row tail) no better than 14 x 2, 9 x 3 (a 2-row tail) 10 % slower than 8 x 3,
    4 x 6 3 % slower.)"""
    ranked = rank_blocks(row_extent, vec_vectors, tgt, packed=True)
    best = ranked[0].efficiency
    whole = [b for b in ranked if row_extent % b.mr == 0 and b.efficiency >= best - _WHOLE_ROWS_SLACK
             and _rows_beside_panel(b.mr, _streamed_panel(tgt, row_extent, b.mr), tgt)]
    # of blocks modelled alike, the narrower: its panel of a given size runs deeper along k, so
    # its accumulators are stored and reloaded fewer times (4 x 6 lost to 8 x 3 above)
    return max(whole, key=lambda b: (round(b.efficiency, 2), -b.nv), default=None)


def _points(graph, variables) -> int:
    n = 1
    for v in variables:
        n *= graph.size(v)
    return n


def _packable_weights(graph, mult, red, vec, out, tgt):
    """The input of the multiply indexed by exactly the reduced variables and `vec` (a direct
    convolution's weights W[r, s, c, k]), when staging it per vector panel pays: it does not sit
    in L1 anyway and enough output rows sweep each panel; else None."""
    size = graph.size
    if mult is None:
        return None
    found = [i for i, x in enumerate(mult.inputs) if _read_vars(graph, x) == set(red) | {vec}]
    rows = 1
    for v in out[:-1]:
        rows *= size(v)
    weight_bytes = size(vec) * _BYTES
    for v in red:
        weight_bytes *= size(v)
    if not found or rows < _PACK_MIN_ROWS or weight_bytes <= tgt.l1d // 2:
        return None
    return found[0]


def _channel_tile(channels, taps, blk, tgt) -> int:
    """Input channels per weight tile (paper 004 §4.1, Nc): all of them when the block's packed
    weight panel (taps x channels x block width) can stream from L2 -- it fits the L2 share and
    the block consumes it no faster than L2 delivers -- otherwise the largest divisor whose tile
    stays in L1 while the output rows sweep it."""
    lanes = tgt.lanes()
    width = blk.nv * lanes * _BYTES          # weight bytes one reduction step of the block reads
    step = _block_cycles(blk.mr, blk.nv, tgt, False)
    # (a core that prefetches streamed tiles in software keeps its panels to _L2_SHARE: its tiles
    # of weights from memory are shrunk for the prefetch anyway, _prefetchable_channel_tile)
    share = _L2_PANEL_SHARE if tgt.streams_prefetched else _L2_SHARE
    if taps * channels * width <= tgt.l2 * share and width <= _L2_STREAM * step:
        return channels
    fit = max(1, int(tgt.l1d * _L1_SHARE) // (taps * width))
    return _divisor_at_most(channels, fit, lanes if channels % lanes == 0 and fit >= lanes else 1)


def _prefetchable_channel_tile(ct, channels, bytes_per_channel, passes, bytes_per_filter_channel, tgt) -> int:
    """`ct`, or a smaller channel tile when the weights stream from memory and the code
    generator could not prefetch a tile of `ct` channels: each of the `passes` output passes
    over a tile fetches its share of the next one, at most MAX_LINES_PER_PASS lines
    (backend/prefetch.py), so a tile too large for its few passes (a 7x7 output sweeps each
    tile 7 times) is read on demand, its first pass waiting on memory. Then the tile is the
    largest divisor of the channels whose share fits (and that is worth prefetching).
    (Measured on an AVX-512 Xeon, one thread, layer by layer in interleaved rounds: CONV-4's
    shape, 16 -> 4 channels a tile, 1650 -> 1240 us warm, 1840 -> 1450 us with its weights
    evicted; ResNet-18's 14x14 256 -> 256, all 256 -> 16 channels, 1210 -> 1130 us warm,
    1350 -> 1185 us evicted.)"""
    from ..backend.prefetch import LINE, MAX_LINES_PER_PASS, MIN_TILE_BYTES

    def lines(c):
        return -(-(c * bytes_per_channel // LINE) // passes)

    # for one core only: a smaller tile makes the channel tiles the nest's outermost loop, a
    # reduction no thread can split, and a kernel for several cores would run serially; and only
    # where the hardware prefetchers do not stream the tile in themselves (Target.streams_prefetched:
    # on a Zen 4, ResNet-18's 7x7 and 14x14 layers inside the model ran 3-13 % slower so shrunk)
    if tgt.cores > 1 or tgt.streams_prefetched or channels * bytes_per_filter_channel <= tgt.l2 or passes < 2 or \
            lines(ct) <= MAX_LINES_PER_PASS:
        return ct
    for c in range(ct - 1, 0, -1):
        if channels % c == 0 and lines(c) <= MAX_LINES_PER_PASS and c * bytes_per_channel >= MIN_TILE_BYTES:
            return c
    return ct


def _direct_conv_plan(graph, node, tgt, red, weights) -> Plan:
    """Direct convolution (paper 004 §4): the weights packed per vector panel and channel tile,
    the block and the channel tile chosen together (tiling the channels costs _TILING_COST of the
    modelled efficiency: the accumulators are re-loaded once per tile and the output is zeroed
    in a pass of its own). Order: channel tiles, vector panels, the other output variables, row
    blocks, the taps and channels of a tile, the block:

        c(ct) k(vb) oh ow(mr) r s c ow(1) k(1)
    """
    size = graph.size
    out = tuple(node.vars)
    vec, row = out[-1], out[-2]
    lanes = tgt.lanes()
    channels = red[-1]
    taps = 1
    for v in red[:-1]:
        taps *= size(v)
    best = None
    for blk in rank_blocks(size(row), -(-size(vec) // lanes), tgt, packed=True):
        ct = _channel_tile(size(channels), taps, blk, tgt)
        score = round(blk.efficiency * (1 - _TILING_COST if ct < size(channels) else 1), 3)
        if best is None or score > best[0]:
            best = (score, replace(blk, row=row), ct)
    _, blk, ct = best
    vb = min(blk.nv * lanes, size(vec))
    passes = -(-size(row) // blk.mr)
    for v in out[:-2]:
        passes *= size(v)
    ct = _prefetchable_channel_tile(ct, size(channels), taps * vb * _BYTES, passes, size(vec) * taps * _BYTES, tgt)
    order = [_entries(vec, size(vec), vb), *((v, size(v), 0) for v in out[:-2])]
    if ct < size(channels):
        order.insert(_tile_position(order, 0, tgt.cores), _entries(channels, size(channels), ct))
    order.append(_entries(row, size(row), blk.mr))
    order += [(v, ct if v == channels else size(v), 0) for v in red]
    if blk.mr > 1:
        order.append((row, blk.mr, 0))
    order.append((vec, vb, 0))
    order = _clean(order, graph, node)
    out_order = tuple(e for e in order if e[0] not in red)
    tile = (channels, ct) if ct < size(channels) else None
    return Plan(order, _clean(list(out_order), graph, node, out), blk, vec, tile, None, weights)


def _tile_position(outer, first: int, cores: int) -> int:
    """Where a reduction's tile loop goes among the outer output loops `outer` (outer to
    inner): at `first` for one core. For several cores, inside the first of them with two or
    more iterations (the vector panels, else the rows), each walking every tile: the tiles are a
    reduction no thread can split, and outermost they would keep the nest on one thread
    (ResNet-18's 7x7 layers, ~30 % of its time on two cores; MobileNetV3's 1x1 layers of 40
    output channels)."""
    if cores > 1:
        for i, (_, count, tail) in enumerate(outer):
            if count + (tail > 0) >= 2:
                return max(first, i + 1)
    return first


def _clean(order, graph, node, dom=None):
    """Drop entries of count 0 (a tile larger than the extent) and fix the steps so that every
    variable covers its extent (an entry of count 1 with no tail is kept: it is harmless)."""
    from ..frontend.tree import extents

    dom = tuple(dom if dom is not None else graph.domain(node))
    res = [e for e in order if e[1] > 0 or e[2] > 0]
    res = [(v, s if s > 0 else 0, t) for v, s, t in res]
    # entries whose count is 0 with a tail: make them a count-1 loop of the tail
    fixed = []
    for v, s, t in res:
        if s == 0:
            fixed.append((v, 1, 0))
        else:
            fixed.append((v, s, t))
    ext = extents(fixed)
    for v in dom:
        if ext.get(v) != graph.size(v):
            # fall back to one unsplit loop for this variable, where it first appeared
            first = next(i for i, e in enumerate(fixed) if e[0] == v) if v in ext else None
            fixed = [e for e in fixed if e[0] != v]
            fixed.insert(first if first is not None else len(fixed) - 1, (v, graph.size(v), 0))
    return tuple(fixed)


def _read_vars(graph, i):
    """The dimensions of graph node `i` (through views, the variables the access uses)."""
    n = graph.node(i)
    if n.op == "view":
        vs = set()
        for terms, _ in n.view:
            vs |= {name for name, k in terms if k}
        return vs
    return set(n.vars)


def _source_bytes(graph, i):
    """Bytes of the tensor graph node `i` reads from (through its views)."""
    n = graph.node(i)
    while n.op == "view":
        n = graph.node(n.inputs[0])
    elems = 1
    for v in n.vars:
        elems *= graph.size(v)
    return elems * _BYTES


def _producer(graph, node):
    for i in node.inputs:
        p = graph.node(i)
        if p.op not in ("read", "const", "view") and set(graph.domain(p)) == set(graph.domain(node)):
            return p
    return None


def default_schedule(tensor, target=None):
    """A frontend LoopTree for `tensor` (or a LoopTree) with the generated default schedule.

    Apply with `tensor.set(tree)`."""
    from ..frontend.graph import SCHEDULED
    from ..errors import ScheduleError
    from ..frontend.mutate import copy_input, set_order, set_orders
    from ..frontend.tree import LoopTree, converts_integer_sum

    tree = tensor if isinstance(tensor, LoopTree) else tensor.loop_tree
    tgt = _target(target)
    g = tree.graph
    sched = tree._sched
    plans = {}
    for n in g.nodes:
        # a reduction to a 0-d output (a full sum) has no output block to plan: it keeps its order
        if n.op in SCHEDULED and g.reduced(n) and n.vars:
            plans[n.id] = plan(g, n, tgt)
    # 8-bit contractions (sums into int32; a float program does not load tune.tensorized)
    ints = [nid for nid in plans if g.node(nid).dtype == "int32"]
    if ints:
        from .tensorized import integer_contraction, on_tiles, tensorized_default

        ints = [nid for nid in ints if integer_contraction(g, nid)]
    # an integer contraction on tile blocks keeps the program's loops: the blocks are the tile
    # rewriter's own, the same code as a compile without a schedule (tune.tensorized)
    tiled = [nid for nid in ints if on_tiles(tree, nid, tgt)]
    plans = {nid: p for nid, p in plans.items() if nid not in tiled}
    if not plans and not tiled:
        return _elementwise(tree, tgt)
    for nid, p in plans.items():
        if _rows_per_core_pay(g, g.node(nid), p, tgt):
            plans[nid] = _rows_per_core(g, g.node(nid), p, tgt.cores)
    by_out = {}
    for nid, p in plans.items():
        by_out.setdefault(frozenset(g.node(nid).vars), p)
    order_of = {}       # node id -> its new loop order
    for n in g.nodes:
        if n.op not in SCHEDULED or n.id not in sched:
            continue
        if n.id in plans:
            order_of[n.id] = plans[n.id].order
            continue
        if converts_integer_sum(g, n):      # its own loops: the sum runs on dot-product instructions
            continue
        dom = tuple(g.domain(n))
        # the multiply feeding a reduction: the reduction's order
        users = [plans[c] for c in g.consumers(n.id) if c in plans and set(g.domain(g.node(c))) == set(dom)]
        if users:
            order_of[n.id] = users[0].order
            continue
        p = by_out.get(frozenset(dom))
        if p is not None:
            order_of[n.id] = p.out_order
    orders = [(nid, order_of[nid]) for nid in sched if nid in order_of and order_of[nid] != sched[nid].order]
    if orders:
        try:
            tree = set_orders(tree, orders)      # one tree for all
        except ScheduleError:
            for nid, order in orders:            # refused: one by one, the error names the step
                tree = set_order(tree, nid, order)
    for nid in tiled:
        tree = tree.tensorize(tree.ref_of(nid), "amx")
    for nid, p in plans.items():
        if nid in ints:
            tree = tensorized_default(tree, nid)
            continue
        if p.pack is None:
            continue
        mult = _producer(g, g.node(nid))
        tree = copy_input(tree, tree.ref_of(mult.id), p.pack)
    return parallelize(tree)


def _in_a_layer_chain(graph, node) -> bool:
    """Whether another reduction reads what `node` computes, or computes what it reads (through
    element-wise nodes): a layer of a chain such as an MLP."""
    from ..frontend.graph import SCHEDULED

    for step in (graph.consumers, lambda i: graph.node(i).inputs):
        if any(n.op in SCHEDULED and graph.reduced(n) for n in _reachable(graph, step(node.id), step)):
            return True
    return False


def _reachable(graph, ids, step):
    """The nodes reached from `ids` following `step` (node id -> node ids), each once."""
    seen, todo = set(), list(ids)
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        yield graph.node(i)
        todo += list(step(i))


def _rows_per_core_pay(graph, node, p: Plan, tgt) -> bool:
    """Split a layer's rows between the cores instead of its column panels: when it is a layer
    of a chain (each thread then reads only the rows it wrote in the layer before, where the
    panel split moves half of every layer's input from core to core: MLP-64x256 1.5x -> 1.9x on
    2 cores), its weights sit in an L2 share (every thread reads all of them), and every core
    gets the same whole number of row blocks' worth of rows."""
    row, mr = p.block.row, p.block.mr
    red = [v for v in graph.domain(node) if v not in node.vars]
    if tgt.cores < 2 or row is None or len(red) != 1 or p.reduce_tile or p.vec_tile:
        return False
    rows = graph.size(row)
    weights = graph.size(red[0]) * graph.size(p.vec) * _BYTES
    return (rows % tgt.cores == 0 and rows // tgt.cores >= mr and weights <= tgt.l2 * _L2_SHARE
            and _in_a_layer_chain(graph, node))


def _rows_per_core(graph, node, p: Plan, cores: int) -> Plan:
    """`p` with its rows first cut into `cores` equal parts (the loop `parallelize` annotates)."""
    row, mr = p.block.row, p.block.mr
    part = graph.size(row) // cores

    def cut(order, dom):
        at = next(i for i, e in enumerate(order) if e[0] == row)      # the row blocks' loop
        return _clean([(row, cores, 0), *order[:at], (row, part // mr, part % mr), *order[at + 1:]],
                      graph, node, dom)
    return replace(p, order=cut(p.order, None), out_order=cut(p.out_order, node.vars))


def parallelize(tree, min_flops: int = PARALLEL_MIN_FLOPS, cores: int = 0):
    """`tree` with the outermost loop of every reduction nest of at least `min_flops` annotated
    "parallel" (see the module doc); loops that cannot run in parallel are left as they are.
    With `cores` (a network's layers): the rows split instead of the vector panels where that
    shares the work better or keeps each thread's output off the other's cache lines
    (_rows_split_better)."""
    from ..errors import ScheduleError
    from ..frontend.graph import SCHEDULED
    from ..frontend.mutate import annotate, annotate_loops, annotation_change, remove_loop, swap_loops

    g = tree.graph
    chosen = []

    def annotated(tree, chosen):
        """`tree` with the chosen loops annotated: in one tree for every nest, else each on its
        own (one of them refused by the whole tree's check)."""
        if not chosen:
            return tree
        try:
            return annotate_loops(tree, chosen, "parallel")
        except ScheduleError:
            pass
        for ref in chosen:
            try:
                tree = annotate(tree, ref, "parallel")
            except ScheduleError:
                continue
        return tree

    for n in g.nodes:
        if n.op not in SCHEDULED or not g.reduced(n) or n.id not in tree._leaf:
            continue
        if cores > 1:
            rows = _rows_past_packs(tree, n, cores)
            if rows is not None:    # a mutation makes a new tree: the loops chosen so far first
                tree, chosen = annotated(tree, chosen), []
                try:
                    tree = rows(tree)
                except ScheduleError:
                    pass
        path = tree.path(tree.ref_of(n.id))
        if not path or tree.loop(path[0]).annotation or _nest_flops(g, tree.loop(path[0]).leaves) < min_flops:
            continue
        # a loop of one iteration outermost (the one vector panel of a layer with few output
        # channels) goes: the loop inside it, the rows, is the one to split
        one = len(path) > 1 and tree.loop(path[0]).entry[1:] == (1, 0) and not tree.loop(path[0]).annotation
        swap = not one and cores > 1 and len(path) > 1 and \
            _rows_split_better(tree, n, tree.loop(path[0]), tree.loop(path[1]), cores)
        if one or swap:     # a mutation makes a new tree: the loops chosen so far are annotated first
            tree, chosen = annotated(tree, chosen), []
            path = tree.path(tree.ref_of(n.id))
            while len(path) > 1 and tree.loop(path[0]).entry[1:] == (1, 0) and not tree.loop(path[0]).annotation:
                tree = remove_loop(tree, path[0])
                path = tree.path(tree.ref_of(n.id))
            if cores > 1 and len(path) > 1 and \
                    _rows_split_better(tree, n, tree.loop(path[0]), tree.loop(path[1]), cores):
                tree = swap_loops(tree, path[0], path[1])
                path = tree.path(tree.ref_of(n.id))
        outer = tree.loop(path[0])
        var, count, tail = outer.entry
        if outer.annotation or outer.ref in chosen or count + (1 if tail else 0) < 2:
            continue
        try:
            annotation_change(tree, outer.ref, "parallel")
        except ScheduleError:      # a reduction outermost (a channel tile): stays serial
            continue
        chosen.append(outer.ref)
    tree = annotated(tree, chosen)
    if cores > 1:
        tree = _parallel_elementwise(tree)
    return tree


def _parallel_elementwise(tree):
    """`tree` with the outermost loop of each large enough nest of element-wise statements only
    (a network's scaling by a squeeze-excitation vector: 14x14x240 products, 5-15 us) annotated
    "parallel", when it has two or more iterations."""
    from ..frontend.graph import SCHEDULED
    from ..frontend.mutate import annotate

    g = tree.graph
    for ref in [r for r in tree.loops if tree.loop(r).depth == 0]:
        outer = tree.loop(ref)
        nodes = [g.node(i) for i in outer.leaves]
        if outer.annotation or outer.entry[1] + (outer.entry[2] > 0) < 2 or \
                any(n.op not in SCHEDULED or g.reduced(n) for n in nodes):
            continue
        elements = max(math.prod(g.size(v) for v in g.domain(n)) for n in nodes)
        if elements >= AWAKE_PARALLEL_MIN_ELEMENTS:
            tree = annotate(tree, ref, "parallel")
    return tree


def _rows_past_packs(tree, node, cores: int):
    """A rewrite (tree -> tree) that gives `node`'s nest a vector panel loop of its own, the
    rows swapped outside it, unannotated (parallelize then splits the rows); or None. It
    applies where the panel loop also holds the packs of the layer's weights (copies of
    constants, made once when the kernel is bound), the rows share the work as well as the
    panels and the weights are less than twice the output (each thread reads all of them):
    each thread then reads the rows of the activation it wrote in the layer before from its
    own L2, where the panel split has it read the other half of every pixel's channels from
    the other core's (ResNet-18's 56x56x64 layers: 1.9x on two threads alone, 1.5x in the
    model, where they follow each other; 2.0x now; its 28x28x128 layers 1.78x -> 1.86x)."""
    from ..backend.threads import split_bound
    from ..frontend.mutate import annotate, decrease_reuse, swap_loops

    g = tree.graph
    path = tree.path(tree.ref_of(node.id))
    if len(path) < 2:
        return None
    outer, inner = tree.loop(path[0]), tree.loop(path[1])
    kids = tree.children(outer.ref)
    if len(kids) < 2 or kids[-1] != inner.ref or inner.annotation:
        return None
    packs = [g.node(i) for k in kids[:-1] for i in tree.items[k].leaves]
    if not packs or any(p.op != "copy" or not _constant(g, p) for p in packs):
        return None
    var, count, tail = outer.entry
    rv, rcount, rtail = inner.entry
    if var != node.vars[-1] or rv in g.reduced(node) or rv not in node.vars or rtail or rcount < 2:
        return None
    step = (g.size(var) - tail) // count
    panels = split_bound(count + (1 if tail else 0), cores, count + tail / step)
    if split_bound(rcount, cores) < panels - 1e-9:
        return None
    weights = sum(math.prod(g.size(v) for v in p.vars) for p in packs)
    if weights >= 2 * math.prod(g.size(v) for v in node.vars):
        return None
    first = tree.items[inner.ref].leaves[0]

    def rows(tree):
        if tree.loop(tree.path(tree.ref_of(first))[0]).annotation:
            tree = annotate(tree, tree.path(tree.ref_of(first))[0], "")
        tree = decrease_reuse(tree, tree.ref_of(first))
        path = tree.path(tree.ref_of(first))
        return swap_loops(tree, path[0], path[1])
    return rows


def _constant(graph, node) -> bool:
    """Whether `node` reads only the program's constants (through views)."""
    from ..frontend.graph import SCHEDULED

    return not any(n.op in SCHEDULED or (n.op == "read" and not n.constant)
                   for n in _reachable(graph, node.inputs, lambda i: graph.node(i).inputs))


def _rows_split_better(tree, node, outer, inner, cores: int) -> bool:
    """Whether the loop `inner` just inside the vector panels `outer` (its only child, over
    output rows) is the better one to split between `cores` threads: it shares the work
    better (MobileNetV3's 96 channels in panels of 64 and 32: 1.5x at best), or as well while
    the panel split would leave the threads writing halves of one cache line pair at every
    output pixel (88 channels: 352 bytes a pixel; layers of 20-30 us ran slower on two threads
    than on one)."""
    from ..backend.threads import split_bound

    g = tree.graph
    var, count, tail = outer.entry
    rv, rcount, rtail = inner.entry
    if var != node.vars[-1] or tree.children(outer.ref) != [inner.ref] or inner.annotation or \
            rv in g.reduced(node) or rv not in node.vars or rtail or rcount < 2:
        return False
    step = (g.size(var) - tail) // count
    panels = split_bound(count + (1 if tail else 0), cores, count + tail / step)
    rows = split_bound(rcount, cores)
    pair = 2 * _LINE
    apart = (g.size(var) * _BYTES) % pair or (step * _BYTES) % pair
    return rows > panels + 1e-9 or (rows >= panels - 1e-9 and bool(apart))


def _nest_flops(graph, node_ids) -> int:
    """Two flops per point of each reduction's domain under a loop (multiply and add)."""
    total = 0
    for i in node_ids:
        n = graph.node(i)
        if graph.reduced(n):
            points = 1
            for v in graph.domain(n):
                points *= graph.size(v)
            total += 2 * points
    return total


def _elementwise(tree, tgt):
    """No reduction: split the innermost variable of each node into vectors."""
    from ..frontend.mutate import set_order

    lanes = tgt.lanes()
    for nid, ns in tree.schedule:
        if not ns.order:
            continue
        v, s, t = ns.order[-1]
        if t == 0 and s > lanes and s % lanes == 0:
            tree = set_order(tree, nid, ns.order[:-1] + ((v, s // lanes, 0), (v, lanes, 0)))
    return tree


def best_known_schedule(tensor, target=None, db_path=None):
    """The tuning database's best schedule for `tensor`'s program on `target` (a frontend
    LoopTree), or None when nothing was recorded."""
    from ..frontend.run import program
    from .lookup import tuned_schedule

    return tuned_schedule(program(tensor).graph, _target(target), db_path)


def chosen_schedule(tensor, target=None, db_path=None):
    """(tree, origin): the best known schedule ("tuned"), else the generated one ("default")."""
    tree = best_known_schedule(tensor, target, db_path)
    if tree is not None:
        return tree, "tuned"
    return default_schedule(tensor, target), "default"


def schedule_for(tensor, target=None, db_path=None):
    """The schedule the benchmark compiles: the best known one, else the default."""
    return chosen_schedule(tensor, target, db_path)[0]
