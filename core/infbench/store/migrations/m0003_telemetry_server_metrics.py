"""Schema 7: accelerator telemetry channels and the server's own metrics, per cell attempt.

* ``telemetry_samples``: one row per channel reading (``ChannelReading``: time, device,
  the channel values as JSON, the active throttle reasons as JSON).
* ``server_metric_samples``: the scraped time series, one row per scrape and metric
  (name as the server exports it, value summed over label sets).
* ``server_metrics``: per attempt, the server's kind, URL, scrape count, and the deltas of
  its counters and histograms over the cell (JSON).

(Numbered 7 on its branch while migrations 3-6 were taken by work merged beside it.)
"""

import sqlite3


def migrate(db: sqlite3.Connection) -> None:
    """Create the three tables (no-op where they exist)."""
    for stmt in """
CREATE TABLE IF NOT EXISTS telemetry_samples (
    cell_row INTEGER NOT NULL REFERENCES cells(id), t_ns INTEGER, device_index INTEGER,
    channels TEXT, throttle TEXT);
CREATE INDEX IF NOT EXISTS telemetry_by_cell ON telemetry_samples(cell_row);
CREATE TABLE IF NOT EXISTS server_metric_samples (
    cell_row INTEGER NOT NULL REFERENCES cells(id), t_ns INTEGER, name TEXT, value REAL);
CREATE INDEX IF NOT EXISTS server_samples_by_cell ON server_metric_samples(cell_row);
CREATE TABLE IF NOT EXISTS server_metrics (
    cell_row INTEGER PRIMARY KEY REFERENCES cells(id), server TEXT, url TEXT, scrapes INTEGER,
    failures INTEGER, interval_s REAL, t0_ns INTEGER, t1_ns INTEGER, deltas TEXT, histograms TEXT)""".split(";"):
        db.execute(stmt)
