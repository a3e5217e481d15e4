"""A compiled GPU kernel: its PTX, launch geometry and the ways to run it.

    k = compile_ptx(tree, "sm_90", schedule)
    k.ptx, k.compile_ms, k.flops, k.grid, k.block, k.shared_bytes
    print(k.schedule_text())   the loop nest with its grid / warp / tensorize bindings
    k(A, B, C)            numpy arrays (copied to and from the GPU) or device arrays
                          (`__cuda_array_interface__`, e.g. torch CUDA tensors: zero copy)
    k.simulate(A, B, C)   the SIMT reference interpreter: no GPU needed (a test oracle, slow)

Running on the GPU needs the CUDA driver (libcuda.so.1) and a device; without them the call
raises UnsupportedError, while compiling and simulating work anywhere.
"""
from __future__ import annotations

import numpy as np

from ...errors import ArgumentError, UnsupportedError
from ..kernel_base import KernelBase


class PtxKernel(KernelBase):
    def __init__(self, tree, ptx: str, entry: str, grid, block, shared_bytes: int, schedule, contraction, target):
        super().__init__(tree)
        self.ptx = ptx
        self.entry = entry
        self.grid = grid
        self.block = block
        self.shared_bytes = shared_bytes
        self.schedule = schedule
        self.contraction = contraction
        self.target = target
        self.flops = contraction.flops
        self._function = None
        self.jit_ms = None

    def asm(self) -> str:
        return self.ptx

    def schedule_text(self) -> str:
        """The loop nest this kernel runs, each loop with its binding (grid, warp, tensorize)."""
        from .describe import schedule_text
        return schedule_text(self)

    # -- the GPU
    def function(self):
        """The loaded CUDA function (the driver JIT-compiles the PTX on first use)."""
        if self._function is None:
            from ...isa.ptx import driver
            self._function, self.jit_ms = driver.load_function(self.ptx, self.entry, self.shared_bytes)
        return self._function

    def __call__(self, *arrays) -> None:
        from ...isa.ptx.driver import is_device_array
        if any(is_device_array(a) for a in arrays):
            return self.launch(*arrays)
        self.check_arguments(arrays)
        self._execute(arrays)

    def _execute(self, arrays) -> None:
        from ...isa.ptx import driver
        self.function()               # JIT first: a PTX the driver rejects fails before any copy
        devs = [driver.DeviceArray.from_host(a) for a in arrays]
        self.launch(*devs)
        for a, d, b in zip(arrays, devs, self.tree.arguments):
            if b.kind == "output":
                d.copy_to_host(a)

    def launch(self, *device_arrays, stream=None) -> None:
        """Launch on device arrays (loopstack's DeviceArray or any `__cuda_array_interface__` object)."""
        from ...isa.ptx import driver
        params = self._expected()
        if len(device_arrays) != len(params):
            raise ArgumentError(f"the kernel takes {len(params)} array(s), got {len(device_arrays)}")
        ptrs = [driver.device_pointer(a, p[0].name, p[1], p[2], p[4]) for a, p in zip(device_arrays, params)]
        driver.launch(self.function(), self.grid, self.block, self.shared_bytes, ptrs, stream)

    def benchmark(self, *arrays, runs: int = 10, warmup: int = 1, min_seconds: float = 0.0) -> float:
        """GFLOPS of the best of `runs` launches, timed with CUDA events on device-resident copies
        of the arguments (random ones when none are given); short kernels are launched until
        `min_seconds` have passed."""
        from ...isa.ptx import driver
        if not arrays:
            arrays = self.random_arguments()
        self.check_arguments(arrays)
        devs = [driver.DeviceArray.from_host(a) for a in arrays]
        best = driver.time_launches(lambda: self.launch(*devs), runs, warmup, min_seconds)
        self.last_seconds = best
        return self.flops / best / 1e9

    # -- the interpreter
    def simulate(self, *arrays: np.ndarray, bank_profile: dict | None = None) -> None:
        """Run in the SIMT reference interpreter (outputs written in place); `bank_profile`, a
        dict, collects the shared-memory bank conflicts per instruction (isa/ptx/sim/banks.py)."""
        try:
            from ...isa.ptx.sim import launch
        except ImportError as e:
            raise UnsupportedError(f"the PTX interpreter is not available: {e}") from None
        self.check_arguments(arrays)
        # bfloat16 arrays travel as their bits
        args = [a.view(np.uint16) if a.dtype.name == "bfloat16" else a for a in arrays]
        launch(self.ptx, self.entry, grid=self.grid, block=self.block, args=args,
               dynamic_shared_bytes=self.shared_bytes, bank_profile=bank_profile)
