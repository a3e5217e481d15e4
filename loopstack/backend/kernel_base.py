"""What every Kernel shares, whatever produced it: argument checks, work counts, timing.

    k = SomeKernel(tree)           a subclass implements _execute(arrays)
    k(A, B, C)                     arrays in tree.arguments order; outputs written in place
    outs = k.run(A, B)             allocates the outputs (zeros), runs, returns them
    k.flops, k.bytes_moved         from loopstack.looptree.stats
    k.benchmark(A, B, C, runs=10)  GFLOPS: one warm-up call, then the best of `runs`

Arguments are checked before every call: their number, that each is an ndarray of the
buffer's dtype and shape laid out with the buffer's strides (C-contiguous for the default
row-major strides), that outputs are writable and overlap no other argument.  A mistake
raises ArgumentError naming the buffer; a kernel never reads or writes outside an array.
"""
from __future__ import annotations

import functools

import numpy as np

from ..dtypes import dtype as _dtype
from ..errors import ArgumentError
from ..looptree import stats
from ..looptree.ir import Buffer, LoopTree
from ..timing import best_seconds

__all__ = ["KernelBase", "allocate", "empty_aligned", "random_array"]


ALIGN = 64   # a cache line: vector loads of aligned buffers never split across lines


def empty_aligned(shape, dtype, align: int = ALIGN) -> np.ndarray:
    """A zero-filled C-contiguous array whose data starts on an `align`-byte boundary."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    raw = np.zeros(n * dt.itemsize + align, np.uint8)
    off = -raw.ctypes.data % align
    return raw[off:off + n * dt.itemsize].view(dt).reshape(shape)


def allocate(buf: Buffer) -> np.ndarray:
    """A zero-filled, cache-line aligned array with the buffer's dtype, shape and strides."""
    dt = _dtype(buf.dtype).np
    if buf.size == 0 or buf.strides == Buffer(buf.name, buf.dtype, buf.shape, buf.kind).strides:
        return empty_aligned(buf.shape, dt)
    flat = empty_aligned((buf.size,), dt)
    return np.lib.stride_tricks.as_strided(flat, buf.shape, tuple(s * dt.itemsize for s in buf.strides))


def allocate_storage(buf: Buffer, array=None) -> np.ndarray:
    """The zero-filled, cache-line aligned flat storage of a temporary buffer: what a kernel
    addresses through the buffer's strides (padded strides leave gaps no view could show);
    `array(shape, dtype)` makes it (default: empty_aligned)."""
    return (array or empty_aligned)((buf.size,), _dtype(buf.dtype).np)


def random_array(buf: Buffer, rng: np.random.Generator) -> np.ndarray:
    """Random contents for a buffer: normal floats, small integers (so products stay exact)."""
    a = allocate(buf)
    dt = _dtype(buf.dtype)
    if dt.is_float:
        a[...] = rng.standard_normal(buf.shape)
    else:
        lo, hi = (0, 8) if dt.name == "uint8" else (-8, 8)
        a[...] = rng.integers(lo, hi, buf.shape)
    return a


class KernelBase:
    """The Kernel interface; subclasses implement `_execute(arrays)` on checked arrays."""

    def __init__(self, tree: LoopTree):
        self.tree = tree
        self.compile_ms: float = 0.0

    # work counts of the tree, counted when first asked for: not part of a compile
    @functools.cached_property
    def flops(self) -> int:
        return stats.flops(self.tree)

    @functools.cached_property
    def bytes_moved(self) -> int:
        return stats.bytes_moved(self.tree)

    # -- the interface ---------------------------------------------------
    @property
    def bytes(self) -> int:  # noqa: A003 - the name the design uses
        return self.bytes_moved

    def __call__(self, *arrays: np.ndarray) -> None:
        self.check_arguments(arrays)
        self._execute(arrays)

    def bind(self, *arrays: np.ndarray, threads: int | None = None, scratch: dict | None = None, storage=None):
        """A call on `arrays` as a function of no arguments, checked once here (a kernel
        without parallel loops ignores `threads`, one without shareable temps `scratch`, one
        without intermediates `storage`)."""
        self.check_arguments(arrays)
        return functools.partial(self._execute, tuple(arrays))

    def run(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        """Run on `inputs`, returning freshly allocated (zero-initialised) outputs."""
        outs = tuple(allocate(b) for b in self.tree.outputs)
        self(*inputs, *outs)
        return outs

    def random_arguments(self, seed: int = 0) -> tuple[np.ndarray, ...]:
        """Seeded random inputs and zeroed outputs, in argument order."""
        rng = np.random.default_rng(seed)
        return tuple(random_array(b, rng) if b.kind == "input" else allocate(b) for b in self.tree.arguments)

    def benchmark(self, *arrays: np.ndarray, runs: int = 10, warmup: int = 1, min_seconds: float = 0.0) -> float:
        """GFLOPS of the best of `runs` timed calls after `warmup` untimed ones (random arguments
        when none are given); short calls repeat until they fill `min_seconds`."""
        if not arrays:
            arrays = self.random_arguments()
        self.check_arguments(arrays)
        best = best_seconds(lambda: self._execute(arrays), runs, warmup, min_seconds)
        self.last_seconds = best
        return self.flops / best / 1e9 if best > 0 else float("inf")

    def asm(self) -> str:
        raise NotImplementedError

    def _execute(self, arrays: tuple[np.ndarray, ...]) -> None:
        raise NotImplementedError

    # -- checks ----------------------------------------------------------
    def _expected(self):
        """Per parameter: (name, numpy dtype, shape, byte strides of dims > 1, is output)."""
        exp = self.__dict__.get("_expected_cache")
        if exp is None:
            exp = []
            for b in self.tree.arguments:
                dt = _dtype(b.dtype).np
                strides = tuple((d, st * dt.itemsize) for d, (n, st) in enumerate(zip(b.shape, b.strides)) if n > 1)
                exp.append((b, dt, tuple(b.shape), strides, b.kind == "output"))
            self._expected_cache = exp
        return exp

    def check_arguments(self, arrays) -> None:
        params = self._expected()
        if len(arrays) != len(params):
            names = ", ".join(p[0].name for p in params)
            raise ArgumentError(f"the kernel takes {len(params)} array(s) ({names}), got {len(arrays)}")
        for i, a in enumerate(arrays):
            self.check_argument(i, a)
            b, is_out = params[i][0], params[i][4]
            if is_out:
                for j, other in enumerate(arrays):
                    if j != i and np.may_share_memory(a, other):
                        raise ArgumentError(f"argument {i} ({b.name}) is an output and overlaps argument {j} "
                                            f"({params[j][0].name})")

    def check_argument(self, i: int, a) -> None:
        """Argument `i` alone: its type, dtype, shape, alignment, layout and (output) writability."""
        b, want, shape, strides, is_out = self._expected()[i]
        if type(a) is not np.ndarray and not isinstance(a, np.ndarray):
            raise ArgumentError(f"argument {i} ({b.name}) is a {type(a).__name__}, expected a numpy array")
        if a.dtype != want:
            raise ArgumentError(f"argument {i} ({b.name}) has dtype {a.dtype}, expected {want}")
        if a.shape != shape:
            raise ArgumentError(f"argument {i} ({b.name}) has shape {tuple(a.shape)}, expected {shape}")
        if not a.flags.aligned:
            raise ArgumentError(f"argument {i} ({b.name}) is not aligned to its {want.itemsize}-byte "
                                "elements")
        ast = a.strides
        for d, st in strides:
            if ast[d] != st:
                layout = "C-contiguous" if b.strides == Buffer(b.name, b.dtype, b.shape, b.kind).strides \
                    else f"strides {list(b.strides)} (elements)"
                raise ArgumentError(f"argument {i} ({b.name}) is not laid out as {layout}: "
                                    f"strides {ast} bytes")
        if is_out and not a.flags.writeable:
            raise ArgumentError(f"argument {i} ({b.name}) is an output but is not writable")
