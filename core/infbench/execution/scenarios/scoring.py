"""Perplexity as a scenario (``infbench perplexity``, ``infbench run --perplexity``): one
engine load per (model, engine, dtype), each scoring the same text with llama.cpp's
``llama-perplexity`` method (:mod:`infbench.quality.perplexity`).

The engine is started and proven on the device by the engine session, like a sweep's; each
measurement is stored as it finishes (:mod:`infbench.store.quality`), a failed one with its
error. Measurements already stored ok are skipped unless ``--force``. In a worker (a
container, a Ray node) every item is planned again there and checked to be the same text
and weights (their SHA-256) the host planned.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from infbench.data.events import Note
from infbench.data.groups import Group, Plan
from infbench.data.scenarios import PerplexityItem, PerplexityScenario, ScenarioSpec
from infbench.data.schema import Cell, DeviceInfo
from infbench.execution.scenarios.scenario import Part, Running, Scenario
from infbench.execution.session import EngineSession, RunContext
from infbench.quality.perplexity import PerplexityRequest, new_result, request_for
from infbench.store.quality import stored_ok


def perplexity_plan(reqs: list[PerplexityRequest], device: DeviceInfo) -> Plan:
    """The plan of validated requests (:func:`~infbench.quality.perplexity.plan_perplexity`,
    all of one text, ``n_ctx`` and chunk limit): one group per request, holding a
    placeholder cell that names the model file (the worker contract carries cells)."""
    first = reqs[0]
    items, groups = [], []
    for r in reqs:
        model = r.shape.path or r.shape.name
        items.append(PerplexityItem(model=model, engine=r.engine, dtype=r.dtype, weights_sha256=r.weights.sha256 or "",
                                    key=r.key()))
        cell = Cell(model=model, engine=r.engine, dtype=r.dtype, batch=1, input_len=r.n_ctx, output_len=1, warmup=0)
        groups.append(Group(r.shape, r.engine, r.dtype, 1, [cell]))
    spec = PerplexityScenario(text_path=first.text_path, text_sha256=first.text_sha256, n_ctx=first.n_ctx,
                              max_chunks=first.max_chunks, items=items)
    return Plan(device, groups, scenario=spec)


class Perplexity(Scenario):
    """Score the text once per item (see the module doc)."""

    kind = "perplexity"
    spec: PerplexityScenario

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self._reqs: dict[str, PerplexityRequest] = {}

    def item_of(self, group: Group) -> PerplexityItem:
        """The item a group measures (same model, engine and dtype)."""
        model = group.cells[0].model if group.cells else (group.model.path or group.model.name)
        for it in self.spec.items:
            if (it.model, it.engine, it.dtype) == (model, group.engine, group.dtype):
                return it
        raise KeyError(f"no perplexity item for {group.label()}")

    def request(self, item: PerplexityItem, ctx: RunContext) -> PerplexityRequest:
        """The item's :class:`~infbench.quality.perplexity.PerplexityRequest`, planned here and
        checked against the host's text and weights (:func:`~infbench.quality.perplexity.request_for`)."""
        if item.key not in self._reqs:
            self._reqs[item.key] = request_for(item, self.spec, ctx.pm)
        return self._reqs[item.key]

    def groups(self, ctx: RunContext) -> Iterator[Group]:
        """Each item's group, unless stored ok already (and not ``force``): those are
        counted in ``summary.quality_skipped``."""
        for g in self.plan.groups:
            item = self.item_of(g)
            if not ctx.options.force and item.key and stored_ok(ctx.store, item.key) is not None:
                ctx.summary.quality_skipped.append(item.key)
                continue
            self.request(item, ctx)  # a changed text or model refuses before the model loads
            yield g

    def run_group(self, group: Group, session: EngineSession) -> None:
        """Score the text on the loaded engine; the result is stored."""
        session.score(self.request(self.item_of(group), session.ctx))

    def start_failed(self, group: Group, error: str, ctx: RunContext) -> None:
        """The engine did not start: the measurement is stored failed with the error."""
        self._fail(self.item_of(group), error, ctx)

    def _fail(self, item: PerplexityItem, error: str, ctx: RunContext) -> None:
        res = new_result(self.request(item, ctx), ctx.device)
        res.status, res.error, res.finished_at = "failed", error, time.time()
        ctx.record_quality(res)

    def outcome(self) -> dict[str, object]:
        """Nothing beyond the stored measurements."""
        return {}

    def parts(self, ctx: RunContext) -> list[Part]:
        """One part per item not stored ok (unless ``force``)."""
        out = []
        for g in self.plan.groups:
            item = self.item_of(g)
            if not ctx.options.force and item.key and stored_ok(ctx.store, item.key) is not None:
                ctx.summary.quality_skipped.append(item.key)
                continue
            out.append(Part(g, self.spec.model_copy(update={"items": [item]})))
        return out

    def spec_for(self, parts: list[Part]) -> ScenarioSpec:
        """The items of all the parts."""
        items = [it for p in parts for it in p.spec.items]  # type: ignore[union-attr]
        return self.spec.model_copy(update={"items": items})

    def is_done(self, part: Part) -> bool:
        """Whether every item of ``part`` came back."""
        return {it.key for it in part.spec.items} <= part.finished_keys()  # type: ignore[union-attr]

    def owns(self, part: Part, running: Running) -> bool:
        """Whether the item being scored (its quality key) is one of ``part``'s."""
        return isinstance(running, str) and running in {it.key for it in part.spec.items}  # type: ignore[union-attr]

    def after_crash(self, part: Part, running: Running, error: str, refused: bool,
                    ctx: RunContext) -> Part | None:
        """The item the worker was on (else its first item left; all with ``refused``) is
        stored failed; the others run again."""
        spec: PerplexityScenario = part.spec  # type: ignore[assignment]
        done = part.finished_keys()
        left = [it for it in spec.items if it.key not in done]
        if not left:
            return None
        victims = left if refused else ([it for it in left if it.key == running] or left[:1])
        for it in victims:
            try:
                self._fail(it, error, ctx)
            except Exception as exc:  # noqa: BLE001 - the host cannot plan it either: say why
                ctx.observer(Note(f"perplexity of {it.model} on {it.engine} ({it.dtype}) not measured: {error}; "
                                  f"{exc}"))
        rest = [it for it in left if it not in victims]
        if not rest:
            return None
        return Part(part.group, spec.model_copy(update={"items": rest}), results=part.results, attempts=part.attempts)

    def resume(self, part: Part) -> Part | None:
        """The part's items that did not come back."""
        spec: PerplexityScenario = part.spec  # type: ignore[assignment]
        done = part.finished_keys()
        rest = [it for it in spec.items if it.key not in done]
        if not rest:
            return None
        return Part(part.group, spec.model_copy(update={"items": rest}), results=part.results, attempts=part.attempts)
