"""Any OpenAI-compatible server: streaming ``/v1/completions`` or ``/v1/chat/completions``.

One pooled ``aiohttp.ClientSession`` per cell sends every request (aiohttp rather than
httpx: its lighter request path halved the client's own share of TTFT on a loaded host,
docs/benchmarks.md); the body is serialised before the clock starts. While a response streams,
the client does no per-token work beyond recording ``(perf_counter_ns(), raw bytes)`` for
each network read; the server-sent events are parsed after the request ends
(:func:`parse_stream`). Rules (METRICS.md):

* The first token is the first event carrying generated text; role-only, empty and
  usage-only events do not count.
* Token counts come from the server's ``usage`` (``stream_options.include_usage``); a
  server without usage falls back to one token per text event, flagged ``chunks``.
* Output length is forced with ``ignore_eos`` and ``min_tokens`` (vLLM, llama.cpp); a
  server that returns another length gets a warning stored with the cell.
* The API key is read from the environment variable named by ``api_key_env`` and is never
  stored, logged or exported; it is scrubbed from any error text.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from infbench.engines.base import Engine, RunOutput
from infbench.errors import ConfigError, EngineUnavailable
from infbench.measure.loadgen import run_load
from infbench.schema import Cell, Load, RequestRecord
from infbench.workloads.synthetic import synthetic_prompts, synthetic_text

#: Fields of a final event that describe the request on the server side, kept as-is.
SERVER_FIELDS = ("timings", "time_info", "system_fingerprint")


@dataclass
class ParsedStream:
    """What a streamed response said.

    Attributes:
        token_times_ns: arrival time of each event that carried generated text.
        usage: the ``usage`` object, if the server sent one.
        server: server-side fields (llama.cpp ``timings``, Cerebras ``time_info``...).
        finish_reason: the last ``finish_reason`` seen.
        done: True if ``data: [DONE]`` arrived.
        error: an error event's message, if any.
    """

    token_times_ns: list[int] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    server: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    done: bool = False
    error: str | None = None


def _text_of(choice: dict[str, Any], chat: bool) -> str:
    if not chat:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    return (delta.get("content") or "") + (delta.get("reasoning_content") or delta.get("reasoning") or "")


def parse_stream(reads: list[tuple[int, bytes]], chat: bool = False) -> ParsedStream:
    """Parse server-sent events from raw network reads.

    Args:
        reads: ``(perf_counter_ns at arrival, bytes)`` per network read, in order.
        chat: parse ``delta.content`` (chat) instead of ``text`` (completions).

    An event split over two reads gets the arrival time of the read that completed it.
    """
    out = ParsedStream()
    buf = b""
    for t, data in reads:
        buf += data.replace(b"\r\n", b"\n")
        while b"\n\n" in buf:
            raw, buf = buf.split(b"\n\n", 1)
            for line in raw.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    out.done = True
                    continue
                try:
                    ev = json.loads(payload)
                except ValueError:
                    out.error = f"unparseable event: {payload[:200]!r}"
                    continue
                if "error" in ev:
                    err = ev["error"]
                    out.error = err.get("message", str(err)) if isinstance(err, dict) else str(err)
                    continue
                for choice in ev.get("choices") or []:
                    if _text_of(choice, chat):
                        out.token_times_ns.append(t)
                    if choice.get("finish_reason"):
                        out.finish_reason = choice["finish_reason"]
                if ev.get("usage"):
                    out.usage = ev["usage"]
                for k in SERVER_FIELDS:
                    if ev.get(k) is not None:
                        out.server[k] = ev[k]
    return out


def to_record(p: ParsedStream, t_send: int, t_sched: int, n_in_sent: int | None, transport_error: str | None,
              ) -> RequestRecord:
    """A :class:`RequestRecord` from a parsed stream.

    ``n_out`` is ``usage.completion_tokens`` when given (then ``t_tokens_ns`` gets one
    entry per token: text events, and tokens that came without text placed at the last
    event's time), else the number of text events (flagged ``chunks``). A stream that
    ended without ``[DONE]`` or a finish reason is an error.
    """
    times = list(p.token_times_ns)
    source = "chunks"
    n_out = len(times)
    n_in = n_in_sent or 0
    if p.usage:
        source = "usage"
        n_out = int(p.usage.get("completion_tokens") or 0)
        n_in = int(p.usage.get("prompt_tokens") or n_in)
        if times and n_out > len(times):
            times += [times[-1]] * (n_out - len(times))
    error = transport_error or p.error
    if error is None and not (p.done or p.finish_reason):
        error = "stream ended early (no finish_reason and no [DONE])"
    if error is None and not times:
        error = "no generated text in the response"
    server = dict(p.server)
    if p.finish_reason:
        server["finish_reason"] = p.finish_reason
    cached = ((p.usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached:
        server["cached_tokens"] = int(cached)  # prompt tokens the server took from its prefix cache
    return RequestRecord(t_send_ns=t_send, t_sched_ns=t_sched, t_tokens_ns=times,
                         n_in=n_in, n_out=n_out, n_out_source=source, error=error, server=server or None)


class OpenAIEngine(Engine):
    """Drives an OpenAI-compatible server under a serving-mode load.

    Options:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (required).
        api_key_env: name of the environment variable holding the API key (optional).
        endpoint: ``completions`` (default) or ``chat``.
        served_model: model name sent to the server (default: the cell's model).
        prompt_format: ``token_ids`` (exact lengths; needs the server's vocabulary, i.e.
            a zoo model served with dummy weights) or ``text`` (default for external
            endpoints; lengths confirmed from usage).
        force_output: send ``ignore_eos``/``min_tokens`` (default True; servers that
            reject unknown fields need False).
        extra_body: dict merged into every request.
    """

    name = "openai"
    default_prompt_format = "text"

    def __init__(self, device, options=None):
        super().__init__(device, options)
        self.base_url: str | None = self.options.get("base_url")
        self._key: str | None = None

    # -- life cycle ----------------------------------------------------------------
    def start(self, group) -> None:
        """Check the configuration and that the server answers.

        Raises:
            ConfigError: no base URL, or the named API key variable is unset.
            EngineUnavailable: aiohttp/httpx missing, or the server does not answer ``/models``.
        """
        try:
            import aiohttp  # noqa: F401
            import httpx  # noqa: F401
        except ImportError as exc:
            raise EngineUnavailable("the openai engine needs aiohttp and httpx",
                                    hint="pip install 'infbench[serve]'") from exc
        if not self.base_url:
            raise ConfigError("the openai engine needs a server URL", hint="pass --base-url http://HOST:PORT/v1")
        env = self.options.get("api_key_env")
        if env:
            self._key = os.environ.get(env)
            if not self._key:
                raise ConfigError(f"environment variable {env} (named by --api-key-env) is not set",
                                  hint=f"export {env}=...")
        self.endpoint = self.options.get("endpoint", "completions")
        if self.endpoint not in ("completions", "chat"):
            raise ConfigError(f"unknown endpoint {self.endpoint!r}", hint="use completions or chat")
        self.group = group
        self._check_server()

    def verify_device(self, group) -> dict[str, Any]:
        """An endpoint infbench did not start is measured as what it is: a ``remote``
        device (the endpoint, or the remote platform the site declares), never a local one.

        Raises:
            DeviceMismatch: the cells are planned on a local device.
        """
        if self.device.kind != "remote":
            from infbench.engines.availability import device_label
            from infbench.errors import DeviceMismatch

            raise DeviceMismatch(self.name, device_label(self.device), f"{self.base_url} is an endpoint infbench did "
                                 "not start; its own hardware serves it", f"the endpoint {self.base_url}",
                                 "run it as a remote device: --engine openai --base-url URL")
        return {"device": "remote", "endpoint": self.base_url}

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key}"} if self._key else {}

    def _check_server(self) -> None:
        import httpx

        try:
            r = httpx.get(f"{self.base_url.rstrip('/')}/models", headers=self._headers(), timeout=10)
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"cannot reach {self.base_url}: {self._scrub(str(exc))}",
                                    hint="is the server running? check --base-url") from exc
        if r.status_code >= 400:
            raise EngineUnavailable(f"{self.base_url}/models answered HTTP {r.status_code}: "
                                    f"{self._scrub(r.text[:200])}", hint="check the URL and --api-key-env")

    def stop(self) -> None:
        """Nothing to free: the HTTP client lives only while a cell runs."""

    def describe(self) -> dict[str, Any]:
        """Base URL, endpoint, the API key variable's *name*, and the HTTP client's version."""
        import aiohttp

        return {"name": self.name, "base_url": self.base_url, "endpoint": self.options.get("endpoint", "completions"),
                "api_key_env": self.options.get("api_key_env"), "versions": {"aiohttp": aiohttp.__version__}}

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    # -- prompts -------------------------------------------------------------------
    def prompt_format(self, model) -> str:
        """``token_ids`` when asked for and the model's vocabulary is known, else ``text``."""
        fmt = self.options.get("prompt_format", self.default_prompt_format)
        if fmt == "token_ids" and "vocab_size" not in model.config:
            raise ConfigError(f"token-id prompts need the vocabulary of {model.name}",
                              hint="use a zoo model or --prompt-format text")
        return fmt

    def make_prompts(self, cell: Cell, model) -> list[Any]:
        """Enough distinct prompts for the warm-up and timed requests of ``cell``: sampled
        conversations (:class:`~infbench.workloads.chat.ChatRequest`) for a dataset cell,
        else synthetic token ids or text.

        Raises:
            ConfigError: the dataset file changed since the cell was planned.
        """
        if cell.dataset is not None:
            from infbench.workloads.chat import chat_requests, file_digest, token_counter

            d = cell.dataset
            if file_digest(d.path) != d.sha256:
                raise ConfigError(f"{d.path} changed since this cell was planned (sha256 {d.sha256})",
                                  hint="plan again: the file's hash is part of the cell's identity")
            return chat_requests(d.path, token_counter(model)[0], d.n, cell.seed, d.min_input_len, d.max_input_len,
                                 d.min_output_len, d.max_output_len)
        load = cell.load or Load(mode="batch")
        n = cell.batch if load.mode == "batch" else (load.num_requests or 64)
        n += load.warmup_requests
        if self.prompt_format(model) == "token_ids":
            return synthetic_prompts(n, cell.input_len, model.vocab, cell.seed)
        return synthetic_text(n, cell.input_len, cell.seed)

    # -- running -------------------------------------------------------------------
    def warmup(self, cell: Cell, prompts: list[Any]) -> None:
        """Serving cells warm up with ``load.warmup_requests`` inside :meth:`run`."""

    def payload(self, cell: Cell, prompt: Any) -> dict[str, Any]:
        """The JSON body of one request (streaming, usage requested, greedy, forced length:
        ``cell.output_len``, or a conversation's own final-turn length)."""
        from infbench.workloads.chat import ChatRequest

        n_out = prompt.output_len if isinstance(prompt, ChatRequest) else cell.output_len
        body: dict[str, Any] = {"model": self.options.get("served_model") or cell.model, "stream": True,
                                "stream_options": {"include_usage": True}, "max_tokens": n_out,
                                "temperature": 0.0}
        if self.options.get("force_output", True):
            body.update(ignore_eos=True, min_tokens=n_out)
        if isinstance(prompt, ChatRequest):
            body["messages"] = list(prompt.messages)
        elif self._chat(cell):
            text = prompt if isinstance(prompt, str) else json.dumps(prompt)
            body["messages"] = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict) \
                else [{"role": "user", "content": text}]
        else:
            body["prompt"] = prompt
        body.update(self.options.get("extra_body") or {})
        return body

    def _chat(self, cell: Cell) -> bool:
        """True if requests go to ``/chat/completions`` (``endpoint: chat``, or a dataset cell)."""
        return cell.dataset is not None or self.options.get("endpoint", "completions") == "chat"

    def run(self, cell: Cell, prompts: list[Any], deadline_ns: int | None = None) -> RunOutput:
        """Offer ``cell.load`` to the server; one record per timed request."""
        load = cell.load or Load(mode="batch")
        if deadline_ns is not None:
            left = max(0.001, (deadline_ns - time.perf_counter_ns()) / 1e9)
            load = load.model_copy(update={"duration_s": min(load.duration_s or left, left),
                                           "timeout_s": min(load.timeout_s or left, left)})
        t0 = time.perf_counter_ns()
        self._wrong_length = 0
        records = asyncio.run(self._run(cell, load, prompts))
        t1 = time.perf_counter_ns()
        warnings = []
        if self._wrong_length:
            want = "the forced length" if cell.dataset is not None else str(cell.output_len)
            warnings.append(f"{self._wrong_length} request(s) returned an output length other than {want} "
                            "(server ignored ignore_eos/min_tokens?)")
        if cell.dataset is None and prompts and isinstance(prompts[0], str):
            seen = [r.n_in for r in records if r.error is None and r.n_out_source == "usage"]
            if seen and any(n != cell.input_len for n in seen):
                warnings.append(f"text prompts of {cell.input_len} words were {min(seen)}-{max(seen)} tokens by the "
                                "server's usage (each request's own count is stored)")
        if any(r.n_out_source == "chunks" for r in records if r.error is None):
            warnings.append("server sent no usage: token counts are one per streamed chunk (estimate)")
        return RunOutput(records=records, engine_s=(t1 - t0) / 1e9, warnings=warnings)

    async def _run(self, cell: Cell, load: Load, prompts: list[Any]) -> list[RequestRecord]:
        import aiohttp

        width = max(load.concurrency or 0, cell.batch if load.mode == "batch" else 0, 1)
        if load.mode == "rate" and not load.concurrency:
            width = 1000
        chat = self._chat(cell)
        url = self.base_url.rstrip("/") + ("/chat/completions" if chat else "/completions")
        headers = {**self._headers(), "Content-Type": "application/json"}
        connector = aiohttp.TCPConnector(limit=width + 8, limit_per_host=width + 8)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        # Retries go through a session that never reuses a connection: a kept-alive
        # connection the server has closed is not reliably detected by aiohttp
        # (aio-libs/aiohttp#7297), and cpp-httplib (llama.cpp's server) closes one after
        # a fixed number of requests.
        fresh = aiohttp.TCPConnector(force_close=True, limit=width + 8)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers,
                                         auto_decompress=False) as session, \
                aiohttp.ClientSession(connector=fresh, timeout=timeout, headers=headers,
                                      auto_decompress=False) as retry_session:

            async def send(i: int, t_sched: int) -> RequestRecord:
                prompt = prompts[i % len(prompts)]
                body = self.payload(cell, prompt)
                data = json.dumps(body).encode()          # serialised before the clock starts
                n_in = len(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], int) else None
                retried = None
                for attempt in (0, 1):
                    reads: list[tuple[int, bytes]] = []
                    err = None
                    got_response = False
                    t_send = time.perf_counter_ns()
                    try:
                        async with (retry_session if attempt else session).post(url, data=data) as resp:
                            got_response = True
                            if resp.status != 200:
                                text = (await resp.read()).decode(errors="replace")[:300]
                                err = f"HTTP {resp.status}: {text}"
                            else:
                                async for chunk in resp.content.iter_any():
                                    reads.append((time.perf_counter_ns(), chunk))
                    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                        err = f"{type(exc).__name__}: {exc}"
                        # A kept-alive connection the server closed as we reused it: no
                        # response at all, so the server never ran the request. Retry once
                        # on a new connection; t_send is taken again, t_sched is kept.
                        if attempt == 0 and not got_response and not reads:
                            retried = err
                            continue
                    except (aiohttp.ClientError, OSError) as exc:
                        err = f"{type(exc).__name__}: {exc}"
                    break
                rec = to_record(parse_stream(reads, chat), t_send, t_sched, n_in, err)
                if retried:
                    rec = rec.model_copy(update={"server": {**(rec.server or {}), "client_retry": retried}})
                if rec.error is None and rec.n_out != body["max_tokens"]:
                    self._wrong_length += 1
                if rec.error:
                    rec = rec.model_copy(update={"error": self._scrub(rec.error)})
                return rec

            return await run_load(send, load, len(prompts), batch=cell.batch, seed=cell.seed)
