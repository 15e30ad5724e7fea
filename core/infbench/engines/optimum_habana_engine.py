"""optimum-habana: Hugging Face transformers with Intel Gaudi's adaptations, in process on
an HPU (``optimum-habana``, batch mode).

Set up as optimum-habana's text-generation example sets it up
(``examples/text-generation/utils.py`` and ``run_generation.py``):

* ``PT_HPU_LAZY_MODE=1`` before Gaudi's PyTorch bridge is imported (the example's README
  runs every command with it), and lazy mode on ``generate`` (``lazy_mode=True``);
* ``adapt_transformers_to_gaudi()`` before the model is built (Gaudi's model classes and
  generation loop replace transformers');
* the model ``.eval().to("hpu")`` at the group's dtype, then ``wrap_in_hpu_graph`` (HPU
  graphs; ``--engine-arg use_hpu_graphs=false`` turns them off) and ``generate(...,
  hpu_graphs=True)``;
* a ``GaudiGenerationConfig`` copied from the model's, with ``static_shapes`` on for the
  model types optimum-habana optimises (``model_is_optimized``), ``bucket_size=-1``,
  ``use_cache=True``, ``ignore_eos=True``, greedy, ``max_new_tokens = min_new_tokens =
  output_len``; the example's other generation flags (``trim_logits``,
  ``attn_softmax_bf16``, ``use_flash_attention``, ``bucket_size``, ``reuse_cache``...)
  are engine options (:data:`GAUDI_GENERATION_OPTIONS`).

Dummy weights are the zoo config built on ``hpu`` without the library's initialisation and
filled there (:mod:`infbench.engines.dummy_weights`), as for the transformers engine; per-token
times come from the same streamer (Gaudi's loop calls
``streamer.put(next_tokens.cpu())`` after each step, and the copy to the host waits for the
step's graph to run). Tensor parallelism (DeepSpeed on Gaudi) is not driven: one HPU per
group.

Device proof: every parameter and buffer on ``hpu``, and torch's HPU name
(``torch.hpu.get_device_name``) is the detected Gaudi model.

Not run on a Gaudi: the development machines have none; ``optimum-habana`` installs there
(CPU torch) and its API (``adapt_transformers_to_gaudi``, ``GaudiGenerationConfig``,
``GaudiGenerationMixin.generate``) is checked against the installed package by
``tests/integration/test_engine_signatures.py``.
"""

from __future__ import annotations

import copy
import importlib.metadata as md
import os
import time
from typing import Any

from infbench.data.engine import RunOutput
from infbench.data.engine_options import OptimumHabanaOptions
from infbench.data.errors import ConfigError, DeviceMismatch, EngineUnavailable
from infbench.data.schema import Cell, RequestRecord
from infbench.engines.availability import (
    MISSING,
    UNSUPPORTED,
    USABLE,
    EngineSupport,
    device_label,
    local_only,
    torch_backend_problem,
    torch_probe,
)
from infbench.engines.transformers_engine import TRANSFORMERS_DTYPES, TransformersEngine, _TimingStreamer

NAME = "optimum-habana"
#: Gaudi runs bf16 natively; fp32 and fp16 as transformers does.
OPTIMUM_HABANA_DTYPES = {"bfloat16": "bf16", **{k: v for k, v in TRANSFORMERS_DTYPES.items() if k != "bfloat16"}}
#: ``GaudiGenerationConfig`` fields the example's flags set, accepted as engine options.
GAUDI_GENERATION_OPTIONS = ("static_shapes", "bucket_size", "bucket_internal", "reuse_cache", "trim_logits",
                            "attn_softmax_bf16", "limit_hpu_graphs", "clear_hpu_graphs_cache", "reduce_recompile",
                            "use_flash_attention", "flash_attention_recompute", "flash_attention_causal_mask",
                            "flash_attention_fast_softmax", "use_flex_attention")
#: Adapter options: HPU graphs and lazy mode on/off (default on, as the example runs).
ADAPTER_OPTIONS = ("n_threads", "use_hpu_graphs", "lazy_mode")
INSTALL_KEY = "optimum_habana"
INSTALL = "pip install optimum-habana (with Intel Gaudi's PyTorch: habanalabs-installer.sh install --type pytorch)"


def optimum_habana_version() -> str | None:
    """The installed ``optimum-habana`` distribution's version, without importing it."""
    try:
        return md.version("optimum-habana")
    except md.PackageNotFoundError:
        return None


def check_optimum_habana(device, backends) -> EngineSupport:
    """optimum-habana runs where torch is Gaudi's build and sees an HPU
    (``habana_frameworks``; :func:`~infbench.engines.availability.torch_backend_problem`).

    Returns:
        An :class:`~infbench.engines.availability.EngineSupport` row for ``infbench detect``.
    """
    refused = local_only(NAME, device, backends, "PyTorch")
    if refused:
        return refused
    if backends.torch != "hpu":
        return EngineSupport(NAME, UNSUPPORTED, f"optimum-habana runs on Intel Gaudi (HPU), not {backends.label} "
                             "devices")
    v = optimum_habana_version()
    t = torch_probe()
    problem = torch_backend_problem(t, "hpu")
    if problem:
        return EngineSupport(NAME, UNSUPPORTED, problem, backends.install.get("torch"), v)
    if v is None:
        return EngineSupport(NAME, MISSING, "needs optimum-habana", backends.install.get(INSTALL_KEY, INSTALL))
    return EngineSupport(NAME, USABLE, f"optimum-habana {v}, torch {t['version']} (hpu)", version=v)


def generation_settings(options: dict[str, Any], optimized: bool, output_len: int) -> dict[str, Any]:
    """The ``GaudiGenerationConfig`` attributes set for a cell (see the module doc):
    the example's defaults, then the engine options among :data:`GAUDI_GENERATION_OPTIONS`."""
    out: dict[str, Any] = {"max_new_tokens": output_len, "min_new_tokens": output_len, "use_cache": True,
                           "static_shapes": optimized, "bucket_size": -1, "ignore_eos": True, "do_sample": False,
                           "num_beams": 1}
    out.update({k: v for k, v in options.items() if k in GAUDI_GENERATION_OPTIONS})
    return out


def generate_flags(options: dict[str, Any]) -> dict[str, bool]:
    """The keyword flags of ``generate`` (``lazy_mode``, ``hpu_graphs``, ``ignore_eos``) for
    the engine options; HPU graphs need lazy mode (``generate`` refuses them without).

    Raises:
        ConfigError: ``use_hpu_graphs=true`` with ``lazy_mode=false``.
    """
    lazy = bool(options.get("lazy_mode", True))
    graphs = bool(options.get("use_hpu_graphs", True))
    if graphs and not lazy:
        raise ConfigError("HPU graphs need lazy mode (optimum-habana's generate refuses them without)",
                          hint="pass --engine-arg use_hpu_graphs=false with lazy_mode=false")
    return {"lazy_mode": lazy, "hpu_graphs": graphs, "ignore_eos": True}


class OptimumHabanaEngine(TransformersEngine):
    """``optimum-habana``: Gaudi-adapted transformers ``generate()`` on one HPU, batch mode.

    Options: ``use_hpu_graphs``, ``lazy_mode`` (default true), and the
    ``GaudiGenerationConfig`` fields of :data:`GAUDI_GENERATION_OPTIONS`.
    """

    name = NAME
    options_model = OptimumHabanaOptions
    options: OptimumHabanaOptions  # type: ignore[assignment]  # the Gaudi model, not transformers' own

    def start(self, group) -> None:
        """Refuse a non-Gaudi device, set lazy mode, adapt transformers to Gaudi, build or
        load the model at ``group.dtype`` on ``hpu``, wrap it in HPU graphs.

        Raises:
            EngineUnavailable: optimum-habana or Gaudi's PyTorch is missing.
            DeviceMismatch: the device is not an HPU this torch sees.
            ConfigError: an unknown dtype, or HPU graphs without lazy mode.
        """
        label = device_label(self.device)
        if self.device.kind == "cpu":
            raise DeviceMismatch(self.name, label, "optimum-habana runs on Intel Gaudi only", "the CPU",
                                 "use --engine transformers on the CPU")
        self.flags = generate_flags(self.options.given())
        if self.flags["lazy_mode"]:               # before the check imports Gaudi's bridge
            os.environ.setdefault("PT_HPU_LAZY_MODE", "1")
        s = check_optimum_habana(self.device, self.backends)
        if s.status == MISSING:
            raise EngineUnavailable(f"the optimum-habana engine {s.reason}", hint=s.fix or INSTALL)
        if not s.usable:
            raise DeviceMismatch(self.name, label, s.reason, "the CPU", s.fix)
        try:
            import habana_frameworks.torch.core  # noqa: F401 - registers the hpu device
            from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi
        except ImportError as exc:
            raise EngineUnavailable("the optimum-habana engine needs optimum-habana and Gaudi's PyTorch",
                                    hint=INSTALL) from exc
        self._check_lazy()
        adapt_transformers_to_gaudi()
        super().start(group)                     # builds/loads the model on hpu:0 (TransformersEngine)
        if self.flags["hpu_graphs"]:
            from habana_frameworks.torch.hpu import wrap_in_hpu_graph

            self.model = wrap_in_hpu_graph(self.model)
        from optimum.habana.checkpoint_utils import model_is_optimized

        self.optimized = bool(model_is_optimized(self.model.config))

    def _check_lazy(self) -> None:
        """Lazy mode is fixed when Gaudi's bridge is first imported: refuse a process where
        it was imported in the other mode.

        Raises:
            ConfigError: the bridge runs eagerly while lazy mode is asked for, or the reverse.
        """
        try:
            from habana_frameworks.torch.utils.internal import is_lazy
        except ImportError:
            return
        if bool(is_lazy()) != self.flags["lazy_mode"]:
            want = "1" if self.flags["lazy_mode"] else "0"
            raise ConfigError(f"Gaudi's PyTorch bridge runs with lazy mode {'on' if is_lazy() else 'off'}, "
                              f"optimum-habana was asked for {'lazy' if want == '1' else 'eager'} mode",
                              hint=f"export PT_HPU_LAZY_MODE={want} before starting infbench")

    def _torch_device(self) -> str:
        """``hpu:0``, through :class:`TransformersEngine`'s check (never a CPU fallback)."""
        dev = super()._torch_device()
        if not dev.startswith("hpu"):
            raise DeviceMismatch(self.name, device_label(self.device), f"torch's device is {dev}, not hpu", dev,
                                 "run optimum-habana cells on a Gaudi device (--device habana)")
        return dev

    def generation_config(self, cell: Cell) -> Any:
        """The cell's ``GaudiGenerationConfig``: a copy of the model's (a ``GaudiGenerationConfig``
        once transformers is adapted, as the example copies it) with :func:`generation_settings`."""
        from optimum.habana.transformers.generation import GaudiGenerationConfig

        gc = copy.deepcopy(self.model.generation_config)
        if not isinstance(gc, GaudiGenerationConfig):
            gc = GaudiGenerationConfig.from_dict(gc.to_dict())
        for k, v in generation_settings(self.options.given(), self.optimized, cell.output_len).items():
            setattr(gc, k, v)
        return gc

    def run(self, cell: Cell, prompts: list[list[int]], deadline_ns: int | None = None) -> RunOutput:
        """Generate ``cell.output_len`` tokens for the batch of ``prompts`` (one Gaudi
        ``generate`` call, lazy mode, HPU graphs)."""
        torch = self.torch
        ids = torch.tensor(prompts, dtype=torch.long, device=self.dev)
        mask = torch.ones_like(ids)
        streamer = _TimingStreamer(deadline_ns)
        gc = self.generation_config(cell)
        with torch.inference_mode():
            t_send = time.perf_counter_ns()
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=gc, streamer=streamer,
                                      **self.flags)
            out = out.cpu()
            t_end = time.perf_counter_ns()
        n_out = int(out.shape[1] - ids.shape[1])
        records = [RequestRecord(t_send_ns=t_send, t_tokens_ns=list(streamer.times), n_in=len(p), n_out=n_out)
                   for p in prompts]
        return RunOutput(records=records, engine_s=(t_end - t_send) / 1e9)

    def stop(self) -> None:
        """Drop the model (HPU memory is freed with it)."""
        self.model = None

    def describe(self) -> dict[str, Any]:
        """Versions (optimum-habana, transformers, torch), HPU graph and lazy-mode flags."""
        versions: dict[str, str | None] = {}
        for dist in ("optimum-habana", "transformers", "torch"):
            try:
                versions[dist] = md.version(dist)
            except md.PackageNotFoundError:
                versions[dist] = None
        return {"name": self.name, "versions": versions, "torch_device": getattr(self, "dev", None),
                "generate_flags": getattr(self, "flags", None), "static_shapes": getattr(self, "optimized", None),
                "weights": getattr(self, "weights", None)}
