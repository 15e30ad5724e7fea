"""The infbench version and the version of the stored result layout."""

from __future__ import annotations

__version__ = "0.1.0"

#: Version of the stored result layout (records, metrics, SQLite tables): the number of
#: the newest store migration (:mod:`infbench.store.migrations`). Hosts and workers of
#: different versions detect the skew by it.
SCHEMA_VERSION = 5
