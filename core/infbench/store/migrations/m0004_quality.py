"""Schema 3: the ``quality`` table, one row per perplexity measurement (:mod:`infbench.quality`).

Identity (``quality_key``, :func:`infbench.quality.perplexity.quality_key`): the model as
given and the SHA-256 of its weights, the engine, the dtype, the SHA-256 of the text,
``n_ctx`` and the chunk limit. The newest row of a key is its current result; failed
measurements are rows too, with their error.
"""

import sqlite3


def migrate(db: sqlite3.Connection) -> None:
    """Create the ``quality`` table and its index (no-op where they exist)."""
    db.execute("""
CREATE TABLE IF NOT EXISTS quality (
    id INTEGER PRIMARY KEY AUTOINCREMENT, quality_key TEXT NOT NULL, metric TEXT NOT NULL DEFAULT 'perplexity',
    model TEXT NOT NULL, weights_sha256 TEXT NOT NULL, engine TEXT NOT NULL, dtype TEXT NOT NULL,
    text_path TEXT, text_sha256 TEXT NOT NULL, n_ctx INTEGER NOT NULL, max_chunks INTEGER,
    n_chunks INTEGER, n_tokens INTEGER, status TEXT NOT NULL, error TEXT,
    value REAL, stderr REAL, result TEXT NOT NULL, started_at REAL, finished_at REAL)""")
    db.execute("CREATE INDEX IF NOT EXISTS quality_by_key ON quality(quality_key, id)")
