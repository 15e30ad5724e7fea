"""SambaNova as a remote platform: the core's :class:`RemotePlatformPlugin` with SambaNova
Cloud's defaults. SambaStudio sites set ``base_url`` to their endpoint's OpenAI URL."""

from infbench.plugin import RemotePlatformPlugin

#: The entry point object (``sambanova = "infbench_sambanova.hooks:plugin"``).
plugin = RemotePlatformPlugin(
    "sambanova",
    defaults={"base_url": "https://api.sambanova.ai/v1", "api_key_env": "SAMBANOVA_API_KEY",
              "system": "SambaNova SN40L (SambaNova Cloud)",
              "model": "Meta-Llama-3.1-8B-Instruct"},
    precisions=["bf16", "fp8", "int8"],
    package="infbench_sambanova",
)
