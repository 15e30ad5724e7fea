"""Proof that an engine runs on the device its cells are planned on, before the first
timed request of each group, and the refusal when it does not.

Every executor starts a group's engine with :func:`start_on_device`: the adapter gets the
device's :class:`~infbench.data.schema.DeviceBackends`, loads the model (``start``; an adapter
refuses there, before loading weights, when the installed library has no build for the
device) and proves where the model sits (``verify_device``: torch parameter devices,
ggml's layer placement, vLLM's platform and device config, a server's own log). Any
:class:`~infbench.data.errors.DeviceMismatch` fails the group before its first request; the
executor stores every cell failed with :func:`group_failure`, which names the device,
where the cells would have run instead and the command that fixes it.

The log parsers below read what the engines themselves print: llama.cpp's
``load_tensors`` lines (``layer N assigned to device CUDA0``, ``offloaded 33/33 layers to
GPU``, ``CUDA0 model buffer size``, ``device_info``) and vLLM's engine config line
(``device_config=cuda``).
"""

from __future__ import annotations

import re
from typing import Any

from infbench.data.errors import DeviceMismatch, describe_error
from infbench.engines.availability import device_label, ggml_backend_of, names_match

_LAYER = re.compile(r"layer\s+(\d+) assigned to device (\S+?),")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER = re.compile(r"load_tensors:\s+(\S+?) model buffer size\s*=\s*([\d.]+) MiB")
_DEVICE_INFO = re.compile(r"-\s+(\S+)\s*:\s+(.+?)\s+\(\d+ MiB, \d+ MiB free\)")
_USING_DEVICE = re.compile(r"using device (\S+) \((.+?)\)(?: \([^)]*\))? - \d+ MiB free")
_VLLM_DEVICE = re.compile(r"device_config=([A-Za-z]+)")


def start_on_device(engine: Any, group: Any, backends: Any = None) -> dict[str, Any]:
    """Start ``engine`` for ``group`` and prove it runs on ``engine.device``.

    Args:
        engine: an :class:`~infbench.data.engine.Engine`, created, not started.
        group: the group (model, dtype, cells).
        backends: the device's :class:`~infbench.data.schema.DeviceBackends`; None lets the
            engine look them up through the process-wide plugin manager.

    Returns:
        The evidence (also kept as ``engine.device_proof`` and stored with every cell).

    Raises:
        DeviceMismatch: the engine would run, or runs, somewhere else.
        Exception: whatever ``start`` raises (missing library, bad model...).
    """
    if backends is not None:
        engine.backends = backends
    engine.start(group)
    proof = engine.verify_device(group)
    engine.device_proof = proof
    return proof


def group_failure(exc: BaseException) -> str:
    """The error stored with every cell of a group whose engine did not start or was
    refused: :meth:`DeviceMismatch.cell_error`, else ``engine start failed: Type: message (at file:line)``."""
    if isinstance(exc, DeviceMismatch):
        return exc.cell_error()
    return f"engine start failed: {describe_error(exc)}"


def ggml_placement(log: str) -> dict[str, Any]:
    """What llama.cpp's loader said about where the model went.

    Args:
        log: llama.cpp log text (the adapter's captured lines, or a server's log file).

    Returns:
        ``{"layers": {layer index: ggml device}, "offloaded": (n, total) or None,
        "buffers": {buffer name: MiB}, "devices": {ggml device: description}}``; empty
        parts when the log does not say (``layer ... assigned`` lines are debug level,
        ``offloaded`` appears only with GPU layers, ``device_info`` only in the server, ``using
        device CUDA0 (name)`` where llama.cpp picks a GPU).
    """
    layers = {int(m.group(1)): m.group(2) for m in _LAYER.finditer(log)}
    off = _OFFLOADED.findall(log)
    buffers = {m.group(1): float(m.group(2)) for m in _BUFFER.finditer(log)}
    devices = {m.group(1): m.group(2).strip() for m in _DEVICE_INFO.finditer(log)}
    for m in _USING_DEVICE.finditer(log):  # INFO level: ``using device CUDA0 (NVIDIA H100 ...) (0000:..) - N MiB free``
        devices.setdefault(m.group(1), m.group(2).strip())
    return {"layers": layers, "offloaded": (int(off[-1][0]), int(off[-1][1])) if off else None,
            "buffers": buffers, "devices": devices}


def check_ggml_placement(engine: str, device: Any, backends: Any, placement: dict[str, Any],
                         descriptions: dict[str, str], fix_layers: str) -> dict[str, Any]:
    """Check llama.cpp's report (:func:`ggml_placement`) against the device.

    A GPU device needs every layer on a ggml device of one of ``backends.ggml`` (from the
    ``layer ... assigned`` lines, else the ``offloaded n/total`` line with ``n == total``)
    whose description names the detected model; a CPU device needs every layer on
    ``CPU`` and no GPU buffer.

    Args:
        engine: engine name, for the error.
        device: the planned :class:`~infbench.data.schema.DeviceInfo`.
        backends: its :class:`~infbench.data.schema.DeviceBackends`.
        placement: :func:`ggml_placement` output.
        descriptions: ggml device name -> description (``CUDA0`` -> ``NVIDIA H100 ...``).
        fix_layers: the fix to show when not every layer was offloaded.

    Returns:
        The evidence: ``{"devices", "layers_on_device", "layers", "buffers_mib", "name"}``.

    Raises:
        DeviceMismatch: layers elsewhere, an unexpected GPU buffer, or another GPU model.
    """
    label = device_label(device)
    layers, off, buffers = placement["layers"], placement["offloaded"], placement["buffers"]
    gpu = device.kind != "cpu"
    want = set(backends.ggml) if gpu and backends is not None else {"CPU"}
    if layers:
        used = sorted(set(layers.values()))
        on = sum(1 for d in layers.values() if ggml_backend_of(d) in want)
        total = len(layers)
    elif off is not None:
        on, total = (off[0] if gpu else off[1] - off[0]), off[1]
        used = sorted(b for b in buffers if not b.upper().startswith("CPU")) or ["CPU"]
    elif not gpu and buffers and all(b.upper().startswith("CPU") for b in buffers):
        on, total, used = 1, 1, ["CPU"]
    else:
        raise DeviceMismatch(engine, label, "llama.cpp did not report where it placed the layers", "an unknown device",
                             "run with -v to see llama.cpp's load log")
    if gpu:
        if on < total:
            instead = ", ".join(sorted({d for d in layers.values() if ggml_backend_of(d) not in want})) or "the CPU"
            raise DeviceMismatch(engine, label, f"only {on}/{total} layers were offloaded to "
                                 f"{'/'.join(sorted(want))}", instead, fix_layers)
        names = [descriptions.get(d, "") for d in used if ggml_backend_of(d) in want]
        if names and not any(names_match(n, device.model) for n in names if n):
            raise DeviceMismatch(engine, label, f"its layers went to {', '.join(used)} ({', '.join(names)}), not the "
                                 f"detected {device.model}", ", ".join(names),
                                 "make the detected GPU visible (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES)")
    else:
        gpu_buffers = [b for b in buffers if not b.upper().startswith("CPU")]
        if on < total or gpu_buffers:
            raise DeviceMismatch(engine, label, f"llama.cpp placed {total - on}/{total} layers off the CPU "
                                 f"({', '.join(gpu_buffers) or ', '.join(used)})", ", ".join(gpu_buffers) or "a GPU",
                                 "use n_gpu_layers=0 on a CPU device (drop --engine-arg n_gpu_layers)")
    name = next((descriptions.get(d) for d in used if descriptions.get(d)), None)
    return {"devices": used, "layers_on_device": f"{on}/{total}", "buffers_mib": buffers, "name": name}


def vllm_log_device(log: str) -> str | None:
    """The torch device type vLLM's engine configured (``device_config=cuda`` in its
    ``Initializing a V1 LLM engine ... with config:`` INFO line), or None if absent."""
    found = _VLLM_DEVICE.findall(log)
    return found[-1].lower() if found else None
