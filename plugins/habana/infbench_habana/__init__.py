"""infbench's Intel Gaudi plugin: hook implementations in :mod:`infbench_habana.hooks`."""

__version__ = "0.1.0"
