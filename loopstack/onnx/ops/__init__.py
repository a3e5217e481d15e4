"""The operator converters; importing this package registers them (see ../registry.py)."""
from . import elementwise, layers, quantized, reductions, shapes  # noqa: F401
