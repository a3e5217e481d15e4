"""loopstack: a tensor compiler in pure Python that emits machine code directly."""
from .errors import (  # noqa: F401
    ArgumentError, BoundsError, DTypeError, EncodingError, LoopstackError, ScheduleError,
    ShapeError, SymbolError, UnsupportedError,
)
from .frontend import (  # noqa: F401
    Action, Expr, LoopTree, Size, Symbol, SymbolGenerator, Tensor, abs, apply_actions, deserialize,
    einsum, erf, exp, log, map_ref, neg, nn, reciprocal, serialize, sqrt, symbols,
)
from . import onnx  # noqa: F401,E402 - lt.onnx.load / compile; the onnx package loads on first use
from .frontend.run import add_schedule_source as _add_schedule_source
from .frontend.run import default_target  # noqa: F401

Var = Symbol  # the paper's spelling (Fig. 2)
__version__ = "0.1.0"


def _tuned_schedule(graph, target):
    # imported on first use: `import loopstack` stays light
    from .tune.lookup import tuned_schedule

    return tuned_schedule(graph, target)


# tensors with no schedule of their own compile with the tuning database's best one
_add_schedule_source(_tuned_schedule)


def compile(tensor_or_tree, target=None):  # noqa: A001 - the natural name
    """A Kernel for a Tensor (its current schedule) or a frontend LoopTree."""
    if isinstance(tensor_or_tree, LoopTree):
        return tensor_or_tree.compile(target)
    return tensor_or_tree.compile(target)


def ui(tensor, path: str = "schedule.json", target=None):
    """The interactive scheduling TUI (paper §6.2) on `tensor`; returns it with the chosen schedule.
    `target`: the host's CPU by default, or another ("neon": listed, not run), or a GPU's
    ("sm_90", or GpuTarget.of("sm_90", allow_tf32=True)): timed where a GPU is, else predicted."""
    from tui import ui as _ui

    return _ui(tensor, path=path, target=target)


# The subpackage is imported before `tune` is defined: importing it later (any compile looks up
# loopstack.tune.lookup) would otherwise rebind `loopstack.tune` from this function to the package.
from . import tune as _tune_package  # noqa: E402,F401


def tune(tensor, budget_s=60, mapper="scripted", cost_model="measure", workers=1, **kw):
    """Search schedules for `tensor` (see loopstack.tune.api.tune); returns a TuneResult.
    A GPU target ("sm_80", "sm_90") searches the tensor-core knobs (loopstack.tune.gpu)."""
    if isinstance(kw.get("target"), str) and kw["target"].startswith("sm_"):
        from .tune.gpu import tune_gpu
        return tune_gpu(tensor, target=kw.pop("target"), **kw)
    from .tune.api import tune as _tune

    return _tune(tensor, budget_s=budget_s, mapper=mapper, cost_model=cost_model, workers=workers, **kw)
