"""Step 1 of a run: find the hardware.

Two sources are merged: the PCI bus (sysfs vendor and class ids, which needs no vendor
library) and each plugin's ``infbench_detect`` hook (which knows the details). A
vendor's accelerator seen on the bus but reported by no plugin yields a
:class:`MissingPlugin` that tells the user which package to install.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from infbench.contract.guard import PluginHookError
from infbench.contract.manager import PluginManager
from infbench.contract.site import unknown_sections
from infbench.data.errors import ConfigError
from infbench.data.schema import DeviceInfo, impossible_device

PCI_ROOT = "/sys/bus/pci/devices"


@dataclass(frozen=True)
class PciVendor:
    """A vendor whose accelerators infbench knows by PCI vendor id.

    Attributes:
        plugin: plugin name (also the ``DeviceInfo.vendor`` it reports).
        label: vendor name for messages.
        package: the distribution to install.
        classes: PCI class-code prefixes (hex, no 0x) that count as accelerators.
    """

    plugin: str
    label: str
    package: str
    classes: tuple[str, ...]


#: PCI vendor ids -> vendor. Class 03 = display controller, 12 = processing accelerator.
#: Intel counts only in the display class: its host bridges and other functions share 0x8086.
PCI_VENDORS: dict[str, PciVendor] = {
    "0x10de": PciVendor("nvidia", "NVIDIA", "infbench-nvidia", ("0300", "0302", "0380", "1200")),
    "0x1002": PciVendor("amd", "AMD", "infbench-amd", ("0300", "0302", "0380", "1200")),
    "0x8086": PciVendor("intel", "Intel", "infbench-intel", ("0300", "0302", "0380")),
    "0x1da3": PciVendor("habana", "Habana", "infbench-habana", ("1200", "0300", "0302", "0380")),
}


@dataclass
class PciDevice:
    """One PCI function that looks like an accelerator (address, ids, class code)."""

    address: str
    vendor_id: str
    device_id: str
    class_code: str
    vendor: PciVendor


@dataclass
class MissingPlugin:
    """Accelerators on the PCI bus that no plugin reported.

    Attributes:
        vendor: the vendor.
        addresses: their PCI addresses.
        installed: True if the vendor's plugin is loaded (then its driver or management
            library is the likely problem), False if the package is missing.
    """

    vendor: PciVendor
    addresses: list[str]
    installed: bool

    def message(self) -> str:
        """A one-line explanation with what to do."""
        n = len(self.addresses)
        if self.installed:
            return (f"{n} {self.vendor.label} device(s) on the PCI bus but the {self.vendor.plugin!r} plugin "
                    f"reported none: check the driver and its management library")
        return (f"{n} {self.vendor.label} device(s) on the PCI bus but no plugin handles them: "
                f"pip install {self.vendor.package}")


@dataclass
class Detection:
    """Result of :func:`detect`.

    Attributes:
        devices: device groups reported by plugins (``plugin`` field filled in).
        pci: accelerator functions seen on the PCI bus.
        missing: vendors seen on the bus without a reporting plugin.
        errors: ``(plugin, error)`` for plugins whose detect hook raised.
        config_errors: problems of the site config (:mod:`infbench.contract.site`): unreadable,
            or a table nothing reads.
    """

    devices: list[DeviceInfo] = field(default_factory=list)
    pci: list[PciDevice] = field(default_factory=list)
    missing: list[MissingPlugin] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    config_errors: list[str] = field(default_factory=list)

    def raise_config_errors(self) -> None:
        """Raise the site config's problems as one :class:`~infbench.data.errors.ConfigError`.

        Raises:
            ConfigError: when :attr:`config_errors` is not empty.
        """
        if self.config_errors:
            raise ConfigError("; ".join(self.config_errors),
                              hint="fix the site config (docs/plugins.md#site-configuration), or point "
                                   "INFBENCH_SITE_CONFIG at another file")

    def to_dict(self) -> dict:
        """JSON-ready form (``infbench detect --json``)."""
        return {
            "devices": [d.model_dump() for d in self.devices],
            "pci": [{"address": p.address, "vendor_id": p.vendor_id, "device_id": p.device_id,
                     "class": p.class_code, "vendor": p.vendor.plugin} for p in self.pci],
            "missing_plugins": [{"vendor": m.vendor.plugin, "package": m.vendor.package, "count": len(m.addresses),
                                 "plugin_installed": m.installed, "message": m.message()} for m in self.missing],
            "errors": [{"plugin": p, "error": e} for p, e in self.errors],
            "config_errors": list(self.config_errors),
        }


def scan_pci(root: str | Path = PCI_ROOT) -> list[PciDevice]:
    """Accelerator functions on the PCI bus from sysfs ``vendor``, ``device``, ``class``.

    Args:
        root: the sysfs PCI devices folder (tests pass a fake tree).

    Returns:
        Functions whose vendor id is in :data:`PCI_VENDORS` and whose class code
        matches that vendor's accelerator classes; ``[]`` if ``root`` is absent.
    """
    root = Path(root)
    out: list[PciDevice] = []
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        try:
            vid = (d / "vendor").read_text().strip().lower()
            cls = (d / "class").read_text().strip().lower().removeprefix("0x")
            did = (d / "device").read_text().strip().lower() if (d / "device").exists() else ""
        except OSError:
            continue
        v = PCI_VENDORS.get(vid)
        if v and cls[:4] in v.classes:
            out.append(PciDevice(d.name, vid, did, cls, v))
    return out


def detect(pm: PluginManager, pci_root: str | Path = PCI_ROOT) -> Detection:
    """Run every plugin's detect hook and cross-check with the PCI bus.

    A plugin that raises is reported in ``errors`` and does not stop detection.
    """
    det = Detection(pci=scan_pci(pci_root))
    for plugin, result, exc in pm.call_each("infbench_detect"):
        if exc is not None:
            det.errors.append((plugin, exc.message if isinstance(exc, PluginHookError) else
                               f"{type(exc).__name__}: {exc}"))
            continue
        if result is None:
            continue
        if not isinstance(result, (list, tuple)):
            det.errors.append((plugin, f"infbench_detect returned {type(result).__name__}, not a list of DeviceInfo; "
                                       "its devices are left out"))
            continue
        for dev in result:
            if not isinstance(dev, DeviceInfo):
                det.errors.append((plugin, f"infbench_detect returned a {type(dev).__name__} where a DeviceInfo "
                                           "belongs; that entry is left out (`infbench plugins check` says more)"))
                continue
            why = impossible_device(dev)
            if why is not None:
                det.errors.append((plugin, f"infbench_detect reported an impossible device group, left out: {why}"))
                continue
            det.devices.append(dev.model_copy(update={"plugin": dev.plugin or plugin}))
    det.config_errors = _site_problems(pm)
    reported = {d.vendor for d in det.devices}
    by_vendor: dict[str, list[PciDevice]] = {}
    for p in det.pci:
        by_vendor.setdefault(p.vendor.plugin, []).append(p)
    for vendor, devs in by_vendor.items():
        if vendor not in reported:
            det.missing.append(MissingPlugin(devs[0].vendor, [p.address for p in devs], pm.has_plugin(vendor)))
    return det


def _site_problems(pm: PluginManager) -> list[str]:
    """The site config's problems: unreadable, or tables no plugin (installed, disabled or
    broken) nor the core reads; a vendor known by PCI id gets the package to install."""
    known = set(getattr(pm, "infos", {}) or {})
    try:
        problems = unknown_sections(known)
    except ConfigError as exc:
        return [exc.message]
    packages = {v.plugin: v.package for v in PCI_VENDORS.values()}
    out = []
    for p in problems:
        name = p.split("]", 1)[0].lstrip("[") if p.startswith("[") else ""
        out.append(p + (f"; pip install {packages[name]} to use it" if name in packages else ""))
    return out
