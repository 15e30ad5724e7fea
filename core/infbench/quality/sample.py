"""What a cell records about its weights: real or dummy, their hash, and for real weights a
greedy answer to a factual question through the model's own tokenizer and chat template.

Random weights answer with unrelated tokens; trained weights answer the question. The
answer is kept with the cell (``engine["weights"]["sample"]``), so anyone reading a stored
result can see that the weights behind the speed were the real model, and a test can
assert it (``"Paris"``). Greedy decoding, at most :data:`SAMPLE_TOKENS` tokens, stopping
at the model's end-of-generation token.
"""

from __future__ import annotations

import ctypes
import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from infbench.quality.quantize import HF_PROVENANCE, provenance_of
from infbench.quality.weights import file_sha256, weights_info

#: The factual question asked of real weights, and what a coherent answer contains.
SAMPLE_QUESTION = "What is the capital of France?"
SAMPLE_EXPECT = "Paris"
#: Most tokens generated for the answer.
SAMPLE_TOKENS = 24


def weights_record(model: Any, loaded: str | Path | None = None) -> dict[str, Any]:
    """The ``weights`` entry of an engine's ``describe()``: :func:`~infbench.quality.weights.weights_info`
    of the model given, plus, when a derived precision was loaded instead of the file itself,
    ``file`` and ``file_sha256`` of what was loaded and ``derived`` (its provenance).
    Never raises: a failure is recorded as ``error``."""
    try:
        rec = weights_info(model).record()
        if rec.get("format") == "hf" and (Path(model.path) / HF_PROVENANCE).is_file():  # written by hf_folder()
            rec["derived"] = json.loads((Path(model.path) / HF_PROVENANCE).read_text())
        if rec.get("real") and loaded is not None and Path(loaded).resolve() != Path(model.path).resolve():
            rec["file"] = str(loaded)
            rec["file_sha256"] = file_sha256(loaded)
            rec["derived"] = provenance_of(loaded)
        return rec
    except Exception as exc:  # noqa: BLE001 - provenance must not fail a cell
        return {"real": bool(getattr(model, "path", None)), "error": f"{type(exc).__name__}: {exc}"}


def _answer(seconds: float, text: str, n: int) -> dict[str, Any]:
    return {"question": SAMPLE_QUESTION, "answer": text.strip(), "tokens": n, "seconds": round(seconds, 3),
            "coherent": SAMPLE_EXPECT.lower() in text.lower()}


def llama_cpp_sample(L: Any, model: Any, threads: int) -> dict[str, Any]:
    """Greedy answer from a loaded llama.cpp model (``llama_model_p``): the model's chat
    template (``llama_model_chat_template`` + ``llama_chat_apply_template``), its
    tokenizer (``llama_tokenize``, special tokens parsed), a 512-token context of its own.

    Returns:
        ``{"question", "answer", "tokens", "seconds", "coherent"}``.
    """
    t0 = time.perf_counter()
    vocab = L.llama_model_get_vocab(model)
    tmpl = L.llama_model_chat_template(model, None)
    if tmpl:
        msg = (L.llama_chat_message * 1)()
        msg[0].role, msg[0].content = b"user", SAMPLE_QUESTION.encode()
        buf = ctypes.create_string_buffer(4096)
        n = L.llama_chat_apply_template(tmpl, msg, 1, True, buf, len(buf))
        prompt = buf.raw[:n] if 0 < n <= len(buf) else SAMPLE_QUESTION.encode()
    else:
        prompt = f"Question: {SAMPLE_QUESTION}\nAnswer:".encode()
    toks = (L.llama_token * 512)()
    n_tok = L.llama_tokenize(vocab, prompt, len(prompt), toks, 512, True, True)
    if n_tok <= 0:
        raise RuntimeError("llama_tokenize failed on the sample prompt")
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = 512
    cp.n_threads = cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise MemoryError("llama.cpp could not create a context for the weights sample")
    n_vocab = L.llama_vocab_n_tokens(vocab)
    out: list[int] = []
    try:
        batch = L.llama_batch_get_one(toks, n_tok)
        for _ in range(SAMPLE_TOKENS):
            if L.llama_decode(ctx, batch) != 0:
                break
            logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            nxt = int(logits.argmax())
            if L.llama_vocab_is_eog(vocab, nxt):
                break
            out.append(nxt)
            one = (L.llama_token * 1)(nxt)
            batch = L.llama_batch_get_one(one, 1)
    finally:
        L.llama_free(ctx)
    text = ""
    for t in out:
        piece = ctypes.create_string_buffer(64)
        k = L.llama_token_to_piece(vocab, t, piece, 64, 0, False)
        text += piece.raw[:max(k, 0)].decode("utf-8", errors="replace")
    return _answer(time.perf_counter() - t0, text, len(out))


def hf_source(path: str) -> dict[str, Any]:
    """``from_pretrained`` arguments for a model path: an HF folder, or a ``.gguf`` file as
    ``(its folder, gguf_file=its name)`` (transformers dequantizes it)."""
    p = Path(path)
    if p.suffix == ".gguf":
        return {"pretrained_model_name_or_path": str(p.parent), "gguf_file": p.name}
    return {"pretrained_model_name_or_path": str(p)}


@lru_cache(maxsize=4)
def hf_tokenizer(path: str) -> Any:
    """The model's own tokenizer (``AutoTokenizer``; from the GGUF's vocabulary for a ``.gguf``)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(**hf_source(path))


def hf_sample(model: Any, tokenizer: Any, device: str = "cpu") -> dict[str, Any]:
    """Greedy answer from a transformers model with its tokenizer's chat template
    (``apply_chat_template(..., add_generation_prompt=True)``), or a plain
    question/answer prompt when the tokenizer has none."""
    import torch

    t0 = time.perf_counter()
    msgs = [{"role": "user", "content": SAMPLE_QUESTION}]
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        ids = ids["input_ids"]
    else:
        ids = tokenizer(f"Question: {SAMPLE_QUESTION}\nAnswer:", return_tensors="pt")["input_ids"]
    ids = ids.to(device)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=SAMPLE_TOKENS,
                             do_sample=False, pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
    new = out[0, ids.shape[1]:].tolist()
    return _answer(time.perf_counter() - t0, tokenizer.decode(new, skip_special_tokens=True), len(new))


def vllm_sample(llm: Any) -> dict[str, Any]:
    """Greedy answer from a ``vllm.LLM`` through ``LLM.chat`` (the model's chat template)."""
    from vllm import SamplingParams

    t0 = time.perf_counter()
    outs = llm.chat([{"role": "user", "content": SAMPLE_QUESTION}],
                    SamplingParams(temperature=0.0, max_tokens=SAMPLE_TOKENS), use_tqdm=False)
    o = outs[0].outputs[0]
    return _answer(time.perf_counter() - t0, o.text, len(o.token_ids))


def with_sample(record: dict[str, Any], make: Any) -> dict[str, Any]:
    """``record`` with ``sample`` = ``make()`` for real weights (``sample_error`` if it raised)."""
    if not record.get("real"):
        return record
    try:
        record["sample"] = make()
    except Exception as exc:  # noqa: BLE001 - a failed sample is recorded, the cell goes on
        record["sample_error"] = f"{type(exc).__name__}: {exc}"
    return record
