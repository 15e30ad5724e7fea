"""Building the sweep of ``infbench run`` from a preset, a YAML file and flags.

The order of precedence: a preset (default ``quick``) is the base; a sweep file's fields
replace the preset's (the file may name its own base with ``preset:``); each axis given
on the command line replaces both. A file's keys that name a part of the run's configuration
(``power:``, ``scenario:``... :data:`infbench.data.run_config.PARTS`) are that part, read by
:func:`infbench.execution.orchestrator.with_sweep_file`; the others are the grid's fields. The result is validated as a
:class:`~infbench.data.schema.Sweep`, and every validation error is turned into one
:class:`~infbench.data.errors.ConfigError` naming the field, the value and the allowed fields.
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from infbench.data.errors import ConfigError, suggest
from infbench.data.inputs import StrictYamlLoader
from infbench.data.run_config import PARTS
from infbench.data.schema import Sweep
from infbench.plan import PRESETS

#: Largest sweep file read (a sweep is a few lines of YAML).
MAX_SWEEP_BYTES = 1 << 20
#: Longest error message built from a sweep's values.
MAX_MESSAGE = 2000

_short = reprlib.Repr()
_short.maxstring, _short.maxother, _short.maxlist, _short.maxdict, _short.maxlevel = 60, 60, 6, 6, 2


def validation_message(exc: ValidationError, source: str) -> ConfigError:
    """One :class:`ConfigError` for every field that failed :class:`Sweep` validation,
    naming the field, what was wrong and (for unknown fields) the closest known one."""
    fields = list(Sweep.model_fields)
    lines = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        loc = _short.repr(loc) if len(loc) > 60 else loc
        if e["type"] == "extra_forbidden":
            s = suggest(str(e["loc"][0])[:60], fields)
            lines.append(f"unknown field {loc!r}" + (f" ({s})" if s else ""))
        elif e["type"] == "missing":
            lines.append(f"field {loc!r} is required")
        elif e["type"] == "value_error":
            lines.append(f"field {loc!r}: {e['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"field {loc!r}: {e['msg']} (got {_short.repr(e.get('input'))})")
    msg = "; ".join(lines)
    if len(msg) > MAX_MESSAGE:
        msg = msg[:MAX_MESSAGE] + f"... ({len(lines)} problems)"
    return ConfigError(f"invalid sweep in {source}: " + msg, hint="allowed fields: " + ", ".join(fields))


#: The sweep file's YAML loader (:class:`infbench.data.inputs.StrictYamlLoader`).
_SweepLoader = StrictYamlLoader


def load_sweep_file(path: Path) -> dict[str, Any]:
    """Read a sweep YAML file into a dict (validated later with the flags merged in).

    Raises:
        ConfigError: missing file, malformed YAML, or not a mapping.
    """
    if not path.exists():
        raise ConfigError(f"sweep file {path} not found")
    if not path.is_file():
        raise ConfigError(f"sweep file {path} is not a file", hint="pass a YAML file to --sweep")
    try:
        raw = path.read_bytes()[:MAX_SWEEP_BYTES + 1]
    except OSError as exc:
        raise ConfigError(f"cannot read sweep file {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_SWEEP_BYTES:
        raise ConfigError(f"sweep file {path} is larger than {MAX_SWEEP_BYTES >> 20} MiB; a sweep is a few lines of "
                          "YAML", hint="see docs/sweeps.md for the file format")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"sweep file {path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                          hint="a sweep file is YAML text; see docs/sweeps.md") from None
    try:
        data = yaml.load(text, Loader=_SweepLoader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or (str(exc) if isinstance(exc, yaml.YAMLError) else
                                                    "nested too deeply")
        raise ConfigError(f"{path} is not valid YAML{where}: {str(problem)[:300]}",
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
            default sweep (:func:`infbench.execution.default_sweep.default_sweep`); None: ``quick``.
        **flags: :class:`Sweep` fields from the command line; None and ``[]`` mean "not given".
            A preset that pairs input with output lengths (``pair_lengths``) crosses them
            instead when a flag changes one axis to another number of values.

    Raises:
        ConfigError: unknown preset, bad file, or a field that fails validation.
    """
    source = "command-line flags"
    if sweep_file is not None:
        # a mapping under a part's name is RunConfig's part (warmup: {tol: 0.05}); anything else is
        # the grid's field of that name (warmup: 2, the Sweep's exact passes)
        data = {k: v for k, v in load_sweep_file(sweep_file).items() if not (k in PARTS and isinstance(v, dict))}
        source = str(sweep_file)
        p = data.pop("preset", preset or "quick")
        if not isinstance(p, str) or p not in PRESETS:
            raise ConfigError(f"unknown preset {_short.repr(p)} in {sweep_file}",
                              hint=f"choose one of: {', '.join(PRESETS)}")
        data = {**PRESETS[p], **data}
    elif preset is None and base is not None:
        data = dict(base)
    else:
        name = preset or "quick"
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}", hint=f"choose one of: {', '.join(PRESETS)}")
        data = dict(PRESETS[name])
    given = {k: v for k, v in flags.items() if v not in (None, [], {})}
    if isinstance(data.get("engine_args"), dict) and "engine_args" in given:  # a flag wins per key
        given["engine_args"] = {**data["engine_args"], **given["engine_args"]}
    data.update(given)
    if data.get("pair_lengths") and ({"input_len", "output_len"} & set(given)) and \
            len(data.get("input_len") or []) != len(data.get("output_len") or []):
        data["pair_lengths"] = False  # an axis changed alone: every input with every output
    try:
        return Sweep.model_validate(data)
    except ValidationError as exc:
        raise validation_message(exc, source) from None
