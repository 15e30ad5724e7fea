"""NVML access: device groups, precisions by compute capability, and the power sampler.

Every function takes the NVML module (``pynvml`` from ``nvidia-ml-py``) as an argument,
so the logic runs the same against the real library and against a stand-in in tests (written
from NVML's documented API, not captured from a GPU).
NVML references: NVML API Reference Guide, "Device Queries" (nvmlDeviceGetTotalEnergyConsumption,
nvmlDeviceGetPowerUsage, nvmlDeviceGetFieldValues, nvmlDeviceGetUtilizationRates,
nvmlDeviceGetClockInfo, nvmlDeviceGetTemperature, nvmlDeviceGetCurrentClocksEventReasons) and
nvml.h (``NVML_FI_DEV_POWER_INSTANT``, ``NVML_POWER_SCOPE_MODULE``, ``nvmlClocksEventReason*``).
"""

from __future__ import annotations

from collections import defaultdict
from types import ModuleType
from typing import Any

from infbench.plugin import ChannelReading, DeviceInfo, DeviceState, PowerReading, PowerSampler, now_ns

#: Clock event (throttle) reasons that lower the clocks below what was asked, by their
#: bit in ``nvmlDeviceGetCurrentClocksEventReasons`` (nvml.h ``nvmlClocksEventReason*``).
#: GPU idle (0x1), application clocks (0x2), sync boost (0x10) and display clock (0x100)
#: are left out: they are settings or idleness, not a limit hit under load.
THROTTLE_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown",
                    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x200: "board_limit",
                    0x400: "reliability"}


class NvmlUnavailable(Exception):
    """NVML cannot be used here (no library, no driver, no GPU); the message says which."""


def load_nvml() -> ModuleType:
    """Import ``pynvml`` (nvidia-ml-py) and call ``nvmlInit``.

    Raises:
        NvmlUnavailable: the binding is not installed, or libnvidia-ml.so is missing
            (``NVMLError_LibraryNotFound``), or the driver is not loaded.
    """
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from exc
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses; the library may be absent entirely
        raise NvmlUnavailable(f"NVML: {exc}") from exc
    return pynvml


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def precisions_for_cc(major: int, minor: int) -> list[str]:
    """Precision classes with tensor-core (or native) support for a compute capability.

    * 7.0-7.5 (V100, T4): fp32, fp16, int8.
    * 8.0-8.7 (A100, A10, Orin): adds bf16 and int4 (W4A16 kernels); no fp8
      (A100 runs int8 w8a16 but has no FP8 tensor cores).
    * 8.9 (L4, L40S) and 9.0+ (H100, H200, GH200, Blackwell): adds fp8.
    * older: fp32 and fp16.

    Source: CUDA C++ Programming Guide, "Compute Capabilities" (tensor core data types),
    and the A100/H100 datasheets.
    """
    cc = (major, minor)
    if cc < (7, 0):
        return ["fp32", "fp16"]
    out = ["fp32", "fp16", "int8"]
    if cc >= (8, 0):
        out += ["bf16", "int4"]
    if cc >= (8, 9):
        out.append("fp8")
    return out


def device_groups(nvml: ModuleType) -> list[DeviceInfo]:
    """One :class:`DeviceInfo` per group of identical GPUs (same name and memory).

    Properties: ``indices`` (NVML indices), ``uuids``, ``compute_capability`` ("9.0"),
    ``mig_mode`` (enabled/disabled/unsupported), ``cuda_driver_version`` ("12.4"),
    ``power_limit_w``, ``grace_hopper`` (True on GH200: module power covers CPU+GPU).
    """
    n = nvml.nvmlDeviceGetCount()
    driver = _s(nvml.nvmlSystemGetDriverVersion())
    try:
        v = nvml.nvmlSystemGetCudaDriverVersion()
        cuda = f"{v // 1000}.{v % 1000 // 10}"
    except Exception:  # noqa: BLE001 - optional detail
        cuda = None
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for i in range(n):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        name = _s(nvml.nvmlDeviceGetName(h))
        mem = int(nvml.nvmlDeviceGetMemoryInfo(h).total)
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(h)
            mig = "enabled" if current else "disabled"
        except Exception:  # noqa: BLE001 - NVML_ERROR_NOT_SUPPORTED on GPUs without MIG
            mig = "unsupported"
        try:
            limit_w = nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
        except Exception:  # noqa: BLE001
            limit_w = None
        try:
            pci = _s(nvml.nvmlDeviceGetPciInfo(h).busId)
        except Exception:  # noqa: BLE001
            pci = None
        groups[(name, mem)].append({"index": i, "uuid": _s(nvml.nvmlDeviceGetUUID(h)), "cc": f"{major}.{minor}",
                                    "mig": mig, "limit_w": limit_w, "pci": pci})
    out = []
    for (name, mem), gs in groups.items():
        out.append(DeviceInfo(
            vendor="nvidia", kind="gpu", model=name, count=len(gs), memory_bytes=mem, driver=driver,
            pci_ids=[g["pci"] for g in gs if g["pci"]],
            properties={"indices": [g["index"] for g in gs], "uuids": [g["uuid"] for g in gs],
                        "compute_capability": gs[0]["cc"], "mig_mode": gs[0]["mig"],
                        "cuda_driver_version": cuda, "power_limit_w": gs[0]["limit_w"],
                        "grace_hopper": "gh200" in name.lower()},
        ))
    return out


def field_value(nvml: ModuleType, fv: Any) -> float:
    """The number in an ``nvmlFieldValue_t`` according to its ``valueType``.

    Raises:
        ValueError: the field's ``nvmlReturn`` is not NVML_SUCCESS (unsupported field).
    """
    if fv.nvmlReturn != nvml.NVML_SUCCESS:
        raise ValueError(f"field {fv.fieldId} not available (nvmlReturn {fv.nvmlReturn})")
    t = fv.valueType
    v = fv.value
    if t == nvml.NVML_VALUE_TYPE_DOUBLE:
        return float(v.dVal)
    if t == nvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return float(v.uiVal)
    if t == nvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return float(v.ulVal)
    if t == nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return float(v.ullVal)
    if t == nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return float(v.sllVal)
    return float(v.siVal)


class NvmlSampler(PowerSampler):
    """Energy and power of a group of GPUs through NVML.

    Per GPU, the first method that works is used (chosen once, at construction):

    1. ``energy``: ``nvmlDeviceGetTotalEnergyConsumption`` in mJ since the driver loaded
       (Volta and newer), stored as a cumulative counter in J. The instantaneous power
       field is read alongside when available, so the core can cross-check the two.
    2. ``instant``: the ``NVML_FI_DEV_POWER_INSTANT`` field in mW, integrated over time;
       on Grace Hopper with ``scope=NVML_POWER_SCOPE_MODULE`` (CPU + GPU + memory).
    3. ``average``: ``nvmlDeviceGetPowerUsage`` in mW. On Ampere and newer this is a 1 s
       moving average, so cells shorter than a few seconds are smeared; it is the last
       resort and the sampler's name says ``nvml-power-avg``.

    Args:
        nvml: the initialised ``pynvml`` module.
        indices: NVML indices of the GPUs to read.
        module_scope: read module power (Grace Hopper) instead of the GPU energy counter.

    Raises:
        ValueError: no method works on one of the GPUs (the message names it).
    """

    def __init__(self, nvml: ModuleType, indices: list[int], module_scope: bool = False):
        self.nvml = nvml
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self.methods: list[str] = []
        self.instant_ok: list[bool] = []
        if module_scope:
            scope = getattr(nvml, "NVML_POWER_SCOPE_MODULE", 1)
        else:
            scope = getattr(nvml, "NVML_POWER_SCOPE_GPU", 0)
        self.field = (nvml.NVML_FI_DEV_POWER_INSTANT, scope)
        for i, h in zip(indices, self.handles):
            instant = self._try(lambda h=h: self._instant_w(h))
            self.instant_ok.append(instant)
            if not module_scope and self._try(lambda h=h: nvml.nvmlDeviceGetTotalEnergyConsumption(h)):
                self.methods.append("energy")
            elif instant:
                self.methods.append("instant")
            elif self._try(lambda h=h: nvml.nvmlDeviceGetPowerUsage(h)):
                self.methods.append("average")
            else:
                raise ValueError(f"GPU {i}: NVML gives neither energy nor power")
        kinds = set(self.methods)
        self.source = "energy_counter" if kinds == {"energy"} else "power"
        self.name = {"energy": "nvml-energy", "instant": "nvml-power-instant",
                     "average": "nvml-power-avg"}[self.methods[0]] if len(kinds) == 1 else "nvml-mixed"
        if module_scope:
            self.name = "nvml-module-power"
            self.label = "Grace Hopper module power (CPU + GPU + memory), NVML_POWER_SCOPE_MODULE"

    @staticmethod
    def _try(fn) -> bool:
        try:
            fn()
            return True
        except Exception:  # noqa: BLE001 - probing what the GPU supports
            return False

    def _instant_w(self, handle: Any) -> float:
        (fv,) = self.nvml.nvmlDeviceGetFieldValues(handle, [self.field])
        return field_value(self.nvml, fv) / 1000.0

    def read(self) -> list[PowerReading]:
        """One reading per GPU: energy in J (mJ / 1000) and/or power in W (mW / 1000)."""
        out = []
        for i, (h, m) in enumerate(zip(self.handles, self.methods)):
            t = now_ns()
            if m == "energy":
                e = self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0
                p = self._instant_w(h) if self.instant_ok[i] else None
                out.append(PowerReading(t_ns=t, device_index=i, energy_j=e, power_w=p))
            elif m == "instant":
                out.append(PowerReading(t_ns=t, device_index=i, power_w=self._instant_w(h)))
            else:
                out.append(PowerReading(t_ns=t, device_index=i, power_w=self.nvml.nvmlDeviceGetPowerUsage(h) / 1000.0))
        return out

    def _probe_channels(self) -> None:
        """Which channel queries each GPU answers (tried once; an unsupported one, e.g.
        utilisation under MIG, is left out rather than failing every reading)."""
        nv = self.nvml
        sm, mem = getattr(nv, "NVML_CLOCK_SM", 1), getattr(nv, "NVML_CLOCK_MEM", 2)
        temp = getattr(nv, "NVML_TEMPERATURE_GPU", 0)
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        queries = {"util": lambda h: nv.nvmlDeviceGetUtilizationRates(h),
                   "clock_mhz": lambda h: nv.nvmlDeviceGetClockInfo(h, sm),
                   "mem_clock_mhz": lambda h: nv.nvmlDeviceGetClockInfo(h, mem),
                   "temp_c": lambda h: nv.nvmlDeviceGetTemperature(h, temp)}
        if reasons is not None:
            queries["throttle"] = reasons
        self._channel_queries = [{k: q for k, q in queries.items() if self._try(lambda q=q, h=h: q(h))}
                                 for h in self.handles]

    def read_channels(self) -> list[ChannelReading]:
        """One reading per GPU: ``util_pct`` and ``mem_util_pct`` (nvmlDeviceGetUtilizationRates:
        % of the driver's last sample period, 1/6 to 1 s), ``clock_mhz`` (SM) and
        ``mem_clock_mhz`` (MHz), ``temp_c`` (GPU sensor, C), and the active clock event
        reasons of :data:`THROTTLE_REASONS` (contract 1.5)."""
        if not hasattr(self, "_channel_queries"):
            self._probe_channels()
        out = []
        for i, (h, qs) in enumerate(zip(self.handles, self._channel_queries)):
            t = now_ns()
            values: dict[str, float] = {}
            throttle: list[str] = []
            for k, q in qs.items():
                v = q(h)
                if k == "util":
                    values["util_pct"], values["mem_util_pct"] = float(v.gpu), float(v.memory)
                elif k == "throttle":
                    throttle = [name for bit, name in THROTTLE_REASONS.items() if int(v) & bit]
                else:
                    values[k] = float(v)
            out.append(ChannelReading(t_ns=t, device_index=i, values=values, throttle=throttle))
        return out

    def device_processes(self) -> list[int]:
        """PIDs of the processes using these GPUs now (host PID namespace), for the core's
        noisy-neighbour check (:mod:`infbench.measure.contention`): every GPU's
        ``nvmlDeviceGetComputeRunningProcesses`` and ``nvmlDeviceGetGraphicsRunningProcesses``
        (NVML API Reference, "Device Queries"; a query the GPU does not support adds nothing).

        Raises:
            Nothing of its own; a failing call is skipped."""
        pids: set[int] = set()
        for h in self.handles:
            for q in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                fn = getattr(self.nvml, q, None)
                if fn is None:
                    continue
                try:
                    pids.update(int(p.pid) for p in fn(h))
                except Exception:  # noqa: BLE001 - NVML_ERROR_NOT_SUPPORTED (some MIG/vGPU setups)
                    continue
        return sorted(pids)

    def close(self) -> None:
        """``nvmlShutdown`` (NVML reference-counts init/shutdown)."""
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def device_states(nvml: ModuleType, indices: list[int]) -> list[DeviceState]:
    """The settings of each GPU that change what it measures (plugin contract 1.10): persistence
    mode (``nvmlDeviceGetPersistenceMode``), application clocks against their defaults
    (``nvmlDeviceGetApplicationsClock`` / ``nvmlDeviceGetDefaultApplicationsClock``, SM), the
    SM clock now and its maximum, the enforced power limit against its default
    (``nvmlDeviceGetEnforcedPowerLimit`` / ``nvmlDeviceGetPowerManagementDefaultLimit``, mW),
    ECC (``nvmlDeviceGetEccMode``, current) and MIG (``nvmlDeviceGetMigMode``, current). A query
    the GPU does not answer is left None."""

    def ask(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends: not known
            return None

    sm = getattr(nvml, "NVML_CLOCK_SM", 1)
    out = []
    for i in indices:
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        pm = ask(getattr(nvml, "nvmlDeviceGetPersistenceMode", None) or (lambda _h: None), h)
        app = ask(getattr(nvml, "nvmlDeviceGetApplicationsClock", None) or (lambda _h, _c: None), h, sm)
        app0 = ask(getattr(nvml, "nvmlDeviceGetDefaultApplicationsClock", None) or (lambda _h, _c: None), h, sm)
        lim = ask(nvml.nvmlDeviceGetEnforcedPowerLimit, h)
        lim0 = ask(getattr(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", None) or (lambda _h: None), h)
        ecc = ask(getattr(nvml, "nvmlDeviceGetEccMode", None) or (lambda _h: None), h)
        mig = ask(nvml.nvmlDeviceGetMigMode, h)
        now = ask(nvml.nvmlDeviceGetClockInfo, h, sm)
        top = ask(getattr(nvml, "nvmlDeviceGetMaxClockInfo", None) or (lambda _h, _c: None), h, sm)
        out.append(DeviceState(
            index=i, persistence_mode=None if pm is None else bool(pm),
            applications_clocks_locked=None if app is None or app0 is None else int(app) != int(app0),
            sm_clock_mhz=None if now is None else float(now), max_sm_clock_mhz=None if top is None else float(top),
            power_limit_w=None if lim is None else lim / 1e3,
            default_power_limit_w=None if lim0 is None else lim0 / 1e3,
            ecc=None if ecc is None else bool(ecc[0] if isinstance(ecc, (tuple, list)) else ecc),
            mig=None if mig is None else bool(mig[0] if isinstance(mig, (tuple, list)) else mig)))
    return out
