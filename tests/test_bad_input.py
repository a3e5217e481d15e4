"""A catalogue of malformed input: each case names the loopstack error class and the words that
say what is wrong.  None may crash the process or leave an executable mapping behind.

Groups: shapes and ranks, symbols, dtypes, arrays handed to a kernel, zero-size and huge
dimensions, every schedule mutation used illegally, corrupt schedule files and tuning
databases, targets this CPU lacks, kernels called after their code was freed.
"""
import gc
import json
import os

import numpy as np
import pytest

import loopstack as lt
from loopstack.frontend import run as _run
from loopstack.frontend.tree import default_schedule

F32 = np.float32


def z(*shape, dtype=F32):
    return np.zeros(shape, dtype)


def exec_mappings() -> int:
    """Anonymous executable mappings of this process (where kernels live)."""
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if line.split()[1][2] == "x" and len(line.split()) < 6)


def mm(m=4, k=3, n=5):
    s = lt.SymbolGenerator()
    return (lt.Tensor(z(m, k) + 1).to(s.m, s.k) * lt.Tensor(z(k, n) + 1).to(s.k, s.n)).sum(s.k)


def tree_of(T):
    return lt.LoopTree(T.ir, default_schedule(T.ir))


def node_ref(tree, op):
    return next(r for r in tree.nodes if tree.graph.node(tree.ir_node(r)).op == op)


def x86_kernel():
    """The matmul kernel for the host target (created once; the cases reuse it)."""
    if not hasattr(x86_kernel, "k"):
        try:
            x86_kernel.k = mm().compile("x86")
        except lt.UnsupportedError as e:
            pytest.skip(f"no x86 target on this CPU: {e}")
    return x86_kernel.k


def good_args():
    return [np.ones((4, 3), F32), np.ones((3, 5), F32), np.zeros((4, 5), F32)]


# ------------------------------------------------------------------------------------ cases
CASES = {}


def case(name, error, words):
    def deco(fn):
        CASES[name] = (fn, error, words)
        return fn
    return deco


# -- shapes and ranks
@case("set-wrong-shape", lt.ShapeError, r"array of shape \(3, 3\) does not match the tensor's shape \(64, 32\)")
def _():
    lt.Tensor(64, 32).set(z(3, 3))


@case("set-wrong-rank", lt.ShapeError, r"array of shape \(4,\) does not match the tensor's 2 dimensions")
def _():
    m, n = lt.symbols("m n")
    lt.Tensor(m, n).set(z(4))


@case("to-too-few-names", lt.ShapeError, r"the tensor has 2 dimensions \[_0, _1\] but 1 names were given")
def _():
    lt.Tensor(z(2, 3)).to(lt.Symbol("m"))


@case("index-wrong-count", lt.ShapeError, "the tensor has 2 dimensions but 3 indices were given")
def _():
    m, n, k = lt.symbols("m n k")
    lt.Tensor(z(2, 3))[m, n, k]


@case("einstein-wrong-count", lt.ShapeError, "Einstein assignment: the tensor has 2 dimensions but 1 indices")
def _():
    m, n = lt.symbols("m n")
    C = lt.Tensor(m, n)
    C[m] = lt.Tensor(z(3, 4))[m, n]


@case("add-mismatched-sizes", lt.ShapeError, r"size of i is [34] .* but [34] .*unsatisfiable sizes")
def _():
    i = lt.Symbol("i")
    (lt.Tensor(z(3)).to(i) + lt.Tensor(z(4)).to(i)).numpy(target="interp")


@case("matmul-inner-mismatch", lt.ShapeError, r"size of k is (5|6) .* but (5|6)")
def _():
    s = lt.SymbolGenerator()
    ((lt.Tensor(z(4, 5)).to(s.m, s.k) * lt.Tensor(z(6, 3)).to(s.k, s.n)).sum(s.k)).shape


@case("einsum-operand-count", lt.ShapeError, r"2 operands in 'mk,kn->mn' but 1 tensors given")
def _():
    lt.einsum("mk,kn->mn", z(2, 2))


@case("window-does-not-fit", lt.ShapeError, r"the window h = ho \+ kh does not fit in size\(h\) = 2")
def _():
    h, ho, kh = lt.symbols("h ho kh")
    X = lt.Tensor(z(2)).to(h)
    W = lt.Tensor(z(5)).to(kh)
    (X.to(ho, kh, constraints=[(h, ho + kh)]) * W).sum(kh).shape


@case("size-unknown", lt.ShapeError, "cannot infer the size of k")
def _():
    k = lt.Symbol("k")
    lt.Tensor(k).sum(k).shape


@case("kernel-wrong-shape", lt.ArgumentError, r"argument 1 \(in1\) has shape \(5, 3\), expected \(3, 5\)")
def _():
    a = good_args()
    a[1] = np.ones((5, 3), F32)
    x86_kernel()(*a)


@case("kernel-wrong-arg-count", lt.ArgumentError, r"the kernel takes 3 array\(s\) \(in0, in1, out\), got 2")
def _():
    x86_kernel()(*good_args()[:2])


# -- symbols
@case("sum-unknown-symbol", lt.SymbolError, r"sum: k is not a dimension of this tensor \(its dimensions: m, n\)")
def _():
    m, n, k = lt.symbols("m n k")
    lt.Tensor(z(2, 3)).to(m, n).sum(k)


@case("to-reused-symbol", lt.ShapeError, r"dimension m appears twice in \[m, m\]")
def _():
    m = lt.Symbol("m")
    lt.Tensor(z(2, 2)).to(m, m)


@case("tensor-reused-symbol", lt.ShapeError, "Tensor: dimension m appears twice")
def _():
    m = lt.Symbol("m")
    lt.Tensor(m, m)


@case("transpose-not-permutation", lt.SymbolError, r"transpose: \[m, k\] is not a permutation of \[m, n\]")
def _():
    m, n, k = lt.symbols("m n k")
    lt.Tensor(z(2, 3)).to(m, n).transpose(m, k)


@case("einstein-lhs-missing-on-rhs", lt.SymbolError, "k is on the left but does not appear on the right")
def _():
    m, n, k = lt.symbols("m n k")
    C = lt.Tensor(m, k)
    C[m, k] = lt.Tensor(z(2, 3)).to(m, n)[m, n]


@case("pad-unknown-symbol", lt.SymbolError, r"pad: q is not a dimension of the tensor \[m, n\]")
def _():
    m, n, q = lt.symbols("m n q")
    lt.Tensor(z(2, 3)).to(m, n).pad(q, 1)


@case("flatten-unknown-symbol", lt.SymbolError, "flatten: q is not a dimension of the tensor")
def _():
    m, n, q = lt.symbols("m n q")
    lt.Tensor(z(2, 3)).to(m, n).flatten(m, q)


@case("constraint-unknown-symbol", lt.SymbolError, "constraint on q, which is neither a dimension of the tensor")
def _():
    m, n, q = lt.symbols("m n q")
    lt.Tensor(z(2, 3)).to(m, n).to(m, n, constraints=[(q, m)])


@case("symbol-bad-name", lt.SymbolError, "a symbol name must be an identifier, got '2x'")
def _():
    lt.Symbol("2x")


@case("einsum-unknown-output", lt.SymbolError, "einsum: output index z does not appear in the inputs")
def _():
    lt.einsum("mk,kn->mz", z(2, 2), z(2, 2))


@case("einsum-malformed", lt.SymbolError, r"einsum: expected 'ab,bc->ac', got 'mk kn'")
def _():
    lt.einsum("mk kn", z(2, 2))


@case("mean-unknown-dim", lt.SymbolError, "mean: q is not a dimension of X")
def _():
    m, q = lt.symbols("m q")
    lt.nn.mean(lt.Tensor(z(3)).to(m), [q])


# -- dtypes
@case("mixed-dtypes", lt.DTypeError, r"operands have different dtypes \(float32, int32\)")
def _():
    i = lt.Symbol("i")
    (lt.Tensor(z(3)).to(i) + lt.Tensor(z(3, dtype=np.int32)).to(i)).numpy(target="interp")


@case("mixed-half-single", lt.DTypeError, r"operands have different dtypes \(float16, float32\)")
def _():
    i = lt.Symbol("i")
    (lt.Tensor(z(3)).to(i) * lt.Tensor(z(3, dtype=np.float16)).to(i)).numpy(target="interp")


@case("unsupported-dtype", lt.DTypeError, "complex128")
def _():
    lt.Tensor(z(3, dtype=np.complex128))


@case("integer-division-on-x86", lt.UnsupportedError, r"integer div is not vectorised on x86")
def _():
    i = lt.Symbol("i")
    a = lt.Tensor(z(3, dtype=np.int32)).to(i)
    (a / a).numpy(target="x86")


@case("kernel-wrong-dtype", lt.ArgumentError, r"argument 0 \(in0\) has dtype float64, expected float32")
def _():
    a = good_args()
    a[0] = np.ones((4, 3))
    x86_kernel()(*a)


# -- arrays handed to a kernel
@case("kernel-non-contiguous", lt.ArgumentError, r"argument 1 \(in1\) is not laid out as C-contiguous")
def _():
    a = good_args()
    a[1] = np.ones((5, 3), F32).T
    x86_kernel()(*a)


@case("kernel-read-only-output", lt.ArgumentError, r"argument 2 \(out\) is an output but is not writable")
def _():
    a = good_args()
    a[2].flags.writeable = False
    x86_kernel()(*a)


@case("kernel-output-aliases-input", lt.ArgumentError, r"argument 2 \(out\) is an output and overlaps argument 0")
def _():
    buf = np.ones(40, F32)
    x86_kernel()(buf[:12].reshape(4, 3), np.ones((3, 5), F32), buf[:20].reshape(4, 5))


@case("kernel-output-overlaps-partly", lt.ArgumentError, r"argument 2 \(out\) is an output and overlaps argument 1")
def _():
    buf = np.ones(40, F32)
    x86_kernel()(np.ones((4, 3), F32), buf[10:25].reshape(3, 5), buf[20:40].reshape(4, 5))


@case("kernel-not-an-array", lt.ArgumentError, r"argument 0 \(in0\) is a list, expected a numpy array")
def _():
    a = good_args()
    a[0] = [[1.0] * 3] * 4
    x86_kernel()(*a)


@case("kernel-broadcast-output", lt.ArgumentError, r"argument 2 \(out\) is (not laid out as C-contiguous|an output but is not writable)")
def _():
    a = good_args()
    a[2] = np.broadcast_to(np.zeros(5, F32), (4, 5))
    x86_kernel()(*a)


@case("kernel-fortran-order", lt.ArgumentError, r"argument 0 \(in0\) is not laid out as C-contiguous")
def _():
    a = good_args()
    a[0] = np.asfortranarray(np.ones((4, 3), F32))
    x86_kernel()(*a)


@case("kernel-misaligned", lt.ArgumentError, r"argument 0 \(in0\) is not aligned to its 4-byte elements")
def _():
    raw = np.zeros(4 * 3 * 4 + 1, np.uint8)
    a = good_args()
    a[0] = raw[1:].view(F32).reshape(4, 3)
    x86_kernel()(*a)


# -- zero-size and huge dimensions
@case("zero-size-declared", lt.ShapeError, "dimension 0 must be a positive int or a Symbol, got 0")
def _():
    lt.Tensor(0, 3)


@case("zero-size-data", lt.ShapeError, r"size of _0 would be 0 .*sizes must be positive")
def _():
    (lt.Tensor(z(0, 3)) + 1.0).shape


@case("negative-size", lt.ShapeError, "dimension 1 must be a positive int or a Symbol, got -2")
def _():
    lt.Tensor(3, -2)


@case("bool-size", lt.ShapeError, "dimension 0 must be a positive int or a Symbol, got True")
def _():
    lt.Tensor(True, 2)


@case("huge-dimensions", lt.ShapeError, r"has 2\*\*(8\d) elements? .*more than")
def _():
    m, n = lt.symbols("m n")
    A = lt.Tensor(2 ** 40, 2 ** 40).to(m, n)
    (A + 1.0).loop_tree.compile("interp")


@case("negative-pad", lt.ShapeError, r"pad: amounts must be non-negative, got \(-1, -1\)")
def _():
    m = lt.Symbol("m")
    lt.Tensor(z(3)).to(m).pad(m, -1)


# -- every schedule mutation, used illegally
def _mm_tree():
    return tree_of(mm())


@case("split-factor-zero", lt.ScheduleError, "split L0: the factor must be a positive int, got 0")
def _():
    _mm_tree().split(0, 0)


@case("split-factor-too-big", lt.ScheduleError, "split L0: factor 9 exceeds the 4 iterations of loop m")
def _():
    _mm_tree().split(0, 9)


@case("split-a-node", lt.ScheduleError, r"ref 3 is a node \(%2\), not a loop")
def _():
    _mm_tree().split(3, 2)


@case("ref-out-of-range", lt.ScheduleError, r"no loop or node with ref 99 \(the tree has refs 0..\d+\)")
def _():
    _mm_tree().split(99, 2)


@case("merge-no-parent", lt.ScheduleError, "merge L0: its parent is not a loop over m")
def _():
    _mm_tree().merge(0)


@case("swap-not-nested", lt.ScheduleError, "swap_loops L0, L2: one loop must directly contain the other")
def _():
    _mm_tree().swap_loops(0, 2)


@case("swap-same-var", lt.ScheduleError, "both loops are over m; swapping them would change the result")
def _():
    _mm_tree().split(0, 2).swap_loops(0, 1)


@case("swap-nodes-dependent", lt.ScheduleError, r"swap_nodes L\d+, L\d+: %\d depends on %\d")
def _():
    t = _mm_tree()
    a, b = t.nodes[:2]
    t.swap_nodes(a, b)


@case("try-swap-loop-and-node", lt.ScheduleError, "try_swap L0, L3: cannot swap a loop with a node")
def _():
    _mm_tree().try_swap(0, 3)


@case("remove-loop-needed", lt.ScheduleError, "remove_loop L0: loop m has 4 iterations")
def _():
    _mm_tree().remove_loop(0)


@case("remove-loop-node-needs-it", lt.ScheduleError, r"remove_loop L3, L0: %2 needs loop m \(4 iterations\)")
def _():
    _mm_tree().remove_loop(3, 0)


@case("remove-loop-not-enclosing", lt.ScheduleError, r"remove_loop L6, L1: L1 does not enclose %4")
def _():
    _mm_tree().remove_loop(6, 1)            # the write's nest is m, n: k is the multiply's


@case("add-loop-not-a-dim", lt.ScheduleError, "add_loop L0: q is not a dimension of %2")
def _():
    _mm_tree().add_loop(0, "q")


@case("add-loop-to-reduction", lt.ScheduleError, r"%\d is a reduction; repeating it under loop \w would add its terms again")
def _():
    s = lt.SymbolGenerator()
    T = (lt.Tensor(z(4, 3) + 1).to(s.m, s.k).sum(s.k) + lt.Tensor(z(5)).to(s.n))
    t = tree_of(T)
    red = node_ref(t, "reduce")
    nloop = next(r for r in t.loops if t.item(r).entry[0] == "n")
    t.add_loop(red, nloop)


@case("add-loop-already-iterated", lt.ScheduleError, r"add_loop L3, L0: %2 already iterates m")
def _():
    _mm_tree().add_loop(3, 0)


@case("swap-vars-output", lt.ScheduleError, r"swap_vars L\d+: %\d is an input or the output; its layout is the caller's")
def _():
    t = _mm_tree()
    t.swap_vars(node_ref(t, "reduce"), "m", "n")


@case("copy-input-of-write", lt.ScheduleError, r"copy_input L\d+: %4 is a write; only a compute node's inputs")
def _():
    t = _mm_tree()
    t.copy_input(node_ref(t, "write"), 0)


@case("copy-input-bad-index", lt.ScheduleError, r"copy_input L3: %2 has 2 inputs, no input 5")
def _():
    _mm_tree().copy_input(3, 5)


@case("copy-input-constant", lt.ScheduleError, r"copy_input L\d+: input 1 of %\d is a constant")
def _():
    i = lt.Symbol("i")
    t = tree_of(lt.Tensor(z(4)).to(i) * 2.0)
    t.copy_input(node_ref(t, "binary"), 1)


@case("delete-copy-not-a-copy", lt.ScheduleError, r"delete_copy L3: %2 is not a staging copy")
def _():
    _mm_tree().delete_copy(3)


@case("decrease-reuse-nothing-shared", lt.ScheduleError, r"decrease_reuse L3: %2 shares no loop with an earlier node")
def _():
    _mm_tree().decrease_reuse(3)


@case("increase-reuse-none-disabled", lt.ScheduleError, r"increase_reuse L3: %2 has no disabled reuse to enable")
def _():
    _mm_tree().increase_reuse(3)


@case("disable-reuse-too-deep", lt.ScheduleError, r"disable_reuse L\d+, L\d+: %\d has only \d loops")
def _():
    t = _mm_tree().split(2, 5)
    deep = max(t.loops, key=lambda r: t.item(r).depth)
    t.disable_reuse(deep, t.ref_of(t.graph.output.id))


@case("annotate-unknown", lt.ScheduleError, r"annotate L0: unknown annotation 'fast' \(expected one of unroll, vectorize, parallel, block, warp\)")
def _():
    _mm_tree().annotate(0, "fast")


@case("annotate-parallel-reduction", lt.ScheduleError, r"cannot parallelize loop k: %\d reduces over k")
def _():
    _mm_tree().swap_loops(0, 1).annotate(0, "parallel")


@case("annotate-parallel-nested", lt.ScheduleError, r"only an outermost loop can run in parallel \(n is nested 2 deep\)")
def _():
    _mm_tree().annotate(2, "parallel")


@case("annotate-vectorize-outer", lt.ScheduleError, r"only an innermost loop can be vectorized \(m has inner loops\)")
def _():
    _mm_tree().annotate(0, "vectorize")


@case("annotate-vectorize-strided", lt.ScheduleError, r"annotate L2 'vectorize': refused, .*cannot be vectorized")
def _():
    s = lt.SymbolGenerator()
    T = (lt.Tensor(z(4, 3) + 1).to(s.m, s.k) * lt.Tensor(z(5, 3) + 1).to(s.n, s.k)).sum(s.k)
    t = tree_of(T)                          # m, k, n: B[n, k] read along n is strided
    inner = 2
    assert t.item(inner).entry[0] == "n", str(t)
    if default_target_is_interp():
        raise lt.ScheduleError(f"annotate L{inner}: refused, loop n cannot be vectorized (interp)")
    t.annotate(inner, "vectorize")


@case("swap-moves-parallel-inward", lt.ScheduleError, "L0 runs in parallel and only an outermost loop can")
def _():
    _mm_tree().annotate(0, "parallel").swap_loops(0, 1)


@case("add-loop-pushes-parallel-inward", lt.ScheduleError,
      r"add_loop L0 'n': refused, loop m \(L1\) runs in parallel but is nested 1 deep")
def _():
    _mm_tree().annotate(0, "parallel").add_loop(0, "n")


@case("add-loop-races-in-parallel", lt.ScheduleError,
      r"refused, loop m \(L0\) runs in parallel but %5 does not iterate m: its iterations would race")
def _():
    t = _mm_tree()
    t = t.copy_input(3, 1)                   # %5 <- copy(B), a nest of its own before the multiply
    m = next(r for r in t.loops if t.item(r).entry[0] == "m" and t.item(r).depth == 0)
    t = t.annotate(m, "parallel")
    t.add_loop(t.ref_of(5), m)


@case("add-loop-over-a-flattened-dimension", lt.ScheduleError,
      r"add_loop L3, L4: %1 writes along b_c \(its flattened dimension\)")
def _():
    s = lt.SymbolGenerator()
    F = lt.Tensor(z(4, 1, 3)).to(s.a, s.b, s.c).flatten(s.b, s.c)
    T = F + lt.Tensor(z(3)).to(F.symbolic_shape[1])
    t = tree_of(T)                 # a, b_c (the add) and a, b, c (the flatten) share the a loop
    t.add_loop(3, 4)


@case("set-order-malformed", lt.ScheduleError, r"set_order %2: an order is \(var, count, tail\) entries")
def _():
    _mm_tree().set_order(2, [("m", "x")])


@case("set-order-wrong-extent", lt.ScheduleError, r"%2: the loops over m cover 2 elements, but m has 4")
def _():
    _mm_tree().set_order(2, [("m", 2, 0), ("k", 3, 0), ("n", 5, 0)])


@case("apply-unknown-action", lt.ScheduleError, "unknown schedule action 'explode'")
def _():
    lt.apply_actions(_mm_tree(), [("explode", [0])])


@case("apply-malformed-action", lt.ScheduleError, r"malformed schedule action 42")
def _():
    lt.apply_actions(_mm_tree(), [42])


@case("apply-wrong-arguments", lt.ScheduleError, r"split: wrong arguments \(0, 1, 2, 3\)")
def _():
    lt.apply_actions(_mm_tree(), [("split", [0, 1, 2, 3])])


@case("set-tree-of-other-program", lt.ScheduleError, "schedules a different program")
def _():
    i = lt.Symbol("i")
    (lt.Tensor(z(4)).to(i) * 2.0).set(tree_of(mm()))


# -- corrupt schedule files and tuning databases
@case("schedule-empty-object", lt.ScheduleError, "not a loopstack tree of version 1")
def _():
    lt.deserialize("{}")


@case("schedule-not-json", lt.ScheduleError, r"deserialize: malformed loop tree text")
def _():
    lt.deserialize("for m in 4 : L0")


@case("schedule-truncated", lt.ScheduleError, r"deserialize: malformed loop tree text")
def _():
    text = lt.serialize(_mm_tree())
    lt.deserialize(text[:len(text) // 2])


@case("schedule-wrong-types", lt.ScheduleError, r"deserialize: malformed loop tree text")
def _():
    doc = json.loads(lt.serialize(_mm_tree()))
    doc["schedule"][0]["order"] = "m n k"
    lt.deserialize(json.dumps(doc))


@case("schedule-bad-node-ref", lt.ScheduleError, r"deserialize: malformed loop tree text|node \d+")
def _():
    doc = json.loads(lt.serialize(_mm_tree()))
    doc["nodes"][2]["inputs"] = [0, 77]
    lt.deserialize(json.dumps(doc))


@case("schedule-a-list", lt.ScheduleError, "not a loopstack tree of version 1")
def _():
    lt.deserialize("[1, 2, 3]")


@case("tuning-db-not-sqlite", lt.LoopstackError, r"tuning database .* is unreadable")
def _():
    from loopstack.tune.db import TuningDB
    path = _tmp("garbage.db", b"this is not a database" * 100)
    TuningDB(path)


@case("tuning-db-bad-row", lt.LoopstackError, r"tuning database .* holds a malformed schedule")
def _():
    from loopstack.tune.db import TuningDB
    path = _tmp("badrow.db", b"")
    os.unlink(path)
    with TuningDB(path) as db:
        db.conn.execute("INSERT INTO best VALUES ('p', 't', '{not json', 1.0)")
        db.conn.commit()
        db.best("p", "t")


# -- targets this CPU lacks, freed kernels
@case("unknown-target", lt.UnsupportedError, r"unknown target 'sse9'; known: avx2, avx512")
def _():
    mm().compile("sse9")


@case("target-cpu-lacks", lt.UnsupportedError, r"this CPU lacks avx512\w+.* \(needed by target avx512\)")
def _():
    from loopstack.isa import cpu
    real = cpu.cpu_features
    cpu.cpu_features = lambda: frozenset({"sse2", "avx", "avx2", "fma", "f16c"})   # an AVX2-only CPU
    try:
        mm(3, 3, 3).compile("avx512")
    finally:
        cpu.cpu_features = real


@case("kernel-after-close", lt.LoopstackError, "this kernel was closed; its code is unmapped")
def _():
    k = mm(2, 2, 2).loop_tree.split(0, 1).compile("x86")
    k.close()
    k(np.ones((2, 2), F32), np.ones((2, 2), F32), np.zeros((2, 2), F32))


@case("kernel-after-close-same-arrays", lt.LoopstackError, "this kernel was closed; its code is unmapped")
def _():
    k = mm(2, 3, 2).loop_tree.split(0, 1).compile("x86")
    args = (np.ones((2, 3), F32), np.ones((3, 2), F32), np.zeros((2, 2), F32))
    k(*args)
    k.close()
    k(*args)


# ------------------------------------------------------------------------------------ helpers
_TMP = []


def _tmp(name, data: bytes) -> str:
    import tempfile
    d = tempfile.mkdtemp(prefix="loopstack-bad-")
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(data)
    _TMP.append(path)
    return path


def default_target_is_interp() -> bool:
    from loopstack.frontend.run import default_target
    return default_target() == "interp"


X86_CASES = {"kernel-wrong-shape", "kernel-wrong-arg-count", "kernel-wrong-dtype", "kernel-non-contiguous",
             "kernel-read-only-output", "kernel-output-aliases-input", "kernel-output-overlaps-partly",
             "kernel-not-an-array", "kernel-broadcast-output", "kernel-fortran-order", "kernel-misaligned",
             "integer-division-on-x86", "kernel-after-close", "kernel-after-close-same-arrays"}


def test_the_catalogue_is_large():
    assert len(CASES) >= 60, len(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(name):
    fn, error, words = CASES[name]
    if name in X86_CASES and default_target_is_interp():
        pytest.skip("needs the x86 backend on this CPU")
    if not default_target_is_interp():
        x86_kernel()   # before the count: this kernel and the CPU probes' code are meant to stay
    gc.collect()
    before = exec_mappings()
    with pytest.raises(error, match=words) as info:
        fn()
    assert isinstance(info.value, lt.LoopstackError)
    del info
    _run._CACHE.clear()              # kernels an accepted mutation compiled are cached, not leaked
    gc.collect()
    assert exec_mappings() <= before, "the case left an executable mapping behind"


def test_a_freed_kernel_recompiles_through_the_frontend():
    """The frontend's compile cache does not hand out a kernel whose code was freed."""
    C = mm(3, 2, 3)
    if default_target_is_interp():
        pytest.skip("needs the x86 backend on this CPU")
    C.compile("x86").close()
    np.testing.assert_allclose(C.numpy("x86"), np.full((3, 3), 2, F32))
