"""The scheduling TUI: its state machine without a terminal, and the real program in a pty.

The pty tests start `python -m loopstack tui MM-256` (and `lt.ui(tensor)`) in an 80x24
pseudo-terminal with pexpect, feed keys, and read the screen back through pyte.
"""
import json
import os
import re
import sys
import time

import numpy as np
import pytest

import loopstack as lt
from tui.measure import Measurement, innermost_asm
from tui.roofline import roofline
from tui.screen import as_text, layout
from tui.state import Session

ROWS, COLS = 24, 80
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def matmul(n=64, seed=0):
    rng = np.random.default_rng(seed)
    s = lt.SymbolGenerator()
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
    return C, a, b


def fake_measure(tree, seconds):
    """A measurement without compiling: the tests of the state machine stay fast."""
    return Measurement(flops=2 * 64 ** 3, bytes_moved=3 * 64 * 64 * 4, compile_ms=1.0, gflops=10.0 + len(tree),
                       runs=3, seconds=seconds, peak=100.0, bandwidth=20.0, target="avx2",
                       buffers=(("out", (64, 64), 64 * 64 * 4, "output"),), asm="L0_top:\n  0  c3  ret\n")


def session(**kw):
    C, _, _ = matmul(256)
    return Session(C.loop_tree, name="MM-64", measurer=fake_measure, **kw)


def keys(s, *names):
    for k in names:
        s.key(k)
    return s


# ---------------------------------------------------------------------------- the state machine

def test_split_move_stage_undo_redo():
    s = session()
    keys(s, "DOWN", "DOWN", "s", "1", "6", "ENTER")
    assert "for n in 16 : L2\n   for n' in 16 : L3" in str(s.tree) and s.message == "split L2 by 16"
    assert s.tree.kind(s.cursor) == "loop" and s.cursor == 2
    keys(s, "S-UP")                          # n (16) above k; the cursor follows it
    assert str(s.tree).startswith("for m in 256 : L0\n for n in 16 : L1\n  for k in 256 : L2")
    assert s.cursor == 1
    node = s.tree.ref_of(2)                  # the multiply: stage its input B
    s.cursor = node
    keys(s, "s", "1", "ENTER")
    assert "copy(%1)" in str(s.tree) and not s.error
    keys(s, "z")
    assert "copy" not in str(s.tree)
    keys(s, "y")
    assert "copy(%1)" in str(s.tree)
    keys(s, "z", "z", "z")
    assert s.tree == s.initial
    keys(s, "z")
    assert s.error and "nothing to undo" in s.message


def test_drag_mode_moves_the_loop():
    s = session()
    keys(s, "DOWN", "ENTER")                 # drag k
    assert s.drag
    keys(s, "DOWN")                          # k below n
    assert [it.entry[0] for it in s.tree.items if it.kind == "loop"][:3] == ["m", "n", "k"]
    assert s.tree.item(s.cursor).entry[0] == "k"
    keys(s, "UP", "UP")                      # k to the top
    assert s.tree.item(0).entry[0] == "k" and s.cursor == 0
    keys(s, "ENTER", "DOWN")
    assert not s.drag and s.cursor == 1


def test_illegal_moves_are_shown_never_raised():
    s = session()
    before = s.tree
    keys(s, "DOWN", "p")                     # k is a reduction loop
    assert s.error and "cannot parallelize loop k" in s.message and s.tree == before
    keys(s, "s", "9", "9", "9", "ENTER")
    assert s.error and "factor 999 exceeds" in s.message
    keys(s, "s", "x", "ENTER")
    assert s.error and "not a whole number" in s.message
    keys(s, "BACKSPACE")
    assert s.error and "not a loop over k" in s.message
    keys(s, "UP", "S-UP")
    assert s.error and "nothing to swap with above" in s.message
    s.cursor = s.tree.ref_of(3)
    keys(s, "BACKSPACE")
    assert s.error and "not a staging copy" in s.message
    s.cursor = s.tree.ref_of(2)              # the multiply is the first node: it shares nothing
    keys(s, "r")
    assert s.error and "shares no loop with an earlier node" in s.message
    keys(s, "R")
    assert s.error and "no disabled reuse" in s.message
    keys(s, "v")
    assert s.error and "applies to loops" in s.message
    keys(s, "%")
    assert s.error and "no action for key" in s.message
    assert s.tree == before and s.undo_stack == []
    layout(s, ROWS, COLS)                    # and it still draws


def test_annotations_toggle_and_reuse():
    s = session()
    keys(s, "DOWN", "DOWN", "v")
    assert "[vectorize]" in str(s.tree)
    keys(s, "v")
    assert "[vectorize]" not in str(s.tree)
    keys(s, "u")
    assert "[unroll]" in str(s.tree)
    s.cursor = s.tree.ref_of(3)              # the add: stop sharing the n loop with the multiply
    keys(s, "r")
    assert not s.error and len(s.tree.loops) > len(s.initial.loops)
    keys(s, "R")
    assert not s.error


def test_prompt_escape_cancels(tmp_path):
    s = session()
    keys(s, "s", "4", "ESC")
    assert s.prompt is None and s.tree == s.initial and s.message == "cancelled"


def test_save_and_load(tmp_path):
    path = str(tmp_path / "mm.json")
    s = session(path=path)
    keys(s, "DOWN", "DOWN", "s", "8", "ENTER", "w", "ENTER")
    assert "saved 1 action" in s.message
    assert json.load(open(path))["actions"] == [["split", [2, 8]]]
    saved = s.tree
    keys(s, "z", "o", "ENTER")
    assert s.tree == saved and "loaded" in s.message
    keys(s, "o", *("BACKSPACE",) * len(path), *"/nonexistent/x.json", "ENTER")
    assert s.error and "cannot read" in s.message
    other = tmp_path / "other.json"          # a schedule of another program
    D, _, _ = matmul(32)
    other.write_text(lt.serialize(D.loop_tree.split(0, 4)))
    keys(s, "o", "\x15", *str(other), "ENTER")   # Ctrl-U clears the prompt
    assert s.error and ("different program" in s.message or "exceeds" in s.message)


def test_screen_fits_80x24_with_every_pane():
    s = session()
    keys(s, "DOWN", "DOWN", "s", "4", "ENTER")
    for pane in ("", "a", "t", "?"):
        if pane:
            keys(s, pane)
        lines = as_text(layout(s, ROWS, COLS))
        assert len(lines) == ROWS and all(len(ln) <= COLS for ln in lines), lines
        assert any("GFLOPS" in ln for ln in lines) and any("% of peak" in ln for ln in lines)
        assert any(ln.startswith(">") for ln in lines)        # the cursor line
    keys(s, "?")
    s.say("x " * 60, error=True)             # a long error wraps over the help bar
    lines = as_text(layout(s, ROWS, COLS))
    assert lines[-2].startswith("error: x") and lines[-1].startswith("x")
    assert as_text(layout(s, 5, 20))[0] == "terminal too small"


def test_roofline_and_asm_helpers():
    lines = roofline(42.7, 90.0, 100.0, 20.0, width=32, height=5)
    assert len(lines) == 7 and all(len(ln) <= 32 for ln in lines)
    assert "*" in lines[0] and "/" in "".join(lines)
    low = roofline(0.25, 2.0, 100.0, 20.0, width=32, height=5)
    assert "*" in "".join(low[1:5])
    listing = ("L0_top:\n     0  c5 fc 10 02     vmovups ymm0, ymmword ptr [rdx]\nL1_top:\n"
               "     4  c4 e2 7d b8 c1  vfmadd231ps ymm0, ymm0, ymm1\n     9  75 f9     jne L1_top\n"
               "     b  75 f0     jne L0_top\n")
    assert innermost_asm(listing) == ["L1_top:", "     4 vfmadd231ps ymm0, ymm0, ymm1", "     9 jne L1_top"]


def test_measure_reports_compile_errors_instead_of_raising(monkeypatch):
    from tui import measure as M

    C, _, _ = matmul(16)

    def broken(self, target=None):
        raise lt.UnsupportedError("no backend for this")

    monkeypatch.setattr(type(C.loop_tree), "compile", broken)
    m = M.measure(C.loop_tree, 0.01)
    assert m.error.startswith("compile: no backend") and m.flops == 2 * 16 ** 3
    s = Session(C.loop_tree, measurer=lambda t, sec: M.measure(t, sec))
    assert s.error and "no backend" in s.message
    assert any("see status" in ln for ln in as_text(layout(s, ROWS, COLS)))


def test_a_cross_compiled_target_is_listed_not_run():
    """--target neon on a host that cannot run it: the session shows the AArch64 listing and says
    why there is no measurement (a host that runs it measures it)."""
    from loopstack.isa.target import host_arch
    from tui import measure as M

    if host_arch() == "aarch64":
        pytest.skip("this host runs neon: measured like the host's own target")
    C, _, _ = matmul(16)
    m = M.measure(C.loop_tree, 0.01, target="neon")
    assert "fmla" in m.asm and m.flops == 2 * 16 ** 3
    assert m.error.startswith("run:") and "cannot run" in m.error
    loop = innermost_asm(m.asm)              # the hot loop of the AArch64 listing, as on x86
    assert loop[0].endswith("_top:") and loop[-1].split()[1] == "b.ne"
    assert any("fmla" in ln for ln in loop) and len(loop) < len(m.asm.splitlines())


# ---------------------------------------------------------------------------- the real program in a pty

try:
    import pexpect
    import pyte
except ImportError as e:      # only the pty tests need them
    pexpect = pyte = None
    PTY_MISSING = f"pexpect and pyte drive the TUI in a pty: {e}"
else:
    PTY_MISSING = "" if hasattr(os, "openpty") else "this platform has no pseudo-terminals"
needs_pty = pytest.mark.skipif(bool(PTY_MISSING), reason=PTY_MISSING or "-")

KEYS = {"UP": "\x1b[A", "DOWN": "\x1b[B", "LEFT": "\x1b[D", "RIGHT": "\x1b[C", "S-UP": "\x1b[1;2A",
        "S-DOWN": "\x1b[1;2B", "ENTER": "\r", "BACKSPACE": "\x7f"}


class Terminal:
    """A program in an 80x24 pty, its screen kept by pyte."""

    def __init__(self, argv, term="xterm-256color", cwd=ROOT):
        env = dict(os.environ, TERM=term, LINES=str(ROWS), COLUMNS=str(COLS), PYTHONPATH=ROOT)
        env.pop("NO_COLOR", None)
        try:
            self.child = pexpect.spawn(argv[0], argv[1:], dimensions=(ROWS, COLS), env=env, cwd=cwd,
                                       encoding="utf-8", codec_errors="replace", timeout=20)
        except (OSError, pexpect.ExceptionPexpect) as e:
            pytest.skip(f"no pseudo-terminal here: {e}")
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.Stream(self.screen)
        self.raw = ""

    def pump(self, quiet=0.3, limit=15.0):
        """Read until the program has been quiet for `quiet` seconds."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            try:
                data = self.child.read_nonblocking(65536, timeout=quiet)
            except pexpect.TIMEOUT:
                return
            except pexpect.EOF:
                return
            self.raw += data
            self.stream.feed(data)

    def text(self):
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait_for(self, pattern, limit=20.0):
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if re.search(pattern, self.text()):
                return self.text()
            self.pump(quiet=0.1, limit=0.5)
        raise AssertionError(f"{pattern!r} never appeared; the screen:\n{self.text()}")

    def send(self, *names, until=None):
        """Type `names`; then wait for `until` (a regex) to show and for no benchmark to be running."""
        for k in names:
            self.child.send(KEYS.get(k, k))
            self.pump(quiet=0.05, limit=0.5)
        if until is not None:
            self.wait_for(until)
        end = time.monotonic() + 20
        while "benchmarking" in self.text() and time.monotonic() < end:
            self.pump(quiet=0.1, limit=0.5)
        self.pump(quiet=0.2)
        return self.text()

    def finish(self):
        self.child.expect(pexpect.EOF, timeout=20)
        self.raw += self.child.before or ""
        self.child.close()
        return self.child.exitstatus


@needs_pty
def test_tui_program_on_matmul(tmp_path):
    save = str(tmp_path / "mm.json")
    t = Terminal([sys.executable, "-m", "loopstack", "tui", "MM-256", "--save", save])
    screen = t.wait_for(r"GFLOPS +\d+\.\d")
    assert "loopstack tui  MM-256" in screen
    assert ">for m in 256 : L0" in screen and "  for k in 256 : L1" in screen
    assert re.search(r"% of peak +\d+\.\d%", screen) and "intensity" in screen
    lines = screen.splitlines()
    assert len(lines) == ROWS and max(len(ln) for ln in lines) <= COLS
    # split n by 16
    screen = t.send("DOWN", "DOWN", "s", until="by: _")
    assert "split L2 (n in 256) by:" in screen
    screen = t.send("1", "6", "ENTER", until="split L2 by 16")
    assert ">  for n in 16 : L2" in screen and "    for n' in 16 : L3" in screen
    assert "split L2 by 16" in screen
    # move it above k (Shift+Up), then drag k back below it with Enter + Down and out again
    screen = t.send("S-UP", until="swapped L2 with L1")
    assert "> for n in 16 : L1" in screen and "   for k in 256 : L2" in screen
    screen = t.send("ENTER", until=r"\[DRAG\]")
    assert "[DRAG]" in screen
    screen = t.send("UP", "ENTER", until="drag mode off")
    assert ">for n in 16 : L0" in screen and "  for m in 256 : L1" in screen
    # an illegal move: its message, no crash
    screen = t.send("DOWN", "DOWN", "p", until="error: ")
    assert "error: annotate L2: cannot parallelize loop k" in screen
    assert re.search(r"\x1b\[(3\d|38;5;\d+)m", t.raw), "no colours on a terminal that has them"
    # stage B for the multiply, then undo it
    screen = t.send("DOWN", "DOWN", "s", "1", "ENTER", until="staged input")
    assert "%5[k,n] <- copy(%1)" in screen and "staged input 1 of %2" in screen
    screen = t.send("z", until="undo: ")
    assert "copy(%1)" not in screen and "undo: 3 change(s) applied" in screen
    assert re.search(r"GFLOPS +\d+\.\d", screen)
    screen = t.send("a", until="assembly: ")
    assert "assembly: innermost loop" in screen and "vfmadd231ps" in screen
    t.child.send("q")
    assert t.finish() == 0
    assert "actions: split(2, 16), try_swap(2, 1), try_swap(1, 0)" in t.raw
    assert "checked against numpy: max abs error" in t.raw
    tree = lt.deserialize(open(save).read())
    assert str(tree).startswith("for n in 16 : L0\n for m in 256 : L1\n  for k in 256 : L2\n   for n' in 16 : L3")


@needs_pty
def test_tui_program_on_a_gpu_target():
    """--target sm_90: the PTX kernel's knobs and registers, the model's figure where no GPU is
    (a timing where one is), a binding kept while the schedule is incomplete, the PTX pane, and
    on quit the kernel checked against numpy (in the interpreter, or on the GPU)."""
    from loopstack.isa.ptx import driver

    t = Terminal([sys.executable, "-m", "loopstack", "tui", "MM-64", "--target", "sm_90", "--allow-tf32"])
    screen = t.wait_for(r"TFLOPS +\d+\.\d")
    assert "loopstack tui  MM-64  sm_90" in screen and "mma   m16n8k8 tf32" in screen
    assert re.search(r"warps \dx\d, tiles \dx\d", screen) and "TF/s" in screen
    if not driver.available():
        assert "predicted" in screen and "no GPU here: the model's figure" in screen
    screen = t.send("g", until="error: ")
    assert ">for m in 64 : L0 [block]" in screen and "no loop over n is bound to blocks" in screen
    screen = t.send("z", until="undo: ")
    assert re.search(r"^>for m in 64 : L0 +\|", screen, re.M) and "[block]" not in screen
    screen = t.send("a", until="PTX: innermost loop")
    assert "$L_k_" in screen and "cp.async" in screen
    t.child.send("q")
    assert t.finish() == 0
    assert re.search(r"MM-64: \d+\.\d TFLOPS", t.raw)
    assert "checked against numpy (" in t.raw and "max abs error" in t.raw
    err = float(t.raw.split("max abs error", 1)[1].split()[0])
    assert err < 0.5                      # TF32 products summed over k = 64 of standard normals


UI_SCRIPT = """
import numpy as np, loopstack as lt
rng = np.random.default_rng(0)
a = rng.standard_normal((48, 32)).astype(np.float32); b = rng.standard_normal((32, 40)).astype(np.float32)
s = lt.SymbolGenerator()
C = (lt.Tensor(a).to(s.m, s.k) * lt.Tensor(b).to(s.k, s.n)).sum(s.k)
D = lt.ui(C)
assert D is C
print("RESULT", lt.serialize(D.loop_tree).replace(chr(10), " "))
print("ERROR", float(np.abs(D.numpy() - a @ b).max()))
"""


@needs_pty
def test_lt_ui_returns_the_scheduled_tensor_without_colours_on_vt100():
    t = Terminal([sys.executable, "-c", UI_SCRIPT], term="vt100")
    t.wait_for(r"GFLOPS +\d+\.\d")
    screen = t.send("s", "4", "ENTER", until="split L0 by 4")
    assert ">for m in 12 : L0" in screen and "  for m' in 4 : L1" in screen
    t.child.send("q")
    assert t.finish() == 0
    assert not re.search(r"\x1b\[(3\d|4\d|38;5;\d+)m", t.raw), "colour escapes on a terminal without colours"
    doc = json.loads(t.raw.split("RESULT", 1)[1].split("\n", 1)[0])
    assert doc["actions"] == [["split", [0, 4]]]
    assert float(t.raw.split("ERROR", 1)[1].split()[0]) < 1e-3


def test_a_change_that_would_not_compile_is_refused_and_the_tree_kept():
    """Should a primitive accept a tree the backend cannot compile, the session refuses the
    change, keeps the schedule it had and says why; it never shows a tree that fails late."""
    def measure_refusing_splits(tree, seconds):
        if any(a.kind == "split" for a in tree.actions):
            return Measurement(error="compile: loop L2 cannot be vectorized")
        return fake_measure(tree, seconds)

    C, _, _ = matmul(64)
    s = Session(C.loop_tree, measurer=measure_refusing_splits)
    before = s.tree
    s.cursor = 2
    keys(s, "s", "4", "ENTER")
    assert s.tree is before and s.error
    assert "refused, compile: loop L2 cannot be vectorized" in s.message
    assert not s.undo_stack and s.measurement.error == ""
    keys(s, "u")                               # other changes still go through
    assert "[unroll]" in str(s.tree) and not s.error
