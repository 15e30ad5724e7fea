"""Write tests/signatures/smi_api.json: the parts of the ``amdsmi`` and ``pyhlml`` Python APIs the
AMD and Gaudi plugins call, read from the packages' own source (``ast``; neither imports without
its vendor library, libamd_smi.so / libhlml.so).

    pip download --no-deps amdsmi==7.0.2 habana-pyhlml==1.22.2.32 -d /tmp/smi
    python tests/signatures/extract_smi_api.py /tmp/smi/amdsmi-7.0.2-py3-none-any.whl \\
        /tmp/smi/habana_pyhlml-1.22.2.32-py3-none-any.whl

The snapshot holds, per package: its version; for each function the plugins call, its
parameter names in order; for amdsmi, the string keys of the dicts each function builds (what
it returns) and the members of the enums used; for pyhlml, the fields of the ctypes structures
its functions return. plugins/amd/tests/test_amdsmi_api.py and plugins/habana/tests/
test_hlml_api.py check their stand-in libraries against it. Regenerate it with the command
above for another release; never edit it by hand.
"""

from __future__ import annotations

import ast
import json
import sys
import zipfile
from pathlib import Path

#: Functions of amdsmi that plugins/amd/infbench_amd/smi.py calls.
AMDSMI_FUNCTIONS = ("amdsmi_init", "amdsmi_shut_down", "amdsmi_get_processor_handles", "amdsmi_get_gpu_asic_info",
                    "amdsmi_get_gpu_vram_info", "amdsmi_get_gpu_driver_info", "amdsmi_get_gpu_device_bdf",
                    "amdsmi_get_gpu_device_uuid", "amdsmi_get_energy_count", "amdsmi_get_power_info",
                    "amdsmi_get_gpu_activity", "amdsmi_get_clock_info", "amdsmi_get_temp_metric",
                    "amdsmi_get_gpu_metrics_info")
AMDSMI_ENUMS = ("AmdSmiInitFlags", "AmdSmiClkType", "AmdSmiTemperatureType", "AmdSmiTemperatureMetric")
#: Functions of pyhlml that plugins/habana/infbench_habana/hl.py calls.
PYHLML_FUNCTIONS = ("hlmlInit", "hlmlShutdown", "hlmlGetDriverVersion", "hlmlDeviceGetCount",
                    "hlmlDeviceGetHandleByIndex", "hlmlDeviceGetName", "hlmlDeviceGetMemoryInfo",
                    "hlmlDeviceGetPCIInfo", "hlmlDeviceGetUUID", "hlmlDeviceGetTotalEnergyConsumption",
                    "hlmlDeviceGetPowerUsage", "hlmlDeviceGetUtilizationRates", "hlmlDeviceGetClockInfo",
                    "hlmlDeviceGetTemperature", "hlmlDeviceGetCurrentClocksThrottleReasons")
PYHLML_STRUCTS = ("c_hlml_memory", "c_hlml_pci_info", "c_hlml_utilization")


def _read(wheel: Path, member: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        return z.read(member).decode()


def _version(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return next(line.split(":", 1)[1].strip() for line in z.read(meta).decode().splitlines()
                    if line.startswith("Version:"))


def _functions(tree: ast.Module, names: tuple[str, ...]) -> dict[str, ast.FunctionDef]:
    found = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names}
    missing = set(names) - set(found)
    if missing:
        raise SystemExit(f"not in the package: {sorted(missing)}")
    return found


def amdsmi(wheel: Path) -> dict:
    """The amdsmi part of the snapshot."""
    tree = ast.parse(_read(wheel, "amdsmi/amdsmi_interface.py"))
    fns = _functions(tree, AMDSMI_FUNCTIONS)
    keys = {}
    for name, fn in fns.items():
        ks = {k.value for d in ast.walk(fn) if isinstance(d, ast.Dict) for k in d.keys
              if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        keys[name] = sorted(ks)
    enums = {c.name: [t.id for s in c.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)]
             for c in tree.body if isinstance(c, ast.ClassDef) and c.name in AMDSMI_ENUMS}
    return {"version": _version(wheel), "functions": {n: [a.arg for a in f.args.args] for n, f in fns.items()},
            "returns": keys, "enums": enums}


def pyhlml(wheel: Path) -> dict:
    """The pyhlml part of the snapshot."""
    fns = _functions(ast.parse(_read(wheel, "pyhlml/main.py")), PYHLML_FUNCTIONS)
    types = ast.parse(_read(wheel, "pyhlml/pyhlml_types_generated.py"))
    structs = {}
    for c in types.body:
        if isinstance(c, ast.ClassDef) and c.name in PYHLML_STRUCTS:
            fields = next(s.value for s in c.body if isinstance(s, ast.Assign) and s.targets[0].id == "_fields_")
            structs[c.name] = [e.elts[0].value for e in fields.elts]
    temp = [s.targets[0].id for c in types.body if isinstance(c, ast.ClassDef) and c.name == "HLML_TEMPERATURE_SENSORS"
            for s in c.body if isinstance(s, ast.Assign)]
    temp_values = {s.targets[0].id: s.value.value for c in types.body
                   if isinstance(c, ast.ClassDef) and c.name == "HLML_TEMPERATURE_SENSORS"
                   for s in c.body if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)}
    return {"version": _version(wheel), "functions": {n: [a.arg for a in f.args.args] for n, f in fns.items()},
            "structs": structs, "temperature_sensors": {k: temp_values.get(k) for k in temp}}


def main() -> None:
    """``extract_smi_api.py AMDSMI_WHEEL PYHLML_WHEEL``: write smi_api.json beside this script."""
    amd_wheel, hlml_wheel = map(Path, sys.argv[1:3])
    out = Path(__file__).with_name("smi_api.json")
    out.write_text(json.dumps({"source": "tests/signatures/extract_smi_api.py", "amdsmi": amdsmi(amd_wheel),
                               "pyhlml": pyhlml(hlml_wheel)}, indent=1, sort_keys=True) + "\n")
    print(out)


if __name__ == "__main__":
    main()
