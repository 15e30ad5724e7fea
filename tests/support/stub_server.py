"""A real OpenAI-style streaming server on 127.0.0.1 (aiohttp) with injectable behaviour,
for tests of the client and, later, the measurer benchmark.

The requested ``model`` picks the behaviour:
``normal`` (one token per event, usage at the end), ``role_first`` (chat: a role-only
event, an empty event, then content), ``no_usage``, ``error_midstream`` (an error event
after 2 tokens), ``close_early`` (connection dropped after 2 tokens), ``http500``,
``short`` (ignores the forced length: 3 tokens), ``multi`` (two tokens per event),
``drop_once`` (the first such request gets its connection closed with no response),
``time_info`` (the usage event also carries Cerebras' ``time_info`` object),
``reasoning`` (half the tokens as ``reasoning_content`` deltas, then answer deltas; the
usage carries ``completion_tokens_details.reasoning_tokens``), ``think`` (the same as
``<think>...</think>`` text, no details), ``usage_negative`` / ``usage_huge``
(``completion_tokens`` -5 / 10**9), ``malformed_once`` (the first such request gets one
event ``{"choices": "notalist"}``),
``hang`` (never sends a token), ``extra`` (three times ``max_tokens``, no usage),
``forever`` (tokens without end), ``echo_bare`` (HTTP 401 echoing the request's
credential without its ``Bearer`` word), ``echo_auth`` (HTTP 401 whose body echoes the request's
``Authorization`` header after 280 characters, with ANSI/OSC escapes), ``bos`` (usage
counts one prompt token more than the words). A body with ``"stream": false`` gets one
JSON response (``message``/``text``, usage).
``ttft_s`` and ``itl_s`` in the body (or the server defaults) inject delays. Every
request's headers and the time each token was written (``perf_counter_ns``, the same
clock as the client's on Linux) are logged in ``server.log`` (``GET /_log`` returns and
clears it); the first token's text is `` r<id>`` with the log entry's id. A request is
stamped twice: ``received_ns`` when its handler starts, ``wire_ns`` when the server's
connection read the bytes that carried it (before aiohttp parsed it and scheduled the
handler, i.e. without the server's own queueing).

As a separate process (the measurer benchmark)::

    python -m tests.support.stub_server --port 8123 --ttft-s 0.05 --itl-s 0.01
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

from aiohttp import web, web_protocol

_data_received = web_protocol.RequestHandler.data_received
#: id(connection handler) -> perf_counter_ns of its latest read (RequestHandler has __slots__).
_RX: dict[int, int] = {}


def _stamped_data_received(self, data: bytes) -> None:
    """aiohttp's ``RequestHandler.data_received``, stamping the read first (``wire_ns``)."""
    _RX[id(self)] = time.perf_counter_ns()
    _data_received(self, data)


web_protocol.RequestHandler.data_received = _stamped_data_received


class StubServer:
    """Start with ``with StubServer() as s: s.base_url``."""

    def __init__(self, ttft_s: float = 0.0, itl_s: float = 0.0, port: int = 0):
        self.ttft_s, self.itl_s, self._port = ttft_s, itl_s, port
        self.log: list[dict] = []
        self._ready = threading.Event()

    # -- handlers ------------------------------------------------------------------
    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "normal", "object": "model"}]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        received = time.perf_counter_ns()
        wire = _RX.get(id(request.protocol), received)
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        mode = body.get("model", "normal")
        rid = self._next_id = getattr(self, "_next_id", -1) + 1
        entry = {"id": rid, "path": request.path, "query": request.query_string, "headers": dict(request.headers),
                 "body": body, "received_ns": received, "wire_ns": wire, "written_ns": []}
        self.log.append(entry)
        if mode == "drop_once" and not getattr(self, "_dropped", False):
            self._dropped = True
            request.transport.close()          # no response at all, as a closed keep-alive socket
            return web.Response()
        if mode == "http500":
            return web.json_response({"error": {"message": "internal boom"}}, status=500)
        if mode == "echo_auth":
            text = ("x" * 280 + " you sent Authorization: " + request.headers.get("Authorization", "")
                    + " \x1b[31mred\x1b[0m \x1b]0;pwned\x07 \x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\")
            return web.Response(status=401, text=text)
        if mode == "echo_bare":  # a 401 that echoes the credential alone, without its scheme word
            auth = request.headers.get("Authorization", "")
            return web.Response(status=401, text="invalid credential: " + auth.split(" ", 1)[-1])
        if mode == "hang":
            await asyncio.sleep(3600)
        n = 3 if mode == "short" else int(body.get("max_tokens", 16))
        if mode == "extra":        # three times max_tokens, no usage: a server ignoring max_tokens
            n *= 3
        elif mode == "forever":    # tokens without end (a stream that never finishes)
            n = 10**9
        if "messages" in body:
            n_in = sum(len(m["content"].split()) for m in body["messages"])
        else:
            prompt = body.get("prompt")
            n_in = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        n_in += mode == "bos"
        n_think = n // 2 if mode in ("reasoning", "think") else 0
        if body.get("stream") is False:
            await asyncio.sleep(float(body.get("ttft_s", self.ttft_s)) + n * float(body.get("itl_s", self.itl_s)))
            words = [f"r{rid}"] + ["tok"] * (n - 1)
            if mode == "think":
                words = ["<think>"] + words[1:n_think] + ["</think>"] + words[n_think:]
            text = " ".join(words)
            usage = {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n}
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                      if chat else {"index": 0, "text": text, "finish_reason": "length"})
            entry["written_ns"].append(time.perf_counter_ns())
            return web.json_response({"object": "chat.completion" if chat else "text_completion",
                                      "choices": [choice], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(obj) -> None:
            data = obj if isinstance(obj, bytes) else b"data: " + json.dumps(obj).encode() + b"\n\n"
            await resp.write(data)

        def ev(text: str | None, finish: str | None = None, role: bool = False, reasoning: bool = False) -> dict:
            if chat:
                key = "reasoning_content" if reasoning else "content"
                delta = {"role": "assistant"} if role else ({key: text} if text is not None else {})
                return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta,
                                                                       "finish_reason": finish}]}
            return {"object": "text_completion", "choices": [{"index": 0, "text": text or "",
                                                              "finish_reason": finish}]}

        ttft, itl = float(body.get("ttft_s", self.ttft_s)), float(body.get("itl_s", self.itl_s))
        if mode == "role_first":
            await send(ev(None, role=True))
            await send(ev(""))
        await asyncio.sleep(ttft)
        step = 2 if mode == "multi" else 1
        for i in range(0, n, step):
            if i and itl:
                await asyncio.sleep(itl)
            if mode == "error_midstream" and i == 2:
                await send({"error": {"message": "model crashed", "code": 500}})
                await send(b"data: [DONE]\n\n")
                return resp
            if mode == "close_early" and i == 2:
                request.transport.close()
                return resp
            if mode == "malformed_once" and i == 2 and not getattr(self, "_malformed", False):
                self._malformed = True
                await send({"object": "text_completion", "choices": "notalist"})
            # the first token names the request, so a client's saved text can be matched to this log
            text = (f" r{rid}" if i == 0 else " tok") + " tok" * (min(step, n - i) - 1)
            if mode == "think" and i == 0:
                text = "<think>" + text
            if mode == "think" and i == n_think - 1:
                text += "</think>"
            await send(ev(text, reasoning=mode == "reasoning" and i < n_think))
            entry["written_ns"].append(time.perf_counter_ns())
        await send(ev("", finish="length"))
        if mode not in ("no_usage", "extra"):
            ct = {"usage_negative": -5, "usage_huge": 10**9}.get(mode, n)
            last = {"object": "text_completion", "choices": [],
                    "usage": {"prompt_tokens": n_in, "completion_tokens": ct, "total_tokens": n_in + n}}
            if mode == "reasoning":
                last["usage"]["completion_tokens_details"] = {"reasoning_tokens": n_think}
            if mode == "time_info":  # Cerebras Inference's per-request server timings (s)
                total = (time.perf_counter_ns() - received) / 1e9
                last["time_info"] = {"queue_time": 0.0001, "prompt_time": ttft, "completion_time": total - ttft,
                                     "total_time": total, "created": time.time()}
            await send(last)
        await send(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def take_log(self, request: web.Request) -> web.Response:
        """``GET /_log``: the log so far (without headers), then cleared."""
        out = [{k: v for k, v in e.items() if k != "headers"} for e in self.log]
        self.log.clear()
        return web.json_response(out)

    # -- life cycle ----------------------------------------------------------------
    def __enter__(self) -> StubServer:
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("stub server did not start")
        return self

    def _serve(self) -> None:
        try:                                   # uvloop: a cheaper server, closer to its own schedule
            import uvloop

            self.loop = uvloop.new_event_loop()
        except ImportError:
            self.loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_get("/_log", self.take_log)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", self._port, backlog=1024)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._ready.set()
        self.loop.run_forever()

    def __exit__(self, *exc) -> None:
        fut = asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop)
        fut.result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def main() -> None:
    """Serve on ``--port`` until SIGTERM/SIGINT."""
    import argparse
    import signal

    ap = argparse.ArgumentParser(description="streaming OpenAI-style stub server with injected delays")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttft-s", type=float, default=0.0)
    ap.add_argument("--itl-s", type=float, default=0.0)
    a = ap.parse_args()
    s = StubServer(a.ttft_s, a.itl_s, port=a.port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with s:
        print(f"stub server on {s.base_url}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
