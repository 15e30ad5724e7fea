"""Schema 2: ``requests.t_sched_ns`` (the load generator's scheduled send time) and
``requests.server`` (the server's own timings, JSON).

Serving mode (commit 9a449e4) added both columns while the schema version stayed 1, so
a schema-1 store may or may not have them: add whichever is missing.
"""

import sqlite3


def migrate(db: sqlite3.Connection) -> None:
    """Add the two ``requests`` columns where they are missing."""
    have = {r[1] for r in db.execute("PRAGMA table_info(requests)")}
    if "t_sched_ns" not in have:
        db.execute("ALTER TABLE requests ADD COLUMN t_sched_ns INTEGER")
    if "server" not in have:
        db.execute("ALTER TABLE requests ADD COLUMN server TEXT")
