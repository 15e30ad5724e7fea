"""A run's registry: what it reads from the plugins, made once and passed into planning
(:func:`infbench.execution.orchestrator.prepare`): the plugin manager, the engines
(:func:`infbench.contract.registry.engine_specs`, built once per plugin manager and kept on it)
and this host's detection (:func:`infbench.detect.detect`, made on first use)."""

from __future__ import annotations

from typing import Any

from infbench.contract.manager import PluginManager, get_plugin_manager
from infbench.contract.registry import engine_specs
from infbench.data.engine import EngineSpec
from infbench.detect import detect


class Registry:
    """What a run reads from the plugins, passed into planning (:func:`registry`): the plugin
    manager, the engines (:func:`engine_specs`, built once per plugin manager and kept on it)
    and this host's detection (made on first use, then kept for the run).

    Args:
        pm: the plugin manager.
    """

    def __init__(self, pm: PluginManager):
        self.pm = pm
        self._detection: Any = None

    @property
    def engines(self) -> dict[str, EngineSpec]:
        """Every engine by name (:func:`engine_specs`)."""
        return engine_specs(self.pm)

    def detection(self) -> Any:
        """This host's :class:`~infbench.detect.Detection`, detected once."""
        if self._detection is None:
            self._detection = detect(self.pm)
        return self._detection


def registry() -> Registry:
    """A run's registry, on the process's plugin manager
    (:func:`~infbench.contract.manager.get_plugin_manager`, built once per process), whose
    engines are built once and kept (:func:`engine_specs`); its detection is the run's own."""
    return Registry(get_plugin_manager())
