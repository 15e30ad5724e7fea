"""Building the sweep of ``infbench run`` from a preset, a YAML file and flags.

The order of precedence: a preset (default ``quick``) is the base; a sweep file's fields
replace the preset's (the file may name its own base with ``preset:``); each axis given
on the command line replaces both. The result is validated as a
:class:`~infbench.schema.Sweep`, and every validation error is turned into one
:class:`~infbench.errors.ConfigError` naming the field, the value and the allowed fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from infbench.errors import ConfigError, suggest
from infbench.schema import Sweep


def split_values(values: list[str] | None, flag: str, cast: type = str) -> list[Any] | None:
    """Flags may repeat or take comma lists: ``["1,4", "8"]`` -> ``[1, 4, 8]``.

    Args:
        values: the raw flag values (None or empty: the flag was not given).
        flag: the flag's name, for the error message.
        cast: ``str``, ``int`` or ``float``.

    Returns:
        The items, or None when the flag was not given.

    Raises:
        ConfigError: an item that is not a number where ``cast`` asks for one.
    """
    if not values:
        return None
    items = [v.strip() for raw in values for v in raw.split(",") if v.strip()]
    if cast in (int, float):
        try:
            return [cast(v) for v in items]
        except ValueError:
            kind = "integers" if cast is int else "numbers"
            raise ConfigError(f"{flag} takes {kind}, got {', '.join(items)}",
                              hint=f"e.g. {flag} 1,16,32") from None
    return items


def serving_workload_flags(trace: Any = None, trace_speed: list[float] | None = None, multi_turn: bool = False,
                           think_time_s: float | None = None, prefix_len: int | None = None,
                           num_prefixes: int | None = None, no_stream: bool = False,
                           tokenizer: str | None = None) -> dict[str, Any]:
    """The :class:`Sweep` fields of the serving-workload flags (``--trace`` ...
    ``--tokenizer``), None for those not given (so a sweep file's values stay)."""
    return {"trace": str(trace) if trace else None, "trace_speed": trace_speed,
            "multi_turn": True if multi_turn else None, "think_time_s": think_time_s, "prefix_len": prefix_len,
            "num_prefixes": num_prefixes, "stream": False if no_stream else None, "tokenizer": tokenizer}


def validation_message(exc: ValidationError, source: str) -> ConfigError:
    """One :class:`ConfigError` for every field that failed :class:`Sweep` validation,
    naming the field, what was wrong and (for unknown fields) the closest known one."""
    fields = list(Sweep.model_fields)
    lines = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            s = suggest(str(e["loc"][0]), fields)
            lines.append(f"unknown field {loc!r}" + (f" ({s})" if s else ""))
        elif e["type"] == "missing":
            lines.append(f"field {loc!r} is required")
        else:
            lines.append(f"field {loc!r}: {e['msg']} (got {e.get('input')!r})")
    return ConfigError(f"invalid sweep in {source}: " + "; ".join(lines),
                       hint="allowed fields: " + ", ".join(fields))


def load_sweep_file(path: Path) -> dict[str, Any]:
    """Read a sweep YAML file into a dict (validated later with the flags merged in).

    Raises:
        ConfigError: missing file, malformed YAML, or not a mapping.
    """
    if not path.is_file():
        raise ConfigError(f"sweep file {path} not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path} is not valid YAML{where}: {getattr(exc, 'problem', exc)}",
                          hint="see docs/sweeps.md for the file format") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sweep fields, got {type(data).__name__}",
                          hint="e.g. `models: [smollm2-135m]` on its own line")
    return data


def build_sweep(preset: str | None, sweep_file: Path | None, base: dict[str, Any] | None = None,
                **flags: Any) -> Sweep:
    """The sweep of ``infbench run``: preset, then file, then flags (see the module doc).

    Args:
        preset: a name from :data:`infbench.plan.PRESETS`, or None for the default.
        sweep_file: a YAML file of :class:`Sweep` fields, or None.
        base: the default when neither ``preset`` nor ``sweep_file`` is given: the device's
            default sweep (:func:`infbench.default_sweep.default_sweep`); None: ``quick``.
        **flags: :class:`Sweep` fields from the command line; None and ``[]`` mean "not given".
            A preset that pairs input with output lengths (``pair_lengths``) crosses them
            instead when a flag changes one axis to another number of values.

    Raises:
        ConfigError: unknown preset, bad file, or a field that fails validation.
    """
    from infbench.plan import PRESETS

    source = "command-line flags"
    if sweep_file is not None:
        data = load_sweep_file(sweep_file)
        source = str(sweep_file)
        p = data.pop("preset", preset or "quick")
        if p not in PRESETS:
            raise ConfigError(f"unknown preset {p!r} in {sweep_file}", hint=f"choose one of: {', '.join(PRESETS)}")
        data = {**PRESETS[p], **data}
    elif preset is None and base is not None:
        data = dict(base)
    else:
        name = preset or "quick"
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}", hint=f"choose one of: {', '.join(PRESETS)}")
        data = dict(PRESETS[name])
    given = {k: v for k, v in flags.items() if v not in (None, [])}
    data.update(given)
    if data.get("pair_lengths") and ({"input_len", "output_len"} & set(given)) and \
            len(data.get("input_len") or []) != len(data.get("output_len") or []):
        data["pair_lengths"] = False  # an axis changed alone: every input with every output
    try:
        return Sweep(**data)
    except ValidationError as exc:
        raise validation_message(exc, source) from None
