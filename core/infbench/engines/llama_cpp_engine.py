"""llama.cpp engine through llama-cpp-python's C API bindings, batch mode.

The B prompts of a cell go into one ``llama_batch`` as B sequences (seq_id 0..B-1),
prefilled by one ``llama_decode`` call, then decoded together one token per sequence
per step, as llama.cpp's ``examples/batched`` does. Greedy argmax over the logits picks
each next token; EOS is ignored, so every sequence produces exactly ``output_len``
tokens. A token's time is when the step that produced it returned and its argmax was
taken (all sequences of a step share it).

Dummy weights: a GGUF with random values is written from the zoo config
(:mod:`infbench.engines.gguf_dummy`) and cached under ``$INFBENCH_HOME/cache/gguf``.
Real weights: pass a ``.gguf`` file as ``--model``; at a ``--dtype`` other than its own type,
the precision derived from it is loaded (:func:`infbench.quality.quantize.derive`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from infbench.data.engine import Engine, RunOutput
from infbench.data.engine_options import LlamaCppOptions
from infbench.data.errors import ConfigError, DeviceMismatch, EngineUnavailable
from infbench.data.paths import default_home
from infbench.data.schema import Cell, DeviceBackends, DeviceInfo, RequestRecord
from infbench.data.signals import c_callback
from infbench.engines import availability as av
from infbench.engines.availability import (
    UNSUPPORTED,
    USABLE,
    EngineSupport,
    device_label,
    ggml_backend_of,
    ggml_probe,
    local_only,
)
from infbench.engines.builds import llama_cpp_build
from infbench.engines.gguf_dummy import GGUF_DTYPES, dummy_gguf_path
from infbench.libs.llama import Batch, backend, default_threads, load_lines
from infbench.quality.quantize import derive


class LlamaCppEngine(Engine):
    """llama.cpp in process (llama-cpp-python bindings), B sequences per batch.

    Options: ``n_threads`` (default :func:`default_threads`), ``n_gpu_layers``
    (default: all on an accelerator, after checking the build can offload to it; always 0
    on the CPU), ``n_ubatch`` (default 512).
    """

    name = "llama.cpp"
    options_model = LlamaCppOptions
    options: LlamaCppOptions

    def __init__(self, device, options=None):
        super().__init__(device, options)
        self.L: Any = None
        self.model = None
        self.ctx = None
        self.ctx_key: tuple[int, int] | None = None
        self.n_vocab = 0
        self.model_file: str | None = None
        self.load_log: list[str] = []
        self._n_gpu_layers_used = 0

    def start(self, group) -> None:
        """Load the GGUF (written from the zoo config for dummy weights) once for the group.

        Raises:
            EngineUnavailable: llama-cpp-python is not installed.
            ConfigError: unknown dtype, or a file llama.cpp cannot load.
        """
        try:
            import llama_cpp as L
        except ImportError as exc:
            raise EngineUnavailable("the llama.cpp engine needs llama-cpp-python",
                                    hint="pip install 'infbench[llamacpp]'") from exc
        self.L = L
        gpu_layers = self._gpu_layers()  # refuses a device this build cannot offload to, before any GGUF is written
        m = group.model
        if m.path:
            if not m.path.endswith(".gguf"):
                raise ConfigError(f"llama.cpp needs a .gguf file, got {m.path}",
                                  hint="convert it with llama.cpp's convert_hf_to_gguf.py, or use a zoo name")

            # The file itself at its own dtype (q4_1...), else that precision derived from it.
            path = derive(m.path, group.dtype).path
        else:
            if group.dtype not in GGUF_DTYPES:
                raise ConfigError(f"llama.cpp dtype {group.dtype!r} unknown for dummy weights",
                                  hint=f"use one of {', '.join(GGUF_DTYPES)}, or a real .gguf --model for "
                                       "k-quants (q4_k_m, q2_k...)")

            path = dummy_gguf_path(m, group.dtype, default_home() / "cache" / "gguf")
        backend(L)
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = self._n_gpu_layers_used = gpu_layers
        # silences the loading dots; True on Ctrl-C too (False would abort the load)
        self._progress_cb = L.llama_progress_callback(c_callback(lambda _p, _u: True, default=True))
        mp.progress_callback = self._progress_cb
        load_lines.clear()
        self.model = L.llama_model_load_from_file(str(path).encode(), mp)
        self.load_log = list(load_lines)
        if not self.model:
            raise ConfigError(f"llama.cpp could not load {path}", hint="is it a valid GGUF for this llama.cpp version?")
        self.model_file = str(path)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.threads = int(self.options.n_threads or default_threads())
        from infbench.quality.sample import llama_cpp_sample, weights_record, with_sample  # noqa: PLC0415 - start-up: not loaded by detect

        self.weights = with_sample(weights_record(m, path), lambda: llama_cpp_sample(L, self.model, self.threads))

    def _gpu_layers(self) -> int:
        """``n_gpu_layers`` for the device: 0 on the CPU, every layer (999) on an
        accelerator, after checking that this llama.cpp can offload to it.

        Raises:
            DeviceMismatch: a GPU device and a build without GPU offload or without the
                device's ggml backend (before loading), or ``n_gpu_layers`` > 0 asked for a
                CPU device of a build that would honour it.
        """
        g = ggml_probe()
        label = device_label(self.device)
        asked = self.options.n_gpu_layers
        if self.device.kind == "cpu":
            if asked not in (None, 0, "0") and g["gpu_offload"]:
                raise DeviceMismatch(self.name, label, f"n_gpu_layers={asked} would offload layers to "
                                     f"{', '.join(d['name'] for d in g['devices'] if d['type'] != 'cpu')}",
                                     "a GPU", "drop --engine-arg n_gpu_layers for a CPU device")
            return 0
        b = self.backends
        if b is None or not b.ggml:
            raise DeviceMismatch(self.name, label, f"ggml has no backend declared for {self.device.vendor} devices",
                                 "the CPU", None if b is None else b.install.get("llama_cpp"))
        fix = b.install.get("llama_cpp")
        if not g["gpu_offload"]:
            raise DeviceMismatch(self.name, label, f"llama-cpp-python {g['version']} was built without GPU offload "
                                 f"(llama_supports_gpu_offload() is False; ggml backends: "
                                 f"{', '.join(g['backends']) or 'CPU'}), so n_gpu_layers is ignored", "the CPU", fix)

        if g["devices"] and not any(ggml_backend_of(d["name"]) in b.ggml for d in g["devices"]):
            raise DeviceMismatch(self.name, label, f"llama-cpp-python {g['version']} has no {'/'.join(b.ggml)} device "
                                 f"(ggml devices: {', '.join(d['name'] for d in g['devices'])})",
                                 ", ".join(d["name"] for d in g["devices"]), fix)
        return int(asked) if asked is not None else 999

    def verify_device(self, group) -> dict[str, Any]:
        """Every layer sits where the device says (llama.cpp's own ``load_tensors`` report:
        all on the device's GPU backend for an accelerator, all on ``CPU`` with
        ``n_gpu_layers=0`` otherwise), and the GPU's ggml description is the detected model.

        Raises:
            DeviceMismatch: see :func:`infbench.engines.device_proof.check_ggml_placement`.
        """
        from infbench.engines.device_proof import check_ggml_placement, ggml_placement  # noqa: PLC0415 - start-up: not loaded by detect

        desc = {d["name"]: d["description"] for d in ggml_probe()["devices"]}
        proof = check_ggml_placement(self.name, self.device, self.backends, ggml_placement("\n".join(self.load_log)),
                                     desc, "drop --engine-arg n_gpu_layers (default: every layer on the GPU)")
        proof["n_gpu_layers"] = self._n_gpu_layers_used
        return proof

    def _context(self, batch: int, n_tokens: int) -> Any:
        """A context for ``batch`` sequences of ``n_tokens`` each (reused while it fits)."""
        L = self.L
        per_seq = -(-n_tokens // 256) * 256
        key = (batch, per_seq)
        if self.ctx is not None and self.ctx_key == key:
            L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
            return self.ctx
        self._free_ctx()
        cp = L.llama_context_default_params()
        cp.n_ctx = batch * per_seq
        # Sized for the rounded length, so every cell that reuses this context fits
        # (a cell with more tokens but the same rounded length once overflowed the batch).
        cp.n_batch = batch * per_seq
        cp.n_ubatch = self.options.n_ubatch
        cp.n_seq_max = batch
        cp.n_threads = cp.n_threads_batch = self.threads
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise MemoryError(f"llama.cpp could not create a context for {batch} x {per_seq} tokens")
        self.ctx_key = key
        self._batch = Batch(L, batch * per_seq)
        return self.ctx

    def run(self, cell: Cell, prompts: list[list[int]], deadline_ns: int | None = None) -> RunOutput:
        """Prefill all prompts in one decode, then decode B tokens per step."""
        L = self.L
        B, n_in, n_out = len(prompts), cell.input_len, cell.output_len
        ctx = self._context(B, n_in + n_out)
        bt = self._batch
        p = np.asarray(prompts, dtype=np.int32)
        want = np.zeros((B, n_in), np.int8)
        want[:, -1] = 1
        bt.fill(p.ravel(), np.tile(np.arange(n_in, dtype=np.int32), B),
                np.repeat(np.arange(B, dtype=np.int32), n_in), want.ravel())
        seqs = np.arange(B, dtype=np.int32)
        ones = np.ones(B, np.int8)
        times: list[int] = []
        engine_ns = 0
        t_send = time.perf_counter_ns()
        for step in range(n_out):
            t0 = time.perf_counter_ns()
            rc = L.llama_decode(ctx, bt.batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc} at step {step} "
                                   "(1 = no KV slot: context too small; <0 = fatal error)")
            logits = np.ctypeslib.as_array(L.llama_get_logits(ctx), shape=(B, self.n_vocab))
            nxt = logits.argmax(axis=1).astype(np.int32)
            t = time.perf_counter_ns()
            engine_ns += t - t0
            times.append(t)
            self.check_deadline(deadline_ns, t)
            if step + 1 < n_out:
                bt.fill(nxt, np.full(B, n_in + step, np.int32), seqs, ones)
        records = [RequestRecord(t_send_ns=t_send, t_tokens_ns=list(times), n_in=n_in, n_out=len(times))
                   for _ in range(B)]
        return RunOutput(records=records, engine_s=engine_ns / 1e9)

    def _free_ctx(self) -> None:
        if self.ctx is not None:
            self.L.llama_free(self.ctx)
            self.ctx = None
            self.ctx_key = None

    def stop(self) -> None:
        """Free the context and the model (safe to call twice or after a failed start)."""
        if self.L is None:
            return
        self._free_ctx()
        if self.model is not None:
            self.L.llama_model_free(self.model)
            self.model = None

    def describe(self) -> dict[str, Any]:
        """llama-cpp-python version, llama.cpp system info, its build (compiled: ``build``,
        :func:`infbench.engines.builds.llama_cpp_build`), threads, the GGUF used."""
        import llama_cpp


        return {"name": self.name, "versions": {"llama_cpp_python": llama_cpp.__version__},
                "build": llama_cpp_build(),
                "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
                "n_threads": getattr(self, "threads", None), "model_file": self.model_file,
                "weights": getattr(self, "weights", None)}


# --- where this engine runs (EngineSpec.check, shown by `infbench detect`; the probes are read
# through the module, where tests stand them in) ------------------------------------------------

def check_llama_cpp(device: DeviceInfo, backends: DeviceBackends | None) -> EngineSupport:
    """llama.cpp (llama-cpp-python) runs where its ggml has one of the device's backends
    (:attr:`DeviceBackends.ggml`) with a device: ``llama_supports_gpu_offload()`` for GPUs."""
    refused = local_only("llama.cpp", device, backends, "ggml")
    if refused:
        return refused
    assert backends is not None  # local_only refused a missing declaration
    g = av.ggml_probe()
    v = f"llama-cpp-python {g['version']}"
    fix = backends.install.get("llama_cpp")
    if not backends.ggml:
        return EngineSupport("llama.cpp", UNSUPPORTED, f"llama.cpp has no backend for {backends.label} devices")
    if backends.ggml == ["CPU"]:
        return EngineSupport("llama.cpp", USABLE, f"{v} (CPU)", version=g["version"])
    if not g["gpu_offload"]:
        return EngineSupport("llama.cpp", UNSUPPORTED, f"{v} built without GPU offload (ggml backends: "
                             f"{', '.join(g['backends']) or 'CPU'})", fix, g["version"])
    devs = [d for d in g["devices"] if ggml_backend_of(d["name"]) in backends.ggml]
    if g["devices"] and not devs:
        have = ", ".join(d["name"] for d in g["devices"])
        return EngineSupport("llama.cpp", UNSUPPORTED, f"{v} sees no {'/'.join(backends.ggml)} device (ggml devices: "
                             f"{have})", fix, g["version"])
    return EngineSupport("llama.cpp", USABLE, f"{v} ({', '.join(d['name'] for d in devs) or 'GPU offload'})",
                         version=g["version"])
