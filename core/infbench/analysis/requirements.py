"""Platform requirements for a use case's SLOs, and hardware that does not exist yet
(GenZ, Bambhaniya et al. 2024, Sec. VI "platform requirements").

:func:`requirements` answers "what compute, memory bandwidth and memory capacity does
serving model M at batch B need to meet this TTFT and TPOT?": with ``eff_c``/``eff_m`` the
efficiency factors (:class:`~infbench.analysis.predict.Efficiency`) and ``a + b B`` the
per-step overhead,

* **compute** ``= prefill FLOPs of B x n_in tokens / (eff_c x (TTFT - a))`` (the prefill is
  compute-bound at any useful batch: GenZ sizes compute from TTFT);
* **bandwidth** ``= bytes of the last decode step (context n_in + n_out) / (eff_m x (TPOT
  - a - b B))`` (decode is memory-bound: GenZ sizes bandwidth from TPOT, at the longest
  context so every step meets it);
* **capacity** ``= weights + KV cache of B x (n_in + n_out) tokens`` (GenZ's capacity:
  the batch must fit without waves).

Each figure assumes the other resources are unlimited, as GenZ's do; :func:`requirements`
then predicts TTFT and TPOT on a device with exactly those three figures (the roofline
takes the max per operator, so the pair can miss a little where an operator is bound by
the other resource) and gives the factor ``scale`` by which all three must grow for the
prediction to meet both SLOs.

:func:`custom_limits` builds the :class:`~infbench.analysis.roofline.Limits` of a device
that may not exist: a ``devices.yaml``-style file (``--device-file``) and/or
``--set KEY=VALUE`` overrides of a described device.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from infbench.analysis.predict import Efficiency, default_efficiency, predict, serving_for
from infbench.analysis.predict_inputs import parse_sets as _checked_sets
from infbench.analysis.roofline import (
    Limits,
    RooflineError,
    act_bytes,
    decode_ops,
    pass_totals,
    prefill_ops,
    weight_bytes,
)
from infbench.data import metrics as M
from infbench.data.engine import precision_of
from infbench.data.errors import ConfigError
from infbench.data.models import ModelShape
from infbench.detect.devices import load_device_specs

#: ``--set`` keys and what they set (units of ``devices.yaml``).
SET_KEYS = {
    "memory_bandwidth_tb_s": "peak memory bandwidth, TB/s",
    "memory_gib": "memory per device, GiB",
    "memory_gb": "memory per device, GB (10^9 B)",
    "link_bandwidth_gb_s": "device-to-device bandwidth, one direction, GB/s",
    "peak_<precision>_tflops": "dense peak for a precision class (fp32, fp16, bf16, fp8, int8, int4), TFLOP/s",
}


def parse_sets(items: list[str] | None) -> dict[str, float]:
    """``["memory_bandwidth_tb_s=8", "peak_bf16_tflops=2500"]`` -> a dict of floats
    (:func:`infbench.analysis.predict_inputs.parse_sets`: known keys, values within the
    devices' physical bounds in both directions).

    Raises:
        ConfigError: an item without ``=``, an unknown key or a value out of bounds.
    """
    return _checked_sets(items)


def custom_limits(base: Limits | None = None, sets: dict[str, float] | None = None, device_file: Path | None = None,
                  ident: str | None = None) -> Limits:
    """The limits of a hypothetical device: a described one (``base``) or the first (or
    ``ident``) entry of a ``devices.yaml``-style ``device_file``, with ``sets`` applied.

    Raises:
        ConfigError: nothing to start from (no base, no file, and not both a bandwidth
            and a peak in ``sets``), an unreadable file, or an id not in it.
    """
    sets = sets or {}
    if device_file is not None:
        specs = load_device_specs(device_file)
        if not specs:
            raise ConfigError(f"{device_file} describes no device")
        chosen = specs[0] if ident is None else next((s for s in specs if s.id.lower() == ident.lower()), None)
        if chosen is None:
            raise ConfigError(f"{device_file} has no device {ident!r}", hint=f"ids: {', '.join(s.id for s in specs)}")
        try:
            base = Limits.from_info(chosen.per_device())
        except RooflineError as exc:
            raise ConfigError(f"{device_file}: {exc}") from exc
    if base is None:
        peaks = {k[len("peak_"):-len("_tflops")]: v * 1e12 for k, v in sets.items() if k.startswith("peak_")}
        if "memory_bandwidth_tb_s" not in sets or not peaks:
            raise ConfigError("a device that does not exist needs at least a bandwidth and a peak rate",
                              hint="--set memory_bandwidth_tb_s=8 --set peak_bf16_tflops=2500 (or --device ID to "
                                   "start from a described device, or --device-file my.yaml)")
        base = Limits(id="custom", bandwidth_bytes_s=sets["memory_bandwidth_tb_s"] * 1e12, peak_flops=peaks)
    peaks = dict(base.peak_flops)
    peaks.update({k[len("peak_"):-len("_tflops")]: v * 1e12 for k, v in sets.items() if k.startswith("peak_")})
    mem = base.memory_bytes
    if "memory_gib" in sets:
        mem = sets["memory_gib"] * 2**30
    if "memory_gb" in sets:
        mem = sets["memory_gb"] * 1e9
    changed = sorted(sets)
    return replace(base, id=base.id + ("+" + ",".join(changed) if changed and base.id != "custom" else ""),
                   bandwidth_bytes_s=sets.get("memory_bandwidth_tb_s", base.bandwidth_bytes_s / 1e12) * 1e12,
                   peak_flops=peaks, memory_bytes=mem,
                   link_bytes_s=(sets["link_bandwidth_gb_s"] * 1e9 if "link_bandwidth_gb_s" in sets
                                 else base.link_bytes_s),
                   source=(base.source + "; " if base.source else "") + "what-if: " + (
                       ", ".join(f"{k}={sets[k]:g}" for k in changed) or "from file"))


def requirements(m: ModelShape, batch: int, n_in: int, n_out: int, slo_ttft_s: float, slo_tpot_s: float,
                 dtype: str = "bf16", eff: Efficiency | None = None, engine: str = "generic",
                 device_id: str = "") -> dict[str, Any]:
    """Compute, bandwidth and capacity one model instance needs to meet the SLOs (module doc).

    Args:
        m: model shape.
        batch: sequences served together.
        n_in, n_out: tokens in and out per request.
        slo_ttft_s, slo_tpot_s: the use case's limits (s).
        dtype: precision class or engine dtype.
        eff: efficiency factors (default: :func:`default_efficiency` of ``device_id``).
        engine: the engine whose scheduling the check prediction models.
        device_id: device id for the default factors (``a100-40gb``...); empty: generic.

    Returns:
        ``{"compute_pflop_s", "bandwidth_tb_s", "capacity_gb", "prefill_flops",
        "decode_bytes_per_step", "weights_gb", "kv_cache_gb", "check": {"ttft_s",
        "tpot_s", "meets_slo"}, "scale", "efficiency"}``; compute/bandwidth are None
        when the overheads alone exceed the SLO.

    Raises:
        ConfigError: a non-positive SLO.
    """
    if slo_ttft_s <= 0 or slo_tpot_s <= 0:
        raise ConfigError("SLOs must be positive")
    eff = eff or default_efficiency(device_id)
    precision = precision_of(dtype.lower())
    pf, _ = pass_totals(prefill_ops(m, precision, dtype, batch, n_in))
    _, db = pass_totals(decode_ops(m, precision, dtype, batch, n_in + n_out, 0))
    ttft_budget = slo_ttft_s - eff.overhead_s - eff.prefill_overhead_s * batch
    tpot_budget = slo_tpot_s - eff.overhead_s - eff.overhead_per_seq_s * batch
    compute = float(pf) / (eff.eff_compute * ttft_budget) if ttft_budget > 0 else None
    bandwidth = float(db) / (eff.eff_memory * tpot_budget) if tpot_budget > 0 else None
    weights = m.param_counts()["total"] * weight_bytes(dtype, precision)
    kv = batch * (n_in + n_out) * 2 * m.layers * m.kv_heads * m.head_dim * act_bytes(precision)
    out: dict[str, Any] = {
        "model": m.name, "batch": batch, "input_len": n_in, "output_len": n_out, "dtype": dtype,
        "slo_ttft_s": slo_ttft_s, "slo_tpot_s": slo_tpot_s,
        "compute_pflop_s": compute / 1e15 if compute else None,
        "bandwidth_tb_s": bandwidth / 1e12 if bandwidth else None,
        "capacity_gb": (weights + kv) / 1e9, "weights_gb": weights / 1e9, "kv_cache_gb": kv / 1e9,
        "prefill_flops": float(pf), "decode_bytes_per_step": float(db), "efficiency": eff.__dict__,
        "check": None, "scale": None,
    }
    if compute is None or bandwidth is None:
        return out
    precision_key = "bf16" if precision not in ("fp32", "fp8", "int8", "int4") else precision
    lim = Limits("required", bandwidth, {precision_key: compute, precision: compute})
    sv = replace(serving_for(engine), memory_fraction=1.0, reserve_bytes=0.0, max_num_seqs=None)
    # TPOT is checked at the last step (the longest context), as the bandwidth was sized.
    ttft = float(predict(m, lim, batch, n_in, n_out, 1, dtype, eff, serving=sv)[M.TTFT.key])
    tpot = float(predict(m, lim, batch, n_in + n_out - 1, 2, 1, dtype, eff, serving=sv)[M.TPOT.key])
    scale = 1.0
    for _ in range(60):
        if ttft <= slo_ttft_s * (1 + 1e-9) and tpot <= slo_tpot_s * (1 + 1e-9):
            break
        scale *= max(ttft / slo_ttft_s, tpot / slo_tpot_s, 1.01)
        big = replace(lim, bandwidth_bytes_s=bandwidth * scale, peak_flops={k: v * scale for k, v in
                                                                            lim.peak_flops.items()})
        ttft = float(predict(m, big, batch, n_in, n_out, 1, dtype, eff, serving=sv)[M.TTFT.key])
        tpot = float(predict(m, big, batch, n_in + n_out - 1, 2, 1, dtype, eff, serving=sv)[M.TPOT.key])
    meets = bool(np.isfinite(ttft) and ttft <= slo_ttft_s * 1.001 and tpot <= slo_tpot_s * 1.001)
    out["check"] = {M.TTFT.key: ttft, M.TPOT.key: tpot, "meets_slo": meets}
    out["scale"] = scale
    return out


def devices_meeting(req: dict[str, Any], catalog_limits: dict[str, Limits], precision: str = "bf16",
                    max_devices: int = 64) -> list[dict[str, Any]]:
    """Per described device, the fewest devices whose summed compute, bandwidth and
    memory cover ``req`` (a tensor-parallel group, communication left out), up to
    ``max_devices``; sorted by that count."""
    out = []
    for ident, lim in catalog_limits.items():
        try:
            peak, _ = lim.peak(precision)
        except Exception:  # noqa: BLE001 - a device without that precision's rate is skipped
            continue
        need = []
        if req.get("compute_pflop_s"):
            need.append(req["compute_pflop_s"] * 1e15 / peak)
        if req.get("bandwidth_tb_s"):
            need.append(req["bandwidth_tb_s"] * 1e12 / lim.bandwidth_bytes_s)
        if lim.memory_bytes:
            need.append(req["capacity_gb"] * 1e9 / lim.memory_bytes)
        n = int(np.ceil(max(need))) if need else None
        if n is not None and n <= max_devices:
            out.append({"device": ident, "devices": max(n, 1)})
    return sorted(out, key=lambda r: (r["devices"], r["device"]))
