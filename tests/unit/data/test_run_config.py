"""The one typed configuration of a run (issue 40): flags declared once on its fields and read
back into it, options only where they apply, the sweep file and the worker spec as the same
model, and engines handed their typed options (plugin contract 2.0, with the 1.x shim)."""

from __future__ import annotations

import json
import warnings
from collections import Counter

import pytest
from pydantic import BaseModel

from infbench.data.engine import Engine, EngineSpec, takes_typed
from infbench.data.engine import create_engine as create
from infbench.data.engine_options import LlamaCppOptions, OpenOptions, ServerOptions, as_dict, as_options
from infbench.data.errors import ConfigError
from infbench.data.run import RunOptions
from infbench.data.run_config import (
    AutoExecutor,
    FindMaxScenario,
    PerplexityScenario,
    RayExecutor,
    RunConfig,
    flag_table,
)
from infbench.data.schema import DeviceInfo
from infbench.engines.options import typed_options

CPU = DeviceInfo(vendor="cpu", kind="cpu", model="Test CPU")


def flags(**values):
    return RunConfig.from_flags(values)


def test_every_flag_is_declared_once_on_a_field():
    table = flag_table()
    names = [d for f in table for d in f.spec.decls]
    assert not [n for n, k in Counter(names).items() if k > 1]
    assert len({f.param for f in table}) == len(table) == 76  # 71, issue 38's 4 warm-up flags, issue 43's 1
    where = {f.spec.name: (f.part, f.field) for f in table}
    assert where["--concurrency"] == ("load", "concurrency") and where["--slo-ttft-ms"] == ("slo", "ttft_s")
    assert where["--ray-address"] == ("executor", "address") and where["--goodput"] == ("scenario", "goodput")


def test_flags_become_the_typed_parts():
    c = flags(model=["tiny"], batch=["1,4", "8"], concurrency=["2"], slo_ttft_ms=300.0, no_stream=True,
              engine_arg=["n_ubatch=64", 'extra_body={"top_k": 5}'], engine_process=False, power_watts=100.0)
    assert c.sweep.models == ["tiny"] and c.sweep.batch == [1, 4, 8] and c.load.concurrency == [2]
    assert c.slo.ttft_s == pytest.approx(0.3) and c.load.stream is False and c.engine.process is False
    assert c.engine.args == {"n_ubatch": 64, "extra_body": '{"top_k": 5}'}
    assert isinstance(c.executor, AutoExecutor) and c.scenario.kind == "sweep"
    # the grid's fields, under the names the grid has (the SLO's ttft_s is slo_ttft_s): no renaming table
    assert c.grid_fields() == {"models": ["tiny"], "batch": [1, 4, 8], "concurrency": [2], "slo_ttft_s": 0.3,
                               "stream": False, "engine_args": c.engine.args}


def test_defaults_are_not_given():
    c = flags(goodput=0.9, find_max_probes=20, ppl_n_ctx=512, power_interval=0.1, scrape_interval=1.0,
              engine_process=True, force=False)
    assert c == RunConfig() and not c.power.model_fields_set and not c.load.model_fields_set


@pytest.mark.parametrize("values, message", [
    ({"warmup": 5000}, "--warmup: input should be less than or equal to 1000 (got 5000)"),
    ({"batch": ["x"]}, "--batch takes integers, got 'x'"),
    ({"slo_ttft": 1.0, "slo_ttft_ms": 100.0}, "give --slo-ttft (s) or --slo-ttft-ms, not both"),
    ({"find_max": "rate", "adaptive": "25%"}, "--adaptive and --find-max are two ways of choosing"),
    ({"find_max": "rate", "perplexity": "t.txt"}, "two scenarios of a run"),
    ({"goodput": 0.5}, "--goodput applies to --find-max (the SLO search)"),
    ({"ppl_chunks": 2}, "--ppl-chunks applies to --perplexity TEXT"),
    ({"ray_address": "h:1"}, "--ray-address applies to --executor ray and --load-nodes"),
    ({"container_runtime": "docker", "executor": "inprocess"}, "--container-runtime applies to cells run in worker"),
    ({"power_label": "PDU"}, "--power-label applies to --power-command or --power-watts"),
    ({"max_input_len": 5}, "--max-input-len applies to --dataset FILE"),
    ({"load_nodes": 0, "ray_address": "h:1"}, "--load-nodes: input should be greater than or equal to 1"),
    ({"runtime": "docker", "executor": "inprocess"}, "give --executor, not both"),
    ({"executor": "bogus"}, "--executor: input should be 'auto', 'inprocess', 'container' or 'ray'"),
])
def test_bad_flags_are_refused_naming_the_flag(values, message):
    with pytest.raises(ConfigError) as e:
        flags(**values)
    assert message in e.value.message


def test_tagged_parts_hold_only_their_options():
    c = flags(find_max="rate", goodput=0.8, find_max_limit=64.0, slo_ttft_ms=500.0)
    assert isinstance(c.scenario, FindMaxScenario) and (c.scenario.mode, c.scenario.goodput) == ("rate", 0.8)
    c = flags(perplexity="wiki.raw", ppl_n_ctx=64)
    assert isinstance(c.scenario, PerplexityScenario) and (c.scenario.text_path, c.scenario.n_ctx) == ("wiki.raw", 64)
    ray = flags(executor="ray", ray_address="h:1", container_runtime="docker").executor
    assert isinstance(ray, RayExecutor) and (ray.address, ray.container_runtime, ray.groups) == ("h:1", "docker",
                                                                                                "nodes")
    # --load-nodes without --executor ray: measured here, the load from the cluster's nodes
    here = flags(load_nodes=2, ray_address="h:1", executor="inprocess").executor
    assert isinstance(here, RayExecutor) and (here.load_nodes, here.groups) == (2, "inprocess")
    notes: list[str] = []
    old = RunConfig.from_flags({"runtime": "docker"}, notes).executor
    assert (old.kind, old.container_runtime) == ("container", "docker") and "deprecated" in notes[0]


def test_a_sweep_file_part_is_the_same_model_under_the_command_line():
    c = flags(concurrency=["2"]).with_file({"power": {"interval_s": 0.5}, "load": {"num_requests": 8,
                                                                                     "concurrency": [4]},
                                             "scenario": {"kind": "find_max", "mode": "rate"}})
    assert c.power.interval_s == 0.5 and c.load.num_requests == 8 and c.load.concurrency == [2]
    assert isinstance(c.scenario, FindMaxScenario)
    assert flags(adaptive="25%").with_file({"scenario": {"kind": "find_max", "mode": "rate"}}).scenario.kind == \
        "adaptive"  # the command line chose
    with pytest.raises(ConfigError, match="--power-interval"):  # named by its flag, also from a file
        RunConfig().with_file({"power": {"interval_s": -1}})


def test_the_worker_spec_carries_the_config_and_the_worker_makes_the_same_options(tmp_path):
    from infbench.data.groups import Group, Plan
    from infbench.data.models import resolve
    from infbench.data.schema import Cell
    from infbench.data.worker_spec import make_spec, read_spec, redacted_doc

    cfg = flags(cell_timeout=30.0, threads=2, base_url="http://u:pw@127.0.0.1:9/v1", power_interval=0.5,
                price_per_hour=2.0, slo_tpot_ms=50.0, load_nodes=2, ray_address="h:1", executor="inprocess",
                engine_arg=["n_ubatch=64"])
    opts = RunOptions.of(cfg, force=False)
    cell = Cell(model="tiny", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=2)
    plan = Plan(CPU, [Group(resolve("tiny"), "llama.cpp", "f16", 1, [cell])])
    spec = make_spec(plan, opts)
    (tmp_path / "spec.json").write_text(json.dumps(redacted_doc(spec)))
    back = read_spec(tmp_path / "spec.json")
    assert back.config.engine.base_url == "http://127.0.0.1:9/v1"  # credentials never leave the host
    worker = RunOptions.of(back.config, force=True)
    same = ("cell_timeout_s", "power_interval_s", "slo", "server_metrics_interval_s", "price_per_hour", "load_nodes",
            "ray_address", "engine_process")
    assert {k: getattr(worker, k) for k in same} == {k: getattr(opts, k) for k in same}
    assert worker.engine_options == {**opts.engine_options, "base_url": "http://127.0.0.1:9/v1"}
    # knobs set directly (the library's callers) travel the same way
    direct = RunOptions(cell_timeout_s=9.0, engine_options={"ttft_s": 0.05}, slo={"ttft_s": 1.0})
    again = RunOptions.of(make_spec(plan, direct).config)
    assert (again.cell_timeout_s, again.engine_options, again.slo) == (9.0, {"ttft_s": 0.05}, {"ttft_s": 1.0})


def test_a_fixed_warm_up_travels_in_a_worker_spec(tmp_path):
    """`--warmup N` under the container and Ray executors: the spec carries every warm-up field,
    defaults included, and the worker must not take them for options the user gave beside
    --warmup N (every cell of `run --executor container --warmup 1` was refused before)."""
    from infbench.data.groups import Group, Plan
    from infbench.data.models import resolve
    from infbench.data.schema import Cell
    from infbench.data.worker_spec import make_spec, read_spec, redacted_doc

    cfg = flags(warmup=1, executor="container")
    cell = Cell(model="tiny", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=2, warmup=1)
    plan = Plan(CPU, [Group(resolve("tiny"), "llama.cpp", "f16", 1, [cell])])
    (tmp_path / "spec.json").write_text(json.dumps(redacted_doc(make_spec(plan, RunOptions.of(cfg, force=False)))))
    back = read_spec(tmp_path / "spec.json")
    assert back.config.sweep.warmup == 1 and back.config.warmup == cfg.warmup
    assert RunConfig.model_validate(cfg.model_dump(mode="json")) == cfg
    # what the user gave beside --warmup N is still refused (a value of its own: 30 s is not "by device kind")
    with pytest.raises(ConfigError, match="--warmup-max-s applies to the warm-up until stable"):
        flags(warmup=1, warmup_max_s=30.0)
    with pytest.raises(ConfigError, match="--warmup-tol applies to the warm-up until stable"):
        flags(warmup=1, warmup_tol=0.05)


# -- engines receive their typed options (plugin contract 2.0) -----------------------------------
class _Adapter(Engine):
    name = "plugin-engine"

    def start(self, group):  # pragma: no cover - never started here
        pass

    def run(self, cell, prompts, deadline_ns=None):  # pragma: no cover
        raise NotImplementedError

    def stop(self):
        pass


def typed_factory(device: DeviceInfo, options: ServerOptions) -> Engine:
    return _Adapter(device, options)


def old_factory(device, options):
    assert isinstance(options, dict)
    return _Adapter(device, options)


def test_a_typed_factory_gets_its_model_with_defaults_and_natives():
    spec = EngineSpec("plugin-engine", typed_factory, ["cpu"], {"f16": "fp16"}, options_model=ServerOptions)
    assert takes_typed(spec)
    opts = typed_options(spec, {"n_threads": 2, "kv_cache_config": {"x": 1}, "tokenizer": None})
    assert isinstance(opts, ServerOptions) and opts.n_threads == 2 and opts.endpoint == "completions"
    assert opts.model_extra == {"kv_cache_config": {"x": 1}}  # a native option passed through
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation on the 2.0 path
        eng = create(spec, CPU, opts)
    assert eng.options is opts


def test_a_contract_1_factory_gets_a_dict_with_a_deprecation_warning():
    spec = EngineSpec("plugin-engine", old_factory, ["cpu"], {"f16": "fp16"}, options=("n_threads", "depth"))
    assert not takes_typed(spec)
    opts = typed_options(spec, {"n_threads": 2, "depth": 3})
    assert isinstance(opts, OpenOptions)
    with pytest.warns(DeprecationWarning, match="contract 1.x"):
        eng = create(spec, CPU, opts)
    assert eng.options == {"n_threads": 2, "depth": 3}


def test_dict_reads_of_typed_options_still_work_with_a_deprecation_warning():
    opts = as_options(LlamaCppOptions, {"n_threads": 2, "tokenizer": "t"})  # tokenizer: not llama.cpp's
    assert opts.given() == {"n_threads": 2} and opts.n_ubatch == 512  # the default lives in the model
    with pytest.warns(DeprecationWarning):
        assert opts.get("n_threads") == 2 and "n_ubatch" not in opts
    assert as_dict(opts) == {"n_threads": 2}


def test_built_in_engines_and_the_fakes_take_typed_options():
    from infbench.engines.builtin import infbench_engines
    from infbench.testing import ENGINES

    for spec in [*infbench_engines(), *ENGINES]:
        assert takes_typed(spec), spec.name
        assert issubclass(type(typed_options(spec, {})), BaseModel)


def test_the_conformance_kit_names_a_contract_1_factory():
    from infbench.contract.conformance import check_conformance as conformance
    from infbench.contract.hookspecs import hookimpl

    class Old:
        @hookimpl
        def infbench_engines(self):
            return [EngineSpec("plugin-engine", old_factory, ["cpu"], {"f16": "fp16"})]

    class New:
        @hookimpl
        def infbench_engines(self):
            return [EngineSpec("plugin-engine", typed_factory, ["cpu"], {"f16": "fp16"}, options_model=ServerOptions)]

    old = [f for f in conformance(Old(), devices=[]) if "factory" in f.message]
    new = [f for f in conformance(New(), devices=[]) if "factory" in f.message]
    assert [f.ok for f in old] == [False] and "contract 1.x" in old[0].message
    assert [f.ok for f in new] == [True]
