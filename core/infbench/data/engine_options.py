"""Typed engine options: what each engine reads from ``--engine-arg KEY=VALUE`` (and a sweep
file's ``engine_args``), with types and bounds, and which of them are part of a cell's
identity (issues 32 and 33).

Each built-in engine declares a pydantic model (:class:`LlamaCppOptions`,
:class:`TransformersOptions`, :class:`OpenAIOptions`...) as
:attr:`~infbench.data.engine.EngineSpec.options_model`; unknown keys are refused by name
(``extra="forbid"``), integers are strict (``n_threads=1.5``, ``true`` or ``"4"`` are not
4), floats finite, and every number bounded, so a bad value is a usage error (exit 2)
before anything starts instead of a failed cell or an engine sized for 10^9 tokens.
Options that take a structure (``extra_body``, ``extra_headers``) parse their value as JSON.

A plugin's engine may still declare only names (``EngineSpec.options``, contract 1.6) or
nothing: its values then pass as :func:`parse_engine_args` reads them (JSON scalars or text), and names
an adapter passes through to its library (``EngineSpec.native_options``: ``vllm.EngineArgs``
fields) are checked by that library.

**Identity.** The ``--engine-arg`` items that change what is measured become the cell's
``engine_args`` (:class:`infbench.data.schema.Cell`), so a tuned re-run is a new cell and never
"already stored". A field marked ``identity=False`` (:func:`not_identity`: where to connect,
which key variable, a start-up timeout, the client's event loop, headers that carry
credentials) is left out; so is every option that is not given, which keeps each existing
cell id what it was. Values are redacted (:func:`infbench.data.secrets.redact_tree`) before they
enter the identity, so a token inside ``extra_body`` is never stored or printed.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Callable, ItemsView, Iterable, KeysView, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from infbench.data.errors import ConfigError, suggest
from infbench.data.inputs import MAX_DEPTH, depth, strict_json
from infbench.data.secrets import redact, redact_tree, remember_options

#: An HTTP header name (RFC 9110 ``token``).
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")
#: Where the options of a sweep are named in messages.
FLAG = "--engine-arg"


def not_identity(default: Any = None, **kwargs: Any) -> Any:
    """A :func:`pydantic.Field` that is not part of a cell's identity (it does not change
    what is measured: where to connect, credentials, timeouts, the client's event loop)."""
    return Field(default, json_schema_extra={"identity": False}, **kwargs)


def is_identity(info: FieldInfo) -> bool:
    """Whether a field of an options model enters a cell's identity (default True)."""
    extra = info.json_schema_extra
    return not (isinstance(extra, dict) and extra.get("identity") is False)


#: Bounded option types (strict: ``1.5``, ``true`` or ``"4"`` are not integers).
Threads = Annotated[int, Field(strict=True, ge=1, le=4096)]
Tokens = Annotated[int, Field(strict=True, ge=1, le=1_048_576)]
Slots = Annotated[int, Field(strict=True, ge=1, le=65_536)]
Seconds = Annotated[float, Field(gt=0, le=1e7, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=300)]
Flag = Annotated[bool, Field(strict=True)]


class EngineOptions(BaseModel):
    """The options every engine adapter reads: the base of each engine's model. Since plugin
    contract 2.0 an adapter receives its engine's model (``EngineSpec.factory(device,
    options)``) and reads its fields as attributes, their defaults in the model; an option not
    given keeps its default and is not part of a cell's identity.

    Attributes:
        n_threads: CPU threads of the engine (``--threads``), 1..4096.

    Contract 1.x adapters read their options as a dict: :meth:`get`, ``options[key]``, ``key in
    options``, :meth:`items` and :meth:`keys` still work on the given options (and the passed-
    through native ones) for one minor version, with a ``DeprecationWarning``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_threads: Threads | None = None

    def given(self) -> dict[str, Any]:
        """The options given (set explicitly), and the native ones passed through, as a dict:
        what a contract 1.x adapter received (:func:`as_dict`)."""
        return {**{k: getattr(self, k) for k in self.model_fields_set}, **(self.model_extra or {})}

    def _dict_read(self) -> dict[str, Any]:
        warnings.warn(f"{type(self).__name__} is read as a dict: since plugin contract 2.0 engine options are a typed "
                      "model (read options.NAME); dict reads go in the next minor version",
                      DeprecationWarning, stacklevel=3)
        return self.given()

    def get(self, key: str, default: Any = None) -> Any:
        """Contract 1.x: ``options.get(key, default)`` over :meth:`given` (deprecated)."""
        return self._dict_read().get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self._dict_read()[key]

    def __contains__(self, key: object) -> bool:
        return key in self._dict_read()

    def items(self) -> ItemsView[str, Any]:
        """Contract 1.x: ``options.items()`` over :meth:`given` (deprecated)."""
        return self._dict_read().items()

    def keys(self) -> KeysView[str]:
        """Contract 1.x: ``options.keys()`` over :meth:`given` (deprecated)."""
        return self._dict_read().keys()

    def __setitem__(self, key: str, value: Any) -> None:
        """Contract 1.x: ``options[key] = value`` (deprecated; contract 2.0 adapters replace
        their options with ``options.model_copy(update={...})``)."""
        self._dict_read()
        if key in type(self).model_fields:
            object.__setattr__(self, key, value)
            self.__pydantic_fields_set__.add(key)
        elif self.__pydantic_extra__ is not None:
            self.__pydantic_extra__[key] = value
        else:
            raise KeyError(f"{type(self).__name__} has no option {key!r}")

    def setdefault(self, key: str, value: Any) -> Any:
        """Contract 1.x: ``options.setdefault(key, value)`` (deprecated)."""
        given = self._dict_read()
        if key not in given:
            self[key] = value
            return value
        return given[key]


class OpenOptions(EngineOptions):
    """The options model of an engine that declares none (contract 1.6's names only, or
    nothing): the common options, every other given option passed through as it was parsed."""

    model_config = ConfigDict(extra="allow", frozen=True)


def as_options(model: type[BaseModel], values: Mapping[str, Any] | BaseModel | None) -> Any:
    """``values`` (a dict of options, or another engine's options model) as ``model``: the
    options ``model`` declares, and, when it passes native options through (``extra="allow"``:
    vLLM's ``EngineArgs``, MII's ``ModelConfig``), every other one; options it neither declares
    nor passes through (the run's ``--tokenizer`` for llama.cpp in process) are left out.

    Raises:
        pydantic.ValidationError: a value the model refuses (values checked by
            :func:`check_engine_args` never are).
    """
    if isinstance(values, model):
        return values
    if isinstance(values, EngineOptions):
        values = values.given()
    elif isinstance(values, BaseModel):
        values = values.model_dump(exclude_unset=True)
    allow = model.model_config.get("extra") == "allow"
    return model.model_validate({k: v for k, v in (values or {}).items() if allow or k in model.model_fields})


def as_dict(options: Any) -> dict[str, Any]:
    """The dict a contract 1.x factory received: the given options of an options model
    (:meth:`EngineOptions.given`), or a copy of a dict."""
    if isinstance(options, EngineOptions):
        return options.given()
    if isinstance(options, BaseModel):
        return options.model_dump(exclude_unset=True)
    return dict(options or {})


class OpenAIOptions(EngineOptions):
    """The OpenAI-compatible client (the ``openai`` engine and every server infbench starts).

    Attributes:
        base_url: the server (``--base-url``); not identity (the device names the endpoint).
        api_key_env: the environment variable holding the API key; not identity.
        endpoint: ``completions`` or ``chat``.
        served_model: the model name sent to the server; not identity.
        prompt_format: ``token_ids`` or ``text``.
        force_output: send ``ignore_eos``/``min_tokens`` (True by default in the adapter).
        tokenizer: a tokenizer folder or cached HF id for text prompts of exact lengths.
        extra_body: a JSON object merged into every request body.
        extra_headers: a JSON object of extra HTTP headers (string values), sent with every
            request; not identity (headers often carry credentials).
        event_loop: the client's loop, ``uvloop`` or ``asyncio``; not identity.
        metrics_url: the server's Prometheus ``/metrics`` URL to scrape (empty: do not
            scrape; :func:`infbench.measure.server_metrics.metrics_url`); not identity.
    """

    base_url: Name | None = not_identity()
    api_key_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")] | None = not_identity()
    endpoint: Literal["completions", "chat"] = "completions"
    served_model: Name | None = not_identity()
    prompt_format: Literal["token_ids", "text"] | None = None
    force_output: Flag = True
    tokenizer: Name | None = None
    extra_body: dict[str, Any] | None = None
    extra_headers: dict[str, Annotated[str, Field(max_length=8192)]] | None = not_identity()
    event_loop: Literal["uvloop", "asyncio"] = not_identity(default="uvloop")
    metrics_url: Annotated[str, Field(max_length=2048)] | None = not_identity()

    @field_validator("extra_body", "extra_headers", mode="before")
    @classmethod
    def _json_object(cls, v: Any) -> Any:
        """A string value is parsed as JSON (``extra_body={"top_k": 5}`` on the command line):
        strict (no duplicate keys, no ``NaN``), nested at most 32 deep (issue 41: 10,000
        levels ended in a RecursionError)."""
        if isinstance(v, str):
            try:
                json.loads(v) if len(v) < 64 else None  # a short text: JSON's own message names the column
            except json.JSONDecodeError as exc:
                raise ValueError(f"not JSON ({exc.msg} at column {exc.colno}); pass a JSON object, e.g. "
                                 "'{\"top_k\": 5}'") from None
            try:
                v = strict_json(v, "the value")
            except ConfigError as exc:
                raise ValueError(f"{exc.message}; pass a JSON object, e.g. '{{\"top_k\": 5}}'") from None
        if not isinstance(v, dict):
            raise ValueError("must be a JSON object ({...})")
        if depth(v, MAX_DEPTH) > MAX_DEPTH:
            raise ValueError(f"is nested deeper than {MAX_DEPTH} levels")
        return v

    @field_validator("extra_headers")
    @classmethod
    def _header_fields(cls, v: Any) -> Any:
        """Header names are RFC 9110 tokens and values hold no CR, LF or NUL (no header
        injection into the request the client writes)."""
        for k, val in (v or {}).items():
            if not _TOKEN.fullmatch(k):
                raise ValueError(f"header name {k!r} is not an HTTP token")
            if any(c in val for c in "\r\n\0"):
                raise ValueError(f"the value of header {k} holds a line break or NUL")
        return v

    @field_validator("extra_body")
    @classmethod
    def _finite(cls, v: Any) -> Any:
        if v is not None and not _finite_tree(v):
            raise ValueError("holds NaN or an infinity, which JSON cannot send")
        return v

    @model_validator(mode="after")
    def _remember_secrets(self) -> OpenAIOptions:
        """Every secret these options hold joins the process's redaction set
        (:func:`infbench.data.secrets.remember_options`: header values, credential-like
        ``extra_body`` values, URL user info, the key ``api_key_env`` names), so a server
        echoing one is redacted wherever the text goes (issue 41)."""
        remember_options(self.model_dump())
        return self


def _finite_tree(v: Any) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, dict):
        return all(_finite_tree(x) for x in v.values())
    if isinstance(v, list):
        return all(_finite_tree(x) for x in v)
    return True


class ServerOptions(OpenAIOptions):
    """A server infbench starts itself, driven through the OpenAI client; options the server
    reads itself (vLLM's ``EngineArgs``, SGLang's ``ServerArgs``, TensorRT-LLM's LLM API) pass
    through (native options, checked by name against the engine's ``native_options``).

    Attributes:
        startup_timeout_s: seconds to wait for the server to answer (None: the adapter's own
            limit, the time its server needs); not identity.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    startup_timeout_s: Seconds | None = not_identity()


class LlamaCppOptions(EngineOptions):
    """llama.cpp in process (llama-cpp-python).

    Attributes:
        n_gpu_layers: layers offloaded to the GPU, -1 for all (0..100000, or -1; None: what
            the device needs).
        n_ubatch: llama.cpp's physical batch in tokens (default 512), 1..1048576.
    """

    n_gpu_layers: Annotated[int, Field(strict=True, ge=-1, le=100_000)] | None = None
    n_ubatch: Tokens = 512


class LlamaServerOptions(ServerOptions):
    """llama.cpp's server (the xllamacpp wheel, or a ``llama-server`` binary).

    Attributes:
        n_threads: as :class:`EngineOptions`; None: the CPUs infbench may use (its affinity),
            at most the physical cores, as the in-process llama.cpp engine
            (:func:`infbench.libs.llama.default_threads`), not llama-server's own default.
        parallel: server slots (``--parallel``), 1..65536 (default: what the cells need).
        server_binary: path of a ``llama-server`` binary to run instead of the xllamacpp
            wheel (e.g. ``scripts/build_llama_cuda.sh``'s bundle); None: the site setting
            ``[llama_server] binary``, else the wheel
            (:func:`infbench.engines.llama_bundle.configured_binary`). Not identity: a path
            differs between hosts; the build itself (its manifest: version, flags, sha256)
            is stored with each cell's engine description.
        n_ubatch: llama.cpp's physical batch in tokens (``--ubatch-size``), 1..1048576; None:
            llama.cpp's default (512). A prompt is processed in chunks of this many tokens:
            LLM-Inference-Bench's llama.cpp "batch" (``llama-bench -b B``, which caps the
            physical batch at B) is this setting on one sequence (benchmarks/lib_h100.py).
    """

    parallel: Slots | None = None
    server_binary: str | None = not_identity()
    n_ubatch: Tokens | None = None


class TransformersOptions(EngineOptions):
    """Hugging Face transformers ``generate()``.

    Attributes:
        cache_implementation: ``static`` for a static KV cache (``generate(...,
            cache_implementation="static")``); unset: transformers' dynamic cache.
    """

    cache_implementation: Literal["static"] | None = None


class VllmOptions(ServerOptions):
    """vLLM offline (``vllm.LLM``); ``vllm.EngineArgs`` fields pass through (native options)."""


class MiiOptions(EngineOptions):
    """DeepSpeed-MII in process; ``mii.config.ModelConfig`` fields pass through (native options)."""

    model_config = ConfigDict(extra="allow", frozen=True)


class OptimumHabanaOptions(EngineOptions):
    """optimum-habana on Gaudi: the adapter's switches and ``GaudiGenerationConfig`` fields.

    Attributes:
        use_hpu_graphs, lazy_mode: HPU graphs and lazy mode (default on).
        bucket_size: static-shape bucket in tokens, -1 for none (-1..1048576).
        static_shapes, bucket_internal, reuse_cache, trim_logits, attn_softmax_bf16,
        limit_hpu_graphs, clear_hpu_graphs_cache, reduce_recompile, use_flash_attention,
        flash_attention_recompute, flash_attention_causal_mask, flash_attention_fast_softmax,
        use_flex_attention: ``GaudiGenerationConfig`` switches.
    """

    use_hpu_graphs: Flag | None = None
    lazy_mode: Flag | None = None
    static_shapes: Flag | None = None
    bucket_size: Annotated[int, Field(strict=True, ge=-1, le=1_048_576)] | None = None
    bucket_internal: Flag | None = None
    reuse_cache: Flag | None = None
    trim_logits: Flag | None = None
    attn_softmax_bf16: Flag | None = None
    limit_hpu_graphs: Flag | None = None
    clear_hpu_graphs_cache: Flag | None = None
    reduce_recompile: Flag | None = None
    use_flash_attention: Flag | None = None
    flash_attention_recompute: Flag | None = None
    flash_attention_causal_mask: Flag | None = None
    flash_attention_fast_softmax: Flag | None = None
    use_flex_attention: Flag | None = None


def option_names(model: type[BaseModel]) -> tuple[str, ...]:
    """The option names an options model declares (``EngineSpec.options`` of the engine)."""
    return tuple(model.model_fields)


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def engine_arg_value(text: str) -> Any:
    """One ``--engine-arg`` value, read one way (issue 41): JSON when the whole text is a
    JSON number, ``true``/``false``/``null`` or string, else the text itself. A JSON
    structure (``{"a": 1}``, ``[1, 2]``) is kept as its text, which an option that takes a
    structure parses as JSON. Never YAML 1.1: ``010`` is the text ``010`` (an integer option
    refuses it; JSON has no leading zeros) and ``1:30`` the text ``1:30`` (YAML read 8 and
    90); ``NaN``/``Infinity`` stay text, ``yes``/``on`` are not booleans."""
    t = text.strip()
    if not t:
        return ""
    try:
        v = json.loads(t, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return text
    return text if isinstance(v, (dict, list)) else v


def parse_engine_args(items: Iterable[str]) -> dict[str, Any]:
    """``["quantization=fp8", "enforce_eager=true"]`` -> ``{"quantization": "fp8", "enforce_eager": True}``.

    Each value is read by :func:`engine_arg_value` (JSON scalars, else the text). Dashes
    in keys become underscores, so ``n-ubatch`` and ``n_ubatch`` are one key.

    Raises:
        ConfigError: an item without ``=`` or with an empty key; a key given twice, in the
            same or another spelling (``n-ubatch=4`` and ``n_ubatch=8``): which one would
            win is not for infbench to guess.
    """
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{FLAG} {item!r} is not KEY=VALUE",
                              hint="e.g. --engine-arg max_num_batched_tokens=8192")
        name = key.strip().replace("-", "_")
        if name in out:
            same = spelled[name] == key.strip()
            raise ConfigError(f"{FLAG} {key.strip()} is given twice" + ("" if same else
                              f" ({spelled[name]} and {key.strip()} are one key: dashes read as underscores)"),
                              hint=f"pass {name} once, with the value you mean")
        spelled[name] = key.strip()
        out[name] = engine_arg_value(value)
    return out


#: The named flags of ``infbench run`` that set an engine option, and that option.
FLAG_OPTIONS = {"--threads": "n_threads", "--endpoint": "endpoint", "--base-url": "base_url",
                "--api-key-env": "api_key_env", "--served-model-name": "served_model",
                "--prompt-format": "prompt_format", "--tokenizer": "tokenizer"}


def agreed_flags(flags: Mapping[str, Any], args: Mapping[str, Any] | None) -> dict[str, Any]:
    """The named flags that set an engine option (:data:`FLAG_OPTIONS`, by flag), checked
    against the engine arguments ``args`` (issue 41: ``--threads 2`` lost to
    ``n_threads=1``, and ``--base-url A`` to ``base_url=B`` while the run's records said A).

    Returns:
        ``flags`` with each one not given (None) taken from its engine argument, so what is
        recorded (the device's endpoint, the run's options) is what is used.

    Raises:
        ConfigError: a flag and its engine argument both given, with different values.
    """
    out = dict(flags)
    for flag, key in FLAG_OPTIONS.items():
        if flag not in out or key not in (args or {}):
            continue
        given, arg = out[flag], (args or {})[key]
        if given is None:
            out[flag] = arg
        elif str(given) != str(arg):
            raise ConfigError(f"{flag} {_shown(given)} and {FLAG} {key}={_shown(arg)} set the same option to two "
                              "values", hint=f"give it once: {flag}, or {FLAG} {key}=...")
    return out


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = redact(f"x={text}")[2:]
    return text if len(text) <= 80 else text[:77] + "..."


def describe_option(model: type[BaseModel], key: str) -> str:
    """What option ``key`` of ``model`` takes, from its JSON schema: ``an integer from 1 to
    4096``, ``one of completions, chat``, ``true or false``, ``a JSON object``, ``text``."""
    prop = model.model_json_schema().get("properties", {}).get(key, {})
    kinds = [k for k in prop.get("anyOf", [prop]) if k.get("type") != "null"]
    if not kinds:
        return "a value"
    k = kinds[0]
    if "enum" in k or "const" in k:
        return "one of " + ", ".join(map(str, k.get("enum") or [k["const"]]))
    kind = {"integer": "an integer", "number": "a finite number", "boolean": "true or false",
            "object": "a JSON object", "string": "text"}.get(k.get("type", ""), "a value")
    lo = k.get("minimum", k.get("exclusiveMinimum"))
    hi = k.get("maximum", k.get("exclusiveMaximum"))
    if lo is not None and hi is not None:
        kind += f" from {lo} to {hi}" if "minimum" in k else f" above {lo}, at most {hi}"
    return kind


def check_values(engine: str, model: type[BaseModel], args: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``args`` (the options ``model`` declares; others are not passed) against
    ``engine``'s options model, returning the typed values (JSON objects parsed).

    Raises:
        ConfigError: naming each refused key, its value, why and what it takes (exit 2).
    """
    given = {k: v for k, v in args.items() if k in model.model_fields}
    try:
        typed = model.model_validate(given)
    except ValidationError as exc:
        problems, hints = [], []
        for e in exc.errors():
            key = str(e["loc"][0]) if e["loc"] else "?"
            msg = e["msg"].removeprefix("Value error, ")
            problems.append(f"{key}={_shown(given.get(key))}: {msg[:1].lower()}{msg[1:]}")
            if key in model.model_fields:
                hints.append(f"{key} takes {describe_option(model, key)}")
        raise ConfigError(f"{FLAG} refused by {engine}: {'; '.join(dict.fromkeys(problems))}",
                          hint="; ".join(dict.fromkeys(hints)) or None) from None
    return {k: getattr(typed, k) for k in given}


@dataclass
class CheckedArgs:
    """The engine arguments of a sweep, checked against every engine of it.

    Attributes:
        values: the options the adapters receive (typed where an engine declares a model;
            as parsed otherwise), one dict for every engine of the sweep.
        identity: per engine, the arguments that enter its cells' identity (redacted);
            empty when none is given.
    """

    values: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, dict[str, Any]] = field(default_factory=dict)


def check_engine_args(specs: Mapping[str, Any], engines: Iterable[str], args: Mapping[str, Any] | None
                      ) -> CheckedArgs:
    """Check a sweep's engine arguments (``--engine-arg`` and a sweep file's
    ``engine_args``) against every engine of the sweep, before anything is planned to run.

    A key is known to an engine when its :class:`~infbench.data.engine.EngineSpec`
    declares it in ``options_model``, ``options`` or ``native_options()``; an engine that
    declares nothing (``options`` None) accepts anything. A key no engine of the sweep
    knows is refused with the closest known name; a known key's value is checked against
    the options model of each engine that declares one.

    Args:
        specs: the engine registry (name -> EngineSpec).
        engines: the sweep's engine names.
        args: option name -> value (YAML-parsed; structures as text or as objects).

    Returns:
        :class:`CheckedArgs`.

    Raises:
        ConfigError: an unknown key, or a value an engine refuses (exit 2).
    """
    args = dict(args or {})
    out = CheckedArgs(values=dict(args))
    if not args:
        return out
    known: set[str] = set()
    open_ended = False
    for e in engines:
        spec = specs.get(e)
        names = spec_option_names(spec)
        if names is None:
            open_ended = True
            continue
        known |= names
    bad = [k for k in args if k not in known]
    if bad and not open_ended:
        hints = [f"{k} ({suggest(k, known)})" if suggest(k, known) else k for k in bad]
        names_ = ", ".join(engines)
        raise ConfigError(f"{FLAG} {', '.join(hints)}: not an option of {names_}",
                          hint=f"{names_} read: {', '.join(sorted(known))[:600]}")
    for e in engines:
        spec = specs.get(e)
        names = spec_option_names(spec)
        model = getattr(spec, "options_model", None)
        typed = check_values(e, model, args) if model is not None else {}
        out.values.update(typed)
        mine = {k: typed.get(k, v) for k, v in args.items() if names is None or k in names}
        if model is not None:
            mine = {k: v for k, v in mine.items() if k not in model.model_fields or is_identity(model.model_fields[k])}
        if mine:
            out.identity[e] = redact_tree(json.loads(json.dumps(mine, default=str)))
    return out


def spec_option_names(spec: Any) -> set[str] | None:
    """The ``--engine-arg`` names an engine spec knows (model fields, ``options``,
    ``native_options()``), or None when it declares none (it accepts anything)."""
    if spec is None:
        return None
    model = getattr(spec, "options_model", None)
    declared = getattr(spec, "options", None)
    if model is None and declared is None:
        return None
    names = set(declared or ()) | (set(model.model_fields) if model is not None else set())
    native: Callable[[], Any] | None = getattr(spec, "native_options", None)
    if native is not None:
        names |= set(native())
    return names
