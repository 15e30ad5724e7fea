"""Step 3 of a run in this process: create an engine adapter for a device."""

from __future__ import annotations

from typing import Any

from infbench.contract.manager import PluginManager
from infbench.contract.registry import engine_specs
from infbench.data.engine import Engine
from infbench.data.errors import ConfigError
from infbench.data.schema import DeviceInfo
from infbench.engines.options import typed_options


def launch(pm: PluginManager, engine: str, device: DeviceInfo, options: dict[str, Any]) -> Engine:
    """Create (not start) the adapter of ``engine`` for ``device``, with its typed options
    (:func:`infbench.engines.options.typed_options`): a plugin's ``infbench_launch_engine`` if
    one answers, else the core's default, the engine's registered factory
    (:class:`infbench.detect.platforms.defaults.CoreDefaults`, through
    :func:`infbench.engines.options.create`).

    Args:
        pm: the plugin manager.
        engine: engine name (``llama.cpp``...).
        device: the device group the cells run on.
        options: the run's engine options (``n_threads``, ``--engine-arg`` items...).

    Raises:
        ConfigError: no plugin can launch ``engine``.
    """
    spec = engine_specs(pm).get(engine)
    typed = typed_options(spec, options)
    eng = pm.hook.infbench_launch_engine(engine=engine, device=device, options=typed)
    if eng is None:
        raise ConfigError(f"no plugin can launch engine {engine!r}", hint="see `infbench plugins` for the engines")
    return eng
