"""SGLang's OpenAI-compatible server (``sglang-server``), started by infbench and driven in
serving mode.

``python -m sglang.launch_server`` runs as a subprocess on 127.0.0.1 with flags named as
SGLang's ``ServerArgs`` fields (``sglang/srt/server_args.py``; its argument parser is built
from those fields, ``--field-name``):

* ``--model-path``/``--tokenizer-path``: a local folder with real weights (``--model
  /path``), or for a zoo model the weight-less folder of :mod:`infbench.engines.hf_dummy`
  with ``--load-format dummy`` (random weights; valid for timing because output lengths are
  forced with ``ignore_eos``/``min_tokens``);
* ``--dtype``, ``--tp-size`` (the group's ``tensor_parallel_size``),
  ``--max-running-requests`` (the group's largest batch or concurrency),
  ``--context-length`` (the longest input + output, rounded up), ``--random-seed``;
* ``--disable-radix-cache``: a cell's warm-up sends its timed prompts, so SGLang's prefix
  cache (RadixAttention) would serve the timed prefill from the warm-up's KV blocks; pass
  ``--engine-arg disable_radix_cache=false`` to measure with it;
* ``--enable-metrics``: SGLang's Prometheus ``/metrics`` on the same port, scraped during
  every cell like vLLM's (:mod:`infbench.measure.server_metrics`, ``sglang:`` names);
* ``--served-model-name`` (the zoo name), ``--log-level info``;
* every other engine option, named as a ``ServerArgs`` field (``mem_fraction_static``,
  ``chunked_prefill_size``, ``attention_backend``...), passed as ``--key-name value``.

Requests go through :class:`~infbench.engines.openai.OpenAIEngine` with token-id prompts
(SGLang's ``CompletionRequest.prompt`` takes ``List[int]``), so prompt lengths are exact.

Device proof: SGLang logs its resolved arguments at start (``server_args={...,
'device': 'cuda', ...}``, ``sglang/srt/entrypoints/engine.py``); the device named there
must be the torch device of the planned GPU (``cuda`` for CUDA and ROCm builds). Before the
server starts, the installed torch must have the device's backend and see the detected GPU
model (:func:`check_sglang`), so a CPU build is refused before any weights load.

This adapter has not run on a GPU: the development machines have none, and SGLang's
wheel depends on CUDA builds (``flashinfer``, ``sglang-kernel``, torch 2.14.1) that do not
install there. Its command line is checked against the real ``ServerArgs`` parser and its
request body against SGLang's ``CompletionRequest`` by ``tests/integration/test_engine_signatures.py``.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as md
import importlib.util
import json
import re
import sys
from typing import Any

from infbench.data.errors import ConfigError, DeviceMismatch, EngineUnavailable
from infbench.data.paths import default_home
from infbench.engines.availability import (
    UNSUPPORTED,
    USABLE,
    EngineSupport,
    device_label,
    live_torch_probe,
    local_only,
    names_match,
    torch_backend_problem,
    torch_probe,
)
from infbench.engines.hf_dummy import dummy_hf_dir
from infbench.engines.server_process import CLIENT_OPTIONS, ManagedServerEngine, slots_needed

NAME = "sglang-server"
#: SGLang's ``--dtype`` choices (``ServerArgs.dtype``) -> precision class (the first is the default).
SGLANG_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
#: Options of the infbench adapter itself (the OpenAI client's and the managed server's), not
#: passed to SGLang.
ADAPTER_OPTIONS = CLIENT_OPTIONS | {"tokenizer"}
#: The torch backends SGLang runs on (:attr:`~infbench.data.schema.DeviceBackends.torch`):
#: CUDA and ROCm builds, both with torch device ``cuda``.
SGLANG_TORCH = ("cuda", "hip")
#: Key of :attr:`DeviceBackends.install` with the command installing SGLang for the device.
INSTALL_KEY = "sglang"
INSTALL = "pip install sglang (NVIDIA, CUDA wheels); the AMD image: infbench containers build --vendor amd"

#: ``device`` and ``tp_size`` in a ``server_args=`` line, as a dict (``'device': 'cuda'``, SGLang
#: 0.5) or a dataclass repr (``device='cuda'``, 0.4); not a longer name ending so (``draft_device``).
_DEVICE = re.compile(r"server_args=.*?(?<![\w.])['\"]?device['\"]?\s*[:=]\s*['\"]([A-Za-z]+)['\"]")
_TP = re.compile(r"server_args=.*?(?<![\w.])['\"]?tp_size['\"]?\s*[:=]\s*(\d+)")
_LOADED = re.compile(r"Load weight end\..*?avail mem=([\d.]+) GB")


def sglang_version() -> str | None:
    """The installed ``sglang`` distribution's version, without importing it (seconds)."""
    try:
        return md.version("sglang")
    except md.PackageNotFoundError:
        return None


def check_sglang(device, backends) -> EngineSupport:
    """SGLang runs where torch has the device's CUDA or ROCm backend and sees a GPU
    (:func:`~infbench.engines.availability.torch_backend_problem`); it is installed in the
    same environment as infbench (``python -m sglang.launch_server`` runs with its interpreter).

    Returns:
        An :class:`~infbench.engines.availability.EngineSupport` row for ``infbench detect``.
    """
    refused = local_only(NAME, device, backends, "PyTorch")
    if refused:
        return refused
    if backends.torch not in SGLANG_TORCH:
        return EngineSupport(NAME, UNSUPPORTED, f"SGLang's infbench adapter runs on CUDA and ROCm GPUs, not "
                             f"{backends.label} devices")
    v = sglang_version()
    t = torch_probe()
    problem = torch_backend_problem(t, backends.torch)
    if problem:
        return EngineSupport(NAME, UNSUPPORTED, problem, backends.install.get("torch"), v)
    return EngineSupport(NAME, USABLE, f"sglang {v}, torch {t['version']} ({backends.torch})", version=v)


def sglang_args(group, device, options: dict[str, Any]) -> dict[str, Any]:
    """SGLang server arguments (``ServerArgs`` field names) for ``group`` on ``device``.

    Raises:
        ConfigError: a ``.gguf`` path, or a model with no zoo shape and no folder.
    """
    m = group.model
    args: dict[str, Any] = {}
    if m.path:
        if m.path.endswith(".gguf"):
            raise ConfigError(f"sglang-server is driven here with Hugging Face folders, got {m.path}",
                              hint="use --engine llama.cpp-server for .gguf files")
        path = m.path
    else:
        if "vocab_size" not in m.config:
            raise ConfigError(f"{m.name} is not a zoo model or a local folder", hint="see `infbench models`")
        path = str(dummy_hf_dir(m, default_home() / "cache" / "hf"))
        args["load_format"] = "dummy"
    longest = max(c.longest() for c in group.cells)
    args.update(model_path=path, tokenizer_path=path, dtype=group.dtype, tp_size=group.tensor_parallel_size,
                max_running_requests=slots_needed(group.cells), context_length=-(-(longest + 16) // 256) * 256,
                random_seed=group.cells[0].seed if group.cells else 0, served_model_name=m.name,
                disable_radix_cache=True, enable_metrics=True, log_level="info")
    args.update({k: v for k, v in options.items() if k not in ADAPTER_OPTIONS})
    return args


def sglang_argv(args: dict[str, Any], port: int) -> list[str]:
    """The command line of ``python -m sglang.launch_server`` for ``args`` on 127.0.0.1:``port``
    (``--key-name value``; True becomes a bare flag, False and None are left out, lists
    and dicts are passed as JSON)."""
    argv = [sys.executable, "-m", "sglang.launch_server", "--host", "127.0.0.1", "--port", str(port)]
    for k, v in args.items():
        if k in ("host", "port"):
            continue
        flag = "--" + k.replace("_", "-")
        if v is True:
            argv.append(flag)
        elif v is None or v is False:
            continue
        else:
            argv += [flag, json.dumps(v) if isinstance(v, (dict, list)) else str(v)]
    return argv


def sglang_log_device(log: str) -> dict[str, Any]:
    """What SGLang's log says about where it runs: the ``device`` and ``tp_size`` of its
    ``server_args=`` line (last one), and the free GPU memory after loading the weights
    (``Load weight end. ... avail mem=N GB``, per rank). Missing parts are None."""
    dev, tp, mem = _DEVICE.findall(log), _TP.findall(log), _LOADED.findall(log)
    return {"device": dev[-1].lower() if dev else None, "tp_size": int(tp[-1]) if tp else None,
            "avail_mem_gb_after_load": [float(x) for x in mem] or None}


def native_options() -> list[str]:
    """SGLang's ``ServerArgs`` field names (what ``--engine-arg`` passes to it); [] when
    SGLang does not import here."""
    try:
        from sglang.srt.server_args import ServerArgs
    except Exception:  # noqa: BLE001 - not installed, or a build that fails to import
        return []

    if dataclasses.is_dataclass(ServerArgs):
        return [f.name for f in dataclasses.fields(ServerArgs)]
    from sglang.srt.arg_groups.arg_utils import record_fields

    return [f.name for f in record_fields(ServerArgs)]


class SglangServerEngine(ManagedServerEngine):
    """``sglang-server``: SGLang's OpenAI server, started by infbench, in serving mode.

    Options: ``startup_timeout_s`` (default 900: SGLang captures CUDA graphs at start),
    plus any ``ServerArgs`` field (passed as ``--key-name value``). See the module docstring.
    """

    name = NAME
    stop_grace_s = 20.0

    def start(self, group) -> None:
        """Check the device, start the server, wait for ``/health``, then check ``/v1/models``.

        Raises:
            EngineUnavailable: SGLang is not installed, or the server exited or was not
                healthy in time (the message carries the end of its log).
            DeviceMismatch: torch here has no build for the device, or sees another GPU.
            ConfigError: the model cannot be served.
        """
        self.proof_name = self._check_device()          # before anything loads
        if importlib.util.find_spec("sglang") is None:
            raise EngineUnavailable("the sglang-server engine needs SGLang", hint=INSTALL)
        self.args = sglang_args(group, self.device, self.options.given())
        self.launch_server(lambda port: sglang_argv(self.args, port),
                           self.options.startup_timeout_s or 900.0)
        self.options = self.options.model_copy(update={"served_model": self.args["served_model_name"]})
        from infbench.quality.sample import weights_record  # noqa: PLC0415 - start-up: not loaded by detect

        self.weights = weights_record(group.model)
        super().start(group)

    def _check_device(self) -> str | None:
        """Refuse, before the server starts, a device SGLang cannot run on here; returns the
        name torch gives the GPU (None on the CPU, which is always refused).

        Raises:
            DeviceMismatch: a CPU device, a device without a CUDA/ROCm backend, torch
                without that backend, or torch's GPU is another model.
        """
        label = device_label(self.device)
        s = check_sglang(self.device, self.backends)
        if self.device.kind == "cpu":
            raise DeviceMismatch(self.name, label, "infbench drives SGLang on CUDA and ROCm GPUs only", "the CPU",
                                 "use --engine vllm or llama.cpp on the CPU")
        if not s.usable:
            raise DeviceMismatch(self.name, label, s.reason, "the CPU", s.fix)
        names = live_torch_probe()["cuda_devices"]
        if not any(names_match(n, self.device.model) for n in names):
            raise DeviceMismatch(self.name, label, f"torch sees {', '.join(names)}, not the detected "
                                 f"{self.device.model}", ", ".join(names), "make the detected GPU visible "
                                 "(CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES)")
        return next(n for n in names if names_match(n, self.device.model))

    def verify_device(self, group) -> dict[str, Any]:
        """SGLang's own log names the device its model runner uses (``server_args=`` line):
        it must be ``cuda`` (CUDA and ROCm builds alike), and a tensor-parallel size as planned.

        Raises:
            DeviceMismatch: the log names another device, or none.
        """
        log = self.server.log_path.read_text(errors="replace") if self.server else ""
        seen = sglang_log_device(log)
        where = f"see {self.server.log_path if self.server else 'the server log'}"
        label = device_label(self.device)
        if seen["device"] != "cuda":
            raise DeviceMismatch(self.name, label, "the server's log " + (
                f"says it runs on {seen['device']}" if seen["device"] else "does not say which device it uses (no "
                "server_args= line with device)") + ", not cuda", seen["device"] or "an unknown device", where)
        if seen["tp_size"] is not None and seen["tp_size"] != group.tensor_parallel_size:
            raise DeviceMismatch(self.name, label, f"the server runs with tp_size={seen['tp_size']}, planned "
                                 f"{group.tensor_parallel_size}", f"{seen['tp_size']} GPU(s)", where)
        return {"device": "cuda", "source": "server log", "name": getattr(self, "proof_name", None),
                "tp_size": seen["tp_size"], "avail_mem_gb_after_load": seen["avail_mem_gb_after_load"],
                "sglang": sglang_version()}

    def describe(self) -> dict[str, Any]:
        """SGLang version, server arguments, and the server log kept beside the results."""
        d = super().describe()
        d["server_args"] = getattr(self, "args", None)
        d["versions"]["sglang"] = sglang_version()
        d["weights"] = getattr(self, "weights", None)
        return d
