"""An engine as the registry knows it (:class:`EngineSpec`), what an engine returns for a
cell (:class:`RunOutput`), and the dtype spellings of the engines mapped to precision
classes (:func:`precision_of`).

The adapter interface itself (:class:`infbench.engines.base.Engine`) lives with the
adapters; a spec refers to it only through its ``factory``.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from infbench.schema import DeviceInfo, RequestRecord

#: Common dtype spellings -> precision class (:data:`infbench.schema.PRECISIONS`).
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
    """What :meth:`infbench.engines.base.Engine.run` returns.

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
    """

    records: list[RequestRecord]
    engine_s: float
    warnings: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class EngineSpec:
    """An engine in the registry, as returned by the ``infbench_engines`` hook.

    Attributes:
        name: engine name used on the command line (``llama.cpp``).
        factory: ``factory(device, options) -> Engine`` (an
            :class:`infbench.engines.base.Engine`, created, not started); None when a
            plugin only declares that an engine provided elsewhere runs on its ``platforms``.
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
    """

    name: str
    factory: Callable[[DeviceInfo, dict[str, Any]], Any] | None
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
