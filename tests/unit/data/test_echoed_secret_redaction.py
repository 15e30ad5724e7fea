"""A secret that comes back is redacted like the one sent (issue 41, item 2): every secret a run
holds, wherever it is echoed, and a worker's event line."""

from __future__ import annotations


# -- item 2: a value that comes back is redacted like the value sent ----------------------------
def test_every_secret_a_run_holds_is_redacted_wherever_it_comes_back(monkeypatch):
    """Header values, credential-like extra_body values, the --api-key-env key and URL user
    info join the redaction set when the options are checked; an echo of any of them, in
    any surrounding text, is redacted by the one redaction (terminal, store, JSON, CSV)."""
    from infbench.data.engine_options import OpenAIOptions
    from infbench.data.outputs import csv_cell, json_text, terminal_text
    from infbench.data.secrets import redact

    monkeypatch.setenv("MY_KEY", "k3y-Fr0mTheEnv-77")
    OpenAIOptions(extra_headers='{"Authorization": "Bearer abcDEF123456789", "X-Team": "t34m-s3cret",'
                                ' "Accept": "application/json", "X-Source": "infbench"}',
                  extra_body='{"top_k": 5, "credentials": {"pass": "pa55-w0rd-x"}, "note": "sk-live-abcdefghij12"}',
                  api_key_env="MY_KEY", base_url="http://alice:hunter2xyz@host:8000/v1")
    echoed = ("401: invalid token abcDEF123456789; team t34m-s3cret; pass pa55-w0rd-x; key k3y-Fr0mTheEnv-77; "
              "user alice hunter2xyz; note sk-live-abcdefghij12")
    for out in (redact(echoed), terminal_text(echoed), csv_cell(echoed), json_text({"error": echoed})):
        for secret in ("abcDEF123456789", "t34m-s3cret", "pa55-w0rd-x", "k3y-Fr0mTheEnv-77", "hunter2xyz",
                       "abcdefghij12"):
            assert secret not in out, (secret, out)
    # plain header values and ordinary words are not secrets: nothing else is blanked
    assert "application/json" in redact("sent application/json") and redact("see infbench results") == \
        "see infbench results"


def test_a_worker_event_line_is_redacted():
    from infbench.data.events import CellFinished
    from infbench.data.secrets import remember
    from infbench.execution.worker import event_line
    from tests.support.hostile import cell_result

    remember("Bearer zzTOKENzz998877")
    r = cell_result(1, status="failed", error="HTTP 401: bad credential zzTOKENzz998877")
    line = event_line(CellFinished(r))
    assert "zzTOKENzz998877" not in line and "[redacted]" in line

