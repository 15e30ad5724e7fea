"""Run an ``infbench worker`` through ``apptainer exec`` (HPC sites without Docker).

The image is a ``.sif`` built from the Docker image
(``apptainer build infbench_cpu-llamacpp_0.1.0.sif docker-daemon://infbench/cpu-llamacpp:0.1.0``,
or ``docker-archive://`` from ``docker save``) and looked up in ``$INFBENCH_SIF_DIR``
(default ``$INFBENCH_HOME/images``) under :func:`sif_name`.

The plugin's Docker container spec is translated by :func:`apptainer_args`:

* a GPU ``device_request`` becomes ``--nv`` (NVIDIA);
* ``/dev/kfd`` among ``devices`` becomes ``--rocm`` (AMD);
* other ``devices`` (``/dev/dri`` for Intel GPUs, ``/dev/accel`` for Gaudi) are bound in
  with ``--bind`` (Apptainer shares the host's ``/dev`` unless ``--contain``; the binds
  make the need explicit and survive ``--contain`` site defaults);
* ``apptainer_options`` (a plugin's own list, ignored by Docker) is passed as is: the
  Gaudi plugin binds ``/dev/accel`` there, since Docker's ``runtime="habana"`` has no
  Apptainer counterpart;
* ``environment`` becomes ``--env``; ``ipc_mode=host`` and ``/dev/shm`` are Apptainer's
  defaults;
* ``ulimits``, ``cap_add`` and ``privileged`` have no unprivileged equivalent: they are
  returned as notes (the job inherits the limits of the shell that starts it; raise them
  there, e.g. ``ulimit -l unlimited``).

Isolation matches the Docker worker's: ``--contain`` (a minimal ``/dev``, empty ``/tmp``,
no host file systems beyond the binds) and ``--no-home`` (the host home is not mounted;
the worker's home is the bound worker home), and no network (``--net --network none``,
which unprivileged users may request) unless the spec's ``network_mode`` asks for one,
which is then said in a note.

Not verified here: Apptainer is not packaged for Debian 12 and cannot be fetched on the
development machine, so only the translation is tested (``tests/unit/runtimes/test_runtimes.py``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from infbench.data.errors import ConfigError
from infbench.data.paths import default_home
from infbench.runtimes.mounts import HOME, JOB, allowed_mount_roots, cache_link_mounts


def apptainer_binary() -> str | None:
    """``apptainer`` (or the older ``singularity``) on PATH, else None."""
    return shutil.which("apptainer") or shutil.which("singularity")


def sif_dir() -> Path:
    """``$INFBENCH_SIF_DIR`` or ``$INFBENCH_HOME/images``."""
    return Path(os.environ.get("INFBENCH_SIF_DIR") or default_home() / "images")


def sif_name(image: str) -> str:
    """``infbench/cpu-llamacpp:0.1.0`` -> ``infbench_cpu-llamacpp_0.1.0.sif``."""
    return image.replace("/", "_").replace(":", "_") + ".sif"


def _device_paths(devices: list[Any]) -> list[str]:
    # docker's "host:container:perms" strings
    return [str(d).split(":", 1)[0] for d in devices]


def apptainer_args(spec: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Translate a Docker container spec into ``apptainer exec`` options.

    Args:
        spec: a plugin's container spec (see the module doc for what is translated).

    Returns:
        ``(options, notes)``: options for ``apptainer exec`` and human notes on what
        has no Apptainer equivalent.
    """
    opts: list[str] = []
    notes: list[str] = []
    for req in spec.get("device_requests") or []:
        caps = req.get("Capabilities") if isinstance(req, dict) else getattr(req, "capabilities", None)
        if any("gpu" in c for c in (caps or [])):
            opts.append("--nv")
            break
    devs = _device_paths(spec.get("devices") or [])
    if "/dev/kfd" in devs:
        opts.append("--rocm")
    for d in devs:
        if d not in ("/dev/kfd",) and not (d.startswith("/dev/dri") and "--rocm" in opts):
            opts += ["--bind", d]
    opts += [str(o) for o in spec.get("apptainer_options") or []]   # the plugin's own, e.g. Gaudi's /dev/accel
    for k, v in (spec.get("environment") or {}).items():
        opts += ["--env", f"{k}={v}"]
    net = spec.get("network_mode")
    if net in (None, "none"):
        opts += ["--net", "--network", "none"]
    else:
        notes.append(f"the container spec asks for network mode {net}: the worker shares the host's network "
                     "(Apptainer's default)")
    if spec.get("ulimits"):
        notes.append("ulimits from the container spec are not applied by Apptainer: the job inherits the "
                     "calling shell's limits (set them with `ulimit` before `infbench run`)")
    if spec.get("privileged") or spec.get("cap_add"):
        notes.append("the container spec asks for privileges (privileged/cap_add) that Apptainer does not grant "
                     "to unprivileged users: the worker runs without them")
    return opts, notes


class ApptainerWorker:
    """A worker running under ``apptainer exec`` (a subprocess in its own session)."""

    def __init__(self, proc: subprocess.Popen, description: dict[str, Any], notes: list[str]):
        self.proc = proc
        self.description = description
        self.notes = notes

    def lines(self) -> Iterator[str]:
        """The worker's stdout+stderr, line by line, until it exits."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            yield line.rstrip("\n")

    def wait(self) -> int | None:
        """The exit status."""
        return self.proc.wait()

    def kill(self) -> None:
        """SIGKILL the worker's process group."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def cleanup(self) -> None:
        """Reap the process (Apptainer leaves no container behind)."""
        self.kill()
        self.proc.wait()


class ApptainerRuntime:
    """Starts workers with ``apptainer exec`` (see the module doc)."""

    name = "apptainer"

    def __init__(self) -> None:
        self.binary = apptainer_binary()
        if self.binary is None:
            raise ConfigError("apptainer (or singularity) is not on PATH",
                              hint="load the site's apptainer module, or use --container-runtime docker / "
                                   "--executor inprocess")

    def sif_for(self, image: str) -> Path:
        """The ``.sif`` of ``image``.

        Raises:
            ConfigError: not built yet (the hint gives the ``apptainer build`` command).
        """
        p = sif_dir() / sif_name(image)
        if not p.is_file():
            raise ConfigError(f"no Apptainer image for {image} at {p}",
                              hint=f"build it from the Docker image: `apptainer build {p} docker-daemon://{image}` "
                                   f"(or copy a .sif there; $INFBENCH_SIF_DIR changes the folder)")
        return p

    def command(self, spec: dict[str, Any], job_dir: Path, home_dir: Path, cache_dir: Path,
                extra_mounts: list[str] | None = None) -> tuple[list[str], list[str]]:
        """The full ``apptainer exec`` command line and the notes (see :func:`apptainer_args`)."""
        opts, notes = apptainer_args(spec)

        binds = ["--bind", f"{(job_dir / 'spec.json').resolve()}:{JOB}/spec.json:ro",
                 "--bind", f"{(job_dir / 'out').resolve()}:{JOB}/out",
                 "--bind", f"{home_dir.resolve()}:{HOME}", "--bind", f"{cache_dir.resolve()}:{HOME}/cache"]
        links, link_notes = cache_link_mounts(cache_dir, home_dir / "cache-links", allowed_mount_roots(),
                                              f"{HOME}/cache")
        for host, dest, mode in links:
            binds += ["--bind", f"{host}:{dest}" + (":ro" if mode == "ro" else "")]
        notes = notes + link_notes
        for p in extra_mounts or []:
            binds += ["--bind", f"{Path(p).resolve()}:{Path(p).resolve()}:ro"]
        cmd = [str(self.binary), "exec", "--cleanenv", "--contain", "--no-home", *opts, *binds,
               "--env", f"INFBENCH_HOME={HOME}", "--env", f"HOME={HOME}", "--env", "PYTHONUNBUFFERED=1",
               str(self.sif_for(spec["image"])),
               "infbench", "worker", "--spec", f"{JOB}/spec.json", "--out", f"{JOB}/out"]
        return cmd, notes

    def check_image(self, image: str) -> dict[str, Any]:
        """The ``.sif`` path (raises :class:`ConfigError` if missing)."""
        return {"sif": str(self.sif_for(image))}

    def start(self, spec: dict[str, Any], job_dir: Path, home_dir: Path, cache_dir: Path, name: str,
              extra_mounts: list[str] | None = None) -> ApptainerWorker:
        """Start the worker (same arguments as :meth:`DockerRuntime.start`)."""
        for d in (job_dir / "out", home_dir / "cache", cache_dir):
            d.mkdir(parents=True, exist_ok=True)
        cmd, notes = self.command(spec, job_dir, home_dir, cache_dir, extra_mounts)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", start_new_session=True)
        sif = str(self.sif_for(spec["image"]))
        return ApptainerWorker(proc, {"runtime": "apptainer", "image": spec["image"], "sif": sif,
                                      "command": cmd, "name": name}, notes)
