"""Symbols (named dimensions) and the affine index expressions built from them.

    m, n = lt.symbols("m n")
    e = 2 * m + n - 1          # an Expr: used in views, X[2 * ho + kh]
    lt.Size(n)                 # the size of n, resolved once sizes are unified

A Symbol is identified by the object, not by its name: two `Symbol("m")` are
different dimensions that print alike (the graph disambiguates them as m, m_1).
"""
from __future__ import annotations

import itertools

_ids = itertools.count()


class Symbol:
    __slots__ = ("name", "id")

    def __init__(self, name: str):
        if not isinstance(name, str) or not name.isidentifier():
            from ..errors import SymbolError

            raise SymbolError(f"a symbol name must be an identifier, got {name!r}")
        self.name = name
        self.id = next(_ids)

    def __repr__(self) -> str:
        return self.name

    # arithmetic builds Exprs
    def _e(self) -> "Expr":
        return Expr({self: 1})

    def __add__(self, o):
        return self._e() + o

    __radd__ = __add__

    def __sub__(self, o):
        return self._e() - o

    def __rsub__(self, o):
        return as_expr(o) - self._e()

    def __mul__(self, o):
        return self._e() * o

    __rmul__ = __mul__

    def __neg__(self):
        return self._e() * -1


class Expr:
    """const + sum(coeff * symbol) + sum(coeff * size(symbol)); immutable."""

    __slots__ = ("terms", "sizes", "const")

    def __init__(self, terms=None, sizes=None, const: int = 0):
        self.terms = {s: c for s, c in (terms or {}).items() if c}
        self.sizes = {s: c for s, c in (sizes or {}).items() if c}
        self.const = int(const)

    def __add__(self, o):
        o = as_expr(o)
        t = dict(self.terms)
        for s, c in o.terms.items():
            t[s] = t.get(s, 0) + c
        z = dict(self.sizes)
        for s, c in o.sizes.items():
            z[s] = z.get(s, 0) + c
        return Expr(t, z, self.const + o.const)

    __radd__ = __add__

    def __sub__(self, o):
        return self + as_expr(o) * -1

    def __rsub__(self, o):
        return as_expr(o) - self

    def __neg__(self):
        return self * -1

    def __mul__(self, o):
        if isinstance(o, Expr) and not o.terms and not o.sizes:
            o = o.const
        if not isinstance(o, int):
            from ..errors import ShapeError

            raise ShapeError(f"index expressions are affine: cannot multiply {self} by {o!r}")
        return Expr({s: c * o for s, c in self.terms.items()},
                    {s: c * o for s, c in self.sizes.items()}, self.const * o)

    __rmul__ = __mul__

    def symbols(self) -> list[Symbol]:
        return list(self.terms)

    def resolve(self, size_of) -> tuple[dict, int]:
        """(terms, const) with Size(...) terms replaced by their values."""
        return dict(self.terms), self.const + sum(c * size_of(s) for s, c in self.sizes.items())

    def __repr__(self) -> str:
        parts = [(s.name if c == 1 else f"{c}*{s.name}") for s, c in self.terms.items()]
        parts += [(f"Size({s.name})" if c == 1 else f"{c}*Size({s.name})") for s, c in self.sizes.items()]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


def Size(sym: Symbol) -> Expr:  # noqa: N802 - loop_tool spelling
    """The size of a symbol as an index expression term (resolved after unification)."""
    return Expr(sizes={sym: 1})


def as_expr(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, Symbol):
        return Expr({x: 1})
    if isinstance(x, (int,)) and not isinstance(x, bool):
        return Expr(const=x)
    try:
        import numpy as np

        if isinstance(x, np.integer):
            return Expr(const=int(x))
    except ImportError:  # pragma: no cover
        pass
    from ..errors import ShapeError

    raise ShapeError(f"not an index expression: {x!r}")


def symbols(names: str) -> tuple[Symbol, ...]:
    """`symbols("m n k")` -> three Symbols (space-separated names)."""
    return tuple(Symbol(n) for n in names.split())


class SymbolGenerator:
    """`s = lt.SymbolGenerator(); s.m` creates (and then reuses) a Symbol per attribute."""

    def __init__(self):
        self._syms: dict[str, Symbol] = {}

    def __getattr__(self, name: str) -> Symbol:
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in self._syms:
            self._syms[name] = Symbol(name)
        return self._syms[name]
