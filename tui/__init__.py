"""The interactive scheduling TUI (paper §6.2): `loopstack tui WORKLOAD` or `lt.ui(tensor)`.

    state.py     Session: tree, cursor, undo/redo, prompt, pane; every key as a pure transition
    measure.py   compile + benchmark for a bounded time, the peak, the innermost loop's assembly
    gpu.py       the same for a GPU target: the PTX, its knobs and registers, timed or predicted
    roofline.py  the text roofline
    screen.py    the screen as data (layout) and its curses painting
    app.py       the curses loop and key names
    command.py   the `loopstack tui` subcommand
"""
from __future__ import annotations


def ui(tensor, path: str = "schedule.json", colors: bool = True, target=None):
    """Tune `tensor`'s schedule interactively (for `target`: the host's by default, or another
    CPU's, or a GPU's, "sm_90" or a GpuTarget); returns the tensor with the chosen schedule set."""
    from .app import run

    session = run(tensor.loop_tree, name="", path=path, colors=colors, target=target)
    tensor.set(session.tree)
    return tensor
