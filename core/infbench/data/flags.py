"""Command-line flags declared once, on the fields of the typed configuration they set
(:class:`infbench.data.run_config.RunConfig` and its parts; issue 40).

A field made with :func:`flag` carries its flag (names, help, how a value is read) beside its
type, default and bounds; the command line (:mod:`infbench.cli.flags`) generates the typer
options from the fields, and :func:`infbench.data.run_config.RunConfig.from_flags` reads the
values back into the model. Nothing else spells a flag: an error names it through
:func:`flag_name`, the check of an option that would do nothing reads where it applies from the
field (``applies``).

List flags may repeat or take comma lists (``--batch 1,4 --batch 8``), parsed by
:func:`split_values`.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any

from pydantic import Field
from pydantic.fields import FieldInfo

from infbench.data.errors import ConfigError

_short = reprlib.Repr()
_short.maxstring = 60


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
    if not items:
        raise ConfigError(f"{flag} was given no value (got {', '.join(repr(v) for v in values)[:80]})",
                          hint=f"give one or more values, e.g. {flag} 1,16,32, or leave the flag out")
    if cast in (int, float):
        try:
            return [cast(v) for v in items]
        except ValueError:
            kind = "integers" if cast is int else "numbers"
            raise ConfigError(f"{flag} takes {kind}, got {_short.repr(', '.join(items))}",
                              hint=f"e.g. {flag} 1,16,32") from None
    return items


@dataclass(frozen=True)
class FlagSpec:
    """How one field is set from the command line.

    Attributes:
        decls: the flag's names (``("--concurrency", "-c")``); a boolean with an ``on/off``
            pair is written ``"--engine-process/--no-engine-process"``.
        help: the help text (units in it: ``(s)``, ``in ms``).
        param: the Python name of the generated parameter (default: the field's name).
        cli_type: how the raw value is read: ``str``, ``int``, ``float``, ``bool``, ``path``,
            or ``list[str]``, ``list[int]``, ``list[float]`` (repeatable, comma lists).
        unit: the unit of the field's value (``s``, ``W``, ``tokens``), for messages and docs.
        scale: the flag's value is multiplied by it (``--slo-ttft-ms``: 1e-3 into a field in s).
        negate: a boolean flag that sets the field to False (``--no-stream``).
        hidden: not shown in ``--help`` (a deprecated name).
        cli_min: a lower bound checked by the command line itself (shown in ``--help``).
        selects: giving the flag selects this variant of a tagged part (``--find-max`` selects
            the find-max scenario); the variant's other flags apply only with it.
        panel: the ``--help`` panel (default: the part's).
        applies: where the option does something, a condition on the planned cells
            (:data:`infbench.data.run_config.APPLIES`); given elsewhere it is refused.
        where: what it applies to, in words, for that refusal.
    """

    decls: tuple[str, ...]
    help: str
    param: str | None = None
    cli_type: str = "str"
    unit: str | None = None
    scale: float | None = None
    negate: bool = False
    hidden: bool = False
    cli_min: int | None = None
    selects: bool = False
    panel: str | None = None
    applies: str | None = None
    where: str | None = None

    @property
    def name(self) -> str:
        """The flag as messages name it: its first long name (``--concurrency``)."""
        first = self.decls[0].split("/")[0]
        return first


def flag(*decls: str, help: str, default: Any = None, param: str | None = None, cli_type: str = "str",
         unit: str | None = None, scale: float | None = None, negate: bool = False, hidden: bool = False,
         cli_min: int | None = None, selects: bool = False, panel: str | None = None, applies: str | None = None,
         where: str | None = None, also: tuple[FlagSpec, ...] = (), **bounds: Any) -> Any:
    """A :func:`pydantic.Field` that is set by a command-line flag (see :class:`FlagSpec`).

    Args:
        *decls: the flag's names.
        help: its help text.
        default: the field's default (also the flag's shown default).
        also: more flags setting the same field (``--slo-ttft-ms`` beside ``--slo-ttft``).
        **bounds: the field's bounds and other :func:`pydantic.Field` arguments
            (``ge``, ``le``, ``gt``, ``pattern``...); a ``float`` flag's number is finite
            (``allow_inf_nan=False``) unless they say otherwise.
    """
    spec = FlagSpec(tuple(decls), help, param, cli_type, unit, scale, negate, hidden, cli_min, selects, panel,
                    applies, where)
    if cli_type == "float":
        bounds.setdefault("allow_inf_nan", False)  # a number is finite: NaN and infinity are refused
    extra: Any = {"cli": [spec, *also]}  # read by flags_of (never a JSON schema's: the flags are objects)
    return Field(default, json_schema_extra=extra, **bounds)


def also(*decls: str, help: str, **kw: Any) -> FlagSpec:
    """Another flag setting the same field (pass to :func:`flag`'s ``also``)."""
    return FlagSpec(tuple(decls), help, **kw)


def flags_of(info: FieldInfo) -> list[FlagSpec]:
    """The flags of a field (empty for a field set only in a file)."""
    extra = info.json_schema_extra
    return list(extra.get("cli", [])) if isinstance(extra, dict) else []  # type: ignore[arg-type]
