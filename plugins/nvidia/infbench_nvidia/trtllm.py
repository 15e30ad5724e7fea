"""TensorRT-LLM's OpenAI server (``trtllm-serve``), started and driven by infbench.

``trtllm-serve MODEL --backend pytorch --host 127.0.0.1 --port P --tp_size T
--max_batch_size B --max_seq_len L --extra_llm_api_options FILE`` where FILE sets
``dtype`` and, for zoo models, ``load_format: dummy`` (random weights over the
weight-less HF folder infbench writes; valid for speed because output lengths are
forced). Flags from the trtllm-serve reference (TensorRT-LLM docs, "trtllm-serve"); the
server answers ``/health`` and the OpenAI ``/v1/completions`` endpoint.

This adapter cannot be exercised on the development machines (no GPU, and TensorRT-LLM
does not install there); it is run in the TensorRT-LLM release image
(``docker/Dockerfile.trtllm``).
"""

from __future__ import annotations

import shutil
from typing import Any

import yaml

from infbench.plugin import ConfigError, EngineUnavailable, ManagedServerEngine

#: trtllm-serve ``dtype`` spellings (LLM API ``TorchLlmArgs.dtype``) -> precision class.
TRTLLM_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}


def trtllm_argv(model: str, port: int, served: str, tp: int, max_batch: int, max_seq_len: int,
                options_file: str) -> list[str]:
    """The ``trtllm-serve`` command line (PyTorch backend, bound to 127.0.0.1)."""
    return ["trtllm-serve", model, "--backend", "pytorch", "--host", "127.0.0.1", "--port", str(port),
            "--served_model_name", served, "--tp_size", str(tp), "--max_batch_size", str(max_batch),
            "--max_seq_len", str(max_seq_len), "--extra_llm_api_options", options_file]


class TrtllmServeEngine(ManagedServerEngine):
    """``trtllm-serve``: TensorRT-LLM's OpenAI server in serving mode.

    Options: ``startup_timeout_s`` (default 1200: TensorRT-LLM compiles at start), and any
    other key is written to the ``--extra_llm_api_options`` YAML (LLM API arguments such
    as ``kv_cache_config``).
    """

    name = "trtllm-serve"
    stop_grace_s = 30.0

    def start(self, group) -> None:
        """Write the LLM-API options file, start the server, wait for ``/health``.

        Raises:
            EngineUnavailable: ``trtllm-serve`` is not on PATH, or the server did not come up.
            ConfigError: the model has no shape or folder to serve.
        """
        from infbench.plugin import CLIENT_OPTIONS, default_home, dummy_hf_dir, slots_needed

        if shutil.which("trtllm-serve") is None:
            raise EngineUnavailable("trtllm-serve is not installed",
                                    hint="run in the TensorRT-LLM image: infbench run --runtime docker "
                                         "(plugins/nvidia/docker/Dockerfile.trtllm)")
        m = group.model
        llm_args: dict[str, Any] = {"dtype": group.dtype}
        if m.path:
            path = m.path
        elif "vocab_size" in m.config:
            path = str(dummy_hf_dir(m, default_home() / "cache" / "hf"))
            llm_args["load_format"] = "dummy"
        else:
            raise ConfigError(f"{m.name} is not a zoo model or a local folder", hint="see `infbench models`")
        llm_args.update({k: v for k, v in self.options.given().items() if k not in CLIENT_OPTIONS})
        opts_file = default_home() / "cache" / f"trtllm-{group.label().replace(' ', '_')}.yaml"
        opts_file.parent.mkdir(parents=True, exist_ok=True)
        opts_file.write_text(yaml.safe_dump(llm_args))
        longest = max(c.input_len + c.output_len for c in group.cells)
        served = m.name
        self.args = llm_args
        self.launch_server(lambda port: trtllm_argv(path, port, served, group.tensor_parallel_size,
                                                    slots_needed(group.cells), longest + 16, str(opts_file)),
                           self.options.startup_timeout_s or 1200.0)
        self.options = self.options.model_copy(update={"served_model": served})
        super().start(group)

    def verify_device(self, group) -> dict[str, Any]:
        """TensorRT-LLM has no CPU path: a healthy ``trtllm-serve`` runs on a CUDA GPU. The
        cells must be planned on an NVIDIA device (the plugin registers the engine there only).

        Raises:
            DeviceMismatch: the planned device is not an NVIDIA GPU.
        """
        from infbench.plugin import DeviceMismatch, device_label

        if self.device.vendor != "nvidia":
            raise DeviceMismatch(self.name, device_label(self.device), "TensorRT-LLM runs on NVIDIA GPUs only",
                                 "an NVIDIA GPU", "run trtllm-serve cells with --device nvidia")
        return {"device": "cuda", "basis": "trtllm-serve started and answered /health; TensorRT-LLM has no CPU path",
                "source": "server log" if self.server else None}

    def describe(self) -> dict[str, Any]:
        """Client description, LLM-API options and the server log path."""
        d = super().describe()
        d["llm_args"] = getattr(self, "args", None)
        return d
