"""Engine options from the command line: ``--engine-arg KEY=VALUE`` and the named flags
(``--threads``, ``--base-url``...) gathered into the dict an adapter receives."""

from __future__ import annotations

from typing import Any

import yaml

from infbench.errors import ConfigError


def parse_engine_args(items: list[str]) -> dict[str, Any]:
    """``["quantization=fp8", "enforce_eager=true"]`` -> ``{"quantization": "fp8", "enforce_eager": True}``
    (values read as YAML scalars: numbers, true/false, null; dashes in keys become underscores).

    Raises:
        ConfigError: an item without ``=``.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--engine-arg {item!r} is not KEY=VALUE",
                              hint="e.g. --engine-arg max_num_batched_tokens=8192")
        try:
            v = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            v = value
        out[key.strip().replace("-", "_")] = v if isinstance(v, (str, int, float, bool)) or v is None else value
    return out


def engine_options(engine_args: list[str] | None = None, **named: Any) -> dict[str, Any]:
    """The options dict of an engine adapter: the named flags that were given (None is
    "not given") plus ``--engine-arg`` items, which win on a clash.

    Args:
        engine_args: raw ``KEY=VALUE`` items.
        **named: ``n_threads``, ``base_url``, ``api_key_env``, ``endpoint``, ``served_model``,
            ``prompt_format``...

    Raises:
        ConfigError: a malformed ``--engine-arg``.
    """
    opts = {k: v for k, v in named.items() if v is not None}
    opts.update(parse_engine_args(engine_args or []))
    return opts
