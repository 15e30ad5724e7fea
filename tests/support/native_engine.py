"""A stand-in engine that spends its time inside one long native call (in ``start``, like a model
load, or in ``run``, like a huge context allocation), and a script that measures it through the
in-process executor with infbench's SIGTERM handling, for the fault tests of issue 33 (item 5).

The native call is ``hashlib.pbkdf2_hmac`` with 2^31 - 1 iterations (OpenSSL, many minutes): while it
runs, the interpreter of its process runs no Python signal handler, as inside llama.cpp's
context allocation or a model load."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from infbench import hookimpl
from infbench.testing import FakeEngine

#: Iterations of the native call (far longer than any test waits).
ITERATIONS = 2**31 - 1


def native_call() -> None:
    """One C call that does not return for minutes."""
    hashlib.pbkdf2_hmac("sha256", b"infbench", b"native", ITERATIONS)


class NativeBlock(FakeEngine):
    """``where`` (option): ``start`` or ``run``, the method that blocks in :func:`native_call`;
    measured in an engine process of its own, as real in-process engines are."""

    isolate = True

    def start(self, group):
        super().start(group)
        if self.options.get("where") == "start":
            native_call()

    def run(self, cell, prompts, deadline_ns=None):
        if self.options.get("where") == "run" and cell.output_len > 2:  # the timed part, not the warm-up
            native_call()
        return super().run(cell, prompts, deadline_ns)


class Launcher:
    @hookimpl(tryfirst=True)
    def infbench_launch_engine(self, engine, device, options):
        return NativeBlock(device, options) if engine == "fake" else None


def main(store: str, where: str, engine_process: bool = True) -> None:
    """Measure 3 cells with :class:`NativeBlock` blocking in ``where``, with SIGTERM handled as the
    command line handles it; prints each model load and cell start, then JSON. ``engine_process``
    False measures it beside infbench, as before issue 30 (SIGTERM then waits for the C call)."""
    from infbench import testing
    from infbench.data import signals
    from infbench.data.events import CellStarted, GroupLoading
    from infbench.data.run import RunOptions
    from infbench.data.schema import Sweep
    from infbench.detect.platforms.cpu import cpu_device
    from infbench.execution.executors.inprocess import InProcessExecutor
    from infbench.plan import plan
    from infbench.store import Store
    from tests.support.native_engine import Launcher as Importable  # not __main__'s: the engine process imports it

    pm = testing.plugin_manager()
    pm.register(Importable(), name="native")
    sw = Sweep(models=["tiny-random-llama"], engines=["fake"], dtypes=["f16"], batch=[1, 2, 3], input_len=[4],
               output_len=[8])
    p = plan(sw, cpu_device(), pm)

    def observer(ev):
        if isinstance(ev, (GroupLoading, CellStarted)):
            print(f"event {type(ev).__name__}", flush=True)

    code = 0
    with signals.terminate_as_interrupt():
        try:
            opts = RunOptions(engine_options={"where": where}, engine_process=engine_process)
            InProcessExecutor(pm, {"host": "test"}).run(p, Store(Path(store)), opts, observer)
        except KeyboardInterrupt as exc:
            code = signals.exit_status(exc)
    print(json.dumps({"code": code}), flush=True)
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], engine_process="--no-engine-process" not in sys.argv[3:])
