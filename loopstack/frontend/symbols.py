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
    """const + sum(coeff * symbol) + sum(coeff * size(symbol)) + sum(coeff * symbol * size(other));
    immutable.  Sizes are constants of the program, so `I * lt.Size(J) + J` is affine once they
    are known (loop_tool's reshape); a product of two index terms is refused."""

    __slots__ = ("terms", "sizes", "scaled", "const")

    def __init__(self, terms=None, sizes=None, const: int = 0, scaled=None):
        # loop_tool spells constants and single symbols as Exprs: lt.Expr(2) * ho + kh
        if isinstance(terms, Symbol):
            terms = {terms: 1}
        elif terms is not None and not isinstance(terms, dict):
            const, terms = const + as_expr(terms).const, None
        self.terms = {s: c for s, c in (terms or {}).items() if c}
        self.sizes = {s: c for s, c in (sizes or {}).items() if c}
        self.scaled = {k: c for k, c in (scaled or {}).items() if c}   # (symbol, size symbol) -> coeff
        self.const = int(const)

    def __add__(self, o):
        o = as_expr(o)
        parts = []
        for a, b in ((self.terms, o.terms), (self.sizes, o.sizes), (self.scaled, o.scaled)):
            d = dict(a)
            for k, c in b.items():
                d[k] = d.get(k, 0) + c
            parts.append(d)
        return Expr(parts[0], parts[1], self.const + o.const, parts[2])

    __radd__ = __add__

    def __sub__(self, o):
        return self + as_expr(o) * -1

    def __rsub__(self, o):
        return as_expr(o) - self

    def __neg__(self):
        return self * -1

    def _scale(self, k: int) -> "Expr":
        return Expr({s: c * k for s, c in self.terms.items()}, {s: c * k for s, c in self.sizes.items()},
                    self.const * k, {s: c * k for s, c in self.scaled.items()})

    def __mul__(self, o):
        if isinstance(o, Symbol):
            o = Expr({o: 1})
        if isinstance(o, Expr) and not o.terms and not o.sizes and not o.scaled:
            o = o.const
        if isinstance(o, int) and not isinstance(o, bool):
            return self._scale(o)
        if isinstance(o, Expr) and not self.terms and not self.sizes and not self.scaled:
            return o._scale(self.const)
        if isinstance(o, Expr):
            # index x size: the only product that stays affine once sizes are known
            for idx, size in ((self, o), (o, self)):
                if not size.terms and not size.scaled and len(size.sizes) == 1 and not idx.sizes \
                        and not idx.scaled:
                    (z, k), = size.sizes.items()
                    return Expr(None, None, 0, {(s, z): c * k for s, c in idx.terms.items()}) + \
                        Expr(None, {z: idx.const * k}) + idx._scale(size.const)
        from ..errors import ShapeError

        raise ShapeError(f"index expressions are affine: cannot multiply {self} by {o!r}")

    __rmul__ = __mul__

    def symbols(self) -> list[Symbol]:
        return list(dict.fromkeys([*self.terms, *(s for s, _ in self.scaled)]))

    def size_symbols(self) -> list[Symbol]:
        """The symbols whose sizes this expression needs."""
        return list(dict.fromkeys([*self.sizes, *(z for _, z in self.scaled)]))

    def symbol(self):
        """The Symbol this Expr is exactly (coefficient 1, nothing else), else None."""
        if not self.sizes and not self.scaled and not self.const and len(self.terms) == 1:
            (s, c), = self.terms.items()
            return s if c == 1 else None
        return None

    def size_of(self):
        """The Symbol whose size this Expr is exactly (`lt.Size(s)`), else None."""
        if not self.terms and not self.scaled and not self.const and len(self.sizes) == 1:
            (s, c), = self.sizes.items()
            return s if c == 1 else None
        return None

    def resolve(self, size_of) -> tuple[dict, int]:
        """(terms, const) with Size(...) terms replaced by their values."""
        terms = dict(self.terms)
        for (s, z), c in self.scaled.items():
            terms[s] = terms.get(s, 0) + c * size_of(z)
        return {s: c for s, c in terms.items() if c}, self.const + sum(c * size_of(s) for s, c in self.sizes.items())

    def __repr__(self) -> str:
        parts = [(s.name if c == 1 else f"{c}*{s.name}") for s, c in self.terms.items()]
        parts += [(f"Size({s.name})" if c == 1 else f"{c}*Size({s.name})") for s, c in self.sizes.items()]
        parts += [(f"{s.name}*Size({z.name})" if c == 1 else f"{c}*{s.name}*Size({z.name})")
                  for (s, z), c in self.scaled.items()]
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
