"""The tensor DSL: lazy tensors with named dimensions, Einstein assignment, views.

    m, n, k = lt.symbols("m n k")
    A, B = lt.Tensor(a), lt.Tensor(b)          # bind numpy data
    C = lt.Tensor(m, n)
    C[m, n] = A[m, k] * B[k, n]                  # k is summed (it is not on the left)
    D = (A.to(m, k) * B.to(k, n)).sum(k)        # the same, loop_tool style

Every operation builds a `Node` of the dataflow graph; nothing runs until `.numpy()`.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import dtype as _dtype
from ..errors import ArgumentError, ShapeError, SymbolError
from .symbols import Expr, Size, Symbol, as_expr

BINARY = ("add", "sub", "mul", "div", "max", "min")


class Node:
    """One DSL node. op: read, const, view, unary, binary, reduce, flatten, cast."""

    __slots__ = ("op", "fn", "inputs", "vars", "view", "pad", "value", "data", "dtype",
                 "known", "linear", "products", "flat", "constant", "__weakref__")

    def __init__(self, op, fn="", inputs=(), vars=(), view=(), pad=False, value=0.0,
                 data=None, dtype=None, flat=()):
        self.op, self.fn, self.inputs, self.vars = op, fn, tuple(inputs), tuple(vars)
        self.view, self.pad, self.value, self.data, self.dtype = tuple(view), pad, value, data, dtype
        self.known: list = []       # (symbol, size, origin)
        self.linear: list = []      # (target, ((coeff, symbol), ...), const, origin)
        self.products: list = []    # (target, (symbols...), origin)
        self.flat = tuple(flat)
        self.constant = False       # read: values fixed for the program's life (weights)
        if len(set(self.vars)) != len(self.vars):
            raise ShapeError(f"{op}: dimension {_dup(self.vars)} appears twice in "
                             f"[{', '.join(v.name for v in self.vars)}]")

    def describe(self) -> str:
        return f"{self.fn or self.op}[{', '.join(v.name for v in self.vars)}]"


def _dup(vs):
    seen = set()
    for v in vs:
        if v in seen:
            return v.name
        seen.add(v)
    return "?"


def _anon(i: int) -> Symbol:
    return Symbol(f"_{i}")


def _const(value) -> "Tensor":
    return Tensor._wrap(Node("const", value=float(value)))


def as_tensor(x) -> "Tensor":
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool):
        return _const(x)
    if isinstance(x, np.ndarray):
        return Tensor(x)
    raise ShapeError(f"cannot use {type(x).__name__} as a tensor")


class Tensor:
    """A lazy tensor: `Tensor(array)`, `Tensor(m, n)`, `Tensor(64, 32)`, `Tensor()`.

    `constant=True` declares an input whose values stay fixed once bound, as a network's
    weights do: a compiled kernel may then keep what it derives from them alone (a packed
    copy) from one call to the next, and rebuilds it only when given another array. Writing
    into the bound array afterwards is not seen by such a kernel."""

    def __init__(self, *shape, dtype="float32", constant: bool = False):
        if len(shape) == 1 and isinstance(shape[0], (np.ndarray, list, tuple)) and \
                not isinstance(shape[0], Symbol):
            arr = shape[0]
            if isinstance(arr, (list, tuple)) and all(isinstance(s, (int, Symbol)) for s in arr):
                shape = tuple(arr)   # Tensor([M, K]) as in the paper's Fig. 2
            else:
                arr = np.asarray(arr)
                node = Node("read", vars=[_anon(i) for i in range(arr.ndim)])
                node.constant = bool(constant)
                self._node = node
                self._schedule = None
                self._cache = None
                self.set(arr)
                return
        vars_ = []
        node = Node("read", dtype=_dtype(dtype).name)
        node.constant = bool(constant)
        for i, s in enumerate(shape):
            if isinstance(s, Symbol):
                vars_.append(s)
            elif isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s > 0:
                sym = _anon(i)
                vars_.append(sym)
                node.known.append((sym, int(s), f"declared shape of input dim {i}"))
            else:
                raise ShapeError(f"Tensor: dimension {i} must be a positive int or a Symbol, got {s!r}")
        node.vars = tuple(vars_)
        if len(set(node.vars)) != len(node.vars):
            raise ShapeError(f"Tensor: dimension {_dup(node.vars)} appears twice")
        self._node = node
        self._schedule = None
        self._cache = None

    @classmethod
    def _wrap(cls, node: Node) -> "Tensor":
        t = cls.__new__(cls)
        t._node, t._schedule, t._cache = node, None, None
        return t

    # ---------------------------------------------------------------- data & schedule
    def set(self, x):
        """Bind data (an array or scalar), or apply a schedule (a LoopTree or a replayed one)."""
        from .tree import LoopTree

        if isinstance(x, LoopTree):
            from .run import apply_schedule

            apply_schedule(self, x)
            return self
        node = self._node
        if node.op != "read":
            raise ArgumentError("set: only an input tensor can be bound to data (this one is computed)")
        arr = np.asarray(x)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        elif arr.dtype == np.int64:
            arr = arr.astype(np.int32)
        dt = _dtype(arr)
        if not node.vars and arr.ndim and not node.known:   # Tensor() then .set(array)
            node.vars = tuple(_anon(i) for i in range(arr.ndim))
        if arr.ndim != len(node.vars):
            raise ShapeError(f"set: array of shape {arr.shape} does not match the tensor's "
                             f"{len(node.vars)} dimensions")
        declared = {s: v for s, v, o in node.known if o.startswith("declared")}
        for i, s in enumerate(node.vars):
            if s in declared and declared[s] != arr.shape[i]:
                shape = tuple(declared.get(v, v.name) for v in node.vars)
                raise ShapeError(f"set: array of shape {arr.shape} does not match the tensor's "
                                 f"shape {shape}")
        node.known = [k for k in node.known if k[2].startswith("declared")] + [
            (s, arr.shape[i], f"data bound to input dim {i}") for i, s in enumerate(node.vars)]
        node.data = np.ascontiguousarray(arr).reshape(arr.shape)   # a 0-d array stays 0-d
        node.dtype = dt.name
        self._cache = None
        return self

    # ---------------------------------------------------------------- naming & views
    @property
    def symbolic_shape(self) -> tuple:
        return self._node.vars

    def to(self, *syms, constraints=None) -> "Tensor":
        node = self._node
        for s in syms:
            if not isinstance(s, Symbol):
                raise SymbolError(f"to: expected Symbols, got {s!r}")
        if not constraints:
            if len(syms) != len(node.vars):
                raise ShapeError(f"to: the tensor has {len(node.vars)} dimensions "
                                 f"[{', '.join(v.name for v in node.vars)}] but {len(syms)} names were given")
            return self._view(syms, [Expr({s: 1}) for s in syms])
        cons, sizes, solved = self._constraints(syms, constraints)
        exprs = []
        for v in node.vars:
            if v in cons:
                e = cons[v]
                for s in e.symbols():
                    if s not in syms:
                        raise SymbolError(f"to: the constraint for {v.name} uses {s.name}, which is "
                                          f"not among the new dimensions")
                exprs.append(e)
            elif v in syms:
                exprs.append(Expr({v: 1}))
            else:
                raise SymbolError(f"to: dimension {v.name} is neither kept nor constrained")
        # a constraint solved for an input dimension (loop_tool's concatenation: NM = M + size(N))
        # reads zero where the input does not reach, as a padded view does
        out = self._view(syms, exprs, pad=solved)
        for sym, e in sizes:
            out._node.linear.append((sym, tuple((c, s) for s, c in e.sizes.items()), e.const,
                                     f"constraint size({sym.name}) = {e}"))
        return out

    def _constraints(self, syms, constraints):
        """loop_tool's view constraints -> ({input dim: Expr over new dims}, [(sym, size Expr)], solved).

        A pair is (input dim, expression of the new dims), (new dim, expression holding one input
        dim with coefficient +-1: solved for that input dim) or (lt.Size(dim), expression of
        sizes and constants)."""
        node = self._node
        names = f"[{', '.join(v.name for v in node.vars)}]"
        cons, sizes, solved = {}, [], False
        for pair in constraints:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ShapeError(f"to: a constraint is a pair (dimension or lt.Size(dimension), expression), "
                                 f"got {pair!r}")
            key, e = as_expr(pair[0]), as_expr(pair[1])
            sym = key.size_of()
            if sym is not None:
                if e.terms or e.scaled:
                    raise ShapeError(f"to: size({sym.name}) = {e}: a size is an expression of sizes and "
                                     "constants, not of indices")
                sizes.append((sym, e))
                continue
            k = key.symbol()
            if k is None:
                raise ShapeError(f"to: the left side of a constraint is a dimension or lt.Size(dimension), "
                                 f"got {key}")
            if k in node.vars:
                if k in cons:
                    raise SymbolError(f"to: {k.name} is constrained twice")
                cons[k] = e
            elif k in syms and not e.terms and not e.scaled:
                continue    # a new dimension the tensor does not have: broadcast along it
            elif k in syms:
                src = [s for s in e.terms if s in node.vars]
                if len(src) != 1 or e.terms[src[0]] not in (1, -1) or any(t in node.vars for t, _ in e.scaled):
                    raise ShapeError(f"to: {k.name} = {e} must hold exactly one dimension of the tensor "
                                     f"{names} with coefficient 1 or -1")
                v, c = src[0], e.terms[src[0]]
                if v in cons:
                    raise SymbolError(f"to: {v.name} is constrained twice")
                cons[v] = (Expr({k: 1}) - (e - Expr({v: c}))) * c
                solved = True
            else:
                raise SymbolError(f"to: constraint on {k.name}, which is neither a dimension of the tensor "
                                  f"{names} nor one of the new dimensions")
        return cons, sizes, solved

    def _view(self, out_vars, exprs, pad=False) -> "Tensor":
        return Tensor._wrap(Node("view", inputs=(self._node,), vars=out_vars, view=exprs, pad=pad))

    def __getitem__(self, key) -> "Tensor":
        key = key if isinstance(key, tuple) else (key,)
        node = self._node
        if len(key) != len(node.vars):
            raise ShapeError(f"indexing: the tensor has {len(node.vars)} dimensions but "
                             f"{len(key)} indices were given")
        exprs = [as_expr(k) for k in key]
        out = []
        for e in exprs:
            for s in e.symbols():
                if s not in out:
                    out.append(s)
        return self._view(out, exprs)

    def __setitem__(self, key, value):
        """Einstein assignment: `C[m, n] = rhs` sums rhs over indices missing on the left."""
        key = key if isinstance(key, tuple) else (key,)
        if not all(isinstance(k, Symbol) for k in key):
            raise SymbolError("Einstein assignment: the left-hand side indices must be Symbols")
        if len(key) != len(self._node.vars) and self._node.vars:
            raise ShapeError(f"Einstein assignment: the tensor has {len(self._node.vars)} dimensions "
                             f"but {len(key)} indices were given")
        old = self._node
        if isinstance(value, _Accumulate):
            base, rhs = value.base, value.rhs
        else:
            base, rhs = None, as_tensor(value)
        for k in key:
            if k not in rhs._node.vars:
                raise SymbolError(f"Einstein assignment: {k.name} is on the left but does not "
                                  f"appear on the right-hand side")
        red = [v for v in rhs._node.vars if v not in key]
        res = rhs.sum(*red) if red else rhs
        if base is not None:
            res = base + res
        res = res.transpose(*key)
        node = res._node
        for s, v, o in old.known:            # declared sizes carry over positionally
            if s in old.vars and o.startswith("declared"):
                node.known.append((key[old.vars.index(s)], v, "declared shape of the assigned tensor"))
        self._node, self._cache = node, None

    def __iadd__(self, other):
        other = as_tensor(other)
        if any(v not in self._node.vars for v in other._node.vars):
            return _Accumulate(self, other)   # C[m, n] += A[m, k] * B[k, n]
        return self + other

    def transpose(self, *syms) -> "Tensor":
        vs = self._node.vars
        if set(syms) != set(vs) or len(syms) != len(vs):
            raise SymbolError(f"transpose: [{', '.join(getattr(s, 'name', str(s)) for s in syms)}] "
                              f"is not a permutation of [{', '.join(v.name for v in vs)}]")
        if tuple(syms) == vs:
            return self
        return self._view(syms, [Expr({v: 1}) for v in vs])

    def pad(self, sym, pre, post=None) -> "Tensor":
        vs = self._node.vars
        if sym not in vs:
            raise SymbolError(f"pad: {getattr(sym, 'name', sym)} is not a dimension of the tensor "
                              f"[{', '.join(v.name for v in vs)}]")
        post = pre if post is None else post
        if pre < 0 or post < 0:
            raise ShapeError(f"pad: amounts must be non-negative, got ({pre}, {post})")
        new = Symbol(sym.name + "p")
        out = tuple(new if v is sym else v for v in vs)
        t = self._view(out, [Expr({new: 1}, const=-pre) if v is sym else Expr({v: 1}) for v in vs],
                       pad=True)
        t._node.linear.append((new, ((1, sym),), pre + post, f"pad of {sym.name} by ({pre}, {post})"))
        return t

    def __or__(self, other) -> "Tensor":
        other = as_tensor(other)
        a, b = self._node.vars, other._node.vars
        ao = [v for v in a if v not in b]
        bo = [v for v in b if v not in a]
        if len(ao) != 1 or len(bo) != 1:
            raise ShapeError("concatenation joins along one differently named dimension on each "
                             f"side; got [{', '.join(v.name for v in a)}] | [{', '.join(v.name for v in b)}]")
        i, j = ao[0], bo[0]
        c = Symbol(f"{i.name}_{j.name}")
        left = self._view(tuple(c if v is i else v for v in a),
                          [Expr({c: 1}) if v is i else Expr({v: 1}) for v in a], pad=True)
        right = other._view(tuple(c if v is j else v for v in b),
                            [Expr({c: 1}) - Size(i) if v is j else Expr({v: 1}) for v in b], pad=True)
        out = left + right
        out._node.linear.append((c, ((1, i), (1, j)), 0, f"concatenation of {i.name} and {j.name}"))
        return out

    def flatten(self, *syms) -> "Tensor":
        vs = self._node.vars
        for s in syms:
            if s not in vs:
                raise SymbolError(f"flatten: {getattr(s, 'name', s)} is not a dimension of the tensor")
        if len(syms) < 2:
            return self
        new = Symbol("_".join(s.name for s in syms))
        first = min(vs.index(s) for s in syms)
        out = [v for v in vs if v not in syms]
        out.insert(first, new)
        n = Node("flatten", inputs=(self._node,), vars=out, flat=syms)
        n.products.append((new, tuple(syms), f"flatten of {', '.join(s.name for s in syms)}"))
        return Tensor._wrap(n)

    # ---------------------------------------------------------------- arithmetic
    def _binary(self, fn, other, swap=False) -> "Tensor":
        a, b = (as_tensor(other), self) if swap else (self, as_tensor(other))
        vs = a._node.vars + tuple(v for v in b._node.vars if v not in a._node.vars)
        return Tensor._wrap(Node("binary", fn, (a._node, b._node), vs))

    def _unary(self, fn) -> "Tensor":
        return Tensor._wrap(Node("unary", fn, (self._node,), self._node.vars))

    def __add__(self, o): return self._binary("add", o)
    def __radd__(self, o): return self._binary("add", o, True)
    def __sub__(self, o): return self._binary("sub", o)
    def __rsub__(self, o): return self._binary("sub", o, True)
    def __mul__(self, o): return self._binary("mul", o)
    def __rmul__(self, o): return self._binary("mul", o, True)
    def __truediv__(self, o): return self._binary("div", o)
    def __rtruediv__(self, o): return self._binary("div", o, True)
    def __neg__(self): return self._unary("neg")

    def max(self, *args) -> "Tensor":
        """Element-wise with a tensor or number (`T.max(zero)`); over dimensions when given
        Symbols (`X.max(kh, kw)`), as loop_tool spells both."""
        if args and all(isinstance(a, Symbol) for a in args):
            return self.max_reduce(*args)
        if len(args) != 1:
            raise ShapeError(f"max: one tensor or number, or dimensions to reduce; got {args!r}")
        return self._binary("max", args[0])

    def min(self, *args) -> "Tensor":
        if args and all(isinstance(a, Symbol) for a in args):
            return self.min_reduce(*args)
        if len(args) != 1:
            raise ShapeError(f"min: one tensor or number, or dimensions to reduce; got {args!r}")
        return self._binary("min", args[0])

    def astype(self, dtype) -> "Tensor":
        """These values in `dtype`, converted as numpy's astype converts them: to a float type
        rounded to nearest even, from an integer type exactly or rounded, between integer types
        wrapped.  Float to integer is refused (it needs a rounding and saturation rule).

        On a program's result the cast is its store's conversion: the result is computed as
        before (float16 and bfloat16 are storage, computed in float32) and written in `dtype`.
        So a float16 GEMM's sums, accumulated in float32, come out as float32 with
        `(A * B).sum(k).astype("float32")` without passing through float16, on the CPU and on
        the GPU's tensor cores alike.  Inside a program the converted values are a buffer of
        their own (a `cast` node).  A target that cannot convert says so when compiled."""
        return Tensor._wrap(Node("cast", "cast", (self._node,), self._node.vars, dtype=_dtype(dtype).name))

    def exp(self): return self._unary("exp")
    def log(self): return self._unary("log")
    def sqrt(self): return self._unary("sqrt")
    def abs(self): return self._unary("abs")
    def reciprocal(self): return self._unary("reciprocal")
    def erf(self): return self._unary("erf")
    def neg(self): return self._unary("neg")

    def _reduce(self, fn, name, syms) -> "Tensor":
        vs = self._node.vars
        for s in syms:
            if s not in vs:
                raise SymbolError(f"{name}: {getattr(s, 'name', s)} is not a dimension of this tensor "
                                  f"(its dimensions: {', '.join(v.name for v in vs) or 'none'})")
        if not syms:
            return self
        out = tuple(v for v in vs if v not in syms)
        return Tensor._wrap(Node("reduce", fn, (self._node,), out))

    def sum(self, *syms): return self._reduce("add", "sum", syms)
    def prod(self, *syms): return self._reduce("mul", "prod", syms)
    def max_reduce(self, *syms): return self._reduce("max", "max_reduce", syms)
    def min_reduce(self, *syms): return self._reduce("min", "min_reduce", syms)

    # ---------------------------------------------------------------- execution
    def unify(self):
        from .run import program

        program(self)
        return self

    @property
    def shape(self) -> tuple:
        from .run import program

        prog = program(self)
        return tuple(prog.graph.size(v) for v in prog.graph.output.vars)

    @property
    def dtype(self):
        from .run import program

        return np.dtype(program(self).graph.output.dtype)

    @property
    def ir(self):
        from .run import program

        return program(self).graph

    @property
    def loop_tree(self):
        from .run import loop_tree

        return loop_tree(self)

    def compile(self, target=None):
        from .run import compiled

        return compiled(self, target)[0]

    def numpy(self, target=None) -> np.ndarray:
        from .run import execute

        return execute(self, target)

    def __repr__(self) -> str:
        return f"Tensor[{', '.join(v.name for v in self._node.vars)}]({self._node.describe()})"


class _Accumulate:
    """What `C[m, n] += rhs` hands to __setitem__ when rhs still has indices to sum."""

    def __init__(self, base, rhs):
        self.base, self.rhs = base, rhs


def _unary_fn(fn):
    def f(x):
        return as_tensor(x)._unary(fn)

    f.__name__ = fn
    f.__doc__ = f"Element-wise {fn}."
    return f


exp, log, sqrt, abs, reciprocal, neg, erf = (_unary_fn(f) for f in ("exp", "log", "sqrt", "abs",  # noqa: A001
                                                                   "reciprocal", "neg", "erf"))
relu_op, sigmoid_op, tanh_op, gelu_op = (_unary_fn(f) for f in ("relu", "sigmoid", "tanh", "gelu"))


def maximum(a, b):
    return as_tensor(a).max(b)


def minimum(a, b):
    return as_tensor(a).min(b)


def einsum(spec: str, *tensors) -> Tensor:
    """`einsum("mk,kn->mn", A, B)`: one Symbol per letter, product of operands, sum the rest."""
    try:
        lhs, out = spec.replace(" ", "").split("->")
    except ValueError:
        raise SymbolError(f"einsum: expected 'ab,bc->ac', got {spec!r}") from None
    ins = lhs.split(",")
    if len(ins) != len(tensors):
        raise ShapeError(f"einsum: {len(ins)} operands in {spec!r} but {len(tensors)} tensors given")
    syms = {c: Symbol(c) for c in lhs + out if c != ","}
    prod = None
    for letters, t in zip(ins, tensors):
        term = as_tensor(t)[tuple(syms[c] for c in letters)]
        prod = term if prod is None else prod * term
    for c in out:
        if c not in lhs:
            raise SymbolError(f"einsum: output index {c} does not appear in the inputs")
    red = [syms[c] for c in dict.fromkeys(lhs.replace(",", "")) if c not in out]
    res = prod.sum(*red) if red else prod
    return res.transpose(*(syms[c] for c in out))
