"""Target-independent facts about a loop tree that every code generator needs.

Nothing here emits code or names a register: the questions are "how many bytes does
this access move when loop L advances", "can the innermost loop be vectorised",
"which loop keeps the output block in registers" (paper §5.1), answered from the
tree and a few numbers of the target (lanes, vector registers).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import dtype as _dtype
from ..looptree.ir import (
    Access, Acc, Binary, Compute, Const, Dot, Load, Loop, LoopTree, Unary, expr_loads, loop_var,
)

# ---------------------------------------------------------------------------
# addresses


@dataclass(frozen=True)
class ByteMap:
    """An access as bytes: address = base(buffer) + const + sum(coeff * value(name))."""

    buffer: str
    coeffs: tuple[tuple[str, int], ...]   # name (dim or @var) -> bytes per unit
    const: int
    itemsize: int

    def coeff(self, name: str) -> int:
        for n, c in self.coeffs:
            if n == name:
                return c
        return 0

    @property
    def stream(self) -> tuple:
        """Accesses with the same stream differ only by a constant: they share a pointer."""
        return (self.buffer, self.coeffs)


def byte_map(tree: LoopTree, access: Access) -> ByteMap:
    """The access as bytes, over its buffer's layout in `tree`. Kept on the access with the
    buffer it was made for (as ir._derived keeps facts): the rewrites' vector plans, the walk's
    plans, streams and addresses of every segment, and the prefetch plans all ask for it."""
    buf = tree.buffer(access.buffer)
    kept = access.__dict__.get("_byte_map")
    if kept is not None and kept[0] is buf:
        return kept[1]
    bm = _byte_map(access, buf)
    access.__dict__["_byte_map"] = (buf, bm)
    return bm


def _byte_map(access: Access, buf) -> ByteMap:
    item = _dtype(buf.dtype).itemsize
    acc: dict[str, int] = {}
    const = 0
    for idx, stride in zip(access.index, buf.strides):
        const += idx.const * stride * item
        for name, c in idx.terms:
            acc[name] = acc.get(name, 0) + c * stride * item
    return ByteMap(access.buffer, tuple(sorted((n, c) for n, c in acc.items() if c)), const, item)


def loop_delta(coeffs: dict[str, int], loop: Loop, elements: int | None = None) -> int:
    """Bytes an access stream (its ByteMap coefficients) moves when `loop` advances one
    iteration — or, for a vectorised loop, `elements` elements of its dimension."""
    if elements is not None:
        return elements * coeffs.get(loop.dim, 0)
    return loop.step * (coeffs.get(loop.dim, 0) + coeffs.get(loop_var(loop.var), 0))


def element_stride(bm: ByteMap, dim: str) -> int:
    """Elements the access moves per unit of `dim` (for vectorisation along it)."""
    c = bm.coeff(dim)
    return c // bm.itemsize if c % bm.itemsize == 0 else 10**9


# ---------------------------------------------------------------------------
# what a statement touches


def output_dims(stmt: Compute) -> set[str]:
    return stmt.out.names()


def indexes_output(stmt: Compute, loop: Loop) -> bool:
    names = stmt.out.names()
    return loop.dim in names or loop_var(loop.var) in names


def reduction_loops(stmt: Compute, stack: tuple[Loop, ...]) -> list[Loop]:
    return [lp for lp in stack if not indexes_output(stmt, lp)]


def reads_output(stmt: Compute) -> bool:
    return any(a.buffer == stmt.out.buffer for a in stmt.reads())


# element-wise functions evaluated as a dozen or more instructions (backend/vmath.py)
HEAVY_MATH = frozenset({"exp", "log", "sigmoid", "tanh", "gelu", "erf"})


def expr_size(e) -> int:
    """Operations in an expression (a proxy for instructions per instance)."""
    if isinstance(e, (Load, Const, Acc)):
        return 1
    if isinstance(e, Unary):
        return (12 if e.op in HEAVY_MATH else 1) + expr_size(e.x)
    if isinstance(e, Binary):
        return 1 + expr_size(e.a) + expr_size(e.b)
    return 1


def uses_heavy_math(e) -> bool:
    if e is None or isinstance(e, str):
        return False
    if isinstance(e, Unary):
        return e.op in HEAVY_MATH or uses_heavy_math(e.x)
    if isinstance(e, Binary):
        return uses_heavy_math(e.a) or uses_heavy_math(e.b)
    return False


# ---------------------------------------------------------------------------
# vectorisation (paper §5.1: the innermost loop, when its accesses allow)


@dataclass(frozen=True)
class VectorPlan:
    loop: Loop
    along_output: bool   # True: lanes are output elements; False: lanes are reduction points


def vector_plan(tree: LoopTree, loop: Loop, byte_map=byte_map, integers: bool = False,
                byte_lanes: int = 0) -> VectorPlan | None:
    """How `loop` (a loop whose body is statements only) can be vectorised, or None.

    `byte_map` may be a caching replacement taking (tree, access). `integers`: the code
    generator vectorises integer statements too (see _integer_plan); otherwise only
    floating-point and tensorized (Dot) statements are. `byte_lanes` (when it cannot mask
    8-bit vectors): the lanes of a vector, which a sum over 8-bit operands must fill whole.

    An innermost loop's answer is kept on it, per tree buffers and arguments (as ir._derived
    keeps facts): split_init_post and the walk of its segment both ask."""
    if loop.step != 1 or not loop.body or not all(isinstance(n, Compute) for n in loop.body):
        return None
    buffers = tree.buffers                # what the answer reads of the tree: dtypes and layouts
    kept = loop.__dict__.setdefault("_vector_plans", {})
    hit = kept.get((integers, byte_lanes))
    if hit is not None and hit[0] is buffers:
        return None if hit[1] is None else VectorPlan(loop, hit[1])
    plan = _vector_plan(tree, loop, byte_map, integers, byte_lanes)
    # the plan's direction, not the plan: a plan names its loop, and the loop would hold itself
    kept[(integers, byte_lanes)] = (buffers, None if plan is None else plan.along_output)
    return plan


def _vector_plan(tree: LoopTree, loop: Loop, byte_map, integers: bool, byte_lanes: int) -> VectorPlan | None:
    if len(loop.body) > 1 and any(n.reduce is not None for n in loop.body):
        return None
    if len(loop.body) == 1 and isinstance(loop.body[0].expr, Dot):
        return _dot_plan(tree, loop, loop.body[0], byte_map)
    if integers and all(_integer_statement(tree, s) for s in loop.body):
        return _integer_plan(tree, loop, byte_map, byte_lanes)
    along = None
    for stmt in loop.body:
        out = byte_map(tree, stmt.out)
        if loop_var(loop.var) in stmt.out.names() or any(
            loop_var(loop.var) in a.names() for a in stmt.reads()
        ):
            return None  # loop-offset terms only appear in scoped temps; keep them scalar
        s_out = element_stride(out, loop.dim)
        if s_out == 1:
            this = True
        elif s_out == 0 and stmt.reduce is not None and not reads_output(stmt):
            this = False
        else:
            return None
        if along is not None and along != this:
            return None
        along = this
        for a in stmt.reads():
            if a.zero_pad:
                return None
            s = element_stride(byte_map(tree, a), loop.dim)
            if s not in (0, 1):
                return None
            if tree.buffer(a.buffer).dtype != "float32" and s == 0 and tree.buffer(a.buffer).dtype != "float16":
                return None
        if tree.buffer(stmt.out.buffer).dtype not in _FLOATS and not (stmt.requant and stmt.requant.of_float):
            return None
        # a float statement's integer reads are converted lane by lane (a DequantizeLinear)
        if any(tree.buffer(a.buffer).dtype not in _FLOATS + _CONVERTED for a in stmt.reads()):
            return None
    return VectorPlan(loop, bool(along))


_FLOATS = ("float32", "float16")
_CONVERTED = ("int32", "int16", "int8", "uint8")


def _dot_plan(tree: LoopTree, loop: Loop, stmt: Compute, byte_map) -> VectorPlan | None:
    """A tensorized statement vectorises along its instruction's lanes: int32 outputs one
    after another, each operand's k-byte groups one after another or the same in every lane."""
    k = stmt.expr.k
    if element_stride(byte_map(tree, stmt.out), loop.dim) != 1 or loop_var(loop.var) in stmt.out.names():
        return None
    operands = {id(x.access) for x in (stmt.expr.a, stmt.expr.b)}
    for a in stmt.reads():        # the Dot's operands, and the init's, post's and scale's reads
        if a.zero_pad or loop_var(loop.var) in a.names():
            return None
        if element_stride(byte_map(tree, a), loop.dim) not in ((0, k) if id(a) in operands else (0, 1)):
            return None
    return VectorPlan(loop, True)


# integer element-wise operations every code generator that vectorises integers implements
INTEGER_BINARY = frozenset({"add", "sub", "mul", "max", "min"})
INTEGER_UNARY = frozenset({"relu", "abs", "neg"})
INTEGER_DTYPES = frozenset({"int32", "int16", "int8", "uint8"})
# integers narrower than an int32 lane: widened on load, narrowed on store
NARROW_INTEGERS = frozenset({"int16", "int8", "uint8"})


def _integer_statement(tree: LoopTree, stmt: Compute) -> bool:
    """An integer statement with nothing but element-wise vector operations: 8-bit and int32
    buffers (and a requantization's float32 scale), a plain assignment, or a sum, max or min into
    int32 lanes (a depthwise convolution's taps, a quantized max pool's window), no post-operation."""
    if stmt.reduce not in (None, "add", "max", "min") or stmt.post is not None:
        return False
    if stmt.reduce is not None and not (stmt.init == "identity" or isinstance(stmt.init, (Load, Const))):
        # a max or min that continues from its output (its init stored apart): exact where every
        # value it reads is of the output's type, so that each partial result is one too
        out_dt = tree.buffer(stmt.out.buffer).dtype
        if not (stmt.init is None and stmt.reduce in ("max", "min")
                and all(tree.buffer(b).dtype == out_dt for b in _buffers_of(stmt))):
            return False
    scale = {a.buffer for a in expr_loads(stmt.requant.scale)} if stmt.requant is not None else set()
    if any(tree.buffer(b).dtype not in INTEGER_DTYPES for b in _buffers_of(stmt) - scale):
        return False

    def ok(e) -> bool:
        if isinstance(e, (Load, Const)):
            return True
        if isinstance(e, Binary):
            return e.op in INTEGER_BINARY and ok(e.a) and ok(e.b)
        if isinstance(e, Unary):
            return e.op in INTEGER_UNARY and ok(e.x)
        return False
    return ok(stmt.expr)


def _integer_plan(tree: LoopTree, loop: Loop, byte_map, byte_lanes: int) -> VectorPlan | None:
    """Integer statements vectorise along their outputs in int32 lanes: every access unit-stride
    along the loop (8-bit ones are widened on load and narrowed on store), an int32 read (or a
    requantization's float32 scale) may also be the same in every lane. The copies that stage
    and shift a tensorized kernel's 8-bit operands are such statements, and so is a depthwise
    convolution's sum over its taps. A copy's tail the code generator cannot mask runs as
    scalars; a sum's, held in a register block, cannot: without masks it needs whole vectors."""
    for stmt in loop.body:
        if (stmt.reduce is not None and byte_lanes and tree.dim_size(loop.dim) % byte_lanes
                and any(tree.buffer(b).dtype in NARROW_INTEGERS for b in _buffers_of(stmt))):
            return None
        if element_stride(byte_map(tree, stmt.out), loop.dim) != 1:
            return None
        for a in (stmt.out, *stmt.reads()):
            if a.zero_pad or loop_var(loop.var) in a.names():
                return None
            s = element_stride(byte_map(tree, a), loop.dim)
            if s != 1 and not (s == 0 and tree.buffer(a.buffer).dtype in ("int32", "float32")):
                return None
    return VectorPlan(loop, True)


def dot_kind(stride: int, k: int) -> str:
    """How a tensorized statement's operand is read along its lanes: a vector of k-byte groups
    ("vec") or one group repeated ("bcast")."""
    return {k: "vec", 0: "bcast"}[stride]


def _buffers_of(stmt: Compute) -> set[str]:
    return {stmt.out.buffer} | {a.buffer for a in stmt.reads()}


# ---------------------------------------------------------------------------
# trip counts and the unroll estimate


def trips(range_: int, step: int) -> tuple[int, int]:
    """(full iterations, elements in the partial last one)."""
    return range_ // step, range_ % step


def subtree_size(tree: LoopTree, node, ranges: dict[str, int], lanes: int, plan=vector_plan, size_of=None) -> int:
    """Instructions the node would take fully unrolled (an estimate, in the full-range case).
    `size_of(child, ranges)`, if given, sizes the node's children (a caller that keeps sizes)."""
    if isinstance(node, Compute):
        cost = expr_size(node.expr) + 2
        if node.post is not None:
            cost += expr_size(node.post)
        return cost
    rng = ranges.get(node.dim)
    if rng is None:
        rng = tree.dim_size(node.dim)
    inner = dict(ranges)
    inner[node.dim] = min(node.step, rng)
    if size_of is None:
        body = sum(subtree_size(tree, n, inner, lanes, plan) for n in node.body)
    elif len(node.body) == 1:         # most loops: no generator for one child
        body = size_of(node.body[0], inner)
    else:
        body = sum(size_of(n, inner) for n in node.body)
    n = -(-rng // lanes) if plan(tree, node) is not None else -(-rng // node.step)
    return n * body


# ---------------------------------------------------------------------------
# register blocking (paper §5.1: outermost loop whose output block fits, no spills)


def perfect_statement(loop: Loop) -> Compute | None:
    """The single statement below `loop` when the subtree is one chain of loops."""
    return chain_of(loop)[1]


def chain_below(loop: Loop) -> tuple[Loop, ...]:
    """`loop` and the loops down its first children."""
    return chain_of(loop)[0]


def chain_of(loop: Loop) -> tuple:
    """(chain_below, perfect_statement) of `loop`, kept on it (as ir._derived keeps facts): the
    rewrites and the walk ask for them at every loop of a nest, each a suffix of its parent's."""
    kept = loop.__dict__.get("_chain")
    if kept is None:
        first = loop.body[0] if loop.body else None
        if isinstance(first, Loop):
            below, stmt = chain_of(first)
            kept = ((loop, *below), stmt if len(loop.body) == 1 else None)
        else:
            kept = ((loop,), first if len(loop.body) == 1 else None)
        loop.__dict__["_chain"] = kept
    return kept


def block_footprint(tree: LoopTree, loop: Loop, stmt: Compute, ranges: dict[str, int],
                    lanes: int, limit: int, plan_of=vector_plan) -> int:
    """Accumulator registers the output block under `loop` needs (stops counting past limit)."""
    return footprint_of(block_chain(tree, loop, stmt, plan_of), ranges, tree.dim_size, lanes, limit)


def block_chain(tree: LoopTree, loop: Loop, stmt: Compute, plan_of=vector_plan) -> tuple:
    """What block_footprint reads of the chain of loops under `loop`: per loop, (dim, step,
    whether it indexes the output, whether it is the vectorised loop along the output)."""
    chain = chain_below(loop)
    plan = plan_of(tree, chain[-1])
    along = plan.loop if plan is not None and plan.along_output else None
    return tuple((lp.dim, lp.step, indexes_output(stmt, lp), lp is along) for lp in chain)


def footprint_of(chain: tuple, ranges: dict[str, int], dim_size, lanes: int, limit: int) -> int:
    """block_footprint from the loops' block_chain (a caller may keep it) and the ranges here."""
    count = 1
    narrowed: dict[str, int] = {}        # the chain's dimensions, as its loops narrow them
    for dim, step, indexes, along in chain:
        r = narrowed.get(dim)
        if r is None:
            r = ranges.get(dim)
            if r is None:
                r = dim_size(dim)
        narrowed[dim] = min(step, r)
        if not indexes:
            continue
        count *= -(-r // lanes) if along else -(-r // step)
        if count > limit:
            return count
    return count
