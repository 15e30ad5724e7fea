"""Any OpenAI-compatible server: ``/v1/completions`` or ``/v1/chat/completions``, streamed
or not.

Requests go through infbench's own HTTP/1.1 client (:mod:`infbench.measure.client`): the
body is serialised before the clock starts, ``t_send`` is taken immediately before the
socket write, and while a response streams the client does no per-token work beyond
recording ``(perf_counter_ns(), raw bytes)`` for each network read; the server-sent events
are parsed after the request ends (:func:`parse_stream`). The event loop is uvloop's where
uvloop is installed. Rules (docs/metrics.md):

* The first token is the first event carrying generated text of any kind (reasoning or
  answer); role-only, empty and usage-only events do not count.
* Reasoning is recognised from ``delta.reasoning_content`` / ``delta.reasoning`` (vLLM,
  SGLang, DeepSeek, OpenRouter) or text inside ``<think>...</think>``; the first reasoning
  token, the first answer token (``ttfat_s``) and both counts are kept per request.
* Token counts come from the server's ``usage`` (``stream_options.include_usage``),
  validated against the stream and ``max_tokens`` (a request with impossible counts is
  failed with the reason); a server without usage falls back to one token per text event,
  flagged ``chunks``.
* Output length is forced with ``ignore_eos`` and ``min_tokens`` (vLLM, llama.cpp); a
  server that returns another length gets a warning stored with the cell.
* The API key is read from the environment variable named by ``api_key_env`` and is never
  stored, logged or exported. Credentials in the URL (userinfo, query) are used to connect
  but stored, printed and hashed nowhere (:func:`infbench.data.secrets.redact_url`); server
  error text is stripped of control characters and scrubbed before it is cut.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from infbench.data import metrics as M
from infbench.data.engine import Engine, RunOutput
from infbench.data.engine_options import OpenAIOptions
from infbench.data.errors import CellTimeout, ConfigError, DeviceMismatch, EngineUnavailable
from infbench.data.prompts import range_lengths, synthetic_prompts
from infbench.data.schema import Cell, DeviceBackends, DeviceInfo, Load, RequestRecord
from infbench.data.secrets import clean_text, redact_url, remember_options, url_secrets
from infbench.data.signals import run_event_loop
from infbench.data.warmup import block_cell
from infbench.engines.availability import UNSUPPORTED, USABLE, EngineSupport, device_label
from infbench.measure.client import HttpClient, Response, endpoint_url, stream_event_limit
from infbench.measure.derive import failure_causes, release_lags_s, summarize
from infbench.measure.loadgen import LAG_INTERVAL_S, LoadStats, request_timeout_s, run_load
from infbench.workloads.synthetic import synthetic_text

#: Fields of a final event that describe the request on the server side, kept as-is.
SERVER_FIELDS = ("timings", "time_info", "system_fingerprint")
#: Largest token count accepted from a server's usage when no ``max_tokens`` bounds it.
MAX_SANE_TOKENS = 10_000_000
#: Client-health thresholds: a cell whose event-loop lag p99 or release lag p99 (ms)
#: exceeds these is flagged (``metrics["client"]["behind"]``); the loop lag is judged only
#: when its samples cover at least ``BEHIND_MIN_SPAN_S`` of the timed part (each sample covers
#: its 10 ms sleep plus its lag) and number at least ``BEHIND_MIN_SAMPLES``. The span, not a
#: count, is the floor: a starved loop wakes late, so it takes fewer samples in the same time
#: (at 50 ms of lag, 17 a second instead of 100), and a floor of 100 samples hid the
#: starvation it was meant to show in any timed part shorter than 6 s.
BEHIND_LAG_MS = 5.0
BEHIND_RELEASE_MS = 5.0
BEHIND_MIN_SPAN_S = 1.0
BEHIND_MIN_SAMPLES = 10
#: Raw response bytes kept unparsed during a cell; past it, responses are parsed as they end.
RAW_BUDGET_BYTES = 256 * 2**20
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass
class ParsedStream:
    """What a response said.

    Attributes:
        token_times_ns: arrival time of each event that carried generated text (reasoning
            or answer).
        reasoning_times_ns: arrival time of each event that carried reasoning.
        answer_times_ns: arrival time of each event that carried answer text.
        usage: the ``usage`` object, if the server sent one.
        server: server-side fields (llama.cpp ``timings``, Cerebras ``time_info``...).
        finish_reason: the last ``finish_reason`` seen.
        done: True if ``data: [DONE]`` arrived.
        error: an error event's message or a malformed event, if any.
        text: the answer text (reasoning removed), when asked for.
    """

    token_times_ns: list[int] = field(default_factory=list)
    reasoning_times_ns: list[int] = field(default_factory=list)
    answer_times_ns: list[int] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    server: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    done: bool = False
    error: str | None = None
    text: str | None = None


def _str_field(obj: dict[str, Any], *keys: str) -> str | None:
    for k in keys:
        v = obj.get(k)
        if v:
            if not isinstance(v, str):
                raise ValueError(f"'{k}' is {type(v).__name__}, not a string")
            return v
    return None


def _choice_texts(choice: Any, chat: bool) -> tuple[str | None, str | None]:
    """``(answer text, reasoning text)`` of one choice of an event (chat ``delta`` or
    ``message``, or completions ``text``).

    Raises:
        ValueError: the choice is not shaped as the API says.
    """
    if not isinstance(choice, dict):
        raise ValueError(f"a choice is {type(choice).__name__}, not an object")
    if chat:
        d = choice.get("delta")
        if d is None:
            d = choice.get("message")
        if d is None:
            return None, None
        if not isinstance(d, dict):
            raise ValueError(f"'delta' is {type(d).__name__}, not an object")
        return _str_field(d, "content"), _str_field(d, "reasoning_content", "reasoning")
    return _str_field(choice, "text"), _str_field(choice, "reasoning_content", "reasoning")


def _event(out: ParsedStream, t: int, payload: bytes, chat: bool, content: list[tuple[int, str]]) -> None:
    """Fold one ``data:`` payload into ``out`` (a malformed one sets ``out.error``)."""
    if payload == b"[DONE]":
        out.done = True
        return
    try:
        ev = json.loads(payload)
    except ValueError:
        out.error = f"unparseable event: {clean_text(payload[:2000], limit=None)!r}"
        return
    if not isinstance(ev, dict):
        out.error = f"malformed event: a {type(ev).__name__}, not an object"
        return
    if "error" in ev:
        err = ev["error"]
        out.error = clean_text(str(err.get("message", err)) if isinstance(err, dict) else str(err), limit=None)
        return
    choices = ev.get("choices")
    if choices is not None and not isinstance(choices, list):
        out.error = f"malformed event: 'choices' is {type(choices).__name__}, not a list"
        return
    try:
        for choice in choices or ():
            answer, reasoning = _choice_texts(choice, chat)
            if reasoning:
                out.reasoning_times_ns.append(t)
            if answer:
                content.append((t, answer))
            if answer or reasoning:
                out.token_times_ns.append(t)
            fr = choice.get("finish_reason")
            if fr:
                out.finish_reason = str(fr)
    except ValueError as exc:
        out.error = f"malformed event: {exc}"
        return
    usage = ev.get("usage")
    if usage:
        if not isinstance(usage, dict):
            out.error = f"malformed event: 'usage' is {type(usage).__name__}, not an object"
            return
        out.usage = usage
    for k in SERVER_FIELDS:
        if ev.get(k) is not None:
            out.server[k] = ev[k]


def _split_think(out: ParsedStream, content: list[tuple[int, str]], keep_text: bool) -> None:
    """Answer events and answer text from the content events, text inside
    ``<think>...</think>`` counted as reasoning (a reply that starts inside an unclosed
    block, as when the chat template opened it, reasons up to ``</think>``)."""
    if not content:
        if keep_text:
            out.text = ""
        return
    whole = "".join(c for _, c in content)
    end = whole.find(THINK_CLOSE)
    start = whole.find(THINK_OPEN)
    if end >= 0:
        stop = end + len(THINK_CLOSE)
    elif start >= 0 and not whole[:start].strip():
        stop = len(whole)                     # an unclosed block: everything after it is reasoning
    else:
        stop = 0
    if stop == 0:
        out.answer_times_ns = [t for t, _ in content]
        if keep_text:
            out.text = whole
        return
    pos, think = 0, []
    for t, c in content:
        pos += len(c)
        if pos <= stop:
            think.append(t)
        else:
            out.answer_times_ns.append(t)
    out.reasoning_times_ns = sorted(out.reasoning_times_ns + think)
    if keep_text:
        out.text = whole[stop:].lstrip()


def parse_stream(reads: Sequence[tuple[int, bytes]], chat: bool = False, keep_text: bool = False) -> ParsedStream:
    """Parse server-sent events from raw network reads.

    Args:
        reads: ``(perf_counter_ns at arrival, bytes)`` per network read, in order.
        chat: parse ``delta.content`` (chat) instead of ``text`` (completions).
        keep_text: also return the answer text (multi-turn replay needs it).

    An event split over two reads gets the arrival time of the read that completed it. A
    malformed event makes ``error`` say what was wrong (never raises).
    """
    out = ParsedStream()
    content: list[tuple[int, str]] = []
    buf = b""
    for t, data in reads:
        buf = buf + data.replace(b"\r\n", b"\n") if buf else data.replace(b"\r\n", b"\n")
        if b"\n\n" not in buf:
            continue
        *events, buf = buf.split(b"\n\n")
        for raw in events:
            for line in raw.split(b"\n"):
                if line.startswith(b"data:"):
                    _event(out, t, line[5:].strip(), chat, content)
    _split_think(out, content, keep_text)
    return out


def parse_response(body: bytes, t: int, chat: bool = False, keep_text: bool = False) -> ParsedStream:
    """Parse a non-streaming response (one JSON object) that arrived complete at ``t``:
    one token time (the arrival), the usage, the answer text; reasoning from the
    message's ``reasoning_content`` or a ``<think>`` block."""
    out = ParsedStream()
    content: list[tuple[int, str]] = []
    _event(out, t, body.strip(), chat, content)
    if out.error is None:
        out.done = True
    _split_think(out, content, keep_text)
    return out


def _count(usage: dict[str, Any], key: str, bound: int) -> int | None:
    """``usage[key]`` if it is an integer in ``0..bound``; None if absent.

    Raises:
        ValueError: present but not such an integer (the message names it).
    """
    if key not in usage or usage[key] is None:
        return None
    v = usage[key]
    if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v)
            or not 0 <= v <= bound):
        raise ValueError(f"usage.{key}={str(v)[:40]} is not a token count in 0..{bound}")
    return int(v)


def to_record(p: ParsedStream, t_send: int, t_sched: int, n_in_sent: int | None, transport_error: str | None,
              max_tokens: int | None = None, streamed: bool = True) -> RequestRecord:
    """A :class:`RequestRecord` from a parsed response.

    ``n_out`` is ``usage.completion_tokens`` when given (then ``t_tokens_ns`` gets one
    entry per token: text events, and tokens that came without text placed at the last
    event's time), else the number of text events (flagged ``chunks``). Usage counts are
    validated: negative, above ``max_tokens`` (or :data:`MAX_SANE_TOKENS`), or fewer
    completion tokens than text events streamed make the request failed with the reason.
    A stream that ended without ``[DONE]`` or a finish reason is an error. A
    non-streaming response (``streamed=False``) keeps one token time, its arrival.
    """
    times = list(p.token_times_ns)
    source = "chunks"
    n_out = len(times)
    n_in = n_in_sent or 0
    error = transport_error or p.error
    n_reasoning, r_source = None, None
    if p.usage and error is None:
        try:
            ct = _count(p.usage, "completion_tokens", max_tokens if max_tokens is not None else MAX_SANE_TOKENS)
            pt = _count(p.usage, "prompt_tokens", MAX_SANE_TOKENS)
            if ct is not None and streamed and ct < len(times):
                raise ValueError(f"usage.completion_tokens={ct} but {len(times)} events with text were streamed")
            details = p.usage.get("completion_tokens_details")
            rt = _count(details, "reasoning_tokens", ct or 0) if isinstance(details, dict) else None
        except ValueError as exc:
            error = f"invalid usage from the server: {exc}"
        else:
            if ct is not None:
                source, n_out = "usage", ct
                if streamed and times and n_out > len(times):
                    times += [times[-1]] * (n_out - len(times))
            if pt is not None:
                n_in = pt
            if rt is not None and (rt or not p.reasoning_times_ns):
                n_reasoning, r_source = rt, "usage"
    if n_reasoning is None and p.reasoning_times_ns:
        n_reasoning, r_source = min(len(p.reasoning_times_ns), n_out), "chunks"
    extra = None
    if streamed and max_tokens is not None and error is None and n_out > max_tokens:
        # more than asked (a server ignoring max_tokens): the extra tokens are not this request's work
        extra, n_out, times = n_out - max_tokens, max_tokens, times[:max_tokens]
    if not streamed:
        times = times[:1]
        if not p.usage:
            source = "client_tokenizer"
    if error is None and not (p.done or p.finish_reason):
        error = "stream ended early (no finish_reason and no [DONE])"
    if error is None and not times:
        error = "no generated text in the response"
    server = dict(p.server)
    if p.finish_reason:
        server["finish_reason"] = p.finish_reason
    prompt_details = (p.usage or {}).get("prompt_tokens_details")
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None
    if isinstance(cached, int) and not isinstance(cached, bool) and cached > 0:
        server["cached_tokens"] = cached  # prompt tokens the server took from its prefix cache
    return RequestRecord(t_send_ns=t_send, t_sched_ns=t_sched, t_tokens_ns=times, n_in=n_in, n_out=n_out,
                         n_out_source=source, error=error, server=server or None, streamed=streamed,
                         t_first_reasoning_ns=p.reasoning_times_ns[0] if p.reasoning_times_ns and streamed else None,
                         t_first_answer_ns=p.answer_times_ns[0] if p.answer_times_ns and streamed else None,
                         n_reasoning=n_reasoning, n_reasoning_source=r_source, n_out_extra=extra)


def event_loop_runner() -> tuple[Any, str]:
    """``(run(coro), name)``: uvloop's runner where uvloop is installed, else asyncio's."""
    try:
        import uvloop

        return uvloop.run, "uvloop"
    except ImportError:
        return asyncio.run, "asyncio"



def cell_prompt_seed(cell: Cell, draw: int = 0) -> int:
    """The seed of a served cell's synthetic prompts: its spec hash as an int (the cell's
    ``seed`` and every workload field: lengths, load, trace, speed, repeat).

    A server keeps a prefix cache across cells (vLLM's automatic prefix caching, llama.cpp's
    ``cache_prompt``, SGLang's radix cache), and the client cannot turn it off on a remote
    endpoint. Cells that differ only in load (``--concurrency 1,4,16``) or output length
    would otherwise send the very same prompts, and every cell after the first would be timed
    against a warm cache: a TTFT too short, flagged suspect by the physics check. A seed per
    cell keeps each cell cold, and the same cell measured in another run sends the same prompts.

    Args:
        draw: how many times this cell's prompts were sent to the same server before (0: the
            first time, the cell's own seed). A cell measured again on a server that still
            holds its prompts (issue 38's sentinel re-measures a drifted cell on the loaded
            engine) gets a fresh draw of the same lengths, seed
            ``sha256("<spec hash>/<draw>")[:16]``: the same prompts again would be served from
            the server's prefix cache (llama.cpp's slot reuse found 127 of 128 prompt tokens
            there), and the second attempt would time a prefill that never ran.
    """
    if draw:
        return int(hashlib.sha256(f"{cell.spec_hash()}/{draw}".encode()).hexdigest()[:16], 16)
    return int(cell.spec_hash(), 16)


def unsent_after_timeout(cell: Cell, load: Load, prompts: list[Any], records: list[RequestRecord],
                         offered_s: float) -> list[str]:
    """What a cell whose offering ``--cell-timeout`` cut to ``offered_s`` seconds left out.

    Returns:
        A warning when the load had no fixed request count (a ``--duration`` longer than the
        time left), stored with the cell.

    Raises:
        CellTimeout: requests the cell was planned to send (``--num-requests``, a trace's
            records, the batch) were never sent: the cell is stored failed, naming how many
            and why, never ``ok`` with part of its requests.
    """
    timed = len(prompts) - load.warmup_requests if load.mode == "trace" else (
        cell.batch if load.mode == "batch" else load.num_requests)
    sessions = {r.session for r in records if r.session is not None}
    sent = len(sessions) if sessions else len(records)
    if timed is not None and sent < timed:
        raise CellTimeout(f"--cell-timeout left {offered_s:.1f} s to offer requests: {sent} of the cell's {timed} "
                          f"requests were sent, {timed - sent} never were")
    if timed is None:
        asked = f"--duration {cell.load.duration_s:g} s" if cell.load and cell.load.duration_s else "no time limit"
        return [f"--cell-timeout cut the offering to {offered_s:.1f} s (the cell asked for {asked}); "
                f"{sent} request(s) were sent"]
    return []


class OpenAIEngine(Engine):
    """Drives an OpenAI-compatible server under a serving-mode load.

    Options:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (required); userinfo and query are
            used to connect, never stored.
        api_key_env: name of the environment variable holding the API key (optional).
        endpoint: ``completions`` (default) or ``chat``.
        served_model: model name sent to the server (default: the cell's model).
        prompt_format: ``token_ids`` (exact lengths; needs the server's vocabulary, i.e.
            a zoo model served with dummy weights) or ``text`` (default for external
            endpoints; lengths confirmed from usage).
        tokenizer: a tokenizer folder or cached HF id: text prompts of exact lengths in
            it, and its counts compared with the server's.
        force_output: send ``ignore_eos``/``min_tokens`` (default True; servers that
            reject unknown fields need False).
        extra_body: dict merged into every request (a JSON object; ``--engine-arg
            'extra_body={"top_k": 5}'`` is parsed by :class:`~infbench.data.engine_options.OpenAIOptions`).
        extra_headers: dict of HTTP headers sent with every request (string values; kept
            out of what is stored and printed, like the API key).
        event_loop: ``uvloop`` (default where installed) or ``asyncio``.
    """

    name = "openai"
    #: The engine is a server (remote, or started by a subclass in a process of its own):
    #: :meth:`run` is the serving client, which stays in the measuring process.
    isolate = False
    default_prompt_format = "text"
    options_model: type[OpenAIOptions] = OpenAIOptions
    options: OpenAIOptions

    def __init__(self, device, options=None):
        super().__init__(device, options)
        self.base_url: str = self.options.base_url or ""
        self._key: str | None = None
        self._model: Any = None
        #: spec hash -> how many times that cell's requests were sent to this server
        #: (:func:`cell_prompt_seed`'s ``draw``: a cell sent again gets fresh prompts)
        self._sent: dict[str, int] = {}

    # -- life cycle ----------------------------------------------------------------
    def start(self, group) -> None:
        """Check the configuration and that the server answers.

        Raises:
            ConfigError: no base URL, or the named API key variable is unset.
            EngineUnavailable: httpx missing, or the server does not answer ``/models``.
        """
        try:
            import httpx  # noqa: F401
        except ImportError as exc:
            raise EngineUnavailable("the openai engine needs httpx",
                                    hint="pip install httpx (an infbench dependency: reinstall infbench)") from exc
        if not self.base_url:
            raise ConfigError("the openai engine needs a server URL", hint="pass --base-url http://HOST:PORT/v1")
        env = self.options.api_key_env
        if env:
            self._key = os.environ.get(env)
            if not self._key:
                raise ConfigError(f"environment variable {env} (named by --api-key-env) is not set",
                                  hint=f"export {env}=...")
        remember_options(self.options.model_dump())  # every secret the client holds is redacted wherever it comes back
        self.endpoint = self.options.endpoint
        if self.endpoint not in ("completions", "chat"):
            raise ConfigError(f"unknown endpoint {self.endpoint!r}", hint="use completions or chat")
        if self.options.tokenizer:
            from infbench.workloads.tokenizer import tokenizer_text  # noqa: PLC0415 - start-up: not loaded by detect

            tokenizer_text(str(self.options.tokenizer))          # a bad --tokenizer fails here, clearly
        self.group = group
        self._model = getattr(group, "model", None)
        self._check_server()

    def verify_device(self, group) -> dict[str, Any]:
        """An endpoint infbench did not start is measured as what it is: a ``remote``
        device (the endpoint, or the remote platform the site declares), never a local one.

        Raises:
            DeviceMismatch: the cells are planned on a local device.
        """
        if self.device.kind != "remote":
            raise DeviceMismatch(self.name, device_label(self.device), f"{self.public_url} is an endpoint infbench "
                                 "did not start; its own hardware serves it", f"the endpoint {self.public_url}",
                                 "run it as a remote device: --engine openai --base-url URL")
        return {"device": "remote", "endpoint": self.public_url}

    def _headers(self) -> dict[str, str]:
        extra = {str(k): str(v) for k, v in (self.options.extra_headers or {}).items()}
        return {**extra, **({"Authorization": f"Bearer {self._key}"} if self._key else {})}

    def _secrets(self) -> list[str]:
        """Everything that must never be stored: the API key, URL credentials and query
        values, and the values of ``extra_headers``."""
        headers = [str(v) for v in (self.options.extra_headers or {}).values() if len(str(v)) >= 4]
        return ([self._key] if self._key else []) + url_secrets(self.base_url) + headers

    def _scrub(self, text: str | bytes, limit: int | None = 300) -> str:
        return clean_text(text, self._secrets(), limit)

    @property
    def public_url(self) -> str | None:
        """The base URL without credentials or query (what is stored and printed)."""
        return redact_url(self.base_url)

    def _check_server(self) -> None:
        import httpx

        try:
            r = httpx.get(endpoint_url(self.base_url, "models"), headers=self._headers(), timeout=10)
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"cannot reach {self.public_url}: {self._scrub(str(exc))}",
                                    hint="is the server running? check --base-url") from None
        except ValueError as exc:
            raise ConfigError(f"--base-url {self.public_url} is not a usable URL: {self._scrub(str(exc))}") from None
        if r.status_code >= 400:
            raise EngineUnavailable(f"{self.public_url}/models answered HTTP {r.status_code}: "
                                    f"{self._scrub(r.content, 200)}", hint="check the URL and --api-key-env")

    def stop(self) -> None:
        """Nothing to free: the HTTP client lives only while a cell runs."""

    def describe(self) -> dict[str, Any]:
        """Base URL (credentials and query removed), endpoint, the API key variable's
        *name*, the tokenizer, and the client's event loop."""
        return {"name": self.name, "base_url": self.public_url,
                "endpoint": self.options.endpoint,
                "api_key_env": self.options.api_key_env, "tokenizer": self.options.tokenizer,
                "client": "infbench.measure.client", "event_loop": event_loop_runner()[1]
                if self.options.event_loop == "uvloop" else "asyncio",
                "versions": {}}

    # -- prompts -------------------------------------------------------------------
    def prompt_format(self, model) -> str:
        """``token_ids`` when asked for and the model's vocabulary is known, else ``text``
        (always ``text`` with a ``tokenizer``)."""
        fmt = self.options.prompt_format or self.default_prompt_format
        if self.options.tokenizer and self.options.prompt_format is None:
            return "text"
        if fmt == "token_ids" and "vocab_size" not in model.config:
            raise ConfigError(f"token-id prompts need the vocabulary of {model.name}",
                              hint="use a zoo model or --prompt-format text")
        return fmt

    def map_text(self, text: str) -> str:
        """Text as sent to this server (identity; a dummy-vocabulary server maps words)."""
        return text

    def prompt_maker(self, model) -> Any:
        """The :class:`~infbench.workloads.prompt.PromptMaker` for this server's prompts."""
        from infbench.workloads.prompt import PromptMaker  # noqa: PLC0415 - start-up: not loaded by detect

        fmt = self.prompt_format(model)
        tok = None
        if self.options.tokenizer and fmt == "text":
            from infbench.workloads.tokenizer import tokenizer_text  # noqa: PLC0415 - start-up: not loaded by detect

            tok = tokenizer_text(str(self.options.tokenizer))
        return PromptMaker(fmt, vocab_size=model.config.get("vocab_size"), tokenizer=tok, text_map=self.map_text)

    def make_prompts(self, cell: Cell, model) -> list[Any]:
        """The warm-up and timed prompts of ``cell``: trace requests (built on demand), chat
        conversations or sessions for a dataset cell, shared-prefix or plain synthetic
        prompts (token ids, or text; exact with a ``tokenizer``). Synthetic and trace prompts of
        a cell this server was already sent are a fresh draw (:func:`cell_prompt_seed`); a
        dataset's conversations are the file's, and sent again they may hit the server's prefix
        cache (the physics check flags it).

        Raises:
            ConfigError: the dataset or trace file changed since the cell was planned.
        """
        self._model = model
        load = cell.load or Load(mode="batch")
        if cell.trace is not None:
            return self._trace_prompts(cell, load, model)
        if cell.dataset is not None:
            return self._dataset_prompts(cell)
        n = cell.batch if load.mode == "batch" else (load.num_requests or 64)
        n += load.warmup_requests
        fmt = self.prompt_format(model)
        seed = cell_prompt_seed(cell, self._sent.get(cell.spec_hash(), 0))
        if cell.len_range:  # each request its own lengths (--len-range)
            ins, outs = range_lengths(n, cell.input_len, cell.output_len, cell.len_range,
                                      cell.len_range_convention or "inferencex", seed)
            return self.prompt_maker(model).ranged(ins, outs, seed)
        if cell.prefix_len or self.options.tokenizer:
            maker = self.prompt_maker(model)
            if cell.prefix_len:
                return maker.shared_prefix(n, cell.input_len, cell.prefix_len, cell.num_prefixes or 1, seed)
            return maker.prompts(n, cell.input_len, seed)
        if fmt == "token_ids":
            return synthetic_prompts(n, cell.input_len, model.vocab, seed)
        return [self.map_text(t) for t in synthetic_text(n, cell.input_len, seed)]

    def _dataset_prompts(self, cell: Cell) -> list[Any]:
        from infbench.workloads.chat import chat_requests, chat_sessions, file_digest, token_counter  # noqa: PLC0415 - start-up: not loaded by detect

        d = cell.dataset
        assert d is not None  # called for a dataset cell only
        if file_digest(d.path) != d.sha256:
            raise ConfigError(f"{d.path} changed since this cell was planned (sha256 {d.sha256})",
                              hint="plan again: the file's hash is part of the cell's identity")
        count = token_counter(self._model, d.tokenizer)[0]
        args = (d.path, count, d.n, cell.seed, d.min_input_len, d.max_input_len, d.min_output_len, d.max_output_len)
        m = self.map_text

        def msgs(ms):
            return tuple({**x, "content": m(x["content"])} for x in ms)

        if d.multi_turn:
            return [replace(s, context=msgs(s.context), turns=tuple((m(u), n) for u, n in s.turns))
                    for s in chat_sessions(*args)]
        return [replace(r, messages=msgs(r.messages)) for r in chat_requests(*args)]

    def _trace_prompts(self, cell: Cell, load: Load, model) -> list[Any]:
        from infbench.workloads.chat import file_digest  # noqa: PLC0415 - start-up: not loaded by detect
        from infbench.workloads.trace import TraceRequest, read_trace, select  # noqa: PLC0415 - start-up: not loaded by detect

        tr = cell.trace
        assert tr is not None  # called for a trace cell only
        if file_digest(tr.path) != tr.sha256:
            raise ConfigError(f"{tr.path} changed since this cell was planned (sha256 {tr.sha256})",
                              hint="plan again: the file's hash is part of the cell's identity")
        maker = self.prompt_maker(model)
        recs = select(read_trace(tr.path, tr.format), tr.n)
        # One seed per cell: each cell replays the trace against a cache holding none of its
        # blocks, and a sweep of --trace-speed does not replay the first speed's prompts.
        seed = cell_prompt_seed(cell, self._sent.get(cell.spec_hash(), 0))
        # Warm-up prompts share no block with the trace (another tag of the same seed): the
        # trace's prefix reuse stays its own.
        warm = maker.prompts(load.warmup_requests, min(cell.input_len, 512), seed=seed)
        warm = [type(p)(p.content, min(cell.output_len, 16), p.n_in) for p in warm]
        return warm + [TraceRequest(r, maker, seed, tr.block_tokens) for r in recs]

    # -- running -------------------------------------------------------------------
    def warmup(self, cell: Cell, prompts: list[Any]) -> RunOutput:
        """One warm-up block (:func:`infbench.data.warmup.block_cell`: the cell's batch, or
        ``2 x concurrency`` requests at its concurrency, the output shortened) with prompts of
        its own, so no timed prompt is in the server's prefix cache; its records. The cell's
        ``load.warmup_requests`` are sent inside :meth:`run` besides."""
        block = block_cell(cell)
        if self._model is None:
            raise ConfigError("the warm-up needs the cell's prompts made first (make_prompts)")
        self._block_chat = self._chat(cell)  # a dataset cell's block goes where its requests go
        try:
            return self.run(block, self.make_prompts(block, self._model))
        finally:
            self._block_chat = False

    def payload(self, cell: Cell, prompt: Any, stream: bool = True) -> dict[str, Any]:
        """The JSON body of one request (streamed with usage requested unless ``stream`` is
        False, greedy, forced length: ``cell.output_len``, or the prompt's own)."""
        from infbench.workloads.chat import ChatRequest  # noqa: PLC0415 - start-up: not loaded by detect

        if hasattr(prompt, "materialize"):
            prompt = prompt.materialize()
        n_out = getattr(prompt, "output_len", None) or cell.output_len
        body: dict[str, Any] = {"model": self.options.served_model or cell.model, "stream": stream,
                                "max_tokens": n_out, "temperature": 0.0}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if self.options.force_output:
            body.update(ignore_eos=True, min_tokens=n_out)
        if isinstance(prompt, ChatRequest):
            body["messages"] = list(prompt.messages)
        else:
            content = getattr(prompt, "content", prompt)
            if self._chat(cell):
                text = content if isinstance(content, str) else json.dumps(content)
                body["messages"] = content if isinstance(content, list) and content and isinstance(content[0], dict) \
                    else [{"role": "user", "content": text}]
            else:
                body["prompt"] = content
        body.update(self.options.extra_body or {})
        return body

    def _chat(self, cell: Cell) -> bool:
        """True if requests go to ``/chat/completions`` (``endpoint: chat``, or a dataset cell)."""
        return cell.dataset is not None or self.options.endpoint == "chat" or getattr(self, "_block_chat", False)

    def run(self, cell: Cell, prompts: list[Any], deadline_ns: int | None = None) -> RunOutput:
        """Offer ``cell.load`` to the server; one record per timed request (per turn for
        multi-turn sessions). ``RunOutput.metrics`` carries the client's health."""
        load = cell.load or Load(mode="batch")
        cut_s = None  # the offering was cut short by --cell-timeout: the seconds it had
        if deadline_ns is not None:
            left = max(0.001, (deadline_ns - time.perf_counter_ns()) / 1e9)
            cut_s = left if load.duration_s is None or left < load.duration_s else None
            load = load.model_copy(update={"duration_s": min(load.duration_s or left, left),
                                           "timeout_s": min(request_timeout_s(load), left)})
        t0 = time.perf_counter_ns()
        self._wrong_length = 0
        stats = LoadStats()
        runner, loop_name = event_loop_runner()
        if self.options.event_loop == "asyncio":
            runner, loop_name = asyncio.run, "asyncio"
        key = cell.spec_hash()
        self._sent[key] = self._sent.get(key, 0) + 1  # sent (in part at least): the server may hold them now
        records = run_event_loop(runner, self._run(cell, load, prompts, stats))
        t1 = time.perf_counter_ns()
        warnings = self._warnings(cell, load, prompts, records, stats)
        if cut_s is not None:
            warnings += unsent_after_timeout(cell, load, prompts, records, cut_s)
        health = client_health(records, stats, load, loop_name)
        metrics = {M.CLIENT_LAG_P99.key: health["loop_lag_ms"]["p99"], "client": health}
        return RunOutput(records=records, engine_s=(t1 - t0) / 1e9, warnings=warnings, metrics=metrics)

    def _warnings(self, cell: Cell, load: Load, prompts: list[Any], records: list[RequestRecord],
                  stats: LoadStats) -> list[str]:
        warnings = []
        ok = [r for r in records if r.error is None]
        extra = [r.n_out_extra for r in ok if r.n_out_extra]
        if extra:
            warnings.append(f"{len(extra)} request(s) got more tokens than their max_tokens (up to {max(extra)} "
                            "extra); the extra tokens are not counted and the cell is flagged suspect")
        estimated = sum(r.n_in_source == "estimate" for r in ok)
        if estimated:
            warnings.append(f"the server sent no usage: the prompt tokens of {estimated} request(s) are estimated "
                            "from the prompt's length (n_in_source=estimate)")
        if self._wrong_length:
            want = str(cell.output_len) if cell.dataset is None and cell.trace is None else "the forced length"
            warnings.append(f"{self._wrong_length} request(s) returned an output length other than {want} "
                            "(server ignored ignore_eos/min_tokens?)")
        if (cell.dataset is None and cell.trace is None and not self.options.tokenizer and prompts
                and isinstance(prompts[0], str)):
            seen = [r.n_in for r in ok if r.n_out_source == "usage"]
            if seen and any(n != cell.input_len for n in seen):
                warnings.append(f"text prompts of {cell.input_len} words were {min(seen)}-{max(seen)} tokens by the "
                                "server's usage (each request's own count is stored)")
        diffs = [r.n_in - r.n_in_client for r in ok if r.n_in_client is not None and r.n_out_source == "usage"]
        off = [d for d in diffs if d]
        if off:
            src = f"--tokenizer {self.options.tokenizer}" if self.options.tokenizer else "the client"
            warnings.append(f"prompt tokens: the server's usage differs from {src}'s count in {len(off)} of "
                            f"{len(diffs)} request(s) (server - client: {min(off):+d} to {max(off):+d} tokens; "
                            "the server's count is stored as n_in, the client's as n_in_client)")
        if any(r.n_out_source == "chunks" for r in ok):
            warnings.append("server sent no usage: token counts are one per streamed chunk (estimate)")
        if any(r.n_out_source == "client_tokenizer" for r in ok):
            warnings.append("server sent no usage: output tokens counted by the client (estimate)")
        failed = [r for r in records if r.error]
        if failed and ok:
            warnings.append(f"{len(failed)}/{len(records)} request(s) failed: {failure_causes(failed)}")
        if stats.stopped:
            warnings.append(stats.stopped + (f"; {stats.not_sent} planned request(s) not sent"
                                             if stats.not_sent else ""))
        return warnings

    async def _run(self, cell: Cell, load: Load, prompts: list[Any], stats: LoadStats) -> list[RequestRecord]:
        from infbench.workloads.chat import ChatSession  # noqa: PLC0415 - start-up: not loaded by detect

        chat = self._chat(cell)
        stream = load.stream is not False
        client = HttpClient(self.base_url, self._headers())
        target = client.target("chat/completions" if chat else "completions")
        timeout = request_timeout_s(load)
        sessions = bool(prompts) and isinstance(prompts[0], ChatSession)
        prepared: dict[int, tuple[bytes, int, int | None, int | None]] = {}

        def build(i: int) -> tuple[bytes, int, int | None, int | None]:
            p = prompts[i % len(prompts)]
            if hasattr(p, "materialize"):
                p = p.materialize()
            body = self.payload(cell, p, stream)
            n_in = getattr(p, "n_in", None)
            if n_in is None and isinstance(p, list) and p and isinstance(p[0], int):
                n_in = len(p)
            if n_in is None and chat and self.options.tokenizer and "messages" in body:
                from infbench.workloads.tokenizer import tokenizer_text  # noqa: PLC0415 - start-up: not loaded by detect

                n_in = tokenizer_text(str(self.options.tokenizer)).chat_count(body["messages"])
            elif n_in is None and self.options.tokenizer and isinstance(body.get("prompt"), str):
                from infbench.workloads.tokenizer import tokenizer_text  # noqa: PLC0415 - start-up: not loaded by detect

                n_in = tokenizer_text(str(self.options.tokenizer)).count(body["prompt"])
            data = json.dumps(body).encode()
            return client.request_bytes("POST", target, data), body["max_tokens"], n_in, \
                None if n_in is not None else prompt_length_estimate(body)

        def prepare(i: int) -> None:
            if i not in prepared:
                prepared[i] = build(i)

        def bound(max_tokens: int) -> int | None:
            return stream_event_limit(max_tokens) if stream else None

        def finish(raw: _Raw, keep_text: bool = False) -> tuple[RequestRecord, str | None]:
            rec, text = self._record(raw.resp, raw.t_sched, raw.n_in, raw.max_tokens, chat, stream, keep_text)
            if rec.error is None and not rec.n_in and raw.n_in_est:  # no usage: the prompt's known length
                rec = rec.model_copy(update={"n_in": raw.n_in_est, "n_in_source": "estimate"})
            if rec.error is None and rec.n_out != raw.max_tokens:
                self._wrong_length += 1
            return rec, text

        async def one(req: bytes, max_tokens: int, n_in: int | None, t_sched: int,
                      keep_text: bool = False) -> tuple[RequestRecord, str | None]:
            return finish(_Raw(await client.send(req, bound(max_tokens)), t_sched, n_in, max_tokens), keep_text)

        buffered = [0]

        async def send(i: int, t_sched: int) -> RequestRecord | _Raw:
            # The response is parsed after the cell (no parsing while others stream: a burst
            # of requests finishing together would stall the loop), unless the raw responses
            # kept so far exceed RAW_BUDGET_BYTES.
            req, max_tokens, n_in, n_est = prepared.pop(i) if i in prepared else build(i)
            raw = _Raw(await client.send(req, bound(max_tokens)), t_sched, n_in, max_tokens, n_est)
            buffered[0] += sum(len(d) for _, d in raw.resp.reads)
            return raw if buffered[0] <= RAW_BUDGET_BYTES else finish(raw)[0]

        async def session(i: int, t_sched: int) -> list[RequestRecord]:
            s: ChatSession = prompts[i % len(prompts)]
            turns = s.turns[:1] if i < load.warmup_requests else s.turns
            history = list(s.context)
            think = float(cell.dataset.think_time_s or 0.0) if cell.dataset else 0.0
            out = []
            for k, (user, n_out) in enumerate(turns, 1):
                history.append({"role": "user", "content": user})
                body = self.payload(cell, _Messages(tuple(history), n_out), stream)
                n_in = None
                if self.options.tokenizer:
                    from infbench.workloads.tokenizer import tokenizer_text  # noqa: PLC0415 - start-up: not loaded by detect

                    n_in = tokenizer_text(str(self.options.tokenizer)).chat_count(history)
                req = client.request_bytes("POST", target, json.dumps(body).encode())
                try:
                    async with asyncio.timeout(timeout):
                        rec, text = await one(req, n_out, n_in, t_sched, keep_text=True)
                except TimeoutError:
                    rec, text = RequestRecord(t_send_ns=t_sched, t_sched_ns=t_sched,
                                              error=f"timeout after {timeout:g} s (--request-timeout)"), None
                out.append(rec.model_copy(update={"session": i, "turn": k}))
                if rec.error is not None:
                    break                          # the conversation cannot go on without the answer
                history.append({"role": "assistant", "content": text or ""})
                t_sched = time.perf_counter_ns() + int(think * 1e9)
                if think and k < len(turns):
                    await asyncio.sleep(think)
            return out

        # What exists now is never garbage: out of the collector's way for the timed part
        # (as vLLM's bench client does), so a collection does not stall the reads. The young
        # generations are collected first; the oldest is frozen as it is, its garbage collected
        # after the run, once unfrozen (a full collection took 0.5 s here with vLLM's modules
        # loaded by its availability probe, before every warm-up block: 7.6 s over two cells).
        gc.collect(1)
        gc.freeze()
        try:
            out = await run_load(session if sessions else send, load, len(prompts), batch=cell.batch,
                                 seed=cell.seed, schedule_s=self._schedule(cell, load, prompts), stats=stats,
                                 guard=not sessions, prepare=None if sessions else prepare)
        finally:
            gc.unfreeze()
            await client.close()
        return [finish(r)[0] if isinstance(r, _Raw) else r for r in out]

    @staticmethod
    def _schedule(cell: Cell, load: Load, prompts: list[Any]) -> list[float] | None:
        """Trace mode: release offsets (s) of the timed requests, trace time over speed."""
        if load.mode != "trace":
            return None
        speed = load.trace_speed or 1.0
        return [p.record.t_s / speed for p in prompts[load.warmup_requests:]]

    def _record(self, resp: Response, t_sched: int, n_in: int | None, max_tokens: int, chat: bool, stream: bool,
                keep_text: bool) -> tuple[RequestRecord, str | None]:
        """The record of one response (never raises: an unexpected parse failure is the
        request's error), and its answer text when ``keep_text``."""
        err = resp.error
        if err is None and resp.status != 200:
            err = f"HTTP {resp.status}: {resp.body()[:4096].decode('utf-8', 'replace')}"
        try:
            if err is None and not stream:
                last = resp.reads[-1][0] if resp.reads else time.perf_counter_ns()
                p = parse_response(resp.body(), last, chat, keep_text)
            else:
                p = parse_stream(resp.reads if resp.status == 200 else [], chat, keep_text)
            rec = to_record(p, resp.t_send_ns, t_sched, n_in, err, max_tokens, streamed=stream)
            text = p.text
        except Exception as exc:  # noqa: BLE001 - one bad response is that request's error
            rec = RequestRecord(t_send_ns=resp.t_send_ns, t_sched_ns=t_sched,
                                error=f"could not read the response: {type(exc).__name__}: {exc}")
            text = None
        if not stream and rec.error is None and rec.n_out_source == "client_tokenizer":
            n = self._count_text(text if text is not None else _answer_text(resp.body(), chat))
            over = n - max_tokens if n > max_tokens else None  # beyond max_tokens: not this request's work
            rec = rec.model_copy(update={"n_out": min(n, max_tokens), "n_out_extra": over})
        if n_in is not None:
            rec = rec.model_copy(update={"n_in_client": n_in, "n_in": rec.n_in or n_in})
        if resp.retried:
            rec = rec.model_copy(update={"server": {**(rec.server or {}), "client_retry": self._scrub(resp.retried)}})
        if rec.error:
            rec = rec.model_copy(update={"error": self._scrub(rec.error)})
        return rec, text

    def _count_text(self, text: str) -> int:
        if self.options.tokenizer:
            from infbench.workloads.tokenizer import tokenizer_text  # noqa: PLC0415 - start-up: not loaded by detect

            return tokenizer_text(str(self.options.tokenizer)).count(text)
        return len(text.split())


@dataclass
class _Raw:
    """A response not parsed yet (parsed after the cell's timed part).

    ``error`` is what the load generator sees while the cell runs: the transport error, an
    HTTP error status, or None (the response may still turn out to be bad when parsed).
    """

    resp: Response
    t_sched: int
    n_in: int | None
    max_tokens: int
    n_in_est: int | None = None

    @property
    def error(self) -> str | None:
        return self.resp.error or (f"HTTP {self.resp.status}" if self.resp.status != 200 else None)


@dataclass(frozen=True)
class _Messages:
    """A chat prompt built turn by turn (multi-turn replay): messages and forced length."""

    messages: tuple[dict[str, str], ...]
    output_len: int

    @property
    def content(self) -> list[dict[str, str]]:
        return list(self.messages)


def prompt_length_estimate(body: dict[str, Any]) -> int | None:
    """The prompt's length in tokens as the client knows it without a tokenizer: the words
    of a text prompt (a synthetic prompt is built of words that are one token each), or of
    a chat's messages; None when there is no text. Stored with ``n_in_source="estimate"``
    when the server's response carries no ``usage`` (issue 41: ``n_in_total`` was 0 and the
    total tok/s understated)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return len(prompt.split()) or None
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    msgs = body.get("messages")
    if isinstance(msgs, list):
        n = sum(len(str(m.get("content", "")).split()) for m in msgs if isinstance(m, dict))
        return n or None
    return None


def _answer_text(body: bytes, chat: bool) -> str:
    return parse_response(body, 0, chat, keep_text=True).text or ""


def client_health(records: Sequence[RequestRecord], stats: LoadStats, load: Load, loop: str) -> dict[str, Any]:
    """The client's own health over a cell (``metrics["client"]``).

    Returns:
        ``{"loop_lag_ms": summary of the event loop's lag samples (ms), "release_lag_ms":
        summary of t_send - t_sched over sent requests (ms), "behind": [reasons],
        "event_loop": "uvloop"|"asyncio", "stopped": reason or None}``. The client is
        behind its reads when the loop lag p99 exceeds :data:`BEHIND_LAG_MS` (judged over
        samples that span at least :data:`BEHIND_MIN_SPAN_S`), and behind
        its schedule (rate and trace modes without a concurrency cap) when the release lag
        p99 exceeds :data:`BEHIND_RELEASE_MS`. The flag is not a warning of the cell: the
        figures stand, and ``client_lag_p99_ms`` says how far the client's own stamps may lag.
    """
    lag = summarize(stats.loop_lag_ms)
    rel = summarize([x * 1e3 for x in release_lags_s(records)])
    span_s = len(stats.loop_lag_ms) * LAG_INTERVAL_S + sum(stats.loop_lag_ms) / 1e3  # sleeps + lags
    behind = []
    if (len(stats.loop_lag_ms) >= BEHIND_MIN_SAMPLES and span_s >= BEHIND_MIN_SPAN_S and lag["p99"] is not None
            and lag["p99"] > BEHIND_LAG_MS):
        behind.append(f"event-loop lag p99 {lag['p99']:.1f} ms > {BEHIND_LAG_MS:g} ms (reads waited)")
    if (load.mode in ("rate", "trace") and not load.concurrency and rel["p99"] is not None
            and rel["p99"] > BEHIND_RELEASE_MS):
        behind.append(f"release lag p99 {rel['p99']:.1f} ms > {BEHIND_RELEASE_MS:g} ms (requests left late)")
    return {"loop_lag_ms": lag, "release_lag_ms": rel, "behind": behind, "event_loop": loop,
            "stopped": stats.stopped}


# --- where this engine runs (EngineSpec.check, shown by `infbench detect`) ---------------------

def check_openai(device: DeviceInfo, backends: DeviceBackends | None) -> EngineSupport:
    """The OpenAI client measures remote endpoints only: a local device is not what it runs on."""
    if device.kind != "remote":
        return EngineSupport("openai", UNSUPPORTED, "it measures an endpoint infbench did not start; the endpoint's "
                             "hardware, not this device, serves it", fix="use --base-url URL (a remote device)")
    return EngineSupport("openai", USABLE, f"endpoint {device.properties.get('base_url', device.model)}")
