"""Run an ``infbench worker`` in a Docker container through the docker SDK.

The container's keyword arguments come from the plugin's
:func:`~infbench.contract.hookspecs.infbench_container_spec` (image, device requests, devices,
runtime, env, ipc, shm, ulimits...); this module adds what every worker needs:

* the job's ``spec.json`` read-only at ``/job/spec.json`` and its ``out/`` folder at
  ``/job/out`` (the rest of the job folder, such as ``worker.log``, stays out of the
  worker's reach), a worker home kept between jobs (``$INFBENCH_HOME/worker-home``:
  measured CPU limits, engine logs) at ``/job/home`` with ``INFBENCH_HOME=/job/home``,
  and the host's model cache (``$INFBENCH_HOME/cache``: dummy GGUFs and HF folders) at
  ``/job/home/cache``; a model or dataset given as a local path is mounted read-only at
  the same path;
* a symlinked folder of the cache is never followed into a read-write mount: its
  target is mounted read-only when it lies under an allowed root the user configured,
  else the worker gets a private folder instead
  (:func:`~infbench.runtimes.cache_link_mounts`);
* the host user's uid:gid, so what the worker writes is the user's (unless the spec sets
  ``user``);
* no network (``network_mode="none"``) unless the spec asks for one: the worker needs
  only the mounted files and its own loopback (serving engines bind 127.0.0.1);
* every setting that loosens isolation (``privileged``, ``cap_add``, ``security_opt``
  such as ``seccomp=unconfined``, host IPC/PID/network/user namespaces, device cgroup
  rules, ``sysctls``, running as root) is applied only when the spec asks for it, and
  then :attr:`DockerWorker.notes` says so (:func:`security_notes`).

The container is removed by :meth:`DockerWorker.cleanup` (the launcher calls it on
success, failure, timeout and Ctrl-C).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from infbench.data.errors import ConfigError, InfbenchError, VersionSkew
from infbench.data.version import SCHEMA_VERSION, __version__
from infbench.runtimes.labels import LABEL_SCHEMA, LABEL_VERSION
from infbench.runtimes.mounts import HOME, JOB, allowed_mount_roots, cache_link_mounts

#: In-container paths.


def docker_client() -> Any:
    """A docker SDK client for the local engine (``DOCKER_HOST`` or the default socket).

    Raises:
        ConfigError: the docker SDK is missing or no Docker engine answers.
    """
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - docker is a core dependency
        raise ConfigError("the docker SDK is not installed", hint="pip install docker") from exc
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # noqa: BLE001 - DockerException, requests errors, socket errors
        raise ConfigError(f"no Docker engine reachable ({exc})",
                          hint="start dockerd (scripts/dockerd.sh starts one without networking), set DOCKER_HOST, "
                               "or use --executor inprocess / --container-runtime apptainer") from exc
    return client


def docker_available() -> bool:
    """True when a Docker engine answers (no error raised)."""
    try:
        docker_client()
    except ConfigError:
        return False
    return True


def _as_list(v: Any) -> list[str]:
    return [str(x) for x in (v if isinstance(v, (list, tuple)) else [v])]


#: Container settings that loosen the worker's isolation -> what to tell the user when a
#: plugin's container spec sets them (None: the value is harmless).
SECURITY_SETTINGS: dict[str, Any] = {
    "privileged": lambda v: "asks for a privileged container: it runs privileged (every device, every "
                            "capability, no seccomp or AppArmor confinement)" if v else None,
    "cap_add": lambda v: f"adds Linux capabilities: {', '.join(_as_list(v))}" if v else None,
    "security_opt": lambda v: f"sets security options: {', '.join(_as_list(v))}" if v else None,
    "ipc_mode": lambda v: "shares the host's IPC namespace (ipc_mode=host: host shared memory)" if v == "host" else (
        f"joins another IPC namespace (ipc_mode={v})" if v and v not in ("private", "none", "shareable") else None),
    "pid_mode": lambda v: f"shares the PID namespace of {v} (sees its processes)" if v else None,
    "network_mode": lambda v: f"uses network mode {v} instead of no network" if v and v != "none" else None,
    "userns_mode": lambda v: f"uses user namespace mode {v}" if v else None,
    "uts_mode": lambda v: f"uses UTS namespace mode {v}" if v else None,
    "cgroupns": lambda v: "shares the host's cgroup namespace" if v == "host" else None,
    "device_cgroup_rules": lambda v: f"adds device cgroup rules: {', '.join(_as_list(v))}" if v else None,
    "sysctls": lambda v: f"sets kernel parameters: {', '.join(f'{k}={x}' for k, x in dict(v).items())}" if v else None,
    "user": lambda v: "runs as root" if str(v).split(":")[0] in ("0", "root") else None,
}


def security_notes(spec: dict[str, Any], image: str) -> list[str]:
    """One line per setting of ``spec`` (a plugin's container spec) that loosens the
    worker's isolation (:data:`SECURITY_SETTINGS`), printed before the worker starts."""
    out = []
    for key, describe in SECURITY_SETTINGS.items():
        if key in spec:
            what = describe(spec[key])
            if what:
                out.append(f"the container spec for {image} {what}")
    return out


def inherited_cpuset() -> str | None:
    """The CPUs this process may run on (``os.sched_getaffinity``: ``taskset``, a batch
    scheduler's cpuset) as Docker's ``cpuset_cpus`` (``"0,3"``), or ``None`` where they are all
    of the host's CPUs (or the platform cannot say). A worker container is started by the Docker
    daemon, not by infbench, so it does not inherit the affinity: without this an in-process run
    and a container run of the same cells would use different CPUs, and a container started by
    a pinned infbench would share the cores of whatever runs beside it."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= (os.cpu_count() or len(cpus)):
        return None
    return ",".join(map(str, cpus))


class DockerWorker:
    """A started worker container.

    Attributes:
        container: the docker SDK ``Container``.
        description: what the run's provenance records (runtime, image, image id and
            labels, container name and id, the run kwargs that matter).
        notes: warnings for the user (privileged containers).
    """

    def __init__(self, container: Any, description: dict[str, Any], notes: list[str]):
        self.container = container
        self.description = description
        self.notes = notes

    def lines(self) -> Iterator[str]:
        """The container's stdout+stderr, line by line, until it exits (or is killed)."""
        buf = b""
        for chunk in self.container.logs(stream=True, follow=True, stdout=True, stderr=True):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line.decode("utf-8", "replace").rstrip("\r")
        if buf:
            yield buf.decode("utf-8", "replace")

    def wait(self) -> int | None:
        """The exit status (after :meth:`lines` ended); None if it cannot be read."""
        try:
            return int(self.container.wait(timeout=60).get("StatusCode"))
        except Exception:  # noqa: BLE001 - already removed, daemon gone
            return None

    def kill(self) -> None:
        """SIGKILL the container (no error if it already stopped)."""
        try:
            self.container.kill()
        except Exception:  # noqa: BLE001 - NotFound / 409 not running
            pass

    def cleanup(self) -> None:
        """Remove the container (forced; no error if it is gone)."""
        try:
            self.container.remove(force=True)
        except Exception:  # noqa: BLE001 - NotFound
            pass


class DockerRuntime:
    """Starts workers with the docker SDK (see the module doc)."""

    name = "docker"

    def __init__(self, client: Any = None):
        self.client = client or docker_client()

    def check_image(self, image: str) -> dict[str, Any]:
        """The image's labels, after checking it exists and has this infbench's store schema.

        Raises:
            ConfigError: the image is not built here.
            VersionSkew: the image holds an infbench with another store schema.
        """
        import docker


        try:
            img = self.client.images.get(image)
        except docker.errors.ImageNotFound as exc:
            raise ConfigError(f"the worker image {image} is not built on this host",
                              hint="build it with `infbench containers build` (see `infbench containers list`), "
                                   "or run in-process with --executor inprocess") from exc
        labels = img.labels or {}
        if labels.get(LABEL_SCHEMA) not in (None, str(SCHEMA_VERSION)):
            raise VersionSkew(f"image {image} holds infbench {labels.get(LABEL_VERSION)} (store schema "
                              f"{labels.get(LABEL_SCHEMA)}); this is infbench {__version__} "
                              f"(store schema {SCHEMA_VERSION})",
                              hint="rebuild the image from this checkout: `infbench containers build`")
        return {"image_id": img.id, "labels": labels}

    def start(self, spec: dict[str, Any], job_dir: Path, home_dir: Path, cache_dir: Path, name: str,
              extra_mounts: list[str] | None = None) -> DockerWorker:
        """Start ``infbench worker --spec /job/spec.json --out /job/out`` in the spec's image.

        The container runs as this user, without a network, and on the CPUs this process may
        use where those are fewer than the host's (:func:`inherited_cpuset`; a spec's own
        ``cpuset_cpus`` wins): the Docker daemon starts it, so it would not inherit them.

        Args:
            spec: the plugin's container spec (``image`` plus ``docker.containers.run`` kwargs).
            job_dir: host folder holding ``spec.json``; ``out/`` is written into it.
            home_dir: host folder kept between jobs as the worker's ``INFBENCH_HOME``
                (its measured CPU limits, engine logs).
            cache_dir: the host's model cache, mounted read-write.
            name: container name (unique per attempt).
            extra_mounts: host paths (local models, datasets) mounted read-only at the same path.

        Raises:
            ConfigError, VersionSkew: see :meth:`check_image`.
            InfbenchError: the engine refused to create or start the container.
        """
        kw = dict(spec)
        image = kw.pop("image")
        kw.pop("apptainer_options", None)
        info = self.check_image(image)

        env = {**(kw.pop("environment", None) or {}), "INFBENCH_HOME": HOME, "HOME": HOME, "PYTHONUNBUFFERED": "1"}
        for d in (job_dir / "out", home_dir / "cache", cache_dir):
            d.mkdir(parents=True, exist_ok=True)
        volumes = {str((job_dir / "spec.json").resolve()): {"bind": f"{JOB}/spec.json", "mode": "ro"},
                   str((job_dir / "out").resolve()): {"bind": f"{JOB}/out", "mode": "rw"},
                   str(home_dir.resolve()): {"bind": HOME, "mode": "rw"},
                   str(cache_dir.resolve()): {"bind": f"{HOME}/cache", "mode": "rw"}}
        links, notes = cache_link_mounts(cache_dir, home_dir / "cache-links", allowed_mount_roots(), f"{HOME}/cache")
        for host, dest, mode in links:
            volumes[host] = {"bind": dest, "mode": mode}
        for p in extra_mounts or []:
            volumes[str(Path(p).resolve())] = {"bind": str(Path(p).resolve()), "mode": "ro"}
        notes += security_notes(kw, image)
        kw.setdefault("network_mode", "none")
        kw.setdefault("user", f"{os.getuid()}:{os.getgid()}")
        if (cpus := inherited_cpuset()) is not None:
            kw.setdefault("cpuset_cpus", cpus)
        try:
            container = self.client.containers.run(
                image, entrypoint=["infbench", "worker"],
                command=["--spec", f"{JOB}/spec.json", "--out", f"{JOB}/out"], detach=True, name=name,
                environment=env, volumes=volumes, labels={"org.infbench.job": str(job_dir)}, **kw)
        except Exception as exc:  # noqa: BLE001 - docker.errors.APIError and friends
            raise InfbenchError(f"docker could not start {image}: {exc}",
                                hint="check the plugin's container spec and the Docker engine's log") from exc
        desc = {"runtime": "docker", "image": image, "image_id": info["image_id"], "image_labels": info["labels"],
                "container": name, "container_id": container.id,
                "run": {k: str(v) for k, v in kw.items() if k not in ("environment",)}}
        return DockerWorker(container, desc, notes)
