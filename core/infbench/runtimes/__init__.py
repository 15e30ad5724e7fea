"""Where the cells run: in this process, or in a worker container (Docker or Apptainer).

The flow is detect -> plan -> **launch** -> measure -> store -> report. With a container
runtime the launch step starts the vendor plugin's image (its
:func:`~infbench.hookspecs.infbench_container_spec`), the image's ``infbench worker``
measures (:mod:`infbench.worker`), and :mod:`infbench.runtimes.launcher` stores what it
measured in the host's store.

* :mod:`~infbench.runtimes.docker_runtime`: the docker SDK.
* :mod:`~infbench.runtimes.apptainer`: ``apptainer exec`` from a ``.sif``.
* :mod:`~infbench.runtimes.images`: ``infbench containers build`` / ``list``.
"""

from __future__ import annotations

from typing import Any

from infbench.errors import ConfigError

RUNTIMES = ("auto", "none", "docker", "apptainer")


def choose_runtime(name: str, device: Any, engines: list[str], pm: Any, notes: list[str] | None = None) -> Any | None:
    """The runtime for ``infbench run --runtime NAME``.

    ``auto`` (the default) runs in-process on the CPU and for remote endpoints; on vendor
    hardware it uses the plugin's image when a container runtime is present (a Docker
    engine answers, else ``apptainer`` is on PATH) and the plugin has an image for every
    engine of the sweep; otherwise in-process. If that image is not built (or holds
    another store schema) ``auto`` runs in-process and says so in ``notes``.

    Args:
        name: one of :data:`RUNTIMES`.
        device: the planned device group.
        engines: the sweep's engines.
        pm: the plugin manager.
        notes: receives a line for the user when ``auto`` falls back to in-process.

    Returns:
        A runtime object (``DockerRuntime``/``ApptainerRuntime``), or None for in-process.

    Raises:
        ConfigError: unknown name, or the named runtime is not usable here.
    """
    if name not in RUNTIMES:
        raise ConfigError(f"unknown runtime {name!r}", hint=f"choose one of: {', '.join(RUNTIMES)}")
    if name == "none":
        return None
    if name == "docker":
        from infbench.runtimes.docker_runtime import DockerRuntime

        return DockerRuntime()
    if name == "apptainer":
        from infbench.runtimes.apptainer import ApptainerRuntime

        return ApptainerRuntime()
    if device.vendor == "cpu" or device.kind == "remote":
        return None
    specs = [pm.hook.infbench_container_spec(device=device, engine=e) for e in engines]
    if not all(specs):
        return None
    from infbench.runtimes.apptainer import ApptainerRuntime, apptainer_binary
    from infbench.runtimes.docker_runtime import DockerRuntime, docker_available

    rt = DockerRuntime() if docker_available() else ApptainerRuntime() if apptainer_binary() else None
    if rt is None:
        return None
    from infbench.errors import InfbenchError

    try:
        for s in specs:
            rt.check_image(s["image"])
    except InfbenchError as exc:
        if notes is not None:
            notes.append(f"running in-process, not in the {rt.name} worker image: {exc.message} ({exc.hint})")
        return None
    return rt
