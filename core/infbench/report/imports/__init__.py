"""``infbench import`` of other tools' result files (issue 42): one module per format, each a
``read(path) -> (rows, info)`` that parses and checks the file
(:mod:`infbench.report.imports.common`), and the table of formats (:data:`FORMATS`).

LLM-Inference-Bench's CSV keeps its own reader (:mod:`infbench.report.lib_import`); the
mapping of every format's figures to infbench's definitions is the table in
docs/metrics.md ("Importing other tools' results").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infbench.report.imports import aiperf, guidellm, inference_perf, inferencex, mlperf, vllm_bench
from infbench.report.imports.common import ImportedRow


@dataclass(frozen=True)
class Format:
    """One importable format.

    Attributes:
        name: the ``--format`` value.
        tool: the tool that writes it (the source recorded by default).
        reader: ``read(path) -> (rows, info)``.
        what: what file to pass, for help and hints.
        url: where the tool lives.
    """

    name: str
    tool: str
    reader: Callable[[str | Path], tuple[list[ImportedRow], dict[str, Any]]]
    what: str
    url: str


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("vllm-bench", "vllm bench serve", vllm_bench.read,
           "the JSON `vllm bench serve --save-result` writes", "https://github.com/vllm-project/vllm"),
    Format("aiperf", "AIPerf", aiperf.read,
           "AIPerf's profile_export_aiperf.json or profile_export_aiperf.csv", "https://github.com/ai-dynamo/aiperf"),
    Format("guidellm", "guidellm", guidellm.read,
           "guidellm's benchmarks.json (`guidellm benchmark --output-path`)", "https://github.com/vllm-project/guidellm"),
    Format("inference-perf", "inference-perf", inference_perf.read,
           "an inference-perf report JSON (its summary_lifecycle_metrics.json or stage_N_lifecycle_metrics.json)",
           "https://github.com/kubernetes-sigs/inference-perf"),
    Format("inferencex", "InferenceX", inferencex.read,
           "InferenceX's result rows (the JSON its /api/v1/benchmarks serves)", "https://inferencex.semianalysis.com"),
    Format("mlperf", "MLPerf Inference", mlperf.read,
           "MLPerf Inference's summary.csv (an inference_results_vX.Y repository's root)",
           "https://github.com/mlcommons"),
)}
