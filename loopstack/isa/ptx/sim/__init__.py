"""A SIMT reference interpreter of the PTX subset loopstack emits: a test oracle, not a GPU.

`launch` parses PTX text, binds an entry to numpy arrays and runs its grid one CTA after
another, each CTA vectorised over its threads with numpy: per-thread program counters with
reconvergence at the lowest PC, `bar.sync` across the CTA, cp.async copies that complete only at
their wait, warp-collective ldmatrix and mma.sync with the PTX ISA's fragment layouts.

Where the hardware leaves a result unspecified, the interpreter is stricter than a GPU, so that
a kernel that passes here does not depend on luck there.  Every global and shared access is
bounds- and alignment-checked; shared memory starts as 0xFF bytes (NaN in every float format);
races raise (hazards.py): between warps in shared memory since the last barrier, accesses to
bytes a cp.async in flight will write, between CTAs in global memory, ld.global.nc of bytes the
launch wrote; an integer division by zero faults.  Asked to (`bank_profile`), it counts the
shared-memory bank conflicts of every access (banks.py).  Each of these, an unsupported instruction or
a partial warp at a collective raises `loopstack.errors.SimulationError` naming the instruction,
the thread and the address.
"""
from __future__ import annotations

from ....errors import ArgumentError
from .banks import BankCounter, bank_report
from .cta import DEFAULT_MAX_STEPS, BoundKernel
from .parse import parse


def _dim3(value, what):
    dims = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    dims = dims + (1,) * (3 - len(dims))
    if len(dims) != 3 or not all(isinstance(d, int) and d >= 1 for d in dims):
        raise ArgumentError(f"{what} must be up to three positive ints, got {value!r}")
    return dims


def launch(ptx: str, entry: str, grid=(1, 1, 1), block=(1, 1, 1), args=(), dynamic_shared_bytes=0,
           max_steps=DEFAULT_MAX_STEPS, bank_profile: dict | None = None):
    """Run `entry` of the PTX module `ptx` over `grid` x `block` threads.

    `args` follow the entry's `.param` list: numpy arrays for pointer (.u64) parameters, placed in
    a simulated global memory and updated in place after the run; Python ints/floats for scalar
    parameters, typed by their declaration.  `max_steps` bounds the instructions one CTA executes.
    `bank_profile`, a dict, collects each shared-memory instruction's bank conflicts (banks.py).
    Returns the number of instructions executed, counting once each group of threads that ran
    one together (a converged CTA counts one per instruction).
    """
    module = parse(ptx)
    if entry not in module.entries:
        raise ArgumentError(f"no entry {entry!r} in the PTX module (it has: {', '.join(module.entries) or 'none'})")
    banks = None if bank_profile is None else BankCounter(bank_profile)
    kernel = BoundKernel(module, module.entries[entry], _dim3(grid, "grid"), _dim3(block, "block"),
                         list(args), int(dynamic_shared_bytes), banks)
    return kernel.run(max_steps)


__all__ = ["bank_report", "launch", "parse"]
