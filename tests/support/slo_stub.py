"""A real OpenAI-style streaming server on 127.0.0.1 whose latency grows with load at a
known knee, for the SLO search (``--find-max``) and the server-metrics scraper.

* **Concurrency knee**: while at most ``knee`` requests are in flight each token takes
  ``itl_fast_s``; above it, ``itl_slow_s``. A client holding ``c`` requests in flight sees
  fast tokens for ``c <= knee`` and slow ones above, so with a TPOT SLO between the two
  the highest passing concurrency is ``knee``.
* **Capacity (rate) knee**: with ``slots`` set, at most that many requests are served at
  once; the others wait in a queue, so beyond ``slots / service time`` requests per s the
  queue (and TTFT) grows without bound.

Its ``GET /metrics`` is real Prometheus text written by ``prometheus_client`` (its own
registry), under vLLM's metric names (``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:time_to_first_token_seconds``,
``vllm:request_time_per_output_token_seconds``, ``vllm:num_preemptions_total``...), so the
scraper reads it as it reads vLLM.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

from aiohttp import web


class SloStub:
    """Start with ``with SloStub(knee=4) as s: s.base_url``.

    Args:
        knee: in-flight requests up to which tokens are fast (None: always fast).
        itl_fast_s, itl_slow_s: time per output token below / above the knee (s).
        ttft_s: time to the first token once a request is served (s).
        slots: requests served at once (None: unlimited); the rest queue.
    """

    def __init__(self, knee: int | None = 4, itl_fast_s: float = 0.004, itl_slow_s: float = 0.06,
                 ttft_s: float = 0.005, slots: int | None = None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.knee, self.itl_fast_s, self.itl_slow_s = knee, itl_fast_s, itl_slow_s
        self.ttft_s, self.slots = ttft_s, slots
        self.in_flight = 0
        self.registry = CollectorRegistry()
        labels = ["model_name"]
        self.g_running = Gauge("vllm:num_requests_running", "Requests in the model execution batch.", labels,
                               registry=self.registry)
        self.g_waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be processed.", labels,
                               registry=self.registry)
        self.g_kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
                          registry=self.registry)
        self.c_preempt = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels,
                                 registry=self.registry)
        self.c_queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.", labels,
                                 registry=self.registry)
        self.c_hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", labels,
                              registry=self.registry)
        buckets = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
        self.h_ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token in seconds.", labels,
                                buckets=buckets, registry=self.registry)
        self.h_tpot = Histogram("vllm:request_time_per_output_token_seconds", "Time per output token.", labels,
                                buckets=buckets, registry=self.registry)
        self._ready = threading.Event()
        self._seen_prompts: set[str] = set()

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    async def metrics(self, request: web.Request) -> web.Response:
        from prometheus_client import generate_latest

        return web.Response(body=generate_latest(self.registry), content_type="text/plain")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        t_recv = time.perf_counter()
        body = await request.json()
        model = body.get("model", "stub")
        n = int(body.get("max_tokens", 16))
        prompt = body.get("prompt")
        n_in = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        key = json.dumps(prompt)
        self.c_queries.labels(model).inc(n_in)
        if key in self._seen_prompts:  # a repeated prompt is a full prefix-cache hit
            self.c_hits.labels(model).inc(n_in)
        self._seen_prompts.add(key)
        self.g_waiting.labels(model).inc()
        if self._sem is not None:
            await self._sem.acquire()
        self.g_waiting.labels(model).dec()
        self.in_flight += 1
        self.g_running.labels(model).set(self.in_flight)
        self.g_kv.labels(model).set(min(1.0, self.in_flight / 64))
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)

            async def send(obj) -> None:
                await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

            await asyncio.sleep(self.ttft_s)
            t_first = None
            for i in range(n):
                if i:
                    slow = self.knee is not None and self.in_flight > self.knee
                    await asyncio.sleep(self.itl_slow_s if slow else self.itl_fast_s)
                await send({"object": "text_completion",
                            "choices": [{"index": 0, "text": " tok", "finish_reason": None}]})
                if t_first is None:
                    t_first = time.perf_counter()
                    self.h_ttft.labels(model).observe(t_first - t_recv)
            t_end = time.perf_counter()
            if n > 1:
                self.h_tpot.labels(model).observe((t_end - t_first) / (n - 1))
            await send({"object": "text_completion", "choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
            await send({"object": "text_completion", "choices": [],
                        "usage": {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n}})
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        finally:
            self.in_flight -= 1
            self.g_running.labels(model).set(self.in_flight)
            if self._sem is not None:
                self._sem.release()

    def __enter__(self) -> SloStub:
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("SLO stub server did not start")
        return self

    def _serve(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self._sem = asyncio.Semaphore(self.slots) if self.slots else None
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/completions", self.completions)
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0, backlog=1024)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._ready.set()
        self.loop.run_forever()

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
