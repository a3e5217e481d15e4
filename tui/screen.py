"""What the screen shows, as plain data: `layout(session, rows, cols)` -> rows of
(column, text, style) segments.  `draw()` paints that with curses; tests read it as text.

     0 | title: workload, target, mode                                     |
       | loop tree (cursor line highlighted)    | status: FLOPs, bytes,    |
       |                                        | intensity, compile ms,   |
       |                                        | GFLOPS, % of peak,       |
       |                                        | roofline                 |
       | ------- pane (a: assembly, t: schedule, ?: keys), when open ---- |
  -2   | status line: the last change, an error, or a prompt              |
  -1   | help bar                                                         |
"""
from __future__ import annotations

from .measure import innermost_asm
from .roofline import roofline
from .state import KEYS, Session

PANEL_W = 32
HELP_BAR = "?:keys Enter:drag s:split Bksp:merge v/u/p r/R z:undo y:redo a:asm t:text q:quit"
HELP_SHORT = "?:keys  Enter:drag  s:split  z:undo  q:quit"


def human(n: float, unit: str = "") -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {suffix}{unit}"
    return f"{n:.0f} {unit}".rstrip()


def kib(n: int) -> str:
    for scale, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if n >= scale:
            v = n / scale
            return f"{v:.0f}{suffix}" if v >= 10 or v == int(v) else f"{v:.1f}{suffix}"
    return f"{n}B"


def buffer_of(session: Session, node_id: int) -> str:
    """The buffer a node writes and its allocation size, or how it avoids one."""
    g = session.tree.graph
    n = g.node(node_id)
    bufs = {name: size for name, _, size, _ in session.measurement.buffers}
    if n.op == "write" or node_id == g.output.inputs[0]:
        return f"out {kib(bufs['out'])}" if "out" in bufs else "out"
    name = f"t{node_id}"
    if name in bufs:
        return f"{name} {kib(bufs[name])}"
    return "fused" if bufs else ""


def tree_lines(session: Session) -> list[tuple[str, int]]:
    """(text, ref) for each loop and node, loop_tool style, one space per level; the cursor's
    line starts with `>` (it is also highlighted) so that it shows without attributes too."""
    t = session.tree
    out = []
    for it in t.items:
        pad = (">" if it.ref == session.cursor else " ") + " " * it.depth
        if it.kind == "loop":
            text = pad + t.loop_line(it)
        else:
            n = t.graph.node(it.node)
            text = f"{pad}{str(n).replace(', ', ',')}"
            buf = buffer_of(session, it.node)
            if buf:
                text += f"  {buf}"
        out.append((text, it.ref))
    return out


def status_lines(session: Session) -> list[tuple[str, str]]:
    """(text, style) lines of the status panel."""
    m = session.measurement
    lines = [
        (f"FLOPs       {human(m.flops)}", ""),
        (f"bytes moved {human(m.bytes_moved, 'B')}", ""),
        (f"intensity   {m.intensity:.2f} flop/B", ""),
        (f"compile     {m.compile_ms:.1f} ms", ""),
    ]
    peak = f"peak {m.target:<6} {m.peak / m.scale:.1f} {m.unit}"
    if m.error:
        lines.append((f"{m.unit:<11} -  (see status)", "error"))
        lines.append((peak, ""))
        lines.append(("% of peak   -", ""))
    else:
        style = "good" if m.of_peak >= 80 else "warn" if m.of_peak >= 30 else "bad"
        lines.append((f"{m.unit:<11} {m.gflops / m.scale:.1f}" + ("  predicted" if m.predicted else ""), style))
        lines.append((peak, ""))
        bar = round(min(m.of_peak, 100) / 10)
        lines.append((f"% of peak   {m.of_peak:4.1f}% [{'#' * bar}{'.' * (10 - bar)}]", style))
    if m.predicted:
        lines.append(("no GPU here: the model's figure", "dim"))
    else:
        lines.append((f"bench       {m.seconds * 1e3:.0f} ms, {m.runs} runs", "dim"))
    lines += [(d, "warn" if "SPILLS" in d else "dim") for d in m.details]
    lines.append((cursor_line(session), "dim"))
    return lines


def cursor_line(session: Session) -> str:
    """What the cursor is on, in full (a tree line may be cut)."""
    t, c = session.tree, session.cursor
    it = t.item(c)
    if it.kind == "node":
        n = t.graph.node(it.node)
        # nodes carry no L label in the tree, so name the node itself, not its ref
        return f"at %{n.id}: {n.fn or n.op} {buffer_of(session, it.node)}".rstrip()
    from loopstack.frontend.tree import steps

    step = steps(t.node_schedule(it.leaves[0]).order)[it.depth]
    return f"at L{c}: {t.loop_name(c)} x{it.entry[1]}, step {step}"


def pane_lines(session: Session, width: int) -> tuple[str, list[str]]:
    if session.pane == "asm":
        m = session.measurement
        body = innermost_asm(m.asm) if m.asm else [m.error or "(no code)"]
        return f"{m.listing}: innermost loop (a closes)", body
    if session.pane == "text":
        acts = [str(a) for a in session.tree.actions] or ["(no actions: the default schedule)"]
        kernel = session.measurement.kernel_text
        return "schedule: actions from the default (t closes)", (
            acts + [""] + str(session.tree).splitlines()
            + (["", "the GPU kernel:"] + kernel.splitlines() if kernel else []))
    return "keys (? closes)", [f"{k:<19} {v}" for k, v in KEYS]


def layout(session: Session, rows: int, cols: int) -> list[list[tuple[int, str, str]]]:
    screen: list[list] = [[] for _ in range(rows)]
    if rows < 6 or cols < 30:
        screen[0].append((0, "terminal too small"[:cols], "error"))
        return screen
    m = session.measurement
    mode = "  [DRAG]" if session.drag else ""
    title = f" loopstack tui  {session.name}  {m.target}{mode}"
    screen[0].append((0, title[:cols].ljust(cols), "title"))
    body_top, body_end = 1, rows - 2            # body rows [body_top, body_end)
    pane = session.pane
    if pane:
        top_h = min(max(5, (body_end - body_top) // 2 - 1), len(status_lines(session)))
        top_h = max(top_h, 5)
    else:
        top_h = body_end - body_top
    panel = cols >= 60
    tree_w = cols - PANEL_W - 1 if panel else cols
    # the tree, scrolled to keep the cursor visible
    lines = tree_lines(session)
    first = 0
    cur_row = next((i for i, (_, ref) in enumerate(lines) if ref == session.cursor), 0)
    if cur_row >= top_h:
        first = cur_row - top_h + 1
    for i, (text, ref) in enumerate(lines[first:first + top_h]):
        style = ("drag" if session.drag else "cursor") if ref == session.cursor else ""
        if len(text) > tree_w:
            text = text[:tree_w - 1] + ">"
        screen[body_top + i].append((0, text.ljust(tree_w) if style else text, style))
    if panel:
        x = tree_w + 1
        right = status_lines(session)
        if not pane:
            right.append(("", ""))
            right += [(ln, "dim") for ln in roofline(m.intensity, 0 if m.error else m.gflops / m.scale,
                                                     m.peak / m.scale, m.bandwidth / m.scale, PANEL_W, 5,
                                                     unit=m.unit[0] + "F/s")]
        for i, (text, style) in enumerate(right[:top_h]):
            screen[body_top + i].append((x - 1, "|", "dim"))
            screen[body_top + i].append((x, text[:PANEL_W], style))
        for i in range(len(right), top_h):
            screen[body_top + i].append((x - 1, "|", "dim"))
    if pane:
        head, body = pane_lines(session, cols)
        y = body_top + top_h
        screen[y].append((0, f"-- {head} ".ljust(cols, "-")[:cols], "header"))
        h = body_end - y - 1
        session.scroll = min(session.scroll, max(0, len(body) - h))
        for i, text in enumerate(body[session.scroll:session.scroll + h]):
            screen[y + 1 + i].append((0, text[:cols], ""))
    # status line: a prompt, or the last message
    if session.prompt is not None:
        p = session.prompt
        screen[rows - 2].append((0, f"{p.label}{p.text}_"[:cols], "prompt"))
    elif session.message:
        text = ("error: " if session.error else "") + session.message
        style = "error" if session.error else ""
        if len(text) > cols:     # a long message takes the help bar's line too
            cut = text.rfind(" ", 0, cols) if " " in text[:cols] else cols
            cut = cut if cut > cols // 2 else cols
            screen[rows - 2].append((0, text[:cut], style))
            screen[rows - 1].append((0, text[cut:].lstrip()[:cols], style))
            return screen
        screen[rows - 2].append((0, text, style))
    bar = HELP_BAR if len(HELP_BAR) <= cols else HELP_SHORT
    screen[rows - 1].append((0, bar[:cols], "dim"))
    return screen


def as_text(screen) -> list[str]:
    """The screen as plain lines (what a terminal would show, without attributes)."""
    out = []
    for row in screen:
        line = ""
        for x, text, _ in row:
            line = line.ljust(x)[:x] + text + line[x + len(text):]
        out.append(line.rstrip())
    return out


# ---------------------------------------------------------------------------- curses

def styles(curses) -> dict:
    """Style name -> curses attribute; colours only where the terminal has them."""
    a = {"": curses.A_NORMAL, "title": curses.A_REVERSE | curses.A_BOLD, "cursor": curses.A_REVERSE,
         "drag": curses.A_REVERSE | curses.A_BOLD, "error": curses.A_BOLD, "good": curses.A_BOLD,
         "warn": curses.A_NORMAL, "bad": curses.A_NORMAL, "dim": curses.A_DIM, "header": curses.A_BOLD,
         "prompt": curses.A_BOLD}
    if curses.has_colors():
        curses.start_color()
        try:
            curses.use_default_colors()
            bg = -1
        except curses.error:
            bg = curses.COLOR_BLACK
        pairs = {"error": curses.COLOR_RED, "good": curses.COLOR_GREEN, "warn": curses.COLOR_YELLOW,
                 "bad": curses.COLOR_RED, "header": curses.COLOR_CYAN, "drag": curses.COLOR_YELLOW,
                 "prompt": curses.COLOR_YELLOW}
        for i, (name, fg) in enumerate(pairs.items(), start=1):
            curses.init_pair(i, fg, bg)
            a[name] |= curses.color_pair(i)
    return a


def draw(stdscr, session: Session, attrs: dict) -> None:
    import curses

    rows, cols = stdscr.getmaxyx()
    stdscr.erase()
    for y, row in enumerate(layout(session, rows, cols)):
        for x, text, style in row:
            if x >= cols:
                continue
            text = text[:cols - x]
            try:
                stdscr.addstr(y, x, text, attrs.get(style, 0))
            except curses.error:    # writing the bottom-right cell moves the cursor off screen
                pass
    stdscr.refresh()
