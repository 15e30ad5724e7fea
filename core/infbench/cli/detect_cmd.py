"""``infbench detect``: the devices of this host and what each plugin says about them."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from infbench.cli.common import JSON_HELP, err, out, plugin_manager, print_json
from infbench.contract.registry import device_precisions
from infbench.data.errors import InfbenchError
from infbench.data.secrets import printable
from infbench.detect import detect as do_detect
from infbench.detect.devices import device_limits
from infbench.engines.availability import engine_table, image_table, quiet_stdout
from infbench.engines.builds import annotate

#: DeviceInfo properties shown in the `detect` table's details column.
DETAIL_KEYS = ("arch", "physical_cores", "logical_cpus", "compute_capability", "mig_mode", "gfx_version",
               "base_url", "api_key_set", "power_source", "uuids")


def detect(as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
           engines: Annotated[bool, typer.Option("--engines/--no-engines", help="List, per device, each engine as "
                                                 "usable, not installed or unsupported here (imports torch and "
                                                 "vLLM: a few seconds).")] = True,
           ray_address: Annotated[str | None, typer.Option(
               "--ray-address", help="Detect on every node of this Ray cluster (HOST:PORT of the head) and show "
               "the fleet: device groups and the nodes that hold them.")] = None) -> None:
    """Find the devices on this host: the PCI bus plus every plugin's detect hook, and which
    engines run on each.

    Accelerators seen on the PCI bus whose plugin is missing are listed with the
    package to install (e.g. `pip install infbench-nvidia`). The engine table says, per
    device, whether each engine is usable, not installed, or installed without support for
    the device, why (e.g. "torch 2.13.0+cpu has no CUDA", "llama-cpp-python built without
    GPU offload") and the command that fixes it; the plugin's worker images are listed
    with whether they are built.

    With --ray-address, a detection task runs on every alive node of that Ray cluster
    and the fleet is shown by device (vendor, model) with its nodes; `infbench run
    --executor ray --device all` then plans the sweep once per device type.

    Exit status: 0 when every plugin detected without error, 1 when a plugin's detect
    hook failed (the error is printed), 2 when the site config is unreadable or has a
    table nothing reads.

    **Examples**

        infbench detect
        infbench detect --no-engines --json
        infbench detect --ray-address 10.0.0.1:6379 --json
    """
    if ray_address is not None:
        _detect_fleet(ray_address, as_json)
        return

    pm = plugin_manager()
    det = do_detect(pm)
    tables = _engine_tables(pm, det.devices) if engines else {}
    if as_json:
        print_json({**det.to_dict(), **({"engines": {v: [s.to_dict() for s in t["engines"]] for v, t in tables.items()},
                                         "images": {v: [s.to_dict() for s in t["images"]] for v, t in tables.items()}}
                                        if engines else {})})
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
                      + (f", {bw / 1e12:.3g} TB/s" if bw else "")
                      + (f" ({lim['bandwidth_kind']})" if lim.get("bandwidth_kind") else "")
                      + (f", TDP {lim['tdp_w']:g} W" if lim.get("tdp_w") else "") + " (see `infbench devices`)")
            if lim.get("clock_hz"):
                peaks = ", ".join(f"{p} {v / 1e9:,.0f}" for p, v in (lim.get("peak_flops") or {}).items())
                fpc = "/".join(f"{v:g}" for v in (lim.get("flop_per_cycle") or {}).values())
                ghz = lim["clock_hz"] / 1e9
                out.print(f"{d.vendor}: peak GFLOP/s {peaks} = {lim['cores']} cores x {ghz:.2f} GHz x {fpc} FLOP/cycle "
                          f"(ISA); clock: {escape(str(lim.get('clock_basis')))}")
                out.print(f"{d.vendor}: bandwidth: {escape(str(lim.get('bandwidth_basis')))}")
                att = lim.get("attainable") or {}
                if att.get("memory_bandwidth_bytes_s"):
                    out.print(f"{d.vendor}: attainable (measured): {att['memory_bandwidth_bytes_s'] / 1e9:.1f} GB/s, "
                              + ", ".join(f"{p} {v / 1e9:,.0f} GFLOP/s" for p, v in (att.get("flops") or {}).items()))
        if d.properties.get("isa_flags"):
            out.print(f"{d.vendor}: ISA flags {' '.join(d.properties['isa_flags'])}")
    for d in det.devices:
        if d.vendor not in tables:
            continue
        if tables[d.vendor]["engines"] or tables[d.vendor]["images"]:
            out.print(_engine_table(d, tables[d.vendor]))
            _print_default_engine(pm, d)
        else:
            out.print(f"{d.vendor}: no installed plugin registers an engine for this device (infbench_engines)")
    for m in det.missing:
        err.print(f"[yellow]note:[/] {m.message()}")
    for plugin, e in det.errors:
        err.print(f"[red]plugin {plugin} failed to detect:[/] {escape(printable(e))}")
    for e in det.config_errors:
        err.print(f"[bold red]error:[/] site config: {escape(printable(e))}")
    _exit_status(det)


def _exit_status(det) -> None:
    """2 for bad input (the site config, or a plugin's table of it: its ConfigError), 1 for a
    plugin that failed otherwise."""
    if det.config_errors or any(e.startswith(("ConfigError:", "StoreError:")) for _, e in det.errors):
        raise typer.Exit(2)
    if det.errors:
        raise typer.Exit(1)


def _engine_tables(pm, devices) -> dict:
    """Per device vendor: ``{"engines": [EngineSupport], "images": [EngineSupport]}`` (the
    probes' own output, e.g. a vendor library's notice, goes to stderr)."""
    tables = {}
    with quiet_stdout():
        for d in devices:
            tables[d.vendor] = {"engines": engine_table(pm, d), "images": image_table(pm, d)}
            annotate(d, tables[d.vendor]["engines"])  # the CPU: which llama.cpp build, what compiling adds
    return tables


def _print_default_engine(pm, device) -> None:
    """What a bare ``infbench run`` measures on ``device``, on which engine and build, and, when
    a better engine is missing, what it would add and the command installing it (on the CPU,
    llama.cpp compiled here, with the figures measured by ``benchmarks/engine_builds.py``)."""
    from infbench.execution.default_sweep import default_sweep  # noqa: PLC0415 - start-up: not loaded by detect

    try:
        with quiet_stdout():
            d = default_sweep(pm, device)
    except InfbenchError as exc:
        err.print(f"[yellow]note:[/] {device.vendor}: default sweep: {escape(exc.message)}")
        return
    if d.chosen is None:
        out.print(f"{device.vendor}: `infbench run` would refuse: {escape(d.why())} (`infbench run --dry-run` lists "
                  "the install commands)")
        return
    c = d.chosen
    out.print(f"{device.vendor}: `infbench run` measures {escape(d.description)} on {c.engine} ({escape(c.where)}): "
              f"{escape(c.reason)}")
    for m in d.better_missing():
        out.print(f"{device.vendor}: faster: {m.engine} ({escape(m.where)}), {m.status}: {escape(m.reason)}"
                  + (f"; install: {escape(m.fix)}" if m.fix else ""))


_STATUS_STYLE = {"usable": "green", "not installed": "yellow", "unsupported": "red"}


def _engine_table(device, t: dict) -> Table:
    """The engine table of one device: engine, where, status, version, why, fix."""
    tab = Table(title=f"Engines on {device.vendor} ({device.model})", header_style="bold")
    for c in ("engine", "where", "status", "version", "why", "install"):
        tab.add_column(c, overflow="fold")
    for s in t["engines"] + t["images"]:
        style = _STATUS_STYLE.get(s.status, "")
        status = "installed, no support" if s.status == "unsupported" else s.status
        tab.add_row(s.engine, escape(s.where), f"[{style}]{status}[/]", s.version or "-", escape(s.reason) or "-",
                    escape(s.fix or "-") if not s.usable else "-")
    return tab
def _detect_fleet(address: str, as_json: bool) -> None:
    """``infbench detect --ray-address``: the fleet as JSON or a table of device groups."""
    from infbench.execution.executors.fleet import fleet_dict  # noqa: PLC0415 - start-up: not loaded by detect
    from infbench.execution.executors.ray import detect_fleet  # noqa: PLC0415 - start-up: not loaded by detect

    fleet = detect_fleet(address)
    d = fleet_dict(fleet)
    if as_json:
        print_json(d)
        return
    t = Table(title=f"Ray cluster {address}: {len(fleet.nodes)} node(s)", header_style="bold")
    for c in ("vendor", "kind", "model", "count", "nodes"):
        t.add_column(c)
    for g in d["device_groups"]:
        for ty in g["types"]:
            names = ", ".join(f"{n['hostname']} ({n['node_id'][:8]})" for n in ty["nodes"])
            t.add_row(g["vendor"], g["kind"], g["model"], str(ty["count"]), f"{len(ty['nodes'])}: {names}")
    out.print(t)
    for n in fleet.nodes:
        if not n.devices:
            err.print(f"[yellow]note:[/] node {escape(n.name())} reported no device")
        for plugin, e in n.errors:
            err.print(f"[red]node {escape(n.name())}: {plugin} failed:[/] {escape(e)}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command()(detect)
