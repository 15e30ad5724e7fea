"""What is available: ``infbench devices`` (device descriptions), ``infbench models``
(the model zoo) and ``infbench plugins`` (plugins, engines)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from infbench.cli.common import JSON_HELP, err, out, plugin_manager, print_json
from infbench.data.models import zoo
from infbench.detect.devices import catalog

Opt = typer.Option


def devices(
    vendor: Annotated[str | None, Opt("--vendor", help="Only this vendor (nvidia, amd, ...).")] = None,
    as_json: Annotated[bool, Opt("--json", help="Machine-readable output (base units: B, B/s, FLOP/s, "
                                 "W).")] = False,
) -> None:
    """List the device descriptions the installed plugins publish: memory, bandwidth,
    dense peak TFLOP/s per precision and TDP, with their sources.

    They are what the roofline (MBU/MFU per cell) and `infbench predict` read. Install a
    vendor plugin (e.g. `pip install infbench-nvidia`) to get its devices.
    """
    specs = [s for s in catalog(plugin_manager()) if vendor is None or s.vendor == vendor]
    if as_json:
        print_json([{**s.model_dump(), "per_device": s.per_device()} for s in specs])
        return
    if not specs:
        err.print("no device descriptions" + (f" for {vendor}" if vendor else "")
                  + ": install a vendor plugin (pip install infbench-nvidia ...)")
        raise typer.Exit(1)
    t = Table(title="Device descriptions (dense peaks, per package)", header_style="bold")
    for c in ("id", "vendor", "name", "memory", "TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "int8 TOPS", "TDP"):
        t.add_column(c, justify="left" if c in ("id", "vendor", "name") else "right")

    def f(v: float | None, fmt: str = "{:,.1f}") -> str:
        return fmt.format(v) if v else "-"

    for s in sorted(specs, key=lambda s: (s.vendor, s.id)):
        t.add_row(s.id, s.vendor, s.name, f(s.memory_gib, "{:g} GiB"), f(s.bandwidth_tb_s, "{:g}"),
                  f(s.peak_tflops.get("bf16")), f(s.peak_tflops.get("fp8")), f(s.peak_tflops.get("int8")),
                  f(s.tdp_w, "{:g} W"))
    out.print(t)
    out.print("[dim]sources: `infbench devices --json`; notes on each entry there.[/]")


def models(as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False) -> None:
    """List the model zoo: parameters, attention type and KV-cache bytes per token.

    Any of these names (or its HF id) works with `--model`; engines build random weights
    from the shape, which is valid for speed because output lengths are forced.
    """
    rows = [m.summary() for m in zoo().values()]
    if as_json:
        print_json(rows)
        return
    t = Table(title="Model zoo", header_style="bold")
    for c in ("name", "hf_id", "params", "active", "layers", "hidden", "heads/kv", "attention", "vocab",
              "KV bytes/token (fp16)"):
        t.add_column(c, justify="left" if c in ("name", "hf_id", "attention") else "right")
    for r in rows:
        t.add_row(r["name"], r["hf_id"] or "-", f"{r['params'] / 1e9:.2f}B", f"{r['active_params'] / 1e9:.2f}B",
                  str(r["layers"]), str(r["hidden_size"]), f"{r['heads']}/{r['kv_heads']}", r["attention"],
                  str(r["vocab_size"]), f"{r['kv_bytes_per_token_fp16']:,}")
    out.print(t)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command()(devices)
    app.command()(models)
