"""LoopTool, the frontend: Einstein-notation DSL, dataflow graph, schedules, lowering."""
from . import nn  # noqa: F401
from .graph import GNode, Graph  # noqa: F401
from .lower import lower  # noqa: F401
from .mutate import PRIMITIVES, Action, apply_actions, map_ref  # noqa: F401
from .serialize import deserialize, serialize  # noqa: F401
from .symbols import Expr, Size, Symbol, SymbolGenerator, symbols  # noqa: F401
from .tensor import Tensor, abs, einsum, erf, exp, log, neg, reciprocal, sqrt  # noqa: F401,A004
from .tree import LoopTree, NodeSchedule  # noqa: F401
