"""Every error loopstack raises on bad input.

One small module that every layer may import: the user sees a `LoopstackError`
subclass naming what is wrong, never a segfault, a bare `KeyError` or a wrong answer.
"""


class LoopstackError(Exception):
    """Base class of every error loopstack raises for bad input or an unsupported request."""


class ShapeError(LoopstackError, ValueError):
    """Sizes that do not agree: mismatched shapes, unsatisfiable size constraints, wrong array shape."""


class DTypeError(LoopstackError, TypeError):
    """A dtype that is not supported here, or arrays whose dtypes do not match what a kernel expects."""


class SymbolError(LoopstackError, KeyError):
    """A dimension or symbol that is unknown where it is used."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class ScheduleError(LoopstackError, ValueError):
    """A schedule change that is illegal (it would change the result) or that refers to nothing."""


class BoundsError(LoopstackError, IndexError):
    """An access of a loop tree that is not provably inside its buffer."""


class UnsupportedError(LoopstackError, NotImplementedError):
    """A request this build or this CPU cannot serve (a missing instruction set, an unsupported op)."""


class EncodingError(LoopstackError, ValueError):
    """An instruction whose operands fit no form of the instruction table."""


class ArgumentError(LoopstackError, ValueError):
    """Arrays passed to a kernel that are of the wrong shape, dtype, layout or writability."""


class SimulationError(LoopstackError, RuntimeError):
    """A fault while the PTX reference interpreter runs a kernel: an access outside every array,
    a misaligned address, a partial warp at a warp-collective instruction, an unsupported instruction."""
