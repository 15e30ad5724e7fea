"""A vendor plugin for the Ray tests: on a node whose environment sets
``INFBENCH_RAYTEST_DEVICE=NAME`` it reports one accelerator ``Raytest NAME`` (so two
raylets of one machine look like two kinds of hardware), and it declares that llama.cpp
runs on it. Its kind is ``cpu`` because that is where llama.cpp really runs here: the
device proof of contract 1.4 then holds (every layer on ggml's CPU backend).

The fixture writes it with a ``.dist-info`` into a folder put on the nodes' PYTHONPATH,
so it is found through the ``infbench`` entry point like an installed plugin.
"""

import os

from infbench.plugin import DeviceInfo, EngineSpec, hookimpl


@hookimpl
def infbench_detect():
    name = os.environ.get("INFBENCH_RAYTEST_DEVICE")
    if not name:
        return []
    return [DeviceInfo(vendor="raytest", kind="cpu", model=f"Raytest {name.title()}", count=1,
                       memory_bytes=2**30, driver="0.0.1")]


@hookimpl
def infbench_supported_precisions(device):
    return ["fp32", "fp16", "int8"] if device.vendor == "raytest" else None


@hookimpl
def infbench_engines():
    return [EngineSpec(name="llama.cpp", factory=None, platforms=["raytest"])]
