"""DeepSpeed-MII (FastGen): batch mode through ``mii.pipeline`` (``deepspeed-mii``) and
serving mode through MII's OpenAI-compatible server (``deepspeed-mii-server``).

Both load a Hugging Face folder: a real one (``--model /path``; its ``torch_dtype`` is the
dtype FastGen runs, so it must be the group's), or for a zoo model a random-weight
checkpoint written from the zoo config into the cache (:mod:`infbench.engines.hf_checkpoint`;
FastGen has no dummy load format). FastGen runs fp16 and bf16 (the checkpoint's
``torch_dtype``), on NVIDIA GPUs of compute capability 8.0 or newer (MII's README, "DeepSpeed-
Kernels": Ampere+, CUDA 11.6+); MII documents no ROCm support, so AMD GPUs are not offered.

Batch mode (:class:`MiiEngine`): ``mii.pipeline(path, tensor_parallel=1, max_length=L,
**ModelConfig options)``, then the cell's prompts (token ids of exact length) are queued
together as MII's ``MIIPipeline.__call__`` queues them (``make_request`` per prompt, onto
``request_queue``) with ``GenerateParamsConfig`` ``max_new_tokens = min_new_tokens =
output_len, ignore_eos=True, do_sample=False, stream=True``, and the pipeline's own
scheduling step (``generate()``) is run until every request finished, as ``__call__``
runs it. With ``stream=True`` each step puts every new token on the result queue, so the
``perf_counter_ns`` after each step times the tokens it produced (``__call__`` itself only
returns when all are done). Tensor parallelism in batch mode needs MII's launcher (one
process per GPU, ``deepspeed --num_gpus``), so it runs with ``tensor_parallel_size`` 1;
use ``deepspeed-mii-server`` for more.

Serving mode (:class:`MiiServerEngine`): ``python -m infbench.engines.mii_serve --model PATH
--port P --host 127.0.0.1 --tensor-parallel T --max-length L --deployment-name NAME``, a
thin wrapper that logs the device torch and DeepSpeed see and hands over to MII's own
``mii/entrypoints/openai_api_server.py`` main (which starts the model with ``mii.serve``,
then serves ``/v1/completions``, ``/v1/models`` and ``/health`` with uvicorn). MII's
completions endpoint takes text prompts only (it forwards them to its gRPC
``MultiStringRequest``), builds ``GenerateParamsConfig`` from ``min_tokens``/``max_tokens``
and always sets ``ignore_eos=False, do_sample=True``; ``temperature`` must be > 0 there, so
none is sent (its request default, 0.7, applies; speed does not depend on it). Prompts are
text in the dummy vocabulary (one token per word, :func:`~infbench.engines.gguf_dummy.dummy_text`),
so their lengths are exact; outputs are held to length by ``min_tokens`` (MII compares it with
the whole sequence length, so with random weights an early end-of-sequence is possible but
rare, about 1 in the vocabulary size per token; cells where a server returns another length
are flagged). MII has no
Prometheus endpoint.

Device proof: batch mode, the pipeline's weights (``inference_engine.model.flattened_params``)
sit on a ``cuda`` device whose name (``torch.cuda.get_device_name``) is the detected GPU's,
and DeepSpeed's accelerator is ``cuda``; serving mode, the wrapper's log line and every
``Setting ds_accelerator to ...`` line DeepSpeed prints (API server and model processes).

Neither has run on a GPU: the development machines have none. ``deepspeed-mii`` installs on
them (CPU torch); the calls are checked against its real signatures and pydantic models by
``tests/integration/test_engine_signatures.py``.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import queue
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

from infbench.data.engine import Engine, RunOutput
from infbench.data.engine_options import MiiOptions
from infbench.data.errors import ConfigError, DeviceMismatch, EngineUnavailable
from infbench.data.paths import default_home
from infbench.data.schema import Cell, RequestRecord
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
from infbench.engines.gguf_dummy import dummy_text
from infbench.engines.server_process import CLIENT_OPTIONS, ManagedServerEngine

BATCH, SERVER = "deepspeed-mii", "deepspeed-mii-server"
#: FastGen's dtypes (the checkpoint's ``torch_dtype``; ``activation_dtype`` of its model
#: implementations) -> precision class; the first is the default.
MII_DTYPES = {"float16": "fp16", "bfloat16": "bf16"}
#: Options of the infbench adapters themselves, not passed to MII.
ADAPTER_OPTIONS = CLIENT_OPTIONS | {"tokenizer"}
#: ``mii.config.ModelConfig`` fields the batch adapter sets itself.
SET_BY_ADAPTER = ("model_name_or_path", "tensor_parallel", "max_length")
#: Lowest CUDA compute capability DeepSpeed-Kernels (FastGen) supports.
MIN_COMPUTE_CAPABILITY = (8, 0)
#: Key of :attr:`DeviceBackends.install` with the command installing MII for the device.
INSTALL_KEY = "deepspeed_mii"
#: deepspeed-mii 0.3.3 imports requests (mii/backend/client.py), uvicorn and pydantic-settings (its OpenAI
#: server) without declaring them.
INSTALL = "pip install deepspeed-mii requests uvicorn pydantic-settings"

_DS_ACCEL = re.compile(r"Setting ds_accelerator to (\w+)")
_WRAPPER = re.compile(r"^infbench-mii-device: (\{.*\})$", re.M)


def mii_version() -> str | None:
    """The installed ``deepspeed-mii`` distribution's version, without importing it."""
    try:
        return md.version("deepspeed-mii")
    except md.PackageNotFoundError:
        return None


def _compute_capability(device) -> tuple[int, int] | None:
    cc = str(device.properties.get("compute_capability") or "")
    major, _, minor = cc.partition(".")
    return (int(major), int(minor or 0)) if major.isdigit() else None


def check_mii(device, backends, engine: str = BATCH) -> EngineSupport:
    """DeepSpeed-MII runs where torch has CUDA and sees the GPU, on compute capability 8.0
    or newer (:data:`MIN_COMPUTE_CAPABILITY`). ROCm is refused: MII documents NVIDIA GPUs only.

    Returns:
        An :class:`~infbench.engines.availability.EngineSupport` row for ``infbench detect``.
    """
    refused = local_only(engine, device, backends, "PyTorch")
    if refused:
        return refused
    if backends.torch != "cuda":
        return EngineSupport(engine, UNSUPPORTED, f"DeepSpeed-MII documents NVIDIA GPUs (CUDA) only, not "
                             f"{backends.label} devices")
    v = mii_version()
    cc = _compute_capability(device)
    if cc is not None and cc < MIN_COMPUTE_CAPABILITY:
        return EngineSupport(engine, UNSUPPORTED, f"compute capability {cc[0]}.{cc[1]}: DeepSpeed-MII's kernels need "
                             "8.0 or newer (Ampere+)", version=v)
    t = torch_probe()
    problem = torch_backend_problem(t, "cuda")
    if problem:
        return EngineSupport(engine, UNSUPPORTED, problem, backends.install.get("torch"), v)
    return EngineSupport(engine, USABLE, f"deepspeed-mii {v}, torch {t['version']} (CUDA {t['cuda']})", version=v)


def check_mii_server(device, backends) -> EngineSupport:
    """:func:`check_mii` for ``deepspeed-mii-server``."""
    return check_mii(device, backends, SERVER)


def _refuse_elsewhere(engine: str, device, backends) -> str:
    """Refuse, before any weights load, a device MII cannot run on here; returns the name
    torch gives the detected GPU.

    Raises:
        DeviceMismatch: the CPU, a non-CUDA device, torch without CUDA, or another GPU model.
    """
    label = device_label(device)
    if device.kind == "cpu":
        raise DeviceMismatch(engine, label, "DeepSpeed-MII's FastGen runs on NVIDIA GPUs only", "the CPU",
                             "use --engine transformers or vllm on the CPU")
    s = check_mii(device, backends, engine)
    if not s.usable:
        raise DeviceMismatch(engine, label, s.reason, "the CPU", s.fix)
    names = live_torch_probe()["cuda_devices"]
    match = [n for n in names if names_match(n, device.model)]
    if not match:
        raise DeviceMismatch(engine, label, f"torch sees {', '.join(names)}, not the detected {device.model}",
                             ", ".join(names), "make the detected GPU visible (CUDA_VISIBLE_DEVICES)")
    return match[0]


def model_folder(group) -> tuple[str, bool]:
    """The Hugging Face folder MII loads for ``group`` and whether it holds random weights.

    Raises:
        ConfigError: a ``.gguf`` file, a folder whose ``torch_dtype`` is not the group's
            dtype, or a model with no zoo shape.
    """

    from infbench.engines.hf_checkpoint import dummy_checkpoint  # noqa: PLC0415 - start-up: not loaded by detect

    m = group.model
    if group.dtype not in MII_DTYPES:
        raise ConfigError(f"DeepSpeed-MII dtype {group.dtype!r} unknown", hint=f"use one of {', '.join(MII_DTYPES)}")
    if m.path:
        if m.path.endswith(".gguf"):
            raise ConfigError(f"DeepSpeed-MII needs a Hugging Face model folder, got {m.path}",
                              hint="use --engine llama.cpp for .gguf files")
        cfg_file = Path(m.path) / "config.json"
        have = json.loads(cfg_file.read_text()).get("torch_dtype") if cfg_file.exists() else None
        if have and have != group.dtype:
            raise ConfigError(f"{m.path} holds {have} weights; DeepSpeed-MII runs a checkpoint at its own torch_dtype",
                              hint=f"use --dtype {have}")
        return m.path, False
    if "vocab_size" not in m.config:
        raise ConfigError(f"{m.name} is not a zoo model or a local folder", hint="see `infbench models`")
    return str(dummy_checkpoint(m, group.dtype, default_home() / "cache" / "hf-weights")), True


def max_length(group) -> int:
    """``max_length`` (prompt + output tokens) for the group: the longest cell + 16, rounded
    up to 256."""
    return -(-(max(c.longest() for c in group.cells) + 16) // 256) * 256


def pipeline_kwargs(group, options: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of ``mii.pipeline`` besides the model path: ``tensor_parallel``,
    ``max_length`` and every engine option that is a ``mii.config.ModelConfig`` field.

    Raises:
        ConfigError: ``tensor_parallel_size`` above 1 (batch mode runs one process).
    """
    if group.tensor_parallel_size != 1:
        raise ConfigError(f"deepspeed-mii (mii.pipeline) runs in one process: tensor_parallel_size "
                          f"{group.tensor_parallel_size} needs MII's launcher",
                          hint="use --engine deepspeed-mii-server for tensor parallelism")
    kw: dict[str, Any] = {"tensor_parallel": 1, "max_length": max_length(group)}
    kw.update({k: v for k, v in options.items() if k not in ADAPTER_OPTIONS and k not in SET_BY_ADAPTER})
    return kw


def generate_kwargs(output_len: int) -> dict[str, Any]:
    """``GenerateParamsConfig`` fields of every request: exactly ``output_len`` new tokens,
    greedy, streamed token by token."""
    return {"max_new_tokens": output_len, "min_new_tokens": output_len, "ignore_eos": True, "do_sample": False,
            "stream": True, "return_full_text": False}


def native_options() -> list[str]:
    """``mii.config.ModelConfig`` field names (what ``--engine-arg`` passes to
    ``mii.pipeline``); [] when MII does not import here."""
    try:
        from mii.config import ModelConfig
    except Exception:  # noqa: BLE001 - not installed, or DeepSpeed fails to import
        return []
    return [k for k in ModelConfig.model_fields if k not in SET_BY_ADAPTER]


def _need_mii() -> Any:
    try:
        import mii
    except ImportError as exc:
        raise EngineUnavailable("the deepspeed-mii engines need DeepSpeed-MII", hint=INSTALL) from exc
    return mii


class MiiEngine(Engine):
    """``deepspeed-mii``: ``mii.pipeline`` in batch mode; see the module docstring.

    Options: any ``mii.config.ModelConfig`` field (``inference_engine_config``,
    ``quantization_mode``...), passed to ``mii.pipeline``.
    """

    name = BATCH
    options_model = MiiOptions
    options: MiiOptions

    def __init__(self, device, options=None):
        super().__init__(device, options)
        self.pipe = None

    def start(self, group) -> None:
        """Check the device, write or find the checkpoint, build the pipeline.

        Raises:
            EngineUnavailable: MII is not installed.
            DeviceMismatch: the device is not a CUDA GPU this torch sees.
            ConfigError: the model, dtype or parallelism cannot be run.
        """
        self.gpu_name = _refuse_elsewhere(self.name, self.device, self.backends)   # before anything loads
        mii = _need_mii()
        self.kwargs = pipeline_kwargs(group, self.options.given())
        self.path, _ = model_folder(group)
        self.pipe = mii.pipeline(self.path, **self.kwargs)
        from infbench.quality.sample import weights_record  # noqa: PLC0415 - start-up: not loaded by detect

        self.weights = weights_record(group.model)

    def verify_device(self, group) -> dict[str, Any]:
        """FastGen's weights sit on a ``cuda`` device that is the detected GPU, and
        DeepSpeed's accelerator is ``cuda``.

        Raises:
            DeviceMismatch: weights elsewhere, another accelerator, or another GPU model.
        """
        import torch
        from deepspeed.accelerator import get_accelerator

        label = device_label(self.device)
        acc = get_accelerator().device_name()
        params = self.pipe.inference_engine.model.flattened_params
        where = params.device if params is not None else None
        if acc != "cuda" or where is None or where.type != "cuda":
            raise DeviceMismatch(self.name, label, f"DeepSpeed's accelerator is {acc} and FastGen's weights sit on "
                                 f"{where}", str(where), "install a CUDA build of torch and DeepSpeed")
        name = torch.cuda.get_device_name(where.index or 0)
        if not names_match(name, self.device.model):
            raise DeviceMismatch(self.name, label, f"FastGen's weights sit on {where}, a {name}", name,
                                 "make the detected GPU visible (CUDA_VISIBLE_DEVICES)")
        return {"device": str(where), "name": name, "ds_accelerator": acc, "torch": torch.__version__,
                "deepspeed_mii": mii_version()}

    def run(self, cell: Cell, prompts: list[list[int]], deadline_ns: int | None = None) -> RunOutput:
        """Queue ``prompts`` together and step the pipeline until all finish; one record per
        prompt, each token timed at the end of the step that produced it.

        Raises:
            CellTimeout: past ``deadline_ns``; MII cannot abort requests, so the pipeline is
                destroyed and the group's later cells fail with EngineUnavailable.
            EngineUnavailable: the pipeline was destroyed by an earlier timeout.
        """
        import torch
        from mii.batching.data_classes import RequestBatch
        from mii.constants import GenerationFinishReason

        pipe = self.pipe
        if pipe is None:
            raise EngineUnavailable("the MII pipeline was torn down after a cell ran past its time limit (MII cannot "
                                    "abort requests)", hint="raise --cell-timeout, or run the remaining cells again")
        tid = threading.get_ident()
        q: queue.Queue[Any] = queue.Queue()
        pipe.result_queues[tid] = q
        gen = generate_kwargs(cell.output_len)
        for uid, p in enumerate(prompts):
            pipe.request_queue.put(pipe.make_request(tid, uid, torch.tensor(p, dtype=torch.long), dict(gen)))
        times: list[list[int]] = [[] for _ in prompts]
        running = set(range(len(prompts)))
        engine_ns = 0
        t_send = time.perf_counter_ns()
        try:
            while running:
                t0 = time.perf_counter_ns()
                pipe.generate()
                t = time.perf_counter_ns()
                engine_ns += t - t0
                while not q.empty():
                    uid, tokens, _n_in, _n_gen, finish, _stream = q.get()
                    times[uid] += [t] * len(tokens)
                    if finish != GenerationFinishReason.NONE and uid in running:
                        running.discard(uid)
                        pipe._queue_flush_request(uid)
                if running:
                    self.check_deadline(deadline_ns, t)
        except BaseException:
            self.stop()            # MII has no abort: unfinished requests would run into the next cell
            raise
        pipe._bcast_requests(force=True)   # as MIIPipeline.__call__ ends: flush what finished
        pipe.flush(pipe.scheduled_requests.requests_to_flush.uids)
        pipe.scheduled_requests = RequestBatch()
        records = [RequestRecord(t_send_ns=t_send, t_tokens_ns=ts, n_in=len(p), n_out=len(ts), n_out_source="engine")
                   for p, ts in zip(prompts, times)]
        return RunOutput(records=records, engine_s=engine_ns / 1e9)

    def stop(self) -> None:
        """``MIIPipeline.destroy()``: free FastGen's engine and KV cache."""
        pipe, self.pipe = self.pipe, None
        if pipe is not None:
            try:
                pipe.destroy()
            except Exception:  # noqa: BLE001 - already torn down
                pass

    def describe(self) -> dict[str, Any]:
        """MII, DeepSpeed and torch versions, the pipeline arguments and the checkpoint."""
        versions: dict[str, str | None] = {}
        for dist in ("deepspeed-mii", "deepspeed", "torch"):
            try:
                versions[dist] = md.version(dist)
            except md.PackageNotFoundError:
                versions[dist] = None
        return {"name": self.name, "versions": versions, "pipeline_args": getattr(self, "kwargs", None),
                "checkpoint": getattr(self, "path", None), "weights": getattr(self, "weights", None)}


def server_argv(path: str, port: int, tp: int, length: int, deployment: str) -> list[str]:
    """The command line of MII's OpenAI server through the device-logging wrapper
    (:mod:`infbench.engines.mii_serve`); flags of ``mii/entrypoints/openai_api_server.py``."""
    return [sys.executable, "-m", "infbench.engines.mii_serve", "--model", path, "--host", "127.0.0.1", "--port",
            str(port), "--tensor-parallel", str(tp), "--max-length", str(length), "--deployment-name", deployment]


def mii_log_device(log: str) -> dict[str, Any]:
    """The wrapper's device line (``infbench-mii-device: {...}``, JSON) and every
    accelerator DeepSpeed said it set (``Setting ds_accelerator to cuda``) in a server log."""
    m = _WRAPPER.findall(log)
    return {"wrapper": json.loads(m[-1]) if m else None, "ds_accelerators": _DS_ACCEL.findall(log)}


class MiiServerEngine(ManagedServerEngine):
    """``deepspeed-mii-server``: MII's OpenAI server, started by infbench, in serving mode.

    Options: ``startup_timeout_s`` (default 1200: MII starts its model processes and loads
    the checkpoint before the HTTP server answers). See the module docstring.
    """

    name = SERVER
    default_prompt_format = "text"
    stop_grace_s = 30.0

    def start(self, group) -> None:
        """Check the device, write or find the checkpoint, start the server, wait for
        ``/health``, then check ``/v1/models``.

        Raises:
            EngineUnavailable: MII missing, or the server exited or was not healthy in time.
            DeviceMismatch: the device is not a CUDA GPU this torch sees.
            ConfigError: token-id prompts, or a model/dtype MII cannot run.
        """
        if (self.options.prompt_format or "text") != "text":
            raise ConfigError("MII's OpenAI server takes text prompts only (it forwards them as strings)",
                              hint="drop --prompt-format (text is the default for deepspeed-mii-server)")
        self.gpu_name = _refuse_elsewhere(self.name, self.device, self.backends)
        if importlib.util.find_spec("mii") is None:
            raise EngineUnavailable("the deepspeed-mii engines need DeepSpeed-MII", hint=INSTALL)
        self.path, _ = model_folder(group)
        self.deployment = f"infbench-{group.model.name.replace('/', '-')}"
        tp, length = group.tensor_parallel_size, max_length(group)
        self.launch_server(lambda port: server_argv(self.path, port, tp, length, f"{self.deployment}-{port}"),
                           self.options.startup_timeout_s or 1200.0)
        self.metrics_url = None                  # MII serves no Prometheus metrics
        # MII's /v1/completions checks model == --model
        self.options = self.options.model_copy(update={"served_model": self.path})
        from infbench.quality.sample import weights_record  # noqa: PLC0415 - start-up: not loaded by detect

        self.weights = weights_record(group.model)
        super().start(group)

    def map_text(self, text: str) -> str:
        """Text in the dummy vocabulary for a random-weight checkpoint (one token per word,
        :func:`~infbench.engines.gguf_dummy.dummy_text`); a real model's text as it is."""
        m = self._model or getattr(getattr(self, "group", None), "model", None)
        if m is None or m.path:
            return text

        return dummy_text(text, m.vocab)

    def payload(self, cell: Cell, prompt: Any, stream: bool = True) -> dict[str, Any]:
        """The OpenAI client's body without ``temperature``: MII validates it as > 0 and
        samples anyway (``do_sample=True`` is fixed by its server)."""
        body = super().payload(cell, prompt, stream)
        body.pop("temperature", None)
        return body

    def verify_device(self, group) -> dict[str, Any]:
        """The server's log: the wrapper's line names the CUDA device torch sees (the
        detected GPU), and every accelerator DeepSpeed set (API server and model
        processes) is ``cuda``.

        Raises:
            DeviceMismatch: another accelerator, a non-CUDA torch, another GPU, or no such lines.
        """
        log = self.server.log_path.read_text(errors="replace") if self.server else ""
        seen = mii_log_device(log)
        label = device_label(self.device)
        where = f"see {self.server.log_path if self.server else 'the server log'}"
        w = seen["wrapper"] or {}
        others = sorted({a for a in seen["ds_accelerators"] if a != "cuda"})
        if not w.get("cuda") or not seen["ds_accelerators"] or others:
            raise DeviceMismatch(self.name, label, "the server's log does not show DeepSpeed on CUDA (accelerators: "
                                 f"{', '.join(seen['ds_accelerators']) or 'none logged'}; torch CUDA: "
                                 f"{w.get('cuda')})", ", ".join(others) or "an unknown device", where)
        names = w.get("devices") or []
        if not any(names_match(n, self.device.model) for n in names):
            raise DeviceMismatch(self.name, label, f"the server's torch sees {', '.join(names) or 'no GPU'}, not the "
                                 f"detected {self.device.model}", ", ".join(names) or "an unknown device", where)
        return {"device": "cuda", "source": "server log", "name": names[0], "ds_accelerators":
                sorted(set(seen["ds_accelerators"])), "torch": w.get("torch"), "deepspeed_mii": mii_version()}

    def describe(self) -> dict[str, Any]:
        """MII version, the checkpoint, and the server log kept beside the results."""
        d = super().describe()
        d["versions"]["deepspeed-mii"] = mii_version()
        d["checkpoint"] = getattr(self, "path", None)
        d["weights"] = getattr(self, "weights", None)
        return d
