"""Quality per precision, fast layer: the llama-perplexity arithmetic (chunks, BOS, scored
half, uncertainty), real-vs-dummy weights and their hashes, derived GGUF precisions on a
tiny dummy file, the gate, the store table, the report join and `compare --dtypes`, and
the CLI's refusal of dummy weights."""

import hashlib
import json
import math
import subprocess
import sys

import gguf
import numpy as np
import pytest

from infbench.data.errors import ConfigError
from infbench.data.models import resolve
from infbench.data.scores import PerplexityResult, quality_key
from infbench.data.stored import StoredCell
from infbench.engines.gguf_dummy import write_dummy_gguf
from infbench.quality.gate import parse_increase, precision_class, with_gate
from infbench.quality.perplexity import chunk_tokens, first_scored, hf_tokenize, nll_from_logits, summarize
from infbench.quality.weights import dtype_name, folder_sha256, require_real_weights, weights_info


# -- the method ------------------------------------------------------------------------------
def test_chunks_are_non_overlapping_with_bos_first():
    toks = np.arange(100, 100 + 2100)
    c = chunk_tokens(toks, 512, bos_id=1)
    assert c.shape == (4, 512)                          # 2100 // 512, the tail dropped
    assert list(c[:, 0]) == [1, 1, 1, 1]                 # BOS replaces each chunk's first token
    assert list(c[1, 1:4]) == [100 + 513, 100 + 514, 100 + 515]
    assert chunk_tokens(toks, 512, bos_id=None)[2, 0] == 100 + 1024   # no BOS: the text's own token
    assert chunk_tokens(toks, 512, None, max_chunks=2).shape == (2, 512)
    with pytest.raises(ConfigError, match="2099 tokens.*needs at least 4200"):
        chunk_tokens(toks[:2099], 2100, None)


def test_second_half_is_scored():
    assert first_scored(512) == 256       # logits at 256..510 predict tokens 257..511: 255 per chunk
    assert first_scored(7) == 3


def test_nll_and_summary_match_hand_computation():
    logits = np.array([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]], dtype=np.float32)
    nll = nll_from_logits(logits, np.array([2, 1]))
    lse0 = math.log(1 + math.e + math.e ** 2)
    lse1 = math.log(math.e ** 3 + 2)
    assert nll == pytest.approx([lse0 - 2.0, lse1 - 0.0])
    # rows over several blocks (and a last, shorter one) give the whole-array formula's values;
    # large logits do not overflow
    from infbench.quality.perplexity import NLL_BLOCK_ROWS

    rng = np.random.default_rng(0)
    k = 2 * NLL_BLOCK_ROWS + 5
    big = (rng.standard_normal((k, 300)) * 30 + 500).astype(np.float32)
    tg = rng.integers(0, 300, k)
    x = big.astype(np.float64)
    whole = x.max(1) + np.log(np.exp(x - x.max(1)[:, None]).sum(1)) - x[np.arange(k), tg]
    np.testing.assert_allclose(nll_from_logits(big, tg), whole, rtol=1e-12)
    assert nll_from_logits(big[:0], tg[:0]).shape == (0,)
    v = np.array([1.0, 2.0, 4.0, 3.0])
    s = summarize(v)
    mean = v.mean()
    var = (v ** 2).mean() - mean ** 2
    assert s["perplexity"] == pytest.approx(math.exp(mean))
    # llama.cpp perplexity.cpp: PPL +/- PPL * sqrt(var / (count - 1))
    assert s["stderr"] == pytest.approx(math.exp(mean) * math.sqrt(var / 3))
    assert s["n_tokens"] == 4


def test_quality_key_covers_every_identity_field():
    base = ("m.gguf", "abc", "llama.cpp", "q4_0", "txt", 512, None)
    keys = {quality_key(*base)}
    for i, alt in enumerate(["n.gguf", "abd", "transformers", "q8_0", "tx2", 256, 4]):
        keys.add(quality_key(*base[:i], alt, *base[i + 1:]))
    assert len(keys) == 8


class _Tok:
    """Stand-in for a Hugging Face tokenizer: ids = word lengths, BOS 1 if ``bos``."""

    def __init__(self, bos):
        self.bos, self.bos_token_id = bos, 1

    def encode(self, text, add_special_tokens=True):
        ids = [len(w) + 10 for w in text.split()]
        return ([1] if self.bos and add_special_tokens else []) + ids


def test_hf_tokenize_adds_bos_only_where_the_tokenizer_does():
    ids, bos = hf_tokenize(_Tok(bos=True), "ab cde")
    assert list(ids) == [1, 12, 13] and bos == 1
    ids, bos = hf_tokenize(_Tok(bos=False), "ab cde")
    assert list(ids) == [12, 13] and bos is None


def test_every_engine_tokenizes_a_gguf_model_with_its_gguf_vocabulary(tmp_path):
    pytest.importorskip("llama_cpp")
    from infbench.engines.gguf_dummy import dummy_text
    from infbench.quality.perplexity import gguf_tokenize, tokenizer_source
    from infbench.quality.quantize import HF_PROVENANCE
    from infbench.quality.weights import WeightsInfo

    g = write_dummy_gguf(resolve("tiny-random-llama"), "f16", tmp_path / "d.gguf")
    ids, bos = gguf_tokenize(g, dummy_text("one two one", 512))
    assert bos == 1 and ids[0] == 1 and len(ids) == 4 and ids[1] == ids[3] != ids[2]   # BOS + one token per word
    assert tokenizer_source(WeightsInfo(real=True, format="gguf", path=str(g))) == str(g)
    folder = tmp_path / "hf"
    folder.mkdir()
    assert tokenizer_source(WeightsInfo(real=True, format="hf", path=str(folder))) is None
    (folder / HF_PROVENANCE).write_text(json.dumps({"parent": str(g)}))              # written from that GGUF
    assert tokenizer_source(WeightsInfo(real=True, format="hf", path=str(folder))) == str(g)


# -- real or dummy weights -----------------------------------------------------------------------
def test_dummy_weights_are_recognised_and_refused(tmp_path):
    zoo = resolve("tiny-random-llama")
    assert not weights_info(zoo).real
    with pytest.raises(ConfigError, match="random \\(dummy\\) weights.*zoo shape"):
        require_real_weights(zoo)
    g = write_dummy_gguf(zoo, "q8_0", tmp_path / "d.gguf")
    with pytest.raises(ConfigError, match="infbench wrote with random"):
        require_real_weights(resolve(str(g)))
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(zoo.config))
    with pytest.raises(ConfigError, match="holds no weight files"):
        require_real_weights(resolve(str(folder)))


def test_real_hf_folder_hash_is_over_its_weight_files(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(resolve("tiny").config))
    (folder / "model-00002.safetensors").write_bytes(b"two")
    (folder / "model-00001.safetensors").write_bytes(b"one")
    info = require_real_weights(resolve(str(folder)))
    lines = "".join(f"{hashlib.sha256(d).hexdigest()}  model-0000{i}.safetensors\n"
                    for i, d in ((1, b"one"), (2, b"two")))
    assert info.real and info.format == "hf" and info.files == ["model-00001.safetensors", "model-00002.safetensors"]
    assert info.sha256 == folder_sha256(folder) == hashlib.sha256(lines.encode()).hexdigest()
    (folder / "model-00001.safetensors").write_bytes(b"ONE")      # changed weights, changed hash (cache keyed by mtime)
    assert require_real_weights(resolve(str(folder))).sha256 != info.sha256


def test_a_real_gguf_runs_at_its_own_type_unless_told(tmp_path):
    from infbench.quality.weights import gguf_native_dtypes

    g = write_dummy_gguf(resolve("tiny-random-llama"), "q8_0", tmp_path / "d.gguf")
    assert gguf_native_dtypes([str(g)]) == ["q8_0"]
    assert gguf_native_dtypes([str(g), "tiny-random-llama"]) is None      # a zoo model: the sweep's dtypes
    assert gguf_native_dtypes(None) is None


def test_gguf_file_types_as_infbench_spells_them():
    assert [dtype_name(t) for t in (0, 1, 2, 3, 7, 10, 15, 32)] == ["f32", "f16", "q4_0", "q4_1", "q8_0", "q2_k",
                                                                    "q4_k_m", "bf16"]
    assert precision_class("q4_K_M") == "int4" and precision_class("float16") == "fp16"


# -- derived precisions ------------------------------------------------------------------------
def test_derive_dequantizes_then_quantizes_with_provenance(tmp_path):
    pytest.importorskip("llama_cpp")
    from infbench.quality.quantize import derive, provenance_of
    from infbench.quality.weights import file_sha256

    src = write_dummy_gguf(resolve("tiny-random-llama"), "q8_0", tmp_path / "tiny-q8_0.gguf")
    cache = tmp_path / "cache"
    assert derive(src, "q8_0", cache).path == src.resolve()          # its own type: the file itself
    f16 = derive(src, "f16", cache)
    assert f16.created and f16.path.parent.name == file_sha256(src)[:16]
    r_src, r_f16 = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(f16.path))
    t_src = {t.name: t for t in r_src.tensors}
    for t in r_f16.tensors:
        if t.name.endswith("norm.weight"):
            assert t.tensor_type.name == "F32"
            continue
        assert t.tensor_type.name == "F16"
        ref = gguf.quants.dequantize(t_src[t.name].data, t_src[t.name].tensor_type)
        assert np.array_equal(np.asarray(t.data), ref.astype(np.float16))     # exactly the parent's values
    assert r_f16.fields["infbench.parent.sha256"].contents() == file_sha256(src)
    assert r_f16.fields["general.file_type"].contents() == 1
    q4 = derive(src, "Q4_0", cache, threads=1)
    prov = provenance_of(q4.path)
    assert prov["parent_sha256"] == file_sha256(src) and prov["dtype"] == "q4_0" and prov["parent_dtype"] == "q8_0"
    assert prov["base_sha256"] == file_sha256(f16.path) and "llama_model_quantize" in prov["method"]
    assert prov["sha256"] == file_sha256(q4.path)
    # 7 matrices per layer at the target type; llama.cpp picks the embeddings' and output's own.
    assert prov["tensor_types"]["Q4_0"] >= 7 * 2 and sum(prov["tensor_types"].values()) == 3 + 9 * 2
    assert gguf.GGUFReader(str(q4.path)).fields["infbench.parent.sha256"].contents() == file_sha256(src)
    again = derive(src, "q4_0", cache)
    assert not again.created and again.path == q4.path                  # cached
    with pytest.raises(ConfigError, match="cannot quantize to 'q3'"):
        derive(src, "q3", cache)


# -- the gate ---------------------------------------------------------------------------------
def _q(id_, dtype, value, engine="llama.cpp", sha="w1", status="ok", text="t1"):
    return {"id": id_, "quality_key": f"k{id_}", "model": "m.gguf", "weights_sha256": sha, "engine": engine,
            "dtype": dtype, "text_sha256": text, "text_path": "/x/LICENSE.txt", "n_ctx": 512, "max_chunks": None,
            "n_chunks": 6, "n_tokens": 1530, "status": status, "error": None, "value": value, "stderr": 0.05,
            "result": {}}


def test_parse_increase():
    assert parse_increase("1%") == pytest.approx(0.01)
    assert parse_increase("0.5") == pytest.approx(0.005)
    assert parse_increase(None) is None
    for bad in ("one", "-2%"):
        with pytest.raises(ConfigError):
            parse_increase(bad)


def test_gate_compares_with_the_highest_precision_of_each_group():
    rows = [_q(1, "q4_0", 10.5), _q(2, "f16", 10.0), _q(3, "q8_0", 10.05), _q(4, "q2_k", 14.0),
            _q(5, "float32", 11.0, engine="transformers"), _q(6, "q4_0", 20.0, text="t2"),
            _q(7, "q8_0", None, status="failed")]
    g = {r["id"]: r for r in with_gate(rows, 0.01)}
    assert g[1]["baseline_dtype"] == "f16" and g[1]["ppl_increase"] == pytest.approx(0.05) and g[1]["beyond_gate"]
    assert g[3]["ppl_increase"] == pytest.approx(0.005) and g[3]["beyond_gate"] is False
    assert g[2]["ppl_increase"] == 0 and g[2]["beyond_gate"] is False
    assert g[4]["beyond_gate"] is True
    assert g[5]["baseline_dtype"] == "float32"            # another engine: its own group
    assert g[6]["baseline_dtype"] == "q4_0"               # another text: its own group
    assert g[7]["ppl_increase"] is None and g[7]["beyond_gate"] is None
    assert with_gate(rows, None)[0]["beyond_gate"] is None
    assert {r["id"]: r["baseline_dtype"] for r in with_gate(rows, 0.01, baseline="q8_0")}[1] == "q8_0"


# -- store, report join, compare ------------------------------------------------------------------
def _result(dtype, ppl, engine="llama.cpp", sha="w1"):
    return PerplexityResult(model="m.gguf", weights_sha256=sha, engine=engine, dtype=dtype, text_path="/x/t.txt",
                            text_sha256="t1", n_ctx=512, n_chunks=6, n_tokens=1530, perplexity=ppl, stderr=0.1,
                            started_at=1.0, finished_at=2.0)


def test_store_keeps_the_newest_measurement_per_key(tmp_path):
    from infbench.store import Store
    from infbench.store.quality import quality_results, save_quality, stored_ok

    s = Store(tmp_path / "r.db")
    a = _result("q4_0", 11.0)
    save_quality(s, a)
    save_quality(s, _result("q4_0", 10.9))
    save_quality(s, _result("f16", 10.0))
    failed = _result("q2_k", None).model_copy(update={"status": "failed", "error": "RuntimeError: x"})
    save_quality(s, failed)
    rows = quality_results(s)
    assert [(r["dtype"], r["value"]) for r in rows] == [("q4_0", 10.9), ("f16", 10.0), ("q2_k", None)]
    assert len(quality_results(s, all_attempts=True)) == 4
    assert rows[0]["result"]["n_tokens"] == 1530 and rows[0]["quality_key"] == a.key()
    assert stored_ok(s, a.key())["value"] == 10.9 and stored_ok(s, failed.key()) is None
    assert [r["dtype"] for r in quality_results(s, status="ok")] == ["q4_0", "f16"]


def _cell(dtype, tok_s, engine="llama.cpp", sha="w1", batch=1):
    spec = {"model": "m.gguf", "engine": engine, "dtype": dtype, "batch": batch, "input_len": 16, "output_len": 8}
    from infbench.data.schema import short_hash

    return StoredCell(cell_id=short_hash([spec, "d"]), spec_hash=short_hash(spec), run_id="r1", status="ok",
                      error=None, spec=spec, device={"vendor": "cpu", "kind": "cpu", "model": "CPU", "count": 1},
                      metrics={"output_tok_s": tok_s},
                      engine={"name": engine, "weights": {"real": True, "sha256": sha}}, finished_at=1.0)


def test_report_joins_perplexity_by_weights_hash_engine_and_dtype():
    from infbench.report.data import attach_perplexity, flat_row, quality_points

    flat = [flat_row(c) for c in (_cell("f16", 50.0), _cell("f16", 80.0, batch=4), _cell("q4_0", 120.0),
                                  _cell("q4_0", 130.0, engine="llama.cpp-server"), _cell("q8_0", 90.0),
                                  _cell("f16", 60.0, sha="other"))]
    q = with_gate([_q(1, "f16", 10.0), _q(2, "q4_0", 10.5)], 0.01)
    assert attach_perplexity(flat, q) == 4
    assert [f["perplexity"] for f in flat] == [10.0, 10.0, 10.5, 10.5, None, None]
    assert flat[3]["beyond_gate"] is True and flat[0]["ppl_increase"] == 0
    pts = quality_points(flat)
    assert [(p["dtype"], p["output_tok_s"]) for p in pts] == [("f16", 80.0), ("q4_0", 120.0), ("q4_0", 130.0)]


def test_compare_precisions_matches_workloads_across_dtypes():
    from infbench.report.compare import compare_precisions

    rows = [_cell("f16", 50.0), _cell("q4_0", 100.0), _cell("f16", 70.0, batch=4)]
    res = compare_precisions(rows, rows, "f16", "Q4_0", [_q(1, "f16", 10.0), _q(2, "q4_0", 10.5),
                                                         _q(3, "q8_0", 10.01)], 0.01)
    assert len(res["pairs"]) == 1 and res["pairs"][0]["ratio"]["output_tok_s"] == pytest.approx(2.0)
    assert res["only_a"] == 1
    (p,) = res["perplexity"]
    assert p["ppl_a"] == 10.0 and p["ppl_b"] == 10.5 and p["change"] == pytest.approx(0.05) and p["beyond_gate"]


# -- CLI ---------------------------------------------------------------------------------------
def _cli(*args, home):
    import os

    return subprocess.run([sys.executable, "-m", "infbench.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "INFBENCH_HOME": str(home)}, timeout=120)


def test_cli_refuses_dummy_weights(tmp_path, infbench_home):
    text = tmp_path / "t.txt"
    text.write_text("word " * 2000)
    p = _cli("perplexity", "--model", "tiny-random-llama", "--text", str(text), home=infbench_home)
    assert p.returncode == 2
    assert "random (dummy) weights" in p.stderr and "measure noise" in p.stderr and "hint:" in p.stderr
    p = _cli("perplexity", "--model", "tiny", "--engine", "llama.cpp-server", "--text", str(text),
             home=infbench_home)
    assert p.returncode == 2 and "perplexity runs on llama.cpp, transformers, vllm" in p.stderr


def test_cli_results_and_compare_show_stored_perplexity(tmp_path, infbench_home):
    from infbench.store import Store
    from infbench.store.quality import save_quality

    db = tmp_path / "r.db"
    s = Store(db)
    for d, v in (("f16", 10.0), ("q8_0", 10.05), ("q4_0", 10.5)):
        save_quality(s, _result(d, v))
    s.close()
    p = _cli("results", "--quality", "--format", "json", "--store", str(db), "--max-ppl-increase", "1%",
             home=infbench_home)
    rows = {r["dtype"]: r for r in json.loads(p.stdout)}
    assert rows["q4_0"]["beyond_gate"] is True and rows["q8_0"]["beyond_gate"] is False
    assert rows["q4_0"]["perplexity"] == 10.5 and rows["q4_0"]["baseline_dtype"] == "f16"
    t = _cli("results", "--store", str(db), "--max-ppl-increase", "1%", home=infbench_home).stdout
    assert "perplexity" in t and "+5.00 % vs f16" in t
    c = _cli("compare", "--dtypes", "f16,q4_0", "--store", str(db), "--max-ppl-increase", "1%", "--json",
             home=infbench_home)
    assert json.loads(c.stdout)["perplexity"][0]["change"] == pytest.approx(0.05)
    c = _cli("compare", "--dtypes", "f16,q8_0", "--store", str(db), "--max-ppl-increase", "1%",
             home=infbench_home)
    assert c.returncode == 0 and "+0.50 %" in c.stdout


def test_result_round_trips_through_json():
    r = _result("q4_0", 10.5)
    assert PerplexityResult.model_validate_json(r.model_dump_json()) == r
