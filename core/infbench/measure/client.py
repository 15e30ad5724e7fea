"""The serving client's HTTP/1.1 transport: one ``asyncio.Protocol`` per connection,
doing no per-token work beyond stamping each network read.

Why not aiohttp or httpx: a measuring client should spend as little of its own time as
possible between the moment it stamps a request as sent and the moment the bytes leave,
and between a read's arrival and its stamp. Here

* the request (head and body) is serialised before the clock starts; ``t_send`` is taken
  immediately before ``transport.write`` on a kept-alive connection (before the connect
  when a new connection must be opened, so connection set-up counts in TTFT as in every
  other tool);
* ``data_received`` stamps the read with ``perf_counter_ns()`` and appends
  ``(stamp, body bytes)``; chunked transfer coding is undone by slicing, with no copy of
  the payload and no coroutine woken per read (the waiting request is resumed once, when
  its response is complete). Server-sent events are parsed after the request ends.

On the measurer benchmark (docs/benchmarks.md) this replaced aiohttp's streaming reader.
Supported: ``http`` and ``https`` (system trust store), keep-alive pools, ``Content-Length``,
chunked and close-delimited bodies, HTTP/1.0 servers. Not supported (not needed for
inference servers): proxies, redirects, compressed bodies (no ``Accept-Encoding`` is sent).
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

from infbench.data.errors import ConfigError

#: Largest response head accepted (bytes).
MAX_HEAD = 64 * 1024


def endpoint_url(base_url: str, suffix: str) -> str:
    """``base_url`` with ``suffix`` appended to its path, its query kept:
    ``http://h/v1?k=1`` + ``completions`` -> ``http://h/v1/completions?k=1``."""
    u = urlsplit(base_url)
    return urlunsplit((u.scheme, u.netloc, u.path.rstrip("/") + "/" + suffix.lstrip("/"), u.query, ""))


@dataclass
class Response:
    """What one request got back.

    Attributes:
        t_send_ns: ``perf_counter_ns`` when the request was written (or its connection
            opened).
        status: HTTP status, None if no response head arrived.
        reads: ``(perf_counter_ns at arrival, body bytes)`` per network read, transfer
            coding removed, in order.
        error: transport error, None if the response was complete.
        retried: the error of a first attempt on a kept-alive connection the server had
            closed (the request was sent again on a new connection), else None.
    """

    t_send_ns: int
    status: int | None = None
    reads: list[tuple[int, bytes]] = field(default_factory=list)
    error: str | None = None
    retried: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        """The whole body."""
        return b"".join(d for _, d in self.reads)


class _Conn(asyncio.Protocol):
    """One HTTP/1.1 connection; serves one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.waiter: asyncio.Future | None = None
        self.used = 0

    # -- per request -----------------------------------------------------------------
    def start(self, reads: list[tuple[int, bytes]], waiter: asyncio.Future, max_events: int | None = None) -> None:
        self.reads, self.waiter = reads, waiter
        self.max_events, self.events, self.body_bytes = max_events, 0, 0
        self.head = b""
        self.in_head = True
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.framing = "close"
        self.remaining = 0          # bytes left in the body (length) or the current chunk (+ CRLF)
        self.line = b""             # a chunk-size line split across reads
        self.trailer = False
        self.keep_alive = False
        self.got_bytes = False
        self.used += 1

    def _add(self, t: int, data: bytes) -> None:
        """Keep one body read; a stream past its bound (:meth:`HttpClient.send`'s
        ``max_events``) is cut here: the connection is closed and the response ends with
        an error saying so."""
        if self.waiter is None:
            return
        self.reads.append((t, data))
        if self.max_events is None:
            return
        self.events += data.count(b"data:")
        self.body_bytes += len(data)
        if self.events > self.max_events or self.body_bytes > self.max_events * STREAM_EVENT_BYTES:
            self.keep_alive = False
            self._finish(f"cut: the server streamed more than {self.max_events} events "
                         f"({self.body_bytes:,} bytes) for this request's max_tokens; the response was not read "
                         "further")

    def _finish(self, error: str | None) -> None:
        w, self.waiter = self.waiter, None
        if w is not None and not w.done():
            w.set_result(error)
        if error is not None or not self.keep_alive:
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        self.waiter = None
        if self.transport is not None:
            self.transport.abort()

    # -- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()
        if self.waiter is None:              # bytes nobody asked for: the connection is unusable
            self.abort()
            return
        self.got_bytes = True
        if self.in_head:
            self._head(t, data)
        elif self.framing == "chunked":
            self._chunked(t, data)
        elif self.framing == "length":
            self._length(t, data)
        else:
            self._add(t, data)

    def eof_received(self) -> bool:
        return False                         # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is None:
            return
        if not self.in_head and self.framing == "close":
            self._finish(None)
        elif not self.got_bytes:
            self._finish("connection closed by the server before any response" + (f" ({exc})" if exc else ""))
        else:
            got = sum(len(d) for _, d in self.reads)
            self._finish(f"connection closed by the server mid-response (after {got} body bytes)"
                         + (f": {exc}" if exc else ""))

    # -- parsing ---------------------------------------------------------------------
    def _head(self, t: int, data: bytes) -> None:
        self.head += data
        k = self.head.find(b"\r\n\r\n")
        if k < 0:
            if len(self.head) > MAX_HEAD:
                self._finish(f"response head larger than {MAX_HEAD} bytes")
            return
        head, rest = self.head[:k], self.head[k + 4:]
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            version, status = parts[0], int(parts[1])
        except (IndexError, ValueError):
            self._finish(f"malformed status line: {lines[0][:100]!r}")
            return
        if 100 <= status < 200:              # interim response: the real one follows
            self.head = b""
            if rest:
                self._head(t, rest)
            return
        hdrs = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            hdrs[name.strip().lower()] = value.strip()
        self.status, self.headers, self.in_head, self.head = status, hdrs, False, b""
        conn = hdrs.get("connection", "").lower()
        self.keep_alive = "close" not in conn and (version != "HTTP/1.0" or "keep-alive" in conn)
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            self.framing = "chunked"
        elif "content-length" in hdrs:
            try:
                self.remaining = int(hdrs["content-length"])
            except ValueError:
                self._finish(f"bad Content-Length {hdrs['content-length'][:40]!r}")
                return
            self.framing = "length"
            if status in (204, 304) or self.remaining == 0:
                self._finish(None)
                return
        elif status in (204, 304):
            self.framing = "length"
            self._finish(None)
            return
        else:
            self.framing, self.keep_alive = "close", False
        if rest:
            self.data_received_body(t, rest)

    def data_received_body(self, t: int, data: bytes) -> None:
        if self.framing == "chunked":
            self._chunked(t, data)
        elif self.framing == "length":
            self._length(t, data)
        else:
            self._add(t, data)

    def _length(self, t: int, data: bytes) -> None:
        n = len(data)
        if n >= self.remaining:
            self._add(t, data[:self.remaining] if n > self.remaining else data)
            self.remaining = 0
            self._finish(None)
        else:
            self._add(t, data)
            self.remaining -= n

    def _chunked(self, t: int, data: bytes) -> None:
        i, n = 0, len(data)
        while i < n:
            if self.remaining:
                take = min(self.remaining, n - i)
                body = take - max(0, 2 - (self.remaining - take))   # the chunk's trailing CRLF is not body
                if body > 0:
                    self._add(t, data[i:i + body] if (i or i + body < n) else data)
                self.remaining -= take
                i += take
                continue
            j = data.find(b"\n", i)
            if j < 0:
                self.line += data[i:]
                if len(self.line) > 4096:
                    self._finish("malformed chunked body (no chunk-size line)")
                return
            line, self.line = (self.line + data[i:j]).strip(), b""
            i = j + 1
            if self.trailer:
                if not line:
                    self._finish(None)
                    return
                continue
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                self._finish(f"malformed chunk size {line[:40]!r}")
                return
            if size == 0:
                self.trailer = True
            else:
                self.remaining = size + 2


#: Bytes of one SSE event a streamed response may average before it is cut (an event
#: with logprobs of 20 alternatives is about 4 KB).
STREAM_EVENT_BYTES = 16 * 1024


def stream_event_limit(max_tokens: int) -> int:
    """How many SSE events a streamed response to a request of ``max_tokens`` may carry
    before it is cut: twice ``max_tokens`` plus 32 (events without a token: the role, the
    usage, ``[DONE]``, keep-alives), a margin no server that honours ``max_tokens`` reaches."""
    return 2 * max(1, int(max_tokens)) + 32


class HttpClient:
    """Requests to one server over a pool of kept-alive connections (one event loop).

    Args:
        base_url: ``http[s]://[user:password@]host[:port]/path[?query]``; userinfo becomes
            Basic authentication unless ``headers`` carries an ``Authorization``.
        headers: sent with every request.
        connect_timeout_s: limit on opening a connection (s).

    Raises:
        ConfigError: a URL that is not http(s) or has no host.
    """

    def __init__(self, base_url: str, headers: dict[str, str] | None = None, connect_timeout_s: float = 30.0):
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ConfigError(f"not an http(s) URL with a host: {u.scheme}://{u.hostname or ''}{u.path}",
                              hint="e.g. --base-url http://127.0.0.1:8000/v1")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if u.scheme == "https" else None
        self.base_path, self.query = u.path.rstrip("/"), u.query
        default = 443 if u.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        hdrs = {"Host": host if self.port == default else f"{host}:{self.port}", "User-Agent": "infbench",
                "Accept": "text/event-stream, application/json"}
        if u.username and not any(k.lower() == "authorization" for k in (headers or {})):
            cred = f"{unquote(u.username)}:{unquote(u.password or '')}".encode()
            hdrs["Authorization"] = "Basic " + base64.b64encode(cred).decode()
        hdrs.update(headers or {})
        self._head = "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()).encode("latin-1")
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()

    def target(self, suffix: str) -> str:
        """The request target for an endpoint below the base path, the base query kept."""
        return f"{self.base_path}/{suffix.lstrip('/')}" + (f"?{self.query}" if self.query else "")

    def request_bytes(self, method: str, target: str, body: bytes = b"",
                      content_type: str = "application/json") -> bytes:
        """The serialised request (build it before the clock starts)."""
        head = f"{method} {target} HTTP/1.1\r\n".encode("latin-1") + self._head
        if body or method == "POST":
            head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n".encode("latin-1")
        return head + b"\r\n" + body

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(_Conn, self.host, self.port, ssl=self.ssl,
                                   server_hostname=self.host if self.ssl else None),
            self.connect_timeout_s)
        self._all.add(conn)
        return conn

    def _take_idle(self) -> _Conn | None:
        while self._idle:
            c = self._idle.pop()
            if not c.closed and c.transport is not None and not c.transport.is_closing():
                return c
            self._all.discard(c)
        return None

    async def send(self, request: bytes, max_events: int | None = None) -> Response:
        """Send a serialised request (:meth:`request_bytes`) and wait for the whole response.

        Never raises for a transport failure (it is the response's ``error``); a
        cancellation (the caller's timeout) aborts the connection and propagates. A request
        whose kept-alive connection turns out closed before any response byte is sent
        once more on a new connection (``t_send_ns`` taken again; ``retried`` says why): a
        server that closes a connection it had kept alive (cpp-httplib, llama.cpp's server,
        after a fixed number of requests) never ran the request.

        ``max_events`` bounds a streamed (SSE) response: once more ``data:`` events than
        that (or more than :data:`STREAM_EVENT_BYTES` bytes per allowed event) have come,
        the connection is closed and the response ends with an error that says it was cut
        (issue 41: a server streaming forever for an 8-token request kept the client reading
        until the 600 s request timeout). :func:`stream_event_limit` gives the bound of a
        ``max_tokens``.
        """
        loop = asyncio.get_running_loop()
        retried = None
        for attempt in (0, 1):
            conn = self._take_idle()
            reused = conn is not None
            t_send = time.perf_counter_ns()
            if conn is None:
                try:
                    conn = await self._connect()
                except TimeoutError:
                    return Response(t_send, error=f"connect to {self.host}:{self.port} timed out after "
                                                  f"{self.connect_timeout_s:g} s", retried=retried)
                except (OSError, ssl.SSLError) as exc:
                    return Response(t_send, error=f"cannot connect to {self.host}:{self.port}: "
                                                  f"{type(exc).__name__}: {exc}", retried=retried)
            reads: list[tuple[int, bytes]] = []
            waiter = loop.create_future()
            conn.start(reads, waiter, max_events)
            if reused:
                t_send = time.perf_counter_ns()
            if conn.transport is None:
                raise ConnectionError("the connection closed before the request was written")
            conn.transport.write(request)
            try:
                error = await waiter
            except BaseException:
                conn.abort()
                self._all.discard(conn)
                raise
            if error is not None and not conn.got_bytes and attempt == 0 and conn.closed:
                retried = error
                self._all.discard(conn)
                continue
            if error is None and conn.keep_alive and not conn.closed:
                self._idle.append(conn)
            else:
                self._all.discard(conn)
            return Response(t_send, conn.status, reads, error, retried, conn.headers)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Close every connection."""
        for c in list(self._all):
            c.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)
