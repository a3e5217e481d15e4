"""The inspector (UNIT §III-B): does a statement's innermost loop nest compute what an instruction does?

`inspect(tree, stack, stmt, instr)` compares, in order:
  1. the arithmetic: the same reduction and the same expression tree up to the commutativity
     of `+` and `*`, binding the description's buffers to the statement's;
  2. the dtypes: each bound buffer has the description's dtype (an int8 x int8 product is
     not `vpdpbusd`'s uint8 x int8; the rewriter's compensation is a separate, exact step);
  3. the loops: the statement's innermost loops are the description's, innermost last, each
     with step 1 and *every* trip of exactly the instruction's extent (no tails);
  4. the access patterns: each operand moves through memory as the instruction's operand
     reads it — the reduction's k elements contiguous, the lanes one after another (or not
     at all, for a broadcast operand), the accumulator's lanes contiguous.
It returns `Match` (loop and buffer bindings) or `Mismatch` with the reason, which the
rewriter acts on (a layout copy fixes a stride, a split fixes an extent) and the TUI shows.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...looptree.ir import Access, Binary, Compute, Const, Load, Loop, LoopTree, Unary, loop_var
from .registry import TensorInstr

COMMUTATIVE = frozenset({"add", "mul", "max", "min"})


@dataclass(frozen=True)
class Match:
    instr: TensorInstr
    loops: dict[str, Loop]        # description dim -> the statement's loop
    buffers: dict[str, str]       # description buffer -> the tree's buffer

    def __bool__(self) -> bool:
        return True


@dataclass(frozen=True)
class Mismatch:
    instr: TensorInstr
    reason: str

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return f"{self.instr.name}: {self.reason}"


def _bind(desc_e, e, binding: dict[str, Access]) -> list[dict[str, Access]]:
    """Every way `e` is `desc_e` with description loads bound to the statement's accesses."""
    if isinstance(desc_e, Load):
        if not isinstance(e, Load):
            return []
        prev = binding.get(desc_e.access.buffer)
        if prev is not None and prev != e.access:
            return []
        return [{**binding, desc_e.access.buffer: e.access}]
    if isinstance(desc_e, Const):
        return [binding] if isinstance(e, Const) and e.value == desc_e.value else []
    if isinstance(desc_e, Unary):
        return _bind(desc_e.x, e.x, binding) if isinstance(e, Unary) and e.op == desc_e.op else []
    if isinstance(desc_e, Binary) and isinstance(e, Binary) and e.op == desc_e.op:
        orders = [(e.a, e.b), (e.b, e.a)] if e.op in COMMUTATIVE else [(e.a, e.b)]
        out = []
        for x, y in orders:
            for b1 in _bind(desc_e.a, x, binding):
                out.extend(_bind(desc_e.b, y, b1))
        return out
    return []


def _ranges(tree: LoopTree, stack: tuple[Loop, ...], loop: Loop) -> set[int]:
    """Every range `loop` iterates over (its trip extents, tails included)."""
    ranges = {tree.dim_size(loop.dim)}
    for lp in stack:
        if lp is loop:
            return ranges
        if lp.dim == loop.dim:
            ranges = {p for r in ranges for p in ((lp.step, r % lp.step) if r > lp.step else (r,)) if p}
    raise ValueError("loop not in stack")


def element_stride(tree: LoopTree, access: Access, loop: Loop) -> int:
    """Elements `access` moves when `loop`'s dimension (or its own offset) advances by one."""
    buf = tree.buffer(access.buffer)
    return sum((ix.coeff(loop.dim) + ix.coeff(loop_var(loop.var))) * st
               for ix, st in zip(access.index, buf.strides))


def inspect(tree: LoopTree, stack: tuple[Loop, ...], stmt: Compute, instr: TensorInstr) -> Match | Mismatch:
    desc = instr.stmt
    if stmt.reduce != desc.reduce:
        return Mismatch(instr, f"statement {stmt.name} reduces with {stmt.reduce}, the instruction with {desc.reduce}")
    bindings = _bind(desc.expr, stmt.expr, {})
    if not bindings:
        return Mismatch(instr, f"statement {stmt.name} computes {stmt.expr}, not {desc.expr}")
    dtype_of = {b.name: b.dtype for b in tree.buffers}
    want = {b.name: b.dtype for b in instr.desc.buffers}
    out_dtype = "int32" if stmt.requant is not None else dtype_of[stmt.out.buffer]
    if out_dtype != want["acc"]:
        return Mismatch(instr, f"output %{stmt.out.buffer} is {out_dtype}; {instr.mnemonic} accumulates {want['acc']}")
    typed = [b for b in bindings if all(dtype_of[acc.buffer] == want[name] for name, acc in b.items())]
    if not typed:
        got = " x ".join(dtype_of[a.buffer] for a in bindings[0].values())
        return Mismatch(instr, f"operands are {got}; {instr.mnemonic} multiplies {want['a']} x {want['b']}")

    desc_loops = [lp for _, lp in _desc_loops(instr)]
    if len(stack) < len(desc_loops):
        return Mismatch(instr, f"statement {stmt.name} has {len(stack)} loops, the instruction needs {len(desc_loops)}")
    inner = stack[-len(desc_loops):]
    sizes = dict(instr.desc.dims)
    out_names = stmt.out.names()
    loops: dict[str, Loop] = {}
    for dl, lp in zip(desc_loops, inner):
        reduces = dl.dim not in {ix.names()[0] for ix in instr.stmt.out.index}
        if reduces == (lp.dim in out_names or loop_var(lp.var) in out_names):
            role = "a reduction" if reduces else "an output dimension"
            return Mismatch(instr, f"loop {lp.var} ({lp.dim}) must be {role} to map onto the instruction's {dl.dim}")
        if lp.step != 1:
            return Mismatch(instr, f"loop {lp.var} steps by {lp.step}; the instruction's {dl.dim} needs step 1")
        got = _ranges(tree, stack, lp)
        if got != {sizes[dl.dim]}:
            return Mismatch(instr, f"loop {lp.var} runs {sorted(got)} iterations; {instr.mnemonic} covers exactly "
                                   f"{sizes[dl.dim]} along {dl.dim} (split {lp.dim} by {sizes[dl.dim]})")
        loops[dl.dim] = lp

    reasons = []
    for binding in typed:
        binding = {**binding, "acc": stmt.out}
        why = _access_mismatch(tree, instr, binding, loops)
        if why is None:
            return Match(instr, loops, {name: acc.buffer for name, acc in binding.items()})
        reasons.append(why)
    return Mismatch(instr, reasons[0])


def _desc_loops(instr: TensorInstr):
    return list(instr.desc.walk())[:-1]


def _access_mismatch(tree, instr, binding, loops) -> str | None:
    """Why an operand's access pattern is not what the instruction reads, or None."""
    for name, acc in binding.items():
        want_buf = instr.desc.buffer(name)
        for dim, lp in loops.items():
            if (name, dim) in instr.strided:      # a row stride held in a register: any
                continue
            want = element_stride(instr.desc, _desc_access(instr, name), _desc_loop(instr, dim))
            got = element_stride(tree, acc, lp)
            if got != want:
                what = "the same in every lane" if want == 0 else (
                    "contiguous" if want == 1 else f"{want} elements apart")
                return (f"%{acc.buffer} moves {got} elements per step of {lp.var} ({lp.dim}); "
                        f"{instr.mnemonic} needs its {name} operand {what} along {dim}"
                        f" ({want_buf.dtype} {list(want_buf.shape)})")
    return None


def _desc_access(instr: TensorInstr, name: str) -> Access:
    stmt = instr.stmt
    return stmt.out if name == stmt.out.buffer else next(a for a in stmt.reads() if a.buffer == name)


def _desc_loop(instr: TensorInstr, dim: str) -> Loop:
    return next(lp for _, lp in _desc_loops(instr) if lp.dim == dim)
