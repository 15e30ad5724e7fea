"""Fault injection against real runs (issue 14, section 3), shared by
``tests/integration/test_fault_injection.py`` (a few faults, in CI) and
``benchmarks/reliability.py`` (many, counted in docs/reliability.md).

Every function runs a real sweep of the tiny llama.cpp model, injects one fault and
returns what an observer outside infbench can check: which cells were *measured* (the
engine returned a result), which are in the store or its journal, and the status of
every run. "No measured cell lost" is ``measured <= kept``; "no run left running" is
``"running" not in statuses`` (after the next start, for SIGKILL).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


def sweep(batch: str = "1,2,3,4", output_len: int = 16, input_len: int = 16) -> list[str]:
    """``infbench run`` flags of a small real sweep of the tiny llama.cpp model, with
    ``--no-remeasure``: these tests count attempts (a resumed run measures only what is
    missing), and the tiny model's sub-millisecond steps on a busy machine can move the
    sentinel, whose re-measures are tested in tests/integration/test_steady_state_live.py; and
    one warm-up block per cell (``--warmup 1``: signals and stores are the subject here; warming
    until stable took 29 s of the two-processes test in CI's run)."""
    return ["--model", "tiny", "--engine", "llama.cpp", "--dtype", "f16", "--batch", batch, "--input-len",
            str(input_len), "--output-len", str(output_len), "--no-remeasure", "--warmup", "1"]


SWEEP = sweep()
N_CELLS = 4
#: A sweep whose cells take long enough (about 0.1-0.2 s each here) for a signal sent
#: after its first stored cell to land while the others are measured.
SLOW_SWEEP = sweep("1,2,3,4,5,6", output_len=512, input_len=256)
N_SLOW = 6
#: Observer events of the in-process sweep (GroupLoading, then CellStarted and
#: CellFinished per cell): a signal sent at any of them lands during the run.
N_EVENTS = 1 + 2 * N_CELLS


def infbench(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infbench.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def store_state(path: Path) -> dict[str, Any]:
    """Cell ids per status and run statuses, read with a plain SQLite connection."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        cells = db.execute("SELECT cell_id, status, run_id FROM cells").fetchall()
        runs = dict(db.execute("SELECT run_id, status FROM runs").fetchall())
        ok = db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()
    return {"attempts": len(cells), "ok": {c for c, s, _ in cells if s == "ok"}, "cells": {c for c, _, _ in cells},
            "runs": runs, "integrity": ok}


def journal_cells(home: Path) -> set[str]:
    """Cell ids kept in ``home``'s journal."""
    out = set()
    for f in (home / "journal").glob("*.jsonl") if (home / "journal").is_dir() else []:
        for line in f.read_text().splitlines():
            e = json.loads(line)
            if e.get("kind") == "cell":
                out.add(e["cell"]["cell_id"])
    return out


# -- in-process: the exact set of measured cells is known --------------------------------
def signal_in_process(store_path: Path, signum: int, at_event: int, delay_s: float, pm: Any) -> dict[str, Any]:
    """Run the sweep in this process with the in-process executor (SIGTERM handled as the
    CLI handles it) and send ``signum`` to this process at its ``at_event``-th observer
    event (1-based: GroupLoading, CellStarted, CellFinished...), right there when
    ``delay_s`` is 0, else ``delay_s`` seconds later from a timer thread.

    Returns:
        ``{"measured": cell ids the engine measured, "kept": ids in the store,
        "statuses": run statuses, "interrupted": bool, "attempts": stored attempts}``.
    """
    from infbench.data import signals
    from infbench.data.run import RunOptions
    from infbench.data.schema import Sweep
    from infbench.data.warmup import WarmupPolicy
    from infbench.detect import detect
    from infbench.execution import session
    from infbench.execution.bookkeeping import provenance
    from infbench.execution.executors.inprocess import InProcessExecutor
    from infbench.plan import plan
    from infbench.store import Store

    det = detect(pm)
    sw = Sweep(models=["tiny-random-llama"], engines=["llama.cpp"], dtypes=["f16"], batch=[1, 2, 3, 4],
               input_len=[16], output_len=[16])
    the_plan = plan(sw, det.devices[0], pm)
    measured: list[str] = []
    real = session.measure_cell
    timers: list[threading.Timer] = []
    events = [0]

    def measuring(*a: Any, **k: Any) -> Any:
        r = real(*a, **k)
        measured.append(r.cell_id)
        return r

    def observer(ev: Any) -> None:
        events[0] += 1
        if events[0] != at_event:
            return
        if delay_s <= 0:
            os.kill(os.getpid(), signum)
        else:
            timers.append(threading.Timer(delay_s, os.kill, (os.getpid(), signum)))
            timers[0].start()

    session.measure_cell = measuring
    store = Store(store_path)
    interrupted = False
    try:
        with signals.terminate_as_interrupt():
            try:
                opts = RunOptions(warmup=WarmupPolicy(remeasure=False))  # as sweep(): attempts are counted
                InProcessExecutor(pm, provenance(det, pm)).run(the_plan, store, opts, observer)
            except KeyboardInterrupt:
                interrupted = True
            for t in timers:  # a timer that fires after the run returned: not during the run
                t.cancel()
                t.join()
            try:
                time.sleep(0.01)
            except KeyboardInterrupt:
                pass
    except KeyboardInterrupt:
        pass
    finally:
        session.measure_cell = real
        store.close()
    st = store_state(store_path)
    return {"measured": set(measured), "kept": st["cells"], "statuses": set(st["runs"].values()),
            "interrupted": interrupted, "attempts": st["attempts"]}


def attempts(store: Path) -> int:
    """Cell attempts stored in ``store`` so far (0 while it does not exist or is busy)."""
    try:
        return store_state(store)["attempts"] if store.exists() else 0
    except sqlite3.Error:
        return 0


# -- a real `infbench run` process -------------------------------------------------------
def signal_subprocess(store_path: Path, signum: int, delay_s: float, home: Path, after_cells: int = 0,
                      args: list[str] | None = None) -> dict[str, Any]:
    """Start ``infbench run --json`` on ``args`` (default :data:`SLOW_SWEEP`), wait until
    ``after_cells`` cell attempts are stored (0: from the start), then ``delay_s`` seconds,
    send ``signum``, and report its exit status (``sent``: whether it was still running),
    what it said it kept and the store afterwards."""
    env = {**os.environ, "INFBENCH_HOME": str(home)}
    p = subprocess.Popen([sys.executable, "-m", "infbench.cli", "run", *(args or SLOW_SWEEP), "--store",
                          str(store_path), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    if after_cells:
        wait_for(lambda: p.poll() is not None or attempts(store_path) >= after_cells, 300, 0.01)
    time.sleep(delay_s)
    sent = p.poll() is None
    if sent:
        p.send_signal(signum)
    out, errs = p.communicate(timeout=300)
    said = None
    try:
        said = json.loads(out) if out.strip() else None
    except ValueError:
        pass
    state = store_state(store_path) if store_path.exists() else None
    return {"code": p.returncode, "sent": sent, "said": said, "stderr": errs, "state": state}


def children_matching(pid: int, needle: str) -> list[int]:
    """Pids of the descendants of ``pid`` whose command line contains ``needle``."""
    import psutil

    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for c in kids:  # a short-lived child (a probe, a tracker) may be gone by now: skip it, not the rest
        try:
            if needle in " ".join(c.cmdline()) and c.status() != psutil.STATUS_ZOMBIE:
                out.append(c.pid)
        except psutil.Error:
            pass
    return out


def processes_matching(needle: str) -> list[int]:
    """Pids of all live processes whose command line contains ``needle``."""
    import psutil

    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if needle in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def wait_for(cond: Any, timeout_s: float = 60.0, step_s: float = 0.1) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step_s)
    return bool(cond())


def kill_signal(name: str) -> int:
    return {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}[name]
