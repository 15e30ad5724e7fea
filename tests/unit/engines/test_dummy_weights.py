"""Issue 30: dummy weights are built where they run, without the library's initialisation, and
never through host memory for a device that is not the CPU (the meta device stands in for one)."""

from __future__ import annotations

import resource

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from infbench.data.models import resolve  # noqa: E402
from infbench.engines.dummy_weights import INIT_STD, build_hf_model, fill_block, random_block  # noqa: E402


def config_of(name):
    cfg = dict(resolve(name).config)
    cfg.pop("architectures", None)
    return transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_an_8b_model_on_another_device_touches_no_host_memory():
    """Llama-3-8B is 16 GB in bf16: built for the meta device, every parameter stays there and
    the host's resident memory grows by far less than one layer (218 MB) and 1/50 of the model."""
    build_hf_model(transformers, torch, config_of("tiny-random-llama"), torch.bfloat16, "meta")  # imports done
    before = rss_mb()
    model = build_hf_model(transformers, torch, config_of("llama-3-8b"), torch.bfloat16, "meta")
    grew = rss_mb() - before
    devices = {p.device.type for p in model.parameters()}
    n = sum(p.numel() for p in model.parameters())
    assert devices == {"meta"} and n > 7e9
    assert grew < 200, f"host memory grew by {grew:.0f} MB"


def test_no_library_initialisation_runs(monkeypatch):
    """Every torch.nn.init function and transformers' init_weights are off while building."""
    calls = []
    real = torch.nn.init.normal_

    def spy(*a, **k):
        calls.append("normal_")
        return real(*a, **k)

    monkeypatch.setattr(torch.nn.init, "normal_", spy)
    build_hf_model(transformers, torch, config_of("tiny-random-llama"), torch.float32, "cpu")
    assert calls == []


def test_weights_have_the_init_distribution_and_are_seeded():
    a = build_hf_model(transformers, torch, config_of("tiny-random-llama"), torch.float32, "cpu", seed=3)
    b = build_hf_model(transformers, torch, config_of("tiny-random-llama"), torch.float32, "cpu", seed=3)
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), name                  # same seed, same weights
        if p.dim() >= 2:
            assert p.std().item() == pytest.approx(INIT_STD, rel=0.1)
        elif "norm" in name:
            assert torch.all(p == 1)
    ids = torch.randint(0, a.config.vocab_size, (2, 16))
    with torch.inference_mode():
        logits = a(ids).logits
    assert torch.isfinite(logits).all()
    # buffers made at construction (rotary frequencies) are real, not uninitialised memory
    for name, buf in a.named_buffers():
        assert torch.isfinite(buf).all(), name


def test_fill_block_repeats_the_block_along_a_tensor():
    block = random_block(torch, "cpu", torch.float32, seed=1, n=7)
    t = torch.empty(5, 4)
    fill_block(t, "layers.0.mlp.up_proj.weight", block)
    flat = t.view(-1)
    assert torch.equal(flat[:7], block) and torch.equal(flat[7:14], block) and torch.equal(flat[14:], block[:6])
    v = torch.empty(3)
    fill_block(v, "model.norm.weight", block)
    assert torch.all(v == 1)
    fill_block(v, "proj.bias", block)
    assert torch.all(v == 0)


def test_random_checkpoint_files_use_the_same_fill(tmp_path):
    """MII's random-weight checkpoint (engines/hf_checkpoint.py): every tensor the model has, at the
    dtype, 2-D ones ~ N(0, 0.02) from the block fill, norms 1."""
    import json

    from safetensors.torch import load_file

    from infbench.engines.hf_checkpoint import tensor_specs, write_checkpoint

    m = resolve("tiny-random-llama")
    out = write_checkpoint(m, "bfloat16", tmp_path / "ckpt")
    index = json.loads((out / "model.safetensors.index.json").read_text())
    tensors = {}
    for f in set(index["weight_map"].values()):
        tensors.update(load_file(str(out / f)))
    assert {n: tuple(t.shape) for n, t in tensors.items()} == dict(tensor_specs(m))
    for name, t in tensors.items():
        assert t.dtype == torch.bfloat16
        if t.dim() >= 2:
            assert t.float().std().item() == pytest.approx(INIT_STD, rel=0.15), name
        elif "norm" in name:
            assert torch.all(t == 1), name
