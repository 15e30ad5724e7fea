"""Numbered, recorded migrations of the results store (SQLite), after simonw/llm's
``migrations.py``.

Each migration is a module ``mNNNN_<name>.py`` in this package with a function
``migrate(db: sqlite3.Connection) -> None``; ``NNNN`` is the store schema version it
produces. :func:`apply` runs, in one transaction each, every migration whose number is
above the file's ``PRAGMA user_version``, records it in the ``_migrations`` table and
sets ``user_version`` to its number. A migration must be idempotent where the layout of
older stores varied within one version (schema 1 stores were written with and without
two ``requests`` columns).

Adding a migration: a new module with the next number, then raise
:data:`infbench.SCHEMA_VERSION` to it (a unit test checks they agree), and add a fixture
store of the previous version under ``tests/fixtures/stores/``.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass

_NAME = re.compile(r"^m(\d{4})_(\w+)$")


@dataclass(frozen=True)
class Migration:
    """One step: ``version`` (the schema it produces), ``name``, ``migrate(db)``."""

    version: int
    name: str
    migrate: Callable[[sqlite3.Connection], None]


def migrations() -> list[Migration]:
    """Every migration of this package, by version.

    Raises:
        RuntimeError: two modules with one number, or a gap in the numbering (a
            packaging mistake, not a user error).
    """
    found: dict[int, Migration] = {}
    for info in pkgutil.iter_modules(__path__):
        m = _NAME.match(info.name)
        if not m:
            continue
        version = int(m.group(1))
        if version in found:
            raise RuntimeError(f"two store migrations numbered {version}")
        mod = importlib.import_module(f"{__name__}.{info.name}")
        found[version] = Migration(version, m.group(2), mod.migrate)
    out = [found[v] for v in sorted(found)]
    if [m.version for m in out] != list(range(1, len(out) + 1)):
        raise RuntimeError(f"store migrations must be numbered 1..n, found {[m.version for m in out]}")
    return out


def latest() -> int:
    """The schema version the newest migration produces."""
    ms = migrations()
    return ms[-1].version if ms else 0


def pending(db: sqlite3.Connection) -> list[Migration]:
    """The migrations not yet applied to ``db`` (by its ``user_version``)."""
    current = db.execute("PRAGMA user_version").fetchone()[0]
    return [m for m in migrations() if m.version > current]


def apply(db: sqlite3.Connection) -> list[Migration]:
    """Apply every pending migration to ``db``, each in its own transaction.

    Returns:
        The migrations applied (empty when the store was current).

    Raises:
        sqlite3.Error: from a migration; that migration's changes are rolled back and
            the store stays at the version before it.
    """
    done = []
    for m in pending(db):
        # An explicit transaction: Python's sqlite3 (before 3.12's autocommit attribute) opens
        # none for DDL, so CREATE/ALTER would otherwise commit one by one.
        if db.in_transaction:
            db.commit()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("CREATE TABLE IF NOT EXISTS _migrations (version INTEGER PRIMARY KEY, name TEXT, "
                       "applied_at REAL)")
            m.migrate(db)
            db.execute("INSERT OR REPLACE INTO _migrations VALUES (?,?,?)", (m.version, m.name, time.time()))
            db.execute(f"PRAGMA user_version={int(m.version)}")
            db.commit()
        except BaseException:
            db.rollback()
            raise
        done.append(m)
    return done
