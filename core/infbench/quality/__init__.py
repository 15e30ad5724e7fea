"""Quality beside speed: perplexity per precision, on real weights.

* :mod:`.weights`     is a model real or dummy? its weights' SHA-256 (cached), a GGUF's own dtype;
* :mod:`.quantize`    precisions from one checkpoint: a GGUF dequantized to f16 (``gguf``),
                      re-quantized by llama.cpp (``llama_model_quantize``), cached with provenance;
* :mod:`.perplexity`  llama.cpp's ``llama-perplexity`` method on llama.cpp, transformers and vLLM;
* :mod:`.sample`      a greedy answer to a factual prompt, recorded with every real-weights cell;
* :mod:`.gate`        the perplexity increase of each precision over the model's best precision,
                      flagged beyond ``--max-ppl-increase`` (Perplexity's A100-vs-H100 study: 1 %).

Stored by :mod:`infbench.store.quality` (schema 4), shown by ``infbench results``,
``infbench report`` (perplexity vs throughput, LLM-Inference-Bench Figs. 10/29) and
``infbench compare --dtypes A,B``. See ``docs/quality.md``.
"""
