"""Hugging Face transformers engine (the reference implementation): ``generate()`` in
process, with per-token times taken by a streamer.

Dummy weights: ``AutoModelForCausalLM.from_config`` on the zoo config, built on the device
without the library's initialisation and filled there (:mod:`infbench.engines.dummy_weights`).
Real weights: a local HF folder passed as ``--model``, or a ``.gguf`` file (loaded with
``from_pretrained(folder, gguf_file=name)``, dequantized to the dtype). Output length is forced with
``min_new_tokens = max_new_tokens`` and greedy decoding. ``generate`` hands each step's
tokens (shape ``[batch]``) to the streamer after the step's ``.cpu()`` copy, which
synchronises with the device, so the time is when the token exists on the host.
"""

from __future__ import annotations

import time
from typing import Any

from infbench.data.engine import Engine, RunOutput
from infbench.data.engine_options import EngineOptions, TransformersOptions
from infbench.data.errors import ConfigError, DeviceMismatch, EngineUnavailable
from infbench.data.schema import Cell, DeviceBackends, DeviceInfo, RequestRecord
from infbench.engines import availability as av
from infbench.engines.availability import (
    UNSUPPORTED,
    USABLE,
    EngineSupport,
    device_label,
    live_torch_probe,
    local_only,
    names_match,
    torch_backend_problem,
)
from infbench.engines.dummy_weights import build_hf_model

TRANSFORMERS_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


class _TimingStreamer:
    """A ``transformers`` streamer that records ``perf_counter_ns`` per generated step.

    The first ``put`` carries the prompt and is ignored. Raises :class:`CellTimeout`
    from ``put`` once ``deadline_ns`` has passed, which aborts ``generate``.
    """

    def __init__(self, deadline_ns: int | None):
        self.times: list[int] = []
        self._prompt_seen = False
        self.deadline_ns = deadline_ns

    def put(self, value: Any) -> None:
        t = time.perf_counter_ns()
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.times.append(t)
        Engine.check_deadline(self.deadline_ns, t)

    def end(self) -> None:
        pass


class TransformersEngine(Engine):
    """Batch-mode generation with ``transformers`` on the CPU or the device's torch backend
    (CUDA, ROCm, XPU, HPU), refused rather than run on the CPU when torch lacks it.

    Options: ``n_threads`` (torch intra-op threads; default torch's choice);
    ``cache_implementation=static`` (a static KV cache, the setting Hugging Face documents for
    fast generation; transformers then compiles the forward with ``torch.compile``,
    mode ``reduce-overhead``, on CUDA and XPU devices, not on the CPU). With a static cache
    each warm-up pass runs the cell's full length, so compilation and graph capture happen
    at the timed part's shape and outside it; the first warm-up's wall time at a shape is
    stored as ``compile_s``.
    """

    name = "transformers"
    options_model: type[EngineOptions] = TransformersOptions
    options: TransformersOptions

    def __init__(self, device, options=None):
        super().__init__(device, options)
        self.model = None
        self.torch = None
        self.static = False
        self.compile_s: dict[tuple[int, int], float] = {}

    def start(self, group) -> None:
        """Build or load the model at ``group.dtype`` on the device.

        Raises:
            EngineUnavailable: torch/transformers missing.
            ConfigError: an unknown dtype.
        """
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise EngineUnavailable("the transformers engine needs torch and transformers",
                                    hint="pip install 'infbench[transformers]'") from exc
        self.torch = torch
        if group.dtype not in TRANSFORMERS_DTYPES:
            raise ConfigError(f"transformers dtype {group.dtype!r} unknown",
                              hint=f"use one of {', '.join(TRANSFORMERS_DTYPES)}")
        m = group.model
        if self.options.n_threads:
            torch.set_num_threads(self.options.n_threads)
        dtype = getattr(torch, group.dtype)
        self.dev = self._torch_device()
        from infbench.quality.sample import hf_sample, hf_source, hf_tokenizer, weights_record, with_sample  # noqa: PLC0415 - start-up: not loaded by detect

        t0 = time.perf_counter()
        if m.path:  # an HF folder, or a .gguf file that transformers dequantizes to dtype
            model = transformers.AutoModelForCausalLM.from_pretrained(**hf_source(m.path), dtype=dtype)
            self.model = model.to(self.dev).eval()
        else:  # random weights built on the device itself, without the library's initialisation
            cfg = dict(m.config)
            cfg.pop("architectures", None)
            config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
            self.model = build_hf_model(transformers, torch, config, dtype, self.dev, seed=0)
        self.build_s = time.perf_counter() - t0
        ci = self.options.cache_implementation
        if ci not in (None, "", "dynamic", "static"):
            raise ConfigError(f"transformers cache_implementation {ci!r} is not supported by infbench",
                              hint="use --engine-arg cache_implementation=static (or leave it out for the dynamic "
                                   "cache)")
        self.static = ci == "static"
        gc = self.model.generation_config
        if gc.pad_token_id is None:
            gc.pad_token_id = 0
        if self.static:
            gc.cache_implementation = "static"
        self.weights = with_sample(weights_record(m), lambda: hf_sample(self.model, hf_tokenizer(m.path), self.dev))

    def _torch_device(self) -> str:
        """The torch device of :attr:`device`: ``cpu`` on the CPU, else the device type of
        its torch build (``cuda`` for CUDA and ROCm, ``xpu``, ``hpu``) with index 0. Never a
        silent CPU fallback.

        Raises:
            DeviceMismatch: the installed torch has no build for the device (before any
                weights are loaded).
        """
        if self.device.kind == "cpu":
            return "cpu"
        b = self.backends
        label = device_label(self.device)
        if b is None or b.torch is None:
            raise DeviceMismatch(self.name, label, f"the {self.device.vendor} plugin declares no PyTorch build for "
                                 "its devices", "the CPU", f"upgrade the infbench-{self.device.vendor} plugin")
        problem = torch_backend_problem(live_torch_probe(), b.torch)
        if problem:
            raise DeviceMismatch(self.name, label, problem, "the CPU", b.install.get("torch"))
        return {"cuda": "cuda", "hip": "cuda", "xpu": "xpu", "hpu": "hpu"}[b.torch] + ":0"

    def verify_device(self, group) -> dict[str, Any]:
        """Every parameter and buffer sits on the torch device of :attr:`device`, and that
        device's name (``torch.cuda.get_device_name``) is the detected model's.

        Raises:
            DeviceMismatch: a tensor elsewhere, or torch's device is another GPU model.
        """
        torch = self.torch
        want = torch.device(self.dev)
        tensors = list(self.model.parameters()) + list(self.model.buffers())
        where = sorted({str(t.device) for t in tensors})
        label = device_label(self.device)
        if any(t.device.type != want.type for t in tensors):
            raise DeviceMismatch(self.name, label, f"model tensors sit on {', '.join(where)}, not {want.type}",
                                 ", ".join(where), "report this: the model was not moved to the device")
        proof: dict[str, Any] = {"device": ", ".join(where), "tensors": len(tensors), "torch": torch.__version__}
        if want.type != "cpu":
            mod = getattr(torch, want.type)
            name = str(mod.get_device_name(want.index or 0))
            proof["name"] = name
            if not names_match(name, self.device.model):
                raise DeviceMismatch(self.name, label, f"torch's {want} is a {name}, not the detected "
                                     f"{self.device.model}", name, "make the detected GPU visible "
                                     "(CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES / ZE_AFFINITY_MASK)")
        return proof

    def warmup(self, cell: Cell, prompts: list[list[int]]) -> RunOutput | None:
        """One untimed block and its records: the default block (the output shortened), or
        with a static cache the cell's full length, so the forward is compiled for the timed
        part's cache shape; the first pass at a shape is kept as that shape's ``compile_s``."""
        if not self.static:
            return super().warmup(cell, prompts)
        shape = (len(prompts), cell.input_len + cell.output_len)
        t0 = time.perf_counter()
        out = self.run(cell, prompts)
        self.compile_s.setdefault(shape, time.perf_counter() - t0)
        return out

    def run(self, cell: Cell, prompts: list[list[int]], deadline_ns: int | None = None) -> RunOutput:
        """Generate ``cell.output_len`` tokens for the batch of ``prompts`` (one generate call)."""
        torch = self.torch
        ids = torch.tensor(prompts, dtype=torch.long, device=self.dev)
        mask = torch.ones_like(ids)
        streamer = _TimingStreamer(deadline_ns)
        with torch.inference_mode():
            t_send = time.perf_counter_ns()
            out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=cell.output_len,
                                      min_new_tokens=cell.output_len, do_sample=False, streamer=streamer)
            t_end = time.perf_counter_ns()
        n_out = int(out.shape[1] - ids.shape[1])
        records = [RequestRecord(t_send_ns=t_send, t_tokens_ns=list(streamer.times), n_in=len(p), n_out=n_out)
                   for p in prompts]
        out = RunOutput(records=records, engine_s=(t_end - t_send) / 1e9)
        if self.static:
            shape = (len(prompts), cell.input_len + cell.output_len)
            if shape in self.compile_s:
                out.metrics["compile_s"] = round(self.compile_s[shape], 4)
            elif deadline_ns is not None or cell.warmup == 0:
                out.warnings.append("static cache without a warm-up: the first generate at this shape compiled "
                                    "inside the timed part")
        return out

    def stop(self) -> None:
        """Drop the model and empty the CUDA cache if one was used."""
        self.model = None
        if self.torch is not None and self.torch.cuda.is_available():
            self.torch.cuda.empty_cache()

    def describe(self) -> dict[str, Any]:
        """Versions of transformers and torch, and the torch device used."""
        import torch
        import transformers

        return {"name": self.name, "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
                "torch_device": getattr(self, "dev", None), "torch_threads": torch.get_num_threads(),
                "cache_implementation": "static" if self.static else "dynamic",
                "compiled": bool(self.static and getattr(self, "dev", "cpu").split(":")[0] in ("cuda", "xpu")),
                "build_s": round(getattr(self, "build_s", 0.0), 3),
                "weights": getattr(self, "weights", None)}


# --- where this engine runs (EngineSpec.check, shown by `infbench detect`; the probes are read
# through the module, where tests stand them in) ------------------------------------------------

def check_transformers(device: DeviceInfo, backends: DeviceBackends | None) -> EngineSupport:
    """transformers runs where torch has the device's backend (:attr:`DeviceBackends.torch`)."""
    refused = local_only("transformers", device, backends, "PyTorch")
    if refused:
        return refused
    assert backends is not None  # local_only refused a missing declaration
    if backends.torch is None:
        return EngineSupport("transformers", UNSUPPORTED, f"PyTorch has no backend for {backends.label} devices")
    t = av.torch_probe()
    problem = torch_backend_problem(t, backends.torch)
    if problem:
        return EngineSupport("transformers", UNSUPPORTED, problem, backends.install.get("torch"), t["version"])
    return EngineSupport("transformers", USABLE, f"torch {t['version']} ({backends.torch})", version=t["version"])
