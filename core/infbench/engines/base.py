"""The engine adapter interface and the engine registry entry (:class:`EngineSpec`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from infbench.data.engine import DTYPE_ALIASES, EngineSpec, RunOutput, precision_of  # noqa: F401 - re-exported
from infbench.errors import CellTimeout
from infbench.schema import Cell, DeviceInfo

if TYPE_CHECKING:  # pragma: no cover
    from infbench.plan import Group


class Engine(ABC):
    """An engine adapter: one loaded model serving the cells of one group.

    Life cycle: ``start(group)`` once, ``warmup``/``run`` per cell, ``stop()`` always
    (also after an error; it must be safe to call twice).

    Args:
        device: the device group to run on.
        options: engine options (e.g. ``n_threads``).
    """

    name = "engine"
    #: Evidence that the engine runs on :attr:`device`, from :meth:`verify_device`; stored
    #: with every cell as ``engine["device_proof"]``.
    device_proof: dict[str, Any] | None = None

    def __init__(self, device: DeviceInfo, options: dict[str, Any] | None = None):
        self.device = device
        self.options = dict(options or {})
        self._backends: Any = None

    @property
    def backends(self) -> Any:
        """The device's :class:`~infbench.schema.DeviceBackends` (its plugin's
        ``infbench_device_backends``), or None when no plugin declares them. Set by the
        run (:func:`infbench.engines.device_proof.start_on_device`); else looked up once
        through the process-wide plugin manager."""
        if self._backends is None:
            from infbench.engines.availability import device_backends
            from infbench.plugins import get_plugin_manager

            self._backends = device_backends(get_plugin_manager(), self.device) or False
        return self._backends or None

    @backends.setter
    def backends(self, value: Any) -> None:
        self._backends = value if value is not None else False

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
        from infbench.workloads.synthetic import synthetic_prompts

        return synthetic_prompts(cell.batch, cell.input_len, model.vocab, cell.seed)

    def warmup(self, cell: Cell, prompts: list[list[int]]) -> None:
        """One untimed pass over the same prompts with 2 output tokens (default)."""
        self.run(cell.model_copy(update={"output_len": min(2, cell.output_len)}), prompts)

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
        from infbench.engines.availability import device_label
        from infbench.errors import DeviceMismatch

        raise DeviceMismatch(self.name, device_label(self.device), "this adapter cannot report which device it "
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
