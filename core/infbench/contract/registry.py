"""The registry of engines and precisions: what every plugin's hooks declare, merged once.

* :func:`engine_specs`: every engine (``infbench_engines``), merged by name;
* :func:`require_engine`: one engine checked for a device (known, runs on its vendor,
  adapter and libraries installed), the one check ``plan``, ``perplexity`` and the
  availability table share;
* :func:`device_precisions`: the precision classes a device supports;
* :func:`device_backends`: which builds of the engine libraries run on a device;
* :func:`container_spec`, :func:`default_sweep_answer`: the typed answers of those hooks
  (a dict from an older plugin validated into the model);
* :data:`PERPLEXITY_TWIN`: the in-process engine that scores a server engine's model.
"""

from __future__ import annotations

from infbench.contract.manager import PluginManager
from infbench.data.contract import ContainerSpec, DefaultSweepAnswer, DeviceState, as_model
from infbench.data.engine import EngineSpec
from infbench.data.errors import ConfigError, EngineUnavailable, InfbenchError, suggest
from infbench.data.schema import PRECISIONS, DeviceBackends, DeviceInfo

#: Server engine -> the in-process engine that loads the same model files and scores perplexity.
PERPLEXITY_TWIN = {"llama.cpp-server": "llama.cpp", "vllm-server": "vllm"}


def engine_specs(pm: PluginManager) -> dict[str, EngineSpec]:
    """All engines from every plugin's ``infbench_engines`` hook, merged by name: built once per
    plugin manager and cached on it (registering or unregistering a plugin clears the cache).

    Platforms are united; the first spec with a factory provides the adapter, its
    modules and install hint; dtypes are united, the provider's first (default) dtype
    staying first, so a vendor plugin can add the dtypes its hardware brings (``fp8``
    for vLLM on H100). Whether a device can run a dtype's precision is decided by the
    device's ``infbench_supported_precisions``, not here."""
    cache = getattr(pm, "cache", None)
    if cache is not None and "engine_specs" in cache:
        return cache["engine_specs"]
    merged: dict[str, EngineSpec] = {}
    for specs in pm.hook.infbench_engines():
        for s in specs or []:
            if s.name not in merged:
                merged[s.name] = EngineSpec(**{**s.__dict__, "platforms": list(s.platforms),
                                               "dtypes": dict(s.dtypes)})
                continue
            m = merged[s.name]
            m.platforms = sorted(set(m.platforms) | set(s.platforms))
            if m.factory is None and s.factory is not None:
                m.factory, m.modules, m.install, m.commands = s.factory, s.modules, s.install, s.commands
                m.check = s.check
                m.serving, m.any_model = s.serving, s.any_model
                m.options, m.native_options, m.options_model = s.options, s.native_options, s.options_model
                m.typed_options = s.typed_options
                m.description = s.description or m.description
                m.dtypes = {**s.dtypes, **m.dtypes}
            else:
                m.dtypes = {**m.dtypes, **{k: v for k, v in s.dtypes.items() if k not in m.dtypes}}
    if cache is not None:
        cache["engine_specs"] = merged
    return merged


def require_engine(specs: dict[str, EngineSpec], name: str, device: DeviceInfo | None = None,
                   installed_here: bool = True) -> EngineSpec:
    """The spec of engine ``name``, checked to be usable here (on ``device``'s vendor when given;
    its libraries only when ``installed_here``: a run in a worker image needs none on the host).

    Raises:
        ConfigError: an unknown engine (with the closest names), or one that does not run
            on the device's vendor (with the engines that do).
        EngineUnavailable: no adapter installed, or its libraries or commands are missing
            (with the install command).
    """
    spec = specs.get(name)
    if spec is None:
        hint = suggest(name, specs)
        raise ConfigError(f"unknown engine {name!r}; known engines: {', '.join(sorted(specs))}",
                          hint=hint or "run `infbench plugins` to see the engines each plugin provides")
    if device is not None and device.vendor not in spec.platforms:
        here = sorted(n for n, s in specs.items() if device.vendor in s.platforms)
        raise ConfigError(f"engine {name!r} does not run on {device.vendor} devices "
                          f"(it runs on: {', '.join(spec.platforms)})",
                          hint=f"engines for {device.vendor}: {', '.join(here) or 'none'}")
    if spec.factory is None:
        raise EngineUnavailable(f"engine {name!r} has no adapter installed", hint=spec.install or None)
    missing = spec.missing() if installed_here else []
    if missing:
        raise EngineUnavailable(f"engine {name!r} needs {', '.join(missing)} (not found here)",
                                hint=spec.install or None)
    return spec


def device_precisions(pm: PluginManager, device: DeviceInfo) -> list[str]:
    """Precision classes the device supports (its plugin's hook; all if none answers)."""
    p = pm.hook.infbench_supported_precisions(device=device)
    return list(p) if p is not None else list(PRECISIONS)


def device_backends(pm: PluginManager, device: DeviceInfo) -> DeviceBackends | None:
    """The device plugin's :class:`~infbench.data.schema.DeviceBackends` (``infbench_device_backends``),
    or None when no plugin answers or its answer is invalid (then adapters refuse accelerators)."""
    try:
        raw = pm.hook.infbench_device_backends(device=device)
        if raw is None:
            return None
        return raw if isinstance(raw, DeviceBackends) else DeviceBackends(**raw)
    except Exception:  # noqa: BLE001 - a broken plugin answer is no answer
        return None


def container_spec(pm: PluginManager, device: DeviceInfo, engine: str) -> ContainerSpec | None:
    """The device plugin's worker image for ``engine`` (``infbench_container_spec``, a dict
    answer of an older plugin validated into :class:`~infbench.data.contract.ContainerSpec`),
    or None when no plugin has one.

    Raises:
        ConfigError: a plugin's answer that is not a valid container spec.
    """
    return as_model(ContainerSpec, pm.hook.infbench_container_spec(device=device, engine=engine),
                    "infbench_container_spec")


def default_sweep_answer(pm: PluginManager, device: DeviceInfo) -> tuple[DefaultSweepAnswer | None, str]:
    """The first plugin answer to ``infbench_default_sweep(device)`` (validated into
    :class:`~infbench.data.contract.DefaultSweepAnswer`) and the plugin's name, or
    ``(None, "core")``. A plugin that raises or answers something invalid is skipped."""
    for plugin, result, exc in pm.call_each("infbench_default_sweep", device=device):
        if exc is None and result is not None:
            try:
                return as_model(DefaultSweepAnswer, result, f"plugin {plugin}'s infbench_default_sweep"), plugin
            except InfbenchError:
                continue
    return None, "core"


def device_state(pm: PluginManager, device: DeviceInfo) -> list[DeviceState]:
    """The device plugin's :class:`~infbench.data.contract.DeviceState` of each device of
    ``device``'s group (hook ``infbench_device_state``; dicts validated into the model); ``[]``
    when no plugin answers, or the answer is broken (a state is context, never a reason to
    stop a run)."""
    try:
        raw = pm.hook.infbench_device_state(device=device)
    except Exception:  # noqa: BLE001 - a broken plugin answer is no answer
        return []
    out: list[DeviceState] = []
    for i, item in enumerate(raw or []):
        try:
            st = as_model(DeviceState, item, "infbench_device_state")
        except Exception:  # noqa: BLE001
            continue
        if st is not None:
            out.append(st if "index" in st.model_fields_set else st.model_copy(update={"index": i}))
    return out
