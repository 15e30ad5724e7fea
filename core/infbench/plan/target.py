"""Which device a run targets: a detected device group (``--device``, default the first
accelerator), or an OpenAI-compatible endpoint (``--engine openai``: a remote platform from
the site config, or a bare ``--base-url``)."""

from __future__ import annotations

from typing import Any

from infbench.contract.manager import PluginManager
from infbench.contract.registry import engine_specs
from infbench.data.errors import ConfigError
from infbench.data.schema import DeviceInfo
from infbench.data.secrets import redact_url
from infbench.detect import Detection


def select_device(detection: Detection, name: str | None = None) -> DeviceInfo:
    """Pick the device group to run on.

    Args:
        detection: result of :func:`infbench.detect.detect`.
        name: a vendor key (``cpu``, ``nvidia``...) or None for the default: the first
            accelerator found, else the CPU.

    Raises:
        ConfigError: no device matches ``name``.
    """
    devs = detection.devices
    if name:
        for d in devs:
            if name.lower() in (d.vendor.lower(), d.model.lower()):
                return d
        raise ConfigError(f"no detected device matches {name!r}",
                          hint=f"detected: {', '.join(d.vendor for d in devs) or 'nothing'}; see `infbench detect`")
    accel = [d for d in devs if d.kind in ("gpu", "accelerator")]
    if accel:
        return accel[0]
    if not devs:
        raise ConfigError("no device detected", hint="is the built-in cpu plugin disabled by INFBENCH_DISABLE_PLUGINS?")
    return devs[0]


def remote_device(base_url: str) -> DeviceInfo:
    """The "device" of an OpenAI-compatible endpoint infbench did not start: the endpoint
    itself (its hardware is unknown to infbench; a vendor plugin may describe it)."""
    public = (redact_url(base_url) or "").rstrip("/")       # no credentials or query in a name, an id or the store
    return DeviceInfo(vendor="remote", kind="remote", model=public, properties={"base_url": public})


def resolve_remote_device(det: Detection, name: str | None, base_url: str | None) -> DeviceInfo:
    """The device a remote-endpoint sweep (``--engine openai``) runs against.

    * ``--device NAME`` naming a remote platform a plugin reported (SambaNova, Cerebras:
      declared in the site config): that platform, its endpoint and power source.
    * ``--base-url URL`` alone: a configured remote platform with that endpoint if there
      is one, else the bare endpoint (:func:`remote_device`, no power source).
    * neither: the only configured remote platform, if exactly one.

    Raises:
        ConfigError: nothing to talk to, or ``--device`` names a local device.
    """
    remotes = [d for d in det.devices if d.kind == "remote"]
    if name:
        for d in remotes:
            if name.lower() in (d.vendor.lower(), d.model.lower()):
                return d
        for plugin, error in det.errors:
            if plugin.lower() == name.lower():
                raise ConfigError(f"the {plugin} plugin could not read its configuration: {error}")
        raise ConfigError(f"--device {name!r} is not a configured remote platform "
                          f"(configured: {', '.join(d.vendor for d in remotes) or 'none'})",
                          hint="declare it in the site config (docs/plugins.md#site-configuration), or use "
                               "--base-url for any OpenAI-compatible endpoint")
    if base_url:
        for d in remotes:
            if (redact_url(str(d.properties.get("base_url", ""))) or "").rstrip("/") == \
                    (redact_url(base_url) or "").rstrip("/"):
                return d
        return remote_device(base_url)
    if len(remotes) == 1:
        return remotes[0]
    raise ConfigError("--engine openai needs --base-url" + (" or --device" if remotes else ""),
                      hint="e.g. --base-url http://127.0.0.1:8000/v1"
                           + (f"; configured remote platforms: {', '.join(d.vendor for d in remotes)}"
                              if remotes else ""))


def choose_device(det: Detection, engines: list[str], pm: PluginManager, device: str | None = None,
                  base_url: str | None = None, api_key_env: str | None = None) -> tuple[DeviceInfo, dict[str, Any]]:
    """The device a sweep runs on, and the endpoint options a remote sweep needs.

    A sweep of remote-endpoint engines (``openai``: ``EngineSpec.any_model``) runs against
    :func:`resolve_remote_device`, whose ``base_url`` and ``api_key_env`` fill the options
    the user did not give; any other sweep runs on :func:`select_device`.

    Args:
        det: the detection.
        engines: the sweep's engine names.
        pm: the plugin manager (for the engine registry).
        device: ``--device``, or None.
        base_url: ``--base-url``, or None.
        api_key_env: ``--api-key-env``, or None.

    Returns:
        ``(device, {"base_url": ..., "api_key_env": ...})`` with None for what is unknown.

    Raises:
        ConfigError: local and remote engines mixed in one sweep, or no device matches.
    """
    specs = engine_specs(pm)
    remote = [e for e in engines if e in specs and specs[e].any_model]
    if not remote:
        return select_device(det, device), {"base_url": base_url, "api_key_env": api_key_env}
    if len(remote) != len(engines):
        raise ConfigError("a remote endpoint (--engine openai) runs in a sweep of its own",
                          hint="run the local engines in a separate `infbench run`")
    dev = resolve_remote_device(det, device, base_url)
    return dev, {"base_url": base_url or dev.properties.get("base_url"),
                 "api_key_env": api_key_env or dev.properties.get("api_key_env")}
