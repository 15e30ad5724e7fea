"""Several perplexity measurements stored one by one: ``infbench perplexity`` over engines
and dtypes, and ``infbench run --perplexity TEXT`` (each real-weights group of a sweep)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from infbench.errors import InfbenchError
from infbench.quality.perplexity import PerplexityRequest, plan_perplexity, run_perplexity


def measure_and_store(reqs: list[PerplexityRequest], store: Any, device: Any, options: dict[str, Any] | None = None,
                      pm: Any = None, force: bool = False,
                      on_event: Callable[[str, Any], None] | None = None) -> list[tuple[PerplexityRequest, bool, Any]]:
    """Measure each request not already stored ok (all with ``force``) and store it at once.

    Args:
        reqs: validated requests (:func:`~infbench.quality.perplexity.plan_perplexity`).
        store: the :class:`~infbench.store.Store`.
        device: the :class:`~infbench.schema.DeviceInfo` to run on.
        options: engine options. pm: the plugin manager.
        force: measure again what is stored.
        on_event: ``(kind, payload)``: ``start`` (request), ``loading`` (label), ``chunks`` (n),
            ``done`` (:class:`~infbench.quality.perplexity.PerplexityResult`), ``skipped`` (request).

    Returns:
        ``(request, skipped, result or None when skipped)`` per request, in order.

    Raises:
        ConfigError: a text too short for ``n_ctx`` (what was measured before is stored).
    """
    from infbench.store.quality import save_quality, stored_ok

    emit = on_event or (lambda kind, payload: None)
    out = []
    for req in reqs:
        if not force and stored_ok(store, req.key()) is not None:
            emit("skipped", req)
            out.append((req, True, None))
            continue
        emit("start", req)
        res = run_perplexity(req, device, options, pm, on_event=emit)
        save_quality(store, res)
        emit("done", res)
        out.append((req, False, res))
    return out


def perplexity_for_plan(plan: Any, text: str, store: Any, n_ctx: int = 512, max_chunks: int | None = None,
                        options: dict[str, Any] | None = None, pm: Any = None, force: bool = False,
                        on_event: Callable[[str, Any], None] | None = None) -> tuple[list[Any], list[str]]:
    """The perplexity of every group of a sweep's plan that has real weights on an engine
    that can score (``llama.cpp``, ``transformers``, ``vllm``; a server engine is scored by
    its in-process twin), stored beside its cells.

    Returns:
        ``(measure_and_store's list, notes)``: notes say which groups were not scored and why
        (dummy weights, no scorer, a missing library); they never fail the run.
    """
    from infbench.quality.perplexity import SCORERS
    from infbench.report.data import PERPLEXITY_TWIN

    reqs, notes, seen = [], [], set()
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
    return measure_and_store(reqs, store, plan.device, options, pm, force, on_event), notes
