"""infbench's Intel GPU plugin: hook implementations in :mod:`infbench_intel.hooks`."""

__version__ = "0.1.0"
