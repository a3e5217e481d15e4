"""loopstack: a tensor compiler in pure Python that emits machine code directly."""
from .errors import (  # noqa: F401
    ArgumentError, BoundsError, DTypeError, EncodingError, LoopstackError, ScheduleError,
    ShapeError, SymbolError, UnsupportedError,
)

__version__ = "0.1.0"
