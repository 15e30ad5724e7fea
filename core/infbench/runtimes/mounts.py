"""What a worker container may see of the host: the container paths of the job and its
home, the allowed mount roots, and how symlinked folders of the host's model cache are
mounted (read-only under an allowed root, else a private empty folder)."""

from __future__ import annotations

import os
from pathlib import Path

from infbench.contract.site import site_section
from infbench.data.errors import ConfigError

#: Where the job folder and the worker's home are mounted inside a container.
JOB, HOME = "/job", "/job/home"
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
    mounts: list[tuple[str, str, str]] = []
    notes: list[str] = []
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
