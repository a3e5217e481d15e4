"""Tensorized instructions described as loop trees, and the inspector that finds where they apply.

The UNIT way (paper 000, §III): a dot-product or matrix instruction is not a special case in a
code generator but a *description* — a small loop tree over named dimensions with its dtypes —
held in one registry (`registry.py`). The inspector (`inspect.py`) compares a statement's
innermost loops with a description (the arithmetic up to commutativity, the dtypes, the access
patterns the instruction's operands can read) and answers with a `Match` or a `Mismatch` that
says why not.
"""
from .describe import dot_desc, mma_desc
from .inspect import Match, Mismatch, inspect
from .registry import REGISTRY, TensorInstr, instruction, instructions_for
from .rewrite import Rewrite, tensorize

__all__ = ["REGISTRY", "Match", "Mismatch", "TensorInstr", "dot_desc", "inspect", "instruction",
           "instructions_for", "mma_desc", "Rewrite", "tensorize"]
