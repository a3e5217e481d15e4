"""Compile a schedule and benchmark it for a bounded time (the status panel's numbers).

The interactive loop calls `measure(tree)` after every change: compiling is cached by
the frontend (undo/redo are instant), and the benchmark stops after about `seconds`
(100 ms by default, `b` asks for a longer one) so a keystroke never waits long.
Nothing here raises a LoopstackError: a schedule that does not compile or run comes
back as a Measurement with `error` set, which the status line shows.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from loopstack.errors import LoopstackError
from loopstack.timing import best_seconds

QUICK_S = 0.1        # the benchmark after every change
LONG_S = 1.0         # `b`


@dataclass(frozen=True)
class Measurement:
    flops: int = 0
    bytes_moved: int = 0
    compile_ms: float = 0.0
    gflops: float = 0.0          # best call
    runs: int = 0
    seconds: float = 0.0         # time spent benchmarking
    peak: float = 0.0            # the target's fp32 FMA peak, GFLOPS
    bandwidth: float = 0.0       # GB/s, for the roofline's slope
    target: str = ""
    buffers: tuple = ()          # lowered buffers: (name, shape, bytes, kind)
    asm: str = ""
    error: str = ""
    unit: str = "GFLOPS"         # how the status panel shows gflops and peak (a GPU's: TFLOPS)
    predicted: bool = False      # gflops is a cost model's prediction, not a timing (no GPU here)
    listing: str = "assembly"    # what `asm` holds: "assembly", or a GPU kernel's "PTX"
    details: tuple = ()          # more status-panel lines: a GPU kernel's knobs and resources
    kernel_text: str = ""        # a GPU kernel's loops with their bindings (the `t` pane shows it)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved to and from memory."""
        return self.flops / self.bytes_moved if self.bytes_moved else 0.0

    @property
    def of_peak(self) -> float:
        return 100.0 * self.gflops / self.peak if self.peak else 0.0

    @property
    def scale(self) -> float:
        """GFLOPS per displayed unit."""
        return 1e3 if self.unit == "TFLOPS" else 1.0

    def rate(self) -> str:
        """'12.3 GFLOPS' (or TFLOPS), marked when it is a prediction."""
        return f"{self.gflops / self.scale:.1f} {self.unit}" + (" (predicted)" if self.predicted else "")


_PEAK: dict = {}
_BANDWIDTH: list = []


def peak(target=None) -> tuple[str, float]:
    """(target name, peak GFLOPS), measured once per process (about 50 ms)."""
    key = target or "host"
    if key not in _PEAK:
        from loopstack.backend.native import runs_here
        from loopstack.isa.target import get_target, host_target, peak_gflops

        try:
            t = host_target() if target in (None, "x86") else get_target(target)
            _PEAK[key] = (t.name, peak_gflops(t) if runs_here(t) else 0.0)   # cross-compiled: no probe
        except (LoopstackError, OSError) as e:   # no executable memory, unknown CPU: no peak line
            _PEAK[key] = (f"({e})", 0.0)
    return _PEAK[key]


def bandwidth() -> float:
    """Main-memory copy bandwidth in GB/s (read + write), measured once with numpy."""
    if not _BANDWIDTH:
        n = 8 << 20                              # 32 MiB of float32: larger than most L3s
        a = np.ones(n, np.float32)
        b = np.empty_like(a)
        best = best_seconds(lambda: np.copyto(b, a), runs=3, warmup=0)
        _BANDWIDTH.append(2 * a.nbytes / best / 1e9)
    return _BANDWIDTH[0]


def bench(kernel, seconds: float = QUICK_S, max_runs: int = 100_000) -> tuple[float, int, float]:
    """(best seconds per call, calls, seconds spent): one warm-up call, then calls until
    `seconds` have passed (at least one)."""
    args = kernel.random_arguments()
    kernel(*args)                               # checks the arguments once, warms the caches
    run = getattr(kernel, "_execute", None)
    start = time.perf_counter()
    best, runs = float("inf"), 0
    while runs < max_runs:
        t0 = time.perf_counter()
        if run is not None:
            run(args)
        else:
            kernel(*args)
        t1 = time.perf_counter()
        best = min(best, t1 - t0)
        runs += 1
        if t1 - start >= seconds:
            break
    return best, runs, time.perf_counter() - start


def buffers_of(lowered) -> tuple:
    """(name, shape, bytes, kind) of each buffer of a lowered tree."""
    out = []
    for b in getattr(lowered, "buffers", ()):
        size = int(np.prod(b.shape, dtype=np.int64)) * np.dtype(b.dtype).itemsize
        out.append((b.name, tuple(b.shape), size, b.kind))
    return tuple(out)


def reported(e: Exception):
    """What the status line says of an exception: a LoopstackError as it is, anything else as
    an internal error to report (the session survives both)."""
    return e if isinstance(e, LoopstackError) else f"internal error, please report: {type(e).__name__}: {e}"


def not_compiled(tree, e: Exception, base: dict) -> Measurement:
    """The Measurement of a tree that did not compile: its error, and the counts the tree has."""
    e = reported(e)
    try:
        from loopstack.looptree import stats

        low = tree.lower()
        base.update(flops=stats.flops(low), bytes_moved=stats.bytes_moved(low), buffers=buffers_of(low))
    except (LoopstackError, ValueError, KeyError):
        pass
    return Measurement(error=f"compile: {e}", **base)


def measure(tree, seconds: float = QUICK_S, target=None) -> Measurement:
    """Compile `tree` (a frontend LoopTree) and benchmark it for about `seconds`."""
    from loopstack.backend import is_gpu_target

    if is_gpu_target(target):
        from .gpu import measure_gpu
        return measure_gpu(tree, seconds, target)
    name, pk = peak(target)
    try:
        bw = bandwidth()
    except MemoryError:
        bw = 0.0
    base = dict(peak=pk, bandwidth=bw, target=name)
    try:
        kernel = tree.compile(target)
    except Exception as e:  # noqa: BLE001 - shown on the status line; the session must survive
        return not_compiled(tree, e, base)
    base.update(flops=kernel.flops, bytes_moved=kernel.bytes_moved, compile_ms=kernel.compile_ms,
                buffers=buffers_of(getattr(kernel, "tree", None)))
    try:
        asm = kernel.asm()
    except (NotImplementedError, LoopstackError) as e:
        asm = f"(no listing: {e or type(e).__name__})"
    base["asm"] = asm
    try:
        best, runs, spent = bench(kernel, seconds)
    except Exception as e:  # noqa: BLE001 - as above: reported, never a crash
        return Measurement(error=f"run: {reported(e)}", **base)
    gf = kernel.flops / best / 1e9 if best > 0 else 0.0
    return Measurement(gflops=gf, runs=runs, seconds=spent, **base)


def innermost_asm(listing: str) -> list[str]:
    """The lines of the innermost loop with the most instructions: from its label (`..._top:`,
    or PTX's `$L...:`) to the branch back to it (`jne L_top`, AArch64's `b.ne #0x<label's
    offset>`, PTX's `@%p bra.uni $L...;`), with the hex bytes dropped (offset and mnemonic kept).
    A label no branch comes back to (PTX's forward skips) is not a loop."""
    lines = listing.splitlines()
    loops = []                                  # (label line, branch-back line)
    for i, line in enumerate(lines):
        s = line.strip()
        if not (s.endswith(":") and " " not in s and ("_top" in s or s.startswith("$L"))):
            continue
        label = s[:-1]
        top = lines[i + 1].split()[0].rstrip(":") if i + 1 < len(lines) and lines[i + 1].split() else ""
        for j in range(i + 1, len(lines)):
            if _branches_back(lines[j].split(), label, top):
                loops.append((i, j))
                break
    inner = [(i, j) for i, j in loops if not any(i < a and b <= j for a, b in loops)]
    if not inner:
        return [_short(x) for x in lines]
    i, j = max(inner, key=lambda ij: ij[1] - ij[0])
    return [lines[i].strip()] + [_short(x) for x in lines[i + 1:j + 1]]


def _branches_back(words: list, label: str, top: str) -> bool:
    if len(words) < 2:
        return False
    return ((words[-1] == label and words[-2].startswith("j"))
            or (words[-2].startswith("b.") and words[-1] == f"#0x{top}")
            or (words[-1] == label + ";" and words[-2].startswith("bra")))


def _short(line: str) -> str:
    """'    b7  c4 62 7d 18 65 00      vbroadcastss ymm12, ...' -> '  b7 vbroadcastss ymm12, ...'."""
    parts = line.split("  ")
    parts = [p for p in parts if p.strip()]
    if len(parts) >= 3 and all(len(w) == 2 for w in parts[1].split()):
        return f"{parts[0].strip():>6} {'  '.join(p.strip() for p in parts[2:])}"
    return line.expandtabs(4).rstrip()
