"""Every scenario on every executor, with real engines: the ``--find-max`` search (llama.cpp's
server, a real process) and perplexity (llama.cpp on the real SmolLM2 GGUF) in this
process, in the CPU worker image (Docker) and on the local two-raylet Ray cluster. Each
stores what the in-process run stores: probes with ``metrics.find_max`` and the knee in the
run's provenance; perplexity measurements that agree across executors; every result with its
device proof. Plus: secrets in a search's endpoint URL are used but never stored or printed.

The sweep scenario's contract is tests/integration/test_executor_contract.py.
"""

from __future__ import annotations

import json
import math

import pytest

from infbench.store import Store
from infbench.store.quality import quality_results
from tests.integration.test_cli import infbench
from tests.integration.test_real_weights import _smollm2, _text

pytestmark = pytest.mark.integration

SEARCH = ["--model", "tiny-random-llama", "--engine", "llama.cpp-server", "--input-len", "16", "--output-len", "4",
          "--concurrency", "1", "--num-requests", "4", "--find-max", "concurrency", "--slo-ttft-ms", "60000",
          "--find-max-limit", "2", "--scrape-interval", "0", "--warmup", "1"]


@pytest.fixture(params=["inprocess", "container", "ray"])
def where(request):
    """``(flags, env)`` of one executor (its fixtures build the image or start the cluster)."""
    if request.param == "inprocess":
        return ["--executor", "inprocess"], {}
    if request.param == "container":
        request.getfixturevalue("cpu_image")
        return ["--executor", "container", "--container-runtime", "docker"], {}
    cluster = request.getfixturevalue("ray_cluster")
    return ["--executor", "ray", "--ray-address", cluster.address, "--device", "cpu"], cluster.env()


def test_find_max_on_every_executor(where, tmp_path):
    flags, env = where
    db = tmp_path / "r.db"
    p = infbench("run", *SEARCH, *flags, "--store", str(db), "--json", env=env)
    out = json.loads(p.stdout)
    fm = out["find_max"]
    assert out["status"] == "completed" and fm["knee"] == 2 and fm["stopped"] == "limit", out
    store = Store(db, readonly=True)
    rows = store.results(all_attempts=True)
    assert sorted(r["metrics"]["find_max"]["load"] for r in rows) == [1, 2]
    assert {r["metrics"]["find_max"]["search_id"] for r in rows} == {fm["search_id"]}
    for r in rows:
        assert r["status"] == "ok" and r["spec"]["engine"] == "llama.cpp-server"
        assert r["engine"]["device_proof"], "every probe proves its device, on every executor"
        assert r["device"]["vendor"] == "cpu"
    (run,) = store.runs()
    assert run["provenance"]["scenario"]["find_max"]["knee"] == 2
    if "ray" in flags:
        assert all("ray_node" in r["device"]["properties"] for r in rows)
    if "container" in flags:
        assert run["provenance"]["container"]["image"].startswith("infbench/cpu-llamacpp:")


@pytest.fixture(scope="module")
def reference_ppl(tmp_path_factory):
    """The in-process perplexity of SmolLM2 Q4_1 on the text (64-token chunks, 2 chunks)."""
    db = tmp_path_factory.mktemp("ppl-ref") / "r.db"
    p = infbench("perplexity", "--model", str(_smollm2()), "--text", str(_text()), "--n-ctx", "64", "--chunks", "2",
                 "--store", str(db), "--json", "--executor", "inprocess")
    (row,) = json.loads(p.stdout)
    return row["perplexity"]


def test_perplexity_on_every_executor(where, tmp_path, reference_ppl):
    flags, env = where
    db = tmp_path / "r.db"
    p = infbench("perplexity", "--model", str(_smollm2()), "--text", str(_text()), "--n-ctx", "64", "--chunks", "2",
                 "--store", str(db), "--json", *flags, env=env)
    (row,) = json.loads(p.stdout)
    value = row["perplexity"]
    assert row["status"] == "ok" and math.isfinite(value) and value > 1
    assert value == pytest.approx(reference_ppl, rel=1e-3)          # the same measurement wherever it ran
    store = Store(db, readonly=True)
    (q,) = quality_results(store)
    proof = q["result"]["engine_info"]["device_proof"]
    assert q["status"] == "ok" and proof["devices"] == ["CPU"], proof      # llama.cpp's own placement: the CPU
    assert q["result"]["n_chunks"] == 2 and q["result"]["weights"]["real"]
    (run,) = store.runs()                                             # perplexity is a run, like a sweep
    assert run["status"] == "completed"


def test_find_max_never_keeps_the_endpoints_secrets(tmp_path):
    from tests.support.stub_server import StubServer

    with StubServer() as stub:
        host = stub.base_url.split("//")[1]
        url = f"http://bob:s3cretPW-991@{host}?api_key=QKEY-31337"
        db = tmp_path / "s.db"
        p = infbench("run", "--engine", "openai", "--base-url", url, "--model", "normal", "--input-len", "4",
                     "--output-len", "3", "--concurrency", "1", "--num-requests", "2", "--find-max", "concurrency",
                     "--slo-ttft-ms", "60000", "--find-max-limit", "2", "--warmup", "1", "--store", str(db), "--json")
        assert stub.log and stub.log[-1]["query"] == "api_key=QKEY-31337"      # used to connect
    out = json.loads(p.stdout)
    assert out["find_max"]["knee"] == 2
    outputs = p.stdout + p.stderr
    for args in (("results", "--format", "json"), ("results", "--format", "csv"), ("results", "--searches")):
        q = infbench(*args, "--store", str(db))
        outputs += q.stdout + q.stderr
    stored = b"".join(f.read_bytes() for f in tmp_path.rglob("*") if f.is_file())
    for leak in ("s3cretPW-991", "QKEY-31337", "bob:"):
        assert leak.encode() not in stored and leak not in outputs, leak
