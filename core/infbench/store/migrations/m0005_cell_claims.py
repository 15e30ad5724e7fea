"""Schema 5: per-cell claims, and the process that owns each run.

* ``claims``: one row per cell a live ``infbench run`` is measuring (cell id, run, host,
  pid and the process's start time, when it was claimed), so a second process on the
  same store skips that cell instead of measuring it twice
  (:mod:`infbench.store.claims`).
* ``runs.host``, ``runs.pid``, ``runs.pid_started``: the process that wrote the run, so
  the next start can tell a ``running`` run whose process is gone (killed, out of
  memory, its node lost) and mark it ``interrupted`` (:mod:`infbench.store.recovery`).
"""

import sqlite3


def migrate(db: sqlite3.Connection) -> None:
    """Create ``claims`` and add the three ``runs`` columns where missing."""
    db.execute("CREATE TABLE IF NOT EXISTS claims (cell_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, host TEXT, "
               "pid INTEGER, pid_started REAL, claimed_at REAL)")
    have = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
    for col, kind in (("host", "TEXT"), ("pid", "INTEGER"), ("pid_started", "REAL")):
        if col not in have:
            db.execute(f"ALTER TABLE runs ADD COLUMN {col} {kind}")
