"""The loop-tree IR: the one contract between frontend and backends."""
from .ir import (  # noqa: F401
    ANNOTATIONS, BINARY_OPS, GPU_BINDINGS, REDUCE_IDENTITY, REDUCE_OPS, UNARY_OPS,
    Acc, Access, Affine, Binary, Buffer, Compute, Const, Dot, Expr, Load, Loop, LoopTree, Node, Requant, Unary,
    expr_loads, loop_var, statements, substitute_acc,
)
