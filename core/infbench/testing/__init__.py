"""Stand-ins for tests of scenarios, executors and plugins: engines that run in microseconds
and a plugin that registers them, so run, resume, failure and interrupt semantics are
tested in the fast layer (``tests/unit/execution/test_scenarios.py``).

Nothing here measures anything: the records a fake engine returns carry timestamps it
computes from its options (a virtual clock that starts at the call), so the metrics
derived from them are known in advance. Use the real engines for numbers.

* :class:`FakeEngine` (``fake``): batch mode; ``ttft_s``/``tpot_s`` per request;
  ``fail_batch`` makes cells of that batch raise; ``start_error`` makes ``start`` raise.
* :class:`FakeServer` (``fake-server``): serving mode; TTFT grows with the offered load
  past ``capacity`` (requests in flight, or arrivals per s), so an SLO search has a knee.
* :class:`FakeScorer`: a deterministic perplexity scorer (:meth:`FakeEngine.scorer`).
* :func:`plugin_manager`: a fresh plugin manager with the built-ins and :class:`FakePlugin`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from pydantic import ConfigDict, Field

from infbench.contract.hookspecs import hookimpl
from infbench.contract.manager import PluginManager, build_plugin_manager
from infbench.data.engine import Engine, EngineSpec, RunOutput
from infbench.data.engine_options import EngineOptions
from infbench.data.errors import CellTimeout
from infbench.data.groups import Group
from infbench.data.schema import Cell, DeviceInfo, RequestRecord


class FakeOptions(EngineOptions):
    """The fake engines' options (``--engine-arg KEY=VALUE``; contract 2.0: their typed model,
    read as attributes). Other options pass through (a test's own stand-in reads them).

    Attributes:
        ttft_s, tpot_s: TTFT and TPOT of every request in s (None: 0.01 and 0.002).
        fail_batch: cells of this batch raise ``RuntimeError``.
        start_error: ``start`` raises ``RuntimeError`` with this text.
        capacity: the server's slots (:class:`FakeServer`).
        sleep_s: real seconds each ``run`` sleeps (interrupt tests).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    ttft_s: float | None = Field(None, ge=0)
    tpot_s: float | None = Field(None, ge=0)
    fail_batch: int | None = None
    start_error: str | None = None
    capacity: int | None = Field(None, ge=1)
    sleep_s: float | None = Field(None, ge=0)


#: The options the fake engines read (``--engine-arg KEY=VALUE``).
FAKE_OPTIONS = tuple(FakeOptions.model_fields)


class FakeEngine(Engine):
    """A batch-mode engine that computes its records instead of generating tokens.

    Options (``engine_options``): ``ttft_s`` (default 0.01 s) and ``tpot_s`` (0.002 s) per
    request; ``fail_batch`` (cells of that batch raise ``RuntimeError``); ``start_error``
    (``start`` raises ``RuntimeError`` with it); ``sleep_s`` (real seconds each ``run``
    sleeps, for interrupt tests). Runs only where it is planned on the CPU (the default
    :meth:`~infbench.data.engine.Engine.verify_device` refuses any other device).
    """

    name = "fake"
    options_model = FakeOptions
    options: FakeOptions
    #: Measured in this process (milliseconds per test); a test that needs the engine's own
    #: process wraps it in :class:`infbench.engines.process.EngineProcess` itself.
    isolate = False

    def __init__(self, device: DeviceInfo, options: FakeOptions | dict[str, Any] | None = None):
        super().__init__(device, options)
        self.group: Group | None = None
        self.runs: list[Cell] = []
        self.stopped = False

    def _opt(self, key: str, default: float) -> float:
        v = getattr(self.options, key, None)
        return float(v) if v is not None else default

    def start(self, group: Group) -> None:
        """Remember the group; raise ``RuntimeError(start_error)`` when that option is set."""
        if self.options.start_error:
            raise RuntimeError(str(self.options.start_error))
        self.group = group

    def ttft(self, cell: Cell) -> float:
        """TTFT of every request of ``cell`` in s."""
        return self._opt("ttft_s", 0.01)

    def run(self, cell: Cell, prompts: list[Any], deadline_ns: int | None = None) -> RunOutput:
        """One record per prompt (``n_in`` its length), ``cell.output_len`` tokens at
        ``t_send + ttft + i * tpot``; raises for ``fail_batch``."""
        if self.options.fail_batch is not None and cell.batch == int(self.options.fail_batch):
            raise RuntimeError(f"fake failure at batch {cell.batch}")
        if self._opt("sleep_s", 0.0):
            time.sleep(self._opt("sleep_s", 0.0))
        t0 = time.perf_counter_ns()
        self.check_deadline(deadline_ns, t0)
        ttft, tpot = int(self.ttft(cell) * 1e9), int(self._opt("tpot_s", 0.002) * 1e9)
        recs = [RequestRecord(t_send_ns=t0, t_tokens_ns=[t0 + ttft + i * tpot for i in range(cell.output_len)],
                              n_in=len(p) if isinstance(p, list) else cell.input_len, n_out=cell.output_len)
                for p in prompts]
        self.runs.append(cell)
        return RunOutput(records=recs, engine_s=0.0)

    def warmup(self, cell: Cell, prompts: list[Any]) -> None:
        """Nothing to warm up."""

    def stop(self) -> None:
        """Forget the group (safe twice)."""
        self.stopped = True
        self.group = None

    def describe(self) -> dict[str, Any]:
        """``{"name": "fake", "fake": True}``."""
        return {"name": self.name, "fake": True}

    def scorer(self, n_ctx: int, shape: Any, vocab: Any) -> FakeScorer:
        """A :class:`FakeScorer` (used by :func:`infbench.quality.perplexity.score_loaded`)."""
        return FakeScorer()


class FakeServer(FakeEngine):
    """A serving-mode engine whose TTFT grows with the offered load past ``capacity``.

    For a load of L (requests in flight, or arrivals per s) each request's TTFT is
    ``ttft_s * max(1, L / capacity)`` (``capacity`` default 4): an SLO of
    ``1.5 * ttft_s`` passes up to ``1.5 * capacity`` and fails above. ``num_requests``
    requests per cell (default 8).
    """

    name = "fake-server"

    def make_prompts(self, cell: Cell, model: Any) -> list[Any]:
        """One synthetic prompt per timed request."""
        n = (cell.load.num_requests if cell.load is not None else None) or 8
        return [[1] * cell.input_len for _ in range(n)]

    def ttft(self, cell: Cell) -> float:
        """``ttft_s * max(1, load / capacity)``."""
        base, cap = self._opt("ttft_s", 0.01), self._opt("capacity", 4.0)
        ld = cell.load
        load = float((ld.concurrency if ld.mode == "concurrency" else ld.request_rate) or 1) if ld else 1.0
        return base * max(1.0, load / cap)


class FakeScorer:
    """A perplexity scorer with a fixed tokenizer (one token per byte, no BOS) and a
    negative log-likelihood of ``ln 2`` for every token (so every perplexity is 2)."""

    def tokenize(self, text: str) -> tuple[np.ndarray, int | None]:
        """One id per byte of the UTF-8 text, no BOS."""
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32), None

    def chunk_nll(self, chunks: np.ndarray, first: int) -> tuple[list[np.ndarray], None]:
        """``ln 2`` for each scored position of each chunk."""
        n = chunks.shape[1] - first - 1
        return [np.full(n, np.log(2.0)) for _ in range(len(chunks))], None

    def close(self) -> None:
        """Nothing to free."""


#: The fake engines' registry entries.
ENGINES = [
    EngineSpec("fake", FakeEngine, ["cpu", "nvidia"], {"f16": "fp16", "f32": "fp32"}, options_model=FakeOptions,
               typed_options=True, description="stand-in batch engine (infbench.testing; measures nothing)"),
    EngineSpec("fake-server", FakeServer, ["cpu", "nvidia"], {"f16": "fp16"}, serving=True, options_model=FakeOptions,
               typed_options=True, description="stand-in server engine (infbench.testing; measures nothing)"),
]


class FakePlugin:
    """A plugin registering :data:`ENGINES` (its ``infbench_engines`` hook)."""

    @hookimpl
    def infbench_engines(self) -> list[EngineSpec]:
        """The fake engines."""
        return list(ENGINES)


def plugin_manager() -> PluginManager:
    """A fresh plugin manager: the built-ins, installed plugins and :class:`FakePlugin`."""
    pm = build_plugin_manager()
    pm.register(FakePlugin(), name="fake")
    return pm


__all__ = ["ENGINES", "FakeEngine", "FakeOptions", "FakePlugin", "FakeScorer", "FakeServer", "plugin_manager",
           "CellTimeout"]
