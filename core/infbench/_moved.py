"""Old module paths of infbench 0.1 (before the layout of issue 32) keep importing, with a
:class:`DeprecationWarning` that names the new path and :mod:`infbench.plugin`.

Plugins written against 0.1 imported what they needed from wherever it lived
(``infbench.schema``, ``infbench.hookspecs``, ``infbench.measure.power``...). Those modules
moved into the layer packages (docs/architecture.md, "Where things go"). So that an installed
plugin does not break on upgrade, :class:`MovedModuleFinder` (installed by
``infbench/__init__.py``) answers an import of an old path with the module at its new path,
the same object (``import infbench.schema`` then ``infbench.schema is infbench.data.schema``),
and warns once per old path. The aliases go in infbench 0.3; :mod:`infbench.plugin` is the
path that stays.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: Release in which the old paths stop importing.
REMOVED_IN = "0.3"

#: Old dotted module path -> new one (a package maps its sub-modules too: the longest
#: matching prefix wins).
MOVED: dict[str, str] = {
    "infbench.schema": "infbench.data.schema",
    "infbench.errors": "infbench.data.errors",
    "infbench.secrets": "infbench.data.secrets",
    "infbench.signals": "infbench.data.signals",
    "infbench.inputs": "infbench.data.inputs",
    "infbench.outputs": "infbench.data.outputs",
    "infbench.models": "infbench.data.models",
    "infbench.data.plan": "infbench.data.groups",
    "infbench.data.quality": "infbench.data.scores",
    "infbench.data.worker": "infbench.data.worker_spec",
    "infbench.hookspecs": "infbench.contract.hookspecs",
    "infbench.plugins": "infbench.contract.manager",
    "infbench.registry": "infbench.contract.registry",
    "infbench.site": "infbench.contract.site",
    "infbench.platforms": "infbench.detect.platforms",
    "infbench.devices": "infbench.detect.devices",
    "infbench.sweeps": "infbench.plan.sweeps",
    "infbench.target": "infbench.plan.target",
    "infbench.fleet": "infbench.execution.executors.fleet",
    "infbench.orchestrator": "infbench.execution.orchestrator",
    "infbench.session": "infbench.execution.session",
    "infbench.worker": "infbench.execution.worker",
    "infbench.run": "infbench.execution.bookkeeping",
    "infbench.default_sweep": "infbench.execution.default_sweep",
    "infbench.executors": "infbench.execution.executors",
    "infbench.executors.events": "infbench.data.events",
    "infbench.scenarios": "infbench.execution.scenarios",
    "infbench.scenarios.adaptive": "infbench.execution.scenarios.adaptive_sweep",
    "infbench.scenarios.base": "infbench.execution.scenarios.scenario",
    "infbench.scenarios.perplexity": "infbench.execution.scenarios.scoring",
    "infbench.engines.base": "infbench.data.engine",
    "infbench.measure.metrics": "infbench.measure.derive",
    "infbench.measure.spread": "infbench.measure.remote_load",
    "infbench.store.telemetry": "infbench.store.channels",
    "infbench.cli.detect": "infbench.cli.detect_cmd",
    "infbench.cli.predict": "infbench.cli.predict_cmd",
    "infbench.cli.quality": "infbench.cli.quality_cmd",
    "infbench.cli.run": "infbench.cli.run_cmd",
    "infbench.cli.serving": "infbench.cli.serving_cmd",
}


def new_path(fullname: str) -> str | None:
    """The module path ``fullname`` (an old dotted path) moved to, or None if it did not move.

    ``infbench.executors.ray`` -> ``infbench.execution.executors.ray`` (its package moved);
    ``infbench.detect`` -> None (it exists where it was).
    """
    if fullname in MOVED:
        return MOVED[fullname]
    parts = fullname.split(".")
    for i in range(len(parts) - 1, 1, -1):
        head = ".".join(parts[:i])
        if head in MOVED:
            return ".".join([MOVED[head], *parts[i:]])
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module already imported at the new one."""

    def __init__(self, target: ModuleType):
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.target

    def exec_module(self, module: ModuleType) -> None:  # the target is already executed
        return None


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """A :data:`sys.meta_path` finder for the old module paths of :data:`MOVED`."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        """The spec of an old path (its module is the new path's), None for any other name.

        Raises:
            ImportError: the new path does not import (the name never existed there).
        """
        if not fullname.startswith("infbench."):
            return None
        new = new_path(fullname)
        if new is None:
            return None
        module = importlib.import_module(new)
        warnings.warn(f"{fullname} moved to {new}; the old path stops importing in infbench {REMOVED_IN}. "
                      "A plugin imports what it needs from infbench.plugin (docs/plugins.md)",
                      DeprecationWarning, stacklevel=2)
        spec = importlib.machinery.ModuleSpec(fullname, _Alias(module), is_package=hasattr(module, "__path__"))
        if hasattr(module, "__path__"):
            spec.submodule_search_locations = list(module.__path__)
        return spec


def install() -> None:
    """Put :class:`MovedModuleFinder` first on :data:`sys.meta_path`, once. First, because an
    old sub-module path (``infbench.executors.ray``) would otherwise be found by the path finder
    in its aliased parent's folder and executed a second time as another module; no old path
    exists as a file any more, so nothing real is shadowed."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
