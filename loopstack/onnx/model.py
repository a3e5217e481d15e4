"""A compiled network: one kernel per layer, buffers planned by liveness, one call to run.

    model = lt.onnx.compile("resnet18.onnx")
    y = model(x)                      # the single input -> the single (or first) output
    outs = model.run({"input": x})    # {output name: array}
    model.compile_ms                  # from the file to a runnable model
    model.threads = 1                 # parallel loops on one thread (default: every core)
    model.bordered                    # {buffer: (border before, bordered shape)} (borders.py)
    print(model.summary())            # per layer: schedule origin, GFLOPS, share of time

Each layer compiles like any DSL tensor: with the tuning database's best schedule for its
program when one was recorded, else loopstack's default schedule (`tune.defaults`, adjusted
for row reductions and shared values: see schedules.py), else
(when the default cannot schedule it) the loops as written. Layers of the same program
(the same shapes) share one compiled kernel through the frontend's compile cache.

An activation that a layer would copy whole into a zero-bordered temp at every call (a dense
convolution's padded read) gets a zero border in the buffer plan instead: its writer fills the
interior, its readers read it in place (borders.py; `compile(..., borders=False)` stages the
copies as before). A layer's last element-wise nest that combines a reduction's result with
other values (a downsampling block's add) folds into that reduction's post (epilogue.py).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import numpy as np

from ..backend.region import Region
from ..backend.threads import wake
from ..errors import ArgumentError, LoopstackError
from .graph import NetGraph, load
from .memory import Interval, plan

log = logging.getLogger("loopstack.onnx")


@dataclass
class CompiledLayer:
    name: str
    ops: tuple
    kernel: object
    args: list          # per kernel input: ("buffer", name, shape) | ("const", array)
    out: str
    shape: tuple
    schedule: str       # "tuned" | "default" | "unscheduled"
    flops: int
    seconds: float = 0.0


@dataclass
class _Pending:
    """A DSL layer scheduled and lowered, not compiled yet: the network's buffer plan
    (borders.py) may still change how its kernel addresses its buffers."""
    layer: object
    origin: str
    reads: list                 # per kernel input: ("buffer", name, shape) | ("const", array)
    ir: object                  # its lowered tree (None when lowering failed: it compiles unscheduled)


def _plan_layer(layer, net: NetGraph, target, threads: int):
    """A CompiledLayer for a layer that compiles itself, else a _Pending. On several `threads`
    the team's workers are awake from one layer to the next (CompiledModel.run wakes them as a
    run starts), so nests much smaller than a standalone kernel's threshold split too
    (tune.defaults.AWAKE_PARALLEL_MIN_FLOPS)."""
    from ..frontend.run import program, scheduled_tree
    from ..tune.defaults import AWAKE_PARALLEL_MIN_FLOPS, parallelize
    from .schedules import layer_schedule

    t = layer.tensor
    if hasattr(t, "compile_kernel"):    # a layer built as a loop tree or a host step (onnx/qlayers.py)
        kernel, args, origin = t.compile_kernel(target)
        return CompiledLayer(layer.name, layer.ops, kernel, args, layer.out, tuple(layer.shape), origin, kernel.flops)
    try:
        tree, origin = layer_schedule(t, target)
        if tree is not None and threads > 1:
            tree = parallelize(tree, AWAKE_PARALLEL_MIN_FLOPS, threads)
    except Exception as e:   # noqa: BLE001 - a schedule generator's gap must not stop the model
        log.info("layer %s: no default schedule (%s: %s); compiled unscheduled", layer.name, type(e).__name__, e)
        tree, origin = None, "unscheduled"
    ir = None
    if tree is not None:
        try:
            t.set(tree)
            ir = scheduled_tree(t, target).lower()
        except LoopstackError as e:
            log.info("layer %s: its %s schedule does not compile (%s); compiled unscheduled", layer.name, origin, e)
            t._schedule, origin = None, "unscheduled"
    prog = program(t)
    shape = tuple(prog.graph.size(v) for v in prog.graph.output.vars)
    if shape != tuple(layer.shape):
        raise LoopstackError(f"layer {layer.name}: the kernel writes {shape}, the network expects "
                             f"{tuple(layer.shape)}")
    args = []
    for r in prog.reads:
        if id(r) in net.reads:
            buf, rshape, _ = net.reads[id(r)]
            args.append(("buffer", buf, rshape))
        else:
            args.append(("const", r.data))
    return _Pending(layer, origin, args, ir)


def _bordered_buffers(pending: list, net: NetGraph) -> dict:
    """{buffer: (before, bordered shape)} for the intermediate buffers whose readers pad them:
    each gets a zero border as wide as its readers reach, written by none. A buffer qualifies
    when one DSL layer writes it, DSL layers read it whole, as stored, and one of them would
    copy it whole into a zero-bordered temp at every call (a reader whose nests split at the
    borders reads it in place already)."""
    from ..backend.padding import split_padded_nests
    from .borders import padded_reach

    outputs = {ref[1] for _, ref, _ in net.outputs if ref[0] == "buffer"}
    writers = {p.layer.out: p for p in pending if isinstance(p, _Pending)}
    reach: dict = {}
    excluded = set(outputs)
    for p in pending:
        if not isinstance(p, _Pending):
            excluded.update(a[1] for a in p.args if a[0] == "buffer")
            excluded.add(p.out)
            continue
        # a nest bound by memory is split at its borders instead (backend/padding.py)
        splits = p.ir is not None and split_padded_nests(p.ir) is not p.ir
        for i, a in enumerate(p.reads):
            if a[0] != "buffer":
                continue
            name = a[1]
            if p.ir is None or tuple(a[2]) != tuple(net.buffers.get(name, ())):
                excluded.add(name)
                continue
            r = padded_reach(p.ir, p.ir.inputs[i].name)
            if r is None:
                excluded.add(name)
                continue
            if splits:      # the reader reads in place already, but for its narrow border nests
                continue
            old = reach.get(name, [(0, 0)] * len(r))
            reach[name] = [(max(a0, b0), max(a1, b1)) for (a0, a1), (b0, b1) in zip(old, r)]
    out = {}
    for name, r in reach.items():
        w = writers.get(name)
        if name in excluded or w is None or w.ir is None or not any(a or b for a, b in r):
            continue
        # as wide on both sides: buffers of one shape then share one geometry (and bytes)
        before = tuple(max(a, b) for a, b in r)
        out[name] = (before, tuple(s + 2 * a for s, a in zip(net.buffers[name], before)))
    return out


def _compile_pending(p: _Pending, bordered: dict, target) -> CompiledLayer:
    """The layer's kernel, its last element-wise nest folded into a reduction where it can be
    (epilogue.py), addressing the bordered buffers it touches through their borders (their
    arguments become ("bordered", name, bordered shape); its output too, when bordered)."""
    from ..frontend.run import compile_lowered, compiled, scheduled_tree
    from .borders import through_border
    from .epilogue import fold_epilogues

    layer, t = p.layer, p.layer.tensor
    touched = [i for i, a in enumerate(p.reads) if a[0] == "buffer" and a[1] in bordered]
    if p.ir is not None and not touched and layer.out not in bordered and fold_epilogues(p.ir) is p.ir:
        try:        # nothing to rewrite: through the frontend (its cache of this program's kernel)
            kernel, _, _ = compiled(t, target)
            return CompiledLayer(layer.name, layer.ops, kernel, p.reads, layer.out, tuple(layer.shape), p.origin,
                                 kernel.flops)
        except LoopstackError as e:
            log.info("layer %s: its %s schedule does not compile (%s); compiled unscheduled",
                     layer.name, p.origin, e)
            t._schedule, p.origin = None, "unscheduled"
            p.ir = None

    def addressed(ir):
        ir = fold_epilogues(ir)
        args = list(p.reads)
        for i in touched:
            name = p.reads[i][1]
            ir = through_border(ir, ir.inputs[i].name, *bordered[name])
            args[i] = ("bordered", name, bordered[name][1])
        if layer.out in bordered:
            ir = through_border(ir, ir.outputs[0].name, *bordered[layer.out])
        return ir, args

    kernel = None
    if p.ir is not None:
        ir, args = addressed(p.ir)
        try:
            kernel = compile_lowered(ir, target)
        except LoopstackError as e:
            log.info("layer %s: its %s schedule does not compile (%s); compiled unscheduled", layer.name, p.origin, e)
            t._schedule, p.origin = None, "unscheduled"
    if kernel is None:
        ir, args = addressed(scheduled_tree(t, target).lower())
        kernel = compile_lowered(ir, target)
    return CompiledLayer(layer.name, layer.ops, kernel, args, layer.out, tuple(layer.shape), p.origin, kernel.flops)


def _chained(calls) -> list:
    """`calls` with each run of two or more that machine code can make in a row replaced by one
    call of a chain (backend/chain.py)."""
    from ..backend.chain import chain, chainable

    out, run = [], []
    for call in calls + [None]:
        if call is not None and chainable(call):
            run.append(call)
            continue
        out += [chain(run)] if len(run) > 1 else run
        run = []
        if call is not None:
            out.append(call)
    return out


class CompiledModel:
    def __init__(self, net: NetGraph, target=None, load_ms: float = 0.0, threads: int | None = None,
                 borders: bool = True):
        from ..backend.kernel_base import empty_aligned

        t0 = time.perf_counter()
        self.net = net
        self.target = target
        if threads is not None:     # schedules for that many cores (one: a kernel of one thread)
            import dataclasses

            from ..isa.target import get_target
            target = dataclasses.replace(get_target(target), cores=threads)
        cores = threads if threads is not None else os.cpu_count() or 1
        pending = [_plan_layer(L, net, target, cores) for L in net.layers]
        # activations that a padded read takes get a zero border of their own: their writer
        # fills the interior, their padded readers read the whole in place (borders.py)
        self.bordered = _bordered_buffers(pending, net) if borders else {}
        self.layers = [_compile_pending(p, self.bordered, target) if isinstance(p, _Pending) else p
                       for p in pending]
        self.input_names = [n for n, _ in net.inputs]
        self.output_names = [n for n, _, _ in net.outputs]
        self._input_shapes = {name: tuple(shape) for name, shape in net.inputs}
        outputs = {ref[1] for _, ref, _ in net.outputs if ref[0] == "buffer"}
        # liveness of the intermediate buffers (graph inputs and outputs live outside the arena)
        first, last = {}, {}
        for step, L in enumerate(self.layers):
            first.setdefault(L.out, step)
            last[L.out] = max(last.get(L.out, step), step)
            for a in L.args:
                if a[0] in ("buffer", "bordered"):
                    last[a[1]] = step
        dtype = {b: np.dtype(net.dtypes.get(b, "float32")) for b in net.buffers}

        def nbytes(b):
            shape = self.bordered[b][1] if b in self.bordered else net.buffers[b]
            return dtype[b].itemsize * int(np.prod(shape))

        self.intervals = [Interval(b, nbytes(b), first[b], last[b]) for b in first if b not in outputs]
        # a bordered buffer shares bytes only with buffers of its own border geometry, at the
        # same offsets: the borders, zeroed once here, stay zero (no kernel writes them)
        groups: dict = {}
        for iv in self.intervals:
            key = None
            if iv.name in self.bordered:
                key = (dtype[iv.name].str, *self.bordered[iv.name])
            groups.setdefault(key, []).append(iv)
        self.offsets, self.arena_bytes = plan(groups.pop(None, []))
        for key in sorted(groups, key=str):
            offsets, size = plan(groups[key])
            base = -(-self.arena_bytes // 64) * 64
            self.offsets.update({b: base + off for b, off in offsets.items()})
            self.arena_bytes = base + size
        # the arena and the weights the layers read, on a few huge pages (backend/region.py)
        self._region = Region()
        self._arena = self._region.array((max(self.arena_bytes, 64),), np.uint8)
        self._own_constants()
        # every array a kernel sees is made once, here: a kernel called again with the same
        # array objects skips its argument checks and pointer set-up
        self._views = {b: self._arena[off: off + nbytes(b)].view(dtype[b]) for b, off in self.offsets.items()}
        self._store = dict(self._views)
        for b, (_, shape) in self.bordered.items():
            self._store[f"bordered:{b}"] = self._views[b].reshape(shape)
        for name, shape in net.inputs:
            self._store[f"in:{name}"] = empty_aligned(tuple(shape), dtype[f"in:{name}"])
        for L in self.layers:
            if L.out not in self._store:      # graph outputs: their own memory
                self._store[L.out] = empty_aligned(L.shape, dtype[L.out])
        self._threads = None
        self.threads = threads
        self.compile_ms = load_ms + (time.perf_counter() - t0) * 1e3
        self.profile = False

    def _own_constants(self) -> None:
        """Each layer reads the model's copy of the constant arrays its calls read, in the
        region (an array several layers read is copied once); one that a kernel only packs when
        it is bound stays where it is (the packed copy is made in the region)."""
        copies = {}
        for L in self.layers:
            read = L.kernel.per_call_reads() if hasattr(L.kernel, "per_call_reads") else range(len(L.args))
            for i, a in enumerate(L.args):
                if i in read and a[0] == "const" and isinstance(a[1], np.ndarray) and a[1].flags.c_contiguous \
                        and a[1].dtype.kind in "biuf":
                    if id(a[1]) not in copies:
                        copies[id(a[1])] = (a[1], self._region.copy(a[1]))
                    L.args[i] = ("const", copies[id(a[1])][1])

    @property
    def threads(self) -> int | None:
        """Threads the layers' parallel loops run on (None: every core, each kernel's default)."""
        return self._threads

    @threads.setter
    def threads(self, n: int | None) -> None:
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ArgumentError(f"threads must be a positive integer or None, got {n!r}")
        self._threads = n
        self._wake = 1
        # each layer's call is prepared once on its own arrays (pointer block, packed
        # constants): layers of one shape share a kernel, not its prepared arguments
        self._calls = []
        # the calls that read each graph input: they read the caller's array in place when
        # it can be (see _take_inputs), instead of a copy of it
        self._readers = {name: [] for name in self.input_names}
        self._pointed = {}
        # the layers run one after the other: the zero-bordered copies of their padded inputs
        # share one buffer per border geometry, still in cache from the layer before
        scratch: dict = {}
        temps = Region()     # the calls' own intermediates (packed weights among them)
        for L in self.layers:
            args = [a[1] if a[0] == "const" else self._store[f"bordered:{a[1]}"] if a[0] == "bordered"
                    else self._store[a[1]].reshape(a[2]) for a in L.args]
            out = self._store[f"bordered:{L.out}"] if L.out in self.bordered else self._store[L.out].reshape(L.shape)
            call = L.kernel.bind(*args, out, threads=n, scratch=scratch, storage=temps.array)
            self._calls.append((L, call))
            if hasattr(call, "job"):
                self._wake = max(self._wake, call.job.threads)
            for i, a in enumerate(L.args):
                if a[0] == "buffer" and a[1].startswith("in:"):
                    self._readers[a[1][3:]].append((call, i, a[2]))
        self._runs = _whole_runs(self._calls, self._wake)
        # the inputs every reader of which can read the caller's array in place
        self._in_place = {name: all(hasattr(call, "point") for call, _, _ in readers)
                          for name, readers in self._readers.items()}

    # ------------------------------------------------------------------ running
    def _take_inputs(self, feeds: dict) -> None:
        if len(feeds) != len(self.input_names) or any(n not in feeds for n in self.input_names):
            missing = [n for n in self.input_names if n not in feeds]
            if missing:
                raise ArgumentError(f"missing input(s) {', '.join(missing)}; the model takes "
                                    f"{', '.join(self.input_names)}")
            unknown = [n for n in feeds if n not in self._input_shapes]
            raise ArgumentError(f"unknown input(s) {', '.join(unknown)}; the model takes "
                                f"{', '.join(self.input_names)}")
        for name, arr in feeds.items():
            a = np.asarray(arr)
            want = self._input_shapes[name]
            if a.shape != want:
                raise ArgumentError(f"input {name!r} has shape {a.shape}, the model expects {want}")
            if a.dtype != np.float32 and a.dtype.kind not in "fiu":
                raise ArgumentError(f"input {name!r} has dtype {a.dtype}; the model expects float32")
            if a.dtype == np.float32 and self._in_place[name] and a.flags.c_contiguous and a.flags.aligned:
                # read in place: the same array as the call before needs nothing (a copy of an
                # image costs more than some of the layers that read it)
                if self._pointed.get(name) is not a:
                    self._point(name, a)
                continue
            store = self._store[f"in:{name}"]
            if name in self._pointed:
                self._point(name, store)
                del self._pointed[name]
            np.copyto(store, a, casting="unsafe")

    def _buffer(self, name: str) -> np.ndarray:
        """A buffer's array: a graph input read in place is the caller's array."""
        if name.startswith("in:") and name[3:] in self._pointed:
            return self._pointed[name[3:]]
        return self._store[name]

    def _point(self, name: str, a: np.ndarray) -> None:
        for call, i, shape in self._readers[name]:
            call.point(i, a.reshape(shape))
        self._pointed[name] = a

    def run(self, feeds: dict, output_names=None) -> dict:
        """{output name: array} for `feeds` ({input name: array})."""
        self._take_inputs(feeds)
        if self._wake > 1:      # workers asleep since the last run spin again from here on
            wake(self._wake)
        if self.profile:
            for L, call in self._calls:
                t0 = time.perf_counter()
                call()
                L.seconds += time.perf_counter() - t0
        else:
            for run in self._runs:
                run()
        res = {}
        for name, ref, shape in self.net.outputs:
            if output_names is not None and name not in output_names:
                continue
            res[name] = np.array(ref[1] if ref[0] == "const" else self._buffer(ref[1])).reshape(shape)
        return res

    def __call__(self, *xs):
        if len(xs) != len(self.input_names):
            raise ArgumentError(f"the model takes {len(self.input_names)} input(s) "
                                f"({', '.join(self.input_names)}), got {len(xs)}")
        out = self.run(dict(zip(self.input_names, xs)))
        return out[self.output_names[0]] if len(out) == 1 else tuple(out[n] for n in self.output_names)

    # ------------------------------------------------------------------ reporting
    @property
    def flops(self) -> int:
        return sum(L.flops for L in self.layers)

    def time_layers(self, feeds: dict, rounds: int = 3) -> None:
        """Measure each layer: the best of `rounds` whole-model runs, per layer."""
        best = [float("inf")] * len(self.layers)
        self.profile = True
        try:
            for _ in range(rounds):
                for L in self.layers:
                    L.seconds = 0.0
                self.run(feeds)
                best = [min(b, L.seconds) for b, L in zip(best, self.layers)]
        finally:
            self.profile = False
        for b, L in zip(best, self.layers):
            L.seconds = b

    def summary(self, feeds: dict | None = None) -> str:
        """Per layer: its ONNX nodes, output shape, schedule origin, MFLOP, and, once timed
        (`feeds` given, or after `time_layers`), GFLOPS and share of the time."""
        if feeds is not None:
            self.time_layers(feeds)
        total = sum(L.seconds for L in self.layers)
        lines = [f"{'#':>3} {'layer':<34} {'shape':<20} {'sched':<11} {'MFLOP':>8} {'GFLOPS':>7} {'time':>6}"]
        for i, L in enumerate(self.layers):
            name = L.name if len(L.name) <= 34 else L.name[:31] + "..."
            g = f"{L.flops / L.seconds / 1e9:7.1f}" if L.seconds > 0 else f"{'-':>7}"
            share = f"{100 * L.seconds / total:5.1f}%" if total > 0 else f"{'-':>6}"
            lines.append(f"{i:>3} {name:<34} {str(list(L.shape)):<20} {L.schedule:<11} {L.flops / 1e6:8.2f} {g} {share}")
        kinds = {}
        for L in self.layers:
            kinds[L.schedule] = kinds.get(L.schedule, 0) + 1
        lines.append(f"{len(self.layers)} layers ({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}), "
                     f"{self.flops / 1e9:.3f} GFLOP, compiled in {self.compile_ms:.0f} ms, "
                     f"arena {self.arena_bytes / 2**20:.2f} MiB"
                     + (f", {total * 1e3:.2f} ms per run, {self.flops / total / 1e9:.1f} GFLOPS" if total > 0 else ""))
        return "\n".join(lines)


def _whole_runs(calls, threads: int) -> list:
    """What a run calls: on several threads, each stretch of consecutive native layers as one
    job (threads.Job.chain), handed to the team at once; the threads meet at a barrier between
    steps (none between two steps thread 0 runs alone), and the Python between two layers and
    a hand-over per layer are gone (MobileNetV3-Small: 64 layers of 2-50 us). Layers without
    machine code (host steps) run between the jobs. On one thread: the layers' own calls, each
    run of consecutive native ones chained in machine code (_chained)."""
    from ..backend.threads import Job, team

    if threads < 2:
        return _chained([call for _, call in calls])
    runs, stretch = [], []

    def flush():
        if stretch:
            job = Job.chain(list(stretch), threads)
            runs.append(lambda: team().run(job))
            runs[-1].job = job
            stretch.clear()
    for _, call in calls:
        parts = getattr(call, "parts", None)
        if parts is None:
            flush()
            runs.append(call)
        else:
            stretch.append(parts)
    flush()
    return runs


def compile_model(model, target=None, input_shapes=None, constants=None, passes=True,
                  threads: int | None = None, borders: bool = True) -> CompiledModel:
    t0 = time.perf_counter()
    net = model if isinstance(model, NetGraph) else load(model, input_shapes=input_shapes, constants=constants,
                                                         target=target, passes=passes)
    return CompiledModel(net, target, (time.perf_counter() - t0) * 1e3, threads, borders)
