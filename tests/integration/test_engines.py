"""Real engines on the smallest shapes: llama.cpp (llama-cpp-python) and transformers."""

import time

import pytest

from infbench.data.errors import CellTimeout
from infbench.data.groups import Group
from infbench.data.models import resolve
from infbench.data.prompts import synthetic_prompts
from infbench.data.schema import Cell
from infbench.measure.derive import cell_metrics

pytestmark = pytest.mark.integration


def cell(engine, dtype, batch=3, i=16, o=5, model="tiny-random-llama"):
    return Cell(model=model, engine=engine, dtype=dtype, batch=batch, input_len=i, output_len=o)


def check_records(out, c):
    assert len(out.records) == c.batch
    for r in out.records:
        assert r.n_in == c.input_len and r.n_out == c.output_len == len(r.t_tokens_ns)
        assert r.t_send_ns < r.t_tokens_ns[0]
        assert all(a < b for a, b in zip(r.t_tokens_ns, r.t_tokens_ns[1:]))
        assert r.error is None and r.n_out_source == "engine"
    m = cell_metrics(out.records)
    for k in ("ttft_s", "tpot_s", "e2e_s", "itl_s"):
        assert m[k]["count"] > 0 and m[k]["p50"] > 0
    assert m["output_tok_s"] > 0 and m["total_tok_s"] > m["output_tok_s"]
    assert 0 < out.engine_s <= m["duration_s"] * 1.01 + 1e-3
    return m


@pytest.fixture
def llama(cpu):
    from infbench.engines.llama_cpp_engine import LlamaCppEngine

    e = LlamaCppEngine(cpu, {"n_threads": 2})
    yield e
    e.stop()


def test_llama_cpp_batch_and_model_reuse(llama):
    m = resolve("tiny-random-llama")
    llama.start(Group(m, "llama.cpp", "f16", 1))
    model_ptr = llama.model
    for b in (1, 3):
        c = cell("llama.cpp", "f16", batch=b)
        prompts = synthetic_prompts(b, c.input_len, m.vocab)
        llama.warmup(c, prompts)
        check_records(llama.run(c, prompts), c)
    assert llama.model is model_ptr            # loaded once for the group
    assert llama.describe()["versions"]["llama_cpp_python"]


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0"])
def test_llama_cpp_quantised(llama, dtype):
    m = resolve("tiny-random-llama")
    llama.start(Group(m, "llama.cpp", dtype, 1))
    c = cell("llama.cpp", dtype, batch=2, i=64, o=4)
    check_records(llama.run(c, synthetic_prompts(2, 64, m.vocab)), c)


def test_llama_cpp_real_gguf_path(llama, tmp_path):
    from infbench.engines.gguf_dummy import write_dummy_gguf

    p = write_dummy_gguf(resolve("tiny-random-llama"), "f32", tmp_path / "model.gguf")
    m = resolve(str(p))                        # a .gguf file given as --model
    assert m.path == str(p) and m.vocab == 512
    llama.start(Group(m, "llama.cpp", "f32", 1))
    assert llama.model_file == str(p)
    c = cell("llama.cpp", "f32", model=str(p))
    check_records(llama.run(c, synthetic_prompts(3, 16, m.vocab)), c)


def test_llama_cpp_timeout(llama):
    m = resolve("tiny-random-llama")
    llama.start(Group(m, "llama.cpp", "f16", 1))
    c = cell("llama.cpp", "f16", o=50)
    with pytest.raises(CellTimeout):
        llama.run(c, synthetic_prompts(3, 16, m.vocab), deadline_ns=time.perf_counter_ns())


def test_llama_cpp_smollm2_shape(llama):
    m = resolve("smollm2-135m")
    llama.start(Group(m, "llama.cpp", "q8_0", 1))
    c = cell("llama.cpp", "q8_0", batch=2, i=32, o=4, model="smollm2-135m")
    check_records(llama.run(c, synthetic_prompts(2, 32, m.vocab)), c)


@pytest.fixture
def hf(cpu):
    from infbench.engines.transformers_engine import TransformersEngine

    e = TransformersEngine(cpu, {"n_threads": 2})
    yield e
    e.stop()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_transformers_dummy_weights(hf, dtype):
    m = resolve("tiny-random-llama")
    hf.start(Group(m, "transformers", dtype, 1))
    c = cell("transformers", dtype)
    prompts = synthetic_prompts(3, 16, m.vocab)
    hf.warmup(c, prompts)
    check_records(hf.run(c, prompts), c)
    assert str(hf.model.dtype) == f"torch.{dtype}"


def test_transformers_local_folder_and_forced_length(hf, tmp_path):
    import torch
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, eos_token_id=0, bos_token_id=1,
                                   pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    # All logits equal: greedy argmax picks id 0, the EOS, so unforced generation stops at once.
    with torch.no_grad():
        model.lm_head.weight.zero_()
    model.save_pretrained(tmp_path)
    unforced = model.generate(torch.tensor([[5, 6, 7, 8]]), max_new_tokens=6, do_sample=False)
    assert unforced.shape[1] == 4 + 1
    m = resolve(str(tmp_path))
    hf.start(Group(m, "transformers", "float32", 1))
    c = cell("transformers", "float32", batch=2, i=8, o=6, model=str(tmp_path))
    check_records(hf.run(c, synthetic_prompts(2, 8, m.vocab)), c)


def test_transformers_timeout(hf):
    m = resolve("tiny-random-llama")
    hf.start(Group(m, "transformers", "float32", 1))
    with pytest.raises(CellTimeout):
        hf.run(cell("transformers", "float32", o=40), synthetic_prompts(3, 16, m.vocab),
               deadline_ns=time.perf_counter_ns())
