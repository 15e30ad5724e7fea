"""Random ("dummy") weights built where they run, fast: no library initialisation, no host copy.

Throughput and latency do not depend on weight values when the output length is forced, so
engines load random weights from a zoo config. How they are made matters: on an H100 the
transformers engine spent 268 s building Llama-3-8B's weights on the host CPU with Hugging
Face's initialisation, then copied them over; the same build on the device took 0.5 s
(docs/hardware-runs.md). A 70B shape would have needed ~140 GB of host RAM.

:func:`build_hf_model` builds a ``transformers`` model from a config directly on the target
device (``with torch.device(device)``) with the library's weight initialisation turned off
(transformers' ``no_init_weights``: every ``torch.nn.init`` function and ``init_weights``
become no-ops), then :func:`fill_dummy_` fills the parameters in place on that device:

* tensors of 2 or more dimensions (projections, embeddings) from one seeded block of
  :data:`BLOCK` values ~ N(0, :data:`INIT_STD`) made on the device, copied along each tensor
  (device-to-device copies at memory speed; the values are random, their repetition is
  irrelevant to timing);
* 1-D ``*norm*`` weights 1, other 1-D tensors (biases) 0;

which is the distribution Hugging Face's own Llama-family initialisation gives
(``initializer_range`` 0.02, norms 1, biases 0), without its cost. Buffers computed at
construction (rotary frequencies) are left as the model made them, on the device. On the
``meta`` device nothing is filled and nothing of model size is allocated anywhere.

:func:`fill_block` is the same fill for a tensor on the host (the random checkpoint files of
:mod:`infbench.engines.hf_checkpoint`).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

#: Standard deviation of the random weights (the ``initializer_range`` of Llama-family configs).
INIT_STD = 0.02
#: Values in the random block copied along each tensor (4 MiB of float32).
BLOCK = 1 << 20


@contextlib.contextmanager
def no_init_weights() -> Iterator[None]:
    """transformers' ``no_init_weights`` context (``transformers.initialization`` since 5.0,
    ``transformers.modeling_utils`` before): model construction allocates parameters
    without initialising them."""
    try:
        ctx = importlib.import_module("transformers.initialization").no_init_weights
    except (ImportError, AttributeError):  # transformers 4.x
        ctx = importlib.import_module("transformers.modeling_utils").no_init_weights
    with ctx():
        yield


def random_block(torch: Any, device: Any, dtype: Any, seed: int = 0, n: int = BLOCK, std: float = INIT_STD) -> Any:
    """``n`` values ~ N(0, ``std``) at ``dtype`` on ``device``, from a generator seeded with
    ``seed`` on that device (the same values for the same seed and device type)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return torch.randn(n, generator=gen, device=device, dtype=torch.float32).mul_(std).to(dtype)


def fill_block(t: Any, name: str, block: Any) -> None:
    """Fill tensor ``t`` (named ``name``) in place: ``block`` repeated along it for 2-D and
    larger tensors, 1 for ``*norm*`` vectors, 0 for other vectors; nothing on ``meta``.

    Args:
        t: a tensor (a parameter's ``.data``), any device.
        name: its name in the model's state dict.
        block: a 1-D tensor on ``t``'s device at ``t``'s dtype (:func:`random_block`).
    """
    if t.device.type == "meta":
        return
    if t.dim() < 2:
        if "norm" in name:
            t.fill_(1)
        else:
            t.zero_()
        return
    flat = t.view(-1)
    n, k = flat.numel(), block.numel()
    rows = n // k
    if rows:  # one broadcast copy (multi-threaded on the CPU, one kernel on a GPU)
        flat[:rows * k].view(rows, k).copy_(block.unsqueeze(0).expand(rows, k))
    if n - rows * k:
        flat[rows * k:].copy_(block[:n - rows * k])


def fill_dummy_(model: Any, torch: Any, seed: int = 0, std: float = INIT_STD) -> None:
    """Fill every parameter of ``model`` in place on the device it sits on (see the module
    doc); tied parameters are filled once. One random block per (device, dtype)."""
    blocks: dict[tuple[str, Any], Any] = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.device.type == "meta":
                continue
            key = (str(p.device), p.dtype)
            if key not in blocks:
                blocks[key] = random_block(torch, p.device, p.dtype, seed, std=std)
            fill_block(p.data, name, blocks[key])


def build_hf_model(transformers: Any, torch: Any, config: Any, dtype: Any, device: str, seed: int = 0) -> Any:
    """A ``transformers`` causal LM of ``config`` at ``dtype`` with random weights, built on
    ``device`` (``cpu``, ``cuda:0``, ``xpu:0``, ``hpu``, or ``meta`` for a build that
    allocates nothing) without the library's initialisation and filled there
    (:func:`fill_dummy_`); in eval mode.

    Raises:
        Whatever ``AutoModelForCausalLM.from_config`` raises (an unknown architecture), or
        the device's out-of-memory error.
    """
    with torch.device(device), no_init_weights():
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    fill_dummy_(model, torch, seed)
    return model.eval()
