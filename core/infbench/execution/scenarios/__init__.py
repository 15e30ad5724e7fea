"""Scenarios: what a run measures next (see :mod:`infbench.execution.scenarios.scenario`).

* :class:`~.full_sweep.FullSweep` (``kind="sweep"``): every planned cell once (the grid itself is
  :class:`~infbench.data.schema.Sweep`, its configuration :class:`~infbench.data.scenarios.SweepScenario`);
* :class:`~.find_max.FindMax` (``kind="find_max"``): the SLO-constrained maximum load;
* :class:`~.scoring.Perplexity` (``kind="perplexity"``): perplexity per engine and dtype;
* :class:`~.adaptive_sweep.Adaptive` (``kind="adaptive"``): a designed subset measured, the rest predicted;
* :class:`~.frontier.Frontier` (``kind="frontier"``): concurrency doubling per configuration until it
  stops paying.

:func:`make_scenario` builds the scenario of a plan from its spec (``plan.scenario``), in
the process that plans and in every worker.
"""

from __future__ import annotations

from infbench.data.groups import Plan
from infbench.execution.scenarios.adaptive_sweep import Adaptive
from infbench.execution.scenarios.find_max import FindMax
from infbench.execution.scenarios.frontier import Frontier
from infbench.execution.scenarios.full_sweep import FullSweep
from infbench.execution.scenarios.scenario import Part, Scenario
from infbench.execution.scenarios.scoring import Perplexity

#: ``kind`` -> scenario class.
SCENARIOS: dict[str, type[Scenario]] = {c.kind: c for c in (FullSweep, FindMax, Perplexity, Adaptive, Frontier)}

__all__ = ["SCENARIOS", "Part", "Scenario", "make_scenario"]


def make_scenario(plan: Plan) -> Scenario:
    """The scenario of ``plan`` (its ``scenario`` spec's ``kind``).

    Raises:
        KeyError: a kind no scenario implements (a spec validated by pydantic has none).
    """
    return SCENARIOS[plan.scenario.kind](plan)
