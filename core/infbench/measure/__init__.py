"""Measurement: metrics derived from raw records (docs/metrics.md) and power sampling."""
