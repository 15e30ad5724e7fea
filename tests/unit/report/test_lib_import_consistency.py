"""Published rows that contradict themselves (issue 33, item 3): a sound LIB row imports, a
contradictory one is refused with its line, rounded throughput is accepted, duplicate headers and
header-only files are refused."""

from __future__ import annotations

import pytest

from tests.support.hostile import cli

# -- item 3: nothing impossible or self-contradictory is stored as ok --------------------------------
LIB_HEAD = ("Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput,"
            "Input Length,Output Length,TTFT Latency,end_latency\n")


#: A sound row: 8 x (128 + 128) tokens in 2.5 s = 819.2 tok/s, TTFT 0.1 s, E2E 2.4 s.
GOOD_ROW = "Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,8,2.5,819.2,128,128,0.1,2.4\n"


def _import(tmp_path, text, code=2):
    f = tmp_path / "lib.csv"
    f.write_text(text)
    store = tmp_path / "s.db"
    r = cli("import", f, "--store", store, code=code)
    return r, store


def test_a_sound_lib_row_imports(tmp_path):
    r, store = _import(tmp_path, LIB_HEAD + GOOD_ROW, code=0)
    from infbench.store import Store

    s = Store(store, readonly=True)
    (row,) = s.results()
    assert row["metrics"]["tpot_s"]["mean"] == pytest.approx((2.4 - 0.1) / 127)
    s.close()


@pytest.mark.parametrize("row, message", [
    # the probe: TTFT 99 s against an E2E of 2.5 s was stored ok with tpot_s = -0.76 s
    ("Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,8,120,17.07,128,128,99,2.5\n",
     "'TTFT Latency' 99 s exceeds 'end_latency' 2.5 s"),
    # the probe: Input Output Length 128/128 against Input Length 4096 / Output Length 2 was stored as i4096 o2
    ("Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128/128,8,2.5,819.2,4096,2,0.1,2.4\n",
     "says 128/128 tokens, but 'Input Length'/'Output Length' say 4096/2"),
    ("Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,8,2.5,1000,128,128,0.1,2.4\n",
     "'Throughput' 1000 tok/s x 'Latency' 2.5 s is 2500 tokens, but batch 8 x (128 + 128) tokens is 2048"),
    ("Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,8,2.5,819.2,128,128,0.1,3.9\n",
     "'end_latency' 3.9 s exceeds 'Latency' 2.5 s"),
])
def test_contradictory_lib_rows_are_refused_with_their_line(tmp_path, row, message):
    r, store = _import(tmp_path, LIB_HEAD + GOOD_ROW + row)
    assert "line 3" in r.output and message in " ".join(r.output.split())
    assert not store.exists() or not cli("results", "--store", store, "--format", "json", code=None).stdout.strip(
        "[]\n")


def test_rounded_throughput_is_accepted(tmp_path):
    # 8 x 256 / 2.47 = 829.15...: printed as 829.1 and 2.47, inside the rounding of the two numbers
    _import(tmp_path, LIB_HEAD + "Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,8,2.47,829.1,128,128,0.1,2.4\n",
            code=0)


def test_duplicate_headers_and_header_only_files_are_refused(tmp_path):
    r, _ = _import(tmp_path, "Hardware,Hardware," + LIB_HEAD.removeprefix("Hardware,")
                   + "Nvidia H100 GPU," + GOOD_ROW)
    assert "'Hardware' more than once" in " ".join(r.output.split())
    r, store = _import(tmp_path, LIB_HEAD)  # the probe: a header-only CSV made an empty "completed" run
    assert "a header but no rows" in r.output and not store.exists()

