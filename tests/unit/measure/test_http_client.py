"""The serving client's HTTP/1.1 transport: response framing fed read by read (any split
of the bytes gives the same body), and a real socket server on 127.0.0.1 for keep-alive,
retries and transport errors."""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infbench.data.errors import ConfigError
from infbench.measure.client import HttpClient, _Conn, endpoint_url

BODY = b"data: {\"x\": 1}\n\ndata: {\"x\": 2}\n\ndata: [DONE]\n\n"


def chunked(body: bytes, sizes: list[int], ext: bool = False) -> bytes:
    out, i = b"", 0
    for n in sizes:
        piece = body[i:i + n]
        if not piece:
            break
        out += f"{len(piece):x}".encode() + (b";name=val" if ext else b"") + b"\r\n" + piece + b"\r\n"
        i += n
    if i < len(body):
        out += f"{len(body) - i:x}\r\n".encode() + body[i:] + b"\r\n"
    return out + b"0\r\nX-Trailer: t\r\n\r\n"


RESPONSES = {
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
               + chunked(BODY, [5, 17, 3], ext=True),
    "length": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY,
    "close": b"HTTP/1.0 200 OK\r\n\r\n" + BODY,
    "continue": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY,
}


class FakeTransport:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True

    def abort(self):
        self.closed = True

    def is_closing(self):
        return self.closed


def feed(raw: bytes, cuts: list[int]):
    """Feed ``raw`` to a connection in pieces cut at ``cuts``; returns (conn, error, reads)."""
    loop = asyncio.new_event_loop()
    try:
        conn = _Conn()
        conn.connection_made(FakeTransport())
        reads, waiter = [], loop.create_future()
        conn.start(reads, waiter)
        bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(raw))), len(raw)]
        for a, b in zip(bounds, bounds[1:]):
            if b > a:                                   # asyncio never delivers an empty read
                conn.data_received(raw[a:b])
        if not waiter.done():
            conn.connection_lost(None)
        return conn, waiter.result(), reads
    finally:
        loop.close()


@pytest.mark.parametrize("kind", sorted(RESPONSES))
def test_each_framing_gives_the_body(kind):
    conn, err, reads = feed(RESPONSES[kind], [])
    assert err is None and conn.status == 200 and b"".join(d for _, d in reads) == BODY
    assert conn.keep_alive == (kind in ("chunked", "length", "continue"))


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(sorted(RESPONSES)), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_any_split_of_the_bytes_gives_the_same_body(kind, cuts):
    conn, err, reads = feed(RESPONSES[kind], cuts)
    assert err is None and b"".join(d for _, d in reads) == BODY
    assert all(d for _, d in reads)                   # no empty reads recorded


def test_truncated_and_malformed_responses_are_errors():
    raw = RESPONSES["chunked"]
    _, err, reads = feed(raw[: len(raw) - 30], [])
    assert "mid-response" in err and reads
    _, err, _ = feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", [])
    assert "malformed chunk size" in err
    _, err, _ = feed(b"garbage\r\n\r\n", [])
    assert "malformed status line" in err
    _, err, _ = feed(b"", [])
    assert "before any response" in err


def test_endpoint_urls_keep_the_query():
    assert endpoint_url("http://h:1/v1?api-version=2&k=x", "chat/completions") == \
        "http://h:1/v1/chat/completions?api-version=2&k=x"
    c = HttpClient("https://u:p@h/v1/?q=1")
    assert c.target("completions") == "/v1/completions?q=1" and c.port == 443
    head = c.request_bytes("POST", c.target("models"), b"{}")
    assert head.startswith(b"POST /v1/models?q=1 HTTP/1.1\r\nHost: h\r\n")
    assert b"Authorization: Basic dTpw\r\n" in head and head.endswith(b"Content-Length: 2\r\n\r\n{}")
    with pytest.raises(ConfigError):
        HttpClient("ftp://h/v1")


def test_real_socket_keep_alive_retry_and_refused():
    """A raw server: serves a chunked response and keeps the connection; then closes the
    kept-alive connection without answering, which the client retries on a new one."""
    async def main():
        seen = []

        async def handle(reader, writer):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                             if line.lower().startswith(b"content-length")))
                await reader.readexactly(n)
                seen.append(head.split(b" ")[1])
                if len(seen) == 2:                  # close the kept-alive connection, no answer
                    writer.close()
                    return
                writer.write(RESPONSES["chunked"])
                await writer.drain()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        c = HttpClient(f"http://127.0.0.1:{port}/v1")
        req = c.request_bytes("POST", c.target("completions"), b"{}")
        r1 = await c.send(req)
        r2 = await c.send(req)                      # reuses, gets closed, retried on a new connection
        await c.close()
        server.close()
        bad = await HttpClient(f"http://127.0.0.1:{port}/v1").send(req)
        return r1, r2, seen, bad

    r1, r2, seen, bad = asyncio.run(main())
    assert r1.error is None and r1.body() == BODY and r1.retried is None
    assert r2.error is None and r2.body() == BODY and "before any response" in r2.retried
    assert seen == [b"/v1/completions"] * 3
    assert "cannot connect" in bad.error
