"""Issue 31: ``--len-range R`` draws each synthetic serving request's input and output lengths
around the cell's, as InferenceX's and vLLM's random datasets do (their two conventions)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from infbench.analysis.physics import token_reasons
from infbench.data.errors import ConfigError
from infbench.data.prompts import len_bounds, range_lengths
from infbench.data.schema import Cell, Load, RequestRecord
from infbench.workloads.prompt import PromptMaker


def test_the_two_conventions_bounds():
    """InferenceX (vLLM <= 0.8): [int(R L), L]; vLLM today: [floor(L (1-R)), ceil(L (1+R))]."""
    assert len_bounds(128, 0.8) == (102, 128) == len_bounds(128, 0.8, "inferencex")
    assert len_bounds(128, 0.8, "vllm") == (25, 231)
    assert len_bounds(1024, 0.5, "vllm") == (512, 1536)
    assert len_bounds(1, 0.5) == (1, 1) and len_bounds(1, 0.9, "vllm") == (1, 2)     # never below 1
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            len_bounds(128, bad)
    with pytest.raises(ValueError, match="unknown --len-range convention"):
        len_bounds(128, 0.5, "sglang")


def test_range_lengths_are_seeded_uniform_and_inside_the_bounds():
    ins, outs = range_lengths(2000, 128, 64, 0.8, seed=3)
    assert len(ins) == len(outs) == 2000
    assert min(ins) == 102 and max(ins) == 128 and min(outs) == 51 and max(outs) == 64   # every value reached
    assert 112 < sum(ins) / len(ins) < 118                                              # uniform: mean 115
    assert range_lengths(2000, 128, 64, 0.8, seed=3) == (ins, outs)
    assert range_lengths(2000, 128, 64, 0.8, seed=4) != (ins, outs)
    v_in, v_out = range_lengths(500, 100, 100, 0.5, "vllm", seed=1)
    assert min(v_in) >= 50 and max(v_in) <= 150 and min(v_out) >= 50 and max(v_out) <= 150


def cell(**kw):
    return Cell(model="m", engine="openai", dtype="auto", batch=1, input_len=128, output_len=64,
                load=Load(mode="concurrency", concurrency=2, num_requests=8), **kw)


def test_cell_identity_context_and_label():
    plain, ranged = cell(), cell(len_range=0.8)
    assert "len_range" not in plain.spec() and "len_range_convention" not in plain.spec()   # old ids unchanged
    assert ranged.spec_hash() != plain.spec_hash() != cell(len_range=0.8, len_range_convention="vllm").spec_hash()
    assert ranged.length_bounds() == ((102, 128), (51, 64)) and plain.length_bounds() == ((128, 128), (64, 64))
    assert cell(len_range=0.8, len_range_convention="vllm").longest() == 231 + 116      # the server's context
    assert "len-range0.8" in ranged.label()
    with pytest.raises(ValidationError, match="applies to len_range"):
        cell(len_range_convention="vllm")
    with pytest.raises(ValidationError):
        cell(len_range=1.0)


def test_ranged_prompts_carry_their_own_lengths():
    ins, outs = range_lengths(20, 64, 16, 0.5, seed=2)
    ps = PromptMaker("token_ids", vocab_size=32000).ranged(ins, outs, seed=2)
    assert [len(p.content) for p in ps] == [p.n_in for p in ps] == ins
    assert [p.output_len for p in ps] == outs
    assert len({tuple(p.content[:32]) for p in ps}) == 20                    # no two share their first 32 tokens
    words = PromptMaker("text").ranged(ins, outs, seed=2)
    assert [len(p.content.split()) for p in words] == ins and [p.output_len for p in words] == outs
    with pytest.raises(ValueError):
        PromptMaker("text").ranged([1, 2], [1])


def rec(n_in, n_out):
    return RequestRecord(t_send_ns=0, t_tokens_ns=list(range(1, n_out + 1)), n_in=n_in, n_out=n_out)


def test_physics_holds_each_request_to_the_cells_bounds():
    ranged = cell(len_range=0.8)
    assert token_reasons(ranged, [rec(110, 52), rec(128, 64), rec(102, 51)]) == []
    [why] = token_reasons(ranged, [rec(110, 40), rec(128, 64)])
    assert "too few tokens: 1 of 2" in why and "51 or more" in why
    [why] = token_reasons(cell(), [rec(128, 52)])                             # fixed lengths: as before
    assert "the 64 asked" in why


def test_planning_len_range(pm):
    from infbench.data.schema import Sweep
    from infbench.plan import plan
    from infbench.plan.target import remote_device

    dev = remote_device("http://127.0.0.1:1/v1")
    base = dict(models=["m"], engines=["openai"], dtypes=["auto"], batch=[1], input_len=[64], output_len=[8],
                concurrency=[2])
    c = plan(Sweep(**base, len_range=0.8, len_range_convention="vllm"), dev, pm).cells[0]
    assert (c.len_range, c.len_range_convention) == (0.8, "vllm")
    assert "len_range" not in plan(Sweep(**base), dev, pm).cells[0].spec()
    for bad, msg in [(dict(len_range=0.5, prefix_len=8), "do not go together"),
                     (dict(len_range_convention="vllm"), "applies to --len-range")]:
        with pytest.raises(ConfigError, match=msg):
            plan(Sweep(**base, **bad), dev, pm)
