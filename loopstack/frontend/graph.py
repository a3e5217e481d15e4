"""The dataflow graph (paper §4.2): an immutable, canonical form of a DSL program.

Nodes are numbered in topological order and dimensions carry unique names, so two
programs built alike give equal graphs (and hit the same compiled kernel):

    %0[m, k] <- read(0)
    %1[k, n] <- read(1)
    %2[m, k, n] <- multiply(%0, %1)
    %3[m, n] <- add(%2)
    %4[m, n] <- write(%3)

ops: read (an input buffer), const, view (affine index constraints; `pad` reads zero
outside its input), unary, binary, reduce, copy (staging), flatten, write.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import DTYPES
from ..errors import DTypeError

PRINT_NAMES = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "max": "max",
               "min": "min"}
SCHEDULED = ("unary", "binary", "reduce", "copy", "flatten", "write")


@dataclass(frozen=True)
class GNode:
    id: int
    op: str
    fn: str = ""
    inputs: tuple[int, ...] = ()
    vars: tuple[str, ...] = ()
    dtype: str = "float32"
    view: tuple = ()          # view: per input var, ((name, coeff), ...), const)
    pad: bool = False
    value: float = 0.0        # const
    arg: int = -1             # read: input index
    constant: bool = False    # read: an input whose values stay fixed (see Tensor(constant=True))
    flat: tuple[str, ...] = ()

    def label(self) -> str:
        if self.op == "read":
            return "read()"
        if self.op == "write":
            return f"write(%{self.inputs[0]})"
        if self.op == "const":
            return f"const({self.value!r})"
        ins = ", ".join(f"%{i}" for i in self.inputs)
        if self.op == "binary":
            return f"{PRINT_NAMES[self.fn]}({ins})"
        if self.op == "reduce":
            return f"{self.fn}({ins})"
        if self.op == "view":
            return f"{'pad' if self.pad else 'view'}({ins})"
        return f"{self.fn or self.op}({ins})"

    def __str__(self) -> str:
        return f"%{self.id}[{', '.join(self.vars)}] <- {self.label()}"


@dataclass(frozen=True)
class Graph:
    nodes: tuple[GNode, ...]
    sizes: tuple[tuple[str, int], ...]
    n_inputs: int
    _size: dict = field(default=None, compare=False, hash=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "_size", (dict(self.sizes), {n.id: n for n in self.nodes}))

    def size(self, var: str) -> int:
        return self._size[0][var]

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(v for v, _ in self.sizes)

    @property
    def output(self) -> GNode:
        return next(n for n in self.nodes if n.op == "write")

    def node(self, i: int) -> GNode:
        return self._size[1][i]

    def consumers(self, i: int) -> list[int]:
        return [n.id for n in self.nodes if i in n.inputs]

    def domain(self, n: GNode) -> tuple[str, ...]:
        """The dimensions a node iterates: its own, or its input's for reductions/flatten."""
        if n.op in ("reduce", "flatten"):
            return self.node(n.inputs[0]).vars
        return n.vars

    def reduced(self, n: GNode) -> tuple[str, ...]:
        return tuple(v for v in self.domain(n) if v not in n.vars) if n.op == "reduce" else ()

    def with_nodes(self, nodes) -> "Graph":
        return Graph(tuple(nodes), self.sizes, self.n_inputs)

    def __str__(self) -> str:
        return "\n".join(str(n) for n in self.nodes)

    def dot(self) -> str:
        """Graphviz text of the graph."""
        lines = ["digraph G {", "  node [shape=record];"]
        for n in self.nodes:
            lines.append(f'  n{n.id} [label="{{%{n.id}[{", ".join(n.vars)}] | {n.label()}}}"];')
            for i in n.inputs:
                lines.append(f"  n{i} -> n{n.id};")
        lines.append("}")
        return "\n".join(lines)


def view_source_index(view: GNode, source: GNode, idx: dict) -> dict:
    """The index of `view`'s source at the point `idx` of the view: per source var, (terms,
    const) over whatever `idx` is written in. A view var `idx` leaves out stands for itself."""
    out = {}
    for v, (terms, const) in zip(source.vars, view.view):
        t, c = {}, const
        for name, k in terms:
            sub_t, sub_c = idx.get(name, ({name: 1}, 0))
            for x, y in sub_t.items():
                t[x] = t.get(x, 0) + k * y
            c += k * sub_c
        out[v] = ({x: y for x, y in t.items() if y}, c)
    return out


def _selects(view: GNode) -> bool:
    """Whether a view reads part of its source (a slice, shift or stride), not all of it renamed,
    reordered or padded."""
    return not view.pad and not all(len(t) == 1 and t[0][1] == 1 and c == 0 for t, c in view.view)


def _names(nodes) -> dict:
    """Unique, deterministic names for the symbols of a program (first appearance order)."""
    names, taken = {}, set()
    for n in nodes:
        syms = list(n.vars)
        if n.op == "view":
            for e in n.view:
                syms += e.symbols() + e.size_symbols()
        for s in syms:
            if s in names:
                continue
            name, k = s.name, 0
            while name in taken:
                k += 1
                name = f"{s.name}_{k}"
            names[s] = name
            taken.add(name)
    return names


def toposort(out) -> list:
    order, seen = [], set()
    stack = [(out, False)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((n, True))
        for i in reversed(n.inputs):
            if id(i) not in seen:
                stack.append((i, False))
    # the explicit stack may append a shared input late; a stable re-sort keeps inputs first
    pos = {id(n): k for k, n in enumerate(order)}
    return order if all(pos[id(i)] < pos[id(n)] for n in order for i in n.inputs) else _dfs(out)


def _dfs(out) -> list:
    order, seen = [], set()

    def rec(n):
        if id(n) in seen:
            return
        seen.add(id(n))
        for i in n.inputs:
            rec(i)
        order.append(n)

    rec(out)
    return order


def _common_dtype(dts, what):
    dts = [d for d in dts if d is not None]
    if not dts:
        return "float32"
    if len(set(dts)) > 1:
        if not any(DTYPES[d].is_float for d in dts):
            # integers of different widths or signs (uint8 activations x int8 weights) meet in
            # int32, the type integer arithmetic computes in: exact for every 8-bit product
            return "int32"
        raise DTypeError(f"{what}: operands have different dtypes ({', '.join(sorted(set(dts)))}); "
                         "convert the data first")
    return dts[0]


def _check_cast(src, dst) -> None:
    if src is not None and DTYPES[src].is_float and not DTYPES[dst].is_float:
        raise DTypeError(f"astype: {src} to {dst} is not supported: a float to integer conversion needs a "
                         "rounding and saturation rule (quantize in numpy, or compute in integers)")


def _exact_integer_products(nodes) -> None:
    """An integer sum's terms are int32, as the sum is: a product of 8- or 16-bit integers that
    only an int32 sum reads is an int32 node, so that a schedule that stores it (a node of its
    own, not fused into the sum) keeps it exact, as the fused product is."""
    readers: dict[int, list] = {}
    for n in nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)
    for k, n in enumerate(nodes):
        users = readers.get(n.id, [])
        if (n.op == "binary" and n.dtype in ("int8", "uint8", "int16") and len(users) == 1
                and users[0].op == "reduce" and users[0].dtype == "int32"):
            nodes[k] = GNode(**{**n.__dict__, "dtype": "int32"})


def canonicalize(out, sizes, dsl=None) -> tuple[Graph, list]:
    """DSL node -> (Graph, [DSL read nodes in input order]); `dsl`: toposort(out), if the
    caller has it.

    Renaming views over inputs are folded into the read (a read may then appear more
    than once under different names, all bound to the same input)."""
    dsl = toposort(out) if dsl is None else dsl
    names = _names(dsl)
    ids: dict[int, int] = {}
    reads: list = []
    nodes: list[GNode] = []
    consts: dict[int, float] = {}

    def emit(**kw) -> int:
        g = GNode(id=len(nodes), **kw)
        nodes.append(g)
        return g.id

    for n in dsl:
        vs = tuple(names[v] for v in n.vars)
        if n.op == "read":
            if not any(r is n for r in reads):
                reads.append(n)
            arg = next(k for k, r in enumerate(reads) if r is n)
            ids[id(n)] = emit(op="read", vars=vs, dtype=n.dtype or "float32", arg=arg, constant=n.constant)
        elif n.op == "const":
            consts[id(n)] = n.value
            ids[id(n)] = emit(op="const", value=n.value, dtype=None)
        elif n.op == "view":
            src = nodes[ids[id(n.inputs[0])]]
            if n.pad and src.op == "view" and _selects(src):
                # a padded read is zero outside the bounds of the buffer it reads: a pad of a
                # slice, shift or stride of one pads what that view selected only once the view
                # is a buffer of its own (else it would read the rest of the buffer as padding).
                # A pad of a pad composes exactly: each covers all of its source.
                src = nodes[emit(op="copy", fn="copy", inputs=(src.id,), vars=src.vars, dtype=src.dtype)]
            exprs = []
            for e in n.view:
                terms, const = e.resolve(lambda s: sizes.get(s))
                exprs.append((tuple(sorted((names[s], c) for s, c in terms.items())), const))
            rename = (not n.pad and all(len(t) == 1 and t[0][1] == 1 and c == 0 for t, c in exprs)
                      and len({t[0][0] for t, _ in exprs}) == len(exprs) == len(vs))
            if rename and src.op == "read":
                m = {v: t[0][0] for v, (t, _) in zip(src.vars, exprs)}
                ids[id(n)] = emit(op="read", vars=tuple(m[v] for v in src.vars), dtype=src.dtype,
                                  arg=src.arg, constant=src.constant)
                if vs != nodes[-1].vars:     # a transposed rename: keep the order as a view
                    base = ids[id(n)]
                    ids[id(n)] = emit(op="view", inputs=(base,), vars=vs, dtype=src.dtype,
                                      view=tuple((((v, 1),), 0) for v in nodes[base].vars))
            elif rename and all(t[0][0] == v for v, (t, _) in zip(src.vars, exprs)) and vs == src.vars:
                ids[id(n)] = src.id
            else:
                ids[id(n)] = emit(op="view", inputs=(src.id,), vars=vs, dtype=src.dtype,
                                  view=tuple(exprs), pad=n.pad)
        elif n.op == "cast":
            src = nodes[ids[id(n.inputs[0])]]
            _check_cast(src.dtype, n.dtype)
            if src.dtype in (None, n.dtype) or n is out and DTYPES[src.dtype].compute == DTYPES[n.dtype].compute:
                ids[id(n)] = src.id         # the result's cast is the write's conversion (below)
            else:
                ids[id(n)] = emit(op="copy", fn="cast", inputs=(src.id,), vars=vs, dtype=n.dtype)
        else:
            ins = tuple(ids[id(i)] for i in n.inputs)
            dt = _common_dtype([nodes[i].dtype for i in ins], f"{n.fn or n.op}")
            if n.op == "reduce" and n.fn in ("add", "mul") and not DTYPES[dt].is_float:
                dt = "int32"
            if n.op == "binary" and all(nodes[i].op == "const" for i in ins):
                pass
            ids[id(n)] = emit(op=n.op, fn=n.fn, inputs=ins, vars=vs, dtype=dt,
                              flat=tuple(names[s] for s in n.flat))
    res = nodes[ids[id(out)]]
    if (res.op not in ("unary", "binary", "reduce", "flatten") and res.fn != "cast") or res.dtype is None:
        if res.op == "const":
            raise DTypeError("a program must read at least one tensor (this one is a constant)")
        res = nodes[emit(op="copy", fn="copy", inputs=(res.id,), vars=res.vars, dtype=res.dtype)]
    emit(op="write", inputs=(res.id,), vars=res.vars, dtype=out.dtype if out.op == "cast" else res.dtype)
    _exact_integer_products(nodes)
    # drop nodes the output does not use (reads folded into renamed reads), renumber
    live, stack = set(), [nodes[-1].id]
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            stack.extend(nodes[i].inputs)
    renum = {n.id: k for k, n in enumerate(n for n in nodes if n.id in live)}
    nodes = [GNode(**{**n.__dict__, "id": renum[n.id], "inputs": tuple(renum[i] for i in n.inputs),
                      "dtype": n.dtype or "float32"}) for n in nodes if n.id in live]
    args = {}
    for n in nodes:
        if n.op == "read":
            args.setdefault(n.arg, len(args))
    nodes = [GNode(**{**n.__dict__, "arg": args[n.arg]}) if n.op == "read" else n for n in nodes]
    reads = [reads[old] for old, _ in sorted(args.items(), key=lambda p: p[1])]
    used = sorted({v for n in nodes for v in n.vars}, key=lambda v: list(names.values()).index(v))
    size_of = {names[s]: sizes.get(s) for s in names if sizes.get(s) is not None}
    return Graph(tuple(nodes), tuple((v, size_of[v]) for v in used), len(reads)), reads
