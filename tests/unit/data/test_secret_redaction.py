"""Secrets at the boundary (issue 22): credentials in engine arguments, cell errors, device
properties, import URLs and site endpoints are never stored or printed bare."""

from __future__ import annotations

from infbench.store import Store
from tests.support.boundaries import FIXTURE_CSV
from tests.support.hostile import assert_no_secret, cli, store_dump

SECRET = "hunter2SECRET"


# -- secrets ------------------------------------------------------------------------------------
def test_engine_arg_url_credentials_are_redacted_where_the_store_writes_them(tmp_path):
    """``--engine-arg base_url=http://bob:pw@host/v1`` was stored verbatim in the run's
    command and provenance (only the key's name was checked)."""
    from infbench.data.secrets import command_line

    argv = ["infbench", "run", "--engine", "openai", "--engine-arg", f"base_url=http://bob:{SECRET}@host/v1",
            "--base-url", f"http://h/v1?api_key={SECRET}", "--engine-arg", f"extra=http://h/v1?token={SECRET}x",
            "--engine-arg", f"note=Authorization: Basic {SECRET}"]
    s = Store(tmp_path / "s.db")
    run = s.begin_run({"argv": argv, "engine_options": {"base_url": f"http://bob:{SECRET}@host/v1"}},
                      command=command_line(argv))
    s.finish_run(run, "completed")
    s.close()
    dump = store_dump(tmp_path / "s.db")
    assert_no_secret({"store": dump}, SECRET)
    assert "host/v1" in dump and "base_url=http://[redacted]@host/v1" in dump


def test_cell_errors_and_device_properties_are_stored_redacted(tmp_path):
    import base64

    from tests.support.hostile import cell_result

    basic = base64.b64encode(f"bob:{SECRET}".encode()).decode()
    r = cell_result(1, status="failed", error=f"HTTP 401: you sent Authorization: Basic {basic} "
                                              f"(also Basic {basic}) from https://u:{SECRET}@10.0.0.1/v1")
    r = r.model_copy(update={"device": r.device.model_copy(update={"properties": {
        "base_url": f"https://u:{SECRET}@api.example.com/v1?token={SECRET}", "api_key_env": "K"}})})
    s = Store(tmp_path / "s.db")
    run = s.begin_run({}, command="x")
    s.save_cell(run, r)
    s.close()
    dump = store_dump(tmp_path / "s.db")
    assert_no_secret({"store": dump}, SECRET)
    assert basic not in dump and "api.example.com/v1" in dump and '"api_key_env":"K"' in dump
    # the cell id is untouched: resume still recognises it
    assert Store(tmp_path / "s.db", readonly=True).results()[0]["cell_id"] == r.cell_id


def test_import_url_credentials_are_never_stored_or_printed(tmp_path):
    store = tmp_path / "s.db"
    url = f"https://user:{SECRET}@github.com/argonne-lcf/LLM-Inference-Bench?token={SECRET}2"
    r = cli("import", FIXTURE_CSV, "--store", store, "--url", url, "--json", code=0)
    assert_no_secret({"stdout": r.stdout, "output": r.output, "store": store_dump(store)}, SECRET)
    assert "github.com/argonne-lcf" in r.stdout
    r = cli("import", FIXTURE_CSV, "--store", store, "--url", url, code=0)
    assert_no_secret({"output": r.output}, SECRET)


def test_site_endpoint_credentials_are_never_printed(tmp_path, monkeypatch):
    site = tmp_path / "site.toml"
    site.write_text(f'[cerebras]\nbase_url = "https://u:{SECRET}@api.example.com/v1?token={SECRET}"\n'
                    'api_key_env = "CEREBRAS_API_KEY"\nmodel = "llama3.1-8b"\n')
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    outputs = {}
    for args in (["detect", "--no-engines"], ["detect", "--no-engines", "--json"],
                 ["run", "--device", "cerebras", "--dry-run"], ["run", "--device", "cerebras", "--dry-run", "--json"]):
        r = cli(*args, code=0)
        outputs[" ".join(args)] = r.output
        assert "api.example.com" in r.output, r.output
    assert_no_secret(outputs, SECRET)

