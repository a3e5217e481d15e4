"""Size unification: deduce every symbol's size from the constraints of a program.

Constraints come from bound data and declared shapes (`size(m) = 64`), from linear
relations (`size(m_pad) = size(m) + 2`, concatenation `size(c) = size(i) + size(j)`),
from products (flatten) and from windowed views (`n = 2*no + kn`, so
`size(no) = (size(n) - size(kn)) // 2 + 1` and, the other way, an input's size is
`max(index) + 1`).  They are solved to a fixed point; a contradiction or a size left
unknown raises a ShapeError naming the symbol and where each value came from.
"""
from __future__ import annotations

from ..errors import ShapeError


class Sizes:
    def __init__(self):
        self.val: dict = {}
        self.origin: dict = {}

    def get(self, s):
        return self.val.get(s)

    def set(self, s, v: int, origin: str) -> bool:
        v = int(v)
        if v < 1:
            raise ShapeError(f"size of {s.name} would be {v} ({origin}); sizes must be positive")
        old = self.val.get(s)
        if old is None:
            self.val[s] = v
            self.origin[s] = origin
            return True
        if old != v:
            raise ShapeError(f"size of {s.name} is {old} ({self.origin[s]}) but {v} ({origin}): "
                             f"unsatisfiable sizes")
        return False


def _window(sz: Sizes, v, expr, origin: str) -> bool:
    """v = expr(out symbols) for an unpadded view: relate the sizes both ways."""
    if any(sz.get(s) is None for s in expr.size_symbols()):
        return False
    terms, const = expr.resolve(sz.get)
    if len(terms) == 1 and const == 0 and list(terms.values())[0] == 1:   # a renaming
        (u,) = terms
        if sz.get(u) is not None and sz.get(v) is not None and sz.get(u) != sz.get(v):
            named, other = (u, v) if v.name.startswith("_") else (v, u)   # name the user's symbol
            raise ShapeError(f"size of {named.name} is {sz.get(named)} ({sz.origin[named]}) but "
                             f"{sz.get(other)} ({sz.origin[other]}, {origin}): unsatisfiable sizes")
        if sz.get(u) is not None:
            return sz.set(v, sz.get(u), origin)
        if sz.get(v) is not None:
            return sz.set(u, sz.get(v), origin)
        return False
    unknown = [s for s in terms if sz.get(s) is None]
    if not unknown:
        if sz.get(v) is None:
            hi = const + sum(c * (sz.get(s) - 1) for s, c in terms.items() if c > 0)
            return sz.set(v, hi + 1, origin)
        return False
    if len(unknown) == 1 and sz.get(v) is not None and terms[unknown[0]] > 0:
        u = unknown[0]
        c = terms[u]
        rest = const + sum(c2 * (sz.get(s) - 1) for s, c2 in terms.items() if s is not u and c2 > 0)
        n = (sz.get(v) - 1 - rest) // c + 1
        if n < 1:
            raise ShapeError(f"the window {v.name} = {expr} does not fit in size({v.name}) = "
                             f"{sz.get(v)} ({origin})")
        return sz.set(u, n, origin)
    return False


def _linear(sz: Sizes, target, terms, const, origin: str) -> bool:
    known = [sz.get(s) for _, s in terms]
    if all(k is not None for k in known):
        return sz.set(target, const + sum(c * k for (c, _), k in zip(terms, known)), origin)
    if sz.get(target) is not None:
        missing = [(c, s) for (c, s), k in zip(terms, known) if k is None]
        if len(missing) == 1 and abs(missing[0][0]) == 1:
            c, s = missing[0]
            rest = const + sum(c2 * k for (c2, _), k in zip(terms, known) if k is not None)
            return sz.set(s, (sz.get(target) - rest) * c, origin)
    return False


def _product(sz: Sizes, target, syms, origin: str) -> bool:
    if all(sz.get(s) is not None for s in syms):
        p = 1
        for s in syms:
            p *= sz.get(s)
        return sz.set(target, p, origin)
    return False


def unify(nodes) -> Sizes:
    """Solve the size constraints of DSL nodes (see tensor.Node) to a fixed point."""
    sz = Sizes()
    windows, linears, products = [], [], []
    for i, n in enumerate(nodes):
        for s, v, origin in n.known:
            sz.set(s, v, origin)
        for target, terms, const, origin in n.linear:
            linears.append((target, terms, const, origin))
        for target, syms, origin in n.products:
            products.append((target, syms, origin))
        if n.op == "view" and not n.pad:
            for v, e in zip(n.inputs[0].vars, n.view):
                windows.append((v, e, f"view {n.describe()}"))
    changed = True
    while changed:
        changed = False
        for v, e, o in windows:
            changed |= _window(sz, v, e, o)
        for t, terms, c, o in linears:
            changed |= _linear(sz, t, terms, c, o)
        for t, syms, o in products:
            changed |= _product(sz, t, syms, o)
    for n in nodes:
        for s in n.vars:
            if sz.get(s) is None:
                raise ShapeError(f"cannot infer the size of {s.name}: bind data, declare it "
                                 f"(lt.Tensor(...)) or use it where its size is known")
    for n in nodes:
        if n.op == "read" or n is nodes[-1]:      # the buffers a caller hands over
            count = 1
            for s in n.vars:
                count *= sz.get(s)
            if count > MAX_ELEMENTS:
                raise ShapeError(f"{n.describe()} of shape {tuple(sz.get(s) for s in n.vars)} has "
                                 f"2**{count.bit_length() - 1} elements or more, more than the 2**40 "
                                 "a tensor may hold")
    return sz


MAX_ELEMENTS = 2 ** 40     # far beyond memory, well inside the 64-bit offsets the code computes
