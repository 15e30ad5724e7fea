"""Run inside the DeepSpeed-MII venv (scripts/engine_venvs.sh): checks what the deepspeed-mii
adapters build against MII's own code and prints the answers as JSON on stdout.

Input (stdin, JSON): ``{"checkpoint": folder, "pipeline_kwargs": mii.pipeline keywords,
"generate_kwargs": GenerateParamsConfig fields, "prompt": [token ids], "server_argv": flags of
the OpenAI server, "payload": completion request body}``.

Output (JSON):

* ``pipeline_bound``: ``inspect.signature(mii.pipeline).bind(checkpoint, **pipeline_kwargs)``
  succeeded; ``model_config``: the ``ModelConfig`` MII builds from them (its own
  ``_parse_kwargs_to_model_config``, as ``mii.pipeline`` calls it), and ``leftover`` keywords
  (``mii.pipeline`` raises ``UnknownArgument`` on any);
* ``stream_outputs``: what MII's ``_generate_output`` puts on the result queue for a streamed
  request, run on a real ``Request`` built by ``RaggedBatchBase.make_request`` semantics
  (``GenerateParamsConfig(**generate_kwargs)``): one entry per output, as lists;
* ``pipeline_members``: which members the adapter's loop uses exist on ``MIIPipeline``;
* ``checkpoint_params``: parameter names DeepSpeed's ``HuggingFaceCheckpointEngine`` reads from the
  checkpoint folder (the loader FastGen uses);
* ``server_args``: the OpenAI server's own argparse namespace for ``server_argv`` (its
  ``__main__`` block run until ``parse_args`` returns);
* ``server_generate``: the generation arguments the server's ``/v1/completions`` handler sends
  for ``payload`` (its gRPC stub replaced by one that records them), validated by MII's
  ``GenerateParamsConfig``.
"""

import argparse
import asyncio
import inspect
import json
import queue
import runpy
import sys
import types

import torch

spec = json.load(sys.stdin)
out = {}

import mii  # noqa: E402
from mii.api import _parse_kwargs_to_model_config  # noqa: E402
from mii.batching.data_classes import Request  # noqa: E402
from mii.batching.ragged_batching import MIIPipeline, RaggedBatchBase  # noqa: E402
from mii.config import GenerateParamsConfig  # noqa: E402

out["version"] = mii.__version__
inspect.signature(mii.pipeline).bind(spec["checkpoint"], **spec["pipeline_kwargs"])
out["pipeline_bound"] = True
cfg, leftover = _parse_kwargs_to_model_config(model_name_or_path=spec["checkpoint"], **spec["pipeline_kwargs"])
out["model_config"] = {"model_name_or_path": cfg.model_name_or_path, "tensor_parallel": cfg.tensor_parallel,
                       "max_length": cfg.max_length}
out["leftover"] = sorted(leftover)

# One streamed request through MII's own output step.
prompt = torch.tensor(spec["prompt"], dtype=torch.long)
params = GenerateParamsConfig(prompt_length=len(prompt), **spec["generate_kwargs"])
req = Request(tid=1, uid=7, input_tokens=prompt, prompt_tokens=prompt, seq_length=0, last_in_prompt=True,
              post_processing=[], generate_params=params)
fake = types.SimpleNamespace(sync_debug=False, result_queues={1: queue.Queue()})
req.next_token = torch.tensor(42)
req.accumulate_generated_token()
RaggedBatchBase._generate_output(fake, req)
items = []
while not fake.result_queues[1].empty():
    uid, tokens, n_in, n_gen, finish, stream = fake.result_queues[1].get()
    items.append([uid, [int(t) for t in tokens], n_in, n_gen, str(finish.value), stream])
out["stream_outputs"] = items
out["generate_params"] = {k: getattr(params, k) for k in ("max_new_tokens", "min_new_tokens", "ignore_eos",
                                                          "do_sample", "stream")}
members = ("make_request", "generate", "_queue_flush_request", "_bcast_requests", "flush", "destroy")
out["pipeline_members"] = {m: list(inspect.signature(getattr(MIIPipeline, m)).parameters) for m in members
                           if hasattr(MIIPipeline, m)}
init_src = inspect.getsource(RaggedBatchBase.__init__)
out["pipeline_state"] = [a for a in ("self.request_queue", "self.result_queues", "self.scheduled_requests")
                         if a + ":" in init_src or a + " =" in init_src]

from deepspeed.inference.v2.checkpoint import HuggingFaceCheckpointEngine  # noqa: E402

out["checkpoint_params"] = sorted(name for name, _ in HuggingFaceCheckpointEngine(spec["checkpoint"]).parameters())


class _Parsed(Exception):
    pass


_parse = argparse.ArgumentParser.parse_args


def _capture(self, args=None, namespace=None):
    raise _Parsed(_parse(self, args, namespace))


argparse.ArgumentParser.parse_args = _capture
sys.argv = ["openai_api_server", *spec["server_argv"]]
try:
    runpy.run_module("mii.entrypoints.openai_api_server", run_name="__main__")
    raise SystemExit("MII's server parsed no arguments")
except _Parsed as p:
    out["server_args"] = vars(p.args[0])
finally:
    argparse.ArgumentParser.parse_args = _parse

from mii.entrypoints import openai_api_server as srv  # noqa: E402
from mii.entrypoints.data_models import AppSettings, CompletionRequest  # noqa: E402
from mii.utils import unpack_proto_query_kwargs  # noqa: E402

sent = {}


def _record(request, query_kwargs):
    sent["prompts"] = list(request)
    sent["kwargs"] = unpack_proto_query_kwargs(query_kwargs)
    return object()


srv.app_settings = AppSettings(model_id=spec["payload"]["model"])
srv.modelresponse_pb2 = types.SimpleNamespace(MultiStringRequest=_record)
srv.ModelResponseStub = lambda channel: None
asyncio.run(srv.create_completion(CompletionRequest(**spec["payload"])))
gen = dict(sent["kwargs"])
GenerateParamsConfig(prompt_length=len(sent["prompts"][0].split()), **gen)
out["server_generate"] = {"prompts": sent["prompts"], "kwargs": gen}
print(json.dumps(out, default=str))
