"""Steady state, measured: warm-up blocks until the engine is stable, the step times of a timed
part, and the steady window of a serving cell (docs/metrics.md, "Steady state").

* :func:`warm_up` runs a cell's warm-up blocks (:func:`infbench.data.warmup.block_cell`) and
  returns its record: each block's TPOT median and core clock, the seconds, whether the engine
  settled (:func:`converged`) and why it warmed up as it did. The first cell after a model load
  and a cell after an idle gap warm up until stable; a cell that follows a settled cell of the
  same engine while the engine stayed busy carries that state (one block for an in-process
  engine, which also compiles its shape; a server sends the cell's own warm-up requests).
* :func:`step_times_s` and :func:`first_steps_tpot_ms` read a batch cell's decode steps, for
  the drift checks of :mod:`infbench.analysis.steady`.
* :func:`steady_window` finds the stretch of a serving cell during which its in-flight
  requests were at the target concurrency (vLLM's Rust bench), and :func:`window_metrics`
  computes throughput, TPOT, ITL and energy over exactly that stretch (ML.ENERGY measures
  energy only at steady state).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from infbench.data.engine import Engine
from infbench.data.schema import Cell, ChannelReading, RequestRecord
from infbench.data.warmup import (
    CLOCK_TOL,
    MIN_WINDOW_S,
    MIN_WINDOW_SHARE,
    STABLE_BLOCKS,
    WarmupPolicy,
)
from infbench.measure.derive import completed, summarize, tpot_s
from infbench.measure.power import PowerMonitor, PowerSampler

NS = 1e-9


def block_tpot_ms(records: Sequence[RequestRecord]) -> float | None:
    """The TPOT median of a block's completed requests, in ms (vLLM's per-request TPOT,
    :func:`infbench.measure.derive.tpot_s`), over the requests whose tokens arrived at two or
    more instants; None when there is none (non-streamed requests, one token)."""
    vals = [t for r in completed(records) if len(set(r.t_tokens_ns)) >= 2 and (t := tpot_s(r)) is not None and t > 0]
    return statistics.median(vals) * 1e3 if vals else None


def relative_spread(values: Sequence[float]) -> float:
    """``(max - min) / median`` of ``values`` (a fraction; 0 for one value).

    Raises:
        ValueError: no values, or a median of 0.
    """
    if not values:
        raise ValueError("no values")
    med = statistics.median(values)
    if med == 0:
        raise ValueError("median 0")
    return (max(values) - min(values)) / med


def converged(tpots_ms: Sequence[float | None], clocks_mhz: Sequence[float | None] | None, tol: float,
              clock_tol: float = CLOCK_TOL, n: int = STABLE_BLOCKS) -> tuple[bool, float | None]:
    """Whether the last ``n`` blocks agree: their TPOT medians within ``tol`` (relative
    spread, :func:`relative_spread`) and, where every one of them has a clock reading, their
    clock medians within ``clock_tol``.

    Args:
        tpots_ms: each block's TPOT median in ms, oldest first (None: not measurable).
        clocks_mhz: each block's core-clock median in MHz (None or a None entry: not read;
            the clock then does not take part).
        tol: TPOT tolerance (0.03 is 3 %).
        clock_tol: clock tolerance.
        n: blocks that must agree.

    Returns:
        ``(settled, spread)``: the TPOT spread of the last ``n`` blocks (None with fewer than
        ``n`` measurable blocks, which is never settled).
    """
    last = list(tpots_ms[-n:])
    if len(last) < n or any(t is None or t <= 0 for t in last):
        return False, None
    spread = relative_spread([float(t) for t in last if t is not None])
    ok = spread <= tol
    clocks = list(clocks_mhz[-n:]) if clocks_mhz is not None else []
    if ok and len(clocks) == n and all(c is not None and c > 0 for c in clocks):
        ok = relative_spread([float(c) for c in clocks if c is not None]) <= clock_tol
    return ok, spread


@dataclass
class WarmState:
    """What one engine session knows of its engine's warmth (one per loaded group).

    Attributes:
        loaded_at: ``time.perf_counter()`` when the engine finished loading.
        last_active: when the engine last ran (a block or a timed part); None: never yet.
        settled_at: when a cell's warm-up last settled (None: not yet, or not since an
            idle gap).
        settled_by: the label of that cell.
    """

    loaded_at: float
    last_active: float | None = None
    settled_at: float | None = None
    settled_by: str | None = None

    def ran(self, now: float | None = None) -> None:
        """The engine just ran (a block or a timed part ended)."""
        self.last_active = time.perf_counter() if now is None else now


def _clock_median(channels: list[ChannelReading], t0_ns: int, t1_ns: int) -> float | None:
    vals = [float(r.values["clock_mhz"]) for r in channels
            if t0_ns <= r.t_ns <= t1_ns and r.values.get("clock_mhz") is not None]
    return statistics.median(vals) if vals else None


def warm_up(engine: Engine, cell: Cell, prompts: list[Any], policy: WarmupPolicy, state: WarmState,
            device_kind: str, sampler: PowerSampler | None = None, interval_s: float = 0.1,
            clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Warm ``engine`` up for ``cell`` (module doc) and return the warm-up record.

    Modes (``record["mode"]``):

    * ``fixed``: ``cell.warmup`` is a number: exactly that many blocks (``--warmup N``;
      ``none`` for 0). With 3 or more, ``converged`` says whether the last three agree.
    * ``until-stable``: blocks until :func:`converged` or ``policy.max_for(device_kind)``
      seconds; for the first cell after a load, and for a cell that starts more than
      ``policy.rewarm_after_s`` after the engine last ran (``why`` gives the gap).
    * ``carried``: the engine settled in an earlier cell and has run since without an idle
      gap: one block for an in-process engine (it compiles or graph-captures its shape), none
      for a server cell (its own ``warmup_requests`` go first inside the timed run).

    Args:
        engine: the started engine (its ``warmup`` returns a block's records, or None when it
            cannot: stability is then unknown and one block is run).
        cell: the cell to warm up for.
        prompts: the cell's prompts (:meth:`~infbench.data.engine.Engine.make_prompts`).
        policy: tolerance and bounds.
        state: the session's :class:`WarmState` (updated).
        device_kind: ``cpu`` or the accelerator's kind (the default ceiling; the clock takes
            part only on accelerators).
        sampler: the device's sampler, read for ``clock_mhz`` during the blocks (None: no clock).
        interval_s: its reading interval (s).
        clock: seconds (tests pass a stand-in).

    Returns:
        ``{"mode", "why", "blocks": [{"tpot_ms", "clock_mhz", "s"}], "converged" (True,
        False, or None when unknown), "spread" (of the last three TPOTs), "seconds", "tol",
        "max_s"}``.

    Raises:
        Whatever the engine's warm-up raises (the cell then fails with it).
    """
    t_start = clock()
    max_s = policy.max_for(device_kind)
    idle = (t_start - state.last_active) if state.last_active is not None else None
    serving = cell.load is not None
    if cell.warmup is not None:
        mode, n_max, why = ("fixed" if cell.warmup else "none"), cell.warmup, f"--warmup {cell.warmup}"
    elif state.settled_at is not None and idle is not None and idle <= policy.rewarm_after_s:
        mode, n_max = "carried", (0 if serving else 1)
        why = (f"the engine settled in {state.settled_by} and ran {idle:.1f} s ago"
               + ("; the cell's own warm-up requests go first" if serving else "; one block compiles its shape"))
    else:
        mode, n_max = "until-stable", None
        if state.last_active is None:
            why = "the first cell since the engine loaded"
        elif idle is not None and idle > policy.rewarm_after_s:
            why = f"the engine was idle {idle:.0f} s (more than {policy.rewarm_after_s:g} s)"
        else:
            why = "the engine has not settled yet (an earlier warm-up did not converge)"
    record: dict[str, Any] = {"mode": mode, "why": why, "blocks": [], "converged": None, "spread": None,
                              "seconds": 0.0, "tol": policy.tol, "max_s": max_s}
    read_clock = sampler is not None and device_kind != "cpu"
    monitor = PowerMonitor(sampler, interval_s) if read_clock and sampler is not None else None
    if monitor is not None:
        monitor.start()
    tpots: list[float | None] = []
    clocks: list[float | None] = []
    try:
        while n_max is None or len(record["blocks"]) < n_max:
            b0, b0_ns = clock(), time.perf_counter_ns()
            out = engine.warmup(cell, prompts)
            b1, b1_ns = clock(), time.perf_counter_ns()
            state.ran(b1)
            tpot = block_tpot_ms(out.records) if out is not None else None
            mhz = _clock_median(list(monitor.channels), b0_ns, b1_ns) if monitor is not None else None
            tpots.append(tpot)
            clocks.append(mhz)
            record["blocks"].append({"tpot_ms": None if tpot is None else round(tpot, 4),
                                     "clock_mhz": None if mhz is None else round(mhz, 1), "s": round(b1 - b0, 4)})
            if out is None or tpot is None:
                if n_max is None:  # nothing to judge: one block, as a fixed warm-up of 1
                    record["why"] += ("; the engine's warm-up returns no records, so its stability is unknown"
                                      if out is None else "; its blocks have no decode step to time")
                    break
                continue
            if n_max is None:
                settled, spread = converged(tpots, clocks, policy.tol)
                record["spread"] = spread
                if settled:
                    record["converged"] = True
                    break
                if clock() - t_start >= max_s:
                    record["converged"] = False
                    break
    finally:
        if monitor is not None:
            monitor.stop()
    if mode == "fixed" and len(tpots) >= STABLE_BLOCKS:
        record["converged"], record["spread"] = converged(tpots, clocks, policy.tol)
    elif mode == "carried":
        record["converged"] = True
    if record["spread"] is not None:
        record["spread"] = round(record["spread"], 5)
    record["seconds"] = round(clock() - t_start, 4)
    if record["converged"] and mode in ("until-stable", "fixed"):
        state.settled_at, state.settled_by = clock(), cell.label()
    return record


def step_times_s(records: Sequence[RequestRecord]) -> list[float]:
    """A batch cell's decode-step times in s: for each step ``i >= 1``, the median over the
    completed requests of ``t_tokens[i] - t_tokens[i-1]`` (in batch mode every request of the
    batch advances one token per step). Requests shorter than the longest are left out of
    the steps they did not reach."""
    done = [r.t_tokens_ns for r in completed(records) if len(r.t_tokens_ns) >= 2]
    if not done:
        return []
    n = max(len(t) for t in done)
    out = []
    for i in range(1, n):
        vals = [(t[i] - t[i - 1]) * NS for t in done if len(t) > i]
        out.append(statistics.median(vals))
    return out


def first_steps_tpot_ms(records: Sequence[RequestRecord], steps: int) -> float | None:
    """The mean time of a batch cell's first ``steps`` decode steps, in ms: what a warm-up
    block of ``steps + 1`` output tokens measures of the same cell (the sentinel's reference);
    None without a decode step."""
    s = step_times_s(records)[:steps]
    return sum(s) / len(s) * 1e3 if s else None


def steady_window(records: Sequence[RequestRecord], target: int) -> tuple[int, int, int] | None:
    """The steady-state window of a serving cell: from when its in-flight requests first
    reach ``target`` until they last fall below it (vLLM's Rust bench,
    ``benchmarks/vllm-bench`` steady-state window; a request is in flight from ``t_send`` to
    its last token, or its failure).

    Args:
        records: the timed requests.
        target: the concurrency aimed at (the load's ``concurrency``).

    Returns:
        ``(t0_ns, t1_ns, peak)`` on the ``perf_counter_ns`` clock, or None when the in-flight
        count never reached ``target`` (``peak`` is then not returned: see
        :func:`peak_in_flight`).
    """
    events: list[tuple[int, int]] = []
    for r in records:
        end = r.t_tokens_ns[-1] if r.t_tokens_ns else None
        if end is None:
            continue
        events.append((r.t_send_ns, 1))
        events.append((end, -1))
    events.sort(key=lambda e: (e[0], e[1]))   # an end before a send at the same instant
    n, t0, t1, peak = 0, None, None, 0
    for t, d in events:
        before = n
        n += d
        peak = max(peak, n)
        if t0 is None and n >= target:
            t0 = t
        if t0 is not None and before >= target > n:
            t1 = t
    if t0 is None or t1 is None or t1 <= t0:
        return None
    return t0, t1, peak


def peak_in_flight(records: Sequence[RequestRecord]) -> int:
    """The most requests in flight at once (send to last token) over ``records``."""
    events = sorted([(r.t_send_ns, 1) for r in records if r.t_tokens_ns]
                    + [(r.t_tokens_ns[-1], -1) for r in records if r.t_tokens_ns], key=lambda e: (e[0], e[1]))
    n = peak = 0
    for _, d in events:
        n += d
        peak = max(peak, n)
    return peak


def window_metrics(records: Sequence[RequestRecord], window: tuple[int, int], run_s: float,
                   energy: Callable[[tuple[int, int]], tuple[float | None, str | None]] | None = None
                   ) -> dict[str, Any]:
    """Throughput, TPOT, ITL and energy over a serving cell's steady window (module doc).

    Definitions (docs/metrics.md, "Steady state"), with ``W = t1 - t0``:

    * ``output_tok_s``: output tokens that arrived inside the window / W;
    * ``total_tok_s``: (prompt tokens of the requests whose first token arrived inside the
      window + those output tokens) / W;
    * ``request_s``: requests whose last token arrived inside the window / W;
    * ``tpot_s``: the TPOT of the requests whose whole decode (first to last token) lies
      inside the window; ``itl_s``: the inter-token gaps whose both tokens lie inside it;
    * ``energy_j`` over exactly ``[t0, t1]`` (ML.ENERGY), ``avg_power_w = energy_j / W``,
      ``tokens_per_j`` and ``output_tokens_per_j`` over the same tokens.

    Args:
        records: the timed requests.
        window: ``(t0_ns, t1_ns)`` (:func:`steady_window`).
        run_s: the whole timed part's duration (s), for the window's share.
        energy: ``monitor.energy`` of the cell's power monitor (None: no energy).

    Returns:
        The window's figures, with ``duration_s``, ``share`` (of ``run_s``) and ``warning``
        when it is shorter than max(:data:`MIN_WINDOW_S`, :data:`MIN_WINDOW_SHARE` x the run).
    """
    t0, t1 = window
    w = (t1 - t0) * NS
    done = completed(records)
    out_tokens = sum(1 for r in done for t in r.t_tokens_ns if t0 <= t <= t1)
    in_tokens = sum(r.n_in for r in done if t0 <= r.t_tokens_ns[0] <= t1)
    finished = sum(1 for r in done if t0 <= r.t_tokens_ns[-1] <= t1)
    tpots = [v for r in done if t0 <= r.t_tokens_ns[0] and r.t_tokens_ns[-1] <= t1
             and (v := tpot_s(r)) is not None]
    itls = [(b - a) * NS for r in done for a, b in zip(r.t_tokens_ns, r.t_tokens_ns[1:], strict=False)
            if t0 <= a and b <= t1]
    m: dict[str, Any] = {"t0_ns": t0, "t1_ns": t1, "duration_s": round(w, 6),
                         "share": round(w / run_s, 4) if run_s > 0 else None,
                         "output_tok_s": out_tokens / w if w > 0 else None,
                         "total_tok_s": (in_tokens + out_tokens) / w if w > 0 else None,
                         "request_s": finished / w if w > 0 else None,
                         "tpot_s": summarize(tpots), "itl_s": summarize(itls),
                         "n_out_in_window": out_tokens, "n_in_in_window": in_tokens}
    if energy is not None:
        e, note = energy((t0, t1))
        if e is not None and e > 0:
            m.update(energy_j=e, avg_power_w=e / w if w > 0 else None, tokens_per_j=(in_tokens + out_tokens) / e,
                     output_tokens_per_j=out_tokens / e)
        elif note:
            m["energy_note"] = note
    need = max(MIN_WINDOW_S, MIN_WINDOW_SHARE * run_s)
    if w < need:
        m["warning"] = (f"the steady window is {w:.1f} s, shorter than max({MIN_WINDOW_S:g} s, "
                        f"{MIN_WINDOW_SHARE:.0%} of the {run_s:.1f} s run): its figures rest on few requests "
                        "(more --num-requests or a longer --duration widens it)")
    return m
