"""The TUI's state machine, apart from any terminal: tree, cursor, undo/redo, pane, prompt.

Every key arrives as a name (`"UP"`, `"S-DOWN"`, `"ENTER"`, `"BACKSPACE"`, `"ESC"`,
`"PGUP"`, `"PGDN"`, or the character typed) at `Session.key(name)`.  A schedule change
goes through `Session.change(label, fn)`: `fn(tree)` returns a new tree (the schedule
primitives are pure), the old one is pushed on the undo stack, the cursor is carried
across with `map_ref`, and the new tree is measured.  A primitive that refuses raises
a ScheduleError; its message becomes the status line, the tree stays as it was.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import loopstack as lt
from loopstack.errors import LoopstackError

from .measure import LONG_S, QUICK_S, Measurement, measure

KEYS = (   # (keys, what they do): the `?` pane
    ("Up/Down", "move the cursor (in drag mode: move the loop or node)"),
    ("Left/Right", "cursor to the parent / first child"),
    ("Enter", "toggle drag mode"),
    ("Shift+Up/Down, K/J", "swap with the neighbour above / below"),
    ("s", "split the loop (asks the factor); on a node: stage an input (copy)"),
    ("Backspace, m", "merge the loop into its parent; on a copy: delete it"),
    ("v  u  p", "toggle vectorize / unroll / parallel on the loop"),
    ("g  G", "toggle block / warp on the loop (a GPU target: the grid's CTAs, a CTA's warps)"),
    ("r  R", "decrease / increase the node's reuse of shared loops"),
    ("x  X", "toggle tensorize on a sum of products: its dot-product instruction / tile blocks (AMX)"),
    ("z  y", "undo / redo"),
    ("b", "benchmark longer (1 s)"),
    ("a  t", "pane: assembly of the innermost loop / schedule as text"),
    ("PgUp/PgDn", "scroll the pane"),
    ("w  o", "save the schedule to a file / load one"),
    ("?", "this list"),
    ("q", "quit and keep the schedule"),
)


@dataclass
class Prompt:
    label: str
    text: str
    submit: Callable[[str], None]


class Session:
    """One interactive tuning session over a frontend LoopTree."""

    def __init__(self, tree, name: str = "", measurer=None, path: str = "schedule.json",
                 quick_s: float = QUICK_S, long_s: float = LONG_S, busy=None, in_steps: bool = False):
        # in_steps: a schedule is built in steps whose trees need not compile (a GPU schedule,
        # one binding at a time): a change that does not compile is kept, its error shown
        self.in_steps = in_steps
        self.initial = tree
        self.tree = tree
        self.name = name
        self.cursor = 0
        self.drag = False
        self.undo_stack: list = []
        self.redo_stack: list = []
        self.message = ""
        self.error = False
        self.pane = ""               # "", "asm", "text" or "help"
        self.scroll = 0
        self.prompt: Prompt | None = None
        self.path = path
        self.done = False
        self.quick_s, self.long_s = quick_s, long_s
        self._busy = busy or (lambda text: None)   # shows "benchmarking..." while it runs
        self._measurer = measurer or (lambda t, seconds: measure(t, seconds))
        self.measurement: Measurement = Measurement()
        self.remeasure()

    # ------------------------------------------------------------------ status
    def say(self, text: str, error: bool = False) -> None:
        self.message, self.error = text, error

    def remeasure(self, seconds: float | None = None) -> None:
        s = self.quick_s if seconds is None else seconds
        self._busy(f"compiling and benchmarking for {s * 1e3:.0f} ms ...")
        try:
            self.measurement = self._measurer(self.tree, self.quick_s if seconds is None else seconds)
        except LoopstackError as e:    # a measurer that raises still never ends the session
            self.measurement = Measurement(error=str(e))
        if self.measurement.error:
            self.say(self.measurement.error, error=True)

    # ------------------------------------------------------------------ changes
    def change(self, label: str, fn, follow=None) -> bool:
        """Apply `fn(tree) -> tree`; the cursor goes to `follow(new, old)` or map_ref's choice."""
        old = self.tree
        try:
            new = fn(old)
            cursor = follow(new, old) if follow else lt.map_ref(new, self.cursor, old)
        except LoopstackError as e:
            self.say(str(e), error=True)
            return False
        before, old_cursor = self.measurement, self.cursor
        self.tree, self.cursor = new, cursor
        self.say(label)
        self.remeasure()
        if self.in_steps and self.measurement.error:
            self.say(f"{label}; {self.measurement.error}", error=True)
        elif self.measurement.error.startswith("compile:") and not before.error.startswith("compile:"):
            # the primitives refuse what the backend cannot compile; should one slip through,
            # the session still never shows a schedule that fails only when compiled
            failed = self.measurement.error
            self.tree, self.cursor, self.measurement = old, old_cursor, before
            self.say(f"{label}: refused, {failed}", error=True)
            return False
        self.undo_stack.append((old, old_cursor))
        self.redo_stack.clear()
        return True

    def _restore(self, src: list, dst: list, verb: str) -> None:
        if not src:
            self.say(f"nothing to {verb}", error=True)
            return
        dst.append((self.tree, self.cursor))
        self.tree, self.cursor = src.pop()
        self.say(f"{verb}: {len(self.undo_stack)} change(s) applied")
        self.remeasure()

    def undo(self) -> None:
        self._restore(self.undo_stack, self.redo_stack, "undo")

    def redo(self) -> None:
        self._restore(self.redo_stack, self.undo_stack, "redo")

    # ------------------------------------------------------------------ navigation and moves
    def _kind(self) -> str:
        return self.tree.kind(self.cursor)

    def move(self, delta: int) -> None:
        if self.drag:
            self.swap(delta)
            return
        r = self.tree.next_ref(self.cursor) if delta > 0 else self.tree.previous_ref(self.cursor)
        if r is not None:
            self.cursor = r
        self.say("")

    def to_parent(self) -> None:
        p = self.tree.parent(self.cursor)
        if p == -1:
            self.say("already at the outermost level")
        else:
            self.cursor = p
            self.say("")

    def to_child(self) -> None:
        ch = self.tree.children(self.cursor) if self._kind() == "loop" else []
        if ch:
            self.cursor = ch[0]
            self.say("")
        else:
            self.say("no inner loop or node")

    def _neighbour(self, delta: int):
        t, c = self.tree, self.cursor
        if delta < 0 and t.kind(c) == "loop" and t.parent(c) != -1:
            return t.parent(c)                 # a loop moves up past its parent
        return t.next_ref(c) if delta > 0 else t.previous_ref(c)

    def swap(self, delta: int) -> None:
        """Move the item at the cursor one place up or down (try_swap); the cursor follows it."""
        other = self._neighbour(delta)
        if other is None:
            self.say("nothing to swap with " + ("below" if delta > 0 else "above"), error=True)
            return
        c = self.cursor
        loop = self._kind() == "loop"

        def follow(new, old):
            return lt.map_ref(new, other if loop else c, old)

        self.change(f"swapped L{c} with L{other}", lambda t: t.try_swap(c, other), follow)

    def toggle_drag(self) -> None:
        self.drag = not self.drag
        self.say("drag mode: Up/Down move the loop or node, Enter ends" if self.drag else "drag mode off")

    # ------------------------------------------------------------------ primitives
    def split(self) -> None:
        c = self.cursor
        if self._kind() == "loop":
            v, size, tail = self.tree.item(c).entry
            self.ask(f"split L{c} ({v} in {size}{f' r {tail}' if tail else ''}) by: ",
                     lambda s: self._with_int(s, lambda f: self.change(
                         f"split L{c} by {f}", lambda t: t.split(c, f))))
            return
        node = self.tree.graph.node(self.tree.ir_node(c))
        n = len(node.inputs)
        if node.op in ("read", "write") or n == 0:
            self.say(f"%{node.id} is a {node.op}: only a compute node's inputs can be staged", error=True)
            return
        ins = ", ".join(f"{i}=%{x}" for i, x in enumerate(node.inputs))
        default = "0" if n == 1 else ""
        self.ask(f"stage input of %{node.id} ({ins}): ", lambda s: self._with_int(
            s, lambda i: self.change(f"staged input {i} of %{node.id}", lambda t: t.copy_input(c, i))),
            default)

    def _with_int(self, text: str, fn) -> None:
        try:
            v = int(text.strip())
        except ValueError:
            self.say(f"not a whole number: {text.strip()!r}", error=True)
            return
        fn(v)

    def merge_or_delete(self) -> None:
        c = self.cursor
        if self._kind() == "loop":
            self.change(f"merged L{c} into its parent", lambda t: t.merge(c))
        else:
            self.change(f"deleted the copy %{self.tree.item(c).node}", lambda t: t.delete_copy(c))

    def annotate(self, kind: str) -> None:
        c = self.cursor
        if self._kind() != "loop":
            self.say(f"L{c} is a node: {kind} applies to loops", error=True)
            return
        now = self.tree.item(c).annotation
        new = "" if now == kind else kind
        self.change(f"L{c}: {new or 'no annotation'}", lambda t: t.annotate(c, new))

    def tensorize(self, request: str = "auto") -> None:
        c = self.cursor
        if self._kind() != "node":
            self.say(f"L{c} is a loop: tensorize applies to a node (a sum of products)", error=True)
            return
        from .tensorize import toggle_tensorize

        label, fn = toggle_tensorize(self.tree, c, request)
        self.change(label, fn)

    def reuse(self, more: bool) -> None:
        c = self.cursor
        if self._kind() != "node":
            self.say(f"L{c} is a loop: move to a node to change its reuse", error=True)
            return
        if more:
            self.change(f"L{c}: reuse increased", lambda t: t.increase_reuse(c))
        else:
            self.change(f"L{c}: reuse decreased", lambda t: t.decrease_reuse(c))

    # ------------------------------------------------------------------ files
    def save(self, path: str) -> None:
        path = path.strip() or self.path
        try:
            with open(path, "w") as f:
                f.write(lt.serialize(self.tree))
        except OSError as e:
            self.say(f"cannot write {path}: {e.strerror or e}", error=True)
            return
        self.path = path
        self.say(f"saved {len(self.tree.actions)} action(s) to {path}")

    def load(self, path: str) -> None:
        path = path.strip() or self.path
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            self.say(f"cannot read {path}: {e.strerror or e}", error=True)
            return

        def replay(t):
            loaded = lt.deserialize(text)
            # replay the trace on this program: a schedule of another program fails or differs
            new = lt.apply_actions(self.initial, loaded.actions)
            if new != loaded:
                raise lt.ScheduleError(f"{path} schedules a different program")
            return new

        if self.change(f"loaded {path}", replay, follow=lambda new, old: 0):
            self.path = path

    # ------------------------------------------------------------------ prompt
    def ask(self, label: str, submit, default: str = "") -> None:
        self.prompt = Prompt(label, default, submit)
        self.say("")

    def _prompt_key(self, k: str) -> None:
        p = self.prompt
        if k == "ENTER":
            self.prompt = None
            p.submit(p.text)
        elif k == "ESC":
            self.prompt = None
            self.say("cancelled")
        elif k == "BACKSPACE":
            p.text = p.text[:-1]
        elif k == "\x15":                   # Ctrl-U, as in a shell: clear the line
            p.text = ""
        elif len(k) == 1 and k.isprintable():
            p.text += k

    # ------------------------------------------------------------------ keys
    def key(self, k: str) -> None:
        """Handle one key; never raises a LoopstackError."""
        if self.prompt is not None:
            self._prompt_key(k)
            return
        simple = {
            "UP": lambda: self.move(-1), "DOWN": lambda: self.move(1),
            "LEFT": self.to_parent, "RIGHT": self.to_child,
            "S-UP": lambda: self.swap(-1), "S-DOWN": lambda: self.swap(1),
            "K": lambda: self.swap(-1), "J": lambda: self.swap(1),
            "ENTER": self.toggle_drag, "s": self.split,
            "BACKSPACE": self.merge_or_delete, "m": self.merge_or_delete,
            "v": lambda: self.annotate("vectorize"), "u": lambda: self.annotate("unroll"),
            "p": lambda: self.annotate("parallel"),
            "g": lambda: self.annotate("block"), "G": lambda: self.annotate("warp"),
            "r": lambda: self.reuse(False), "R": lambda: self.reuse(True),
            "x": self.tensorize, "X": lambda: self.tensorize("amx"),
            "z": self.undo, "y": self.redo, "b": self.long_bench,
            "a": lambda: self.toggle_pane("asm"), "t": lambda: self.toggle_pane("text"),
            "?": lambda: self.toggle_pane("help"),
            "PGUP": lambda: self.scroll_pane(-8), "PGDN": lambda: self.scroll_pane(8),
            "w": lambda: self.ask("save schedule to: ", self.save, self.path),
            "o": lambda: self.ask("load schedule from: ", self.load, self.path),
            "q": self.quit, "ESC": self.close_pane, "RESIZE": lambda: None,
        }
        fn = simple.get(k)
        if fn is None:
            self.say(f"no action for key {k!r} (? lists the keys)", error=True)
            return
        try:
            fn()
        except LoopstackError as e:      # a primitive's refusal outside change(): still shown
            self.say(str(e), error=True)

    def long_bench(self) -> None:
        self.remeasure(self.long_s)
        m = self.measurement
        if m.predicted:
            self.say(f"nothing to time: no GPU here; the model predicts {m.rate()}")
        elif not m.error:
            self.say(f"benchmark: {m.runs} runs in {m.seconds:.2f} s, best {m.rate()}")

    def toggle_pane(self, pane: str) -> None:
        self.pane = "" if self.pane == pane else pane
        self.scroll = 0
        self.say("")

    def close_pane(self) -> None:
        self.pane = ""
        self.drag = False

    def scroll_pane(self, by: int) -> None:
        self.scroll = max(0, self.scroll + by)

    def quit(self) -> None:
        self.done = True
