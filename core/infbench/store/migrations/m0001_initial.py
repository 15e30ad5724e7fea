"""Schema 1: runs, cells, requests, power samples (the first release, commit 2935f24)."""

import sqlite3


def migrate(db: sqlite3.Connection) -> None:
    """Create the first release's tables (no-op on a store that has them)."""
    for stmt in """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, started_at REAL, finished_at REAL, status TEXT,
    command TEXT, provenance TEXT);
CREATE TABLE IF NOT EXISTS cells (
    id INTEGER PRIMARY KEY AUTOINCREMENT, cell_id TEXT NOT NULL, spec_hash TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs(run_id), status TEXT NOT NULL, error TEXT,
    spec TEXT NOT NULL, device TEXT NOT NULL, metrics TEXT, engine TEXT, power_note TEXT,
    wall_s REAL, engine_s REAL, started_at REAL, finished_at REAL);
CREATE INDEX IF NOT EXISTS cells_by_cell_id ON cells(cell_id, id);
CREATE TABLE IF NOT EXISTS requests (
    cell_row INTEGER NOT NULL REFERENCES cells(id), idx INTEGER NOT NULL, t_send_ns INTEGER,
    t_tokens_ns BLOB, n_in INTEGER, n_out INTEGER, n_out_source TEXT, error TEXT);
CREATE INDEX IF NOT EXISTS requests_by_cell ON requests(cell_row);
CREATE TABLE IF NOT EXISTS power_samples (
    cell_row INTEGER NOT NULL REFERENCES cells(id), t_ns INTEGER, device_index INTEGER,
    power_w REAL, energy_j REAL, energy_range_j REAL)""".split(";"):
        db.execute(stmt)
