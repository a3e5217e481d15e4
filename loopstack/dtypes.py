"""The element types that flow through the IR, from the frontend down to the encoders.

A dtype is named by its numpy name ("float32", ...). Every layer asks this module,
so that adding a type (bfloat16, say) is one row here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import DTypeError


@dataclass(frozen=True)
class DType:
    name: str          # numpy's name: "float32"
    itemsize: int      # bytes
    is_float: bool
    compute: str       # the type arithmetic runs in: fp16 storage computes in fp32, int8 in int32

    @property
    def np(self) -> np.dtype:
        if self.name == "bfloat16":   # numpy knows bfloat16 once ml_dtypes has registered it
            import ml_dtypes  # noqa: F401
        return np.dtype(self.name)


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float32", 4, True, "float32"),
        DType("float16", 2, True, "float32"),
        DType("bfloat16", 2, True, "float32"),    # ml_dtypes' numpy type; computed by the GPU backend
        DType("int8", 1, False, "int32"),
        DType("uint8", 1, False, "int32"),
        DType("int16", 2, False, "int32"),     # 8-bit operands pre-widened for the exact AVX2 dot path
        DType("int32", 4, False, "int32"),
    )
}


def dtype(x) -> DType:
    """The DType of a name, a numpy dtype or an array; a clear error for anything else."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in DTYPES:      # the common case, on every compile's hot path
        return DTYPES[x]
    try:
        src = x if isinstance(x, (str, type, np.dtype)) else getattr(x, "dtype", x)
        name = np.dtype(src).name
    except TypeError:
        raise DTypeError(f"not a dtype: {x!r}") from None
    if name not in DTYPES:
        raise DTypeError(f"dtype {name} is not supported (supported: {', '.join(DTYPES)})")
    return DTYPES[name]
