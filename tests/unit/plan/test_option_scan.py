"""Issue 33, item 4: no option of ``infbench run`` is silently ignored.

The scan (:mod:`tests.support.option_scan`) prepares a run per mode (batch, serving,
``--find-max``, ``--adaptive``, ``--perplexity``) with and without each option and
compares what the run would do. :data:`IGNORED_AT_A6BDA0C` is what it found on main before
the fix: every pair there was accepted and changed nothing (``--load-nodes 2 --ray-address
...`` on a batch run ran in-process, as the probe saw). Each is now refused with a message
that says where the option applies, and the whole scan finds no ignored pair.
"""

from __future__ import annotations

import pytest

from tests.support.hostile import cli
from tests.support.option_scan import ALWAYS, MODES, files, flag, run_options, scan, values

ALL = ["adaptive", "batch", "find-max", "perplexity", "serving"]
#: (option, modes) the scan found ignored on main at a6bda0c.
IGNORED_AT_A6BDA0C = {
    "api_key_env": ["adaptive", "batch", "perplexity"], "base_url": ["adaptive", "batch", "perplexity"],
    "batch": ["find-max", "serving"], "burstiness": ALL, "container_runtime": ALL,
    "duration": ["adaptive", "batch", "perplexity"], "endpoint": ["adaptive", "batch", "perplexity"],
    "find_max_limit": ["adaptive", "batch", "perplexity", "serving"],
    "find_max_probes": ["adaptive", "batch", "perplexity", "serving"],
    "goodput": ["adaptive", "batch", "perplexity", "serving"], "load_nodes": ["adaptive", "batch", "perplexity"],
    "max_input_len": ALL, "max_output_len": ALL, "num_requests": ["adaptive", "batch", "perplexity"],
    "power_label": ALL, "ppl_chunks": ["adaptive", "batch", "find-max", "serving"],
    "ppl_n_ctx": ["adaptive", "batch", "find-max", "serving"], "prompt_format": ["adaptive", "batch", "perplexity"],
    "ray_address": ALL, "request_timeout": ["adaptive", "batch", "perplexity"],
    "scrape_interval": ["adaptive", "batch", "perplexity"], "served_model_name": ["adaptive", "batch", "perplexity"],
    "warmup_requests": ["adaptive", "batch", "perplexity"],
}
# "warmup": ["find-max", "serving"] was refused until issue 38: every cell now warms up in blocks (a
# serving cell's are 2 x concurrency requests), so --warmup N applies in every mode.
PAIRS = [(o, m) for o, ms in IGNORED_AT_A6BDA0C.items() for m in ms]


@pytest.fixture(scope="module")
def scan_files(tmp_path_factory):
    return files(tmp_path_factory.mktemp("scan"))


def test_every_run_option_is_scanned_or_always_applies(tmp_path):
    """A new option of `infbench run` must be given a value in the scan (or a reason it
    applies everywhere), so it cannot be silently ignored unnoticed."""
    scanned = set(values(files(tmp_path))) | set(ALWAYS)
    assert set(run_options()) <= scanned, f"options the scan does not know: {set(run_options()) - scanned}"


@pytest.mark.parametrize("option, mode", PAIRS, ids=[f"{o}-{m}" for o, m in PAIRS])
def test_options_ignored_before_are_refused_naming_where_they_apply(scan_files, option, mode):
    args = {**{"model": ["tiny"], "input_len": ["8"], "output_len": ["3"]},
            **{k: (v.format(**scan_files) if isinstance(v, str) else v) for k, v in MODES[mode].items()},
            **values(scan_files)[option]}
    argv = ["run", "--dry-run"]
    for k, v in args.items():
        if v is True:
            argv.append(flag(k))
        else:
            for item in v if isinstance(v, list) else [v]:
                argv += [flag(k), str(item)]
    r = cli(*argv)
    text = " ".join(r.output.split())
    assert f"{flag(option)} applies to" in text and "would do nothing" in text, text


def test_the_probe_load_nodes_on_a_batch_run(tmp_path):
    r = cli("run", "--model", "tiny", "--batch", "1", "--load-nodes", "2", "--ray-address", "127.0.0.1:18604",
            "--store", tmp_path / "s.db")
    assert "--load-nodes applies to serving cells on Ray" in " ".join(r.output.split())
    assert not (tmp_path / "s.db").exists()


def test_no_option_is_silently_ignored_in_any_mode(pm, tmp_path):
    """The whole scan: every option x mode either changes the run or is refused."""
    res = scan(tmp_path, pm)
    ignored = sorted(f"{flag(o)} in {m}" for (o, m), (v, _) in res.items() if v == "ignored")
    assert not ignored, "options accepted that change nothing: " + ", ".join(ignored)
    # and the scan does see options at work: each mode has options that apply
    for mode in MODES:
        assert sum(1 for (o, m), (v, _) in res.items() if m == mode and v == "applies") >= 10
