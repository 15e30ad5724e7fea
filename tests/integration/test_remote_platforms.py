"""Remote platforms (the sambanova and cerebras plugins) and user-supplied power, end to
end: a site config declares a platform whose endpoint is a real server on 127.0.0.1, and
`infbench detect` / `infbench run --device NAME` use it with a labelled power source."""

import json
import os
import subprocess
import sys

import pytest

from infbench.store import Store
from tests.support.stub_server import StubServer

pytestmark = pytest.mark.integration
KEY = "csk-test-key-never-stored-1234"


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "infbench.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


@pytest.fixture(scope="module")
def stub():
    with StubServer() as s:
        yield s


def site(tmp_path, text):
    p = tmp_path / "site.toml"
    p.write_text(text)
    return {"INFBENCH_SITE_CONFIG": str(p), "CEREBRAS_API_KEY": KEY}


def test_cerebras_declared_in_site_config_runs_with_time_info_and_labelled_power(stub, tmp_path):
    env = site(tmp_path, f'[cerebras]\nbase_url = "{stub.base_url}"\nsystem = "CS-3"\n'
                         'power_w = 23000\npower_label = "CS-3 nameplate"\n')
    det = cli("detect", "--json", env=env)
    assert det.returncode == 0, det.stderr
    (dev,) = [d for d in json.loads(det.stdout)["devices"] if d["vendor"] == "cerebras"]
    assert dev["kind"] == "remote" and dev["model"] == "CS-3" and dev["properties"]["api_key_set"] is True
    store = tmp_path / "r.db"
    p = cli("run", "--device", "cerebras", "--engine", "openai", "--model", "time_info", "--concurrency", "2",
            "--num-requests", "4", "--input-len", "8", "--output-len", "6", "--warmup", "1", "--store", str(store),
            env=env)
    assert p.returncode == 0, p.stderr
    assert stub.log[-1]["headers"]["Authorization"] == f"Bearer {KEY}"
    s = Store(store)
    (row,) = s.results()
    m = row["metrics"]
    assert row["device"]["vendor"] == "cerebras"
    assert m["energy_source"] == "fixed" and m["energy_label"] == "user-supplied: CS-3 nameplate"
    assert m["avg_power_w"] == pytest.approx(23000, rel=1e-6) and m["output_tokens_per_j"] > 0
    recs = s.records(row["id"])
    assert len(recs) == 4 and all({"queue_time", "prompt_time", "completion_time"} <= set(r.server["time_info"])
                                  for r in recs)
    assert KEY not in p.stdout + p.stderr


def test_bad_site_table_is_a_clear_error(tmp_path):
    env = site(tmp_path, '[sambanova]\nbase_url = "https://api.sambanova.ai/v1"\npower_w = -5\nwatts = 3\n')
    p = cli("run", "--device", "sambanova", "--engine", "openai", "--model", "x", "--dry-run", env=env)
    assert p.returncode != 0
    assert "[sambanova]" in p.stderr and "power_w" in p.stderr and "watts" in p.stderr


def test_power_command_replaces_the_device_sampler(stub, tmp_path):
    """The CPU has no RAPL here; a PDU-style command gives the energy, labelled user-supplied."""
    store = tmp_path / "p.db"
    p = cli("run", "--engine", "openai", "--base-url", stub.base_url, "--model", "normal", "--concurrency", "1",
            "--num-requests", "3", "--input-len", "8", "--output-len", "20", "--store", str(store),
            "--power-command", "echo 'Instantaneous power reading: 250 Watts'", "--power-label", "rack PDU",
            "--power-interval", "0.02", "--warmup", "1")
    assert p.returncode == 0, p.stderr
    (row,) = Store(store).results()
    m = row["metrics"]
    assert m["energy_source"] == "command" and m["energy_label"] == "user-supplied: rack PDU"
    assert m["avg_power_w"] == pytest.approx(250, rel=0.05)
