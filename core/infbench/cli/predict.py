"""``infbench predict``: analytical TTFT/TPOT/E2E/throughput (GenZ roofline), calibration."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from infbench.cli.common import JSON_HELP, fail, need, open_store, out, plugin_manager, print_json, read_results, split
from infbench.errors import ConfigError, InfbenchError

Opt = typer.Option
ListOpt = list[str] | None


def predict(
    model: Annotated[ListOpt, Opt("--model", "-m", help="Zoo model(s) (`infbench models`).")] = None,
    device: Annotated[ListOpt, Opt("--device", "-d", help="Described device id(s) (`infbench devices`), or cpu "
                                   "for this host's measured CPU.")] = None,
    batch: Annotated[ListOpt, Opt("--batch", "-b", help="Batch size(s) / concurrency.")] = None,
    input_len: Annotated[ListOpt, Opt("--input", "--input-len", help="Input length(s) in tokens.")] = None,
    output_len: Annotated[ListOpt, Opt("--output", "--output-len", help="Output length(s) in tokens.")] = None,
    tp: Annotated[ListOpt, Opt("--tp", "--tensor-parallel-size", help="Devices per model instance.")] = None,
    dtype: Annotated[str, Opt("--dtype", help="Precision class or engine dtype (bf16, fp16, fp8, "
                              "q8_0...).")] = "bf16",
    calibrate_: Annotated[bool, Opt("--calibrate", help="Fit the efficiency factors to this device's stored cells "
                                    "(held-out error reported) and keep them for later predictions.")] = False,
    store_path: Annotated[Path | None, Opt("--store", help="Results database (for --calibrate).")] = None,
    eff_compute: Annotated[float | None, Opt("--eff-compute", help="Override: fraction of peak FLOP/s reached "
                                             "(0-1].")] = None,
    eff_memory: Annotated[float | None, Opt("--eff-memory", help="Override: fraction of peak bandwidth reached "
                                            "(0-1].")] = None,
    overhead_ms: Annotated[float | None, Opt("--overhead-ms", help="Override: fixed time per forward pass "
                                             "(ms).")] = None,
    as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False,
) -> None:
    """Predict TTFT, TPOT, E2E and throughput analytically (GenZ's per-operator roofline
    with efficiency factors, plus the tensor-parallel all-reduce).

    Example: `infbench predict --model llama-3-8b --device h100-sxm --batch 16 --input 1024
    --output 128 --tp 1 --dtype bf16`. Lists (`--batch 1,16,64`) predict a grid at once.
    `--calibrate` fits the factors to the stored cells of the device and prints the
    geometric-mean error on held-out cells; later predictions for that device use them.
    Method and formulas: docs/roofline.md.
    """
    from infbench.analysis import predict as P
    from infbench.models import resolve
    from infbench.store import default_home

    pm = plugin_manager()
    devices_ = split(device, "--device") or ["cpu"]
    home = default_home()
    report_cal: list[dict[str, Any]] = []
    try:
        limits = {d: P.limits_for_id(pm, d) for d in devices_}
        if calibrate_:
            rows = read_results(open_store(store_path, readonly=True))
            for d, lim in limits.items():
                pts = P.measured_points(P.rows_of_device(pm, rows, d))
                try:
                    cal = P.calibrate(pts, lim)
                except ImportError as exc:
                    need("report", exc)
                path = P.save_calibration(home, cal)
                report_cal.append({**cal.to_dict(), "saved": str(path)})
        shapes = [resolve(m) for m in (split(model, "--model") or [])]
        if not shapes and not calibrate_:
            raise ConfigError("give --model (and --device), or --calibrate",
                              hint="e.g. infbench predict --model llama-3-8b --device h100-sxm")
        efficiency = {}
        for d, lim in limits.items():
            cal = P.load_calibration(home, lim.id)
            eff = cal.efficiency if cal else P.Efficiency()
            if eff_compute or eff_memory or overhead_ms is not None:
                eff = P.Efficiency(eff_compute or eff.eff_compute, eff_memory or eff.eff_memory,
                                   overhead_ms / 1e3 if overhead_ms is not None else eff.overhead_s,
                                   source="command line")
            efficiency[d] = eff
        rows_ = P.predict_grid(shapes, limits, split(batch, "--batch", int) or [1],
                               split(input_len, "--input", int) or [1024], split(output_len, "--output", int) or [128],
                               split(tp, "--tp", int) or [1], dtype, efficiency)
    except InfbenchError as exc:
        fail(exc)
    if as_json:
        print_json({"predictions": rows_, "calibrations": report_cal})
        return
    _print_calibrations(report_cal)
    if rows_:
        _print_predictions(rows_)


def _pct(v: float | None) -> str:
    return "-" if v is None or v != v else f"{100 * v:.1f} %"


def _print_calibrations(report_cal: list[dict[str, Any]]) -> None:
    for c in report_cal:
        et, ed, e = c["error_test"], c["error_default"], c["efficiency"]
        out.print(f"[bold]calibrated {c['device_id']}[/] on {c['n_train']} cells, {c['n_test']} held out: "
                  f"eff_compute {e['eff_compute']:.3f}, eff_memory {e['eff_memory']:.3f}, "
                  f"overhead {e['overhead_s'] * 1e3:.2f} ms")
        out.print(f"  held-out geometric-mean error: TTFT {_pct(et['ttft_s'])}, TPOT {_pct(et['tpot_s'])}, "
                  f"E2E {_pct(et['e2e_s'])}, output tok/s {_pct(et['output_tok_s'])} "
                  f"(uncalibrated defaults: TTFT {_pct(ed['ttft_s'])}, TPOT {_pct(ed['tpot_s'])}); "
                  f"saved {c['saved']}")


def _print_predictions(rows: list[dict[str, Any]]) -> None:
    t = Table(title="Predicted (analytical; docs/roofline.md)", header_style="bold")
    for c in ("model", "device", "dtype", "tp", "batch", "in", "out", "TTFT ms", "TPOT ms", "E2E s", "out tok/s",
              "total tok/s", "fits"):
        t.add_column(c, justify="left" if c in ("model", "device", "dtype") else "right")
    for r in rows:
        t.add_row(r["model"], r["device"], r["dtype"], str(r["tp"]), str(r["batch"]), str(r["input_len"]),
                  str(r["output_len"]), f"{r['ttft_s'] * 1e3:,.2f}", f"{r['tpot_s'] * 1e3:,.3f}", f"{r['e2e_s']:,.3f}",
                  f"{r['output_tok_s']:,.1f}", f"{r['total_tok_s']:,.1f}",
                  {True: "yes", False: "[red]no[/]", None: "?"}[r["fits_memory"]])
    out.print(t)
    for d, s in {r["device"]: r["efficiency"]["source"] for r in rows}.items():
        out.print(f"[dim]{d}: efficiency factors {s}[/]")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command()(predict)
