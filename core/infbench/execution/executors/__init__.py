"""Where a run's cells are measured: the executors of ``infbench run``.

Every executor has one shape (:class:`Executor`): ``run(plan, store, options, observer)
-> RunSummary``. It measures the cells of a :class:`~infbench.plan.Plan` that are not yet
stored ok, stores each result in the host's store as soon as it finishes (the store has
a single writer: the process that runs ``infbench run``), reports typed events
(:mod:`infbench.data.events`) to the observer, and marks the run's status. The plan,
cell ids and store are the same whichever executor ran them; an executor only moves the
worker contract (spec in, raw records and provenance out).

* ``inprocess`` (:mod:`.inprocess`): engines in this process.
* ``container`` (:mod:`.container`): the vendor plugin's worker image, through Docker or
  Apptainer (:mod:`infbench.runtimes`).
* ``ray`` (:mod:`.ray`): the groups spread over the nodes of a Ray cluster.

:func:`choose_executor` picks one for ``infbench run --executor``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from infbench.contract.registry import container_spec
from infbench.data.errors import ConfigError, InfbenchError
from infbench.execution.executors.container import ContainerExecutor
from infbench.execution.executors.inprocess import InProcessExecutor
from infbench.execution.executors.ray import RayExecutor, import_ray
from infbench.runtimes import container_runtime as make_runtime
from infbench.runtimes import detect_container_runtime

if TYPE_CHECKING:  # pragma: no cover
    from infbench.contract.manager import PluginManager
    from infbench.data.events import Observer
    from infbench.data.groups import Plan
    from infbench.data.run import RunOptions, RunSummary
    from infbench.store import Store

#: Values of ``infbench run --executor``.
EXECUTORS = ("auto", "inprocess", "container", "ray")
#: ``--runtime`` (deprecated) -> (executor, container runtime).
RUNTIME_ALIASES = {"auto": ("auto", None), "none": ("inprocess", None), "docker": ("container", "docker"),
                   "apptainer": ("container", "apptainer")}


class Executor(Protocol):
    """Runs a plan's cells somewhere and stores them in the host's store.

    Attributes:
        name: ``inprocess``, ``container``, ``ray``.
    """

    name: str

    def run(self, plan: Plan, store: Store, options: RunOptions | None, observer: Observer) -> RunSummary:
        """Measure every pending cell of ``plan`` and store each result as it finishes.

        Contract (checked by ``tests/integration/test_executor_contract.py`` for every
        executor): cells stored ok are skipped unless ``options.force`` (announced as
        ``CellSkipped``); every other cell ends as exactly one stored attempt, ok or failed
        (``CellFinished`` after it is stored); a failure never stops the sweep; the run's
        status is ``completed``, ``completed_with_failures`` or, on Ctrl-C/SIGTERM,
        ``interrupted`` (the exception propagates).

        Args:
            plan: the planned cells and their device.
            store: the host's store.
            options: run knobs (None: defaults).
            observer: receives the run's events.

        Returns:
            The :class:`~infbench.execution.bookkeeping.RunSummary`.
        """
        ...


def choose_executor(name: str, device: Any, engines: list[str], pm: PluginManager, provenance: dict[str, Any],
                    notes: list[str] | None = None, container_runtime: str | None = None,
                    **kwargs: Any) -> Executor:
    """The executor of ``infbench run --executor NAME``.

    ``auto`` (the default) runs in-process on the CPU and for remote endpoints; on vendor
    hardware it uses the plugin's image when a container runtime is present (a Docker
    engine answers, else ``apptainer`` is on PATH) and the plugin has an image for every
    engine of the sweep; otherwise in-process. If that image is not built (or holds
    another store schema) ``auto`` runs in-process and says so in ``notes``.

    Args:
        name: one of :data:`EXECUTORS`.
        device: the planned device group.
        engines: the sweep's engines.
        pm: the plugin manager.
        provenance: the host's provenance.
        notes: receives a line for the user when ``auto`` falls back to in-process.
        container_runtime: ``docker``, ``apptainer`` or None (detect) for ``container``; for
            ``ray``, the runtime each node runs the plugin's image with (None: in-process).
        **kwargs: executor options (``ray_address``, ``fleet`` for ``ray``).

    Raises:
        ConfigError: unknown name, or the named executor is not usable here.
    """
    if name not in EXECUTORS:
        raise ConfigError(f"unknown executor {name!r}", hint=f"choose one of: {', '.join(EXECUTORS)}")
    if name == "inprocess":
        return InProcessExecutor(pm, provenance)
    if name == "container":
        return ContainerExecutor(pm, make_runtime(container_runtime), provenance)
    if name == "ray":
        import_ray()  # a clear error when Ray is not installed
        return RayExecutor(pm, provenance, container_runtime=container_runtime, **kwargs)

    rt = _auto_runtime(device, engines, pm, notes, container_runtime)
    if rt is None:
        return InProcessExecutor(pm, provenance)

    return ContainerExecutor(pm, rt, provenance)


def _auto_runtime(device: Any, engines: list[str], pm: PluginManager, notes: list[str] | None,
                  preferred: str | None) -> Any | None:
    """The container runtime ``auto`` uses, or None for in-process (see :func:`choose_executor`)."""
    if device.vendor == "cpu" or device.kind == "remote":
        return None

    specs = [container_spec(pm, device, e) for e in engines]
    if not all(specs):
        return None

    rt = detect_container_runtime(preferred)
    if rt is None:
        return None
    try:
        for s in specs:
            rt.check_image(s.image)  # type: ignore[union-attr]
    except InfbenchError as exc:
        if notes is not None:
            notes.append(f"running in-process, not in the {rt.name} worker image: {exc.message} ({exc.hint})")
        return None
    return rt
