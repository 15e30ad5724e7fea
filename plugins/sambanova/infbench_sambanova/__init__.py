"""infbench's sambanova plugin (a remote platform): hooks in :mod:`infbench_sambanova.hooks`."""

__version__ = "0.1.0"
