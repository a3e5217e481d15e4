"""Hypothesis strategies that draw random loop trees together with a numpy oracle.

    from strategies import random_case, check_case
    @given(random_case())
    def test_backend(case):
        inputs = case.make_inputs(np.random.default_rng(0))
        outputs = my_kernel(case.tree).run(*inputs)
        check_case(case, inputs, outputs)

Each Case holds a verified-by-construction LoopTree, `make_inputs(rng)` (arrays in the order
of tree.inputs), `reference(inputs)` (the expected outputs, computed with numpy / einsum
directly from the inputs, never through a loop tree) and tolerances.  Outputs start zeroed
(as KernelBase.run allocates them), which the references of accumulating cases assume.

Families: contractions (matmul-like, add/max/min reductions, init identity/bias/none,
post ops, int8 -> int32 and fp16 storage), element-wise expression chains with
broadcasting, 1-D and 2-D convolutions (stride, dilation, zero_pad), channels-last
depthwise convolutions, transposes and padded copies, and producer/consumer pairs through a
temp (full-size, or block-sized under a shared outer loop and indexed `m - @m0`).  Schedules
split every dimension at random steps (dividing the size or not, even larger than it) and
interleave the loops at random.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from hypothesis import strategies as st

from loopstack.looptree.builders import access, depthwise_conv2d_tree, make_tree, nest
from loopstack.looptree.ir import Acc, Affine, Binary, Buffer, Compute, Const, Load, Unary

__all__ = [
    "Case", "check_case", "random_case", "sizes", "schedules",
    "contraction_cases", "reduction_cases", "elementwise_cases", "conv_cases",
    "copy_cases", "staged_cases", "depthwise_cases", "ref_unary",
]


@dataclass
class Case:
    tree: object
    make_inputs: Callable[[np.random.Generator], tuple]
    reference: Callable[[tuple], tuple]
    rtol: float = 1e-4
    atol: float = 1e-4
    name: str = ""
    meta: dict = field(default_factory=dict)

    def __repr__(self) -> str:  # hypothesis prints this for a failing example
        return f"Case({self.name})\n{self.tree}"


def check_case(case: Case, inputs, outputs) -> None:
    """Assert that `outputs` match the reference within the case's tolerance."""
    expected = case.reference(tuple(inputs))
    assert len(outputs) == len(expected)
    for got, want, buf in zip(outputs, expected, case.tree.outputs):
        want = np.asarray(want)
        if np.issubdtype(got.dtype, np.integer):
            np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=f"output {buf.name}\n{case.tree}")
        else:
            scale = 1.0 + float(np.max(np.abs(want), initial=0.0))
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=case.rtol, atol=case.atol * scale,
                                       err_msg=f"output {buf.name}\n{case.tree}")


# ---------------------------------------------------------------------------
# building blocks

SIZES = (1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 17, 24)


def sizes(max_size: int = 24):
    return st.sampled_from([s for s in SIZES if s <= max_size]) | st.integers(1, max_size)


def _steps(size: int):
    """Steps of the loops over one dimension, outermost first, ending in 1."""
    outer = st.lists(st.integers(2, size + 3) | st.sampled_from([2, 4, 8, 16]), max_size=2)
    return outer.map(lambda xs: [*xs, 1])


@st.composite
def schedules(draw, dims: dict[str, int], fixed_outer: tuple = ()):
    """A random order [(dim, step), ...]: each dim split at random steps, loops interleaved
    at random (each dim's loops keep their outer-to-inner order), innermost step 1."""
    per = {d: draw(_steps(s)) for d, s in dims.items()}
    tokens = [d for d in dims for _ in per[d]]
    perm = draw(st.permutations(tokens))
    used = {d: 0 for d in dims}
    order = list(fixed_outer)
    for d in perm:
        order.append((d, per[d][used[d]]))
        used[d] += 1
    return order


def _floats(shape, dtype="float32"):
    return lambda rng: rng.standard_normal(shape).astype(dtype)


def _ints(shape, dtype="int8"):
    lo = 0 if dtype == "uint8" else -8
    return lambda rng: rng.integers(lo, 8, shape).astype(dtype)


_TOL = {"float32": (1e-4, 1e-5), "float16": (2e-2, 2e-2), "int32": (0, 0), "int8": (0, 0), "uint8": (0, 0)}


def ref_unary(op: str, x):
    """Float64 references of the unary ops (gelu is the tanh approximation)."""
    return {
        "neg": lambda: -x, "abs": lambda: np.abs(x), "exp": lambda: np.exp(x), "log": lambda: np.log(x),
        "sqrt": lambda: np.sqrt(x), "reciprocal": lambda: 1.0 / x, "relu": lambda: np.maximum(x, 0),
        "sigmoid": lambda: 1.0 / (1.0 + np.exp(-x)), "tanh": lambda: np.tanh(x),
        "gelu": lambda: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    }[op]()


_REF_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
               "max": np.maximum, "min": np.minimum}
_REF_REDUCE = {"add": np.sum, "mul": np.prod, "max": np.max, "min": np.min}


def _ref_expr(e, env: dict, acc=None):
    """Evaluate an expression whose loads are whole arrays already aligned by the caller."""
    if isinstance(e, Load):
        return env[e.access.buffer]
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Acc):
        return acc
    if isinstance(e, Unary):
        return ref_unary(e.op, _ref_expr(e.x, env, acc))
    return _REF_BINARY[e.op](_ref_expr(e.a, env, acc), _ref_expr(e.b, env, acc))


# post ops that keep values tame: (expr builder, needs a per-row vector "s")
_POSTS = {
    "none": None,
    "relu": lambda: Unary("relu", Acc()),
    "tanh": lambda: Unary("tanh", Acc()),
    "add_const": lambda: Binary("add", Acc(), Const(1.5)),
    "scale_row": lambda: Binary("mul", Acc(), Load(access("s", "m"))),
}


# ---------------------------------------------------------------------------
# families


@st.composite
def contraction_cases(draw):
    """C[m, n] <op>= A[m, k] (x) B[k, n] with random splits, orders, init, post and dtype."""
    M, N, K = draw(sizes(17)), draw(sizes(17)), draw(sizes(17))
    dtype = draw(st.sampled_from(["float32", "float32", "float32", "float16", "int8"]))
    is_int = dtype == "int8"
    red = "add" if is_int else draw(st.sampled_from(["add", "add", "max", "min"]))
    comb = "mul" if red == "add" else draw(st.sampled_from(["mul", "add"]))
    a_t = draw(st.booleans())          # A stored as [k, m]
    init_kind = draw(st.sampled_from(["identity", "identity", "bias", "none"]))
    post_kind = "none" if is_int else draw(st.sampled_from(list(_POSTS)))
    out_dtype = "int32" if is_int else dtype
    bufs = [Buffer("A", dtype, (K, M) if a_t else (M, K), "input"), Buffer("B", dtype, (K, N), "input")]
    gens = [(_ints if is_int else _floats)((K, M) if a_t else (M, K), dtype),
            (_ints if is_int else _floats)((K, N), dtype)]
    init = {"identity": "identity", "none": None, "bias": Load(access("bias", "n"))}[init_kind]
    if init_kind == "bias":
        bufs.append(Buffer("bias", out_dtype, (N,), "input"))
        gens.append((_ints if is_int else _floats)((N,), out_dtype))
    post = _POSTS[post_kind]() if _POSTS[post_kind] else None
    if post_kind == "scale_row":
        bufs.append(Buffer("s", out_dtype, (M,), "input"))
        gens.append(_floats((M,), out_dtype))
    bufs.append(Buffer("C", out_dtype, (M, N), "output"))
    a_acc = access("A", "k", "m") if a_t else access("A", "m", "k")
    stmt = Compute("C", access("C", "m", "n"), Binary(comb, Load(a_acc), Load(access("B", "k", "n"))),
                   reduce=red, init=init, post=post)
    order = draw(schedules({"m": M, "n": N, "k": K}))
    tree = make_tree(bufs, {"m": M, "n": N, "k": K}, nest(order, stmt))
    names = [b.name for b in bufs if b.kind == "input"]

    def reference(inputs):
        env = {n: np.asarray(x, np.int64 if is_int else np.float64) for n, x in zip(names, inputs)}
        A = env["A"].T if a_t else env["A"]
        if red == "add" and comb == "mul":
            acc = A @ env["B"]
        else:
            pair = _REF_BINARY[comb](A[:, :, None], env["B"][None, :, :])
            acc = _REF_REDUCE[red](pair, axis=1)
        if init_kind == "bias":
            acc = _REF_BINARY[red](acc, env["bias"][None, :])
        elif init_kind == "none":
            acc = _REF_BINARY[red](acc, 0)       # outputs start zeroed
        if post is not None:
            acc = _ref_expr(post, {"s": env.get("s", np.zeros(1))[:, None]}, acc)
        return (acc,)

    rtol, atol = _TOL[dtype]
    return Case(tree, lambda rng: tuple(g(rng) for g in gens), reference, rtol, atol * max(K, 1),
                name=f"contraction {dtype} {red}/{comb} init={init_kind} post={post_kind}")


@st.composite
def reduction_cases(draw):
    """Y[i] <op>= f(X[i, j]) or X[j, i]: a single-input reduction with a unary op inside."""
    I, J = draw(sizes(24)), draw(sizes(24))
    red = draw(st.sampled_from(["add", "max", "min", "mul"]))
    inner = draw(st.sampled_from([None, "abs", "tanh", "neg"]))
    if red == "mul":
        inner = "sigmoid"       # keeps products in (0, 1)
    trans = draw(st.booleans())
    xacc = access("X", "j", "i") if trans else access("X", "i", "j")
    e = Load(xacc) if inner is None else Unary(inner, Load(xacc))
    stmt = Compute("Y", access("Y", "i"), e, reduce=red, init="identity")
    bufs = [Buffer("X", "float32", (J, I) if trans else (I, J), "input"), Buffer("Y", "float32", (I,), "output")]
    order = draw(schedules({"i": I, "j": J}))
    tree = make_tree(bufs, {"i": I, "j": J}, nest(order, stmt))

    def reference(inputs):
        X = np.asarray(inputs[0], np.float64)
        X = X.T if trans else X
        v = X if inner is None else ref_unary(inner, X)
        return (_REF_REDUCE[red](v, axis=1),)

    return Case(tree, lambda rng: (_floats((J, I) if trans else (I, J))(rng),), reference, 1e-4, 1e-5 * J,
                name=f"reduce {red} of {inner}")


def _expr_strategy():
    """Element-wise expressions over A[i, j], B[i, j] and a broadcast row R[j]."""
    leaf = st.sampled_from([Load(access("A", "i", "j")), Load(access("B", "i", "j")),
                            Load(access("R", "j")), Const(0.5), Const(-2.0)])
    safe_unary = st.sampled_from(["neg", "abs", "relu", "tanh", "sigmoid", "gelu", "exp_tanh",
                                  "log1p_abs", "sqrt_abs", "recip1p_abs"])

    def wrap(op, x):
        if op == "exp_tanh":
            return Unary("exp", Unary("tanh", x))
        if op == "log1p_abs":
            return Unary("log", Binary("add", Unary("abs", x), Const(1.0)))
        if op == "sqrt_abs":
            return Unary("sqrt", Unary("abs", x))
        if op == "recip1p_abs":
            return Unary("reciprocal", Binary("add", Unary("abs", x), Const(1.0)))
        return Unary(op, x)

    def extend(children):
        return st.one_of(
            st.tuples(safe_unary, children).map(lambda t: wrap(*t)),
            st.tuples(st.sampled_from(["add", "sub", "mul", "max", "min"]), children, children)
            .map(lambda t: Binary(*t)),
            st.tuples(children, children).map(
                lambda t: Binary("div", t[0], Binary("add", Unary("abs", t[1]), Const(1.0)))),
        )

    return st.recursive(leaf, extend, max_leaves=6)


@st.composite
def elementwise_cases(draw):
    I, J = draw(sizes(24)), draw(sizes(24))
    dtype = draw(st.sampled_from(["float32", "float32", "float16"]))
    e = draw(_expr_strategy())
    bufs = [Buffer("A", dtype, (I, J), "input"), Buffer("B", dtype, (I, J), "input"),
            Buffer("R", dtype, (J,), "input"), Buffer("Y", dtype, (I, J), "output")]
    stmt = Compute("Y", access("Y", "i", "j"), e)
    order = draw(schedules({"i": I, "j": J}))
    tree = make_tree(bufs, {"i": I, "j": J}, nest(order, stmt))

    def reference(inputs):
        A, B, R = (np.asarray(x, np.float64) for x in inputs)
        return (np.broadcast_to(_ref_expr(e, {"A": A, "B": B, "R": R[None, :]}), (I, J)),)

    rtol, atol = _TOL[dtype]
    gens = [_floats((I, J), dtype), _floats((I, J), dtype), _floats((J,), dtype)]
    return Case(tree, lambda rng: tuple(g(rng) for g in gens), reference, rtol * 4, atol * 4,
                name=f"elementwise {dtype} {e}")


@st.composite
def conv_cases(draw):
    """1-D (Y[o, h] += X[c, s*h + d*r - p] * W[o, c, r]) or 2-D single-channel convolution."""
    two_d = draw(st.booleans())
    stride, dil = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    R = draw(st.integers(1, 4))
    pad = draw(st.integers(0, R))
    H = draw(st.integers(max(1, dil * (R - 1) + 1 - 2 * pad), 20))
    OH = (H + 2 * pad - dil * (R - 1) - 1) // stride + 1
    C, O = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    row = Affine.of(("h", stride), ("r", dil), const=-pad)
    if not two_d:
        dims = {"o": O, "c": C, "h": OH, "r": R}
        xs, ws, ys = (C, H), (O, C, R), (O, OH)
        xa, wa, ya = access("X", "c", row, zero_pad=pad > 0), access("W", "o", "c", "r"), access("Y", "o", "h")
    else:
        W_ = draw(st.integers(max(1, dil * (R - 1) + 1 - 2 * pad), 12))
        OW = (W_ + 2 * pad - dil * (R - 1) - 1) // stride + 1
        col = Affine.of(("w", stride), ("s", dil), const=-pad)
        dims = {"o": O, "c": C, "h": OH, "w": OW, "r": R, "s": R}
        xs, ws, ys = (C, H, W_), (O, C, R, R), (O, OH, OW)
        xa = access("X", "c", row, col, zero_pad=pad > 0)
        wa, ya = access("W", "o", "c", "r", "s"), access("Y", "o", "h", "w")
    stmt = Compute("Y", ya, Binary("mul", Load(xa), Load(wa)), reduce="add", init="identity")
    bufs = [Buffer("X", "float32", xs, "input"), Buffer("W", "float32", ws, "input"),
            Buffer("Y", "float32", ys, "output")]
    order = draw(schedules(dims))
    tree = make_tree(bufs, dims, nest(order, stmt))

    def reference(inputs):
        X, Wt = (np.asarray(x, np.float64) for x in inputs)
        X = np.pad(X, [(0, 0)] + [(pad, pad)] * (X.ndim - 1))
        rows = stride * np.arange(OH)[:, None] + dil * np.arange(R)[None, :]      # [OH, R]
        if not two_d:
            return (np.einsum("chr,ocr->oh", X[:, rows], Wt),)
        cols = stride * np.arange(ys[2])[:, None] + dil * np.arange(R)[None, :]   # [OW, S]
        patches = X[:, rows[:, :, None, None], cols[None, None, :, :]]           # [C, OH, R, OW, S]
        return (np.einsum("chrws,ocrs->ohw", patches, Wt),)

    return Case(tree, lambda rng: (_floats(xs)(rng), _floats(ws)(rng)), reference, 1e-4, 1e-5 * C * R * R,
                name=f"conv{'2d' if two_d else '1d'} stride={stride} dil={dil} pad={pad}")


@st.composite
def depthwise_cases(draw):
    """Channels-last depthwise 2-D convolution Y[oh, ow, c] += pad X[s*oh + r - p, s*ow + q - p, c]
    * W[r, q, c] (the MobileNet layer), optionally with a relu: odd and even sizes, stride 1 to 3,
    padding 0 to the window size (even wider than the image)."""
    stride = draw(st.integers(1, 3))
    R = draw(st.integers(1, 5))
    pad = draw(st.integers(0, R))
    H = draw(st.integers(max(1, R - 2 * pad), 13))
    W_ = draw(st.integers(max(1, R - 2 * pad), 13))
    C = draw(st.integers(1, 20))
    relu = draw(st.booleans())
    tree = depthwise_conv2d_tree(C, H, W_, R, R, stride=stride, padding=pad, post="relu" if relu else None)
    tree = make_tree(tree.buffers, tree.dims, nest(draw(schedules(dict(tree.dims))), _statement(tree)))

    def reference(inputs):
        X, Wt = (np.asarray(x, np.float64) for x in inputs)
        Xp = np.pad(X, ((pad, pad), (pad, pad), (0, 0)))
        OH, OW = (H + 2 * pad - R) // stride + 1, (W_ + 2 * pad - R) // stride + 1
        Y = np.zeros((OH, OW, C))
        for r in range(R):
            for q in range(R):
                Y += Xp[r: r + stride * (OH - 1) + 1: stride, q: q + stride * (OW - 1) + 1: stride] * Wt[r, q]
        return (np.maximum(Y, 0) if relu else Y,)

    return Case(tree, lambda rng: (_floats((H, W_, C))(rng), _floats((R, R, C))(rng)), reference, 1e-4,
                1e-5 * R * R, name=f"depthwise {H}x{W_}x{C} {R}x{R} stride={stride} pad={pad} relu={relu}")


def _statement(tree):
    """The one statement of a single-nest tree."""
    node = tree.body[0]
    while not isinstance(node, Compute):
        node = node.body[0]
    return node


@st.composite
def copy_cases(draw):
    """Transposes of 2-D/3-D tensors, and a zero-padded copy Y[h, w] = pad X[h - p, w - q]."""
    kind = draw(st.sampled_from(["transpose", "pad"]))
    dtype = draw(st.sampled_from(["float32", "float16", "int8", "int32"]))
    gen = _floats if dtype.startswith("float") else _ints
    if kind == "transpose":
        nd = draw(st.integers(2, 3))
        shape = tuple(draw(sizes(12)) for _ in range(nd))
        perm = draw(st.permutations(range(nd)))
        names = "ijl"[:nd]
        stmt = Compute("Y", access("Y", *(names[p] for p in perm)), Load(access("X", *names)))
        bufs = [Buffer("X", dtype, shape, "input"), Buffer("Y", dtype, tuple(shape[p] for p in perm), "output")]
        dims = dict(zip(names, shape))
        tree = make_tree(bufs, dims, nest(draw(schedules(dims)), stmt))
        return Case(tree, lambda rng: (gen(shape, dtype)(rng),), lambda ins: (np.transpose(ins[0], perm),),
                    0, 0, name=f"transpose {perm} {dtype}")
    H, W = draw(sizes(12)), draw(sizes(12))
    p, q, p2, q2 = (draw(st.integers(0, 3)) for _ in range(4))
    dims = {"h": H + p + p2, "w": W + q + q2}
    src = access("X", Affine.of("h", const=-p), Affine.of("w", const=-q), zero_pad=True)
    stmt = Compute("Y", access("Y", "h", "w"), Load(src))
    bufs = [Buffer("X", dtype, (H, W), "input"), Buffer("Y", dtype, (dims["h"], dims["w"]), "output")]
    tree = make_tree(bufs, dims, nest(draw(schedules(dims)), stmt))
    return Case(tree, lambda rng: (gen((H, W), dtype)(rng),),
                lambda ins: (np.pad(ins[0], ((p, p2), (q, q2))),), 0, 0, name=f"pad copy {dtype}")


@st.composite
def staged_cases(draw):
    """T = f(A) through a temp, then C = T @ B.  Either two separate nests over a full-size T,
    or both nests under a shared loop m0 with a block-sized T indexed [m - @m0, k]."""
    M, N, K = draw(sizes(16)), draw(sizes(16)), draw(sizes(16))
    f = draw(st.sampled_from(["relu", "tanh", "neg", "abs"]))
    scoped = draw(st.booleans())
    post = draw(st.sampled_from([None, "relu"]))
    dims = {"m": M, "n": N, "k": K}
    if scoped:
        bm = draw(st.integers(1, M + 3))
        tidx = (Affine.of("m", ("@m0", -1)), Affine.of("k"))
        tshape = (min(bm, M), K)
    else:
        tidx = (Affine.of("m"), Affine.of("k"))
        tshape = (M, K)
    prod = Compute("T", access("T", *tidx), Unary(f, Load(access("A", "m", "k"))))
    cons = Compute("C", access("C", "m", "n"), Binary("mul", Load(access("T", *tidx)), Load(access("B", "k", "n"))),
                   reduce="add", init="identity", post=None if post is None else Unary(post, Acc()))
    bufs = [Buffer("A", "float32", (M, K), "input"), Buffer("B", "float32", (K, N), "input"),
            Buffer("T", "float32", tshape, "temp"), Buffer("C", "float32", (M, N), "output")]
    if scoped:
        p_order = draw(schedules({"m": M, "k": K}))
        c_order = draw(schedules({"m": M, "n": N, "k": K}))
        # inside m0 the other loops over m see at most bm; their vars must not clash with m0
        p_nest = nest(p_order, prod, tag="p")
        c_nest = nest(c_order, cons, tag="c")
        body = nest([("m", bm)], (p_nest, c_nest), names=["m0"])
    else:
        body = (nest(draw(schedules({"m": M, "k": K})), prod, tag="p"),
                nest(draw(schedules(dims)), cons, tag="c"))
    tree = make_tree(bufs, dims, body)

    def reference(inputs):
        A, B = (np.asarray(x, np.float64) for x in inputs)
        C = ref_unary(f, A) @ B
        return (C if post is None else ref_unary(post, C),)

    return Case(tree, lambda rng: (_floats((M, K))(rng), _floats((K, N))(rng)), reference, 1e-4, 1e-5 * K,
                name=f"staged scoped={scoped} f={f}")


def random_case():
    """Any of the families above."""
    return st.one_of(contraction_cases(), reduction_cases(), elementwise_cases(), conv_cases(),
                     depthwise_cases(), copy_cases(), staged_cases())
