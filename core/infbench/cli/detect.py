"""``infbench detect``: the devices of this host and what each plugin says about them."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from infbench.cli.common import JSON_HELP, err, out, plugin_manager, print_json
from infbench.errors import InfbenchError
from infbench.secrets import printable

#: DeviceInfo properties shown in the `detect` table's details column.
DETAIL_KEYS = ("arch", "physical_cores", "logical_cpus", "compute_capability", "mig_mode", "gfx_version",
               "base_url", "api_key_set", "power_source", "uuids")


def detect(as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """Find the devices on this host: the PCI bus plus every plugin's detect hook.

    Accelerators seen on the PCI bus whose plugin is missing are listed with the
    package to install (e.g. `pip install infbench-nvidia`).

    Exit status: 0 when every plugin detected without error, 1 when a plugin's detect
    hook failed (the error is printed), 2 when the site config is unreadable or has a
    table nothing reads.
    """
    from infbench.detect import detect as do_detect
    from infbench.devices import device_limits
    from infbench.plan import device_precisions

    pm = plugin_manager()
    det = do_detect(pm)
    if as_json:
        print_json(det.to_dict())
        _exit_status(det)
        return
    t = Table(title="Detected devices", header_style="bold")
    for c in ("vendor", "kind", "model", "count", "memory", "driver", "details", "plugin"):
        t.add_column(c)
    for d in det.devices:
        mem = f"{d.memory_bytes / 2**30:,.1f} GiB" if d.memory_bytes else "-"
        details = ", ".join(f"{k}={v}" for k, v in d.properties.items() if k in DETAIL_KEYS)
        t.add_row(d.vendor, d.kind, d.model, str(d.count), mem, d.driver or "-", details or "-", d.plugin)
    out.print(t)
    for d in det.devices:
        out.print(f"{d.vendor}: precisions {', '.join(device_precisions(pm, d))}")
        try:
            lim = device_limits(pm, d)
        except InfbenchError as exc:
            lim = None
            err.print(f"[yellow]note:[/] device descriptions: {exc}")
        if lim:
            bw = lim.get("memory_bandwidth_bytes_s")
            out.print(f"{d.vendor}: described as {lim.get('id', '?')}"
                      + (f", {bw / 1e12:.2f} TB/s" if bw else "")
                      + (f", TDP {lim['tdp_w']:g} W" if lim.get("tdp_w") else "") + " (see `infbench devices`)")
        if d.properties.get("isa_flags"):
            out.print(f"{d.vendor}: ISA flags {' '.join(d.properties['isa_flags'])}")
    for m in det.missing:
        err.print(f"[yellow]note:[/] {m.message()}")
    for plugin, e in det.errors:
        err.print(f"[red]plugin {plugin} failed to detect:[/] {escape(printable(e))}")
    for e in det.config_errors:
        err.print(f"[bold red]error:[/] site config: {escape(printable(e))}")
    _exit_status(det)


def _exit_status(det) -> None:
    if det.config_errors:
        raise typer.Exit(2)
    if det.errors:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command()(detect)
