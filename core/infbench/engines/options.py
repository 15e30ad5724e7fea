"""Engine options from the command line: ``--engine-arg KEY=VALUE`` and the named flags
(``--threads``, ``--base-url``...) gathered into the dict an adapter receives."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from infbench.errors import ConfigError, suggest

#: Options every adapter receives from the named flags (``--threads``, ``--base-url``...).
COMMON_OPTIONS = ("n_threads",)
#: Options of the OpenAI-compatible client (``openai``, and the servers infbench starts).
OPENAI_OPTIONS = ("base_url", "api_key_env", "endpoint", "served_model", "prompt_format", "force_output", "tokenizer",
                  "extra_body", "event_loop")
#: Options of the servers infbench starts itself.
SERVER_OPTIONS = ("startup_timeout_s",)


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


def unknown_engine_args(specs: dict[str, Any], engines: Iterable[str], keys: Iterable[str]) -> None:
    """Refuse ``--engine-arg`` keys that no engine of the sweep reads.

    A key is known to an engine when its :class:`~infbench.engines.base.EngineSpec`
    lists it in ``options`` (what the adapter reads) or its ``native_options()`` (names
    passed through to the engine library, e.g. ``vllm.EngineArgs`` fields); an engine
    whose spec declares no ``options`` (None) accepts anything (a plugin's adapter that
    predates the declaration, or a server whose own parser checks its flags).

    Args:
        specs: the engine registry (:func:`infbench.plan.engine_specs`).
        engines: the sweep's engine names.
        keys: the ``--engine-arg`` keys (dashes already turned into underscores).

    Raises:
        ConfigError: naming each unknown key with the closest known one.
    """
    known: set[str] = set()
    for e in engines:
        spec = specs.get(e)
        if spec is None or getattr(spec, "options", None) is None:
            return
        known |= set(spec.options)
        native = getattr(spec, "native_options", None)
        if native is not None:
            known |= set(native())
    bad = [k for k in keys if k not in known]
    if bad:
        hints = [f"{k} ({suggest(k, known)})" if suggest(k, known) else k for k in bad]
        names = ", ".join(engines)
        raise ConfigError(f"--engine-arg {', '.join(hints)}: not an option of {names}",
                          hint=f"{names} read: {', '.join(sorted(known))[:600]}")
