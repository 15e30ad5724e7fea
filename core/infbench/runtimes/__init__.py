"""Container runtimes (Docker, Apptainer): where the container executor's workers run.

The flow is detect -> plan -> **launch** -> measure -> store -> report. With a container
runtime the launch step starts the vendor plugin's image (its
:func:`~infbench.hookspecs.infbench_container_spec`), the image's ``infbench worker``
measures (:mod:`infbench.worker`), and the container executor
(:mod:`infbench.executors.container`) stores what it measured in the host's store.

* :mod:`~infbench.runtimes.docker_runtime`: the docker SDK.
* :mod:`~infbench.runtimes.apptainer`: ``apptainer exec`` from a ``.sif``.
* :mod:`~infbench.runtimes.images`: ``infbench containers build`` / ``list``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from infbench.errors import ConfigError

#: Container runtimes of ``infbench run --executor container --container-runtime NAME``.
RUNTIMES = ("docker", "apptainer")
#: Environment variable adding allowed mount roots (``os.pathsep``-separated folders).
MOUNT_ROOTS_ENV = "INFBENCH_MOUNT_ROOTS"


def allowed_mount_roots() -> list[Path]:
    """The folders under which a symlinked cache folder's target may be mounted into a
    worker (read-only): ``mount_roots`` of the site config's ``[containers]`` table, plus
    ``$INFBENCH_MOUNT_ROOTS``; resolved. Empty by default: nothing outside the cache is
    mounted unless the user says so.

    Raises:
        ConfigError: ``mount_roots`` is not a list of folder names.
    """
    from infbench.site import site_section

    sec = site_section("containers") or {}
    roots = sec.get("mount_roots", [])
    if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
        raise ConfigError("[containers] mount_roots in the site config must be a list of folders",
                          hint='e.g. mount_roots = ["/scratch/models"]')
    roots = roots + [r for r in os.environ.get(MOUNT_ROOTS_ENV, "").split(os.pathsep) if r.strip()]
    return [Path(r).expanduser().resolve() for r in roots]


def under(path: Path, roots: list[Path]) -> bool:
    """Whether ``path`` (resolved) is one of ``roots`` or lies below one."""
    return any(path == r or r in path.parents for r in roots)


def cache_link_mounts(cache_dir: Path, private_dir: Path, roots: list[Path], bind_root: str
                      ) -> tuple[list[tuple[str, str, str]], list[str]]:
    """How the symlinked folders of the host's model cache appear in a worker.

    The cache itself is mounted read-write; a symlink in it would otherwise be followed
    on the host, so a worker that planted ``cache/x -> /etc`` would get ``/etc`` in its
    next container. Never so: a symlinked folder whose resolved target lies under an
    allowed root (:func:`allowed_mount_roots`) is mounted **read-only**; any other
    symlink gets a private, empty folder of the worker's own (``private_dir/<name>``)
    instead, and a note says why and how to allow it.

    Args:
        cache_dir: the host's cache (``$INFBENCH_HOME/cache``).
        private_dir: where the private folders are made (in the worker's home).
        roots: the allowed roots.
        bind_root: the cache's path in the container.

    Returns:
        ``(mounts, notes)``: ``(host path, container path, "ro"|"rw")`` per symlink.
    """
    mounts, notes = [], []
    if not cache_dir.is_dir():
        return mounts, notes
    for child in sorted(cache_dir.iterdir()):
        if not child.is_symlink():
            continue
        target = child.resolve()
        dest = f"{bind_root}/{child.name}"
        if target.is_dir() and under(target, roots):
            mounts.append((str(target), dest, "ro"))
            continue
        own = private_dir / child.name
        own.mkdir(parents=True, exist_ok=True)
        mounts.append((str(own.resolve()), dest, "rw"))
        notes.append(f"{child} is a symlink to {target}, outside the allowed mount roots: not mounted (the worker "
                     f"uses its own folder {own} instead); to share it read-only add its folder to [containers] "
                     f"mount_roots in the site config or to ${MOUNT_ROOTS_ENV}")
    return mounts, notes


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
        from infbench.runtimes.docker_runtime import DockerRuntime

        return DockerRuntime()
    from infbench.runtimes.apptainer import ApptainerRuntime

    return ApptainerRuntime()


def detect_container_runtime(preferred: str | None = None) -> Any | None:
    """``preferred`` if given, else Docker when an engine answers, else Apptainer when
    ``apptainer`` is on PATH, else None."""
    if preferred is not None:
        return container_runtime(preferred)
    from infbench.runtimes.apptainer import ApptainerRuntime, apptainer_binary
    from infbench.runtimes.docker_runtime import DockerRuntime, docker_available

    return DockerRuntime() if docker_available() else ApptainerRuntime() if apptainer_binary() else None
