"""The transformers engine's work done bare: the calls infbench's transformers adapter makes for a
cell, in a script that imports torch and transformers and nothing of infbench.

It builds the model from a config (JSON on the command line, as infbench's zoo has it) on the
device, without the library's initialisation (transformers' ``no_init_weights``), fills the
parameters with N(0, 0.02) values (norms 1, biases 0), and then serves one line of JSON per
request read from stdin:

    {"batch": B, "input_len": I, "output_len": O, "warmup": W, "seed": S}

answering with ``{"e2e_s", "ttft_s", "tpot_s", "n_out"}`` of one ``generate()`` call with
``max_new_tokens = min_new_tokens = O``, greedy, the step times stamped by a streamer with
``time.perf_counter_ns()`` (as the adapter's), after W warm-up passes of 2 output tokens.
A request may add ``"poll": {"nvml": true, "busy_ms": 0, "interval": 0.1}``: a thread in this process
then reads NVML as infbench's samplers do (``nvml_poll.py`` beside this file), or does ``busy_ms``
of pure-Python work, every ``interval`` s during the call (the cause study of issue 30); the
answer then has ``"poll"``: that thread's call times. ``"probe": true`` times ``probe.work_ms()``
(a fixed pure-Python loop, beside this file) in this thread right before and after the call
(``probe_ms``: how fast this core ran the interpreter then).
``--build-only`` times the build and exits: ``{"import_s", "build_noinit_s", "fill_s"}``
(and ``build_init_s``, Hugging Face's own initialisation, with ``--with-init``).

Used by benchmarks/harness_overhead.py (the comparison of issue 30) on this CPU and on a GPU host.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

t_import = time.perf_counter()
import torch  # noqa: E402
import transformers  # noqa: E402

IMPORT_S = time.perf_counter() - t_import


class Stamp:
    """Records perf_counter_ns at each generated step (the first put is the prompt)."""

    def __init__(self):
        self.t: list[int] = []
        self.first = True

    def put(self, value):
        t = time.perf_counter_ns()
        if self.first:
            self.first = False
            return
        self.t.append(t)

    def end(self):
        pass


def no_init():
    try:
        from transformers.initialization import no_init_weights
    except ImportError:
        from transformers.modeling_utils import no_init_weights
    return no_init_weights()


def build(cfg: dict, dtype, device: str):
    cfg = dict(cfg)
    cfg.pop("architectures", None)
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    t0 = time.perf_counter()
    with torch.device(device), no_init():
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    t1 = time.perf_counter()
    g = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02, generator=g)
            elif "norm" in name:
                p.fill_(1)
            else:
                p.zero_()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    model.eval()
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = 0
    return model, config, t1 - t0, t2 - t1


def generate(model, vocab: int, device: str, b: int, i: int, o: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (b, i), generator=g).to(device)
    mask = torch.ones_like(ids)
    s = Stamp()
    with torch.inference_mode():
        t_send = time.perf_counter_ns()
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=o, min_new_tokens=o, do_sample=False,
                       streamer=s)
    return t_send, s.t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="the model's config as JSON (infbench's zoo entry)")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--with-init", action="store_true", help="with --build-only: also time from_config with init")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = json.loads(a.config)
    dtype = getattr(torch, a.dtype)
    model, config, build_s, fill_s = build(cfg, dtype, a.device)
    if a.build_only:
        out = {"import_s": IMPORT_S, "build_noinit_s": build_s, "fill_s": fill_s}
        if a.with_init:
            del model
            c = dict(cfg)
            c.pop("architectures", None)
            conf = transformers.AutoConfig.for_model(c.pop("model_type"), **c)
            t = time.perf_counter()
            transformers.AutoModelForCausalLM.from_config(conf, dtype=dtype)
            out["build_init_s"] = time.perf_counter() - t
        print(json.dumps(out), flush=True)
        return
    print(json.dumps({"ready": True, "import_s": IMPORT_S, "build_s": build_s + fill_s}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        b, i, o = req["batch"], req["input_len"], req["output_len"]
        for _ in range(req.get("warmup", 1)):
            generate(model, config.vocab_size, a.device, b, i, min(2, o), req.get("seed", 0))
        poller = None
        if req.get("poll"):
            from nvml_poll import Poller

            pq = req["poll"]
            poller = Poller(pq.get("interval", 0.1), pq.get("busy_ms", 0.0), pq.get("nvml", True)).start()
        probe = None
        if req.get("probe"):
            from probe import work_ms

            probe = [work_ms()]
        c0 = time.thread_time()
        t_send, ts = generate(model, config.vocab_size, a.device, b, i, o, req.get("seed", 0))
        cpu = time.thread_time() - c0
        e2e, ttft = (ts[-1] - t_send) / 1e9, (ts[0] - t_send) / 1e9
        tpot = (e2e - ttft) / (len(ts) - 1) if len(ts) > 1 else None
        ans = {"e2e_s": e2e, "ttft_s": ttft, "tpot_s": tpot, "n_out": len(ts), "t_send_ns": t_send,
               "thread_cpu_s": cpu}
        if probe is not None:
            ans["probe_ms"] = probe + [work_ms()]
        if poller is not None:
            ans["poll"] = poller.stop()
        print(json.dumps(ans), flush=True)


if __name__ == "__main__":
    main()
