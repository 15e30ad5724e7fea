"""A perplexity measurement as stored (:mod:`infbench.store.quality`) and its identity;
the method is in :mod:`infbench.quality.perplexity`."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field, model_validator

from infbench.data.schema import short_hash


class PerplexityResult(BaseModel):
    """One perplexity measurement, as stored (:mod:`infbench.store.quality`).

    Attributes:
        model: the model as given (``.gguf`` path, HF folder).
        weights_sha256: SHA-256 of that model's weights (file, or folder's weight files).
        engine, dtype: the engine and its dtype (a derived precision for llama.cpp).
        text_path, text_sha256: the scored text and the SHA-256 of its bytes.
        n_ctx: tokens per chunk. max_chunks: the ``--chunks`` limit (None: all).
        n_chunks: chunks scored. n_tokens: tokens scored (``n_chunks * (n_ctx - n_ctx//2 - 1)``).
        n_text_tokens: tokens in the whole text. add_bos: BOS put first in each chunk.
        tokenizer: what tokenized the text (:func:`tokenizer_source`).
        tokens_sha256: SHA-256 of the scored chunks' token ids (int32, BOS included):
            equal on two engines means they scored the very same ids.
        perplexity: exp(mean NLL). stderr: llama.cpp's uncertainty of it (module doc).
        nll_mean, nll_std: mean and standard deviation of the per-token NLL (nats).
        chunk_perplexity: perplexity of each chunk alone.
        status, error: ``ok`` or ``failed`` with the error.
        device: the device group (``DeviceInfo``). engine_info: the adapter's ``describe()``.
        weights: what was loaded (:func:`~infbench.quality.sample.weights_record`).
        wall_s: seconds spent scoring (load excluded); load_s: seconds loading the model.
        started_at, finished_at: UNIX times (s).
    """

    model: str
    weights_sha256: str
    engine: str
    dtype: str
    text_path: str
    text_sha256: str
    n_ctx: int
    max_chunks: int | None = None
    n_chunks: int = 0
    n_tokens: int = 0
    n_text_tokens: int = 0
    add_bos: bool = False
    tokenizer: str | None = None
    tokens_sha256: str | None = None
    perplexity: float | None = None
    stderr: float | None = None
    nll_mean: float | None = None
    nll_std: float | None = None
    chunk_perplexity: list[float] = Field(default_factory=list)
    status: str = "ok"
    error: str | None = None
    device: dict[str, Any] = Field(default_factory=dict)
    engine_info: dict[str, Any] = Field(default_factory=dict)
    weights: dict[str, Any] = Field(default_factory=dict)
    wall_s: float | None = None
    load_s: float | None = None
    started_at: float = 0.0
    finished_at: float = 0.0

    @model_validator(mode="after")
    def _finite_or_failed(self) -> PerplexityResult:
        """An ok result whose perplexity, stderr or NLL is NaN or infinite (issue 33), or
        whose perplexity is below 1 or NLL below 0 (issue 41), is a failed one, from
        whatever source (a worker's quality.jsonl, an older writer, the journal)."""
        values = {k: getattr(self, k) for k in ("perplexity", "stderr", "nll_mean", "nll_std")}
        bad = [k for k, v in values.items() if v is not None and not math.isfinite(v)]
        bad += ["chunk_perplexity"] if any(not math.isfinite(v) for v in self.chunk_perplexity) else []
        if bad and self.status == "ok":
            self.status = "failed"
            self.error = (f"perplexity is {self.perplexity} (non-finite {', '.join(bad)}): NaN or infinite "
                          "log-probabilities are no measurement")
        if bad:
            for k in bad:
                setattr(self, k, [] if k == "chunk_perplexity" else None)
        # perplexity = exp(mean NLL) with NLL >= 0: below 1 (or a negative NLL or stderr) no model can score (issue 41)
        pairs = [("perplexity", self.perplexity), *(("chunk_perplexity", c) for c in self.chunk_perplexity)]
        low = [k for k, v in pairs if v is not None and v < 1]
        low += [k for k in ("nll_mean", "stderr", "nll_std") if (getattr(self, k) or 0) < 0]
        if low and self.status == "ok":
            self.status = "failed"
            self.error = (f"perplexity {self.perplexity} is impossible ({', '.join(dict.fromkeys(low))} below its "
                          "floor: perplexity = exp(mean NLL) is at least 1, NLL and its spread at least 0)")
        return self

    def key(self) -> str:
        """:func:`quality_key` of this result."""
        return quality_key(self.model, self.weights_sha256, self.engine, self.dtype, self.text_sha256, self.n_ctx,
                           self.max_chunks)


def quality_key(model: str, weights_sha256: str, engine: str, dtype: str, text_sha256: str, n_ctx: int,
                max_chunks: int | None) -> str:
    """16-hex-digit identity of a measurement: model and its weights' hash, engine, dtype,
    text hash, ``n_ctx`` and the chunk limit (the last changes which tokens are scored)."""
    return short_hash({"model": model, "weights_sha256": weights_sha256, "engine": engine, "dtype": dtype,
                       "text_sha256": text_sha256, "n_ctx": n_ctx, "max_chunks": max_chunks})
