"""Options that would do nothing in a run, refused once its cells are planned (issue 33).

Where an option applies is declared on its field (:func:`infbench.data.flags.flag`'s
``applies`` and ``where``); most options that apply only somewhere live only there (the
find-max options in the find-max scenario, the Ray options in the Ray executor: refused by
:meth:`infbench.data.run_config.RunConfig.from_flags` before anything is detected). What is
left depends on the planned cells (a batch cell, a serving load, an engine that reads the
option), and :func:`refuse_ignored` checks it here. The scan of every option against every
mode that found these is ``tests/unit/plan/test_option_scan.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from infbench.data.errors import ConfigError
from infbench.data.groups import Plan
from infbench.data.run_config import RunConfig, flag_table
from infbench.data.schema import Cell


def _batch(cells: list[Cell]) -> bool:
    return any(c.load is None or c.load.mode == "batch" for c in cells)


def _inprocess(cells: list[Cell]) -> bool:
    return any(c.load is None for c in cells)


def _rate(cells: list[Cell]) -> bool:
    return any(c.load is not None and c.load.mode == "rate" for c in cells)


def _loads(cells: list[Cell]) -> bool:
    return any(c.load is not None and c.load.mode != "batch" for c in cells)


def _server(cells: list[Cell]) -> bool:
    return any(c.load is not None for c in cells)


#: The conditions a field's ``applies`` names: true when the planned cells have something the
#: option acts on.
APPLIES: dict[str, Callable[[list[Cell]], bool]] = {
    "batch_cells": _batch, "inprocess_cells": _inprocess, "rate_cells": _rate, "load_cells": _loads,
    "server_cells": _server, "spread_cells": _loads,
}


def refuse_ignored(config: RunConfig, executor: str, plans: list[Plan], specs: dict[str, Any]) -> None:
    """Refuse an option that does nothing in the run it was given with: each applies to some
    cells only (its field's ``applies``), and given elsewhere it would be silently ignored.
    The message names the option and where it applies.

    Args:
        config: the run's configuration (an option is "given" when the command line or the
            sweep file set its field).
        executor: ``--executor`` as resolved so far (``auto`` before the executor is built).
        plans: the planned cells (with ``--find-max``, the search's starting cell).
        specs: the engine registry (which engine reads which option).

    Raises:
        ConfigError: naming each ignored option and where it applies (exit 2).
    """
    cells = [c for p in plans for c in p.cells]
    engines = sorted({c.engine for c in cells})
    problems: list[str] = []
    for f in flag_table():
        s = f.spec
        if s.applies is None or f.part not in ("sweep", "load", "engine", "executor"):
            continue
        part = getattr(config, f.part)
        if f.field not in part.model_fields_set or f.field not in type(part).model_fields:
            continue
        if s.applies.startswith("reads:"):
            opt = s.applies.removeprefix("reads:")
            readers = [e for e in engines if getattr(specs.get(e), "options", None) is None
                       or opt in (specs[e].options or ())]
            if not readers:
                who = sorted(n for n, sp in specs.items() if sp.options is not None and opt in sp.options)
                problems.append(f"{s.name} applies to engines that read {opt} ({', '.join(who[:6])}); "
                                f"{', '.join(engines)} {'does' if len(engines) == 1 else 'do'} not")
        elif f.field == "load_nodes" and not _server(cells):
            problems.append(f"{s.name} applies to serving cells on Ray: a server engine with --concurrency/"
                            "--request-rate/--trace, and --ray-address")
        elif not APPLIES[s.applies](cells):
            problems.append(f"{s.name} applies to {s.where}")
    rt = getattr(config.executor, "container_runtime", None)
    if rt is not None and (executor == "inprocess" or (executor == "auto" and all(
            p.device.vendor == "cpu" or p.device.kind == "remote" for p in plans))):
        problems.append("--container-runtime applies to cells run in worker images (--executor container, or "
                        "--executor ray with images); here they run in this process")
    # Only in-process engines have a process of their own to give up; server engines always do.
    if config.engine.process is False and not _inprocess(cells):
        problems.append("--no-engine-process applies to in-process engines (llama.cpp, transformers, vllm); "
                        "a server engine runs in its own process anyway")
    if problems:
        raise ConfigError("option(s) that would do nothing in this run: " + "; ".join(problems),
                          hint="drop them, or add what they apply to")
