"""Container runtimes (Docker, Apptainer): where the container executor's workers run.

The flow is detect -> plan -> **launch** -> measure -> store -> report. With a container
runtime the launch step starts the vendor plugin's image (its
:func:`~infbench.contract.hookspecs.infbench_container_spec`), the image's ``infbench worker``
measures (:mod:`infbench.execution.worker`), and the container executor
(:mod:`infbench.execution.executors.container`) stores what it measured in the host's store.

* :mod:`~infbench.runtimes.docker_runtime`: the docker SDK.
* :mod:`~infbench.runtimes.apptainer`: ``apptainer exec`` from a ``.sif``.
* :mod:`~infbench.runtimes.images`: ``infbench containers build`` / ``list``.
"""

from __future__ import annotations

from typing import Any

from infbench.data.errors import ConfigError
from infbench.runtimes.apptainer import ApptainerRuntime, apptainer_binary
from infbench.runtimes.docker_runtime import DockerRuntime, docker_available

#: Container runtimes of ``infbench run --executor container --container-runtime NAME``.
RUNTIMES = ("docker", "apptainer")
def container_runtime(name: str | None = None) -> Any:
    """A container runtime by name, or the first one present (Docker, then Apptainer).

    Args:
        name: ``docker``, ``apptainer`` or None to detect.

    Raises:
        ConfigError: unknown name, or (for None) neither runtime is present.
    """
    if name is None:
        rt = detect_container_runtime()
        if rt is None:
            raise ConfigError("no container runtime here: no Docker engine answers and `apptainer` is not on PATH",
                              hint="start Docker (or install Apptainer), or use --executor inprocess")
        return rt
    if name not in RUNTIMES:
        raise ConfigError(f"unknown container runtime {name!r}", hint=f"choose one of: {', '.join(RUNTIMES)}")
    if name == "docker":
        return DockerRuntime()

    return ApptainerRuntime()


def detect_container_runtime(preferred: str | None = None) -> Any | None:
    """``preferred`` if given, else Docker when an engine answers, else Apptainer when
    ``apptainer`` is on PATH, else None."""
    if preferred is not None:
        return container_runtime(preferred)

    return DockerRuntime() if docker_available() else ApptainerRuntime() if apptainer_binary() else None
