"""infbench's NVIDIA plugin: hook implementations in :mod:`infbench_nvidia.hooks`."""

__version__ = "0.1.0"
