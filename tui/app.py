"""The curses loop: read a key, name it, hand it to the Session, redraw.

Everything the keys do lives in `state.Session`; everything drawn comes from
`screen.layout`.  This module only talks to the terminal.
"""
from __future__ import annotations

import curses

from .measure import measure
from .screen import draw, styles
from .state import Session

_NAMED = {
    curses.KEY_UP: "UP", curses.KEY_DOWN: "DOWN", curses.KEY_LEFT: "LEFT", curses.KEY_RIGHT: "RIGHT",
    curses.KEY_SR: "S-UP", curses.KEY_SF: "S-DOWN", curses.KEY_ENTER: "ENTER",
    curses.KEY_BACKSPACE: "BACKSPACE", curses.KEY_DC: "BACKSPACE", curses.KEY_PPAGE: "PGUP",
    curses.KEY_NPAGE: "PGDN", curses.KEY_RESIZE: "RESIZE",
}
# terminfo names some terminals use for Shift+Up/Down instead of kri/kind
_KEYNAMES = {b"kUP": "S-UP", b"kUP2": "S-UP", b"kDN": "S-DOWN", b"kDN2": "S-DOWN"}
# xterm's modified-cursor sequences, for when terminfo does not decode them
_ESCAPES = {"[1;2A": "S-UP", "[1;2B": "S-DOWN", "[a": "S-UP", "[b": "S-DOWN",
            "[A": "UP", "[B": "DOWN", "[C": "RIGHT", "[D": "LEFT", "OA": "UP", "OB": "DOWN"}


def key_name(ch, read_more=None) -> str:
    """A curses key (str from get_wch, or int) as a Session key name."""
    if isinstance(ch, int):
        if ch in _NAMED:
            return _NAMED[ch]
        try:
            name = curses.keyname(ch)
        except (ValueError, curses.error):
            name = b""
        return _KEYNAMES.get(name, name.decode(errors="replace") or f"key{ch}")
    if ch in ("\n", "\r"):
        return "ENTER"
    if ch in ("\x7f", "\b"):
        return "BACKSPACE"
    if ch == "\x1b":
        rest = read_more() if read_more else ""
        return _ESCAPES.get(rest, "ESC")
    return ch


def _read_escape(stdscr) -> str:
    """The characters already waiting after an ESC (an escape sequence), without blocking."""
    stdscr.nodelay(True)
    out = ""
    try:
        while len(out) < 8:
            try:
                c = stdscr.get_wch()
            except curses.error:
                break
            if not isinstance(c, str):
                break
            out += c
    finally:
        stdscr.nodelay(False)
    return out


def _loop(stdscr, tree, name: str, path: str, colors: bool, target=None) -> Session:
    try:
        curses.curs_set(0)
    except curses.error:
        pass
    try:
        curses.set_escdelay(25)
    except (AttributeError, curses.error):
        pass
    stdscr.keypad(True)
    attrs = styles(curses) if colors else styles(_NoColour(curses))

    def busy(text: str) -> None:
        rows, cols = stdscr.getmaxyx()
        try:
            stdscr.move(rows - 2, 0)
            stdscr.clrtoeol()
            stdscr.addstr(rows - 2, 0, text[:cols - 1], attrs["prompt"])
        except curses.error:
            pass
        stdscr.refresh()

    from loopstack.backend import is_gpu_target

    measurer = None if target is None else (lambda t, seconds: measure(t, seconds, target=target))
    session = Session(tree, name=name, path=path, busy=busy, measurer=measurer, in_steps=is_gpu_target(target))
    while not session.done:
        draw(stdscr, session, attrs)
        try:
            ch = stdscr.get_wch()
        except KeyboardInterrupt:
            session.say("Ctrl-C: q quits and keeps the schedule", error=True)
            continue
        except curses.error:
            continue
        session.key(key_name(ch, lambda: _read_escape(stdscr)))
    return session


class _NoColour:
    """The curses module, except that it reports no colours (for --no-color)."""

    def __init__(self, mod):
        self._mod = mod

    def __getattr__(self, name):
        return getattr(self._mod, name)

    @staticmethod
    def has_colors() -> bool:
        return False


def run(tree, name: str = "", path: str = "schedule.json", colors: bool = True, target=None) -> Session:
    """Run the TUI on a frontend LoopTree until `q`; the Session holds the chosen tree. A target
    this host cannot run (neon on x86) is compiled and listed, not benchmarked."""
    return curses.wrapper(_loop, tree, name, path, colors, target)
