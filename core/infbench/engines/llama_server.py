"""llama.cpp's OpenAI-compatible server, started by infbench and driven in serving mode.

The server is the ``xllamacpp`` wheel (prebuilt llama.cpp with its HTTP server), run as a
subprocess by :mod:`infbench.engines.xllamacpp_serve` on 127.0.0.1 with as many slots as
the group's highest concurrency. Requests go through :class:`~infbench.engines.openai.
OpenAIEngine` with token-id prompts (the model's vocabulary is known), so prompt lengths
are exact. The server reports ``usage`` and its own ``timings`` (prompt_ms, predicted_ms)
in the last event; both are stored with each request.
"""

from __future__ import annotations

import sys
from typing import Any

from infbench.data.engine_options import LlamaServerOptions
from infbench.data.errors import ConfigError, DeviceMismatch, EngineUnavailable
from infbench.data.paths import default_home
from infbench.data.schema import DeviceBackends, DeviceInfo
from infbench.engines import availability as av
from infbench.engines import llama_bundle as lb
from infbench.engines.availability import (
    UNSUPPORTED,
    USABLE,
    EngineSupport,
    device_label,
    ggml_backend_of,
    local_only,
)
from infbench.engines.builds import xllamacpp_build
from infbench.engines.gguf_dummy import GGUF_DTYPES, dummy_gguf_path, dummy_text
from infbench.engines.server_process import ManagedServerEngine, slots_needed
from infbench.libs.llama import default_threads
from infbench.quality.quantize import derive


class LlamaServerEngine(ManagedServerEngine):
    """``llama.cpp-server``: a managed llama.cpp server. Options: ``n_threads`` (default
    :func:`~infbench.libs.llama.default_threads`: the CPUs this process may use, at most the
    physical cores, as the in-process engine; llama-server's own default counts the host's cores
    whatever the affinity, and two spinning threads on one allowed CPU ran the quick preset
    2-3x slower), ``parallel`` (slots; default from the group), ``startup_timeout_s`` (default
    120)."""

    name = "llama.cpp-server"
    options_model = LlamaServerOptions
    options: LlamaServerOptions

    def start(self, group) -> None:
        """Write/locate the GGUF, start the server (the configured ``llama-server`` binary,
        :func:`~infbench.engines.llama_bundle.configured_binary`, else the xllamacpp wheel),
        wait for ``/health``, then check ``/v1/models``.

        Raises:
            ConfigError: a named binary that is missing, or whose bundle manifest does not
                match it (:func:`~infbench.engines.llama_bundle.read_manifest`).
            EngineUnavailable: no binary and no xllamacpp.
        """
        found = lb.configured_binary(self.options.server_binary)
        self.binary = found
        self.bundle = lb.read_manifest(found[0]) if found else None
        if found is None:
            try:
                import xllamacpp  # noqa: F401
            except ImportError as exc:
                raise EngineUnavailable("the llama.cpp-server engine needs xllamacpp or a llama-server binary",
                                        hint="pip install xllamacpp (an infbench dependency: reinstall infbench), or "
                                             "--engine-arg server_binary=PATH") from exc

        m = group.model
        if m.path:
            if not m.path.endswith(".gguf"):
                raise ConfigError(f"llama.cpp needs a .gguf file, got {m.path}")

            path = str(derive(m.path, group.dtype).path)  # the file at its own dtype, else derived from it
        else:
            if group.dtype not in GGUF_DTYPES:
                raise ConfigError(f"llama.cpp dtype {group.dtype!r} unknown",
                                  hint=f"use one of {', '.join(GGUF_DTYPES)}")
            path = str(dummy_gguf_path(m, group.dtype, default_home() / "cache" / "gguf"))
        self._check_devices()
        parallel = self.options.parallel or slots_needed(group.cells)
        per_slot = max(c.longest() for c in group.cells) + 16
        per_slot = -(-per_slot // 256) * 256
        timeout = self.options.startup_timeout_s or 120.0
        threads = self.threads = int(self.options.n_threads or default_threads())
        if found is not None:
            binary, gpu = found[0], self.device.kind != "cpu"
            self.launch_server(lambda port: lb.server_argv(binary, path, port, parallel, parallel * per_slot,
                                                           threads, gpu, self.options.n_ubatch),
                               timeout, env=lb.server_env(binary))
        else:
            extra = ["--threads", str(threads)]
            if self.device.kind != "cpu":
                extra += ["--n-gpu-layers", "999"]
            extra += ["--verbosity", "4"]  # the loader's report (devices, offloaded layers) for verify_device
            if self.options.n_ubatch:
                extra += ["--ubatch", str(self.options.n_ubatch)]
            self.launch_server(lambda port: [sys.executable, "-m", "infbench.engines.xllamacpp_serve", "--model",
                                             path, "--port", str(port), "--parallel", str(parallel),
                                             "--ctx", str(parallel * per_slot), *extra], timeout)
        if self.options.served_model is None:
            self.options = self.options.model_copy(update={"served_model": path})
        self.parallel = parallel
        from infbench.quality.sample import weights_record  # noqa: PLC0415 - start-up: not loaded by detect

        self.weights = weights_record(m, path)
        super().start(group)

    def _check_devices(self) -> None:
        """Refuse, before the server starts, an accelerator that this xllamacpp build has no
        device for (a CPU wheel on a GPU node would serve from the CPU).

        Raises:
            DeviceMismatch: no ggml device of the device's backends in this build.
        """
        if self.device.kind == "cpu":
            return

        s = check_llama_server(self.device, self.backends, self.options.server_binary)
        if not s.usable:
            raise DeviceMismatch(self.name, device_label(self.device), s.reason, "the CPU", s.fix)

    def verify_device(self, group) -> dict[str, Any]:
        """The server's own log (llama.cpp's loader at verbosity 4: ``device_info``,
        ``offloaded n/total layers to GPU``, ``<device> model buffer size``) shows every layer
        on the device's GPU backend for an accelerator, no GPU buffer on the CPU.

        Raises:
            DeviceMismatch: see :func:`infbench.engines.device_proof.check_ggml_placement`.
        """
        from infbench.engines.device_proof import check_ggml_placement, ggml_placement  # noqa: PLC0415 - start-up: not loaded by detect

        log = self.server.log_path.read_text(errors="replace") if self.server else ""
        placement = ggml_placement(log)
        proof = check_ggml_placement(self.name, self.device, self.backends, placement, placement["devices"],
                                     "drop --engine-arg n_gpu_layers (every layer goes to the GPU)")
        proof["source"] = "server log"
        return proof

    def map_text(self, text: str) -> str:
        """For a dummy GGUF, text (conversations, ``--prompt-format text``) is mapped word for
        word into the dummy vocabulary (:func:`~infbench.engines.gguf_dummy.dummy_text`),
        which cannot spell arbitrary text; a real GGUF gets the text as it is."""
        m = self._model or getattr(getattr(self, "group", None), "model", None)
        if m is None or m.path:
            return text

        return dummy_text(text, m.vocab)

    def describe(self) -> dict[str, Any]:
        """xllamacpp version, its build (prebuilt: ``build``,
        :func:`infbench.engines.builds.xllamacpp_build`), slots, threads (``n_threads``), and the
        server log kept beside the results."""
        d = super().describe()
        d["parallel"] = getattr(self, "parallel", None)
        d["n_threads"] = getattr(self, "threads", None)
        found = getattr(self, "binary", None)
        if found is not None:
            bundle = getattr(self, "bundle", None)
            d["server_binary"] = {"path": str(found[0]), "source": found[1]}
            d["build"] = ({k: v for k, v in bundle.items() if k != "files"}
                          | {"sha256": bundle["files"].get(found[0].name, {}).get("sha256")}) if bundle else None
        else:
            import xllamacpp


            d["versions"]["xllamacpp"] = xllamacpp.__version__
            d["build"] = xllamacpp_build()
        d["weights"] = getattr(self, "weights", None)
        return d


# --- where this engine runs (EngineSpec.check, shown by `infbench detect`; the probes are read
# through the module, where tests stand them in) ------------------------------------------------

def check_llama_server(device: DeviceInfo, backends: DeviceBackends | None,
                       server_binary: str | None = None) -> EngineSupport:
    """llama.cpp's server runs where it sees a device of one of the device's ggml backends:
    the xllamacpp wheel's devices, or, for a configured ``llama-server`` binary
    (:func:`check_server_binary`), a binary that runs (``--version``) and, on an NVIDIA
    device, a driver whose ``libcuda`` loads."""
    refused = local_only("llama.cpp-server", device, backends, "ggml")
    if refused:
        return refused
    assert backends is not None  # local_only refused a missing declaration

    try:
        found = lb.configured_binary(server_binary)
    except ConfigError as exc:
        return EngineSupport("llama.cpp-server", UNSUPPORTED, exc.message, exc.hint)
    if found is not None:
        return check_server_binary(found[0], backends)
    x = av.xllamacpp_probe()
    v = f"xllamacpp {x['version']}"
    if backends.ggml == ["CPU"]:
        return EngineSupport("llama.cpp-server", USABLE, f"{v} (CPU)", version=x["version"])
    devs = [d for d in x["devices"] if ggml_backend_of(d["name"]) in backends.ggml and d["type"] != "cpu"]
    if not devs:
        have = ", ".join(d["name"] for d in x["devices"]) or "none"
        return EngineSupport("llama.cpp-server", UNSUPPORTED, f"{v} is a build without {'/'.join(backends.ggml)} "
                             f"(devices: {have})", backends.install.get("xllamacpp"), x["version"])
    return EngineSupport("llama.cpp-server", USABLE, f"{v} ({', '.join(d['name'] for d in devs)})",
                         version=x["version"])


def check_server_binary(binary, backends: DeviceBackends) -> EngineSupport:
    """A configured ``llama-server`` binary: usable when ``binary --version`` exits 0 in
    :func:`~infbench.engines.llama_bundle.server_env` (its libraries load) and, for the CUDA
    backend, the driver's ``libcuda.so.1`` loads here; its bundle manifest (if any) names the
    build. Which GPU it sees is proven per group from its log (:meth:`LlamaServerEngine.verify_device`)."""
    ok, version = lb.binary_version(binary)
    if not ok:
        return EngineSupport("llama.cpp-server", UNSUPPORTED, f"{binary} does not run: {version}",
                             "run it under scripts/build_llama_cuda.sh's bundle/run.sh to see the missing library")
    label = f"{binary.name} {version}".strip()
    if "CUDA" in backends.ggml:
        loads, why = lb.libcuda_loads()
        if not loads:
            return EngineSupport("llama.cpp-server", UNSUPPORTED, f"{label}: the NVIDIA driver's libcuda does not "
                                 f"load ({why})", "install the NVIDIA driver", version)
    return EngineSupport("llama.cpp-server", USABLE, f"{label} ({'/'.join(backends.ggml)})", version=version)
