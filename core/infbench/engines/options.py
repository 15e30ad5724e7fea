"""Engine options from the command line to the adapter: ``--engine-arg KEY=VALUE`` and the
named flags (``--threads``, ``--base-url``...) gathered (:func:`engine_options`), then made the
engine's own typed options model (:func:`typed_options`) and handed to its factory
(:func:`infbench.data.engine.create_engine`, plugin contract 2.0: ``EngineSpec.factory(device,
options: OptionsModel)``).

A contract 1.x factory (``factory(device, options: dict)``) still gets the options as a dict
(the model's given options, :func:`infbench.data.engine_options.as_dict`) for one minor
version, with a ``DeprecationWarning``.

The typed options of each engine, the parsing of ``KEY=VALUE`` items and the check of a
sweep's engine arguments live in the data layer (:mod:`infbench.data.engine_options`), so
planning can put them in a cell's identity; this module keeps the names the adapters use.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from infbench.data.engine_options import (
    CheckedArgs,
    EngineOptions,
    LlamaCppOptions,
    LlamaServerOptions,
    MiiOptions,
    OpenAIOptions,
    OpenOptions,
    OptimumHabanaOptions,
    ServerOptions,
    TransformersOptions,
    VllmOptions,
    as_options,
    check_engine_args,
    option_names,
    parse_engine_args,
)

__all__ = ["COMMON_OPTIONS", "OPENAI_OPTIONS", "SERVER_OPTIONS", "CheckedArgs", "EngineOptions", "LlamaCppOptions",
           "LlamaServerOptions", "MiiOptions", "OpenAIOptions", "OptimumHabanaOptions", "ServerOptions",
           "TransformersOptions", "VllmOptions", "check_engine_args", "engine_options", "parse_engine_args",
           "typed_options", "unknown_engine_args"]

#: Options every adapter receives from the named flags (``--threads``, ``--base-url``...).
COMMON_OPTIONS = option_names(EngineOptions)
#: Options of the OpenAI-compatible client (``openai``, and the servers infbench starts).
OPENAI_OPTIONS = tuple(k for k in option_names(OpenAIOptions) if k not in COMMON_OPTIONS)
#: Options of the servers infbench starts itself.
SERVER_OPTIONS = tuple(k for k in option_names(ServerOptions) if k not in (*COMMON_OPTIONS, *OPENAI_OPTIONS))


def engine_options(engine_args: list[str] | None = None, checked: dict[str, Any] | None = None,
                   **named: Any) -> dict[str, Any]:
    """The options dict of an engine adapter: the named flags that were given (None is
    "not given") plus the engine arguments, which win on a clash.

    Args:
        engine_args: raw ``KEY=VALUE`` items (used when ``checked`` is None).
        checked: the checked values (:attr:`CheckedArgs.values`: typed, JSON objects parsed).
        **named: ``n_threads``, ``base_url``, ``api_key_env``, ``endpoint``, ``served_model``,
            ``prompt_format``...

    Raises:
        ConfigError: a malformed ``--engine-arg``.
    """
    opts = {k: v for k, v in named.items() if v is not None}
    opts.update(checked if checked is not None else parse_engine_args(engine_args or []))
    return opts


def unknown_engine_args(specs: dict[str, Any], engines: Iterable[str], keys: Iterable[str]) -> None:
    """Refuse ``--engine-arg`` keys that no engine of the sweep reads (only the names: the
    values are checked by :func:`~infbench.data.engine_options.check_engine_args`).

    A key is known to an engine when its :class:`~infbench.data.engine.EngineSpec`
    declares it (``options_model``, ``options`` or ``native_options()``); an engine whose
    spec declares nothing accepts anything.

    Raises:
        ConfigError: naming each unknown key with the closest known one.
    """
    check_engine_args({e: _names_only(s) for e, s in specs.items()}, list(engines), dict.fromkeys(keys))


class _names_only:  # noqa: N801 - a view of a spec without its options model (names, not values)
    def __init__(self, spec: Any):
        self.options = getattr(spec, "options", None)
        self.native_options = getattr(spec, "native_options", None)
        self.options_model = None


def typed_options(spec: Any, options: dict[str, Any] | BaseModel | None) -> BaseModel:
    """The options of one engine as its own model (``spec.options_model``; an engine that
    declares none: :class:`~infbench.data.engine_options.OpenOptions`), from the run's options
    (:func:`engine_options`, with a group's identity arguments over them): the fields the model
    declares, and the native options it passes through.

    Raises:
        pydantic.ValidationError: a value the model refuses (checked values never are).
    """
    model = getattr(spec, "options_model", None) or OpenOptions
    return as_options(model, options)
