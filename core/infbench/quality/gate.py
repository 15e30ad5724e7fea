"""The perplexity gate: how much worse each precision is than the model's best one.

Perplexity's A100-vs-H100 study moved to fp8 and w8a8 only after WikiText perplexity
changed by less than 1 % from fp16, and rejected w4a16 at 7 %. ``--max-ppl-increase 1%``
applies that rule: among the stored measurements of one model's weights on one engine and one text
(same ``n_ctx`` and chunks), the baseline is the highest precision measured (fp32, then
fp16/bf16, fp8, int8, int4; or ``--baseline DTYPE``), and a precision whose perplexity
exceeds the baseline's by more than the gate is flagged.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from infbench.data.engine import precision_of
from infbench.data.errors import ConfigError
from infbench.quality.quantize import QUANT_TYPES

#: Precision classes from most to least precise (rank 0 is the preferred baseline).
PRECISION_ORDER = ("fp32", "fp16", "bf16", "fp8", "int8", "int4")


def parse_increase(text: str | float | None) -> float | None:
    """``"1%"`` -> 0.01; a bare number is a percentage too (``"0.5"`` -> 0.005).

    A gate is a finite, positive percentage (issue 33): ``nan`` and ``inf%`` would never
    fire, ``0`` or a negative one would flag every measurement.

    Raises:
        ConfigError: not a finite positive number or percentage.
    """
    if text is None or text == "":
        return None
    s = str(text).strip().removesuffix("%").strip()
    try:
        v = float(s)
    except ValueError:
        raise ConfigError(f"--max-ppl-increase {text!r} is not a percentage",
                          hint="e.g. --max-ppl-increase 1%") from None
    if not math.isfinite(v):
        raise ConfigError(f"--max-ppl-increase {text!r} is not a finite number; such a gate never fires",
                          hint="e.g. --max-ppl-increase 1%")
    if v <= 0:
        raise ConfigError(f"--max-ppl-increase {text!r} is {'zero' if v == 0 else 'negative'}; a gate is a positive "
                          "percentage", hint="e.g. --max-ppl-increase 1%")
    return v / 100.0


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def precision_class(dtype: str) -> str:
    """The precision class of an engine dtype (``q4_k_m`` -> ``int4``, ``float16`` -> ``fp16``);
    the dtype itself when unknown."""
    d = dtype.lower()
    if d in QUANT_TYPES:
        return QUANT_TYPES[d][1]
    return precision_of(d)


def _rank(dtype: str) -> int:
    p = precision_class(dtype)
    return PRECISION_ORDER.index(p) if p in PRECISION_ORDER else len(PRECISION_ORDER)


def group_key(row: dict[str, Any]) -> tuple:
    """Measurements compared with one another: the model's weights (their SHA-256, so two
    spellings of one file's path agree), engine, text, ``n_ctx``, chunk limit."""
    return (row.get("weights_sha256") or row["model"], row["engine"], row["text_sha256"], row["n_ctx"],
            row.get("max_chunks"))


def with_gate(rows: list[dict[str, Any]], max_increase: float | None = None,
              baseline: str | None = None) -> list[dict[str, Any]]:
    """Copies of the ok ``rows`` (:func:`infbench.store.quality.quality_results` items) with
    ``baseline_dtype``, ``ppl_increase`` (perplexity / baseline's - 1) and ``beyond_gate``
    (True/False, or None without a gate); failed rows pass through with None. A stored
    perplexity that is NaN or infinite is never a baseline and is beyond any gate.

    Args:
        rows: stored measurements.
        max_increase: the gate as a fraction (0.01 for 1 %), or None.
        baseline: the dtype to compare with (default: the highest precision in each group).
    """
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["status"] == "ok" and _finite(r.get("value")):
            groups[group_key(r)].append(r)
    base: dict[tuple, dict[str, Any]] = {}
    for k, rs in groups.items():
        pick = [r for r in rs if baseline and r["dtype"] == baseline.lower()]
        base[k] = pick[0] if pick else min(rs, key=lambda r: (_rank(r["dtype"]), r["value"]))
    out = []
    for r in rows:
        d = dict(r, baseline_dtype=None, ppl_increase=None, beyond_gate=None)
        b = base.get(group_key(r)) if r["status"] == "ok" else None
        if r["status"] == "ok" and r.get("value") is not None and not _finite(r["value"]):
            # a NaN or infinite perplexity (stored before issue 33 made it a failure) never passes a gate
            d["beyond_gate"] = True if max_increase is not None else None
        elif b is not None and r.get("value") is not None and b["value"]:
            d["baseline_dtype"] = b["dtype"]
            d["ppl_increase"] = r["value"] / b["value"] - 1.0
            if max_increase is not None:
                d["beyond_gate"] = d["ppl_increase"] > max_increase
        out.append(d)
    return out
