"""A network on several threads: its layers, small ones included, split between the threads,
and its answer is bit-identical whatever the thread count (each output element is computed by
one thread in the serial order)."""
import numpy as np

import loopstack as lt
from loopstack.onnx import models
from loopstack.tune.defaults import AWAKE_PARALLEL_MIN_FLOPS, PARALLEL_MIN_FLOPS


def _input(m, seed=0):
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _parallel(model):
    return [L for L, call in model._calls if hasattr(call, "job")]


def test_mobilenets_layers_split_on_two_threads_and_match_one_thread_bit_for_bit():
    """MobileNetV3-Small: 64 layers of 2-50 us, none but one above a standalone kernel's
    threshold. Compiled for two threads, every layer of a megaflop or more splits (1x1 layers
    of few output channels split their rows), and the answer on 1, 2 and 3 threads is the same
    array."""
    m = models.mobilenet_v3_small()
    model = lt.onnx.compile(m, threads=2)
    large = [L for L in model.layers if L.flops >= 2 * AWAKE_PARALLEL_MIN_FLOPS]
    assert sum(L.flops >= PARALLEL_MIN_FLOPS for L in model.layers) <= 1
    assert len(large) >= 30
    split = {L.name for L in _parallel(model)}
    assert not [L.name for L in large if L.name not in split]
    # one job for the whole network: no Python and no hand-over between two layers
    assert len(model._runs) == 1 and len(model._runs[0].job.chunks) > len(model.layers)
    # 88 output channels (352 bytes a pixel): the rows split, not the vector panels, whose
    # halves would share cache lines at every pixel
    conv = next(L for L in model.layers if L.shape == (28, 28, 88) and L.flops > 3e6)
    outer = next(node for node in conv.kernel.lowered.body if "parallel" in getattr(node, "annotations", ()))
    assert outer.dim != "k_1" and conv.kernel.lowered.dim_size(outer.dim) == 28, outer
    # the squeeze-excitation scaling of a 14x14x240 map: element-wise, no flops counted, split
    scaling = [L for L in model.layers if L.shape == (14, 14, 240) and "mul" in L.name and L.flops < 1e6]
    assert scaling and all(L.name in split for L in scaling)
    x = _input(m)
    want = None
    for threads in (1, 2, 3):
        model.threads = threads
        got = model(x)
        if want is None:
            want = got
            assert not _parallel(model)          # one thread: a plain call per layer
        np.testing.assert_array_equal(got, want)


def test_a_model_for_one_thread_schedules_for_one_core():
    """threads=1: no layer below a standalone kernel's threshold is split, whatever the host."""
    m = models.mobilenet_v3_small(resolution=96)
    model = lt.onnx.compile(m, threads=1)
    model.threads = 2
    assert all(L.flops >= PARALLEL_MIN_FLOPS for L in _parallel(model))


def test_a_networks_job_meets_at_barriers_only_where_another_thread_works():
    """Job.chain: between two steps thread 0 runs alone there is no barrier, nor after a copy
    every thread makes into its own temps before a step of the same call; every other step a
    worker takes part in has one after it, and so has the last. The copies are flagged: the
    chunks of a worker too late to join are run by thread 0, except those."""
    from loopstack.backend.threads import EVERY_THREAD, Job
    from loopstack.backend.x86 import team as code

    class Block:
        cdata = 0
    serial = ([(1, 4, False), (2, 4, False)], [4, 4], [Block()])
    split = ([(3, 8, True)], [8], [Block(), Block()])
    padded = ([(4, 6, EVERY_THREAD), (5, 8, True)], [6, 8], [Block(), Block()])
    copies = ([(6, 6, EVERY_THREAD)], [6], [Block(), Block()])
    job = Job.chain([serial, split, serial, padded, copies, split], 2)
    words = list(job.words)
    steps, barriers, at = words[1], [], 2
    for _ in range(steps):
        barriers.append(words[at + 1])
        at += 2 + 3 * 2
    assert [f & code.BARRIER for f in barriers] == [0, 1, 1, 0, 1, 0, 1, 1, 1]
    # the steps each thread runs whole into its own temps: not to be run for a late worker
    assert [bool(f & code.OWN_COPIES) for f in barriers] == [0, 0, 0, 0, 0, 1, 0, 1, 0]
    # a late worker may start anywhere but after a copy of its own call that it did not make
    assert [bool(f & code.JOIN_POINT) for f in barriers] == [1, 1, 1, 1, 1, 1, 0, 1, 1]


def test_workers_that_wake_late_join_a_network_mid_run_and_the_answer_stays_the_same():
    """Workers that sleep between runs (a spin budget of ~1 us) and are woken by each run: each
    claims the run at whatever step its core's wake-up brings it to (the main thread has run
    its chunks before that), waits out the steps that read copies it did not make, or finds the
    run over. Runs after pauses of 0-3 ms, on 2 and 3 threads: every answer bit-identical to one
    thread's, and the workers took part in some runs and were left out of some steps."""
    import time

    from loopstack.backend import threads
    from loopstack.backend.x86 import team as code

    m = models.mobilenet_v3_small(resolution=96)
    model = lt.onnx.compile(m, threads=2)
    x = _input(m)
    model.threads = 1
    want = model(x)
    model.threads = 2
    model(x)
    team = threads.team()
    if not isinstance(team, threads.NativeTeam):
        import pytest
        pytest.skip("the portable team has no late workers (not x86-64 Linux)")
    budget = team._memory[code.BUDGET // 8]
    team._memory[code.BUDGET // 8] = 1 << 11
    rng = np.random.default_rng(0)
    joined = left_out = 0
    try:
        for threads_now in (2, 3):
            model.threads = threads_now
            for _ in range(60):
                time.sleep(rng.uniform(0, 0.003))
                epoch = int(team._memory[code.EPOCH // 8])
                np.testing.assert_array_equal(model(x), want)
                worker = code.FIRST + code.SLOT
                joined += team._memory[(worker + code.ARRIVED) // 8] > epoch
                left_out += team._memory[(worker + code.TAKEN) // 8] > epoch
    finally:
        team._memory[code.BUDGET // 8] = budget
    assert joined and left_out, (joined, left_out)


def test_a_resnets_small_weight_layers_split_their_rows_and_match_one_thread_bit_for_bit():
    """A ResNet on two threads: a 3x3 layer whose weights are less than twice its output splits
    its rows (each thread then reads from its own cache the rows it wrote in the layer before,
    not half of every pixel's channels from the other core's), its weights still packed once
    when bound; a layer of large weights splits its output channels (each thread packs and
    reads half of them). Its answer on 1, 2 and 3 threads is the same array."""
    m = models.resnet18(resolution=224, width=64, blocks=(1, 1, 1, 1), classes=10)
    x = _input(m)
    model = lt.onnx.compile(m, threads=2)

    def split_dim(L):
        ir = L.kernel.lowered      # the nests every call runs, after the weight packs
        outer = next(node for node in ir.body[len(L.kernel._once):] if "parallel" in getattr(node, "annotations", ()))
        return outer.dim, ir.dim_size(outer.dim)
    convs = [L for L in model.layers if L.name.startswith("conv") and len(L.shape) == 3]
    small = [L for L in convs if L.shape[0] == 56]      # 56x56x64 out, 3x3x64x64 weights
    large = [L for L in convs if L.shape[0] == 7]       # 7x7x512 out, 3x3x256(512)x512 weights
    assert small and large
    for L in small:
        assert split_dim(L)[1] == 56, (L.name, split_dim(L))
        assert L.kernel._once, L.name       # the weight packs: run when bound, not per call
    for L in large:
        assert split_dim(L)[1] != 7, (L.name, split_dim(L))
    want = model(x)
    for n in (1, 3):
        model.threads = n
        assert np.array_equal(model(x), want), n


def test_a_batch_one_dense_layer_splits_its_columns_evenly_between_two_threads():
    """A dense layer of one row splits its vector panels between the threads; its panels are as
    wide as shares them evenly (MLP 784 -> 512: 4-vector panels, not 6-vector ones that split
    288 | 224 columns and leave the layer as slow as its larger half)."""
    model = lt.onnx.compile(models.mlp(), threads=2)
    for L, call in model._calls[:2]:            # 784 -> 512 and 512 -> 512
        lowered = L.kernel.lowered
        outer = next(node for node in lowered.body if "parallel" in getattr(node, "annotations", ()))
        assert outer.dim == "k_1" and lowered.dim_size("k_1") % outer.step == 0, outer
        (lo, mid), (_, hi) = [chunk[1:] for chunk in call.job.chunks[-1][1]]
        assert lo == 0 and mid - lo == hi - mid, (lo, mid, hi)
