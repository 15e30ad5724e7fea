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

from infbench.engines.openai import OpenAIEngine  # noqa: E402
from infbench.engines.server_process import ServerProcess, free_port  # noqa: E402
from infbench.models import resolve  # noqa: E402
from infbench.plan import Group  # noqa: E402
from infbench.schema import Cell, Load, Trace  # noqa: E402
from infbench.target import remote_device  # noqa: E402

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


def run_infbench(base: str, load: Load, trace: Trace | None = None) -> dict:
    """infbench's OpenAI client (as ``infbench run --engine openai``) under ``load`` (a
    trace replay when ``trace`` is given)."""
    m = resolve("tiny")
    e = OpenAIEngine(remote_device(f"{base}/v1"), {"base_url": f"{base}/v1", "served_model": "normal",
                                                   "prompt_format": "token_ids"})
    cell = Cell(model=m.name, engine="openai", dtype="auto", batch=1, input_len=IN_LEN, output_len=OUT_LEN,
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


def max_rate(base: str, n: int) -> tuple[float, list[dict]]:
    """The highest Poisson rate (doubling from 25/s) at which infbench's client releases
    every request within 5 ms of its schedule and none fails."""
    best, trials = None, []
    rate = 25.0
    while rate <= 3200:
        r = run_infbench(base, Load(mode="rate", request_rate=rate, num_requests=n, warmup_requests=1))
        ok = r["failed"] == 0 and r["release_lag"]["max_ms"] < 5.0
        trials.append({"rate": rate, "sustained": ok, **r})
        print(f"  rate {rate:g}/s: lag max {r['release_lag']['max_ms']} ms, {r['req_s']} req/s, ok={ok}", flush=True)
        if not ok:
            break
        best = rate
        rate *= 2
    return best or 25.0, trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=256, help="requests per level (>= 4 x concurrency is used)")
    ap.add_argument("--levels", default="1,16,64,256")
    ap.add_argument("--no-vllm", action="store_true", help="skip vLLM's client")
    ap.add_argument("--no-rate", action="store_true", help="skip the highest-sustained-rate search")
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
        trials = []
        if not a.no_rate:
            print("max sustained rate", flush=True)
            rate, trials = max_rate(base, a.requests)
            ib = next(t for t in trials if t["rate"] == rate)
            vl = None if a.no_vllm else run_vllm(base, tok, a.requests, None, rate)
            rows.append({"level": f"r{rate:g}", "requests": a.requests, "infbench": ib, "vllm_bench": vl})
            print(f"  rate {rate:g}: infbench TTFT err {ib['ttft_err']}  vllm {vl and vl['ttft_err']}", flush=True)
    finally:
        srv.stop()
    result = {"injected": {"ttft_s": TTFT_S, "itl_s": ITL_S, "input_len": IN_LEN, "output_len": OUT_LEN},
              "cpus": os.cpu_count(), "rows": rows, "rate_trials": trials}
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
