"""Reliability counts for docs/reliability.md (issue 14): hostile inputs tried, faults
injected into real runs, measured cells lost, runs left ``running``.

It runs, with many more examples and faults than CI does:

1. the deterministic bad-input cases (:data:`BAD_INPUT_TESTS`), counted by pytest, and apart
   from them the cases of issue 22's hostile review of the commands added later
   (:data:`BOUNDARY_TESTS`: inputs, outputs, secrets, waits, exit codes);
1a. issue 33's fourth round (:data:`ROUND4_TESTS`: writer targets that are not
   regular files, engine arguments in the cell's identity and their types, contradictory
   imports, NaN perplexity, gates, lengths against the context, power below zero, the Ray
   address secret) and the scan of every ``run`` option against every mode
   (``tests/unit/plan/test_option_scan.py``, and the scan itself: each pair applies, is refused,
   or is ignored, which counts as a failed check);
1b. secrets planted in every path that carries one (``tests/integration/test_secrets_paths.py``:
   sweep, find-max, import, site endpoint, engine argument, a server echoing its
   Authorization header), each run for real against a server on 127.0.0.1 and the whole
   store, stdout and stderr grepped;
2. the hypothesis fuzz layer (``tests/unit/cli/test_cli_fuzz.py``) with ``--fuzz`` random
   examples per target;
3. SIGINT/SIGTERM sent to an in-process run at random times (the exact set of measured
   cells is known: each must be stored);
4. SIGINT/SIGTERM/SIGKILL sent to an ``infbench run`` process at random times, then a
   resume run (no run may stay ``running``; every cell ends stored ok, none measured twice);
5. a full disk (a small tmpfs, when it can be mounted), a killed llama.cpp server, and two
   processes on one store;
6. issue 41's fifth round: its cases (:data:`ROUND5_TESTS`,
   ``tests/integration/test_imperfect_servers.py`` and the echoed bearer token of
   ``test_secrets_paths.py``) counted by kind (data loss, secret, hang, internal error,
   silent wrong, unsafe output: :data:`ROUND5_KINDS`), and its waits timed on the real CLI
   (:func:`bounded_waits`: broken plugins installed for real, SIGTERM and Ctrl-C twice on a
   ``--no-engine-process`` prefill before and after, a stream without end, a sweep of 10^6
   cells, an import killed part-way).

``--sections round5`` runs only section 6 (``round5-cases``: only its cases) and keeps the
other sections of the existing ``--out`` file (the JSON says which sections ran when).

Run under the shared lock (it keeps both cores busy for minutes)::

    python benchmarks/reliability.py --out benchmarks/results/reliability.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.faults import (  # noqa: E402
    N_EVENTS,
    N_SLOW,
    SLOW_SWEEP,
    SWEEP,
    attempts,
    children_matching,
    infbench,
    journal_cells,
    signal_in_process,
    signal_subprocess,
    store_state,
    sweep,
    wait_for,
)

# The hostile cases of each round, by the unit test files that hold them (tests/unit mirrors the
# package: a round's cases sit in the folders of the layers they test; docs/benchmarks.md counts them).
#: Issue 14's deterministic bad inputs (sections 1 to 6).
BAD_INPUT_TESTS = [
    "tests/unit/cli/test_command_bad_inputs.py",
    "tests/unit/contract/test_site_config_bad_inputs.py",
    "tests/unit/data/test_output_path_bad_inputs.py",
    "tests/unit/data/test_secrets.py",
    "tests/unit/data/test_signals.py",
    "tests/unit/engines/test_server_process.py",
    "tests/unit/execution/test_ingest_bad_inputs.py",
    "tests/unit/plan/test_sweep_file_bad_inputs.py",
    "tests/unit/report/test_results_table_numbers.py",
    "tests/unit/runtimes/test_mounts_and_security.py",
    "tests/unit/store/test_recovery.py",
    "tests/unit/store/test_store_bad_inputs.py",
    "tests/unit/workloads/test_dataset_bad_inputs.py",
]
#: Issue 22's hostile review of the commands added later: inputs, outputs, secrets, waits, exit codes.
BOUNDARY_TESTS = [
    "tests/unit/cli/test_command_flag_bounds.py",
    "tests/unit/cli/test_predict_bad_inputs.py",
    "tests/unit/contract/test_site_config_values.py",
    "tests/unit/data/test_output_ownership.py",
    "tests/unit/data/test_secret_redaction.py",
    "tests/unit/execution/test_ray_address_waits.py",
    "tests/unit/execution/test_worker_output_nan.py",
    "tests/unit/report/test_lib_import_bad_rows.py",
    "tests/unit/report/test_output_escaping.py",
    "tests/unit/workloads/test_trace_and_dataset_inputs.py",
]
#: Issue 33's fourth round, and the scan of every ``run`` option against every mode.
ROUND4_TESTS = [
    "tests/unit/cli/test_adaptive_budget_bounds.py",
    "tests/unit/data/test_cell_identity_engine_args.py",
    "tests/unit/data/test_ray_address_redaction.py",
    "tests/unit/data/test_writer_targets.py",
    "tests/unit/engines/test_engine_arg_checks.py",
    "tests/unit/measure/test_negative_power.py",
    "tests/unit/plan/test_context_length_limits.py",
    "tests/unit/plan/test_option_scan.py",
    "tests/unit/quality/test_non_finite_perplexity.py",
    "tests/unit/report/test_lib_import_consistency.py",
]
#: Issue 41's fifth round (with ``tests/integration/test_imperfect_servers.py``: :func:`round5_cases`).
ROUND5_TESTS = [
    "tests/unit/analysis/test_physics_on_every_path.py",
    "tests/unit/cli/test_run_refusals.py",
    "tests/unit/contract/test_plugin_gate.py",
    "tests/unit/data/test_echoed_secret_redaction.py",
    "tests/unit/data/test_engine_args_one_reading.py",
    "tests/unit/data/test_native_call_watchdog.py",
    "tests/unit/data/test_output_encoding.py",
    "tests/unit/data/test_worker_spec_checks.py",
    "tests/unit/engines/test_engine_process_shutdown.py",
    "tests/unit/engines/test_openai_stream_bounds.py",
    "tests/unit/execution/test_worker_folders.py",
    "tests/unit/plan/test_sweep_size_bounds.py",
    "tests/unit/report/test_import_all_or_nothing.py",
    "tests/unit/store/test_journal_signing.py",
]
#: The hypothesis fuzz layer.
FUZZ_TESTS = ["tests/unit/cli/test_cli_fuzz.py"]


def pytest_count(files: list[str], env: dict[str, str] | None = None) -> dict:
    """Run pytest on ``files``; counts by outcome and each test's outcome (``outcomes``:
    node id -> PASSED/FAILED/XFAIL/XPASS/ERROR/SKIPPED, from ``-rA``)."""
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *files], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ, **(env or {})})
    tail = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|xfailed|xpassed|error)", tail)}
    outcomes = dict((m[1], m[0]) for m in re.findall(r"^(PASSED|FAILED|XFAIL|XPASS|ERROR|SKIPPED) (\S+)",
                                                       p.stdout, re.M))
    return {"passed": counts.get("passed", 0), "failed": counts.get("failed", 0) + counts.get("error", 0),
            "xfailed": counts.get("xfailed", 0), "xpassed": counts.get("xpassed", 0), "outcomes": outcomes}


def option_scan(work: Path) -> dict:
    """Every ``infbench run`` option against every mode (:mod:`tests.support.option_scan`):
    how many pairs change the run, are refused, or are accepted and ignored."""
    from infbench.contract.manager import get_plugin_manager
    from tests.support.option_scan import scan

    d = work / "option-scan"
    d.mkdir()
    res = scan(d, get_plugin_manager())
    verdicts = [v for v, _ in res.values()]
    return {"pairs": len(res), "applies": verdicts.count("applies"), "refused": verdicts.count("refused"),
            "ignored": verdicts.count("ignored"),
            "ignored_pairs": sorted(f"{o} in {m}" for (o, m), (v, _) in res.items() if v == "ignored")}


def fuzz(examples: int, work: Path) -> dict:
    stats = work / "fuzz.jsonl"
    res = pytest_count(FUZZ_TESTS, {"INFBENCH_FUZZ_EXAMPLES": str(examples),
                                    "INFBENCH_FUZZ_RANDOM": "1", "INFBENCH_FUZZ_STATS": str(stats)})
    per = {}
    for line in stats.read_text().splitlines() if stats.exists() else []:
        e = json.loads(line)
        per[e["test"]] = per.get(e["test"], 0) + e["examples"]
    return {**res, "examples": per, "total_examples": sum(per.values())}


def in_process_signals(n: int, rng: random.Random, work: Path) -> dict:
    """SIGINT/SIGTERM at a random observer event of an in-process run, sent there (half of
    the trials) or a random 0-50 ms later from a timer thread (which may land anywhere:
    in a measurement, a store write, or after the run ended)."""
    from infbench.contract.manager import build_plugin_manager

    pm = build_plugin_manager()
    out = {"faults": 0, "landed_during_run": 0, "measured": 0, "lost": 0, "left_running": 0}
    for i in range(n):
        signum = (signal.SIGINT, signal.SIGTERM)[i % 2]
        delay = 0.0 if i % 4 < 2 else rng.uniform(0.0, 0.05)
        r = signal_in_process(work / f"inproc-{i}.db", signum, rng.randint(1, N_EVENTS), delay, pm)
        out["faults"] += 1
        out["landed_during_run"] += bool(r["interrupted"])
        out["measured"] += len(r["measured"])
        out["lost"] += len(r["measured"] - r["kept"])
        out["left_running"] += "running" in r["statuses"]
    return out


def run_seconds(work: Path) -> float:
    """Wall time (s) of one uninterrupted ``infbench run`` of the slow sweep."""
    t0 = time.monotonic()
    infbench("run", *SLOW_SWEEP, "--store", str(work / "calibrate.db"), env={"INFBENCH_HOME": str(work / "home")})
    return time.monotonic() - t0


def subprocess_signals(n: int, rng: random.Random, work: Path) -> dict:
    """SIGINT/SIGTERM/SIGKILL to an ``infbench run`` process: half at a random time of its
    whole life (start-up, model load, measuring, storing), half a random 0-50 ms after its
    k-th stored cell; then a resume run."""
    total_s = run_seconds(work)
    out = {"faults": 0, "run_s": round(total_s, 2), "by_signal": {}, "landed_during_run": 0,
           "cells_incomplete_after_resume": 0, "measured_twice": 0, "left_running_after_next_start": 0,
           "said_vs_stored_mismatch": 0}
    home = work / "home"
    for i in range(n):
        name = ("SIGINT", "SIGTERM", "SIGKILL")[i % 3]
        store = work / f"sub-{i}.db"
        if i % 2:
            r = signal_subprocess(store, getattr(signal, name), rng.uniform(0.0, 0.05), home,
                                  after_cells=rng.randint(1, N_SLOW - 1))
        else:
            r = signal_subprocess(store, getattr(signal, name), rng.uniform(0.0, total_s), home)
        out["faults"] += 1
        out["by_signal"][name] = out["by_signal"].get(name, 0) + 1
        out["landed_during_run"] += r["sent"] and r["code"] in (130, 143, -9)
        if r["code"] in (130, 143) and r["said"] and r["state"]:
            out["said_vs_stored_mismatch"] += r["said"]["ok"] + r["said"]["failed"] != r["state"]["attempts"]
        p = infbench("run", *SLOW_SWEEP, "--store", str(store), "--json", env={"INFBENCH_HOME": str(home)})
        st = store_state(store)
        out["left_running_after_next_start"] += "running" in st["runs"].values()
        out["cells_incomplete_after_resume"] += N_SLOW - len(st["ok"]) if p.returncode == 0 else N_SLOW
        out["measured_twice"] += st["attempts"] - N_SLOW
    return out


def full_disk(n: int, work: Path) -> dict:
    """The store's 400 KB tmpfs filled up to 96-128 KB of room: the small sweep's cells go
    to the journal; after the filler is removed the next run stores them. (The slow
    sweep's request records alone outgrow such a disk: that is a disk that stays full.)"""
    out = {"faults": 0, "measured": 0, "journaled": 0, "lost": 0, "left_running": 0, "skipped": None,
           "exit_codes": []}
    for i in range(n):
        d = work / f"disk-{i}"
        d.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(d)],
                          capture_output=True).returncode:
            out["skipped"] = "cannot mount a tmpfs here"
            return out
        try:
            home, store = work / f"disk-home-{i}", d / "s.db"
            infbench("run", *sweep("1"), "--store", str(store), env={"INFBENCH_HOME": str(home)})
            free = shutil.disk_usage(d).free
            # room for SQLite's shared-memory file and a few pages (as in the test): some cells no longer fit
            (d / "filler").write_bytes(b"\0" * max(0, free - (96 + 16 * i) * 1024))
            p = infbench("run", *SWEEP, "--store", str(store), "--json", env={"INFBENCH_HOME": str(home)})
            said = json.loads(p.stdout) if p.stdout.strip() else {"cells": [], "journaled": 0}
            out["faults"] += 1
            out["exit_codes"].append(p.returncode)
            measured = {c["cell_id"] for c in said["cells"]}
            out["measured"] += len(measured)
            out["journaled"] += said.get("journaled", 0)
            (d / "filler").unlink()
            infbench("run", *SWEEP, "--store", str(store), "--json", env={"INFBENCH_HOME": str(home)})
            st = store_state(store)
            out["lost"] += len(measured - st["ok"] - journal_cells(home))
            out["left_running"] += "running" in st["runs"].values()
        finally:
            subprocess.run(["umount", "-l", str(d)], capture_output=True)
    return out


SERVER = ["--model", "tiny", "--engine", "llama.cpp-server", "--dtype", "f16", "--batch", "1,2,3", "--input-len",
          "16", "--output-len", "128"]


def killed_servers(n: int, rng: random.Random, work: Path) -> dict:
    out = {"faults": 0, "cells_not_stored": 0, "left_running": 0, "servers_outliving_infbench": 0}
    for i in range(n):
        home, store = work / "srv-home", work / f"srv-{i}.db"
        kind = ("kill-server", "SIGTERM-infbench", "SIGKILL-infbench")[i % 3]
        p = subprocess.Popen([sys.executable, "-m", "infbench.cli", "run", *SERVER, "--store", str(store), "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "INFBENCH_HOME": str(home)})
        if not wait_for(lambda p=p: children_matching(p.pid, "xllamacpp_serve"), 120):
            p.kill()
            p.communicate()
            continue
        server = children_matching(p.pid, "xllamacpp_serve")[0]
        wait_for(lambda p=p, store=store: p.poll() is not None or attempts(store) >= 1, 300, 0.01)
        time.sleep(rng.uniform(0.0, 0.2))
        if p.poll() is not None:  # the sweep ended first: no fault injected
            p.communicate()
            continue
        if kind == "kill-server":
            os.kill(server, signal.SIGKILL)
        else:
            p.send_signal(signal.SIGTERM if kind.startswith("SIGTERM") else signal.SIGKILL)
        out["faults"] += 1
        p.communicate(timeout=300)
        import psutil

        def gone(pid: int = server) -> bool:
            try:
                return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            except psutil.Error:
                return True

        out["servers_outliving_infbench"] += not wait_for(gone, 30)
        if kind == "kill-server":
            st = store_state(store)
            out["cells_not_stored"] += 3 - st["attempts"]
        infbench("run", *SERVER, "--store", str(store), env={"INFBENCH_HOME": str(home)})
        out["left_running"] += "running" in store_state(store)["runs"].values()
    return out


def two_processes(n: int, work: Path) -> dict:
    out = {"trials": 0, "cells": 0, "measured_twice": 0, "left_running": 0}
    six = sweep("1,2,3,4,5,6", output_len=32)
    for i in range(n):
        home, store = work / "two-home", work / f"two-{i}.db"
        infbench("run", *sweep("1"), "--store", str(store), env={"INFBENCH_HOME": str(home)})
        ps = []
        for _ in range(2):
            ps.append(subprocess.Popen([sys.executable, "-m", "infbench.cli", "run", *six, "--store", str(store)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       env={**os.environ, "INFBENCH_HOME": str(home)}))
            time.sleep(0.3 * i)
        for p in ps:
            p.wait(600)
        st = store_state(store)
        out["trials"] += 1
        out["cells"] += 6
        out["measured_twice"] += st["attempts"] - 7
        out["left_running"] += "running" in st["runs"].values()
    return out


#: Issue 41's kinds of failure and its cases: each test of :data:`ROUND5_TESTS`,
#: ``test_imperfect_servers.py`` and the echoed-token case of ``test_secrets_paths.py`` is a
#: case of one kind (matched by a word of its name); a failing case counts as one of its kind.
ROUND5_KINDS: dict[str, tuple[str, ...]] = {
    "data loss": ("folder_it_did_not_make", "folder_mark_rules", "journal_entries_are_signed", "all_or_nothing"),
    "secret": ("every_secret_a_run_holds", "worker_event_line_is_redacted", "echoed_bare"),
    "hang": ("hung_hook", "stuck_in_a_native_call", "does_not_cut_a_run", "above_the_cell_cap", "shows_progress",
             "stream_past_max_tokens", "stream_without_end", "spec_is_checked_against"),
    "internal error": ("exits_or_prints", "ends_quietly", "nested_extra_body", "internal_errors_of_the_probe"),
    "silent wrong": ("duplicate_engine_args", "json_or_text", "flag_and_an_engine_arg", "same_spelling",
                     "one_reading_too", "exercises_stand_ins", "refuses_the_names", "named_like_another",
                     "perplexity_below_one", "faster_than_any_hardware", "replayed_cell", "predict_refuses",
                     "extra_tokens", "beyond_max_tokens", "estimated", "killed_engine_process", "adaptive_on"),
    "unsafe output": ("figures_escape", "bidi", "log_axes"),
}


def kind_of(node: str) -> str:
    """The kind of a case (its node id), or ``unclassified``."""
    name = node.rsplit("::", 1)[-1]
    for kind, words in ROUND5_KINDS.items():
        if any(w in name for w in words):
            return kind
    return "unclassified"


def round5_cases() -> dict:
    """Issue 41's cases (see :data:`ROUND5_KINDS`), counted and classified by kind."""
    res = pytest_count([*ROUND5_TESTS, "tests/integration/test_imperfect_servers.py",
                        "tests/integration/test_secrets_paths.py::test_a_bearer_token_in_extra_headers_echoed_bare"])
    by: dict[str, dict[str, int]] = {k: {"cases": 0, "unhandled": 0} for k in (*ROUND5_KINDS, "unclassified")}
    for node, outcome in res["outcomes"].items():
        k = kind_of(node)
        by[k]["cases"] += 1
        by[k]["unhandled"] += outcome not in ("PASSED",)
    return {**res, "by_kind": by}


# -- issue 41's bounded waits, timed on the real CLI ----------------------------------------------
_PLUGINS = {
    "hangco": "import time\n@hookimpl\ndef infbench_detect():\n    time.sleep(3600)\n",
    "exitco": "import sys\n@hookimpl\ndef infbench_detect():\n    sys.exit(0)\n",
    "osexitco": "import os\n@hookimpl\ndef infbench_detect():\n    os._exit(0)\n",
    "printco": "@hookimpl\ndef infbench_detect():\n    print('\\x1b]0;pwned\\x07\\x1b[2J TOKEN=hf_' + 'a' * 34)\n"
               "    return []\n",
    "dictco": "@hookimpl\ndef infbench_detect():\n    return [{'vendor': 'dictco', 'model': 'X'}]\n",
    "bigco": "@hookimpl\ndef infbench_detect():\n    return [DeviceInfo(vendor='bigco', kind='gpu', model='B', "
             "count=10**12, memory_bytes=-1)]\n",
    "wattco": "class S(PowerSampler):\n    name = 'w'\n    def read(self):\n"
              "        return [PowerReading(t_ns=now_ns(), device_index=0, power_w=-5.0)]\n"
              "@hookimpl\ndef infbench_detect():\n    return []\n"
              "@hookimpl\ndef infbench_device_catalog():\n    return [DeviceSpec(id='w1', name='Watt One', "
              "vendor='wattco', memory_gib=8, bandwidth_tb_s=1.0, sources=['x'])]\n"
              "@hookimpl\ndef infbench_power_sampler(device):\n    return S() if device.vendor == 'wattco' else None\n",
}


def plugin_dir(work: Path, name: str) -> Path:
    """A folder holding plugin ``name`` (:data:`_PLUGINS`) as an installed distribution would:
    its module and a ``dist-info`` with the ``infbench`` entry point (put it on PYTHONPATH)."""
    d = work / f"plugin-{name}"
    d.mkdir(exist_ok=True)
    (d / f"{name}.py").write_text("from infbench.plugin import DeviceInfo, DeviceSpec, PowerReading, PowerSampler, "
                                  "hookimpl, now_ns\n" + _PLUGINS[name])
    meta = d / f"{name}-0.1.dist-info"
    meta.mkdir(exist_ok=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text(f"[infbench]\n{name} = {name}\n")
    return d


def _timed(args: list[str], env: dict[str, str], timeout: float = 900) -> dict:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "infbench.cli", *args], capture_output=True, text=True,
                       env={**os.environ, **env}, timeout=timeout)
    return {"s": round(time.monotonic() - t0, 2), "rc": p.returncode, "out": p.stdout, "err": p.stderr}


def plugin_probes(work: Path) -> dict:
    """Each broken plugin installed for real (a dist-info on PYTHONPATH): ``detect`` and
    ``run --dry-run`` go on without it, ``plugins check NAME`` fails it with the reason;
    seconds per command, exit codes, and whether raw escape sequences or the token reached
    the terminal."""
    out = {}
    base = os.environ.get("PYTHONPATH", "")
    for name in _PLUGINS:
        env = {"PYTHONPATH": f"{plugin_dir(work, name)}{os.pathsep}{base}", "INFBENCH_HOME": str(work / "home")}
        d = _timed(["detect", "--no-engines"], env)
        c = _timed(["plugins", "check", name, "--sample-s", "0.05"], env)
        r = _timed(["run", "--model", "tiny", "--dry-run"], env) if name == "hangco" else None
        said = d["out"] + d["err"] + c["out"] + c["err"] + (r["out"] + r["err"] if r else "")
        out[name] = {"detect_s": d["s"], "detect_rc": d["rc"], "check_s": c["s"], "check_rc": c["rc"],
                     "check_fails": c["rc"] == 1 and "breaks the contract" in " ".join(c["out"].split()),
                     "dry_run_s": r["s"] if r else None, "dry_run_rc": r["rc"] if r else None,
                     "raw_escape_or_token": "\x1b" in said or "hf_" + "a" * 34 in said,
                     "internal_error": "internal error" in said.lower() or "Traceback" in said}
    return out


def sigterm_no_engine_process(work: Path, core: Path) -> dict:
    """``run --no-engine-process`` on a long llama.cpp prefill (SmolLM2-135M shape, f16
    dummy weights, 2048 prompt tokens), SIGTERM (and, in another run, Ctrl-C twice)
    sent 3 s into the prefill; seconds from the signal to the process's exit and its exit
    status, with the core at ``core`` (this checkout, or main's for the before)."""
    args = ["run", "--model", "smollm2-135m", "--engine", "llama.cpp", "--dtype", "f16", "--batch", "1",
            "--input-len", "2048", "--output-len", "2", "--warmup", "0", "--no-engine-process", "--force"]
    env = {**os.environ, "PYTHONPATH": str(core), "INFBENCH_HOME": str(work / "home")}
    small = [a if a != "2048" else "8" for a in args]
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "infbench.cli", *small, "--store", str(work / "warm.db")], env=env,
                   capture_output=True, timeout=900)
    load_s = time.monotonic() - t0
    out: dict = {"start_s": round(load_s, 2)}
    for how in ("SIGTERM", "SIGINT x2"):
        p = subprocess.Popen([sys.executable, "-m", "infbench.cli", *args, "--store", str(work / "long.db")], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(load_s + 3.0)
        t_sig = time.monotonic()
        if how == "SIGTERM":
            p.send_signal(signal.SIGTERM)
        else:
            p.send_signal(signal.SIGINT)
            time.sleep(0.3)
            p.send_signal(signal.SIGINT)
        try:
            _, err = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        out[how] = {"exit_after_s": round(time.monotonic() - t_sig, 2), "rc": p.returncode,
                    "said": next((ln for ln in err.splitlines() if "native call" in ln or "interrupted" in ln), "")}
    return out


def serving_probes(work: Path) -> dict:
    """A server that streams without end for an 8-token request (``--request-timeout 600``):
    seconds until the cell ends, and how its requests ended."""
    from tests.support.stub_server import StubServer

    with StubServer() as stub:
        store = work / "forever.db"
        r = _timed(["run", "--engine", "openai", "--base-url", stub.base_url, "--model", "forever", "--concurrency",
                    "1", "--num-requests", "2", "--warmup-requests", "0", "--input-len", "16", "--output-len", "8",
                    "--request-timeout", "600", "--store", str(store)], {"INFBENCH_HOME": str(work / "home")})
    import sqlite3

    errors = [e for (e,) in sqlite3.connect(store).execute("SELECT error FROM requests")]
    return {"forever_stream_s": r["s"], "rc": r["rc"], "requests_cut": sum("cut:" in (e or "") for e in errors),
            "requests": len(errors)}


def planning_probe(work: Path) -> dict:
    """A sweep file of 5,000 input lengths x 200 output lengths, ``run --dry-run``: seconds
    to the refusal, and what it said."""
    f = work / "huge.yaml"
    f.write_text("models: [tiny]\nbatch: [1]\ninput_len: [" + ", ".join(map(str, range(1, 5001))) + "]\n"
                 "output_len: [" + ", ".join(map(str, range(1, 201))) + "]\n")
    r = _timed(["run", "--sweep", str(f), "--dry-run"], {"INFBENCH_HOME": str(work / "home")})
    return {"s": r["s"], "rc": r["rc"], "refused": "cap of" in " ".join((r["out"] + r["err"]).split())}


def import_probe(work: Path, rows: int) -> dict:
    """An LLM-Inference-Bench CSV of ``rows`` rows (the fixture's rows repeated), imported,
    then SIGKILLed after half the time a full import took; the store then holds no cell
    of the killed import and the next writing command says the run was interrupted."""
    src = [ln for ln in (ROOT / "tests" / "fixtures" / "lib_published_3dev.csv").read_text().splitlines()
           if not ln.startswith("#")]
    head, body = src[0], src[1:]
    f = work / "big.csv"
    with f.open("w") as fh:
        fh.write(head + "\n")
        for i in range(rows):
            fh.write(body[i % len(body)] + "\n")
    env = {"INFBENCH_HOME": str(work / "home")}
    full = _timed(["import", str(f), "--store", str(work / "imp-full.db"), "--json"], env, timeout=3600)
    store = work / "imp-kill.db"
    p = subprocess.Popen([sys.executable, "-m", "infbench.cli", "import", str(f), "--store", str(store)],
                         env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(full["s"] * 0.8)
    p.kill()
    p.wait()
    st = store_state(store) if store.exists() else {"attempts": 0, "runs": {}}
    nxt = _timed(["import", str(ROOT / "tests" / "fixtures" / "lib_published_3dev.csv"), "--store", str(store)], env)
    return {"rows": rows, "bytes": f.stat().st_size, "full_import_s": full["s"], "full_rc": full["rc"],
            "killed_after_s": round(full["s"] * 0.8, 1), "cells_after_kill": st["attempts"],
            "runs_after_kill": list(st["runs"].values()),
            "next_command_says_interrupted": "marked interrupted" in " ".join(nxt["err"].split())}


def bounded_waits(work: Path, import_rows: int) -> dict:
    """Issue 41's waits, each timed on the real CLI (run under the shared lock)."""
    w = work / "round5"
    w.mkdir()
    res = {"plugins": plugin_probes(w), "serving": serving_probes(w), "planning": planning_probe(w),
           "import": import_probe(w, import_rows)}
    res["signals_no_engine_process"] = {"after": sigterm_no_engine_process(w, ROOT / "core")}
    base = subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    if base:  # the same probe on the core this branch started from (a clean export of that commit)
        before = w / "before"
        before.mkdir()
        subprocess.run(f"git archive {base} core | tar -x -C {before}", shell=True, cwd=ROOT, check=True)
        res["signals_no_engine_process"][f"before ({base[:7]})"] = sigterm_no_engine_process(w, before / "core")
    return res


SSE = "SSE streams"
#: A section missing from a JSON written before it existed.
_NONE = {"passed": 0, "failed": 0}


def _n(x: int) -> str:
    return f"{x:,}"


def render(data: dict, variant: str | None = None) -> str:
    """Figures from reliability.json (benchmarks/docs_numbers.py): the command and table of
    docs/benchmarks.md (default) or the counts of docs/reliability.md (``counts``). Every
    total is the sum of the rows it shows."""
    t = data["totals"]
    if variant == "counts":
        lines = ["| | |", "|---|---:|",
                 f"| hostile input cases tried (deterministic + fuzz examples) | {_n(t['cases_tried'])} |",
                 f"| faults injected into real runs | {_n(t['faults_injected'])} |",
                 f"| measured cells lost | **{_n(t['cells_lost'])}** |",
                 f"| runs left `running` after the next start | **{_n(t['runs_left_running'])}** |",
                 f"| checks that failed | {_n(t['failed_checks'])} |"]
        by = (data.get("round5_cases") or {}).get("by_kind") or {}
        lines += [f"| issue 41 cases of kind *{k}* (unhandled) | {_n(v['cases'])} (**{_n(v['unhandled'])}**) |"
                  for k, v in by.items() if v["cases"] or k != "unclassified"]
        return "\n".join(lines)
    if variant == "waits":
        return render_waits(data.get("bounded_waits") or {})
    a = data["args"]
    bad, fz = data["bad_input_cases"], data["fuzz"]
    ex = fz["examples"]
    others = {k: v for k, v in ex.items() if k != SSE}
    sse_out = [o for node, o in fz.get("outcomes", {}).items() if "sse" in node]
    sse_result = ("pass: a bad event is that request's error, the cell keeps the valid requests"
                  if sse_out == ["PASSED"] else f"{', '.join(sse_out) or 'not run'}")
    sizes = sorted(set(others.values()))
    fuzz_n = " / ".join(str(x) for x in sizes)
    fuzz_ok = all(o == "PASSED" for node, o in fz.get("outcomes", {}).items() if "sse" not in node)
    sp, ss, fd, ks, tw = (data[k] for k in ("signals_in_process", "signals_to_infbench_run", "full_disk",
                                            "killed_servers", "two_processes"))
    by = ss["by_signal"]
    bnd, sec = data.get("boundary_cases", _NONE), data.get("secret_paths", _NONE)
    r4, scn = data.get("round4_cases", _NONE), data.get("option_scan", {"pairs": 0, "applies": 0, "refused": 0,
                                                                          "ignored": 0})
    r5 = data.get("round5_cases", _NONE)
    rows = [
        ("issue 14's deterministic bad inputs (`BAD_INPUT_TESTS` of `benchmarks/reliability.py`)",
         _n(bad["passed"] + bad["failed"]),
         f"{bad['passed']} pass" + (f", {bad['failed']} fail" if bad["failed"] else "")),
        ("issue 22's hostile review of the later commands (`BOUNDARY_TESTS`: inputs, outputs, secrets, waits, "
         "exit codes)", _n(bnd["passed"] + bnd["failed"]),
         f"{bnd['passed']} pass" + (f", {bnd['failed']} fail" if bnd["failed"] else "")),
        ("issue 33's fourth round (`ROUND4_TESTS`: writer targets, engine arguments, contradictory imports, "
         "NaN perplexity, gates, context lengths, power below zero, Ray secret; the option scan)",
         _n(r4["passed"] + r4["failed"]), f"{r4['passed']} pass" + (f", {r4['failed']} fail" if r4["failed"] else "")),
        ("issue 41's fifth round (`ROUND5_TESTS`, `test_imperfect_servers.py`: worker folders, the signed "
         "journal, echoed secrets, bounded waits, arguments read one way, the plugin gate, physics on every path, "
         "imperfect servers, output encoding)", _n(r5["passed"] + r5["failed"]),
         f"{r5['passed']} pass" + (f", {r5['failed']} fail" if r5["failed"] else "")),
        ("every `run` option x mode (batch, serving, find-max, adaptive, perplexity)", _n(scn["pairs"]),
         f"{scn['applies']} change the run, {scn['refused']} refused with where they apply, "
         f"**{scn['ignored']} ignored**"),
        ("secrets planted in sweep, find-max, import, site endpoint, engine argument, echoing server "
         "(`test_secrets_paths.py`: whole store, stdout and stderr grepped)", _n(sec["passed"] + sec["failed"]),
         (f"{sec['passed']} pass: no secret found" if not sec["failed"] else f"{sec['failed']} FAIL")),
        ("hypothesis fuzz examples: " + ", ".join(others), f"{len(others)} x {fuzz_n}",
         "no traceback, exit 2 with a message, store unchanged" if fuzz_ok else "see `fuzz.outcomes` in the JSON"),
        ("fuzz: SSE streams (malformed events, negative or huge `completion_tokens`, split reads)", _n(ex.get(SSE, 0)),
         sse_result),
        ("SIGINT/SIGTERM at a random observer event of an in-process run (half there, half 0-50 ms later)",
         _n(sp["faults"]), f"{sp['landed_during_run']} landed during the run, {sp['measured']} cells measured, "
         f"**{sp['lost']} lost**, {sp['left_running']} runs left `running`"),
        (f"SIGINT/SIGTERM/SIGKILL to `infbench run` (half at a random time of its {ss['run_s']:.1f} s life, half "
         "after its k-th stored cell), then a resume",
         f"{ss['faults']} ({', '.join(f'{v} {k}' for k, v in by.items())})",
         f"{ss['landed_during_run']} landed; after the resume {ss['cells_incomplete_after_resume']} cells missing, "
         f"{ss['measured_twice']} cells measured twice, {ss['left_running_after_next_start']} runs left `running`, "
         f"{ss['said_vs_stored_mismatch']} mismatches between what the interrupted run printed and what it stored"),
        ("full disk (400 KB tmpfs, 96-128 KB left)", _n(fd["faults"]),
         f"skipped: {fd['skipped']}" if fd.get("skipped") else
         f"{fd['measured']} cells measured, {fd['journaled']} went to the journal, **{fd['lost']} lost**"),
        ("llama.cpp server killed, or infbench sent SIGTERM/SIGKILL while it serves", _n(ks["faults"]),
         f"{ks['cells_not_stored']} cells without a stored attempt, {ks['servers_outliving_infbench']} servers outlive "
         f"infbench, {ks['left_running']} runs left `running`"),
        ("two processes on one store, same 6-cell sweep", _n(tw["trials"]),
         f"{tw['cells']} cells, {tw['measured_twice']} measured twice"),
    ]
    total_cases = sum(x["passed"] + x["failed"] for x in (bad, bnd, sec, r4, r5)) + fz["total_examples"] + scn["pairs"]
    total_faults = sp["faults"] + ss["faults"] + fd["faults"] + ks["faults"] + tw["trials"]
    assert (total_cases, total_faults) == (t["cases_tried"], t["faults_injected"]), "totals disagree with the rows"
    cmd = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in a.items() if k not in ("seed", "sections"))
    out = ["    python benchmarks/reliability.py \\",
           f"        {cmd} --seed {a['seed']}", "",
           "| what | tried | outcome |", "|---|---:|---|"]
    out += [f"| {w} | {n} | {o} |" for w, n, o in rows]
    out.append(f"| **total** | **{_n(t['cases_tried'])} cases, {_n(t['faults_injected'])} faults** | "
               f"**{_n(t['cells_lost'])} cells lost, {_n(t['runs_left_running'])} runs left `running`, "
               f"{_n(t['failed_checks'])} checks failed** |")
    runs = data.get("section_runs") or {}
    parts = [] if "all" in runs else [f"sections 1-5: {data['wall_s']:.0f} s (the earlier full run)"]
    parts += [f"{'every section' if k == 'all' else 'section 6 (' + k + ')'}: {v['wall_s']:.0f} s, {v['date']}"
              for k, v in runs.items()]
    when = "; ".join(parts) if runs else f"{data['wall_s']:.0f} s in all"
    out += ["", f"{when}. Raw numbers: `benchmarks/results/reliability.json`."]
    return "\n".join(out)


def render_waits(w: dict) -> str:
    """Issue 41's bounded waits (:func:`bounded_waits`) as a table for docs/reliability.md."""
    if not w:
        return "(not measured yet)"
    rows = []
    for name, p in (w.get("plugins") or {}).items():
        what = {"hangco": "detect hangs", "exitco": "detect calls sys.exit(0)", "osexitco": "detect calls os._exit(0)",
                "printco": "detect prints escapes and a token", "dictco": "detect returns dicts",
                "bigco": "detect returns 10^12 devices, memory -1",
                "wattco": "negative watts, no hardware here"}.get(name, name)
        extra = f"; `run --dry-run` {p['dry_run_s']:.1f} s, exit {p['dry_run_rc']}" if p.get("dry_run_s") else ""
        rows.append((f"plugin: {what}", f"`detect` {p['detect_s']:.1f} s (exit {p['detect_rc']}); `plugins check` "
                     f"{p['check_s']:.1f} s (exit {p['check_rc']}, {'fails it' if p['check_fails'] else 'PASSES it'})"
                     f"{extra}",
                     "raw escapes or token on the terminal" if p["raw_escape_or_token"] else
                     ("internal error" if p["internal_error"] else "no raw escape, no token, no internal error")))
    sv = w.get("serving") or {}
    if sv:
        rows.append(("a server streaming without end, 8-token requests, `--request-timeout 600`",
                     f"{sv['forever_stream_s']:.1f} s (exit {sv['rc']})",
                     f"{sv['requests_cut']} of {sv['requests']} requests cut at the bound"))
    pl = w.get("planning") or {}
    if pl:
        rows.append(("sweep file of 5,000 x 200 lengths, `run --dry-run`", f"{pl['s']:.1f} s (exit {pl['rc']})",
                     "refused with the cap" if pl["refused"] else "NOT refused"))
    im = w.get("import") or {}
    if im:
        rows.append((f"`import` of {im['rows']:,} rows ({im['bytes'] / 1e6:.0f} MB), SIGKILL after "
                     f"{im['killed_after_s']:.0f} s", f"full import {im['full_import_s']:.0f} s (exit {im['full_rc']})",
                     f"{im['cells_after_kill']} cells stored by the killed import; next command says it was "
                     f"interrupted: {'yes' if im['next_command_says_interrupted'] else 'no'}"))
    for side, sig in (w.get("signals_no_engine_process") or {}).items():
        for how in ("SIGTERM", "SIGINT x2"):
            if how in sig:
                rows.append((f"`--no-engine-process`, 2048-token llama.cpp prefill, {how} ({side})",
                             f"{sig[how]['exit_after_s']:.1f} s to exit (status {sig[how]['rc']})",
                             sig[how]["said"][:120].replace("|", "/") or "-"))
    return "\n".join(["| case | waited | outcome |", "|---|---|---|", *(f"| {a} | {b} | {c} |" for a, b, c in rows)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fuzz", type=int, default=500, help="hypothesis examples per fuzz target")
    ap.add_argument("--in-process", type=int, default=40, help="signals sent to in-process runs")
    ap.add_argument("--subprocess", type=int, default=30, help="signals sent to `infbench run` processes")
    ap.add_argument("--disk", type=int, default=4, help="full-disk trials")
    ap.add_argument("--servers", type=int, default=6, help="killed-server trials")
    ap.add_argument("--two", type=int, default=3, help="two-processes-on-one-store trials")
    ap.add_argument("--import-rows", type=int, default=1_000_000, help="rows of the imported CSV (issue 41)")
    ap.add_argument("--sections", default="all", help="all; round5 (issue 41's cases and waits), or round5-cases "
                                                      "(its cases only): the other sections of --out are kept")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "reliability.json")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = Path(tempfile.mkdtemp(prefix="infbench-reliability-"))
    os.environ["INFBENCH_HOME"] = str(work / "home")
    t0 = time.time()
    if a.sections in ("round5", "round5-cases"):
        res = json.loads(a.out.read_text())
        res["round5_cases"] = round5_cases()
        print("issue 41 cases", {k: v for k, v in res["round5_cases"].items() if k != "outcomes"}, flush=True)
        if a.sections == "round5":
            res["bounded_waits"] = bounded_waits(work, a.import_rows)
            print("issue 41 waits", json.dumps(res["bounded_waits"])[:2000], flush=True)
        finish(res, a, [a.sections], t0, work)
        return
    res = {"seed": a.seed, "args": {k: v for k, v in vars(a).items() if k not in ("out", "sections")}}
    res["bad_input_cases"] = pytest_count(BAD_INPUT_TESTS)
    print("bad inputs", res["bad_input_cases"], flush=True)
    res["boundary_cases"] = pytest_count(BOUNDARY_TESTS)
    print("issue 22 boundary cases", {k: v for k, v in res["boundary_cases"].items() if k != "outcomes"}, flush=True)
    res["round4_cases"] = pytest_count(ROUND4_TESTS)
    print("issue 33 cases", {k: v for k, v in res["round4_cases"].items() if k != "outcomes"}, flush=True)
    res["option_scan"] = option_scan(work)
    print("run options x modes", res["option_scan"], flush=True)
    res["secret_paths"] = pytest_count(["tests/integration/test_secrets_paths.py"])
    print("planted secrets", {k: v for k, v in res["secret_paths"].items() if k != "outcomes"}, flush=True)
    res["fuzz"] = fuzz(a.fuzz, work)
    print("fuzz", res["fuzz"], flush=True)
    res["signals_in_process"] = in_process_signals(a.in_process, rng, work)
    print("in-process signals", res["signals_in_process"], flush=True)
    res["signals_to_infbench_run"] = subprocess_signals(a.subprocess, rng, work)
    print("subprocess signals", res["signals_to_infbench_run"], flush=True)
    res["full_disk"] = full_disk(a.disk, work)
    print("full disk", res["full_disk"], flush=True)
    res["killed_servers"] = killed_servers(a.servers, rng, work)
    print("servers", res["killed_servers"], flush=True)
    res["two_processes"] = two_processes(a.two, work)
    print("two processes", res["two_processes"], flush=True)
    res["round5_cases"] = round5_cases()
    print("issue 41 cases", {k: v for k, v in res["round5_cases"].items() if k != "outcomes"}, flush=True)
    res["bounded_waits"] = bounded_waits(work, a.import_rows)
    finish(res, a, ["all"], t0, work)


def finish(res: dict, a: argparse.Namespace, sections: list[str], t0: float, work: Path) -> None:
    """Totals over every section, the run's record (which sections, how long, when), written to ``a.out``."""
    res["totals"] = totals(res)
    wall = round(time.time() - t0, 1)
    runs = res.setdefault("section_runs", {})
    if sections == ["all"]:
        runs.clear()
        res["wall_s"] = wall
    runs[",".join(sections)] = {"sections": sections, "wall_s": wall, "date": time.strftime("%Y-%m-%d"),
                                "load": os.getloadavg()[0]}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res["totals"]), f"({wall} s) -> {a.out}")
    shutil.rmtree(work, ignore_errors=True)


def totals(res: dict) -> dict:
    """The totals of docs/reliability.md over every section present."""
    r5 = res.get("round5_cases", _NONE)
    return {
        "cases_tried": sum(res[k]["passed"] + res[k]["failed"] for k in ("bad_input_cases", "boundary_cases",
                                                                           "round4_cases", "secret_paths"))
        + r5["passed"] + r5["failed"] + res["fuzz"]["total_examples"] + res["option_scan"]["pairs"],
        "faults_injected": sum(res[k]["faults"] for k in ("signals_in_process", "signals_to_infbench_run",
                                                          "full_disk", "killed_servers"))
        + res["two_processes"]["trials"],
        "cells_lost": res["signals_in_process"]["lost"] + res["full_disk"]["lost"]
        + res["killed_servers"]["cells_not_stored"] + res["signals_to_infbench_run"]["cells_incomplete_after_resume"],
        "runs_left_running": res["signals_in_process"]["left_running"]
        + res["signals_to_infbench_run"]["left_running_after_next_start"] + res["full_disk"]["left_running"]
        + res["killed_servers"]["left_running"] + res["two_processes"]["left_running"],
        "failed_checks": sum(res[k]["failed"] for k in ("bad_input_cases", "boundary_cases", "round4_cases",
                                                        "secret_paths", "fuzz")) + res["option_scan"]["ignored"]
        + r5["failed"],
    }


if __name__ == "__main__":
    main()
