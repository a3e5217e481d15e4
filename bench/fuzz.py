"""Robustness at scale: random programs x random schedules, every case in a child process.

    python bench/fuzz.py --n 10000 --seed 0 [--jobs 2] [--timeout 60] [--json FILE]
    python bench/fuzz.py --case 1234 --seed 0        # one case, in this process, verbosely

A case is a random program (element-wise chains, reductions, matmuls with bias and
activations, convolutions with stride/dilation/padding written as index views, pooling,
concatenations, softmax, conversions (astype), mixes of these) and a random sequence of
schedule mutations, each either applied or refused with a ScheduleError.  The tree that
results is compiled for the interpreter and for every x86 target this CPU runs, each kernel is
compared with numpy, and each x86 kernel runs twice more on arrays that end against (and
start right after) a PROT_NONE guard page, so that an out-of-bounds read or write faults
instead of touching a neighbour.

Each case runs in a forked child, so a fault is a `crash` and a kernel that never returns a
`hang` (killed after --timeout); neither stops the run.  The summary line counts:

    wrong        a result that differs from numpy (or the interpreter from numpy)
    crashes      a child killed by a signal (a fault in generated code)
    hangs        a child past the timeout
    exceptions   anything raised that is not a loopstack error (a bug, not bad input)
    late         a loopstack error at compile or run time of a tree the mutations accepted
                 (a schedule the API accepts must compile)

`--case I` replays case I of a seed in-process with its program, actions and tree printed.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import mmap
import os
import random
import select
import signal
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import loopstack as lt  # noqa: E402
from loopstack.frontend import run as _run  # noqa: E402
from loopstack.frontend.tree import default_schedule  # noqa: E402

# ----------------------------------------------------------------------------- random programs
# A program is (tensor, numpy reference); every builder draws from one random.Random.

UNARY = {
    "relu": (lt.nn.relu, lambda x: np.maximum(x, 0)),
    "sigmoid": (lt.nn.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (lt.nn.tanh, np.tanh),
    "neg": (lambda x: -x, lambda x: -x),
    "abs": (lt.abs, np.abs),
    "exp": (lambda x: lt.exp(x.min(3.0)), lambda x: np.exp(np.minimum(x, 3.0))),
    "sqrt": (lambda x: lt.sqrt(lt.abs(x) + 1.0), lambda x: np.sqrt(np.abs(x) + 1.0)),
    "log": (lambda x: lt.log(lt.abs(x) + 1.0), lambda x: np.log(np.abs(x) + 1.0)),
    "recip": (lambda x: lt.reciprocal(lt.abs(x) + 1.0), lambda x: 1 / (np.abs(x) + 1.0)),
    "gelu": (lt.nn.gelu, lambda x: 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))),
    "scale": (lambda x: x * 0.5 + 1.0, lambda x: x * 0.5 + 1.0),
    "erf": (lt.erf, lambda x: np.asarray(np.frompyfunc(math.erf, 1, 1)(x), np.float64).astype(np.asarray(x).dtype)),
}
BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "max": (lambda a, b: a.max(b), np.maximum),
    "min": (lambda a, b: a.min(b), np.minimum),
    "div": (lambda a, b: a / (lt.abs(b) + 1.0), lambda a, b: a / (np.abs(b) + 1.0)),
}
ACTIVATIONS = ("relu", "sigmoid", "tanh", "gelu", None)


class Gen:
    def __init__(self, rnd: random.Random):
        self.r = rnd
        self.np = np.random.default_rng(rnd.randrange(2 ** 32))

    def size(self, lo=1, hi=13):
        return self.r.choice([self.r.randint(lo, hi), self.r.randint(lo, hi), self.r.choice([16, 17, 24, 31])])

    def array(self, *shape):
        return self.np.standard_normal(shape).astype(np.float32)

    def unary(self, t, ref):
        name = self.r.choice(list(UNARY))
        f, g = UNARY[name]
        return f(t), g(ref)


def eltwise(G: Gen):
    """A chain of unary and broadcasting binary ops over [i, j] and [j] inputs."""
    s = lt.SymbolGenerator()
    m, n = G.size(), G.size()
    x = G.array(m, n)
    T, R = lt.Tensor(x).to(s.i, s.j), x
    for _ in range(G.r.randint(1, 4)):
        if G.r.random() < 0.5:
            T, R = G.unary(T, R)
        else:
            f, g = BINARY[G.r.choice(list(BINARY))]
            kind = G.r.choice(["row", "full", "const"])
            if kind == "row":
                y = G.array(n)
                T, R = f(T, lt.Tensor(y).to(s.j)), g(R, y)
            elif kind == "full":
                y = G.array(m, n)
                T, R = f(T, lt.Tensor(y).to(s.i, s.j)), g(R, y)
            else:
                c = round(G.r.uniform(-2, 2), 2)
                T, R = f(T, c), g(R, np.float32(c))
    return T, R


def reduction(G: Gen):
    """sum / max / min over one or two of three dimensions of an element-wise expression."""
    s = lt.SymbolGenerator()
    a, b, c = G.size(), G.size(), G.size(1, 6)
    x = G.array(a, b, c)
    T, R = lt.Tensor(x).to(s.i, s.j, s.k), x
    if G.r.random() < 0.5:
        T, R = G.unary(T, R)
    axes = G.r.choice([[1], [2], [0], [1, 2]])
    syms = [(s.i, s.j, s.k)[a_] for a_ in axes]
    kind = G.r.choice(["sum", "max", "min"])
    T = {"sum": T.sum, "max": T.max_reduce, "min": T.min_reduce}[kind](*syms)
    R = {"sum": np.sum, "max": np.max, "min": np.min}[kind](R, axis=tuple(axes))
    if G.r.random() < 0.4:
        T, R = G.unary(T, R)
    return T, R


def matmul(G: Gen):
    """A matmul, B as [k, n] or transposed [n, k], with bias and an activation."""
    s = lt.SymbolGenerator()
    m, k, n = G.size(), G.size(1, 20), G.size()
    a = G.array(m, k)
    A = lt.Tensor(a).to(s.m, s.k)
    if G.r.random() < 0.3:
        b = G.array(n, k)
        B, bref = lt.Tensor(b).to(s.n, s.k), b.T
    else:
        b = G.array(k, n)
        B, bref = lt.Tensor(b).to(s.k, s.n), b
    T, R = (A * B).sum(s.k), a @ bref
    if G.r.random() < 0.6:
        bias = G.array(n)
        T, R = T + lt.Tensor(bias).to(s.n), R + bias
    act = G.r.choice(ACTIVATIONS)
    if act:
        f, g = UNARY[act]
        T, R = f(T), g(R)
    return T, R


def mlp(G: Gen):
    """Two dense layers: relu(x W1 + b1) W2."""
    s = lt.SymbolGenerator()
    b, i, h, o = G.size(1, 6), G.size(), G.size(), G.size()
    x, w1, b1, w2 = G.array(b, i), G.array(i, h), G.array(h), G.array(h, o)
    H = lt.nn.relu((lt.Tensor(x).to(s.b, s.i) * lt.Tensor(w1).to(s.i, s.h)).sum(s.i) + lt.Tensor(b1).to(s.h))
    T = (H * lt.Tensor(w2).to(s.h, s.o)).sum(s.h)
    return T, np.maximum(x @ w1 + b1, 0) @ w2


def _conv_ref(x, w, stride, dil, pad, depthwise):
    """x [c, h, w], w [o, c, kh, kw] (depthwise: [c, kh, kw]) -> [o|c, ho, wo]."""
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[-2:]
    ho = (xp.shape[1] - dil * (kh - 1) - 1) // stride + 1
    wo = (xp.shape[2] - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((w.shape[0], ho, wo), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dil:i * dil + stride * (ho - 1) + 1:stride, j * dil:j * dil + stride * (wo - 1) + 1:stride]
            if depthwise:
                out += w[:, i, j][:, None, None] * patch
            else:
                out += np.einsum("oc,chw->ohw", w[:, :, i, j], patch)
    return out.astype(np.float32)


def conv(G: Gen):
    """A 2-D convolution written as an index view: X[c, s*ho + d*kh, s*wo + d*kw]."""
    s = lt.SymbolGenerator()
    c, o = G.size(1, 5), G.size(1, 9)
    kh, kw = G.r.randint(1, 3), G.r.randint(1, 3)
    stride, dil, pad = G.r.randint(1, 2), G.r.randint(1, 2), G.r.randint(0, 1)
    depthwise = G.r.random() < 0.3
    h = G.r.randint(max(1, dil * (kh - 1) + 1 - 2 * pad), 12)
    wd = G.r.randint(max(1, dil * (kw - 1) + 1 - 2 * pad), 12)
    x = G.array(c, h, wd)
    X = lt.Tensor(x).to(s.c, s.h, s.w)
    if pad:
        X = lt.nn.pad(X, (s.h, pad), (s.w, pad))
    Xw = X[s.c, stride * s.ho + dil * s.kh, stride * s.wo + dil * s.kw]
    if depthwise:
        w = G.array(c, kh, kw)
        T = (Xw * lt.Tensor(w).to(s.c, s.kh, s.kw)).sum(s.kh, s.kw)
    else:
        w = G.array(o, c, kh, kw)
        T = (Xw * lt.Tensor(w).to(s.o, s.c, s.kh, s.kw)).sum(s.c, s.kh, s.kw).transpose(s.o, s.ho, s.wo)
    R = _conv_ref(x, w, stride, dil, pad, depthwise)
    if G.r.random() < 0.4:
        T, R = G.unary(T, R)
    return T, R


def conv1d(G: Gen):
    """A 1-D convolution over [n] with stride and dilation, channels last."""
    s = lt.SymbolGenerator()
    k, stride, dil = G.r.randint(1, 4), G.r.randint(1, 3), G.r.randint(1, 2)
    n = G.r.randint(dil * (k - 1) + 1, 30)
    c = G.size(1, 8)
    x, w = G.array(n, c), G.array(k, c)
    T = (lt.Tensor(x)[stride * s.no + dil * s.kk, s.c] * lt.Tensor(w).to(s.kk, s.c)).sum(s.kk)
    no = (n - dil * (k - 1) - 1) // stride + 1
    R = sum(w[i] * x[i * dil:i * dil + stride * (no - 1) + 1:stride] for i in range(k))
    return T, R.astype(np.float32)


def pool(G: Gen):
    """Max pooling over [h, w] with window symbols and a stride."""
    s = lt.SymbolGenerator()
    c, k, stride = G.size(1, 6), G.r.randint(1, 3), G.r.randint(1, 2)
    h, w = G.r.randint(k, 12), G.r.randint(k, 12)
    x = G.array(c, h, w)
    X = lt.Tensor(x).to(s.c, s.h, s.w)
    if G.r.random() < 0.5:
        T = lt.nn.maxpool(X, [s.h, s.w], k, stride)            # loop_tool's C++ spelling
    else:                                                       # window symbols sized by constraints
        X = X.to(s.c, s.h, s.w, constraints=[(lt.Size(s.kh), lt.Expr(k)), (lt.Size(s.kw), lt.Expr(k))])
        T = lt.nn.maxpool(X, [s.h, s.w], [s.kh, s.kw], stride)
    ho, wo = (h - k) // stride + 1, (w - k) // stride + 1
    R = np.full((c, ho, wo), -np.inf, np.float32)
    for i in range(k):
        for j in range(k):
            R = np.maximum(R, x[:, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride])
    return T, R


def concat(G: Gen):
    """Two tensors joined along their first dimension, then an element-wise op."""
    s = lt.SymbolGenerator()
    a, b, n = G.size(), G.size(), G.size()
    x, y = G.array(a, n), G.array(b, n)
    T, R = lt.Tensor(x).to(s.i, s.n) | lt.Tensor(y).to(s.j, s.n), np.concatenate([x, y])
    if G.r.random() < 0.6:
        T, R = G.unary(T, R)
    return T, R


def softmax(G: Gen):
    s = lt.SymbolGenerator()
    x = G.array(G.size(), G.size())
    e = np.exp(x - x.max(1, keepdims=True))
    return lt.nn.softmax(lt.Tensor(x).to(s.b, s.o), s.o), e / e.sum(1, keepdims=True)


def mix(G: Gen):
    """A matmul whose result feeds a reduction or a softmax over its columns."""
    s = lt.SymbolGenerator()
    m, k, n = G.size(), G.size(), G.size()
    a, b = G.array(m, k), G.array(k, n)
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    R = a @ b
    if G.r.random() < 0.5:
        e = np.exp(R - R.max(1, keepdims=True))
        return lt.nn.softmax(C, s.n), e / e.sum(1, keepdims=True)
    C, R = G.unary(C, R)
    return C.sum(s.n), R.sum(1)


def einstein(G: Gen):
    """The paper's Einstein form: C[m, n] = A[m, k] * B[k, n] (k summed), or lt.einsum, with the
    output written transposed."""
    s = lt.SymbolGenerator()
    m, k, n = G.size(), G.size(), G.size()
    a, b = G.array(m, k), G.array(k, n)
    A, B = lt.Tensor(a), lt.Tensor(b)
    if G.r.random() < 0.5:
        C = lt.Tensor(s.n, s.m)
        C[s.n, s.m] = A[s.m, s.k] * B[s.k, s.n]
        return C, (a @ b).T
    return lt.einsum("mk,kn->nm", A, B), (a @ b).T


def cast(G: Gen):
    """astype, as numpy converts: a float16 matmul's float32 sums, float32 values rounded to
    float16 inside a chain, 8-bit integers to float (scaled), an int8 matmul's int32 sums (plus
    an int32 bias, relu) as float32."""
    s = lt.SymbolGenerator()
    m, n, k = G.size(), G.size(), G.size()
    pick = G.r.randrange(4)
    if pick == 0:
        a, b = G.array(m, k).astype(np.float16), G.array(k, n).astype(np.float16)
        T = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k).astype("float32")
        return T, a.astype(np.float32) @ b.astype(np.float32)
    if pick == 1:
        x = G.array(m, n)
        T = lt.nn.relu(lt.Tensor(x).to(s.m, s.n).astype("float16") * 2.0 + 0.5)
        return T, np.maximum(x.astype(np.float16).astype(np.float32) * 2.0 + 0.5, 0)
    dt = G.r.choice(["int8", "uint8"])
    q = G.np.integers(-128 if dt == "int8" else 0, 128 if dt == "int8" else 256, (m, k)).astype(dt)
    if pick == 2:
        T = lt.Tensor(q).to(s.m, s.k).astype("float32") * 0.25
        return T, q.astype(np.float32) * 0.25
    w = G.np.integers(-128, 128, (k, n)).astype(np.int8)
    T = (lt.Tensor(q).to(s.m, s.k) * lt.Tensor(w).to(s.k, s.n)).sum(s.k)
    R = q.astype(np.int64) @ w.astype(np.int64)
    if G.r.random() < 0.5:              # an int32 bias and relu, in integers before the cast
        v = G.np.integers(-5000, 5000, n).astype(np.int32)
        T, R = lt.nn.relu(T + lt.Tensor(v).to(T.symbolic_shape[1])), np.maximum(R + v, 0)
    return T.astype("float32"), R.astype(np.float32)


def half(G: Gen):
    """float16 storage: an element-wise chain or a matmul on half-precision arrays; or a
    conversion (`cast`)."""
    s = lt.SymbolGenerator()
    m, n = G.size(), G.size()
    x, y = G.array(m, n).astype(np.float16), G.array(n).astype(np.float16)
    X, Y = lt.Tensor(x).to(s.i, s.j), lt.Tensor(y).to(s.j)
    draw = G.r.random()
    if draw >= 0.7:
        return cast(G)
    if draw < 0.35:
        w = G.array(n, G.size()).astype(np.float16)
        T = (X * lt.Tensor(w).to(s.j, s.o)).sum(s.j)
        R = x.astype(np.float32) @ w.astype(np.float32)
    else:
        T, R = lt.nn.relu(X * Y + 0.5), np.maximum(x.astype(np.float32) * y.astype(np.float32) + 0.5, 0)
    return T, R


def constant(G: Gen):
    """A dense layer whose weights are declared constant (a kernel may pack them once per
    array: the guarded runs hand it new arrays, which it must pack again)."""
    s = lt.SymbolGenerator()
    b, i, o = G.size(1, 8), G.size(1, 40), G.size(1, 40)
    x, w, bias = G.array(b, i), G.array(i, o), G.array(o)
    W = lt.Tensor(w, constant=True).to(s.i, s.o)
    T = (lt.Tensor(x).to(s.b, s.i) * W).sum(s.i) + lt.Tensor(bias, constant=True).to(s.o)
    act = G.r.choice(ACTIVATIONS)
    R = x @ w + bias
    if act:
        f, g = UNARY[act]
        T, R = f(T), g(R)
    return T, R


def flatten(G: Gen):
    """Two dimensions flattened into one, then a broadcast op along the flat one."""
    s = lt.SymbolGenerator()
    a, b, c = G.size(1, 6), G.size(1, 6), G.size(1, 6)
    x, y = G.array(a, b, c), G.array(b * c)
    F = lt.Tensor(x).to(s.a, s.b, s.c).flatten(s.b, s.c)
    T = F + lt.Tensor(y).to(F.symbolic_shape[1])
    return T, x.reshape(a, b * c) + y


def conv_nhwc(G: Gen):
    """lt.nn.conv on channels-last input with stride, dilation and padding (the benchmarks' layout)."""
    s = lt.SymbolGenerator()
    c, o = G.size(1, 8), G.size(1, 12)
    k, stride, dil, pad = G.r.randint(1, 3), G.r.randint(1, 2), G.r.randint(1, 2), G.r.randint(0, 1)
    h = G.r.randint(max(1, dil * (k - 1) + 1 - 2 * pad), 10)
    wd = G.r.randint(max(1, dil * (k - 1) + 1 - 2 * pad), 10)
    x, w = G.array(h, wd, c), G.array(k, k, c, o)
    X = lt.Tensor(x).to(s.h, s.w, s.c)
    if pad:
        X = lt.nn.pad(X, (s.h, pad), (s.w, pad))
    Y = lt.nn.conv(X, lt.Tensor(w).to(s.kh, s.kw, s.c, s.o), X.symbolic_shape[:2], (s.kh, s.kw),
                   stride=stride, dilation=dil)
    R = _conv_ref(x.transpose(2, 0, 1), w.transpose(3, 2, 0, 1), stride, dil, pad, False).transpose(1, 2, 0)
    return Y, R


FAMILIES = {"eltwise": eltwise, "reduction": reduction, "matmul": matmul, "mlp": mlp, "conv": conv,
            "conv1d": conv1d, "pool": pool, "concat": concat, "softmax": softmax, "mix": mix,
            "einstein": einstein, "half": half, "constant": constant, "flatten": flatten,
            "conv_nhwc": conv_nhwc}


def random_program(rnd: random.Random):
    name = rnd.choice(list(FAMILIES))
    T, R = FAMILIES[name](Gen(rnd))
    return name, T, np.asarray(R, np.float32)


# ----------------------------------------------------------------------------- random schedules

def _pick(rnd, seq):
    return rnd.choice(seq) if seq else 0


def random_action(rnd: random.Random, tree):
    """One mutation with arguments drawn mostly where it may apply, sometimes anywhere."""
    refs = list(range(len(tree)))
    loops, nodes = tree.loops, tree.nodes
    kind = rnd.choice(["split", "split", "split", "merge", "swap_loops", "swap_loops", "try_swap",
                       "swap_nodes", "remove_loop", "add_loop", "copy_input", "copy_input", "delete_copy",
                       "decrease_reuse", "increase_reuse", "disable_reuse", "enable_reuse",
                       "annotate", "annotate", "annotate", "swap_vars"])
    wild = rnd.random() < 0.1
    L = _pick(rnd, refs if wild else loops or refs)
    N = _pick(rnd, refs if wild else nodes or refs)
    if kind == "split":
        size = tree.item(L).entry[1] if tree.kind(L) == "loop" else 4
        return kind, (L, rnd.randint(1, size + 1))
    if kind == "merge":
        same = [x for x in loops if tree.parent(x) != -1 and tree.item(tree.parent(x)).entry[0] == tree.item(x).entry[0]]
        return kind, (_pick(rnd, same) if same and not wild else L,)
    if kind == "swap_loops":
        kids = [c for c in tree.children(L) if tree.kind(c) == "loop"] if tree.kind(L) == "loop" else []
        return kind, (L, _pick(rnd, kids) if kids and not wild else _pick(rnd, refs))
    if kind == "try_swap":
        return kind, (_pick(rnd, refs), _pick(rnd, refs))
    if kind == "swap_nodes":
        return kind, (N, _pick(rnd, nodes or refs))
    if kind == "remove_loop":
        ones = [x for x in loops if tree.item(x).entry[1:] == (1, 0)]
        if rnd.random() < 0.5:
            return kind, (_pick(rnd, ones) if ones and not wild else L,)
        n = _pick(rnd, nodes or refs)
        path = tree.path(n) if tree.kind(n) == "node" else []
        return kind, (n, _pick(rnd, path) if path and not wild else L)
    if kind == "add_loop":
        if rnd.random() < 0.5:
            return kind, (N, L)
        return kind, (_pick(rnd, refs), rnd.choice(tree.graph.vars))
    if kind in ("copy_input",):
        return kind, (N, rnd.randint(0, 2))
    if kind == "delete_copy":
        copies = [x for x in nodes if tree.graph.node(tree.ir_node(x)).op == "copy"]
        return kind, (_pick(rnd, copies) if copies and not wild else N,)
    if kind in ("decrease_reuse", "increase_reuse"):
        return kind, (N,)
    if kind in ("disable_reuse", "enable_reuse"):
        return kind, (L, N)
    if kind == "annotate":
        return kind, (L, rnd.choice(["vectorize", "vectorize", "unroll", "parallel", ""]))
    if kind == "swap_vars":
        return kind, (N, rnd.choice(tree.graph.vars), rnd.choice(tree.graph.vars))
    raise AssertionError(kind)


def random_schedule(rnd: random.Random, tree, steps: int):
    """Apply `steps` random mutations; returns (tree, [(action, 'ok' | refusal message)])."""
    log = []
    for _ in range(steps):
        kind, args = random_action(rnd, tree)
        try:
            tree = getattr(tree, kind)(*args)
            log.append((f"{kind}{args}", "ok"))
        except lt.ScheduleError as e:
            log.append((f"{kind}{args}", f"refused: {e}"))
    return tree, log


# ----------------------------------------------------------------------------- guarded arrays

PAGE = mmap.PAGESIZE
PROT_NONE = 0
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.mprotect.restype = ctypes.c_int


def guarded(a: np.ndarray, at_end: bool = True) -> np.ndarray:
    """A copy of `a` in fresh pages that ends against (or starts right after) a PROT_NONE page.

    The mapping lives as long as the array (numpy holds the buffer); the child exits after."""
    nbytes = max(a.nbytes, 1)
    pages = -(-nbytes // PAGE)
    mm = mmap.mmap(-1, (pages + 1) * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    guard, offset = (base + pages * PAGE, pages * PAGE - a.nbytes) if at_end else (base, PAGE)
    if _libc.mprotect(guard, PAGE, PROT_NONE) != 0:
        raise OSError(ctypes.get_errno(), "mprotect")
    out = np.frombuffer(mm, a.dtype, a.size, offset).reshape(a.shape)
    out[...] = a
    return out


# ----------------------------------------------------------------------------- one case

def host_targets() -> list[str]:
    from loopstack.isa.cpu import cpu_features
    from loopstack.isa.target import TARGETS

    have = cpu_features()
    return [name for name, t in TARGETS.items() if t.required <= have]


def _close(got, ref) -> bool:
    if got.shape != ref.shape:
        return False
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    tol = 1e-2 if got.dtype == np.float16 else 2e-3          # half precision stores 11 bits
    return bool(np.allclose(got.astype(np.float32), ref, rtol=tol, atol=tol * scale, equal_nan=False))


def tuned_default(tree):
    from loopstack.tune.defaults import default_schedule as generated

    return generated(tree)


def family_of(seed: int, index: int) -> str:
    return random.Random(seed * 1_000_003 + index).choice(list(FAMILIES))


def build_case(seed: int, index: int):
    rnd = random.Random(seed * 1_000_003 + index)
    name, T, ref = random_program(rnd)
    tree = lt.LoopTree(T.ir, default_schedule(T.ir))
    if rnd.random() < 0.35:            # from loopstack's own default schedule (register blocks, packing)
        tree = tuned_default(tree)
    tree, log = random_schedule(rnd, tree, rnd.randint(0, 10))
    return name, T, ref, tree, log


def run_case(seed: int, index: int, targets, verbose: bool = False) -> dict:
    """One case in this process; returns {status, family, detail}. Never raises."""
    res = {"case": index, "status": "ok", "family": "?", "detail": ""}
    stage = "build"
    try:
        res["family"] = family_of(seed, index)
        name, T, ref, tree, log = build_case(seed, index)
        if verbose:
            print(T.ir, "\n", "\n".join(f"  {a}: {r}" for a, r in log), "\n", tree, sep="")
        stage = "set"
        T.set(tree)
        for target in ["interp"] + list(targets):
            stage = f"compile {target}"
            kernel, reads, (shape, dt) = _run.compiled(T, target)
            ins = [r.data for r in reads]
            stage = f"run {target}"
            out = np.zeros(shape, dt)
            kernel(*ins, out)
            if not _close(out, ref):
                err = float(np.abs(out - ref).max()) if out.shape == ref.shape else "shape"
                return {**res, "status": "wrong", "detail": f"{target}: max error {err}"}
            if target == "interp":
                continue
            for at_end in (True, False):
                stage = f"run {target} guarded ({'end' if at_end else 'start'})"
                g_ins = [guarded(a, at_end) for a in ins]
                g_out = guarded(np.zeros(shape, dt), at_end)
                kernel(*g_ins, g_out)
                if not _close(g_out, ref):
                    return {**res, "status": "wrong", "detail": f"{stage}: differs from numpy"}
    except lt.LoopstackError as e:
        if stage == "build":
            res.update(status="exception", detail=f"build raised {type(e).__name__}: {e}")
        else:
            res.update(status="late", detail=f"{stage}: {type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001 - the point is to count these
        res.update(status="exception", detail=f"{stage}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}")
    return res


# ----------------------------------------------------------------------------- the runner

def _child(case, seed, index, targets, wfd):
    # the child: run the case, write one JSON line, leave without running the parent's atexit
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        res = case(seed, index, targets)
        os.write(wfd, (json.dumps(res) + "\n").encode())
    finally:
        os._exit(0)


def warm_up(targets) -> None:
    """Compile one small kernel per target here, so that every forked child inherits the
    instruction tables and CPU probes instead of building them again."""
    s = lt.SymbolGenerator()
    T = lt.Tensor(np.ones((3, 5), np.float32)).to(s.i, s.j).sum(s.j) + 1.0
    for target in ["interp"] + list(targets):
        T.numpy(target=target)


def run_cases(seed: int, indices, targets, jobs: int = 1, timeout: float = 60.0, progress=None,
              case=None, warm=None):
    """Run each case (`case(seed, index, targets) -> result`, run_case by default) in a forked
    child, after `warm(targets)` here; returns the list of results (with crash and hang)."""
    (warm or warm_up)(targets)
    pending = list(indices)
    running: dict[int, tuple] = {}      # pid -> (index, read fd, start, chunks)
    results = []
    try:
        _loop(case or run_case, seed, pending, running, results, targets, jobs, timeout, progress)
    except KeyboardInterrupt:           # stopped early: the cases finished so far still count
        for pid, (_, fd, _, _) in running.items():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(fd)
    return results


def _loop(case, seed, pending, running, results, targets, jobs, timeout, progress):
    while pending or running:
        while pending and len(running) < jobs:
            index = pending.pop(0)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _child(case, seed, index, targets, w)
            os.close(w)
            running[pid] = (index, r, time.monotonic(), [])
        fds = {v[1]: pid for pid, v in running.items()}
        ready, _, _ = select.select(list(fds), [], [], 0.2)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                running[fds[fd]][3].append(chunk)
                continue
            pid = fds[fd]
            index, _, _, chunks = running.pop(pid)
            os.close(fd)
            _, status = os.waitpid(pid, 0)
            text = b"".join(chunks).decode(errors="replace").strip()
            if os.WIFSIGNALED(status):
                sig = signal.Signals(os.WTERMSIG(status)).name
                res = {"case": index, "status": "crash", "family": "?", "detail": f"killed by {sig}"}
            elif not text:
                res = {"case": index, "status": "crash", "family": "?", "detail": f"exit status {status}"}
            else:
                res = json.loads(text)
            results.append(res)
            if progress:
                progress(res, len(results))
        now = time.monotonic()
        for pid, (index, fd, start, _) in list(running.items()):
            if now - start > timeout:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(fd)
                del running[pid]
                res = {"case": index, "status": "hang", "family": "?", "detail": f"over {timeout:.0f} s"}
                results.append(res)
                if progress:
                    progress(res, len(results))


COUNTED = ("wrong", "crash", "hang", "exception", "late")


def summary(results, seed, targets, label="interp+") -> str:
    c = {k: sum(r["status"] == k for r in results) for k in COUNTED}
    return (f"fuzz seed {seed}: {len(results)} cases on {label}{'+'.join(targets)}: {c['wrong']} wrong, "
            f"{c['crash']} crashes, {c['hang']} hangs, {c['exception']} non-loopstack exceptions, "
            f"{c['late']} late loopstack errors")


def main(argv=None, *, doc=None, case=None, warm=None, targets_help="comma list of avx2,avx512, or 'host' "
         "(all this CPU runs)", resolve_targets=None, label="interp+", name="fuzz") -> int:
    """The command line of a fuzzer: this file's, or (with `case`, `warm` and the rest) another
    family of cases run by the same child-process runner.  A status outside COUNTED (such as a
    GPU fuzzer's `refused`) is not a failure; the JSON record counts every status."""
    doc = doc or __doc__
    case = case or run_case
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first case index")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--targets", default="host", help=targets_help)
    ap.add_argument("--case", type=int, default=None, help="replay one case in-process, verbosely")
    ap.add_argument("--json", default=None)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    resolve_targets = resolve_targets or (lambda t: host_targets() if t == "host" else [x for x in t.split(",") if x])
    targets = resolve_targets(a.targets)
    if a.case is not None:
        res = case(a.seed, a.case, targets, verbose=True)
        print(json.dumps(res, indent=1))
        return 0 if res["status"] not in COUNTED else 1
    t0 = time.monotonic()

    def progress(res, done):
        if res["status"] in COUNTED:
            print(f"case {res['case']} ({res['family']}): {res['status']}: {res['detail']}", flush=True)
        elif not a.quiet and done % 100 == 0:
            print(f"... {done}/{a.n} cases, {time.monotonic() - t0:.0f} s", flush=True)

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)       # `kill` ends the run with the summary of what ran
    results = run_cases(a.seed, range(a.start, a.start + a.n), targets, a.jobs, a.timeout, progress, case, warm)
    line = summary(results, a.seed, targets, label)
    print(line)
    if a.json:
        statuses = sorted({r["status"] for r in results} | set(COUNTED))
        counts = {k: sum(r["status"] == k for r in results) for k in statuses}
        fams: dict = {}
        for r in results:
            fams[r["family"]] = fams.get(r["family"], 0) + 1
        rec = [{"name": f"{name}-seed{a.seed}-n{len(results)}", "cases": len(results), **counts,
                "seconds": round(time.monotonic() - t0, 1), "targets": ",".join(targets),
                "families": fams,
                "failures": [r for r in results if r["status"] in COUNTED]}]
        from loopstack.timing import write_records
        write_records(a.json, rec)
    return 0 if all(r["status"] not in COUNTED for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
