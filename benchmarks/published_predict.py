"""Benchmark: published points predicted through the CLI with the shipped profile (issue 42).

Every row of the committed public excerpts (tests/fixtures/imports/: MLPerf Inference
v6.1's ``summary.csv``, InferenceX's result rows) is read through infbench's importers
(:mod:`infbench.report.imports`). A row is predicted when its model is in the zoo, its
device in the catalog or in ``benchmarks/data/published_devices.yaml`` (B200 and MI355X:
datasheet figures, passed as ``--device-file``), and its precision one the prediction knows;
every other row is listed with the reason it was not. Nothing is fitted or tuned: ``infbench
predict`` with the built-in engine profiles (fitted on LLM-Inference-Bench's cells) and the
device's datasheet.

* **MLPerf** rows give the system's output tokens/s with no lengths, batch or parallelism.
  The prediction takes the output length from the row (``TOKENS_PER_SAMPLE``), brackets the
  unpublished mean input length (Open Orca's samples are at most 1,024 tokens: predicted at
  256 and at 1,024), and searches the configuration a submitter would pick: tensor parallel
  1, 2, 4 or 8 (replicas = devices / tp) and batch 32-1024, the highest system output tok/s
  that fits memory; Server and Interactive rows only where the predicted TTFT and TPOT (the
  model's median, the rules' p99) meet the benchmark's limits. The error is predicted /
  published - 1 at each bracket end. FP4 rows (NVFP4, MXFP4) are predicted as the model's
  4-bit class (``int4``: 0.5 bytes per weight), the device file giving its FP4 peaks there.
* **InferenceX** rows give TTFT, TPOT and throughput at a concurrency, ISL and OSL: predicted
  at that concurrency and parallelism.

No target: the figures say where the model stands outside LLM-Inference-Bench's campaigns
(docs/roofline.md says what it would take to close the gap).

    python benchmarks/published_predict.py --out benchmarks/results/published_predict.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "core"))

from infbench.data.errors import ConfigError  # noqa: E402
from infbench.data.models import resolve  # noqa: E402
from infbench.report.imports import inferencex, mlperf  # noqa: E402

FIX = ROOT / "tests/fixtures/imports"
DEVICE_FILE = ROOT / "benchmarks/data/published_devices.yaml"
#: Published device names -> the id ``infbench predict`` takes (catalog or the device file).
DEVICES = {"h100": "h100-sxm", "h200": "h200", "mi300x": "mi300x", "b200": "b200", "mi355x": "mi355x",
           "NVIDIA B200-SXM-180GB": "b200", "AMD Instinct MI355X 288GB HBM3e": "mi355x",
           "NVIDIA H200-SXM-141GB": "h200", "AMD Instinct MI300X 192GB HBM3": "mi300x"}
#: Only these come from the device file (the rest are the catalog's).
FILE_DEVICES = ("b200", "mi355x")
#: Published precisions -> the prediction's.
PRECISIONS = {"fp4": "int4", "nvfp4": "int4", "mxfp4": "int4", "fp8": "fp8", "bf16": "bf16", "fp16": "fp16"}
#: Engines of published frameworks -> the prediction's engine profiles.
ENGINES = {"trtllm": "trtllm-serve", "trtllm-serve": "trtllm-serve", "vllm": "vllm", "vllm-server": "vllm",
           "sglang-server": "vllm", "pytorch": "vllm"}
BATCHES = "32,64,128,256,512,1024,2048,4096"
INPUT_BRACKET = (256, 1024)


def predict(model: str, device: str, engine: str, dtype: str, batches: str, inputs: str, output: int, tps: str,
            env: dict[str, str]) -> list[dict]:
    """One ``infbench predict --json`` call over the lists; its predictions."""
    cmd = [sys.executable, "-m", "infbench.cli", "predict", "-m", model, "-e", engine, "--dtype", dtype, "-b", batches,
           "--input", inputs, "--output", str(output), "--tp", tps, "--json"]
    if device in FILE_DEVICES:  # --device-file reads its first entry: this device's alone
        import tempfile

        import yaml

        (entry,) = [d for d in yaml.safe_load(DEVICE_FILE.read_text()) if d["id"] == device]
        f = Path(tempfile.mkdtemp()) / f"{device}.yaml"
        f.write_text(yaml.safe_dump([entry]))
        cmd += ["--device-file", str(f)]
    else:
        cmd += ["-d", device]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        raise RuntimeError((p.stdout + p.stderr).strip().splitlines()[-2:])
    return json.loads(p.stdout)["predictions"]


def why_not(model: str, device: str | None, dtype: str) -> str | None:
    """The reason a row cannot be predicted, or None."""
    try:
        resolve(model)
    except ConfigError:
        return f"model {model} not in the zoo"
    if device is None:
        return "device neither in the catalog nor in benchmarks/data/published_devices.yaml"
    if dtype not in PRECISIONS:
        return f"precision {dtype} not one the prediction knows"
    return None


def mlperf_rows(env: dict[str, str]) -> list[dict]:
    """MLPerf rows: predicted system output tok/s at the bracket's ends, or the reason not."""
    rows, _ = mlperf.read(FIX / "mlperf_v6.1_summary_excerpt.csv")
    out = []
    for r in rows:
        dtype = r.dtype.split(",")[0].strip().lower()
        dev = None if r.device_props.get("mixed") else DEVICES.get(r.device)
        rec = {"source": "MLPerf Inference v6.1", "system": r.device_props.get("system"), "device": r.device,
               "devices": r.devices, "model": r.model, "scenario": r.extra["scenario"], "precision": dtype,
               "published_output_tok_s": r.scalars.get("output_tok_s")}
        reason = "a system of unlike accelerators" if r.device_props.get("mixed") else why_not(r.model, dev, dtype)
        if reason is None and "output_tok_s" not in r.scalars:
            reason = f"its Result is in {r.extra['units']}, not tokens/s"
        if reason:
            out.append({**rec, "predicted": False, "why_not": reason})
            continue
        assert dev is not None
        limits = r.extra.get("latency_limits_p99_s")
        tps = ",".join(str(t) for t in (1, 2, 4, 8) if t <= r.devices)
        try:
            preds = predict(r.model, dev, ENGINES.get(r.engine, "vllm"), PRECISIONS[dtype], BATCHES,
                            ",".join(map(str, INPUT_BRACKET)), r.output_len, tps, env)
        except RuntimeError as exc:
            out.append({**rec, "predicted": False, "why_not": f"infbench predict: {exc}"})
            continue
        best: dict[int, dict] = {}
        for p in preds:
            if not p.get("fits_memory"):
                continue
            if limits and (p["ttft_s"] > limits["ttft"] or p["tpot_s"] > limits["tpot"]):
                continue
            system = p["output_tok_s"] * (r.devices // p["tp"])
            if p["input_len"] not in best or system > best[p["input_len"]]["system_output_tok_s"]:
                best[p["input_len"]] = {"system_output_tok_s": system, "tp": p["tp"], "batch": p["batch"],
                                        "replicas": r.devices // p["tp"], "ttft_s": p["ttft_s"], "tpot_s": p["tpot_s"]}
        if not best:
            out.append({**rec, "predicted": False, "why_not": "no configuration fits memory and the latency limits"})
            continue
        pub = r.scalars["output_tok_s"]
        out.append({**rec, "predicted": True, "engine": ENGINES.get(r.engine, "vllm"),
                    "prediction_precision": PRECISIONS[dtype], "output_len": r.output_len,
                    "by_input_len": {str(k): {**v, "error": v["system_output_tok_s"] / pub - 1}
                                     for k, v in sorted(best.items())}})
    return out


def inferencex_rows(env: dict[str, str]) -> list[dict]:
    """InferenceX rows: predicted TPOT, TTFT and tok/s per device at the row's load, or the reason not."""
    rows, _ = inferencex.read(FIX / "inferencex_benchmarks_excerpt.json")
    out = []
    for r in rows:
        dev = None if r.device_props.get("prefill_gpus") else DEVICES.get(r.device)
        rec = {"source": "InferenceX", "device": r.device, "devices": r.devices, "model": r.model,
               "engine": r.engine, "precision": r.dtype, "concurrency": r.load.get("concurrency"),
               "published": {"tpot_s_p50": r.summaries.get("tpot_s", {}).get("p50"),
                             "ttft_s_p50": r.summaries.get("ttft_s", {}).get("p50"),
                             "tok_s_per_device": r.scalars.get("tok_s_per_device")}}
        reason = "disaggregated (prefill and decode GPUs apart): the prediction models one instance" if \
            r.device_props.get("prefill_gpus") else why_not(r.model, dev, r.dtype)
        if reason:
            out.append({**rec, "predicted": False, "why_not": reason})
            continue
        assert dev is not None
        try:
            (p,) = predict(r.model, dev, ENGINES.get(r.engine, "vllm"), PRECISIONS[r.dtype], str(r.load["concurrency"]),
                           str(r.input_len), r.output_len, str(r.devices), env)
        except RuntimeError as exc:
            out.append({**rec, "predicted": False, "why_not": f"infbench predict: {exc}"})
            continue
        pr = {"tpot_s": p["tpot_s"], "ttft_s": p["ttft_s"], "tok_s_per_device": p["total_tok_s"] / r.devices}
        pub = rec["published"]
        out.append({**rec, "predicted": True, "prediction": pr, "error": {
            "tpot": pr["tpot_s"] / pub["tpot_s_p50"] - 1 if pub["tpot_s_p50"] else None,
            "ttft": pr["ttft_s"] / pub["ttft_s_p50"] - 1 if pub["ttft_s_p50"] else None,
            "tok_s_per_device": pr["tok_s_per_device"] / pub["tok_s_per_device"] - 1}})
    return out


def summarize(rows: list[dict]) -> dict:
    """Per source and device: rows, predicted, median |error| (MLPerf: at each input bracket end)."""
    out: dict = {}
    for r in rows:
        key = f"{r['source']}: {r['device']}"
        s = out.setdefault(key, {"rows": 0, "predicted": 0, "not_predicted": {}})
        s["rows"] += 1
        if not r["predicted"]:
            s["not_predicted"][r["why_not"]] = s["not_predicted"].get(r["why_not"], 0) + 1
            continue
        s["predicted"] += 1
        if "by_input_len" in r:
            for k, v in r["by_input_len"].items():
                s.setdefault(f"errors_input_{k}", []).append(round(v["error"], 4))
        else:
            for k, v in r["error"].items():
                if v is not None:
                    s.setdefault(f"errors_{k}", []).append(round(v, 4))
    for s in out.values():
        for k in [k for k in s if k.startswith("errors_")]:
            s["median_abs_" + k[len("errors_"):]] = round(statistics.median(abs(x) for x in s[k]), 4)
    return out


def render(data: dict, variant: str | None = None) -> str:
    """docs/roofline.md's table (benchmarks/docs_numbers.py): per source and device, the rows
    predicted and the median |error|, or why none was."""
    lo, hi = data["input_bracket_mlperf"]
    rows = ["| source, device | rows | predicted | median abs. error | not predicted, why |", "|---|---:|---:|---|---|"]
    for key, s in data["summary"].items():
        errs = []
        if "median_abs_input_" + str(lo) in s or "median_abs_input_" + str(hi) in s:
            errs = [f"{100 * s[k]:.0f} % (input {k.rsplit('_', 1)[1]})" for k in
                    (f"median_abs_input_{lo}", f"median_abs_input_{hi}") if k in s]
        errs += [f"{k[len('median_abs_'):]}: {100 * v:.0f} %" for k, v in s.items()
                 if k.startswith("median_abs_") and "input" not in k]
        why = "; ".join(f"{n}: {r}" for r, n in s["not_predicted"].items()) or "-"
        rows.append(f"| {key} | {s['rows']} | {s['predicted']} | {', '.join(errs) or '-'} | {why} |")
    return (f"`python benchmarks/published_predict.py` ({data['date']} UTC; {data['profile']}). MLPerf's error is "
            "the predicted system output tok/s (the best configuration that fits memory and, for Server and "
            f"Interactive, the latency limits) over the published one, minus 1, at inputs of {lo} and {hi} tokens "
            "(the rows publish none):\n\n" + "\n".join(rows))


def main() -> None:
    """Predict every row, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/published_predict.json")
    a = ap.parse_args()
    plugins = ":".join(str(ROOT / "plugins" / v) for v in ("nvidia", "amd"))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'core'}:{plugins}"}
    t0 = time.time()
    rows = mlperf_rows(env) + inferencex_rows(env)
    res = {"benchmark": "published_predict", "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime(t0)),
           "profile": "infbench's built-in engine profiles (core/infbench/analysis/engine_profiles.json), not tuned",
           "input_bracket_mlperf": list(INPUT_BRACKET), "summary": summarize(rows), "rows": rows,
           "wall_s": round(time.time() - t0, 1)}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res["summary"], indent=1))


if __name__ == "__main__":
    main()
