"""The in-process executor: the plan's scenario runs in this process, each group's engine
launched here through the engine session (:mod:`infbench.execution.session`), each result stored as
soon as it finishes.

This is also what runs inside a worker container and on a Ray node (``infbench worker``
uses it), so every executor measures with this code.
"""

from __future__ import annotations

from typing import Any

from infbench.contract.manager import PluginManager
from infbench.data.events import Observer, ignore
from infbench.data.groups import Plan
from infbench.data.run import RunOptions, RunSummary
from infbench.execution.bookkeeping import conclude, run_command, started_run
from infbench.execution.executors.spread import LoadSpread
from infbench.execution.scenarios import make_scenario
from infbench.execution.session import measuring_context
from infbench.store import Store


class InProcessExecutor:
    """Run a plan in this process.

    Args:
        pm: the plugin manager (engines, power sampler, device limits).
        provenance: the run's provenance (:func:`infbench.execution.bookkeeping.provenance`).
        take: asked before each cell (:attr:`infbench.execution.session.RunContext.take`): a worker
            whose cells may be handed to another node; None: every cell is this run's.
    """

    name = "inprocess"

    def __init__(self, pm: PluginManager, provenance: dict[str, Any], take: Any = None):
        self.pm = pm
        self.provenance = provenance
        self.take = take

    def run(self, plan: Plan, store: Store, options: RunOptions | None = None,
            observer: Observer = ignore) -> RunSummary:
        """Run the plan's scenario (default: every cell, a sweep) on its device and store
        each result as it finishes (:meth:`infbench.execution.scenarios.scenario.Scenario.run`).

        Cells whose newest stored attempt is ok are skipped unless ``options.force``, and
        so are cells another live process on the same store is measuring. A group whose
        engine fails to start stores its units as failed with that error, and the run goes
        on. On Ctrl-C or SIGTERM the engine is stopped, the run is marked ``interrupted``
        and the exception propagates; everything measured is stored. What the scenario
        concluded is in ``summary.scenario`` and the run's provenance.

        Returns:
            The :class:`~infbench.data.run.RunSummary`.

        Raises:
            KeyboardInterrupt: after the run is marked interrupted.
            ConfigError: the scenario refuses its input where it runs (a perplexity text
                that is not the one planned).
        """
        opts = options or RunOptions()
        scenario = make_scenario(plan)
        with started_run(store, self.provenance, run_command()) as summary:
            ctx = measuring_context(self.pm, plan.device, store, summary, opts, observer)
            ctx.take = self.take
            if opts.load_nodes is not None:  # serving load sent from nodes of a Ray cluster
                ctx.spread = LoadSpread(opts.load_nodes, opts.ray_address)
            try:
                scenario.run(ctx)
            finally:
                ctx.sampler.close()
                if ctx.spread is not None:
                    ctx.spread.close()
                conclude(store, summary, scenario.concluded(), self.provenance)
        return summary
