"""llama.cpp's server gets as many threads as the CPUs infbench may use (its affinity, at most the
physical cores), as the in-process engine does, not llama-server's own default (the host's cores
whatever the affinity): pinned to one CPU of two, the quick preset's server ran two spinning threads
on that CPU and took 142 s instead of 83 s here. Checked on the command line each start path
builds (the xllamacpp wheel's and a llama-server binary's), without starting a server."""

from __future__ import annotations

import psutil
import pytest

from infbench.data.groups import Group
from infbench.data.models import resolve
from infbench.data.schema import Cell, Load
from infbench.detect.platforms.cpu import cpu_device
from infbench.engines import llama_bundle as lb
from infbench.engines.llama_server import LlamaServerEngine
from infbench.libs import llama as libs_llama


class Launched(Exception):
    """Raised in place of starting the server, carrying its command line."""


def argv_of(options: dict, binary=None, monkeypatch=None) -> tuple[list[str], LlamaServerEngine]:
    """The command line ``LlamaServerEngine(options).start`` would run (port 8080)."""
    m = resolve("tiny")
    cell = Cell(model=m.name, engine="llama.cpp-server", dtype="f16", batch=1, input_len=16, output_len=4,
                load=Load(mode="concurrency", concurrency=2, num_requests=4))
    e = LlamaServerEngine(cpu_device(), options)

    def launch(argv, timeout_s, env=None):
        raise Launched(argv(8080))

    monkeypatch.setattr(e, "launch_server", launch)
    monkeypatch.setattr(lb, "configured_binary", lambda option: binary)
    if binary is not None:
        monkeypatch.setattr(lb, "read_manifest", lambda path: None)
        monkeypatch.setattr(lb, "server_env", lambda path: {})
    with pytest.raises(Launched) as got:
        e.start(Group(m, "llama.cpp-server", "f16", 1, [cell]))
    return got.value.args[0], e


def threads_of(argv: list[str]) -> int:
    return int(argv[argv.index("--threads") + 1])


@pytest.mark.parametrize("path", ["wheel", "binary"])
def test_the_server_gets_the_usable_cpus_as_threads(monkeypatch, tmp_path, path):
    binary = (tmp_path / "llama-server", "engine argument") if path == "binary" else None
    monkeypatch.setattr(libs_llama.os, "sched_getaffinity", lambda pid: {1})        # pinned to one CPU
    argv, e = argv_of({}, binary, monkeypatch)
    assert threads_of(argv) == 1 and e.describe()["n_threads"] == 1
    many = set(range(64))
    monkeypatch.setattr(libs_llama.os, "sched_getaffinity", lambda pid: many)       # every CPU
    argv, e = argv_of({}, binary, monkeypatch)
    physical = psutil.cpu_count(logical=False) or 64
    assert threads_of(argv) == min(64, physical) == e.describe()["n_threads"]


def test_threads_given_are_passed_as_given(monkeypatch):
    monkeypatch.setattr(libs_llama.os, "sched_getaffinity", lambda pid: {0})
    argv, e = argv_of({"n_threads": 3}, None, monkeypatch)
    assert threads_of(argv) == 3 and e.describe()["n_threads"] == 3
