"""Run DeepSpeed-MII's OpenAI-compatible server after logging the device torch and
DeepSpeed see here (the ``deepspeed-mii-server`` device proof).

Started as a subprocess by :class:`infbench.engines.mii_engine.MiiServerEngine` with the
flags of ``mii/entrypoints/openai_api_server.py``::

    python -m infbench.engines.mii_serve --model PATH --host 127.0.0.1 --port P \\
        --tensor-parallel 1 --max-length 4096 --deployment-name NAME

It prints one line ``infbench-mii-device: {"torch", "cuda", "devices", "ds_accelerator"}``
(JSON: torch's version, its CUDA version, the names of the GPUs it sees, DeepSpeed's
accelerator), then runs MII's server module as ``__main__`` with the same arguments
(``runpy``), which starts the model processes (``mii.serve``) and serves until SIGTERM.
"""

from __future__ import annotations

import json
import runpy
import sys
from typing import Any

#: MII's OpenAI server module (DeepSpeed-MII 0.3: ``mii/entrypoints/openai_api_server.py``).
MII_SERVER_MODULE = "mii.entrypoints.openai_api_server"


def device_report() -> dict:
    """What torch and DeepSpeed see in this process: ``{"torch": version, "cuda": CUDA
    version or None, "devices": [GPU names], "ds_accelerator": "cuda"/"cpu"/...}``."""
    import torch

    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "devices": [],
                           "ds_accelerator": None}
    if torch.cuda.is_available():
        out["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    try:
        from deepspeed.accelerator import get_accelerator

        out["ds_accelerator"] = get_accelerator().device_name()
    except Exception as exc:  # noqa: BLE001 - reported, the server decides
        out["ds_accelerator"] = f"error: {type(exc).__name__}: {exc}"
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the device line, then hand over to MII's server with ``argv`` (default: ours)."""
    args = list(sys.argv[1:] if argv is None else argv)
    print("infbench-mii-device: " + json.dumps(device_report()), flush=True)
    sys.argv = [MII_SERVER_MODULE, *args]
    runpy.run_module(MII_SERVER_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
