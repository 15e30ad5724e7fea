"""Validation: the prediction's held-out error per (device, framework) on LLM-Inference-Bench's
published results (benchmarks/data/lib_all_results.csv), calibrated and uncalibrated.

The CSV goes through the same path as `infbench import --format lib-csv` into a fresh
results store; each (published device name, engine) group is fitted on a deterministic
70 % of its cells (`held_out`, a hash of the cell id) and the geometric-mean error of the
batch latency is measured on the other 30 %, beside the error of the uncalibrated
defaults on the same cells. Heavy (a few minutes on 2 cores): run it under the shared lock.

    flock /tmp/infbench-heavy.lock timeout 1800 python benchmarks/lib_validation.py \
        [--csv benchmarks/data/lib_all_results.csv] [--out benchmarks/results/lib_validation.json] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from infbench.analysis.validation import markdown_table, summary, validate
from infbench.plugins import get_plugin_manager
from infbench.report.lib_import import published_cells, read_lib_csv
from infbench.store import Store
from infbench.store.published import file_sha256, import_published

ROOT = Path(__file__).resolve().parents[1]


def render(data: dict, variant: str | None = None) -> str:
    """Figures from lib_validation.json (benchmarks/docs_numbers.py): the per-group table of
    docs/roofline.md (default), or the median in words (``median``)."""
    from infbench.analysis.validation import markdown_table

    if variant == "median":
        s = data["summary"]
        fitted = [g for g in data["groups"] if "error" in g]
        vt = sorted((g for g in fitted if g["engine"] in ("vllm", "trtllm-serve")), key=lambda g: g["error"])
        over = set(s["over_limit"])
        inside = [g for g in vt if f"{g['device']} / {g['engine']}" not in over]
        return (f"**Median held-out error over the {s['groups']} groups: {100 * s['median']:.1f} %** (the uncalibrated "
                f"defaults: {100 * s['median_default']:.1f} %;\n{s['cells']:,} cells from {data['rows']:,} rows). "
                f"vLLM and TensorRT-LLM groups: {100 * inside[0]['error']:.1f} % to "
                f"{100 * inside[-1]['error']:.1f} %"
                + (f", except {', '.join(sorted(over))}" if over else "") + ".")
    return markdown_table(data["groups"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", type=Path, default=ROOT / "benchmarks" / "data" / "lib_all_results.csv")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lib_validation.json")
    ap.add_argument("--markdown", action="store_true", help="print the docs/roofline.md table")
    args = ap.parse_args()
    pm = get_plugin_manager()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "results.db")
        rows = read_lib_csv(args.csv)
        src = {"file": args.csv.name, "sha256": file_sha256(args.csv),
               "commit": "4211f5d4e9bc0145ed541b6d372d5d8223b44235"}
        results, info = published_cells(rows, src, pm)
        run_id = import_published(store, results, src, command="benchmarks/lib_validation.py")
        stored = store.results(run_id=run_id)
        store.close()
    t_import = time.perf_counter() - t0
    res = validate(pm, stored)
    s = summary(res)
    for r in res:
        if "error" in r:
            print(f"{r['device']:18s} {r['engine']:14s} cells {r['cells']:4d} held out {r['n_test']:3d} "
                  f"error {100 * r['error']:6.1f} %  uncalibrated {100 * r['error_default']:8.1f} %  "
                  f"({r['below_floor']} below floor, fit {r['fit_s']:.1f} s)")
        else:
            print(f"{r['device']:18s} {r['engine']:14s} cells {r['cells']:4d} skipped: {r['skipped']}")
    print(f"median held-out error over {s['groups']} groups ({s['cells']} cells): {100 * s['median']:.1f} % "
          f"(uncalibrated {100 * s['median_default']:.1f} %); vLLM/TensorRT-LLM groups above 15 %: "
          f"{', '.join(s['over_limit']) or 'none'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    csv_name = str(args.csv.resolve().relative_to(ROOT)) if args.csv.resolve().is_relative_to(ROOT) else str(args.csv)
    args.out.write_text(json.dumps({"csv": csv_name, "rows": info["rows"], "import_s": t_import, "summary": s,
                                    "groups": res}, indent=2, default=str))
    if args.markdown:
        print()
        print(markdown_table(res))


if __name__ == "__main__":
    main()
