"""llama.cpp's C API as infbench uses it (through llama-cpp-python's ctypes bindings): one
backend initialisation per process with the library's log routed to Python logging, the
thread count, and a ``llama_batch`` backed by NumPy arrays. Shared by the llama.cpp engine,
the perplexity scorer and ``infbench quantize``; imports no other infbench layer but the
signal handling of C callbacks.
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Any

import numpy as np
import psutil

from infbench.data.signals import c_callback

#: llama-cpp-python's documented source-build switch (``CMAKE_ARGS``) for what infbench uses:
#: ``LLAVA_BUILD=OFF`` drops the multimodal library (``mtmd``: 51 of 178 compile units of 0.3.36),
#: which infbench never loads; tests, tools, examples and the server are llama.cpp targets that
#: llama-cpp-python 0.3.36 already leaves out (llama.cpp is a sub-project there), switched off
#: explicitly so a version that changes those defaults does not bring them back.
LLAMA_CPP_CMAKE_ARGS = ("-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF "
                        "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF")
#: The command installing the compiled build (llama-cpp-python's documented install path).
LLAMA_CPP_INSTALL = f"CMAKE_ARGS=\"{LLAMA_CPP_CMAKE_ARGS}\" pip install 'infbench[llamacpp]'"

log = logging.getLogger("infbench.llama_cpp")
_backend_ready = False
_log_cb: Any = None
#: llama.cpp's model-loading lines about placement (``load_tensors: ...``), kept for the
#: engine's device check (``LlamaCppEngine.verify_device``); cleared before each model load.
load_lines: list[str] = []


def _quiet_logs(L: Any) -> None:
    """Route llama.cpp's log lines to Python logging (errors only by default), keeping the
    loader's placement lines in :data:`load_lines`."""
    global _log_cb

    def cb(level: int, text: bytes, _user: Any) -> None:
        if b"load_tensors" in text or b"assigned to device" in text:
            load_lines.append(text.decode(errors="replace").rstrip())
        if level >= 4:  # GGML_LOG_LEVEL_ERROR
            log.error(text.decode(errors="replace").rstrip())
        else:
            log.debug(text.decode(errors="replace").rstrip())

    _log_cb = L.llama_log_callback(c_callback(cb))
    L.llama_log_set(_log_cb, ctypes.c_void_p())


def default_threads() -> int:
    """Threads for llama.cpp: the usable CPUs, at most the physical cores."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(usable, psutil.cpu_count(logical=False) or usable))


class Batch:
    """A ``llama_batch`` backed by NumPy arrays (no per-token Python loop to fill it)."""

    def __init__(self, L: Any, capacity: int):
        self.tok = np.zeros(capacity, np.int32)
        self.pos = np.zeros(capacity, np.int32)
        self.nsid = np.ones(capacity, np.int32)
        self.sid = np.zeros(capacity, np.int32)
        self.logits = np.zeros(capacity, np.int8)
        # seq_id is an array of pointers, one per token, each to that token's seq id.
        self.sid_ptrs = (self.sid.ctypes.data + 4 * np.arange(capacity, dtype=np.uint64)).astype(np.uint64)
        b = L.llama_batch()
        i32p = ctypes.POINTER(ctypes.c_int32)
        b.token = self.tok.ctypes.data_as(i32p)
        b.embd = ctypes.POINTER(ctypes.c_float)()
        b.pos = self.pos.ctypes.data_as(i32p)
        b.n_seq_id = self.nsid.ctypes.data_as(i32p)
        b.seq_id = ctypes.cast(self.sid_ptrs.ctypes.data, ctypes.POINTER(i32p))
        b.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self.batch = b

    def fill(self, tokens: np.ndarray, pos: np.ndarray, seq: np.ndarray, want_logits: np.ndarray) -> None:
        n = tokens.size
        self.tok[:n] = tokens
        self.pos[:n] = pos
        self.sid[:n] = seq
        self.logits[:n] = want_logits
        self.batch.n_tokens = n




def backend(L: Any) -> None:
    """Initialise llama.cpp's backend once per process, its log routed to Python logging
    (:func:`_quiet_logs`); every user of the C API (the engine, the perplexity scorer,
    ``infbench quantize``) calls this first."""
    global _backend_ready
    if not _backend_ready:
        _quiet_logs(L)
        L.llama_backend_init()
        _backend_ready = True
