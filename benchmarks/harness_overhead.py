"""Benchmark: infbench against the bare engine, infbench's own cost around the engine, the start-up
of a large model's dummy weights, and the saving from loading a model once per group.

0. **infbench against the bare engine** (issue 30): the same engine calls on the same shapes,
   timed by a minimal script that imports the engine library and nothing of infbench
   (``benchmarks/bare/transformers_bare.py``, ``benchmarks/bare/llama_cpp_bare.py``) and by an
   infbench cell (the engine session's path: the adapter in its own process, power, telemetry,
   contention and harness monitors running), interleaved round by round (the order rotates),
   in a regime bound by the host's per-step overhead (small models, short prompts). A third arm
   measures the cell with ``--no-engine-process`` (the adapter beside infbench's threads, as on
   the first H100 run). Per shape: the medians of E2E and TPOT over the rounds and the ratios to
   the bare engine's. Target: infbench within 3 % of the bare engine, per cell.
   ``--gpu`` runs it on the first NVIDIA GPU detected: transformers, Llama-3-8B bf16, b1/b16, 128/128.
0b. **Start-up of dummy weights**: the seconds from launching the engine to a proven engine
   (``EngineSession.start``'s path) for tinyllama-1.1b (bf16) and for tiny-random-llama; the
   difference against a bare no-initialisation build of tinyllama (and Hugging Face's own
   initialisation, the old way). Target: the difference within the bare build + 3 s.
1. Harness overhead per cell: for real llama.cpp and transformers cells (the adapter in its
   own process, as the engine session runs it), the time the harness spends outside the
   engine's compute calls = the cell's measured wall time
   (``CellResult.wall_s``: from after the warm-up to the derived metrics; power, telemetry
   and contention monitors started and stopped inside it) - engine time, plus the SQLite
   write of the cell with all its raw records. Prompt synthesis and the warm-up come
   before that interval and are not counted. ``engine_s`` is the time inside
   ``llama_decode`` + greedy argmax (llama.cpp) or inside ``generate()`` (transformers).
2. Load once per group: N cells of one model run with one ``start()`` versus a
   ``start()``/``stop()`` per cell (each start a new engine process); the ratio of total times
   is the saving.

Ratios are compared within one run (the machine is shared and noisy). Run it under the
shared lock:

    python benchmarks/harness_overhead.py --reps 3 \
        --out benchmarks/results/harness_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from infbench.contract.manager import build_plugin_manager
from infbench.data.groups import Group
from infbench.data.models import resolve
from infbench.data.run import RunOptions
from infbench.data.schema import Cell
from infbench.detect.platforms.cpu import cpu_device
from infbench.engines.device_proof import start_on_device
from infbench.engines.launch import launch
from infbench.engines.process import EngineProcess
from infbench.measure.cell import measure_cell
from infbench.measure.contention import wait_for_quiet
from infbench.measure.power import device_power_sampler as power_sampler
from infbench.store import Store


def overhead(engine_name: str, model: str, dtype: str, cells: list[tuple[int, int, int]], reps: int):
    pm = build_plugin_manager()
    dev = cpu_device()
    g = Group(resolve(model), engine_name, dtype, 1)
    eng = _started(pm, dev, g, True, {})  # as the engine session runs it: in its own process
    sampler = power_sampler(pm, dev)
    store = Store(Path(tempfile.mkdtemp()) / "bench.db")
    run_id = store.begin_run({})
    rows = []
    try:
        for b, i, o in cells:
            c = Cell(model=g.model.name, engine=engine_name, dtype=dtype, batch=b, input_len=i, output_len=o)
            per = []
            for _ in range(reps):
                wait_for_quiet(30)  # start in a quiet second of the shared machine, where one comes
                r = measure_cell(eng, g, c, dev, sampler, RunOptions())
                t = time.perf_counter()
                store.save_cell(run_id, r)
                save_s = time.perf_counter() - t
                assert r.status == "ok", r.error
                per.append((r.wall_s, r.engine_s, save_s, (r.metrics.get("contention") or {}).get("other_cpu_cores")))
            wall = statistics.median(p[0] for p in per)
            eng_s = statistics.median(p[1] for p in per)
            save = statistics.median(p[2] for p in per)
            over = wall - eng_s + save
            others = [p[3] for p in per if p[3] is not None]
            rows.append({"engine": engine_name, "model": model, "batch": b, "input_len": i, "output_len": o,
                         "engine_s": eng_s, "harness_s": over, "store_write_s": save,
                         "harness_pct_of_engine": 100 * over / eng_s,
                         "other_cpu_cores": statistics.median(others) if others else None})
    finally:
        eng.stop()
    return rows


BARE = Path(__file__).parent / "bare"


class Bare:
    """A bare-engine script (benchmarks/bare/) kept running: one JSON request per line in, one out."""

    def __init__(self, argv: list[str]):
        self.proc = subprocess.Popen([sys.executable, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = json.loads(self.proc.stdout.readline())
        assert ready.get("ready"), ready

    def run(self, b: int, i: int, o: int, warmup: int = 1, **extra) -> dict:
        req = {"batch": b, "input_len": i, "output_len": o, "warmup": warmup, **extra}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


def _no_sampler_cell(eng, g: Group, c: Cell, dev) -> dict:
    """An in-process cell measured with no power sampler (no sampling or device-process threads)."""
    from infbench.measure.power import NoPower

    r = measure_cell(eng, g, c, dev, NoPower("the cause study: no sampler"), RunOptions())
    assert r.status == "ok", r.error
    m = r.metrics
    return {"e2e_s": m["e2e_s"]["p50"], "ttft_s": m["ttft_s"]["p50"], "tpot_s": m["tpot_s"]["p50"]}


def _device(pm, gpu: bool):
    if not gpu:
        return cpu_device()
    from infbench.detect import detect

    devs = [d for d in detect(pm).devices if d.vendor == "nvidia"]
    if not devs:
        raise SystemExit("--gpu: no NVIDIA GPU detected")
    return devs[0]


def _started(pm, dev, g: Group, isolated: bool, opts: dict):
    from infbench.contract.registry import device_backends

    eng = launch(pm, g.engine, dev, opts)
    if isolated:
        eng = EngineProcess(eng)
    start_on_device(eng, g, device_backends(pm, dev))
    return eng


#: The cause study's arms (``--cause``, first shape only), each one difference from ``bare`` or
#: from ``in_process``: where the slowdown of an engine sharing infbench's interpreter comes from.
CAUSE_ARMS = {
    "bare_poll_thread": "bare + a Python thread in the engine's process making infbench's NVML reads at 10 Hz "
                        "(interpreter and driver shared)",
    "bare_poll_process": "bare + a process of its own making the same NVML reads at 10 Hz (driver shared only)",
    "bare_busy_thread": "bare + a Python thread in the engine's process doing 2 ms of pure-Python work every "
                        "100 ms (interpreter shared only, 2 % of one core)",
    "in_process_no_sampler": "--no-engine-process with no power sampler (no power, telemetry or device-process "
                             "thread; the harness monitor stays)",
    "in_process_switch_0p5ms": "--no-engine-process with the interpreter's switch interval at 0.5 ms instead of 5 ms "
                               "(sys.setswitchinterval)",
}


def _poll_process(bare: Bare, b: int, i: int, o: int) -> dict:
    """One bare call with ``nvml_poll.py`` polling beside it in a process of its own."""
    p = subprocess.Popen([sys.executable, str(BARE / "nvml_poll.py"), "--interval", "0.1"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    json.loads(p.stdout.readline())
    try:
        r = bare.run(b, i, o)
    finally:
        out, _ = p.communicate("", timeout=30)
    r["poll"] = json.loads(out.strip().splitlines()[-1])
    return r


def _switch(fn, interval_s: float):
    """Run ``fn()`` with the interpreter's switch interval set to ``interval_s``."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    try:
        return fn()
    finally:
        sys.setswitchinterval(old)


def _py_spy(pid: int, seconds: float, out_dir: Path, prefix: str = "spy") -> list[subprocess.Popen]:
    """Start two py-spy recorders on ``pid`` (non-blocking: the process is never paused): every
    thread's stacks, and the stacks of whichever thread holds the interpreter lock (``--gil``)."""
    import shutil

    exe = shutil.which("py-spy")
    if exe is None:
        return []
    if sys.platform.startswith("linux"):  # Yama's ptrace_scope 1: let our own child read us
        import ctypes

        ctypes.CDLL(None).prctl(0x59616D61, ctypes.c_ulong(-1 & 0xFFFFFFFFFFFFFFFF), 0, 0, 0)
    common = ["record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "200", "--format", "raw",
              "--nonblocking"]
    return [subprocess.Popen([exe, *common, "--threads", "--idle", "--output", str(out_dir / f"{prefix}_threads.txt")],
                             stdout=subprocess.DEVNULL, stderr=open(out_dir / f"{prefix}_threads.err", "w")),
            subprocess.Popen([exe, *common, "--gil", "--threads", "--output", str(out_dir / f"{prefix}_gil.txt")],
                             stdout=subprocess.DEVNULL, stderr=open(out_dir / f"{prefix}_gil.err", "w"))]


def spy_summary(path: Path, top: int = 6) -> dict:
    """Samples per thread and the most sampled leaf frames per thread of a py-spy ``raw`` file
    (folded stacks: ``frame;frame;... count``, the thread first with ``--threads``)."""
    if not path.exists():
        return {"error": "no py-spy output"}
    threads: dict[str, dict] = {}
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        th = next((f for f in frames if f.startswith("thread ")), "?")
        leaf = frames[-1]
        t = threads.setdefault(th, {"samples": 0, "leaf": {}})
        t["samples"] += int(n)
        t["leaf"][leaf] = t["leaf"].get(leaf, 0) + int(n)
    for t in threads.values():
        t["leaf"] = dict(sorted(t["leaf"].items(), key=lambda kv: -kv[1])[:top])
    return threads


def bare_vs_infbench(engine_name: str, model: str, dtype: str, shapes: list[tuple[int, int, int]], rounds: int,
                     gpu: bool = False, cause: bool = False, spy_dir: Path | None = None,
                     on_row=None) -> list[dict]:
    """The comparison of item 0 for one engine and model: per shape, the medians of E2E and TPOT
    (s) of the bare engine, of the infbench cell and of the cell with --no-engine-process.

    ``cause``: on the first shape, also the arms of :data:`CAUSE_ARMS` (transformers only), each
    interleaved with the rest. ``spy_dir``: after the rounds, one more ``in_process`` cell under
    py-spy (``spy_threads.txt``, ``spy_gil.txt`` there, summarised in the row's ``py_spy``).
    ``on_row(rows)`` is called after each shape (a partial JSON survives a time limit)."""
    from infbench.libs.llama import default_threads

    pm = build_plugin_manager()
    dev = _device(pm, gpu)
    g = Group(resolve(model), engine_name, dtype, 1)
    threads = default_threads()
    opts = {"n_threads": threads} if engine_name == "llama.cpp" else {}
    iso = _started(pm, dev, g, True, opts)
    inproc = _started(pm, dev, g, False, opts)
    if engine_name == "llama.cpp":
        bare = Bare([str(BARE / "llama_cpp_bare.py"), "--gguf", inproc.model_file, "--threads", str(threads)])
    else:
        torch_dev = "cuda" if gpu else "cpu"
        bare = Bare([str(BARE / "transformers_bare.py"), "--config", json.dumps(g.model.config), "--dtype", dtype,
                     "--device", torch_dev])
    sampler = power_sampler(pm, dev)
    rows = []
    try:
        for b, i, o in shapes:
            c = Cell(model=g.model.name, engine=engine_name, dtype=dtype, batch=b, input_len=i, output_len=o)
            arms: dict[str, list[dict]] = {"bare": [], "infbench": [], "in_process": []}
            first = (b, i, o) == shapes[0]

            def cell_of(eng, c=c):
                r = measure_cell(eng, g, c, dev, sampler, RunOptions())
                assert r.status == "ok", r.error
                m = r.metrics
                return {"e2e_s": m["e2e_s"]["p50"], "ttft_s": m["ttft_s"]["p50"], "tpot_s": m["tpot_s"]["p50"],
                        "harness_share": m.get("harness_share"),
                        "other_cpu_cores": (m.get("contention") or {}).get("other_cpu_cores"),
                        "suspect": m.get("suspect")}

            run = {"bare": lambda b=b, i=i, o=o: bare.run(b, i, o), "infbench": lambda: cell_of(iso),
                   "in_process": lambda: cell_of(inproc)}
            if cause and first and engine_name == "transformers":
                run.update({
                    "bare_poll_thread": lambda b=b, i=i, o=o: bare.run(b, i, o, poll={"nvml": True}),
                    "bare_poll_process": lambda b=b, i=i, o=o: _poll_process(bare, b, i, o),
                    "bare_busy_thread": lambda b=b, i=i, o=o: bare.run(b, i, o, poll={"nvml": False, "busy_ms": 2.0}),
                    "in_process_no_sampler": lambda c=c: _no_sampler_cell(inproc, g, c, dev),
                    "in_process_switch_0p5ms": lambda: _switch(lambda: cell_of(inproc), 0.0005)})
                arms.update({k: [] for k in CAUSE_ARMS})
            order = list(run)
            for k in range(rounds):
                wait_for_quiet(10)
                for arm in order[k % len(order):] + order[:k % len(order)]:  # rotate who goes first
                    arms[arm].append(run[arm]())
                    print(f"  b{b} round {k + 1} {arm}: E2E {arms[arm][-1]['e2e_s']:.3f} s", flush=True)

            def med(arm, key, arms=arms):
                vals = [x[key] for x in arms[arm] if x.get(key) is not None]
                return statistics.median(vals) if vals else None

            row = {"engine": engine_name, "model": model, "dtype": dtype, "device": dev.model, "batch": b,
                   "input_len": i, "output_len": o, "rounds": rounds}
            for arm in arms:
                row[arm] = {"e2e_s": med(arm, "e2e_s"), "ttft_s": med(arm, "ttft_s"), "tpot_s": med(arm, "tpot_s")}
            row["ratio_e2e"] = row["infbench"]["e2e_s"] / row["bare"]["e2e_s"]
            row["ratio_tpot"] = row["infbench"]["tpot_s"] / row["bare"]["tpot_s"]
            row["ratio_e2e_in_process"] = row["in_process"]["e2e_s"] / row["bare"]["e2e_s"]
            row["ratio_tpot_in_process"] = row["in_process"]["tpot_s"] / row["bare"]["tpot_s"]
            row["harness_share"] = med("infbench", "harness_share")
            row["other_cpu_cores"] = med("infbench", "other_cpu_cores")
            row["within_3pct"] = abs(row["ratio_e2e"] - 1) <= 0.03 and abs(row["ratio_tpot"] - 1) <= 0.03
            if len(arms) > 3:
                row["cause"] = {arm: {"what": CAUSE_ARMS[arm], "e2e_s": med(arm, "e2e_s"), "tpot_s": med(arm, "tpot_s"),
                                      "ratio_e2e": med(arm, "e2e_s") / row["bare"]["e2e_s"],
                                      "poll": (arms[arm][-1].get("poll") if arms[arm] else None)}
                                for arm in CAUSE_ARMS}
            if spy_dir is not None and first:
                spy_dir.mkdir(parents=True, exist_ok=True)
                procs = _py_spy(os.getpid(), max(2.0, row["in_process"]["e2e_s"]), spy_dir)
                time.sleep(1.0)  # py-spy attaches
                spied = cell_of(inproc)
                for p in procs:
                    p.wait(60)
                row["py_spy"] = {"cell_e2e_s": spied["e2e_s"], "threads": spy_summary(spy_dir / "spy_threads.txt"),
                                 "gil": spy_summary(spy_dir / "spy_gil.txt")}
                if iso.pid is not None:  # and the engine's own process during one default cell
                    procs = _py_spy(iso.pid, max(2.0, row["infbench"]["e2e_s"]), spy_dir, "spy_engine")
                    time.sleep(1.0)
                    spied = cell_of(iso)
                    for p in procs:
                        p.wait(60)
                    row["py_spy_engine_process"] = {"cell_e2e_s": spied["e2e_s"],
                                                    "threads": spy_summary(spy_dir / "spy_engine_threads.txt"),
                                                    "gil": spy_summary(spy_dir / "spy_engine_gil.txt")}
            row["runs"] = arms
            rows.append(row)
            print(f"{engine_name} {model} b{b} i{i} o{o}: infbench/bare E2E {row['ratio_e2e']:.3f} TPOT "
                  f"{row['ratio_tpot']:.3f}; in-process {row['ratio_e2e_in_process']:.3f}", flush=True)
            if on_row is not None:
                on_row(rows)
    finally:
        bare.close()
        iso.stop()
        inproc.stop()
        sampler.close()
    return rows


def _corr(xs: list[float], ys: list[float]) -> float | None:
    """Pearson's correlation of two equal-length series (None below 3 points or no spread)."""
    if len(xs) < 3:
        return None
    try:
        return statistics.correlation(xs, ys)
    except statistics.StatisticsError:
        return None


def paired(engine_name: str, model: str, dtype: str, shape: tuple[int, int, int], seconds: float,
           gpu: bool = False, idle_s: float = 10.0) -> dict:
    """infbench against the bare engine as back-to-back pairs for ``seconds`` (the order flips each
    pair), with the host's single-core speed measured beside them: the question being whether a
    slow stretch is infbench's or the host's.

    A probe process (``bare/probe.py``) times a fixed pure-Python loop every 0.25 s from
    ``idle_s`` s before anything loads to the end; the bare engine also times it in its own
    thread right before and after each call. Returns ``{"pairs": [...], "probe": [[t_s, ms], ...],
    "summary": {...}}``: per pair each arm's E2E (s), TPOT (s), start (s from the probe's start)
    and the engine thread's CPU s; the summary gives the paired ratio infbench / bare (median,
    10th and 90th percentiles), each arm's fastest and median E2E and share of calls slower than
    1.5x its fastest, and the correlation between a bare call's E2E and the probe's mean time
    during it (a host-wide slow stretch shows as a high correlation)."""
    b, i, o = shape
    t0 = time.perf_counter_ns()
    probe = subprocess.Popen([sys.executable, str(BARE / "probe.py"), "--interval", "0.25"], stdout=subprocess.PIPE,
                             text=True)
    time.sleep(idle_s)
    pm = build_plugin_manager()
    dev = _device(pm, gpu)
    g = Group(resolve(model), engine_name, dtype, 1)
    if engine_name == "llama.cpp":
        from infbench.libs.llama import default_threads

        threads = default_threads()
        iso = _started(pm, dev, g, True, {"n_threads": threads})
        gguf = _started(pm, dev, g, False, {"n_threads": threads})  # only for its GGUF file's path
        bare = Bare([str(BARE / "llama_cpp_bare.py"), "--gguf", gguf.model_file, "--threads", str(threads)])
        gguf.stop()
    else:
        iso = _started(pm, dev, g, True, {})
        bare = Bare([str(BARE / "transformers_bare.py"), "--config", json.dumps(g.model.config), "--dtype", dtype,
                     "--device", "cuda" if gpu else "cpu"])
    sampler = power_sampler(pm, dev)
    c = Cell(model=g.model.name, engine=engine_name, dtype=dtype, batch=b, input_len=i, output_len=o)
    pairs: list[dict] = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            pair = {}
            for arm in (("bare", "infbench") if len(pairs) % 2 == 0 else ("infbench", "bare")):
                if arm == "bare":
                    r = bare.run(b, i, o, probe=True)
                    pair[arm] = {"e2e_s": r["e2e_s"], "tpot_s": r["tpot_s"], "start_s": (r["t_send_ns"] - t0) / 1e9,
                                 "thread_cpu_s": r["thread_cpu_s"], "probe_ms": r["probe_ms"]}
                else:
                    res = measure_cell(iso, g, c, dev, sampler, RunOptions())
                    assert res.status == "ok", res.error
                    m = res.metrics
                    pair[arm] = {"e2e_s": m["e2e_s"]["p50"], "tpot_s": m["tpot_s"]["p50"],
                                 "start_s": (res.records[0].t_send_ns - t0) / 1e9,
                                 "thread_cpu_s": (m.get("harness") or {}).get("engine_cpu_s"),
                                 "harness_share": m.get("harness_share")}
            pairs.append(pair)
            print(f"  pair {len(pairs)}: bare {pair['bare']['e2e_s']:.3f} s, infbench "
                  f"{pair['infbench']['e2e_s']:.3f} s, probe in the engine's thread "
                  f"{pair['bare']['probe_ms'][0]:.2f} ms",
                  flush=True)
    finally:
        bare.close()
        iso.stop()
        sampler.close()
        probe.kill()
        out, _ = probe.communicate()
    series = []
    for line in out.splitlines():
        try:
            x = json.loads(line)
        except ValueError:
            continue
        series.append([round((x["t_ns"] - t0) / 1e9, 3), round(x["ms"], 3)])
    ratios = sorted(p["infbench"]["e2e_s"] / p["bare"]["e2e_s"] for p in pairs)

    def q(xs: list[float], f: float) -> float:
        return xs[min(len(xs) - 1, int(f * len(xs)))]

    def arm_summary(arm: str) -> dict:
        e = [p[arm]["e2e_s"] for p in pairs]
        return {"fastest_e2e_s": min(e), "median_e2e_s": statistics.median(e),
                "slow_share": sum(x > 1.5 * min(e) for x in e) / len(e)}

    during, bare_e2e = [], []
    for p in pairs:
        s0, s1 = p["bare"]["start_s"], p["bare"]["start_s"] + p["bare"]["e2e_s"]
        inside = [ms for t, ms in series if s0 <= t <= s1]
        if inside:
            during.append(statistics.mean(inside))
            bare_e2e.append(p["bare"]["e2e_s"])
    idle = [ms for t, ms in series if t < idle_s]
    summary = {"pairs": len(pairs), "ratio_e2e_median": statistics.median(ratios) if ratios else None,
               "ratio_e2e_p10": q(ratios, 0.1) if ratios else None, "ratio_e2e_p90": q(ratios, 0.9) if ratios else None,
               "bare": arm_summary("bare") if pairs else None, "infbench": arm_summary("infbench") if pairs else None,
               "probe_idle_ms_median": statistics.median(idle) if idle else None,
               "probe_ms_min": min(ms for _, ms in series) if series else None,
               "probe_ms_max": max(ms for _, ms in series) if series else None,
               "corr_bare_e2e_probe": _corr(bare_e2e, during),
               "corr_bare_e2e_thread_probe": _corr([p["bare"]["e2e_s"] for p in pairs],
                                                   [statistics.mean(p["bare"]["probe_ms"]) for p in pairs])}
    return {"engine": engine_name, "model": model, "dtype": dtype, "device": dev.model, "batch": b, "input_len": i,
            "output_len": o, "seconds": seconds, "summary": summary, "pairs": pairs, "probe": series}


def startup(big: str = "tinyllama-1.1b", small: str = "tiny-random-llama", dtype: str = "bfloat16",
            reps: int = 3) -> dict:
    """Item 0b: infbench's start-up (launch to a proven engine, in its own process) of ``big``
    and ``small`` with the transformers engine, and a bare build of ``big`` (import, no-init
    build, fill, and Hugging Face's initialising build), medians of ``reps``."""
    pm = build_plugin_manager()
    dev = cpu_device()

    def infbench_s(model: str) -> float:
        g = Group(resolve(model), "transformers", dtype, 1)
        t = time.perf_counter()
        eng = _started(pm, dev, g, True, {})
        dt = time.perf_counter() - t
        eng.stop()
        return dt

    bare_runs, big_s, small_s = [], [], []
    for _ in range(reps):
        wait_for_quiet(10)
        small_s.append(infbench_s(small))
        big_s.append(infbench_s(big))
        out = subprocess.run([sys.executable, str(BARE / "transformers_bare.py"), "--config",
                              json.dumps(resolve(big).config), "--dtype", dtype, "--build-only", "--with-init"],
                             capture_output=True, text=True, check=True).stdout
        bare_runs.append(json.loads(out.strip().splitlines()[-1]))
    med = statistics.median
    res = {"model": big, "small": small, "dtype": dtype, "reps": reps,
           "infbench_startup_s": med(big_s), "infbench_startup_small_s": med(small_s),
           "extra_s": med(big_s) - med(small_s),
           "bare_import_s": med(r["import_s"] for r in bare_runs),
           "bare_build_noinit_s": med(r["build_noinit_s"] for r in bare_runs),
           "bare_fill_s": med(r["fill_s"] for r in bare_runs),
           "bare_build_init_s": med(r["build_init_s"] for r in bare_runs)}
    res["target_s"] = res["bare_build_noinit_s"] + 3.0
    res["met"] = res["extra_s"] <= res["target_s"]
    return res


def load_once(engine_name: str, model: str, dtype: str, n_cells: int):
    pm = build_plugin_manager()
    dev = cpu_device()
    g = Group(resolve(model), engine_name, dtype, 1)
    sampler = power_sampler(pm, dev)
    cells = [Cell(model=g.model.name, engine=engine_name, dtype=dtype, batch=1, input_len=32, output_len=8,
                  seed=k) for k in range(n_cells)]

    def one_group():
        t = time.perf_counter()
        e = _started(pm, dev, g, True, {})
        for c in cells:
            assert measure_cell(e, g, c, dev, sampler, RunOptions()).status == "ok"
        e.stop()
        return time.perf_counter() - t

    def per_cell():
        t = time.perf_counter()
        for c in cells:
            e = _started(pm, dev, g, True, {})
            assert measure_cell(e, g, c, dev, sampler, RunOptions()).status == "ok"
            e.stop()
        return time.perf_counter() - t

    one_group()  # warm file caches (and write the dummy GGUF once)
    a, b = one_group(), per_cell()
    return {"engine": engine_name, "model": model, "cells": n_cells, "load_once_s": a, "load_per_cell_s": b,
            "speedup": b / a}


def machine() -> dict:
    """CPU, CPUs, memory and the versions the numbers depend on."""
    import importlib.metadata as md
    import platform

    import psutil

    from infbench.detect.platforms.cpu import cpu_device

    dev = cpu_device()
    vers = {}
    for d in ("llama_cpp_python", "transformers", "torch"):
        try:
            vers[d] = md.version(d)
        except md.PackageNotFoundError:
            vers[d] = None
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    accel = [str(p) for pat in ("nvidia[0-9]*", "kfd", "accel/accel*", "dri/renderD*") for p in Path("/dev").glob(pat)]
    return {"cpu": dev.model, "cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30),
            "virtual_machine": " hypervisor" in flags, "accelerator_devices": accel,
            "python": platform.python_version(), "versions": vers, "date": time.strftime("%Y-%m-%d")}


def render(data: dict, variant: str | None = None) -> str:
    """docs/benchmarks.md's figures from harness_overhead.json (benchmarks/docs_numbers.py): the
    machine line (``machine``), the overhead table (default) or the load-once table (``load_once``)."""
    if variant == "machine":
        m = data["machine"]
        v = m["versions"]
        kind = "VM" if m.get("virtual_machine") else "host"
        gpu = "no GPU" if not m.get("accelerator_devices") else "accelerators " + ", ".join(m["accelerator_devices"])
        return (f"Machine: {m['cpus']}-core {m['cpu']} {kind} (shared), {m['memory_gib']} GiB, {gpu}, Python "
                f"{m['python']}, llama-cpp-python {v['llama_cpp_python']},\ntransformers {v['transformers']}, torch "
                f"{v['torch']}; {m['date']}; medians of {data['reps']} repetitions:")
    if variant in ("bare", "bare_gpu"):
        out = ["| engine | model | batch | in | out | bare E2E s | infbench E2E s | infbench / bare E2E | "
               "infbench / bare TPOT | in-process / bare E2E | harness share | other processes (cores) | "
               "within 3 % |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]

        def pct(x: float) -> str:
            return f"{100 * (x - 1):+.1f} %"

        for r in data[variant]:
            hs = "-" if r.get("harness_share") is None else f"{100 * r['harness_share']:.2f} %"
            oc = "-" if r.get("other_cpu_cores") is None else f"{r['other_cpu_cores']:.2f}"
            out.append(f"| {r['engine']} | {r['model']} | {r['batch']} | {r['input_len']} | {r['output_len']} | "
                       f"{r['bare']['e2e_s']:.4f} | {r['infbench']['e2e_s']:.4f} | {pct(r['ratio_e2e'])} | "
                       f"{pct(r['ratio_tpot'])} | {pct(r['ratio_e2e_in_process'])} | {hs} | {oc} | "
                       f"{'yes' if r['within_3pct'] else 'no'} |")
        return "\n".join(out)
    if variant == "paired":
        out = ["| engine | model | batch | in | out | pairs | bare E2E s (median) | infbench E2E s (median) | "
               "infbench / bare E2E, median of pairs | 10th-90th percentile | within 3 % |",
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
        for r in data["paired"]:
            sm = r["summary"]
            out.append(f"| {r['engine']} | {r['model']} | {r['batch']} | {r['input_len']} | {r['output_len']} | "
                       f"{sm['pairs']} | {sm['bare']['median_e2e_s']:.4f} | {sm['infbench']['median_e2e_s']:.4f} | "
                       f"{100 * (sm['ratio_e2e_median'] - 1):+.1f} % | {100 * (sm['ratio_e2e_p10'] - 1):+.0f} % to "
                       f"{100 * (sm['ratio_e2e_p90'] - 1):+.0f} % | "
                       f"{'yes' if abs(sm['ratio_e2e_median'] - 1) <= 0.03 else 'no'} |")
        return "\n".join(out)
    if variant == "startup":
        u = data["startup"]
        return "\n".join([
            "| what | s |", "|---|---:|",
            f"| infbench start-up, {u['model']} ({u['dtype']}): launch to a proven engine in its own process | "
            f"{u['infbench_startup_s']:.2f} |",
            f"| infbench start-up, {u['small']} | {u['infbench_startup_small_s']:.2f} |",
            f"| **difference** (what the larger model's weights cost) | **{u['extra_s']:.2f}** |",
            f"| bare no-initialisation build of {u['model']} (`no_init_weights`, memory not touched) | "
            f"{u['bare_build_noinit_s']:.2f} |",
            f"| bare fill of its weights with N(0, 0.02) (`normal_`) | {u['bare_fill_s']:.2f} |",
            f"| bare build with Hugging Face's initialisation (the old way) | {u['bare_build_init_s']:.2f} |",
            f"| target: difference <= bare no-initialisation build + 3 s = {u['target_s']:.2f} s | "
            f"{'met' if u['met'] else 'missed'} |"])
    if variant == "load_once":
        out = ["| engine | model | cells | load once per group s | load per cell s | speed-up |",
               "|---|---|---:|---:|---:|---:|"]
        out += [f"| {r['engine']} | {r['model']} | {r['cells']} | {r['load_once_s']:.2f} | "
                f"{r['load_per_cell_s']:.2f} | {r['speedup']:.2f}x |" for r in data["load_once"]]
        return "\n".join(out)
    if "overhead" not in data:
        raise KeyError("overhead")
    out = ["| engine | model | batch | in | out | engine s | harness ms | store write ms | harness / engine | "
           "other processes (cores) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def others(r: dict) -> str:
        return "-" if r.get("other_cpu_cores") is None else f"{r['other_cpu_cores']:.2f}"

    out += [f"| {r['engine']} | {r['model']} | {r['batch']} | {r['input_len']} | {r['output_len']} | "
            f"{r['engine_s']:.3f} | {1e3 * r['harness_s']:.2f} | {1e3 * r['store_write_s']:.2f} | "
            f"{r['harness_pct_of_engine']:.2f} % | {others(r)} |" for r in data["overhead"]]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds of the bare-engine comparison")
    ap.add_argument("--only", choices=["bare", "startup", "overhead"], default=None,
                    help="run one part and keep the rest of the JSON file as it is")
    ap.add_argument("--quick", action="store_true", help="the bare-engine comparison on one shape only "
                    "(transformers, tiny-random-llama, b1 32/64): scripts/gpu_check.sh on a host without a GPU")
    ap.add_argument("--gpu", action="store_true", help="the bare-engine comparison on the first NVIDIA GPU: "
                    "transformers, llama-3-8b bf16, b1/b16, 128/128 (writes bare_gpu)")
    ap.add_argument("--paired", type=float, default=None, metavar="SECONDS",
                    help="back-to-back infbench/bare pairs for SECONDS with the host-speed probe beside them "
                    "(with --gpu: llama-3-8b bf16 b1 128/128; else tiny-random-llama b1 32/64); writes paired[_gpu]")
    ap.add_argument("--paired-shape", default=None, metavar="ENGINE:MODEL:BATCH",
                    help="with --paired (CPU): only this shape of the table, for SECONDS, its row replaced in the "
                    "JSON (the other rows kept), e.g. transformers:smollm2-135m:8 when one shape had too few pairs")
    ap.add_argument("--cause", action="store_true", help="with --gpu or --quick: the cause study's arms on the first "
                    "shape (CAUSE_ARMS: NVML reads in a thread or a process, a busy Python thread, no sampler, a "
                    "0.5 ms switch interval)")
    ap.add_argument("--spy-dir", type=Path, default=None, help="with --cause: one more --no-engine-process cell under "
                    "py-spy, its raw stacks written here")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "harness_overhead.json",
                    help="write the results as JSON here")
    args = ap.parse_args()
    os.environ.setdefault("INFBENCH_HOME", str(Path(tempfile.gettempdir()) / "infbench-bench"))
    res = json.loads(args.out.read_text()) if args.out.exists() else {}
    if args.paired is not None:
        key = "paired_gpu" if args.gpu else "paired"
        if args.gpu:
            res[key] = paired("transformers", "llama-3-8b", "bfloat16", (1, 128, 128), args.paired, gpu=True)
            print(json.dumps(res[key]["summary"], indent=1))
        elif args.paired_shape:  # one shape again, longer: its row replaced, the others kept
            engine, model, batch = args.paired_shape.split(":")
            dtype = "float32" if engine == "transformers" else "f16"
            row = {k: v for k, v in paired(engine, model, dtype, (int(batch), 32, 64), args.paired,
                                           idle_s=3).items() if k != "probe"}
            rows = res.get(key, [])
            at = [n for n, r in enumerate(rows) if (r["engine"], r["model"], r["batch"]) == (engine, model, int(batch))]
            if at:
                rows[at[0]] = row
            else:
                rows.append(row)
            res[key] = rows
            print(render(res, "paired"))
        else:  # this CPU's shapes of the comparison above; the small model gets SECONDS, smollm2 twice that
            res[key] = [{k: v for k, v in paired(engine, model, dtype, (b, 32, 64),
                                                 args.paired * (1 if model == "tiny-random-llama" else 2),
                                                 idle_s=3).items() if k != "probe"}
                        for engine, dtype in (("transformers", "float32"), ("llama.cpp", "f16"))
                        for model in ("tiny-random-llama", "smollm2-135m") for b in (1, 8)]
            print(render(res, "paired"))
        res["machine_gpu" if args.gpu else "machine"] = machine()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2) + "\n")
        return
    if args.gpu:
        res["machine_gpu"] = machine()

        def partial(rows, res=res):
            res["bare_gpu"] = rows
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(res, indent=2) + "\n")

        res["bare_gpu"] = bare_vs_infbench("transformers", "llama-3-8b", "bfloat16", [(1, 128, 128), (16, 128, 128)],
                                           args.rounds, gpu=True, cause=args.cause, spy_dir=args.spy_dir,
                                           on_row=partial)
    if args.quick and not args.gpu:
        res["bare"] = bare_vs_infbench("transformers", "tiny-random-llama", "float32", [(1, 32, 64)], args.rounds,
                                       cause=args.cause, spy_dir=args.spy_dir)
        res["rounds"] = args.rounds
    elif args.only in (None, "bare") and not args.gpu:
        shapes = [(1, 32, 64), (8, 32, 64)]
        res["bare"] = (bare_vs_infbench("transformers", "tiny-random-llama", "float32", shapes, args.rounds)
                       + bare_vs_infbench("transformers", "smollm2-135m", "float32", shapes, args.rounds)
                       + bare_vs_infbench("llama.cpp", "tiny-random-llama", "f16", shapes, args.rounds)
                       + bare_vs_infbench("llama.cpp", "smollm2-135m", "f16", shapes, args.rounds))
        res["rounds"] = args.rounds
    if args.only in (None, "startup") and not args.gpu:
        res["startup"] = startup()
    if args.only in (None, "overhead") and not args.gpu:
        grid = [(1, 32, 16), (8, 32, 16), (1, 128, 64), (8, 128, 64)]
        res["overhead"] = (overhead("llama.cpp", "tiny-random-llama", "f16", grid, args.reps)
                           + overhead("llama.cpp", "smollm2-135m", "f16", grid[:2] + [(1, 128, 64)], args.reps)
                           + overhead("transformers", "smollm2-135m", "float32", [(1, 32, 16), (8, 32, 16)], args.reps))
        res["load_once"] = [load_once("llama.cpp", "smollm2-135m", "f16", 6),
                            load_once("transformers", "smollm2-135m", "float32", 6)]
        res["reps"] = args.reps
    if not args.gpu:
        res["machine"] = machine()
    for variant in ("bare", "startup", None, "load_once"):
        try:
            print(render(res, variant))
        except KeyError:
            pass
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
