"""infbench's cerebras plugin (a remote platform): hooks in :mod:`infbench_cerebras.hooks`."""

__version__ = "0.1.0"
