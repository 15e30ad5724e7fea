"""An engine as the registry knows it (:class:`EngineSpec`), what an engine returns for a
cell (:class:`RunOutput`), and the dtype spellings of the engines mapped to precision
classes (:func:`precision_of`).

and the adapter interface every engine implements (:class:`Engine`), the contract of
engine adapters.
"""

from __future__ import annotations

import importlib.util
import inspect
import shutil
import typing
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from infbench.data.engine_options import as_dict, as_options
from infbench.data.errors import CellTimeout, DeviceMismatch
from infbench.data.prompts import synthetic_prompts
from infbench.data.schema import Cell, DeviceInfo, RequestRecord
from infbench.data.warmup import block_cell

if TYPE_CHECKING:  # pragma: no cover
    from infbench.data.groups import Group

#: Common dtype spellings -> precision class (:data:`infbench.data.schema.PRECISIONS`).
DTYPE_ALIASES = {
    "float32": "fp32", "f32": "fp32", "float": "fp32",
    "float16": "fp16", "f16": "fp16", "half": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8", "fp8_e4m3": "fp8",
    "q8_0": "int8", "int8": "int8", "w8a16": "int8",
    "q4_0": "int4", "int4": "int4",
    # GGUF precisions derived by `infbench quantize` (infbench.quality.quantize.QUANT_TYPES):
    # 5-6 bit types count as int8, 4 bits and below as int4 (no narrower class exists).
    "q6_k": "int8", "q5_k_m": "int8", "q5_0": "int8", "q5_1": "int8",
    "q4_1": "int4", "q4_k_m": "int4", "q4_k_s": "int4", "q3_k_m": "int4", "q2_k": "int4",
}


def precision_of(dtype: str) -> str:
    """The precision class of a dtype as any engine spells it (``f16``, ``bfloat16``,
    ``q8_0``...): ``fp32``, ``fp16``, ``bf16``, ``fp8``, ``int8`` or ``int4``; a spelling
    not in :data:`DTYPE_ALIASES` is returned lower-cased (it may be a class already)."""
    d = str(dtype).lower()
    return DTYPE_ALIASES.get(d, d)


@dataclass
class RunOutput:
    """What :meth:`infbench.data.engine.Engine.run` returns.

    Attributes:
        records: one raw record per request, in submission order.
        engine_s: seconds spent inside the engine's own compute calls (generate,
            decode), to separate harness overhead from engine time.
        warnings: things the results' reader must know (e.g. a server that did not
            honour the forced output length); stored in the cell's metrics.
        metrics: per-cell figures only the engine knows, merged into the cell's metrics:
            the serving client's health (``client_lag_p99_ms``, ``client``: loop lag,
            release lag, whether it fell behind); server-side data can join them under
            their own keys (e.g. ``server``).
        process: the engine process's own account of the timed part, when the engine ran
            in a process of its own (:class:`infbench.engines.process.EngineProcess`):
            ``{"pid", "cpu_s", "thread_cpu_s", "wall_s", "python_threads", "infbench_threads"}``
            (CPU seconds of that whole process and of its engine thread, the call's wall
            seconds, and the Python threads other than the engine's that were alive in it);
            None for an engine that ran in the measuring process.
    """

    records: list[RequestRecord]
    engine_s: float
    warnings: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    process: dict[str, Any] | None = None


@dataclass
class EngineSpec:
    """An engine in the registry, as returned by the ``infbench_engines`` hook.

    Attributes:
        name: engine name used on the command line (``llama.cpp``).
        factory: ``factory(device, options) -> Engine`` (an
            :class:`infbench.data.engine.Engine`, created, not started); None when a
            plugin only declares that an engine provided elsewhere runs on its ``platforms``.
            Since contract 2.0 ``options`` is the engine's typed options model
            (``options_model``, else :class:`~infbench.data.engine_options.OpenOptions`), its
            defaults in the model; annotate the parameter with it. A factory whose ``options``
            is not annotated with a pydantic model is a contract 1.x factory: it gets the given
            options as a dict, with a ``DeprecationWarning``, for one minor version
            (:func:`infbench.engines.options.create`).
        platforms: device vendors it runs on (``cpu``, ``nvidia``...).
        dtypes: the engine's dtype names mapped to precision classes
            (``{"f16": "fp16", "q8_0": "int8"}``); the first is the default.
        modules: Python modules it needs (checked with ``importlib.util.find_spec``).
        install: how to install what it needs (shown when a module is missing).
        description: one line for ``infbench plugins``.
        serving: True for server engines driven by the load generator (serving mode).
        any_model: True if the engine accepts a model name outside the zoo (a remote
            server's model id).
        commands: executables it needs on PATH (``trtllm-serve``), checked with
            ``shutil.which``.
        check: ``check(device, backends) -> EngineSupport``: whether the installed
            library runs on ``device`` (a build for its ``DeviceBackends``), and why not
            (:mod:`infbench.engines.availability`; since contract 1.4). None: only
            ``modules`` and ``commands`` are checked.
        options: the option names the adapter reads (``--engine-arg KEY=VALUE`` and the
            named flags); ``--engine-arg`` keys outside them (and ``native_options``) are
            refused before anything runs (since contract 1.6). None: not declared, not checked.
        native_options: a callable returning the names the adapter passes through to
            the engine library (``vllm.EngineArgs`` fields), called only when an
            ``--engine-arg`` is given.
        options_model: the engine's typed options, a pydantic model (unknown keys
            forbidden; :mod:`infbench.data.engine_options`): each ``--engine-arg`` it
            declares is checked against its type and bounds before anything runs, and
            ``options`` defaults to its field names. None: only ``options`` names (values
            as parsed), as before contract 1.8.
        typed_options: whether ``factory`` takes the typed options (contract 2.0); None: read
            from the annotation of its ``options`` parameter (for a lambda or a partial, say so
            here).
    """

    name: str
    factory: Callable[[DeviceInfo, Any], Any] | None
    platforms: list[str]
    dtypes: dict[str, str] = field(default_factory=dict)
    modules: list[str] = field(default_factory=list)
    install: str = ""
    description: str = ""
    serving: bool = False
    any_model: bool = False
    commands: list[str] = field(default_factory=list)
    check: Callable[[DeviceInfo, Any], Any] | None = None
    options: tuple[str, ...] | None = None
    native_options: Callable[[], Any] | None = None
    options_model: type[BaseModel] | None = None
    typed_options: bool | None = None

    def __post_init__(self) -> None:
        if self.options is None and self.options_model is not None:
            self.options = tuple(self.options_model.model_fields)

    def missing(self) -> list[str]:
        """The required modules that cannot be imported here, and required commands
        not on PATH (named ``command: NAME``)."""
        return ([m for m in self.modules if importlib.util.find_spec(m) is None]
                + [f"command: {c}" for c in self.commands if shutil.which(c) is None])

    def resolve_dtype(self, name: str) -> str | None:
        """Map a user's dtype (this engine's spelling, another engine's, or a precision
        class such as ``fp16``/``float16``/``half``) to this engine's spelling, or None."""
        n = name.lower()
        if n in self.dtypes:
            return n
        precision = precision_of(n)
        for d, p in self.dtypes.items():
            if p == precision:
                return d
        return None

    def precision_of(self, dtype: str) -> str:
        """The precision class of ``dtype`` on this engine: its own map first, then
        :func:`precision_of`."""
        return self.dtypes.get(str(dtype).lower()) or precision_of(dtype)


def takes_typed(spec: Any) -> bool:
    """Whether ``spec.factory`` takes the typed options (contract 2.0): ``spec.typed_options``
    when the spec says, else the annotation of the factory's second parameter (a pydantic
    model: typed; ``dict``, ``Any``, none: a contract 1.x factory)."""
    said = getattr(spec, "typed_options", None)
    if said is not None:
        return bool(said)
    factory = spec.factory
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return False
    if len(params) < 2:
        return False
    name = params[1].name
    try:
        ann = typing.get_type_hints(factory).get(name, params[1].annotation)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: read its text
        ann = params[1].annotation
    if isinstance(ann, str):
        model = getattr(spec, "options_model", None)
        return model is not None and ann.strip("'\"") == model.__name__
    return isinstance(ann, type) and issubclass(ann, BaseModel)


def create_engine(spec: Any, device: Any, options: BaseModel) -> Any:
    """The adapter of ``spec`` for ``device`` (created, not started): ``spec.factory(device,
    options)`` with the typed options (contract 2.0), or, for a contract 1.x factory, with
    them as a dict (:func:`~infbench.data.engine_options.as_dict`) and a ``DeprecationWarning``."""
    if takes_typed(spec):
        return spec.factory(device, options)
    warnings.warn(f"engine {spec.name!r}: its factory takes options as a dict (plugin contract 1.x); contract 2.0 "
                  f"passes its typed options model ({type(options).__name__}): annotate the factory's options "
                  "parameter with it (or set EngineSpec.typed_options). The dict shim goes in the next minor "
                  "version.", DeprecationWarning, stacklevel=2)
    return spec.factory(device, as_dict(options))


class Engine(ABC):
    """An engine adapter: one loaded model serving the cells of one group.

    Life cycle: ``start(group)`` once, ``warmup``/``run`` per cell, ``stop()`` always
    (also after an error; it must be safe to call twice).

    Args:
        device: the device group to run on.
        options: the engine's typed options (contract 2.0: its options model, read as
            attributes), or a dict of them (made :attr:`options_model` when the adapter
            declares one, else kept as a dict, as contract 1.x adapters read it).
    """

    name = "engine"
    #: The adapter's options model (:mod:`infbench.data.engine_options`): the options it
    #: receives are made this model (:func:`~infbench.data.engine_options.as_options`); None
    #: (a contract 1.x adapter): kept as given.
    options_model: type[BaseModel] | None = None
    #: Evidence that the engine runs on :attr:`device`, from :meth:`verify_device`; stored
    #: with every cell as ``engine["device_proof"]``.
    device_proof: dict[str, Any] | None = None
    #: True (the default): :meth:`run` does the engine's work in the calling Python process
    #: (transformers, llama.cpp's bindings, vLLM's ``LLM``...), so the engine session moves
    #: the adapter into a process of its own (:class:`infbench.engines.process.EngineProcess`),
    #: where no infbench thread competes with the engine's host thread for the interpreter.
    #: False for adapters whose engine already runs elsewhere (servers driven by the serving
    #: client) and for the test stand-ins of :mod:`infbench.testing`.
    isolate: bool = True

    def __init__(self, device: DeviceInfo, options: Any = None):
        self.device = device
        if self.options_model is not None:
            self.options: Any = as_options(self.options_model, options)
        else:
            self.options = options if isinstance(options, BaseModel) else dict(options or {})
        self._backends: Any = None

    @property
    def backends(self) -> Any:
        """The device's :class:`~infbench.data.schema.DeviceBackends` (its plugin's
        ``infbench_device_backends``), or None when no plugin declares them. Set by the
        engine session before :meth:`start`
        (:func:`infbench.engines.device_proof.start_on_device`)."""
        return self._backends

    @backends.setter
    def backends(self, value: Any) -> None:
        self._backends = value

    @abstractmethod
    def start(self, group: Group) -> None:
        """Load ``group.model`` at ``group.dtype`` (dummy weights unless it has a path).

        Raises:
            EngineUnavailable: the engine's library is missing.
            ConfigError: the model or dtype cannot be served by this engine.
        """

    @abstractmethod
    def run(self, cell: Cell, prompts: list[list[int]], deadline_ns: int | None = None) -> RunOutput:
        """Submit ``prompts`` together (batch mode) and generate ``cell.output_len``
        tokens for each, EOS ignored.

        Args:
            cell: the cell (batch, lengths).
            prompts: ``cell.batch`` lists of exactly ``cell.input_len`` token ids.
            deadline_ns: ``perf_counter_ns`` after which to abort with :class:`CellTimeout`.

        Returns:
            :class:`RunOutput` with one :class:`RequestRecord` per prompt.
        """

    def make_prompts(self, cell: Cell, model: Any) -> list[Any]:
        """The prompts of ``cell``: ``cell.batch`` synthetic token-id prompts of exactly
        ``cell.input_len`` tokens from ``model``'s vocabulary (default)."""
        return synthetic_prompts(cell.batch, cell.input_len, model.vocab, cell.seed)

    def warmup(self, cell: Cell, prompts: list[list[int]]) -> RunOutput | None:
        """One untimed warm-up block (:func:`infbench.data.warmup.block_cell`: the same prompts,
        the output shortened to 16 tokens) and its records, whose TPOT tells the session
        whether the engine is stable yet (default). An adapter may run another pass (a compiled
        engine, the cell's full length); returning None says only that it warmed up, and the
        session then cannot judge its stability (the cell's warm-up record says so)."""
        return self.run(block_cell(cell), prompts)

    def verify_device(self, group: Group) -> dict[str, Any]:
        """Prove that the loaded model runs on :attr:`device`; called after :meth:`start`,
        before the first (warm-up or timed) request of the group.

        Adapters check it with the engine's own report (torch parameter devices, ggml
        layer placement, vLLM's platform, a server's log). The default accepts a CPU
        device (an engine planned on the CPU has nowhere else to run) and refuses any
        other, so an adapter that cannot prove where it runs never stores an
        accelerator's result.

        Returns:
            Evidence for provenance (``{"device": "cuda:0", "name": ..., ...}``).

        Raises:
            DeviceMismatch: the engine runs, or would run, elsewhere.
        """
        if self.device.kind == "cpu":
            return {"device": "cpu", "basis": f"{self.name} has no device check; planned on the CPU"}
        raise DeviceMismatch(self.name, self.device.label(), "this adapter cannot report which device it "
                             "runs on", "an unknown device", "implement Engine.verify_device in the adapter")

    @abstractmethod
    def stop(self) -> None:
        """Free the model and everything it holds; safe after a failed start."""

    def describe(self) -> dict[str, Any]:
        """Engine name and library versions for provenance (``{"name": .., "versions": {..}}``)."""
        return {"name": self.name}

    @staticmethod
    def check_deadline(deadline_ns: int | None, now_ns: int) -> None:
        """Raise :class:`CellTimeout` if ``now_ns`` is past ``deadline_ns``."""
        if deadline_ns is not None and now_ns > deadline_ns:
            raise CellTimeout("cell ran past its time limit (--cell-timeout)")
