"""``infbench run``'s options, generated from :class:`~infbench.data.run_config.RunConfig`.

Each option is declared once, on its field (:func:`infbench.data.flags.flag`); here it
becomes a typer option (names, help, shown default, a ``--help`` panel per part of the
configuration), and :func:`with_config_options` gives a command function one parameter per
flag, whose values :meth:`RunConfig.from_flags` reads back into the model.

Why typer with this generator, and not cyclopts or pydantic-settings' command line (issue 40):
every other command of infbench is typer (with rich help and markdown help texts), so one
generator keeps one framework, the same ``--help`` layout and the same parsing of every flag
(a comma list, a repeated flag, ``--engine-process/--no-engine-process``); cyclopts (AIPerf's
choice) derives flags from pydantic models well but would mean two frameworks or porting
twenty commands, and renders help differently; pydantic-settings' ``CliApp`` builds
argparse options named after the nested path (``--load.concurrency``), which would rename
every flag users and docs have. The generator is 60 lines, and the model stays free of any
command-line library (it lives in the data layer).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from infbench.data.run_config import Flag, flag_table

#: Python types of the parameters, by :attr:`~infbench.data.flags.FlagSpec.cli_type`.
_TYPES: dict[str, Any] = {"str": str | None, "int": int | None, "float": float | None, "path": Path | None,
                          "list[str]": list[str] | None, "list[int]": list[str] | None,
                          "list[float]": list[str] | None}


def _parameter(f: Flag, help: str | None = None, panel: bool = True) -> inspect.Parameter:
    """The typer parameter of one flag (``help``: the command's own words for it; ``panel``:
    in its part's ``--help`` panel)."""
    s = f.spec
    if s.cli_type == "bool":
        default: Any = bool(f.info.default) if isinstance(f.info.default, bool) else False
        kind: Any = bool
    else:
        default = None if s.selects else f.default
        kind = _TYPES[s.cli_type]
        if default is not None:
            kind = {"float": float, "int": int, "str": str}[s.cli_type]
    bounds: dict[str, Any] = {"min": s.cli_min} if s.cli_min is not None else {}
    opt = typer.Option(*s.decls, help=help or s.help, hidden=s.hidden, rich_help_panel=f.panel if panel else None,
                       **bounds)
    return inspect.Parameter(f.param, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[kind, opt])


def with_config_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func(**values)`` with a signature of one typer option per flag of
    :func:`~infbench.data.run_config.flag_table`, for ``app.command()``."""
    func.__signature__ = inspect.Signature([_parameter(f) for f in flag_table()])  # type: ignore[attr-defined]
    return func


def sharing_config_options(order: list[str], help: dict[str, str] | None = None) -> Callable[..., Any]:
    """A decorator giving another command (``perplexity``) options of the run's configuration:
    the command's signature becomes ``order``, each name either one of its own parameters or a
    flag of :func:`~infbench.data.run_config.flag_table` (the same names, types and bounds as
    ``infbench run``'s, its words for them in ``help``); the command reads them with
    :meth:`~infbench.data.run_config.RunConfig.from_flags`.

    Raises:
        KeyError: a name that is neither (a programming error).
    """
    table = {f.param: f for f in flag_table()}

    def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
        own = {p.name: p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in inspect.signature(func).parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD}
        hints = typing.get_type_hints(func, include_extras=True)
        params = []
        for name in order:
            if name in own:
                params.append(own[name].replace(annotation=hints.get(name, own[name].annotation)))
            else:
                params.append(_parameter(table[name], (help or {}).get(name), panel=False))
        func.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        return func

    return wrap
