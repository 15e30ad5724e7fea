"""Worker images: find the recipes (Dockerfiles), build them, list what is built.

Recipes follow one convention (``docs/plugins.md``, ``containers/README.md``):

* ``containers/cpu/Dockerfile.<name>``: the core's CPU images;
* ``plugins/<vendor>/docker/Dockerfile.<name>``: a vendor plugin's images.

Each builds the image ``infbench/<vendor>-<name>``, tagged ``<infbench version>`` (the tag a
plugin's :func:`~infbench.contract.hookspecs.infbench_container_spec` names) and
``<infbench version>-<engine><engine version>``. A Dockerfile declares its engine and the
engine's version as ``ARG ENGINE=...`` and ``ARG ENGINE_VERSION=...`` (defaults read from
the file, overridable with build args). Images carry labels (:data:`LABEL_VERSION`...)
so ``infbench containers list`` and the launcher know what an image holds and refuse one
built with another store schema before starting it.

Building uses the docker SDK (``docker.APIClient.build``), streaming the build log.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import infbench
from infbench.data.errors import ConfigError, InfbenchError
from infbench.data.version import SCHEMA_VERSION, __version__
from infbench.runtimes.docker_runtime import docker_client
from infbench.runtimes.labels import (  # noqa: E402
    LABEL_BASE,
    LABEL_ENGINE,
    LABEL_ENGINE_VERSION,
    LABEL_SCHEMA,
    LABEL_VENDOR,
    LABEL_VERSION,
)

_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)=(\S+)", re.M)


class ImageBuildError(InfbenchError):
    """``docker build`` failed; the message carries the failing step's output."""


@dataclass
class Recipe:
    """One buildable worker image.

    Attributes:
        vendor: ``cpu`` or the plugin folder name (``nvidia``...).
        name: the Dockerfile suffix (``vllm``, ``trtllm``, ``llamacpp``).
        dockerfile: path relative to the build context (the repository root).
        args: the Dockerfile's ``ARG NAME=default`` defaults (``BASE_IMAGE``, ``ENGINE``,
            ``ENGINE_VERSION``...).
    """

    vendor: str
    name: str
    dockerfile: str
    args: dict[str, str] = field(default_factory=dict)

    @property
    def repository(self) -> str:
        """``infbench/<vendor>-<name>``."""
        return f"infbench/{self.vendor}-{self.name}"

    def tags(self, build_args: dict[str, str] | None = None) -> list[str]:
        """``[repo:<infbench version>, repo:<infbench version>-<engine><engine version>]``."""
        a = {**self.args, **(build_args or {})}
        tags = [f"{self.repository}:{__version__}"]
        if a.get("ENGINE_VERSION"):
            v = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{a.get('ENGINE', self.name)}{a['ENGINE_VERSION']}")
            tags.append(f"{self.repository}:{__version__}-{v}")
        return tags

    def labels(self, build_args: dict[str, str] | None = None) -> dict[str, str]:
        """The labels the built image carries."""
        a = {**self.args, **(build_args or {})}
        return {LABEL_VERSION: __version__, LABEL_SCHEMA: str(SCHEMA_VERSION), LABEL_VENDOR: self.vendor,
                LABEL_ENGINE: a.get("ENGINE", self.name), LABEL_ENGINE_VERSION: a.get("ENGINE_VERSION", ""),
                LABEL_BASE: a.get("BASE_IMAGE", "")}


def source_root(context: Path | None = None) -> Path:
    """The infbench source tree that holds ``containers/`` and ``plugins/`` (the build context).

    Args:
        context: an explicit folder; default: the checkout this infbench runs from
            (editable install), else the current folder.

    Raises:
        ConfigError: the folder is not an infbench source tree.
    """
    candidates = [context] if context is not None else [Path(infbench.__file__).resolve().parents[2], Path.cwd()]
    for c in candidates:
        if (c / "containers").is_dir() and (c / "pyproject.toml").is_file() and (c / "core").is_dir():
            return c
    raise ConfigError(f"{candidates[0]} is not an infbench source tree (no containers/, core/ and pyproject.toml)",
                      hint="images are built from a checkout: `git clone` infbench and run this there, "
                           "or pass --context")


def find_recipes(root: Path) -> list[Recipe]:
    """Every worker image recipe under ``root`` (see the module doc), sorted by vendor, name."""
    found: list[Recipe] = []
    files = sorted((root / "containers").glob("*/Dockerfile.*"))
    files += sorted((root / "plugins").glob("*/docker/Dockerfile.*"))
    for f in files:
        vendor = f.parent.name if f.parent.parent.name == "containers" else f.parent.parent.name
        found.append(Recipe(vendor=vendor, name=f.name.split(".", 1)[1], dockerfile=str(f.relative_to(root)),
                            args=dict(_ARG.findall(f.read_text()))))
    return found


def build(recipe: Recipe, root: Path, build_args: dict[str, str] | None = None, network: str | None = None,
          on_line: Callable[[str], None] | None = None) -> list[str]:
    """Build ``recipe`` with the docker SDK and tag it (:meth:`Recipe.tags`).

    Args:
        recipe: what to build.
        root: the build context (the source tree).
        build_args: ``--build-arg`` values (``BASE_IMAGE``, ``PIP_ARGS``...).
        network: network of the build's RUN steps (``none``, ``host``; None: the daemon's default).
        on_line: receives each line of the build log.

    Returns:
        The tags given to the image.

    Raises:
        ImageBuildError: a build step failed (message: the error and the last log lines).
        ConfigError: no Docker engine reachable.
    """
    client = docker_client()
    tags = recipe.tags(build_args)
    tail: list[str] = []
    image_id = None
    for chunk in client.api.build(path=str(root), dockerfile=recipe.dockerfile, tag=tags[0],
                                  buildargs=dict(build_args or {}), labels=recipe.labels(build_args),
                                  network_mode=network, rm=True, forcerm=True, decode=True):
        if "error" in chunk:
            raise ImageBuildError(f"building {tags[0]} from {recipe.dockerfile} failed: {chunk['error'].strip()}\n"
                                  + "\n".join(tail[-15:]),
                                  hint="is the base image reachable (registry, or built locally)? "
                                       "see containers/README.md for offline builds")
        line = chunk.get("stream", "")
        if "aux" in chunk and isinstance(chunk["aux"], dict):
            image_id = chunk["aux"].get("ID", image_id)
        for ln in line.splitlines():
            if ln.strip():
                tail.append(ln)
                if on_line:
                    on_line(ln)
    image = client.images.get(image_id or tags[0])
    for t in tags[1:]:
        repo, tag = t.rsplit(":", 1)
        image.tag(repo, tag=tag)
    return tags


def list_images() -> list[dict[str, Any]]:
    """Built infbench images (those labelled :data:`LABEL_VERSION`).

    Returns:
        One dict per image: ``id``, ``tags``, ``vendor``, ``engine``, ``engine_version``,
        ``infbench_version``, ``schema_version``, ``base_image``, ``size_bytes``, ``created``,
        ``compatible`` (same store schema as this infbench).
    """
    rows = []
    for img in docker_client().images.list(filters={"label": LABEL_VERSION}):
        lab = img.labels or {}
        rows.append({"id": img.short_id.split(":")[-1], "tags": img.tags, "vendor": lab.get(LABEL_VENDOR),
                     "engine": lab.get(LABEL_ENGINE), "engine_version": lab.get(LABEL_ENGINE_VERSION),
                     "infbench_version": lab.get(LABEL_VERSION), "schema_version": lab.get(LABEL_SCHEMA),
                     "base_image": lab.get(LABEL_BASE), "size_bytes": img.attrs.get("Size"),
                     "created": img.attrs.get("Created"),
                     "compatible": lab.get(LABEL_SCHEMA) == str(SCHEMA_VERSION)})
    return sorted(rows, key=lambda r: (r["vendor"] or "", r["engine"] or "", r["tags"]))
