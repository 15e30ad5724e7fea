"""Which perplexity measurements a sweep's plan asks for (``infbench run --perplexity
TEXT``): one per group with real weights on an engine that can score. They are measured
by the perplexity scenario (:mod:`infbench.execution.scenarios.scoring`) on the run's executor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infbench.contract.registry import PERPLEXITY_TWIN
from infbench.data.errors import InfbenchError
from infbench.quality.perplexity import SCORERS, PerplexityRequest, plan_perplexity

if TYPE_CHECKING:  # pragma: no cover
    from infbench.contract.manager import PluginManager


def perplexity_requests(plan: Any, text: str, n_ctx: int = 512, max_chunks: int | None = None,
                        pm: PluginManager | None = None) -> tuple[list[PerplexityRequest], list[str]]:
    """The perplexity requests of every group of a sweep's plan that has real weights on an
    engine that can score (``llama.cpp``, ``transformers``, ``vllm``; a server engine is
    scored by its in-process twin, :data:`infbench.contract.registry.PERPLEXITY_TWIN`).

    Returns:
        ``(requests, notes)``: notes say which groups are not scored and why (dummy
        weights, no scorer, a missing library); they never fail the run.
    """
    reqs: list[PerplexityRequest] = []
    notes: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for g in plan.groups:
        engine = PERPLEXITY_TWIN.get(g.engine, g.engine)
        if (g.model.name, engine, g.dtype) in seen:
            continue
        seen.add((g.model.name, engine, g.dtype))
        if engine not in SCORERS:
            notes.append(f"{g.label()}: no perplexity on {g.engine}")
            continue
        if not g.model.path:
            notes.append(f"{g.label()}: dummy weights, no perplexity")
            continue
        try:
            reqs += plan_perplexity(g.model.path, [engine], [g.dtype], text, n_ctx, max_chunks, pm)
        except InfbenchError as exc:
            notes.append(f"{g.label()}: no perplexity ({exc.message})")
    return reqs, notes
