"""infbench's AMD plugin: hook implementations in :mod:`infbench_amd.hooks`."""

__version__ = "0.1.0"
