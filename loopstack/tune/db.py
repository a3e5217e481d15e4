"""The tuning database: every measured schedule, and the best one, per program and target.

SQLite at `~/.cache/loopstack/tuning.db` unless a path is given (the CLI's `--db`, or the
`LOOPSTACK_TUNING_DB` environment variable read by the entry points into a TuneConfig;
nothing here reads the environment).  A program is keyed by a structural hash of its
unscheduled graph (nodes, ops, views, sizes and dtypes: the serialised loop tree without
a schedule) together with the target's identity, so the same program built again, in
another process, finds its schedules.

    db = TuningDB(path)
    db.record(key, target_id, actions, gflops, status)     every measurement (the fastest
                                                            becomes the best)
    db.set_best(key, target_id, actions, gflops)           the tuner's confirmed winner
    db.best(key, target_id) -> (actions, gflops) | None
    db.export_jsonl(file) / db.import_jsonl(file)          merged without duplicates
    db.stats() -> [dict]                                    per program and target
    best_schedule(program_key, target_identity, path)      the frontend's hook

Several processes may write one database at once (SQLite's write-ahead log, and a writer
waits up to BUSY_TIMEOUT_S for another's transaction): two tuners on one machine lose no
row. On a cluster only the driver writes (tune.cluster): SQLite on a network file system
is not safe to share.  A measurement is identified by its program, target, schedule, time
and node, so importing a file twice, or a colleague's file that holds some of one's own
rows, adds each row once.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time

from ..errors import LoopstackError

DEFAULT_PATH = os.path.join("~", ".cache", "loopstack", "tuning.db")

BUSY_TIMEOUT_S = 60.0
_COLUMNS = "program, target, name, shapes, dtypes, actions, gflops, status, mapper, created, node"
# one row per measurement: what makes import_jsonl idempotent
_UNIQUE = """CREATE UNIQUE INDEX IF NOT EXISTS measurements_unique
    ON measurements (program, target, actions, created, node)"""
_DEDUPE = """DELETE FROM measurements WHERE rowid NOT IN (SELECT min(rowid) FROM measurements
    GROUP BY program, target, actions, created, node)"""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    program TEXT NOT NULL, target TEXT NOT NULL, name TEXT, shapes TEXT, dtypes TEXT,
    actions TEXT NOT NULL, gflops REAL NOT NULL, status TEXT NOT NULL, mapper TEXT,
    created REAL NOT NULL, node TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS measurements_key ON measurements (program, target);
CREATE TABLE IF NOT EXISTS best (
    program TEXT NOT NULL, target TEXT NOT NULL, actions TEXT NOT NULL, gflops REAL NOT NULL,
    PRIMARY KEY (program, target));
"""


def program_key(graph) -> str:
    """Structural hash of an unscheduled program: its serialised graph (sizes and dtypes included)."""
    from ..frontend.serialize import serialize
    from ..frontend.tree import LoopTree, default_schedule

    doc = json.loads(serialize(LoopTree(graph, default_schedule(graph))))
    canon = json.dumps({"sizes": doc["sizes"], "inputs": doc["inputs"], "nodes": doc["nodes"]},
                       sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()[:32]


def describe_program(graph) -> tuple[str, str]:
    """(shapes, dtypes) of the program's inputs and output, for people reading the database."""
    nodes = [n for n in graph.nodes if n.op in ("read", "write")]
    shapes = ";".join(f"{n.op}[{','.join(str(graph.size(v)) for v in n.vars)}]" for n in nodes)
    return shapes, ",".join(n.dtype for n in nodes)


class TuningDB:
    def __init__(self, path: str | None = None):
        self.path = os.path.expanduser(path or DEFAULT_PATH)
        d = os.path.dirname(self.path)
        if d:
            os.makedirs(d, exist_ok=True)
        try:
            self.conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
            self._set_up()
        except sqlite3.Error as e:
            raise LoopstackError(f"tuning database {self.path} is unreadable ({e}); move it away or "
                                 "point LOOPSTACK_TUNING_DB elsewhere") from None

    def _set_up(self) -> None:
        """The write-ahead log, the schema and its migrations. Connections opening one new file
        at once race for them, and SQLite answers some of those races "database is locked" at
        once instead of waiting its busy timeout (switching the journal mode; a schema read
        upgraded to a write): such a set-up is tried again until BUSY_TIMEOUT_S has passed."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                self.conn.execute("PRAGMA journal_mode=WAL")
                with self.conn:
                    self.conn.executescript(_SCHEMA)
                    self._migrate()
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _migrate(self) -> None:
        """Databases written before measurements carried their node (and a unique index)."""
        cols = {row[1] for row in self.conn.execute("PRAGMA table_info(measurements)")}
        if "node" not in cols:
            self.conn.execute("ALTER TABLE measurements ADD COLUMN node TEXT NOT NULL DEFAULT ''")
        if self.conn.execute("SELECT 1 FROM sqlite_master WHERE name='measurements_unique'").fetchone() is None:
            self.conn.execute(_DEDUPE)
            self.conn.execute(_UNIQUE)

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def record(self, program: str, target: str, actions, gflops: float, status: str = "ok",
               name: str = "", shapes: str = "", dtypes: str = "", mapper: str = "", node: str = "",
               created: float | None = None, update_best: bool = True) -> bool:
        """Add a measurement (the best too, when it is faster and `update_best`); False when
        the database holds it already (the same program, target, schedule, time and node)."""
        text = json.dumps(actions)
        with self.conn:
            cur = self.conn.execute(f"INSERT OR IGNORE INTO measurements ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                                    (program, target, name, shapes, dtypes, text, float(gflops), status,
                                     mapper, time.time() if created is None else float(created), node or ""))
            if cur.rowcount == 0:
                return False
            if status == "ok" and update_best:
                row = self.conn.execute("SELECT gflops FROM best WHERE program=? AND target=?",
                                        (program, target)).fetchone()
                if row is None or gflops > row[0]:
                    self._write_best(program, target, text, gflops)
        return True

    def set_best(self, program: str, target: str, actions, gflops: float) -> None:
        """Make `actions` the best schedule (a tuner's confirmed winner replaces a luckier
        single measurement)."""
        with self.conn:
            self._write_best(program, target, json.dumps(actions), gflops)

    def _write_best(self, program: str, target: str, text: str, gflops: float) -> None:
        self.conn.execute("INSERT OR REPLACE INTO best VALUES (?,?,?,?)", (program, target, text, float(gflops)))

    def best(self, program: str, target: str):
        try:
            row = self.conn.execute("SELECT actions, gflops FROM best WHERE program=? AND target=?",
                                    (program, target)).fetchone()
            return None if row is None else (json.loads(row[0]), float(row[1]))
        except (sqlite3.Error, ValueError, TypeError) as e:
            raise LoopstackError(f"tuning database {self.path} holds a malformed schedule for program "
                                 f"{program} ({e})") from None

    def measurements(self, program: str, target: str) -> list[dict]:
        rows = self.conn.execute("SELECT actions, gflops, status, mapper FROM measurements "
                                 "WHERE program=? AND target=? ORDER BY created", (program, target))
        return [{"actions": json.loads(a), "gflops": g, "status": s, "mapper": m} for a, g, s, m in rows]

    def export_jsonl(self, path: str) -> int:
        """Every measurement, then every best schedule (lines marked "best": the best is the
        tuner's confirmed winner, not necessarily the fastest single measurement); the count of
        lines written."""
        rows = self.conn.execute(f"SELECT {_COLUMNS} FROM measurements ORDER BY created").fetchall()
        best = self.conn.execute("SELECT program, target, actions, gflops FROM best").fetchall()
        with open(path, "w") as f:
            for p, t, n, sh, dt, a, g, s, m, c, node in rows:
                f.write(json.dumps({"program": p, "target": t, "name": n, "shapes": sh, "dtypes": dt,
                                    "actions": json.loads(a), "gflops": g, "status": s, "mapper": m,
                                    "created": c, "node": node}) + "\n")
            for p, t, a, g in best:
                f.write(json.dumps({"best": True, "program": p, "target": t, "actions": json.loads(a),
                                    "gflops": g}) + "\n")
        return len(rows) + len(best)

    def import_jsonl(self, path: str) -> dict:
        """Merge lines written by export_jsonl: measurements not held yet are added; an imported
        best (a tuner's confirmed winner) replaces this database's best of the same program and
        target only when it is faster; imported measurements do not make bests themselves.
        Returns counts: {"measurements": added, "duplicates": skipped, "best": replaced}."""
        counts = {"measurements": 0, "duplicates": 0, "best": 0}
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                if r.get("best"):
                    mine = self.best(r["program"], r["target"])
                    if mine is None or r["gflops"] > mine[1]:
                        self.set_best(r["program"], r["target"], r["actions"], r["gflops"])
                        counts["best"] += 1
                elif self.record(r["program"], r["target"], r["actions"], r["gflops"], r["status"],
                                 r.get("name", ""), r.get("shapes", ""), r.get("dtypes", ""),
                                 r.get("mapper", ""), r.get("node", ""), r.get("created"), update_best=False):
                    counts["measurements"] += 1
                else:
                    counts["duplicates"] += 1
        return counts

    def stats(self) -> list[dict]:
        """Per program and target: its name and shapes, measurements (ok / failed), nodes that
        measured, the best GFLOPS measured and the best schedule's."""
        rows = self.conn.execute(
            "SELECT m.program, m.target, max(m.name), max(m.shapes), count(*), "
            "sum(m.status = 'ok'), count(DISTINCT m.node), max(CASE WHEN m.status = 'ok' THEN m.gflops END), "
            "b.gflops FROM measurements m LEFT JOIN best b ON b.program = m.program AND b.target = m.target "
            "GROUP BY m.program, m.target ORDER BY max(m.name), m.target").fetchall()
        return [{"program": p, "target": t, "name": n or "", "shapes": sh or "", "measurements": cnt,
                 "ok": ok or 0, "nodes": nodes, "best_measured_gflops": top or 0.0, "best_gflops": best}
                for p, t, n, sh, cnt, ok, nodes, top, best in rows]


def best_schedule(program: str, target_identity: str, path: str | None = None):
    """The best known action trace for a program on a target, or None (no database, no entry)."""
    p = os.path.expanduser(path or DEFAULT_PATH)
    if not os.path.exists(p):
        return None
    with TuningDB(p) as db:
        hit = db.best(program, target_identity)
    return None if hit is None else hit[0]
