"""The native-call watchdog (infbench.data.signals, issue 41, item 3): SIGTERM ends a run stuck in a
native call after the grace, and does not cut a run that handles its signal."""

from __future__ import annotations

import os

import pytest

_STUCK = r"""
import os, signal, sys, threading, time
from infbench.data import signals

def ready():  # says "stuck" once the main thread sits inside the call below, not before
    main = threading.main_thread().ident
    while sys._current_frames()[main].f_lineno != LINE:
        time.sleep(0.01)
    print("stuck", flush=True)

with signals.terminate_as_interrupt(), signals.native_call_watchdog(grace_s=0.5), \
        signals.on_hard_exit(lambda: print("hook ran", flush=True)):
    # SIGTERM held back in this thread and the main thread inside one C call that a signal does not
    # interrupt: its Python handler cannot run, as in a native call that does not return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    LINE = sys._getframe().f_lineno + 2
    threading.Thread(target=ready, daemon=True).start()
    time.sleep(60)
print("returned", flush=True)
"""


def test_sigterm_ends_a_run_stuck_in_a_native_call(tmp_path):
    """--no-engine-process: SIGTERM while the main thread sits in a call that does not
    return ends the process after the grace (exit 143), the on-exit hook having run, and
    says why; it does not wait for the call."""
    import signal
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", _STUCK], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert p.stdout.readline().strip() == "stuck"
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 143 and "hook ran" in out and "returned" not in out, (p.returncode, out, err[-2000:])
    assert "SIGTERM arrived while the engine was inside a native call" in err


def test_the_watchdog_does_not_cut_a_run_that_handles_its_signal():
    """A main thread that runs Python after SIGTERM (the normal path) is not cut short."""
    import signal
    import time

    from infbench.data import signals

    with signals.terminate_as_interrupt(), signals.native_call_watchdog(grace_s=0.2):
        with pytest.raises(signals.Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        time.sleep(0.5)  # the cleanup after the signal takes longer than the grace: still alive
    assert signal.getsignal(signal.SIGTERM) is not None

