"""Constants shared by the tests of issue 22's one boundary for inputs, outputs and secrets
(tests/unit/*/: secret redaction, output escaping, published-CSV imports, traces)."""

from __future__ import annotations

from pathlib import Path

#: LLM-Inference-Bench's CSV with three devices (tests/fixtures).
FIXTURE_CSV = Path(__file__).parents[1] / "fixtures" / "lib_published_3dev.csv"
#: The header of a published CSV in LIB's layout, without the optional columns.
LIB_HEAD = "Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput\n"
#: A dry run of a serving cell that replays the trace named after it.
TRACE_RUN = ["run", "--engine", "llama.cpp-server", "--model", "tiny", "--dry-run", "--trace"]
