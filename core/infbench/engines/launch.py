"""Step 3 of a run in this process: create an engine adapter for a device."""

from __future__ import annotations

from typing import Any

from infbench.contract.manager import PluginManager
from infbench.data.engine import Engine
from infbench.data.errors import ConfigError
from infbench.data.schema import DeviceInfo


def launch(pm: PluginManager, engine: str, device: DeviceInfo, options: dict[str, Any]) -> Engine:
    """Create (not start) the adapter of ``engine`` for ``device``: a plugin's
    ``infbench_launch_engine`` if one answers, else the core's default, the engine's registered
    factory (:class:`infbench.detect.platforms.defaults.CoreDefaults`).

    Args:
        pm: the plugin manager.
        engine: engine name (``llama.cpp``...).
        device: the device group the cells run on.
        options: engine options (``n_threads``, ``--engine-arg`` items...).

    Raises:
        ConfigError: no plugin can launch ``engine``.
    """
    eng = pm.hook.infbench_launch_engine(engine=engine, device=device, options=options)
    if eng is None:
        raise ConfigError(f"no plugin can launch engine {engine!r}", hint="see `infbench plugins` for the engines")
    return eng
