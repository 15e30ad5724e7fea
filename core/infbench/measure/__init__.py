"""Measurement: metrics derived from raw records (METRICS.md) and power sampling."""
