"""Imperfect servers measured correctly (issue 41, item 7): a stream past `max_tokens` is cut, extra
tokens are not counted and flag the cell, input tokens are estimated without `usage`."""

from __future__ import annotations


def test_a_stream_past_max_tokens_is_cut(tmp_path):
    """A server that streams without end for an 8-token request: the client stops reading
    after the bound and says why, long before any request timeout."""
    import asyncio

    from infbench.measure.client import HttpClient, stream_event_limit

    async def serve(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        ev = b'data: {"choices": [{"text": " tok"}]}\n\n'
        try:
            for _ in range(100_000):
                writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                await writer.drain()
        except (ConnectionError, OSError):
            pass

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = HttpClient(f"http://127.0.0.1:{port}/v1")
        req = client.request_bytes("POST", client.target("completions"), b"{}")
        resp = await asyncio.wait_for(client.send(req, stream_event_limit(8)), 60)
        await client.close()
        server.close()
        return resp

    resp = asyncio.run(main())
    assert resp.error is not None and resp.error.startswith("cut:") and "48 events" in resp.error
    assert 48 < resp.body().count(b"data:") < 200


def test_extra_tokens_are_not_counted_and_flag_the_cell():
    """24 tokens streamed for max_tokens 8 (no usage): the record keeps 8, says 16 extra,
    and the physics check flags the cell."""
    from infbench.analysis.physics import token_reasons
    from infbench.data.schema import Cell
    from infbench.engines.openai import ParsedStream, to_record

    p = ParsedStream(token_times_ns=[1_000_000 * (i + 1) for i in range(24)], done=True)
    rec = to_record(p, 0, 0, 16, None, max_tokens=8)
    assert rec.n_out == 8 and len(rec.t_tokens_ns) == 8 and rec.n_out_extra == 16 and rec.error is None
    cell = Cell(model="m", engine="openai", dtype="auto", batch=1, input_len=16, output_len=8)
    assert any("too many tokens" in r for r in token_reasons(cell, [rec]))


def test_input_tokens_are_estimated_without_usage():
    from infbench.engines.openai import prompt_length_estimate

    assert prompt_length_estimate({"prompt": "a b c d e f g h"}) == 8
    assert prompt_length_estimate({"prompt": [1, 2, 3]}) == 3
    assert prompt_length_estimate({"messages": [{"role": "user", "content": "one two three"}]}) == 3
    assert prompt_length_estimate({"prompt": ""}) is None

