"""Perplexity the way llama.cpp's ``llama-perplexity`` computes it, on llama.cpp,
transformers and vLLM.

The method (llama.cpp ``tools/perplexity/perplexity.cpp``, ``perplexity()``, the default
``--ppl-stride 0`` path):

1. Tokenize the whole text (one trailing newline dropped, as ``-f FILE`` reads it) once
   with the model's tokenizer, special tokens added as the model asks
   (``common_tokenize(ctx, text, add_special=true)``: BOS first where the vocabulary's
   ``add_bos`` is set; never EOS).
2. Refuse a text of fewer than ``2 * n_ctx`` tokens. Cut the tokens into
   ``n_chunk = len(tokens) // n_ctx`` non-overlapping chunks of ``n_ctx`` tokens (the
   tail is dropped; ``--chunks N`` keeps the first N).
3. In each chunk, where the model adds BOS, replace the first token by BOS; evaluate the
   chunk from an empty cache at positions ``0 .. n_ctx-1``.
4. Score the second half: for ``j = first .. n_ctx-2`` with ``first = n_ctx // 2``, the
   negative log-likelihood of token ``j+1`` under the softmax of the logits at ``j``
   (``n_ctx - first - 1`` tokens per chunk; 255 for ``n_ctx`` 512).
5. ``perplexity = exp(mean NLL)``; llama.cpp's uncertainty
   ``PPL * sqrt((mean(NLL^2) - mean(NLL)^2) / (count - 1))`` is :attr:`PerplexityResult.stderr`
   ("Final estimate: PPL = X +/- Y").

Per engine (:data:`SCORERS`), each on the model its adapter loaded:

* ``llama.cpp``: the C API (llama-cpp-python): ``llama_tokenize``, one ``llama_decode`` per
  chunk with logits requested for positions ``>= first``, ``llama_get_logits``;
* ``transformers``: the model's own loss (``model(input_ids, labels)`` with labels -100
  outside the scored half; the causal-LM loss shifts them by one, so it is the mean NLL
  of exactly the tokens above) for the perplexity, per-token cross-entropy of the same
  logits for the uncertainty;
* ``vllm``: ``SamplingParams(prompt_logprobs=0)`` on token-id prompts (the log-probability
  of each prompt token given the ones before it, from the raw logits).

Token ids: a GGUF model is tokenized by its own vocabulary through llama.cpp on every engine
(and so is a folder ``infbench quantize --to hf`` wrote from a GGUF), so all engines score
the same ids (``tokens_sha256``); transformers' conversion of a GGUF vocabulary does not
split text as llama.cpp does (SmolLM2 on CPython's LICENSE.txt: 3,822 tokens against
3,767). Any other Hugging Face folder uses its own tokenizer (BOS as it adds one).
Log-softmax is taken in float64 over float32 logits on every engine. Random (dummy)
weights are refused (:func:`~infbench.quality.weights.require_real_weights`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from infbench.contract.manager import get_plugin_manager
from infbench.contract.registry import engine_specs, require_engine
from infbench.data.errors import ConfigError, EngineUnavailable
from infbench.data.models import resolve
from infbench.data.scores import PerplexityResult, quality_key
from infbench.libs.llama import Batch, backend
from infbench.quality.quantize import HF_PROVENANCE
from infbench.quality.sample import hf_tokenizer
from infbench.quality.weights import require_real_weights

if TYPE_CHECKING:  # pragma: no cover
    from infbench.contract.manager import PluginManager

#: Engines that can score a text, and the dtype each uses when none is given (llama.cpp:
#: the GGUF's own type).
PERPLEXITY_ENGINES = ("llama.cpp", "transformers", "vllm")
DEFAULT_DTYPES = {"transformers": "float32", "vllm": "float32"}


# -- the method ----------------------------------------------------------------------------
def chunk_tokens(tokens: np.ndarray, n_ctx: int, bos_id: int | None, max_chunks: int | None = None) -> np.ndarray:
    """The chunks of step 2-3: shape ``(n_chunk, n_ctx)`` int32, BOS first in each when
    ``bos_id`` is not None.

    Raises:
        ConfigError: fewer than ``2 * n_ctx`` tokens (llama.cpp's own limit), ``n_ctx < 4``.
    """
    if n_ctx < 4:
        raise ConfigError(f"--n-ctx {n_ctx} is too small", hint="use at least 4 (llama-perplexity uses 512)")
    t = np.asarray(tokens, dtype=np.int32)
    if t.size < 2 * n_ctx:
        raise ConfigError(f"the text tokenizes to {t.size} tokens; perplexity with a context of {n_ctx} needs at "
                          f"least {2 * n_ctx}", hint=f"use a longer text or --n-ctx {max(4, t.size // 2)}")
    n = t.size // n_ctx
    if max_chunks is not None:
        n = min(n, max_chunks)
    chunks = t[:n * n_ctx].reshape(n, n_ctx).copy()
    if bos_id is not None:
        chunks[:, 0] = bos_id
    return chunks


def first_scored(n_ctx: int) -> int:
    """``first = n_ctx // 2``: logits at positions ``first .. n_ctx-2`` are scored."""
    return n_ctx // 2


#: Rows of logits :func:`nll_from_logits` converts to float64 at a time: 16 rows of a 49,152-token
#: vocabulary are 6 MiB, reused from block to block.
NLL_BLOCK_ROWS = 16


def nll_from_logits(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per-row negative log-likelihood ``logsumexp(logits) - logits[target]`` in float64.

    Computed :data:`NLL_BLOCK_ROWS` rows at a time in one reused float64 buffer, each row
    exactly as over the whole array. Over the whole array at once, a 512-token chunk of a
    49,152-token vocabulary made three 100 MB temporaries that the allocator maps and unmaps
    each time: in llama.cpp's engine process their page faults took 0.7-1.3 s of system time
    per chunk, a third of ``infbench perplexity``'s time (a 2.3 s decode per chunk on one core).

    Args:
        logits: ``(k, n_vocab)``. targets: ``(k,)`` token ids.

    Returns:
        ``(k,)`` float64, in nats.
    """
    x = np.asarray(logits)
    t = np.asarray(targets)
    out = np.empty(x.shape[0], np.float64)
    buf = np.empty((min(NLL_BLOCK_ROWS, x.shape[0]), x.shape[1]), np.float64)
    for i in range(0, x.shape[0], NLL_BLOCK_ROWS):
        rows = x[i:i + NLL_BLOCK_ROWS]
        b = buf[:rows.shape[0]]
        np.copyto(b, rows)
        m = b.max(axis=1)
        target = b[np.arange(rows.shape[0]), t[i:i + NLL_BLOCK_ROWS]]
        b -= m[:, None]
        np.exp(b, out=b)
        out[i:i + rows.shape[0]] = m + np.log(b.sum(axis=1)) - target
    return out


def summarize(nll: np.ndarray) -> dict[str, float]:
    """``{"perplexity", "stderr", "nll_mean", "nll_std", "n_tokens"}`` of per-token NLLs,
    with llama.cpp's uncertainty (module doc, step 5).

    Raises:
        ValueError: fewer than 2 values.
    """
    v = np.asarray(nll, dtype=np.float64)
    if v.size < 2:
        raise ValueError("need at least 2 scored tokens")
    mean = float(v.mean())
    var = float((v * v).mean() - mean * mean)
    ppl = math.exp(mean)
    err = ppl * math.sqrt(var / (v.size - 1)) if var > 0 else 0.0
    return {"perplexity": ppl, "stderr": err, "nll_mean": mean, "nll_std": math.sqrt(max(var, 0.0)),
            "n_tokens": int(v.size)}


# -- scorers -------------------------------------------------------------------------------
class Scorer(ABC):
    """Tokenizes a text and scores chunks on an engine adapter that has loaded a model.

    Args:
        engine: the started adapter.
        n_ctx: tokens per chunk.
        model: the :class:`~infbench.data.models.ModelShape` it loaded (its path has the tokenizer).
        gguf_vocab: a GGUF whose vocabulary (through llama.cpp) tokenizes the text instead
            of the engine's own tokenizer (:func:`tokenizer_source`), so every engine scores
            the same ids; None: the engine's tokenizer.
    """

    def __init__(self, engine: Any, n_ctx: int, model: Any = None, gguf_vocab: str | None = None):
        self.engine = engine
        self.n_ctx = n_ctx
        self.model = model
        self.gguf_vocab = gguf_vocab

    @abstractmethod
    def tokenize(self, text: str) -> tuple[np.ndarray, int | None]:
        """``(token ids with BOS first where the model adds one, BOS id or None)``."""

    @abstractmethod
    def chunk_nll(self, chunks: np.ndarray, first: int) -> tuple[list[np.ndarray], list[float] | None]:
        """Per chunk, the NLLs of tokens ``first+1 .. n_ctx-1`` (shape ``(n_ctx-first-1,)``),
        and per chunk the engine's own mean loss where it reports one (else None)."""

    def close(self) -> None:  # noqa: B027 - optional hook: most scorers hold nothing of their own
        """Free what the scorer created (not the engine)."""


def llama_tokenize_text(L: Any, vocab: Any, text: str) -> tuple[np.ndarray, int | None]:
    """``common_tokenize(ctx, text, add_special=true, parse_special=false)`` through the C
    API: ``(ids, BOS id if the vocabulary adds one else None)``."""
    b = text.encode("utf-8")
    need = -L.llama_tokenize(vocab, b, len(b), None, 0, True, False)
    buf = (L.llama_token * max(need, 1))()
    n = L.llama_tokenize(vocab, b, len(b), buf, max(need, 1), True, False)
    if n < 0:
        raise RuntimeError(f"llama_tokenize failed ({n})")
    ids = np.ctypeslib.as_array(buf)[:n].astype(np.int32)
    bos = int(L.llama_vocab_bos(vocab)) if L.llama_vocab_get_add_bos(vocab) else None
    return ids, bos


def gguf_tokenize(path: str | Path, text: str) -> tuple[np.ndarray, int | None]:
    """Tokenize with a GGUF's own vocabulary as llama.cpp implements it (the model loaded
    ``vocab_only``): the reference tokenization of a GGUF model on every engine.

    Raises:
        ConfigError: llama.cpp cannot read the file's vocabulary.
    """
    import llama_cpp as L


    backend(L)  # llama.cpp's log to Python logging, as the engine sets it up
    mp = L.llama_model_default_params()
    mp.vocab_only = True
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        raise ConfigError(f"llama.cpp could not read the vocabulary of {path}")
    try:
        return llama_tokenize_text(L, L.llama_model_get_vocab(model), text)
    finally:
        L.llama_model_free(model)


def tokenizer_source(weights: Any) -> str | None:
    """The GGUF whose vocabulary tokenizes the text for any engine: the model itself when it
    is a GGUF; for a folder written by ``infbench quantize --to hf``, its parent GGUF (the
    same model: transformers' conversion of a GGUF vocabulary need not split text as
    llama.cpp does); None for other folders (their own Hugging Face tokenizer)."""

    if weights.format == "gguf":
        return weights.path
    side = Path(weights.path or "") / HF_PROVENANCE
    if weights.format == "hf" and side.is_file():
        parent = json.loads(side.read_text()).get("parent")
        if parent and Path(parent).is_file():
            return parent
    return None


class LlamaCppScorer(Scorer):
    """llama.cpp through the C API (one sequence, ``n_batch = n_ctx``)."""

    def __init__(self, engine: Any, n_ctx: int, model: Any = None, gguf_vocab: str | None = None):
        super().__init__(engine, n_ctx, model, gguf_vocab)

        L = engine.L
        self.L = L
        self.vocab = L.llama_model_get_vocab(engine.model)
        cp = L.llama_context_default_params()
        cp.n_ctx = cp.n_batch = n_ctx
        cp.n_ubatch = min(n_ctx, int(getattr(engine.options, "n_ubatch", 512)))
        cp.n_seq_max = 1
        cp.n_threads = cp.n_threads_batch = engine.threads
        self.ctx = L.llama_init_from_model(engine.model, cp)
        if not self.ctx:
            raise MemoryError(f"llama.cpp could not create a context of {n_ctx} tokens")
        self.batch = Batch(L, n_ctx)

    def tokenize(self, text: str) -> tuple[np.ndarray, int | None]:
        return llama_tokenize_text(self.L, self.vocab, text)

    def chunk_nll(self, chunks: np.ndarray, first: int) -> tuple[list[np.ndarray], list[float] | None]:
        L, n_ctx = self.L, self.n_ctx
        n_vocab = self.engine.n_vocab
        out = []
        pos = np.arange(n_ctx, dtype=np.int32)
        seq = np.zeros(n_ctx, np.int32)
        want = (pos >= first).astype(np.int8)
        for chunk in chunks:
            L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
            self.batch.fill(chunk, pos, seq, want)
            rc = L.llama_decode(self.ctx, self.batch.batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            logits = np.ctypeslib.as_array(L.llama_get_logits(self.ctx), shape=(n_ctx - first, n_vocab))
            out.append(nll_from_logits(logits[:-1], chunk[first + 1:]))
        return out, None

    def close(self) -> None:
        if self.ctx is not None:
            self.L.llama_free(self.ctx)
            self.ctx = None


def hf_tokenize(tokenizer: Any, text: str) -> tuple[np.ndarray, int | None]:
    """A Hugging Face tokenizer's ids for ``text`` with BOS first when the tokenizer adds
    one (as llama.cpp's ``add_bos``): special tokens of the text are not parsed, no EOS."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    bos = tokenizer.bos_token_id
    probe = tokenizer.encode("a", add_special_tokens=True)
    adds_bos = bos is not None and len(probe) > 0 and probe[0] == bos
    if adds_bos:
        ids = [bos, *ids]
    return np.asarray(ids, dtype=np.int32), (bos if adds_bos else None)


class TransformersScorer(Scorer):
    """transformers: the model's loss per chunk (module doc), on the adapter's device."""

    def tokenize(self, text: str) -> tuple[np.ndarray, int | None]:
        if self.gguf_vocab:
            return gguf_tokenize(self.gguf_vocab, text)
        return hf_tokenize(hf_tokenizer(self.model.path), text)

    def chunk_nll(self, chunks: np.ndarray, first: int) -> tuple[list[np.ndarray], list[float] | None]:
        torch = self.engine.torch
        model, dev = self.engine.model, self.engine.dev
        out, losses = [], []
        with torch.inference_mode():
            for chunk in chunks:
                ids = torch.tensor(chunk[None, :], dtype=torch.long, device=dev)
                labels = ids.clone()
                labels[:, :first + 1] = -100
                res = model(input_ids=ids, labels=labels)
                logits = res.logits[0, first:self.n_ctx - 1].float()
                nll = torch.nn.functional.cross_entropy(logits.double(), ids[0, first + 1:], reduction="none")
                out.append(nll.cpu().numpy())
                losses.append(float(res.loss))
        return out, losses


class VllmScorer(Scorer):
    """vLLM: ``prompt_logprobs=0`` on the chunks as token-id prompts, all submitted together."""

    def tokenize(self, text: str) -> tuple[np.ndarray, int | None]:
        if self.gguf_vocab:
            return gguf_tokenize(self.gguf_vocab, text)
        return hf_tokenize(self.engine.llm.get_tokenizer(), text)

    def chunk_nll(self, chunks: np.ndarray, first: int) -> tuple[list[np.ndarray], list[float] | None]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        sp = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        outs = self.engine.llm.generate([TokensPrompt(prompt_token_ids=[int(t) for t in c]) for c in chunks], sp,
                                        use_tqdm=False)
        res = []
        for chunk, o in zip(chunks, outs):
            pl = o.prompt_logprobs
            res.append(np.array([-pl[j][int(chunk[j])].logprob for j in range(first + 1, self.n_ctx)],
                                dtype=np.float64))
        return res, None


#: Engine name -> scorer class.
SCORERS: dict[str, type[Scorer]] = {"llama.cpp": LlamaCppScorer, "transformers": TransformersScorer,
                                    "vllm": VllmScorer}


# -- the measurement -------------------------------------------------------------------------
def read_text(path: str | Path) -> tuple[str, str]:
    """``(text, sha256 of the file's bytes)``; one trailing newline is dropped from the text,
    as llama.cpp's ``-f FILE`` does (``common/arg.cpp``).

    Raises:
        ConfigError: missing file or not UTF-8.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"text file {p} not found", hint="pass a plain-text file to --text (e.g. WikiText-2 test)")
    raw = p.read_bytes()
    try:
        return raw.decode("utf-8").removesuffix("\n"), hashlib.sha256(raw).hexdigest()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p} is not UTF-8 text ({exc})") from None


def score_text(scorer: Scorer, text: str, n_ctx: int, max_chunks: int | None = None,
               on_chunks: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Steps 1-5 of the module doc on a scorer.

    Returns:
        :func:`summarize`'s dict plus ``n_chunks``, ``n_text_tokens``, ``add_bos``,
        ``tokens_sha256``, ``chunk_perplexity`` and ``engine_loss`` (the engine's mean loss
        over all scored tokens where it reports one, else None).

    Raises:
        ConfigError: the text is too short for ``n_ctx``.
    """
    ids, bos = scorer.tokenize(text)
    chunks = chunk_tokens(ids, n_ctx, bos, max_chunks)
    if on_chunks is not None:
        on_chunks(len(chunks))
    first = first_scored(n_ctx)
    nlls, losses = scorer.chunk_nll(chunks, first)
    allv = np.concatenate(nlls)
    s: dict[str, Any] = dict(summarize(allv))
    per = [math.exp(float(v.mean())) for v in nlls]
    if losses is not None:
        # The engine's own loss gives the perplexity (transformers); the per-token values the spread.
        mean_loss = float(np.mean(losses))
        s["engine_loss"] = mean_loss
        s["perplexity"] = math.exp(mean_loss)
        s["stderr"] = s["perplexity"] * s["stderr"] / math.exp(s["nll_mean"])
    else:
        s["engine_loss"] = None
    s.update(n_chunks=int(len(chunks)), n_text_tokens=int(ids.size), add_bos=bos is not None,
             tokens_sha256=hashlib.sha256(chunks.astype("<i4").tobytes()).hexdigest(), chunk_perplexity=per)
    return s


def default_dtype(engine: str, weights: Any, spec: Any) -> str:
    """The dtype when none is given: llama.cpp on a GGUF its own type, transformers and vLLM
    float32 (the reference), else the engine's default."""
    if engine == "llama.cpp" and weights.dtype:
        return weights.dtype
    return DEFAULT_DTYPES.get(engine) or next(iter(spec.dtypes))


@dataclass
class PerplexityRequest:
    """A validated measurement to make (:func:`plan_perplexity`).

    Attributes:
        shape: the resolved model. weights: its :class:`~infbench.quality.weights.WeightsInfo`.
        engine: engine name. dtype: the engine's dtype spelling.
        text, text_path, text_sha256: the text, its file and the SHA-256 of its bytes.
        n_ctx, max_chunks: chunking (module doc).
    """

    shape: Any
    weights: Any
    engine: str
    dtype: str
    text: str
    text_path: str
    text_sha256: str
    n_ctx: int
    max_chunks: int | None

    def key(self) -> str:
        """:func:`quality_key` of the measurement."""
        return quality_key(self.shape.name, self.weights.sha256 or "", self.engine, self.dtype, self.text_sha256,
                           self.n_ctx, self.max_chunks)

    def label(self) -> str:
        """``model on engine (dtype)``."""
        return f"{self.shape.name} on {self.engine} ({self.dtype})"


def plan_perplexity(model: str, engines: list[str], dtypes: list[str] | None, text: str | Path, n_ctx: int = 512,
                    max_chunks: int | None = None, pm: PluginManager | None = None) -> list[PerplexityRequest]:
    """Validate everything before anything loads: one request per engine and dtype.

    Args:
        model: a ``.gguf`` file or an HF folder with weights (zoo names are dummy: refused).
        engines: among :data:`PERPLEXITY_ENGINES`.
        dtypes: engine dtypes or precision classes (None: :func:`default_dtype` per engine).
        text: a UTF-8 text file.
        n_ctx: tokens per chunk (512 as llama-perplexity). max_chunks: score only the first chunks.
        pm: the plugin manager (default: a fresh one).

    Raises:
        ConfigError: dummy weights, an engine that cannot score, a dtype it does not have,
            a missing text, ``n_ctx`` or ``max_chunks`` out of range, ``n_ctx`` beyond the
            model's context (``max_position_embeddings``, a GGUF's ``context_length``).
        EngineUnavailable: an engine's library is missing.
    """
    bad = [e for e in engines if e not in SCORERS]
    if bad:
        raise ConfigError(f"perplexity runs on {', '.join(PERPLEXITY_ENGINES)}, not {', '.join(bad)}",
                          hint="a server engine scores through its in-process twin: llama.cpp or vllm")
    if n_ctx < 4:
        raise ConfigError(f"--n-ctx {n_ctx} is too small", hint="use at least 4 (llama-perplexity uses 512)")
    if max_chunks is not None and max_chunks < 1:
        raise ConfigError(f"--chunks {max_chunks} must be at least 1")
    shape = resolve(model)
    ctx = shape.config.get("max_position_embeddings")
    if isinstance(ctx, (int, float)) and 0 < ctx < n_ctx:
        raise ConfigError(f"--n-ctx {n_ctx} exceeds the context of {shape.name} ({int(ctx):,} tokens): each chunk "
                          "would be scored past the positions the model was trained on",
                          hint=f"use --n-ctx {min(int(ctx), 512) if int(ctx) >= 4 else int(ctx)} (at most "
                               f"{int(ctx):,})")
    weights = require_real_weights(shape)
    body, text_sha = read_text(text)
    specs = engine_specs(pm or get_plugin_manager())
    out = []
    for e in engines:
        spec = require_engine(specs, e)
        natives = []
        wanted: list[str | None] = list(dtypes) if dtypes else [None]
        for d in wanted:
            native = default_dtype(e, weights, spec) if d is None else spec.resolve_dtype(d)
            if native is None:
                raise ConfigError(f"dtype {d!r} is not available on engine {e!r}",
                                  hint=f"{e} dtypes: {', '.join(spec.dtypes)}")
            if e == "llama.cpp" and weights.format != "gguf":
                raise ConfigError(f"llama.cpp needs a .gguf file, got {shape.name}",
                                  hint="use --engine transformers or vllm for a Hugging Face folder")
            if e == "transformers" and weights.format == "gguf" and importlib.util.find_spec("accelerate") is None:
                raise EngineUnavailable("transformers loads a .gguf file only with accelerate installed",
                                        hint="pip install 'infbench[transformers]'")
            natives.append(native)
        for native in dict.fromkeys(natives):
            out.append(PerplexityRequest(shape, weights, e, native, body, str(Path(text).resolve()), text_sha, n_ctx,
                                         max_chunks))
    return out


def new_result(req: PerplexityRequest, device: Any) -> PerplexityResult:
    """The result of ``req`` on ``device`` before anything is measured (status ``ok``,
    no values): its identity fields, the device and the start time."""
    return PerplexityResult(model=req.shape.name, weights_sha256=req.weights.sha256 or "", engine=req.engine,
                            dtype=req.dtype, text_path=req.text_path, text_sha256=req.text_sha256, n_ctx=req.n_ctx,
                            max_chunks=req.max_chunks, device=device.model_dump(), started_at=time.time())


def score_loaded(engine: Any, req: PerplexityRequest, res: PerplexityResult,
                 on_chunks: Callable[[int], None] | None = None) -> None:
    """Measure the perplexity of ``req``'s text on an engine adapter that has loaded its
    model (started and proven on its device by the engine session,
    :class:`infbench.execution.session.EngineSession`), filling ``res`` in place: the values, the
    tokenizer, the engine's description and weights record, and ``wall_s``.

    Args:
        engine: the started :class:`~infbench.data.engine.Engine` of ``req.engine``.
        req: from :func:`plan_perplexity`.
        res: from :func:`new_result`.
        on_chunks: called with the number of chunks once the text is tokenized.

    Raises:
        ConfigError: the text is too short for ``n_ctx``.
        NonFinitePerplexity: the perplexity (or a chunk's) is NaN or infinite; the session
            stores the result failed with the message.
        Exception: whatever the engine raises (the session stores it as a failed result).
    """
    try:
        res.engine_info = engine.describe()
    except Exception as exc:  # noqa: BLE001
        res.engine_info = {"name": req.engine, "describe_error": str(exc)}
    res.engine_info["device_proof"] = getattr(engine, "device_proof", None)
    res.weights = dict(res.engine_info.get("weights") or req.weights.record())
    vocab = tokenizer_source(req.weights)
    own = getattr(engine, "scorer", None)  # an adapter may bring its own scorer (infbench.testing's)
    scorer = own(req.n_ctx, req.shape, vocab) if callable(own) else SCORERS[req.engine](engine, req.n_ctx, req.shape,
                                                                                        vocab)
    try:
        res.tokenizer = f"llama.cpp vocabulary of {Path(vocab).name}" if vocab else "Hugging Face tokenizer"
        t1 = time.perf_counter()
        s = score_text(scorer, req.text, req.n_ctx, req.max_chunks, on_chunks=on_chunks)
        res.wall_s = time.perf_counter() - t1
    finally:
        scorer.close()
    for k in ("n_tokens", "n_chunks", "n_text_tokens", "add_bos", "tokens_sha256"):
        setattr(res, k, s[k])
    values = {k: s[k] for k in ("perplexity", "stderr", "nll_mean", "nll_std")}
    bad = [k for k, v in values.items() if v is not None and not math.isfinite(v)]
    if bad or not all(math.isfinite(v) for v in s["chunk_perplexity"]):
        chunks = [i for i, v in enumerate(s["chunk_perplexity"]) if not math.isfinite(v)]
        raise NonFinitePerplexity(
            f"perplexity is {values['perplexity']} (non-finite {', '.join(bad) or 'chunk perplexity'}"
            f"{f'; chunks {chunks[:10]}' if chunks else ''}): the engine returned NaN or infinite log-probabilities "
            "(NaN weights, or an overflow at this precision); no perplexity is stored as measured")
    for k, v in values.items():
        setattr(res, k, v)
    res.chunk_perplexity = s["chunk_perplexity"]
    if s.get("engine_loss") is not None:
        res.engine_info["loss_mean"] = s["engine_loss"]


class NonFinitePerplexity(ValueError):
    """The scored log-probabilities give a NaN or infinite perplexity: the measurement is
    stored failed with this error (issue 33), never as an ok value that passes a gate."""


def request_for(item: Any, spec: Any, pm: PluginManager | None = None) -> PerplexityRequest:
    """The :class:`PerplexityRequest` of one :class:`~infbench.data.scenarios.PerplexityItem`
    of a :class:`~infbench.data.scenarios.PerplexityScenario`, planned again where it runs
    (a worker container, a Ray node) and checked to be the very text and weights the host
    planned.

    Raises:
        ConfigError: the text or the weights at those paths are not the ones planned
            (another SHA-256), or what :func:`plan_perplexity` raises.
    """
    (req,) = plan_perplexity(item.model, [item.engine], [item.dtype], spec.text_path, spec.n_ctx, spec.max_chunks,
                             pm)
    if req.text_sha256 != spec.text_sha256:
        raise ConfigError(f"{spec.text_path} here is not the text the run planned (SHA-256 {req.text_sha256[:12]}, "
                          f"planned {spec.text_sha256[:12]})", hint="give every node the same text file")
    if item.weights_sha256 and (req.weights.sha256 or "") != item.weights_sha256:
        raise ConfigError(f"{item.model} here is not the model the run planned (weights SHA-256 "
                          f"{(req.weights.sha256 or '')[:12]}, planned {item.weights_sha256[:12]})",
                          hint="give every node the same model file")
    return req
