"""What a bare ``infbench run`` measures on a device: its plugin's default sweep, on the
best engine that runs here.

The device's plugin answers ``infbench_default_sweep(device)`` (contract 1.4) with sweep
fields and its engines in order of preference; the CPU answers the ``quick`` preset, the
GPU plugins LLM-Inference-Bench's corner (``lib-corner``: Llama-3-8B with dummy weights,
batch 1/16/64, input = output in {128, 1024}), remote platforms their endpoint through
``openai``. The engine is then the first candidate that runs here, in this order:

1. on an accelerator, the plugin's worker image, when it is built and a container runtime
   answers (:func:`~infbench.engines.availability.image_support`), for the first preferred
   engine the plugin has an image for;
2. each preferred engine in this process, in the plugin's order (on NVIDIA: vLLM, then
   llama.cpp's server built with CUDA (scripts/build_llama_cuda.sh, named by the site's
   ``[llama_server] binary``), then transformers on the device's torch build with a static KV
   cache (compiled; eager only where ``torch.compile`` cannot run:
   :func:`transformers_accelerator_args`), then llama-cpp-python built with CUDA; on the
   CPU llama.cpp compiled in-process, then llama.cpp's prebuilt server), as
   :func:`~infbench.engines.availability.engine_support` finds it;
3. on the CPU, the worker image last (``infbench/cpu-llamacpp``: llama.cpp compiled in the
   image), when it is built and a container runtime answers; the run then uses the
   container executor (:meth:`DefaultSweep.executor`).

The cells are the plugin's grid whichever candidate runs them; the engine is part of a
cell's identity (:meth:`~infbench.data.schema.Cell.spec`), so the compiled llama.cpp in this
process and in the CPU image give the same cell ids, and the prebuilt server
(``llama.cpp-server``, batch mode over HTTP) gives the same workloads under its own
engine name: a build measured 1.3-2x slower never answers for the compiled one in the
store, and a re-run after installing the compiled build measures its cells instead of
skipping them. Each cell's engine description says which build ran it
(:mod:`infbench.engines.builds`).

Every candidate keeps its status, reason and fix, so ``infbench run --dry-run`` shows why
the engine was chosen and the command installing each better one that is missing; when
none runs, ``infbench run`` refuses with that list instead of measuring something else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infbench.contract.registry import default_sweep_answer, device_backends, engine_specs
from infbench.data.errors import ConfigError
from infbench.data.schema import DeviceInfo
from infbench.engines import availability as av
from infbench.engines.availability import MISSING, EngineSupport, device_label, engine_support, image_support
from infbench.engines.builds import annotate
from infbench.plan import PRESET_DESCRIPTIONS, PRESETS
from infbench.plan.target import select_device

if TYPE_CHECKING:  # pragma: no cover
    from infbench.contract.manager import PluginManager


@dataclass
class DefaultSweep:
    """A device's default sweep and the engine chosen for it.

    Attributes:
        device: the device group.
        fields: :class:`~infbench.data.schema.Sweep` fields (the preset resolved); ``engines``
            holds the chosen engine, or the user's ``--engine`` list.
        description: one line saying what the sweep is.
        source: the plugin that named it (``nvidia``), or ``core`` for the fallback.
        candidates: the engines considered, best first (images first), with their support.
        chosen: the first usable candidate; None when the user named the engines
            (``user_engines``) or nothing runs here.
        user_engines: True when ``--engine`` replaced the choice.
        engine_args_note: the engine arguments the choice adds and why (transformers on an
            accelerator: :func:`transformers_accelerator_args`), or None.
    """

    device: DeviceInfo
    fields: dict[str, Any]
    description: str
    source: str
    candidates: list[EngineSupport] = field(default_factory=list)
    chosen: EngineSupport | None = None
    user_engines: bool = False
    engine_args_note: str | None = None

    def executor(self, name: str) -> str:
        """The executor a run of this default sweep uses for ``--executor name``: ``container``
        when ``name`` is ``auto`` and the chosen candidate is the plugin's worker image (the
        CPU's image comes last, after the in-process engines), else ``name``."""
        if name == "auto" and self.chosen is not None and self.chosen.where != "in-process":
            return "container"
        return name

    def provenance(self) -> dict[str, Any]:
        """What the run's provenance keeps of the choice: the description, the chosen engine,
        where it runs and its build (``reason``), and why."""
        c = self.chosen
        return {"description": self.description, "source": self.source, "why": self.why(),
                "engine": c.engine if c else None, "where": c.where if c else None,
                "build": c.reason if c else None, "version": c.version if c else None}

    def better_missing(self) -> list[EngineSupport]:
        """The candidates ranked above the chosen one (all, when none was chosen) that do not
        run here, each with its reason and fix."""
        out = []
        for c in self.candidates:
            if c is self.chosen:
                break
            if not c.usable:
                out.append(c)
        return out

    def why(self) -> str:
        """One sentence: which engine was chosen and why (or why none was)."""
        who = "infbench's fallback" if self.source == "core" else f"the {self.source} plugin's"
        if self.user_engines:
            return f"engines given with --engine: {', '.join(self.fields['engines'])}"
        if self.chosen is None:
            return (f"no engine of {who} preference order ({', '.join(_names(self.candidates))}) runs on "
                    f"{device_label(self.device)} here")
        rank = self.candidates.index(self.chosen) + 1
        first = "the first" if rank == 1 else f"number {rank}"
        note = f"; {self.engine_args_note}" if self.engine_args_note else ""
        return (f"{self.chosen.engine} ({self.chosen.where}): {first} in {who} order of preference that runs here "
                f"({self.chosen.reason}){note}")

    def refusal(self) -> ConfigError:
        """The error of a run whose default sweep has no usable engine: the device, and the
        command installing each candidate."""
        fixes = "; ".join(f"{c.engine} ({c.where}): {c.fix}" for c in self.candidates if c.fix)
        return ConfigError(f"{self.why()}: " + "; ".join(f"{c.engine} ({c.where}) {c.status}: {c.reason}"
                                                         for c in self.candidates),
                           hint=f"install one: {fixes}" if fixes else "see `infbench detect`")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``infbench run --dry-run --json``)."""
        return {"device": self.device.vendor, "description": self.description, "source": self.source,
                "fields": self.fields, "why": self.why(), "user_engines": self.user_engines,
                "chosen": self.chosen.to_dict() if self.chosen else None,
                "engine_args_note": self.engine_args_note,
                "candidates": [c.to_dict() for c in self.candidates],
                "better_missing": [c.to_dict() for c in self.better_missing()]}


def _names(cs: list[EngineSupport]) -> list[str]:
    return [f"{c.engine} ({c.where})" for c in cs]


def plugin_default(pm: PluginManager, device: DeviceInfo) -> tuple[dict[str, Any] | None, str]:
    """The first plugin answer to ``infbench_default_sweep(device)`` as sweep fields
    (:func:`infbench.contract.registry.default_sweep_answer`) and the plugin's name, or
    ``(None, "core")``. A plugin that raises is skipped."""
    answer, plugin = default_sweep_answer(pm, device)
    return (answer.fields() if answer is not None else None), plugin


def default_sweep(pm: PluginManager, device: DeviceInfo, executor: str = "auto", engines: list[str] | None = None,
                  container_runtime: str | None = None) -> DefaultSweep:
    """The default sweep of ``device`` and its engine (see the module doc).

    Args:
        pm: the plugin manager.
        device: the device group.
        executor: ``--executor``: ``auto`` tries the image (on accelerators; the CPU runs
            in-process), then in-process engines; ``container`` only the image (the CPU's
            too); ``inprocess`` and ``ray`` only in-process engines.
        engines: ``--engine`` values, which replace the choice (their support is still
            listed).
        container_runtime: ``--container-runtime`` (``docker``, ``apptainer``; None: detect).

    Raises:
        ConfigError: the plugin names an unknown preset.
    """
    raw, source = plugin_default(pm, device)
    if raw is None:
        raw = {"preset": "quick"}
        description = f"no plugin names a default sweep for {device.vendor}: the quick preset"
    preset = raw.pop("preset", None)
    if preset is not None and preset not in PRESETS:
        raise ConfigError(f"the {source} plugin's default sweep names unknown preset {preset!r}",
                          hint=f"presets: {', '.join(PRESETS)}")
    if source != "core":
        description = str(raw.pop("description", "") or PRESET_DESCRIPTIONS.get(preset or "")
                          or f"the {source} plugin's default sweep")
    fields = {**(PRESETS[preset] if preset else {}), **raw}
    order = list(fields.get("engines") or [])
    specs = engine_specs(pm)
    backends = device_backends(pm, device)

    def in_process(e: str) -> EngineSupport:
        spec = specs.get(e)
        if spec is None:
            return EngineSupport(e, MISSING, "no installed plugin registers it")
        return engine_support(spec, device, backends)

    if engines:
        return DefaultSweep(device, {**fields, "engines": list(engines)}, description, source,
                            [in_process(e) for e in engines], None, user_engines=True)
    def image() -> list[EngineSupport]:
        for e in order:
            s = image_support(pm, device, e, container_runtime)
            if s is not None:
                return [s]
        return []

    candidates: list[EngineSupport] = []
    if executor == "container" or (executor == "auto" and device.kind not in ("cpu", "remote")):
        candidates += image()
    if executor != "container":
        candidates += [in_process(e) for e in order]
    if executor == "auto" and device.kind == "cpu":
        candidates += image()  # the CPU image last: llama.cpp compiled in it, when nothing runs in this process

    annotate(device, candidates)
    chosen = next((c for c in candidates if c.usable), None)
    fields["engines"] = [chosen.engine] if chosen else order[:1]
    note = None
    if chosen is not None and chosen.engine == "transformers" and device.kind not in ("cpu", "remote"):
        args, note = transformers_accelerator_args()
        if args:
            fields["engine_args"] = {**args, **(fields.get("engine_args") or {})}
    return DefaultSweep(device, fields, description, source, candidates, chosen, engine_args_note=note)


def transformers_accelerator_args() -> tuple[dict[str, Any], str]:
    """The engine arguments of transformers when it is the default on an accelerator, and why.

    Eager transformers is host-bound on a fast GPU (Llama-3-8B batch 1 on the H100: 21-26 ms
    per token, the GPU busy 11-16 % of the time; with a static KV cache, which transformers
    compiles, 9.2 ms after 39 s of compiling, counted apart: issue 39). So the static cache,
    unless ``torch.compile`` cannot run here
    (:func:`~infbench.engines.availability.compile_problem`).

    Returns:
        ``({"cache_implementation": "static"}, reason)``, or ``({}, why eager)``.
    """
    problem = av.compile_problem(av.compile_probe())
    if problem:
        return {}, f"transformers eager (dynamic cache): {problem}, so no static cache (it is compiled)"
    return ({"cache_implementation": "static"},
            "transformers with cache_implementation=static (compiled; compile time counted apart): eager "
            "transformers is host-bound on an accelerator")


def default_for_run(pm: PluginManager, det: Any, preset: str | None, sweep_file: Any, device_name: str | None,
                    engines: list[str] | None, executor: str = "auto", container_runtime: str | None = None,
                    base_url: str | None = None) -> DefaultSweep | None:
    """The default sweep a ``infbench run`` starts from, or None when it does not use one.

    None when ``--preset`` or ``--sweep`` is given, when the run targets an endpoint
    without naming a device (``--base-url``, or an ``openai``-like engine), or a Ray cluster
    (``--executor ray``, ``--device all``): the ``quick`` preset applies, as before 1.4.
    Otherwise the device (``--device`` or the first accelerator, else the CPU:
    :func:`infbench.plan.target.select_device`) and its
    :func:`default_sweep` for ``--executor`` / ``--container-runtime``, the ``--engine``
    list replacing the choice when given.

    Raises:
        ConfigError: ``--device`` matches no detected device; a plugin names an unknown preset.
    """
    if preset is not None or sweep_file is not None:
        return None
    if executor == "ray" or (device_name or "").lower() == "all":
        return None  # the cluster's nodes decide their devices; the quick preset as before 1.4
    specs = engine_specs(pm)
    remote_engines = any(specs.get(e) is not None and specs[e].any_model for e in engines or [])
    if not device_name and (base_url or remote_engines):
        return None
    try:
        dev = select_device(det, device_name)
    except ConfigError:
        for plugin, error in det.errors:  # a remote platform whose site table is invalid: say why
            if device_name and plugin.lower() == device_name.lower():
                raise ConfigError(f"the {plugin} plugin could not read its configuration: {error}") from None
        raise
    return default_sweep(pm, dev, executor, engines, container_runtime)
