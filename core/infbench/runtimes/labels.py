"""The labels every infbench worker image carries (``infbench containers build``), read
back to check an image's store schema before a worker runs in it."""

from __future__ import annotations

LABEL_VERSION = "org.infbench.version"
LABEL_SCHEMA = "org.infbench.schema_version"
LABEL_VENDOR = "org.infbench.vendor"
LABEL_ENGINE = "org.infbench.engine"
LABEL_ENGINE_VERSION = "org.infbench.engine.version"
LABEL_BASE = "org.infbench.base_image"
