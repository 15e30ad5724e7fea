"""Site configuration: what a site declares because it cannot be detected.

Remote platforms (an inference API in someone else's data centre) are not on the PCI
bus; a site declares them, and the power readings that come from outside any device
API (a rack PDU, a chassis BMC), in one TOML file::

    # $INFBENCH_HOME/site.toml  (or the file named by $INFBENCH_SITE_CONFIG)
    [sambanova]
    base_url = "https://api.sambanova.ai/v1"
    api_key_env = "SAMBANOVA_API_KEY"
    system = "SN40L-16"
    power_w = 10000                 # or: power_command = "ipmitool dcmi power reading | awk '/Instant/{print $4}'"
    power_label = "rack PDU, 16 RDUs"

Each vendor plugin reads its own table (:func:`site_section`) and validates it with its
own model (remote platforms use :class:`infbench.detect.platforms.remote.RemotePlatform`). The
core reads the tables in :data:`CORE_SECTIONS`::

    [containers]
    mount_roots = ["/scratch/models"]   # symlinked cache folders under these are mounted (read-only)

    [llama_server]
    binary = "/opt/llama-cuda/bundle/llama-server"   # llama.cpp-server runs it (scripts/build_llama_cuda.sh)

A table that neither the core nor any installed plugin reads is an error
(:func:`unknown_sections`): a misspelt ``[cerebas]`` must not silently do nothing.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from infbench.data.errors import ConfigError, suggest
from infbench.data.inputs import depth, finite_tree, key_line, line_col, read_bytes
from infbench.data.paths import default_home

#: Environment variable naming the site file (default ``$INFBENCH_HOME/site.toml``).
SITE_ENV = "INFBENCH_SITE_CONFIG"
#: Tables the core itself reads, with what they hold.
CORE_SECTIONS = {"containers": "mount_roots: folders whose symlinked cache folders workers may read",
                 "llama_server": "binary: the llama-server that the llama.cpp-server engine runs"}


def site_config_path() -> Path:
    """``$INFBENCH_SITE_CONFIG`` if set, else ``$INFBENCH_HOME/site.toml`` (``~/.infbench``)."""
    env = os.environ.get(SITE_ENV)
    return Path(env).expanduser() if env else default_home() / "site.toml"


#: Largest site file read (a site file is a few tables).
MAX_SITE_BYTES = 1 << 20
#: Deepest nesting of tables and arrays in a site file.
MAX_SITE_DEPTH = 8


def site_config(path: str | Path | None = None) -> dict[str, Any]:
    """The whole site file as a dict (``{}`` when there is none), read as
    :mod:`infbench.data.inputs` reads every file: at most :data:`MAX_SITE_BYTES` of UTF-8 TOML,
    nesting at most :data:`MAX_SITE_DEPTH` deep, every number finite (TOML allows ``nan``
    and ``inf``; no site figure can be either).

    Raises:
        ConfigError: the file exists but is unreadable, too large, not UTF-8 or not valid
            TOML, or holds a non-finite number (the message names the file and line), or
            ``$INFBENCH_SITE_CONFIG`` names a missing file.
    """
    p = Path(path) if path else site_config_path()
    if not p.is_file():
        if path or os.environ.get(SITE_ENV):
            raise ConfigError(f"site config {p} does not exist", hint=f"create it or unset {SITE_ENV}")
        return {}
    hint = "a site config is a TOML text file; see docs/plugins.md#site-configuration"
    raw = read_bytes(p, "site config", MAX_SITE_BYTES, hint)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = line_col(raw, exc.start)
        raise ConfigError(f"site config {p} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}, column "
                          f"{col})", hint=hint) from None
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        why = str(exc) if isinstance(exc, tomllib.TOMLDecodeError) else "nested too deeply"
        raise ConfigError(f"site config {p} is not valid TOML: {why[:300]}",
                          hint="see docs/plugins.md#site-configuration for the format") from None
    if depth(data, MAX_SITE_DEPTH) > MAX_SITE_DEPTH:
        raise ConfigError(f"site config {p}: tables and arrays nested deeper than {MAX_SITE_DEPTH} levels", hint=hint)
    try:
        finite_tree(data, str(p))
    except ConfigError as exc:
        key = exc.message.split(": ", 1)[1].split(" is ")[0].split(".")[-1].split("[")[0]
        at = key_line(text, key)
        raise ConfigError(f"site config {p}" + (f":{at}" if at else "") + ": " + exc.message.split(": ", 1)[1],
                          hint="give a finite number (W, s, counts)") from None
    return data


def unknown_sections(known: Iterable[str], path: str | Path | None = None) -> list[str]:
    """A message per table of the site file that neither the core (:data:`CORE_SECTIONS`)
    nor a plugin in ``known`` reads, with the closest known name.

    Raises:
        ConfigError: see :func:`site_config`.
    """
    names = set(known) | set(CORE_SECTIONS)
    out = []
    for name, value in site_config(path).items():
        if name in names:
            continue
        where = path or site_config_path()
        what = f"[{name}]" if isinstance(value, dict) else f"key {name!r}"
        hint = suggest(name, names)
        out.append(f"{what} in {where} is read by no installed plugin or infbench itself"
                   + (f" ({hint})" if hint else f" (known tables: {', '.join(sorted(names))})"))
    return out


def site_section(name: str, path: str | Path | None = None) -> dict[str, Any] | None:
    """The ``[name]`` table of the site file, or None if the site declares no such table.

    Raises:
        ConfigError: see :func:`site_config`; also when ``[name]`` is not a table.
    """
    sec = site_config(path).get(name)
    if sec is None:
        return None
    if not isinstance(sec, dict):
        raise ConfigError(f"[{name}] in {path or site_config_path()} must be a table, got {type(sec).__name__}")
    return sec


def site_location(table: str, key: str | None = None, path: str | Path | None = None) -> str:
    """``FILE:LINE`` of ``key`` in ``[table]`` of the site file (``FILE`` alone when it
    cannot be placed), for messages about a value a plugin refused."""
    p = Path(path) if path else site_config_path()
    try:
        text = read_bytes(p, "site config", MAX_SITE_BYTES).decode("utf-8", "replace")
    except ConfigError:
        return str(p)
    m = re.search(r"(?m)^[ \t]*\[[ \t]*" + re.escape(table) + r"\s*\]", text)
    if m is None:
        return str(p)
    line = text.count("\n", 0, m.start()) + 1
    if key:
        rest = text[m.end():]
        nxt = re.search(r"(?m)^[ \t]*\[", rest)
        found = key_line(rest[:nxt.start()] if nxt else rest, key)
        line += (found - 1) if found else 0
    return f"{p}:{line}"
