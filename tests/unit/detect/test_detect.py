"""PCI detection on a sysfs tree the test writes, merged with plugin reports."""

from infbench.contract.hookspecs import hookimpl
from infbench.data.schema import DeviceInfo
from infbench.detect import detect, scan_pci


def pci(root, addr, vendor, cls, device="0x0000"):
    d = root / addr
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "class").write_text(cls + "\n")
    (d / "device").write_text(device + "\n")


def fake_bus(root):
    pci(root, "0000:00:00.0", "0x8086", "0x060000")            # Intel host bridge: not an accelerator
    pci(root, "0000:17:00.0", "0x10de", "0x030200", "0x2330")  # NVIDIA H100 (3D controller)
    pci(root, "0000:18:00.0", "0x10de", "0x030200", "0x2330")
    pci(root, "0000:19:00.0", "0x10de", "0x068000")            # NVSwitch bridge: ignored
    pci(root, "0000:20:00.0", "0x1002", "0x038000")            # AMD Instinct (display class)
    pci(root, "0000:20:00.1", "0x1002", "0x040300")            # its audio function: ignored
    pci(root, "0000:30:00.0", "0x1da3", "0x120000")            # Habana Gaudi
    pci(root, "0000:40:00.0", "0x1af4", "0x020000")            # virtio net


def test_scan_pci_filters_by_vendor_and_class(tmp_path):
    fake_bus(tmp_path)
    found = scan_pci(tmp_path)
    assert [(p.address, p.vendor.plugin) for p in found] == [
        ("0000:17:00.0", "nvidia"), ("0000:18:00.0", "nvidia"), ("0000:20:00.0", "amd"), ("0000:30:00.0", "habana")]
    assert scan_pci(tmp_path / "missing") == []


def test_missing_plugins_named_with_package(tmp_path, core_pm):
    fake_bus(tmp_path)
    det = detect(core_pm, pci_root=tmp_path)
    assert [d.vendor for d in det.devices] == ["cpu"]
    msgs = {m.vendor.plugin: m.message() for m in det.missing}
    assert set(msgs) == {"nvidia", "amd", "habana"}
    assert "2 NVIDIA device(s)" in msgs["nvidia"] and "pip install infbench-nvidia" in msgs["nvidia"]
    assert "pip install infbench-habana" in msgs["habana"]
    js = det.to_dict()
    assert {m["package"] for m in js["missing_plugins"]} == {"infbench-nvidia", "infbench-amd", "infbench-habana"}


class FakeNvidia:
    @hookimpl
    def infbench_detect(self):
        return [DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=2)]


class Broken:
    @hookimpl
    def infbench_detect(self):
        raise RuntimeError("driver exploded")


def test_plugin_reports_merge_and_broken_plugin_isolated(tmp_path, core_pm):
    fake_bus(tmp_path)
    core_pm.register(FakeNvidia(), name="nvidia")
    core_pm.register(Broken(), name="broken")
    det = detect(core_pm, pci_root=tmp_path)
    vendors = {d.vendor: d for d in det.devices}
    assert vendors["nvidia"].count == 2 and vendors["nvidia"].plugin == "nvidia"
    assert "nvidia" not in {m.vendor.plugin for m in det.missing}
    assert det.errors == [("broken", "RuntimeError: driver exploded")]
    assert "cpu" in vendors
