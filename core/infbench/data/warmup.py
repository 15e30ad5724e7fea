"""The warm-up's rules as data: what one warm-up block is, when warm-up stops, and the bounds
(docs/metrics.md, "Steady state").

A cell warms up in **blocks** before its timed part. A block is the cell's own work with the
output shortened to :data:`BLOCK_OUTPUT_TOKENS` (the step time of the first decode steps is
the cell's, at a fraction of the cost): in batch mode one pass of the cell's batch; in
serving mode ``2 x concurrency`` requests (InferenceX's warm-up, ``benchmark_lib.sh``) at the
cell's concurrency. By default the blocks go on until the engine is stable: the last
:data:`STABLE_BLOCKS` blocks' TPOT medians agree within ``tol`` (3 %, ``--warmup-tol``) and,
on an accelerator whose sampler reads its core clock, their clock medians within
:data:`CLOCK_TOL`; at most ``max_s`` seconds (:func:`default_warmup_max_s`). ``--warmup N``
runs exactly N blocks instead.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from infbench.data.schema import Cell, Load

#: Output tokens of one warm-up block: 15 decode steps give a TPOT median that a 3 %
#: tolerance can judge, and the block stays a small share of the cell (64-1024 tokens).
BLOCK_OUTPUT_TOKENS = 16
#: Blocks whose TPOT medians must agree for the warm-up to stop.
STABLE_BLOCKS = 3
#: Default tolerance of that agreement: (max - min) / median of the last blocks' TPOT.
DEFAULT_WARMUP_TOL = 0.03
#: Tolerance of the blocks' core-clock medians (accelerators whose sampler reads ``clock_mhz``).
CLOCK_TOL = 0.02
#: A cell that starts this long (s) after the engine last ran is warmed until stable again.
#: 60 s: well past the seconds a cell's bookkeeping takes between cells, short of the
#: ~30 min after which a warm state is known to decay (model-serving-minefield #37), and
#: long enough that an idle GPU has dropped its clocks (NVML shows the H100 at idle clocks
#: within seconds of its last kernel).
DEFAULT_REWARM_AFTER_S = 60.0
#: Drift between the first and last thirds of a timed part, and between a cell and its
#: sentinel, beyond which the cell is flagged (``unsteady``, ``drift``).
DRIFT_TOL = 0.10
#: The fewest decode steps a cell's sentinel compares (its first ``min(output_len, 16) - 1``; in
#: serving mode, the steps each request's TPOT averages):
#: below, a few scheduler ticks move the mean by more than :data:`DRIFT_TOL` and the comparison
#: would measure the OS, not the host's state; the sentinel is then skipped with that reason.
MIN_SENTINEL_STEPS = 8
#: Coefficient of variation across ``--repeat`` beyond which the repeats are ``unsteady``.
REPEAT_CV_TOL = 0.10
#: A serving cell's steady window shorter than max(this, :data:`MIN_WINDOW_SHARE` x the
#: run) is stored with a warning (vLLM's Rust bench's rule).
MIN_WINDOW_S = 10.0
#: ... the share of the run.
MIN_WINDOW_SHARE = 0.10


def default_warmup_max_s(device_kind: str) -> float:
    """The default ceiling of a cell's warm-up, in s, by device kind.

    * ``cpu``: 30 s. A CPU engine has no graph capture or JIT of note (llama.cpp, transformers
      eager); its blocks take 0.2-3 s here, so 30 s is ten or more blocks.
    * accelerators: 120 s. A fresh vLLM worker spends about 42 s in CUDA-graph capture and JIT
      (NVIDIA aicr #1096, #1196), and the H100's slow stretch after a model load lasted 20-40 s
      (docs/hardware-runs.md): both must fit, with blocks to spare.
    """
    return 30.0 if device_kind == "cpu" else 120.0


class WarmupPolicy(BaseModel):
    """How a run warms its cells up (not part of any cell's identity).

    Attributes:
        tol: relative spread allowed between the last :data:`STABLE_BLOCKS` blocks' TPOT
            medians (``--warmup-tol``; default 3 %).
        max_s: seconds of warm-up at most per cell (``--warmup-max-s``); None: by device kind
            (:func:`default_warmup_max_s`).
        rewarm_after_s: a cell starting this long after the engine last ran is warmed until
            stable again (``--rewarm-after-s``; default :data:`DEFAULT_REWARM_AFTER_S`).
        remeasure: measure again, as a new attempt, the cells of a group whose sentinel shows
            they ran while the host was slower (``--no-remeasure``: flag them only).
        remeasure_budget_s: seconds the remeasurements of one group may take; None: as long as
            the group's own cells took, at least 60 s (a drifting group costs at most about twice
            its time).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tol: float = Field(DEFAULT_WARMUP_TOL, gt=0, lt=1, allow_inf_nan=False)
    max_s: float | None = Field(None, gt=0, le=1e6, allow_inf_nan=False)
    rewarm_after_s: float = Field(DEFAULT_REWARM_AFTER_S, ge=0, le=1e7, allow_inf_nan=False)
    remeasure: bool = True
    remeasure_budget_s: float | None = Field(None, ge=0, le=1e7, allow_inf_nan=False)

    def max_for(self, device_kind: str) -> float:
        """The warm-up ceiling for a device of ``device_kind`` (s)."""
        return self.max_s if self.max_s is not None else default_warmup_max_s(device_kind)


def block_cell(cell: Cell) -> Cell:
    """The cell one warm-up block runs (module doc): ``cell`` with its output shortened to
    :data:`BLOCK_OUTPUT_TOKENS` (at least 2, so a block has a decode step; a 1-token cell
    keeps 1) and, in serving mode, a load of its own with no warm-up requests:

    * batch: the cell's batch;
    * concurrency: ``2 x concurrency`` requests at that concurrency;
    * rate: ``clamp(ceil(2 x rate), 4, 64)`` requests at that rate (about 2 s of arrivals);
    * trace or dataset: synthetic prompts of the cell's mean lengths, ``2 x c`` requests at
      concurrency ``c`` (the trace's cap, else 4): a block measures the engine, not the trace.

    Its spec hash differs from the cell's, so a server's synthetic block prompts share no
    prefix with the timed ones (:func:`infbench.engines.openai.cell_prompt_seed`).
    """
    out = cell.output_len if cell.output_len < 2 else min(cell.output_len, BLOCK_OUTPUT_TOKENS)
    update: dict[str, object] = {"output_len": out, "len_range": None, "len_range_convention": None}
    load = cell.load
    if load is not None:
        if load.mode == "batch":
            new = Load(mode="batch", timeout_s=load.timeout_s, stream=load.stream)
        elif load.mode == "rate" and load.request_rate is not None and cell.trace is None and cell.dataset is None:
            n = max(4, min(64, math.ceil(2 * load.request_rate)))
            new = Load(mode="rate", request_rate=load.request_rate, burstiness=load.burstiness, num_requests=n,
                       concurrency=load.concurrency, timeout_s=load.timeout_s, stream=load.stream)
        else:
            c = load.concurrency or 4
            new = Load(mode="concurrency", concurrency=c, num_requests=2 * c, timeout_s=load.timeout_s,
                       stream=load.stream)
        update.update(load=new, trace=None, dataset=None)
    return cell.model_copy(update=update)
