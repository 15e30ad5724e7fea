"""Cerebras as a remote platform: the core's :class:`RemotePlatformPlugin` with Cerebras
Inference's defaults. Its streamed ``time_info`` is stored per request by the core's
OpenAI client (``RequestRecord.server``)."""

from infbench.plugin import RemotePlatformPlugin

#: The entry point object (``cerebras = "infbench_cerebras.hooks:plugin"``).
plugin = RemotePlatformPlugin(
    "cerebras",
    defaults={"base_url": "https://api.cerebras.ai/v1", "api_key_env": "CEREBRAS_API_KEY",
              "system": "Cerebras CS-3 (Cerebras Inference)",
              "model": "llama3.1-8b"},
    precisions=["fp16", "bf16"],
    package="infbench_cerebras",
)
