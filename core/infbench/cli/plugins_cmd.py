"""``infbench plugins``: list the plugins and their engines, check a plugin against the
contract (``plugins check [NAME]``), and start a new one (``plugins new VENDOR``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from infbench.cli.common import JSON_HELP, out, plugin_manager, print_json
from infbench.contract.conformance import check_conformance
from infbench.contract.manager import BUILTIN_PLUGINS
from infbench.contract.registry import engine_specs
from infbench.data.errors import ConfigError

Opt = typer.Option
Arg = typer.Argument
#: The vendor plugins infbench's repository ships under plugins/ (entry-point names).
BUNDLED_VENDOR_PLUGINS = ("nvidia", "amd", "intel", "habana", "sambanova", "cerebras")

plugins_app = typer.Typer(
    help="Plugins: `infbench plugins` lists them with their hooks and engines; `plugins check [NAME]` "
         "runs the conformance kit on installed plugins; `plugins new VENDOR` writes a plugin to start "
         "from (docs/plugins.md).", rich_markup_mode="markdown")


@plugins_app.callback(invoke_without_command=True)
def plugins(ctx: typer.Context, as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False) -> None:
    """List plugins: name, distribution and version, and the hooks each implements; then the
    engines they offer and whether each is installed here.

    Plugins load from the entry-point group `infbench`; set INFBENCH_DISABLE_PLUGINS=a,b
    to keep some from loading. See docs/plugins.md to write one.
    """
    if ctx.invoked_subcommand is not None:
        return

    pm = plugin_manager()
    infos = list(pm.infos.values())
    specs = engine_specs(pm)
    if as_json:
        print_json({"plugins": [i.__dict__ for i in infos],
                    "engines": [{"name": s.name, "platforms": s.platforms, "dtypes": s.dtypes,
                                 "installed": s.factory is not None and not s.missing(),
                                 "install": s.install} for s in specs.values()]})
        return
    t = Table(title="Plugins", header_style="bold")
    for c in ("name", "distribution", "version", "module", "hooks", "status"):
        t.add_column(c)
    for i in infos:
        st = "[red]" + i.error + "[/]" if i.error else ("disabled" if i.disabled else "[green]loaded[/]")
        hooks = "\n".join(h.removeprefix("infbench_") for h in i.hooks) or "-"
        t.add_row(i.name, i.distribution, i.version, i.module, hooks, st)
    out.print(t)
    e = Table(title="Engines", header_style="bold")
    for c in ("engine", "platforms", "dtypes", "installed"):
        e.add_column(c)
    for s in specs.values():
        miss = s.missing()
        e.add_row(s.name, ", ".join(s.platforms), ", ".join(s.dtypes),
                  "[green]yes[/]" if s.factory and not miss else f"[yellow]no[/] ({escape(s.install)})")
    out.print(e)


@plugins_app.command()
def check(
    name: Annotated[str | None, Arg(help="a plugin's name as `infbench plugins` lists it; default: every "
                                         "installed plugin (not the core)")] = None,
    sample_s: Annotated[float, Opt("--sample-s", min=0.0, max=60.0,
                                   help="seconds to read each power sampler for")] = 0.5,
    as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False,
) -> None:
    """Run the conformance kit on installed plugins: call each hook as the core will (detect,
    precisions, device limits, power sampler, engines, containers, default sweep) and check the
    answers against the contract (types, no exceptions, finite non-negative W and J).

    Exits 1 if a plugin breaks the contract, printing each finding with what to fix. A plugin's
    own tests run the same checks: `from infbench.testing.conformance import assert_conforms`.
    """
    pm = plugin_manager()
    names = [n for n, i in pm.infos.items() if n != "core" and not i.disabled] if name is None else [name]
    if name is not None and name not in pm.infos:
        raise ConfigError(f"no plugin named {name!r}", hint=f"installed: {', '.join(sorted(pm.infos)) or 'none'} "
                                                          "(`infbench plugins` lists them)")
    report: dict[str, Any] = {}
    for n in names:
        info = pm.infos[n]
        plugin = pm.get_plugin(n)
        if info.error or plugin is None:
            report[n] = [{"hook": "load", "ok": False, "message": info.error or "the plugin did not load"}]
            continue
        report[n] = [f.__dict__ for f in check_conformance(plugin, sample_s=sample_s, name=n)]
    bad = sorted(n for n, fs in report.items() if not all(f["ok"] for f in fs))
    if as_json:
        print_json({"plugins": report, "conforming": not bad, "failed": bad})
    else:
        for n, fs in report.items():
            t = Table(title=f"{n}: {'[red]breaks the contract[/]' if n in bad else '[green]conforms[/]'}",
                      header_style="bold", title_justify="left")
            for c in ("hook", "", "what"):
                t.add_column(c)
            for f in fs:
                t.add_row(f["hook"], "[green]ok[/]" if f["ok"] else "[red]FAIL[/]", escape(f["message"]))
            out.print(t)
        if not report:
            out.print("no installed plugins to check (`infbench plugins new VENDOR` starts one)")
    if bad:
        raise typer.Exit(1)


_PYPROJECT = '''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "infbench-{vendor}"
version = "0.1.0"
description = "infbench plugin for {title} devices."
requires-python = ">=3.11"
dependencies = ["infbench>=0.1"]

[project.optional-dependencies]
test = ["pytest"]

[project.entry-points.infbench]
{vendor} = "infbench_{mod}.hooks"

[tool.setuptools]
packages = ["infbench_{mod}"]

[tool.setuptools.package-data]
infbench_{mod} = ["devices.yaml"]
'''

_HOOKS = '''"""infbench plugin for {title}: detection, precisions, power, the device catalog and engines.

Imports only :mod:`infbench.plugin` (the public API; the rest of infbench may move between
releases). Fill in each TODO with the vendor's driver library; until then the plugin reports
no devices, as it must on a host without the hardware.
"""

from __future__ import annotations

from infbench.plugin import (
    DeviceInfo,
    DeviceSpec,
    Engine,
    EngineOptions,
    EngineSpec,
    EngineUnavailable,
    NoPower,
    PowerSampler,
    hookimpl,
    packaged_specs,
)

VENDOR = "{vendor}"


@hookimpl
def infbench_detect() -> list[DeviceInfo]:
    """The {title} devices on this host, one DeviceInfo per group of identical devices;
    [] when the driver library or the hardware is absent (never raise)."""
    # TODO: query the driver (name, count, memory in bytes, driver version, PCI ids)
    return []


@hookimpl
def infbench_supported_precisions(device: DeviceInfo) -> list[str] | None:
    """Precisions the device runs natively (names from infbench.plugin's contract:
    fp32, fp16, bf16, fp8, int8, int4); None for another plugin's device."""
    if device.vendor != VENDOR:
        return None
    return ["fp32", "fp16", "bf16"]  # TODO: by device generation


@hookimpl
def infbench_power_sampler(device: DeviceInfo) -> PowerSampler | None:
    """A power source for the device (a PowerSampler reading W or a cumulative J counter);
    NoPower(reason) when it cannot be read; None for another plugin's device."""
    if device.vendor != VENDOR:
        return None
    return NoPower("no {title} power reading yet")  # TODO: subclass PowerSampler over the driver


@hookimpl
def infbench_device_catalog() -> list[DeviceSpec]:
    """Datasheet figures (memory, bandwidth, peak FLOP/s, TDP) of the vendor's devices, from
    this package's devices.yaml (each figure with its source)."""
    return list(packaged_specs("infbench_{mod}"))


class {cls}Options(EngineOptions):
    """The options of the vendor's engine (``--engine-arg KEY=VALUE``), typed and bounded, their
    defaults here (plugin contract 2.0: the adapter receives this model and reads attributes)."""
    # TODO: e.g. max_batch_tokens: int = Field(8192, ge=1, le=1 << 20)


def _engine(device: DeviceInfo, options: {cls}Options) -> Engine:
    """The vendor engine's adapter for ``device``, created, not started (an
    infbench.plugin.Engine subclass: start, run, stop, describe, verify_device)."""
    raise EngineUnavailable("the {title} engine adapter is not written yet")  # TODO


@hookimpl
def infbench_engines() -> list[EngineSpec]:
    """The engines this plugin provides (or says run on its devices)."""
    # TODO: [EngineSpec("{vendor}-engine", _engine, [VENDOR], {{"bf16": "bf16"}}, options_model={cls}Options)]
    return []
'''

_DEVICES = '''# {title} devices: datasheet figures per package, each with its source
# (schema: docs/plugins.md, "Device catalog"). An empty list is valid.
[]
'''

_DOCKERFILE = '''# Worker image for {title} (infbench run --executor container): the vendor's runtime
# image, infbench and this plugin. Build: infbench containers build --vendor {vendor}
ARG BASE_IMAGE=python:3.11-slim
FROM ${{BASE_IMAGE}}
COPY . /src/infbench-{vendor}
RUN pip install --no-cache-dir "infbench>=0.1" /src/infbench-{vendor}
ENTRYPOINT ["infbench", "worker"]
'''

_TEST = '''"""The plugin keeps to infbench's contract (the conformance kit), on this host and on a
stand-in device of the vendor."""

from infbench.plugin import DeviceInfo
from infbench.testing.conformance import assert_conforms
from infbench_{mod} import hooks


def test_the_plugin_conforms_to_the_contract():
    stand_in = DeviceInfo(vendor="{vendor}", kind="accelerator", model="{title} X1", count=1)
    findings = assert_conforms(hooks, devices=[*hooks.infbench_detect(), stand_in])
    assert {{f.hook for f in findings}} >= {{"infbench_detect", "infbench_supported_precisions"}}
'''

_README = '''# infbench-{vendor}

infbench plugin for {title} devices. Install next to infbench (`pip install -e .`), then
`infbench plugins` lists it and `infbench plugins check {vendor}` checks it against the
contract. The hooks are in `infbench_{mod}/hooks.py`; see infbench's docs/plugins.md.
'''


def write_skeleton(vendor: str, out_dir: Path) -> list[Path]:
    """Write a plugin package for ``vendor`` under ``out_dir/infbench-VENDOR``: pyproject.toml
    (entry point ``VENDOR = infbench_VENDOR.hooks``), the hooks module (detect, precisions,
    power, catalog, and an engine with its typed options model, contract 2.0: each a TODO that
    already keeps to the contract), an empty devices.yaml, a Dockerfile, a README and a
    conformance test.

    Returns:
        The files written.

    Raises:
        ConfigError: ``vendor`` is not a lower-case identifier, is the name of a plugin
            infbench ships (a built-in, ``core``, or a bundled vendor plugin), or the folder
            already exists.
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", vendor):
        raise ConfigError(f"vendor {vendor!r} is not a short lower-case name",
                          hint="letters, digits and _; starting with a letter (it names the package "
                               "infbench_VENDOR and the entry point)")
    reserved = sorted({*BUILTIN_PLUGINS, "core", *BUNDLED_VENDOR_PLUGINS})
    if vendor in reserved:
        raise ConfigError(f"{vendor!r} is the name of a plugin infbench ships ({', '.join(reserved)}); a new "
                          "plugin of that name would shadow it (or, for core, take the core's place)",
                          hint=f"choose another name, e.g. {vendor}_site or mylab_{vendor}; to change the "
                               f"bundled {vendor} plugin, edit plugins/{vendor}/ in infbench's repository")
    root = out_dir / f"infbench-{vendor}"
    if root.exists():
        raise ConfigError(f"{root} already exists", hint="choose another --out, or remove it first")
    mod, title = vendor, vendor.replace("_", " ").title()
    cls = title.replace(" ", "")
    files = {
        "pyproject.toml": _PYPROJECT, "README.md": _README,
        f"infbench_{mod}/__init__.py": '"""infbench plugin for {title}."""\n',
        f"infbench_{mod}/hooks.py": _HOOKS, f"infbench_{mod}/devices.yaml": _DEVICES,
        "docker/Dockerfile": _DOCKERFILE, f"tests/test_{mod}.py": _TEST,
    }
    written = []
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text.format(vendor=vendor, mod=mod, title=title, cls=cls))
        written.append(p)
    return written


@plugins_app.command()
def new(
    vendor: Annotated[str, Arg(help="the vendor's short name (lower case): names the package infbench_VENDOR")],
    out_dir: Annotated[Path, Opt("--out", help="folder to write infbench-VENDOR/ into")] = Path("."),
) -> None:
    """Write a new plugin to start from: a package with the hooks (detect, precisions, power
    sampler, device catalog) that already keeps to the contract, its pyproject (entry point),
    devices.yaml, a Dockerfile and a conformance test. Then `pip install -e infbench-VENDOR`,
    fill in the TODOs, and `infbench plugins check VENDOR`.
    """
    files = write_skeleton(vendor, out_dir)
    root = files[0].parent
    out.print(f"wrote {root}/ ({len(files)} files). Next: pip install -e {root} && infbench plugins check {vendor}")


def register(app: typer.Typer) -> None:
    """Add ``infbench plugins`` and its sub-commands to ``app``."""
    app.add_typer(plugins_app, name="plugins")
