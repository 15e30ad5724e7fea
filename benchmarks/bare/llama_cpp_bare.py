"""The llama.cpp engine's work done bare: the C API calls infbench's llama.cpp adapter makes for
a cell, through llama-cpp-python, in a script that imports llama_cpp and numpy and nothing of
infbench.

It loads a GGUF (the path on the command line: infbench's dummy GGUF for a zoo shape), and serves
one line of JSON per request read from stdin:

    {"batch": B, "input_len": I, "output_len": O, "warmup": W, "seed": S}

answering with ``{"e2e_s", "ttft_s", "tpot_s", "n_out"}``: the B prompts prefilled by one
``llama_decode`` as B sequences, then O decode steps of one token per sequence, each step's
token the argmax of its logits, stamped with ``time.perf_counter_ns()`` after the argmax (as the
adapter does), in a context of B x (I + O rounded up to 256) tokens with n_batch equal to it and
n_ubatch 512, after W warm-up passes of 2 output tokens.

Used by benchmarks/harness_overhead.py (the comparison of issue 30).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time

import llama_cpp as L
import numpy as np


def quiet(level, text, user_data):
    pass


LOG = L.llama_log_callback(quiet)


class Ctx:
    def __init__(self, model, b: int, n_tokens: int, threads: int):
        per_seq = -(-n_tokens // 256) * 256
        cp = L.llama_context_default_params()
        cp.n_ctx = cp.n_batch = b * per_seq
        cp.n_ubatch = 512
        cp.n_seq_max = b
        cp.n_threads = cp.n_threads_batch = threads
        self.ctx = L.llama_init_from_model(model, cp)
        self.cap = b * per_seq
        self.batch = L.llama_batch_init(self.cap, 0, b)
        self.key = (b, per_seq)

    def fill(self, toks, pos, seq, logits):
        bt = self.batch
        for k in range(len(toks)):
            bt.token[k] = int(toks[k])
            bt.pos[k] = int(pos[k])
            bt.n_seq_id[k] = 1
            bt.seq_id[k][0] = int(seq[k])
            bt.logits[k] = int(logits[k])
        bt.n_tokens = len(toks)

    def free(self):
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)


def run(model, ctx: Ctx, n_vocab: int, b: int, i: int, o: int, seed: int):
    L.llama_memory_clear(L.llama_get_memory(ctx.ctx), True)
    rng = np.random.default_rng(seed)
    p = rng.integers(3, n_vocab, size=(b, i), dtype=np.int32)
    want = np.zeros((b, i), np.int8)
    want[:, -1] = 1
    ctx.fill(p.ravel(), np.tile(np.arange(i, dtype=np.int32), b), np.repeat(np.arange(b, dtype=np.int32), i),
             want.ravel())
    seqs, ones = np.arange(b, dtype=np.int32), np.ones(b, np.int8)
    times = []
    t_send = time.perf_counter_ns()
    for step in range(o):
        if L.llama_decode(ctx.ctx, ctx.batch) != 0:
            raise RuntimeError(f"llama_decode failed at step {step}")
        logits = np.ctypeslib.as_array(L.llama_get_logits(ctx.ctx), shape=(b, n_vocab))
        nxt = logits.argmax(axis=1).astype(np.int32)
        times.append(time.perf_counter_ns())
        if step + 1 < o:
            ctx.fill(nxt, np.full(b, i + step, np.int32), seqs, ones)
    return t_send, times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--threads", type=int, required=True)
    a = ap.parse_args()
    L.llama_log_set(LOG, ctypes.c_void_p(0))
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = L.llama_model_load_from_file(a.gguf.encode(), mp)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    ctx: Ctx | None = None
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        b, i, o = req["batch"], req["input_len"], req["output_len"]
        per_seq = -(-(i + o) // 256) * 256
        if ctx is None or ctx.key != (b, per_seq):
            if ctx is not None:
                ctx.free()
            ctx = Ctx(model, b, i + o, a.threads)
        for _ in range(req.get("warmup", 1)):
            run(model, ctx, n_vocab, b, i, min(2, o), req.get("seed", 0))
        probe = None
        if req.get("probe"):
            from probe import work_ms

            probe = [work_ms()]
        c0 = time.thread_time()
        t_send, ts = run(model, ctx, n_vocab, b, i, o, req.get("seed", 0))
        cpu = time.thread_time() - c0
        e2e, ttft = (ts[-1] - t_send) / 1e9, (ts[0] - t_send) / 1e9
        tpot = (e2e - ttft) / (len(ts) - 1) if len(ts) > 1 else None
        ans = {"e2e_s": e2e, "ttft_s": ttft, "tpot_s": tpot, "n_out": len(ts), "t_send_ns": t_send, "thread_cpu_s": cpu}
        if probe is not None:
            ans["probe_ms"] = probe + [work_ms()]
        print(json.dumps(ans), flush=True)


if __name__ == "__main__":
    main()
