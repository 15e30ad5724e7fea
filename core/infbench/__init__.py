"""infbench: benchmark LLM inference the same way on any accelerator.

The flow of a run follows the package layout:

* :mod:`infbench.detect`    find the hardware (PCI bus + each plugin's detect hook)
* :mod:`infbench.plan`      expand a sweep into cells, group the cells that share a loaded model
* :mod:`infbench.engines`   launch an engine adapter (llama.cpp, transformers, ...)
* :mod:`infbench.measure`   derive metrics (docs/metrics.md) from raw records; power sampling
* :mod:`infbench.store`     keep every result with its provenance in SQLite
* :mod:`infbench.report`    tables (and, later, plots)

:mod:`infbench.execution.bookkeeping` ties them together; :mod:`infbench.cli` is the command line.
"""

from infbench import _moved
from infbench.data.version import SCHEMA_VERSION, __version__

_moved.install()  # infbench 0.1's module paths import, with a DeprecationWarning

__all__ = ["SCHEMA_VERSION", "__version__"]


def __getattr__(name: str):  # lazy: 0.1's plugins write `from infbench import hookimpl`
    if name in ("hookimpl", "hookspec"):
        from infbench.contract import hookspecs  # noqa: PLC0415 - start-up: not loaded by --help

        return getattr(hookspecs, name)
    raise AttributeError(name)
