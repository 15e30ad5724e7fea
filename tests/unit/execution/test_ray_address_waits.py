"""A Ray address where nothing or something else listens (issue 22): the command fails at once,
or within the time it states, never hangs."""

from __future__ import annotations

import time

import pytest

from tests.support.hostile import cli


# -- hangs -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["detect", "--ray-address", "127.0.0.1:1"],
                                  ["run", "--executor", "ray", "--ray-address", "127.0.0.1:1", "--model", "tiny",
                                   "--batch", "1"]])
def test_ray_address_where_nothing_listens_fails_at_once(args, tmp_path):
    """Both waited until killed (more than 300 s), printing only Ray's warnings."""
    t0 = time.monotonic()
    r = cli(*args, "--store", tmp_path / "s.db") if args[0] == "run" else cli(*args)
    assert time.monotonic() - t0 < 60  # not a timing assertion: the old behaviour never returned
    assert "127.0.0.1:1" in r.output and "ray status --address 127.0.0.1:1" in " ".join(r.output.split())
    assert not (tmp_path / "s.db").exists()


def test_ray_address_where_something_else_listens_fails_within_the_stated_time(monkeypatch):
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    stop = threading.Event()

    def accept():
        conns = []
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])  # accept and say nothing, as a wrong service might
            except OSError:
                pass
        for c in conns:
            c.close()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    monkeypatch.setenv("INFBENCH_RAY_CONNECT_TIMEOUT", "3")
    try:
        t0 = time.monotonic()
        r = cli("detect", "--ray-address", f"127.0.0.1:{port}")
        assert time.monotonic() - t0 < 30
        assert f"127.0.0.1:{port}" in r.output and "within 3 s" in r.output
    finally:
        stop.set()
        t.join()
        srv.close()

