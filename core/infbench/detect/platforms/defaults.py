"""The core's own implementations of the hooks that have a sensible default, registered as
the built-in plugin ``core`` and marked ``trylast``: every other plugin answers first, and
the core answers only when none did. So a default is where pluggy looks for it, not a
fallback hidden in the caller.

* ``infbench_launch_engine``: the adapter from the engine's :class:`~infbench.data.engine.EngineSpec`
  factory;
* ``infbench_device_info``: the catalog entry matching the device's model name
  (``infbench_device_catalog`` of every plugin, :func:`infbench.detect.devices.match_device`);
* ``infbench_supported_precisions``: every precision class (no plugin restricts the device);
* ``infbench_power_sampler``: :class:`~infbench.measure.power.NoPower`, saying no plugin
  reads this device's power.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infbench.contract.hookspecs import hookimpl
from infbench.contract.registry import engine_specs
from infbench.data.contract import DeviceLimits
from infbench.data.engine import Engine, create_engine
from infbench.data.schema import PRECISIONS, DeviceInfo
from infbench.detect.devices import catalog, match_device
from infbench.measure.power import NoPower, PowerSampler

if TYPE_CHECKING:  # pragma: no cover
    from infbench.contract.manager import PluginManager


class CoreDefaults:
    """The ``core`` plugin (see the module doc).

    Args:
        pm: the plugin manager it is registered with (the defaults read the other plugins'
            engines and catalogs through it).
    """

    def __init__(self, pm: PluginManager):
        self.pm = pm

    @hookimpl(trylast=True)
    def infbench_launch_engine(self, engine: str, device: DeviceInfo, options: Any) -> Engine | None:
        """The engine's registered factory, given its typed options (contract 2.0; a 1.x
        factory its options as a dict: :func:`infbench.data.engine.create_engine`); None: no plugin
        registers an adapter for it."""
        spec = engine_specs(self.pm).get(engine)
        if spec is None or spec.factory is None:
            return None
        created: Engine = create_engine(spec, device, options)
        return created

    @hookimpl(trylast=True)
    def infbench_device_info(self, device: DeviceInfo) -> DeviceLimits | None:
        """The catalog entry matching ``device.model`` (per device), or None."""
        spec = match_device(catalog(self.pm), device)
        return DeviceLimits(**spec.per_device()) if spec else None

    @hookimpl(trylast=True)
    def infbench_supported_precisions(self, device: DeviceInfo) -> list[str]:
        """Every precision class: no plugin restricts this device."""
        return list(PRECISIONS)

    @hookimpl(trylast=True)
    def infbench_power_sampler(self, device: DeviceInfo) -> PowerSampler:
        """No power source: no plugin reads this device's power."""
        return NoPower(f"no plugin provides a power sampler for {device.vendor}")
