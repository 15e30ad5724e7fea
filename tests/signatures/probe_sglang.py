"""Run inside the SGLang venv (scripts/engine_venvs.sh): checks what the sglang-server adapter
builds against SGLang's own code and prints the answers as JSON on stdout.

Input (stdin, JSON): ``{"argv": [flags after "-m sglang.launch_server"], "fields": [ServerArgs
field names to report], "payload": completion request body, "tp_size": int}``.

Output: ``{"version", "parsed": {field: value} (SGLang's parser, then ServerArgs.from_cli_args),
"request": {prompt, ignore_eos, min_tokens, max_tokens} (CompletionRequest(**payload)),
"metric_names": [every name="sglang:..." in its metrics collector], "log_line": a server_args=
line as sglang/srt/entrypoints/engine.py prints it, "logs_server_args": bool}``.
"""

import argparse
import importlib.metadata as md
import importlib.util
import json
import re
import sys
from pathlib import Path

from sglang.srt.arg_groups.arg_utils import record_fields
from sglang.srt.entrypoints.openai.protocol import CompletionRequest
from sglang.srt.server_args import ServerArgs

spec = json.load(sys.stdin)
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
args = ServerArgs.from_cli_args(parser.parse_args(spec["argv"]))
req = CompletionRequest(**spec["payload"])
root = Path(importlib.util.find_spec("sglang").origin).parent / "srt"
collector = (root / "observability" / "metrics_collector.py").read_text()
engine_src = (root / "entrypoints" / "engine.py").read_text()
# What engine.py logs: f"server_args={_server_args_for_logging(server_args)}", a dict of every
# record field (resolved_dict); resolution needs a GPU platform, so the record's own values with
# the device a CUDA or ROCm platform resolves to stand in for it.
fields = {f.name: getattr(args, f.name, None) for f in record_fields(ServerArgs)}
fields.update(device="cuda", tp_size=spec["tp_size"])
print(json.dumps({
    "version": md.version("sglang"),
    "parsed": {k: getattr(args, k) for k in spec["fields"]},
    "request": {"prompt": req.prompt, "ignore_eos": req.ignore_eos, "min_tokens": req.min_tokens,
                "max_tokens": req.max_tokens},
    "metric_names": sorted(set(re.findall(r'name="(sglang:[a-z_]+)"', collector))),
    "log_line": f"[2026-01-01 00:00:00] server_args={fields!r}",
    "logs_server_args": 'logger.info(f"server_args={_server_args_for_logging(server_args)}")' in engine_src,
}, default=str))
