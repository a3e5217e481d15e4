"""The tuning database as a schedule source: the best measured schedule of a program on a target.

`import loopstack` registers `tuned_schedule` with the frontend, so `.numpy()` and
`lt.compile` of a tensor that has no schedule of its own compile with the best schedule the
tuner recorded for the same program (structural hash, shapes and dtypes) on this machine.

The database is `LOOPSTACK_TUNING_DB` when set (the value `off` turns lookups off), else
`~/.cache/loopstack/tuning.db`.  This module reads the environment once per call and imports
only the database layer, so it costs nothing when no database exists.
"""
from __future__ import annotations

import os
import warnings

from ..errors import LoopstackError
from .db import DEFAULT_PATH, best_schedule, program_key

ENV = "LOOPSTACK_TUNING_DB"
OFF = "off"


def configured_db_path(explicit: str | None = None) -> str | None:
    """`explicit`, else the environment's path, else None (the default path); "off" passes through."""
    return explicit or os.environ.get(ENV) or None


def _target_identity(target) -> str | None:
    from ..isa.target import Target, get_target

    if isinstance(target, Target):
        return target.identity
    if target == "interp":
        return None
    try:
        return get_target(None if target == "x86" else target, check=False).identity
    except LoopstackError:
        return None


def tuned_actions(graph, target=None, db_path: str | None = None):
    """The best recorded action trace of `graph`'s program on `target`, or None."""
    path = configured_db_path(db_path)
    if path == OFF:
        return None
    if not os.path.exists(os.path.expanduser(path or DEFAULT_PATH)):
        return None
    identity = _target_identity(target)
    if identity is None:
        return None
    try:
        return best_schedule(program_key(graph), identity, path)
    except LoopstackError as e:     # a corrupt database: say so, and compile without it
        warnings.warn(f"{e}; compiling with the default schedule", stacklevel=2)
        return None


def tuned_schedule(graph, target=None, db_path: str | None = None):
    """The frontend LoopTree of the best recorded schedule, or None when there is none or its
    trace no longer replays (recorded by another version of the schedule primitives)."""
    from ..frontend.mutate import apply_actions
    from ..frontend.tree import LoopTree, default_schedule

    actions = tuned_actions(graph, target, db_path)
    if actions is None:
        return None
    try:
        return apply_actions(LoopTree(graph, default_schedule(graph)), actions)
    except LoopstackError:
        return None
