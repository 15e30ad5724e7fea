"""Perplexity results in the store (table ``quality``, schema 4): functions taking a
:class:`~infbench.store.Store`.

A row keeps the identity columns (model, weights SHA-256, engine, dtype, text SHA-256,
``n_ctx``, chunk limit), the value and its uncertainty, and the whole
:class:`~infbench.quality.perplexity.PerplexityResult` as JSON. The newest row of a
``quality_key`` is the current result.
"""

from __future__ import annotations

import json
from typing import Any

from infbench.data.scores import PerplexityResult
from infbench.data.secrets import redact
from infbench.store import Store


def save_quality(store: Store, r: PerplexityResult) -> int:
    """Store one measurement (ok or failed), its error redacted
    (:func:`infbench.data.secrets.redact`); returns its row id."""
    if r.error:
        r = r.model_copy(update={"error": redact(r.error)})
    with store.transaction():
        cur = store.db.execute(
            "INSERT INTO quality (quality_key, metric, model, weights_sha256, engine, dtype, text_path, text_sha256,"
            " n_ctx, max_chunks, n_chunks, n_tokens, status, error, value, stderr, result, started_at, finished_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (r.key(), "perplexity", r.model, r.weights_sha256, r.engine, r.dtype, r.text_path, r.text_sha256,
             r.n_ctx, r.max_chunks, r.n_chunks, r.n_tokens, r.status, r.error, r.perplexity, r.stderr,
             r.model_dump_json(), r.started_at, r.finished_at))
    return int(cur.lastrowid or 0)


def quality_results(store: Store, all_attempts: bool = False, model: list[str] | None = None,
                    engine: list[str] | None = None, status: str | None = None) -> list[dict[str, Any]]:
    """Stored measurements, oldest first, as dicts: the row's columns (``value`` is the
    perplexity) plus ``result`` (the parsed :class:`PerplexityResult` dict).

    Args:
        all_attempts: every row instead of the newest per key.
        model, engine: keep only these (None: any).
        status: keep only ``ok`` or ``failed`` rows.
    """
    where, args = [], []
    if not all_attempts:
        where.append("id IN (SELECT MAX(id) FROM quality GROUP BY quality_key)")
    if status:
        where.append("status = ?")
        args.append(status)
    sql = "SELECT * FROM quality" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
    out = []
    for row in store.db.execute(sql, args):
        d = dict(row)
        d["result"] = json.loads(d["result"])
        if (model and d["model"] not in model) or (engine and d["engine"] not in engine):
            continue
        out.append(d)
    return out


def stored_ok(store: Store, key: str) -> dict[str, Any] | None:
    """The newest row of ``key`` if it is ok, else None (a re-run skips it unless ``--force``)."""
    row = store.db.execute("SELECT * FROM quality WHERE quality_key = ? ORDER BY id DESC LIMIT 1", (key,)).fetchone()
    if row is None or row["status"] != "ok":
        return None
    d = dict(row)
    d["result"] = json.loads(d["result"])
    return d
