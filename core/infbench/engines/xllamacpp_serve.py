"""Run llama.cpp's OpenAI-compatible server (the ``xllamacpp`` wheel) in this process.

Started as a subprocess by :class:`infbench.engines.llama_server.LlamaServerEngine`::

    python -m infbench.engines.xllamacpp_serve --model M.gguf --port 8080 --parallel 4 --ctx 8192

It serves until SIGTERM/SIGINT, then exits at once (``os._exit``): the server object's
clean shutdown waits for the batch it is decoding, which outlived a killed infbench by more
than 30 s in ``tests/integration/test_fault_injection.py`` (32 sequences of 1024 tokens on
2 cores). It has nothing to save: the model is read-only, its log is flushed first.

It waits in short steps (0.25 s), not in one untimed wait: the kernel may deliver SIGTERM (the
``PR_SET_PDEATHSIG`` of a killed infbench) to one of llama.cpp's threads, and then Python's
handler runs only once the main thread wakes, which an untimed wait never does (a CI run found
this server alive, reparented to init, 30 s after infbench's SIGKILL). Each step also checks that
the process that started it is still its parent, so a signal that never came ends it too.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading


def main() -> None:
    """Parse arguments, start the server, block until a termination signal."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--parallel", type=int, default=1, help="server slots (concurrent sequences)")
    ap.add_argument("--ctx", type=int, default=4096, help="total context (shared by the slots)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--ubatch", type=int, default=0, help="physical batch in tokens (0: llama.cpp's 512)")
    ap.add_argument("--verbosity", type=int, default=3,
                    help="llama.cpp log verbosity; 4 adds the loader's lines (devices, offloaded layers)")
    a = ap.parse_args()

    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = a.model
    p.hostnames = [a.host]
    p.port = a.port
    p.n_parallel = a.parallel
    p.n_ctx = a.ctx
    p.n_batch = max(2048, a.parallel, a.ubatch)
    if a.ubatch:
        p.n_ubatch = a.ubatch
    p.cont_batching = True
    p.endpoint_metrics = True
    p.n_gpu_layers = a.n_gpu_layers
    p.verbosity = a.verbosity
    if a.threads:
        p.cpuparams.n_threads = a.threads
        p.cpuparams_batch.n_threads = a.threads
    server = xllamacpp.Server(p)
    print(f"infbench: llama.cpp server listening on {server.listening_address}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    parent = os.getppid()
    why = "signal"
    while not stop.wait(0.25):
        if os.getppid() != parent:
            why = f"its parent {parent} is gone"
            break
    print(f"infbench: llama.cpp server stopping ({why})", flush=True)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
