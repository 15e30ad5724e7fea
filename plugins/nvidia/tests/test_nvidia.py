"""The NVIDIA plugin: hooks against the contract, NVML logic against :class:`NvmlStandIn` (a
hand-written stand-in that answers as NVML's documented API does: nvml.h and the NVML API
Reference's "Device Queries"; no GPU was reached, nothing in it was captured from one), and the
real nvidia-ml-py on this GPU-less machine."""

from types import SimpleNamespace

import pytest

from infbench.contract.manager import check_plugin
from infbench.data.schema import DeviceInfo
from infbench.measure.power import energy_summary
from infbench_nvidia import hooks
from infbench_nvidia.nvml import NvmlSampler, device_groups, field_value, precisions_for_cc


def test_hooks_match_the_contract():
    assert check_plugin(hooks) == sorted([
        "infbench_container_spec", "infbench_default_sweep", "infbench_detect", "infbench_device_backends",
        "infbench_device_state", "infbench_device_catalog", "infbench_engines", "infbench_power_sampler",
        "infbench_supported_precisions"])


def test_real_nvml_detects_what_this_host_has_and_says_why_not():
    """Against the real NVML of this host. Where libnvidia-ml.so or a GPU is missing (CI, a
    CPU-only machine): no error, no device, and the sampler says why. On a GPU host (the first
    H100 run failed the old version of this test, which assumed no GPU): every GPU NVML counts
    is detected under its NVML name, and its power sampler reads."""
    from infbench_nvidia.nvml import NvmlUnavailable, load_nvml

    try:
        nvml = load_nvml()
        count = nvml.nvmlDeviceGetCount()
    except (NvmlUnavailable, OSError, RuntimeError, ValueError):  # no library, no driver: the CPU-only case
        count = 0
    found = hooks.infbench_detect()
    if count == 0:
        assert found == []
        dev = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", properties={"indices": [0]})
        s = hooks.infbench_power_sampler(dev)
        assert not s.available and "NVML" in s.reason
        return
    assert sum(d.count for d in found) == count and all(d.vendor == "nvidia" and d.kind == "gpu" for d in found)
    names = {nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)}
    assert {d.model for d in found} == {n.decode() if isinstance(n, bytes) else n for n in names}
    s = hooks.infbench_power_sampler(found[0])
    assert s.available, getattr(s, "reason", None)
    readings = s.read()
    assert readings and all(r.energy_j is not None or (r.power_w is not None and r.power_w >= 0) for r in readings)
    s.close()


@pytest.mark.parametrize("cc, has, lacks", [
    ((7, 0), {"fp16", "int8"}, {"bf16", "fp8"}),          # V100
    ((8, 0), {"bf16", "int8", "int4"}, {"fp8"}),          # A100: no fp8
    ((8, 9), {"bf16", "fp8"}, set()),                     # L40S
    ((9, 0), {"fp16", "bf16", "fp8", "int8"}, set()),     # H100/H200/GH200
])
def test_precisions_by_compute_capability(cc, has, lacks):
    p = set(precisions_for_cc(*cc))
    assert has <= p and not (lacks & p)


def test_precision_hook_reads_the_device_group():
    a100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA A100-SXM4-80GB",
                      properties={"compute_capability": "8.0"})
    assert "fp8" not in hooks.infbench_supported_precisions(a100)
    assert hooks.infbench_supported_precisions(a100.model_copy(update={"vendor": "amd"})) is None


class NvmlStandIn:
    """A stand-in for pynvml with the types and units NVML documents (mW, mJ, bytes,
    ``nvmlFieldValue_t``-like field values, ``nvmlProcessInfo_t``-like process records),
    answering for two H100s with made-up values: written from the documentation, not
    captured from a GPU. ``energy_mj`` advances 350 J per read = 350 W at 1 read/s."""

    NVML_SUCCESS = 0
    NVML_VALUE_TYPE_DOUBLE, NVML_VALUE_TYPE_UNSIGNED_INT = 0, 1
    NVML_VALUE_TYPE_UNSIGNED_LONG, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 2, 3
    NVML_VALUE_TYPE_SIGNED_LONG_LONG, NVML_VALUE_TYPE_SIGNED_INT = 4, 5
    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_POWER_SCOPE_GPU, NVML_POWER_SCOPE_MODULE = 0, 1
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, names=("NVIDIA H100 80GB HBM3",) * 2, energy=True, instant=True):
        self.names, self.energy, self.instant = names, energy, instant
        self.energy_mj = [1_000_000_000, 2_000_000_000]
        self.shutdowns = 0
        #: clock event reasons per GPU: GPU 1 idles (0x1, not a throttle) until told otherwise
        self.reasons = [0x0, 0x1]

    def nvmlDeviceGetCount(self):
        return len(self.names)

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.names[h]

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=85520809984, used=0, free=85520809984)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (9, 0)

    def nvmlDeviceGetMigMode(self, h):
        return (0, 0)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700000

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0".encode())

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-0000000{h}-1111-2222-3333-444444444444"

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.energy:
            raise RuntimeError("NVMLError_NotSupported")
        self.energy_mj[h] += 350_000
        return self.energy_mj[h]

    def nvmlDeviceGetFieldValues(self, h, fields):
        (fid, scope), = fields
        ok = self.instant
        return [SimpleNamespace(fieldId=fid, scopeId=scope, nvmlReturn=0 if ok else 3, valueType=1,
                                value=SimpleNamespace(uiVal=351_000 + 1000 * scope))]

    def nvmlDeviceGetPowerUsage(self, h):
        return 349_500

    def nvmlShutdown(self):
        self.shutdowns += 1

    # telemetry channels (contract 1.5), as an H100 under load answers them
    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=97 - 10 * h, memory=58 - 10 * h)

    def nvmlDeviceGetClockInfo(self, h, clock):
        return {self.NVML_CLOCK_SM: 1980, self.NVML_CLOCK_MEM: 2619}[clock]

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == self.NVML_TEMPERATURE_GPU
        return 61 + h

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self.reasons[h]

    # processes on each GPU (nvmlProcessInfo_t: pid, usedGpuMemory in bytes); GPU 1's graphics
    # query is unsupported, as on GPUs without a display engine
    processes = {0: [4242], 1: [4242, 777]}

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p, usedGpuMemory=2**30) for p in self.processes[h]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        if h == 1:
            raise RuntimeError("NVMLError_NotSupported")
        return [SimpleNamespace(pid=99, usedGpuMemory=2**20)]


def test_device_groups_group_identical_gpus():
    nv = NvmlStandIn(names=("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"))
    groups = device_groups(nv)
    assert [(g.model, g.count) for g in groups] == [("NVIDIA H100 80GB HBM3", 2), ("NVIDIA A100-SXM4-40GB", 1)]
    h = groups[0]
    assert h.properties["compute_capability"] == "9.0" and h.properties["mig_mode"] == "disabled"
    assert h.properties["cuda_driver_version"] == "12.4" and h.properties["power_limit_w"] == 700
    assert h.pci_ids == ["00000000:18:00.0", "00000000:19:00.0"] and h.driver == "550.54.15"


def test_sampler_prefers_the_energy_counter_and_converts_units():
    s = NvmlSampler(NvmlStandIn(), [0, 1])
    assert s.name == "nvml-energy" and s.source == "energy_counter"
    a, b = s.read(), s.read()  # the probe at construction read the counter once already
    assert a[0].energy_j == pytest.approx(1_000_700.0) and a[0].power_w == pytest.approx(351.0)
    assert b[1].energy_j - a[1].energy_j == pytest.approx(350.0)
    # counters differenced per GPU (power stripped: the stand-in's reads are microseconds apart)
    e, method, _ = energy_summary([r.model_copy(update={"power_w": None}) for r in a + b])
    assert e == pytest.approx(700.0) and method == "counter"


def test_sampler_falls_back_to_instant_power_then_the_1s_average():
    s = NvmlSampler(NvmlStandIn(energy=False), [0])
    assert s.name == "nvml-power-instant" and s.read()[0].energy_j is None
    s = NvmlSampler(NvmlStandIn(energy=False, instant=False), [0])
    assert s.name == "nvml-power-avg" and s.read()[0].power_w == pytest.approx(349.5)


def test_grace_hopper_reads_module_scope_power():
    s = NvmlSampler(NvmlStandIn(names=("NVIDIA GH200 480GB",)), [0], module_scope=True)
    assert s.name == "nvml-module-power" and "module" in s.label
    assert s.read()[0].power_w == pytest.approx(352.0)  # scope 1 answered


def test_field_value_decodes_by_type_and_rejects_errors():
    nv = NvmlStandIn()
    fv = SimpleNamespace(fieldId=186, nvmlReturn=0, valueType=0, value=SimpleNamespace(dVal=12.5))
    assert field_value(nv, fv) == 12.5
    with pytest.raises(ValueError, match="not available"):
        field_value(nv, SimpleNamespace(fieldId=186, nvmlReturn=3, valueType=1, value=None))


def test_container_spec_requests_gpus_host_ipc_and_trtllm_ulimits():
    dev = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3")
    spec = hooks.infbench_container_spec(dev, "trtllm-serve").as_dict()
    assert spec["image"].startswith("infbench/nvidia-trtllm:")
    assert spec["device_requests"][0]["Capabilities"] == [["gpu"]] and spec["ipc_mode"] == "host"
    lim = {u["Name"]: u["Soft"] for u in spec["ulimits"]}
    assert lim == {"memlock": -1, "stack": 67108864} and not spec.get("privileged")
    assert hooks.infbench_container_spec(dev, "llama.cpp") is None
    assert hooks.infbench_container_spec(dev.model_copy(update={"vendor": "cpu"}), "vllm") is None


def test_catalog_matches_driver_names():
    from infbench.detect.devices import match_device

    cat = hooks.infbench_device_catalog()
    assert {s.id for s in cat} == {"a100-40gb", "a100-80gb", "h100-sxm", "h200", "gh200"}
    for name, ident in [("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
                        ("NVIDIA H200", "h200"), ("NVIDIA GH200 480GB", "gh200")]:
        assert match_device(cat, DeviceInfo(vendor="nvidia", kind="gpu", model=name)).id == ident
    h100 = next(s for s in cat if s.id == "h100-sxm").per_device()
    assert h100["memory_bandwidth_bytes_s"] == pytest.approx(3.35e12)
    assert h100["peak_flops"]["bf16"] == pytest.approx(989.4e12) and "fp8" in h100["peak_flops"]


def test_sampler_reads_telemetry_channels_and_throttle_reasons():
    nv = NvmlStandIn()
    s = NvmlSampler(nv, [0, 1])
    a = s.read_channels()
    assert [c.device_index for c in a] == [0, 1]
    assert a[0].values == {"util_pct": 97.0, "mem_util_pct": 58.0, "clock_mhz": 1980.0, "mem_clock_mhz": 2619.0,
                           "temp_c": 61.0}
    assert a[0].throttle == [] and a[1].throttle == []          # idle is not a throttle
    nv.reasons = [0x4 | 0x40, 0x1]                              # power cap + HW thermal slowdown on GPU 0
    assert s.read_channels()[0].throttle == ["sw_power_cap", "hw_thermal_slowdown"]


def test_unsupported_channel_is_left_out():
    """MIG instances answer NVML_ERROR_NOT_SUPPORTED for utilisation: that channel is dropped."""
    nv = NvmlStandIn()

    def mig(h):
        raise RuntimeError("NVMLError_NotSupported")

    nv.nvmlDeviceGetUtilizationRates = mig
    (c,) = NvmlSampler(nv, [0]).read_channels()
    assert "util_pct" not in c.values and c.values["clock_mhz"] == 1980.0


def test_nvml_channels_are_stored_and_flag_a_throttled_cell(tmp_path):
    """Channels sampled by the core's monitor from the NVML stand-in, summarised, stored in the
    results store and read back; the throttle reason flags the cell."""
    import time

    from infbench.data.schema import Cell, CellResult
    from infbench.measure.power import PowerMonitor
    from infbench.measure.telemetry import summarize_channels
    from infbench.store import Store
    from infbench.store.channels import telemetry

    nv = NvmlStandIn()
    nv.reasons = [0x0, 0x20]
    mon = PowerMonitor(NvmlSampler(nv, [0, 1]), interval_s=0.02)
    mon.start()
    time.sleep(0.15)
    mon.stop()
    assert len(mon.channels) >= 4 and mon.channel_error is None
    summ = summarize_channels(mon.channels)
    assert summ["throttled"] and summ["throttle_reasons"] == ["sw_thermal_slowdown"]
    assert summ["telemetry"]["util_pct"]["max"] == 97.0 and summ["telemetry"]["util_pct"]["min"] == 87.0
    dev = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=2)
    cell = Cell(model="tiny", engine="vllm", dtype="bfloat16", batch=1, input_len=8, output_len=2)
    store = Store(tmp_path / "r.db")
    run = store.begin_run({})
    row = store.save_cell(run, CellResult(cell_id=cell.cell_id(dev), spec_hash=cell.spec_hash(), cell=cell,
                                          device=dev, status="ok", metrics=summ, telemetry=mon.channels,
                                          started_at=0, finished_at=1))
    back = telemetry(store, row)
    assert back == sorted(mon.channels, key=lambda c: (c.t_ns, c.device_index))
    assert store.results()[0]["metrics"]["throttled"] is True


def test_device_processes_for_the_noisy_neighbour_check():
    """Every GPU's compute and graphics processes, one PID once; an unsupported query adds
    nothing (contract: PowerSampler.device_processes, infbench.measure.contention)."""
    s = NvmlSampler(NvmlStandIn(), [0, 1])
    assert s.device_processes() == [99, 777, 4242]
    from infbench.measure.contention import ContentionMonitor, contention_reasons

    m = ContentionMonitor(s, interval_s=0.01)
    m.start()
    rec = m.stop()
    # none of these PIDs is this process; the ones this host has no /proc entry for are "unseen"
    import os

    seen = [p for p in (99, 777, 4242) if os.path.exists(f"/proc/{p}")]
    assert rec["other_device_pids"] == seen
    assert sorted(rec["other_device_pids"] + rec["unseen_device_pids"]) == [99, 777, 4242]
    assert bool(contention_reasons(rec, "gpu")) is bool(seen)


def test_the_plugin_conforms_to_the_contract():
    """The conformance kit (``infbench plugins check nvidia``) on this host's answers and on a
    stand-in device of the vendor: every hook answers in the contract's types, none raises,
    and a power sampler's readings (NoPower without the driver) are finite and non-negative."""
    from infbench.plugin import DeviceInfo as _Device
    from infbench.testing.conformance import assert_conforms

    detected = hooks.infbench_detect()
    stand_in = _Device(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3",
                       count=1, memory_bytes=80 * 2**30, properties={"compute_capability": "9.0"})
    findings = assert_conforms(hooks, devices=[*detected, stand_in])
    assert {"infbench_supported_precisions", "infbench_power_sampler"} <= {f.hook for f in findings}


def test_device_state_reads_the_settings_that_change_a_measurement():
    """Contract 1.10: persistence mode, application clocks against their default, the power
    limit against its default (mW -> W), ECC and MIG; a query the GPU does not answer is None."""
    from infbench_nvidia.nvml import device_states

    class Answers(NvmlStandIn):
        def nvmlDeviceGetPersistenceMode(self, h):
            return 1 if h == 0 else 0

        def nvmlDeviceGetApplicationsClock(self, h, clock):
            return 1980 if h == 0 else 1410

        def nvmlDeviceGetDefaultApplicationsClock(self, h, clock):
            return 1980

        def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
            return 700000

        def nvmlDeviceGetEnforcedPowerLimit(self, h):
            return 700000 if h == 0 else 500000

        def nvmlDeviceGetEccMode(self, h):
            raise RuntimeError("NVMLError_NotSupported")

        def nvmlDeviceGetMaxClockInfo(self, h, clock):
            return 1980

    a, b = device_states(Answers(), [0, 1])
    assert (a.persistence_mode, a.applications_clocks_locked, a.power_limit_w, a.default_power_limit_w) == \
        (True, False, 700.0, 700.0)
    assert (b.persistence_mode, b.applications_clocks_locked, b.power_limit_w) == (False, True, 500.0)
    assert a.ecc is None and a.mig is False and a.sm_clock_mhz == 1980.0 and a.max_sm_clock_mhz == 1980.0
    from infbench.measure.hoststate import state_warnings

    warned = state_warnings({}, [s.model_dump() for s in (a, b)])
    assert len(warned) == 2 and "persistence mode is off" in warned[0] and "500 W, below its default 700 W" in warned[1]
