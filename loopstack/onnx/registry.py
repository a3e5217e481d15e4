"""Converters from ONNX operators to the DSL, keyed by (domain, op type, since_version).

A converter is a plain function whose signature is the operator's schema:

    @converter("LeakyRelu", 6, 16)
    def leaky_relu(ctx, X, *, alpha=0.01): ...

positional parameters are the node's inputs (None for an omitted optional input), keyword-only
parameters its attributes with their ONNX defaults. A node carrying an attribute the
converter does not name raises `UnsupportedError` naming it, instead of being silently
ignored. `const=` lists the inputs that must be known at import (a Reshape's shape, a
Slice's bounds): the importer folds them or refuses the node, and the ONNX backend binds
such graph inputs as constants.

A node resolves to its schema's since_version for the model's opset (`onnx.defs.get_schema`);
a version with no converter is unsupported, named with the versions that are.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..errors import LoopstackError, UnsupportedError


@dataclass(frozen=True)
class Converter:
    domain: str
    op: str
    fn: object
    versions: tuple[int, ...]
    const: tuple[int, ...]          # input positions that must be constant
    attributes: frozenset           # attribute names the converter understands
    fold: object = None             # numpy function for all-constant inputs, or None
    integer: bool = False           # takes 8-bit and int32 run-time inputs (the quantized operators)

    def _check(self, attrs) -> None:
        unknown = sorted(set(attrs) - self.attributes)
        if unknown:
            raise UnsupportedError(f"attribute {unknown[0]!r} of {self.op} is not supported")

    def __call__(self, ctx, inputs, attrs):
        self._check(attrs)
        return self.fn(ctx, *inputs, **attrs)

    def fold_constants(self, inputs, attrs):
        """The numpy form on all-constant inputs."""
        self._check(attrs)
        return self.fold(*inputs, **attrs)


_REGISTRY: dict[tuple[str, str, int], Converter] = {}
_OPS: set[str] = set()          # the operators _REGISTRY has some version of


def converter(op: str, *versions: int, domain: str = "", const=(), fold=None, integer=False):
    """Register `fn` for the schemas of `op` introduced at each of `versions`."""
    def register(fn):
        params = inspect.signature(fn).parameters.values()
        attrs = frozenset(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)
        conv = Converter(domain, op, fn, tuple(versions), tuple(const), attrs, fold, integer)
        for v in versions:
            key = (domain, op, v)
            if key in _REGISTRY:
                raise LoopstackError(f"two converters for {op} version {v} ({_REGISTRY[key].fn.__name__}, "
                                     f"{fn.__name__})")
            _REGISTRY[key] = conv
        _OPS.add(op)
        return fn

    return register


def since_version(op: str, opset: int, domain: str = "") -> int:
    """The since_version of the schema of `op` that a model importing `opset` of `domain` uses."""
    import onnx.defs

    try:
        return onnx.defs.get_schema(op, opset, domain).since_version
    except onnx.defs.SchemaError:
        raise UnsupportedError(f"{op} is not an operator of the ONNX domain {domain or 'ai.onnx'!r} "
                               f"at opset {opset}") from None


def lookup(op: str, opset: int, domain: str = "") -> Converter:
    """The converter of `op` at `opset`, or UnsupportedError naming what is missing."""
    if domain not in ("", "ai.onnx"):
        raise UnsupportedError(f"operator domain {domain!r} is not supported (only the default ONNX domain)")
    version = since_version(op, opset) if op in _OPS else None
    conv = _REGISTRY.get(("", op, version))
    if conv is None:
        # the error path only: the registry is scanned for what it does have
        known = sorted(v for d, o, v in _REGISTRY if o == op)
        if not known:
            raise UnsupportedError(f"operator {op} is not supported")
        raise UnsupportedError(f"{op} version {version} (opset {opset}) is not supported; "
                               f"supported versions: {', '.join(map(str, known))}")
    return conv


def supported_ops() -> list[str]:
    return sorted({o for _, o, _ in _REGISTRY})


def const_inputs(op: str, opset: int) -> tuple[int, ...]:
    """Input positions of `op` that must be constant (empty when the op is not supported)."""
    try:
        return lookup(op, opset).const
    except (UnsupportedError, LoopstackError):
        return ()
