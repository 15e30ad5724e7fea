"""The plugin conformance kit (infbench.testing.conformance, `infbench plugins check`) on
plugins that break the contract one way each, and on one that keeps it."""

from __future__ import annotations

import pytest

from infbench.testing.conformance import NonConformingPlugin, assert_conforms, check_conformance
from tests.fixtures import bad_plugins as bp


def _failed(plugin) -> dict[str, str]:
    return {f.hook: f.message for f in check_conformance(plugin(), sample_s=0.05) if not f.ok}


def test_a_conforming_plugin_passes_every_check():
    findings = assert_conforms(bp.GoodPlugin(), sample_s=0.05)
    hooks = {f.hook for f in findings}
    assert {"hooks", "infbench_detect", "infbench_supported_precisions", "infbench_power_sampler"} <= hooks
    assert any("finite and non-negative" in f.message for f in findings)


@pytest.mark.parametrize("plugin, hook, says", [
    (bp.NegativeWattsPlugin, "infbench_power_sampler", "power_w=-12.0 W"),
    (bp.DetectRaisesPlugin, "infbench_detect", "raised OSError: libacme.so"),
    (bp.WrongTypePlugin, "infbench_detect", "a list of DeviceInfo"),
    (bp.UnmarkedHookPlugin, "hooks", "lack @"),
    (bp.OddDtypePlugin, "infbench_engines", "acme-engine: half -> float16"),
])
def test_each_broken_plugin_is_named_with_its_hook_and_fix(plugin, hook, says):
    failed = _failed(plugin)
    assert hook in failed and says in failed[hook], failed
    with pytest.raises(NonConformingPlugin, match=hook):
        assert_conforms(plugin(), sample_s=0.05)


def test_unknown_precisions_are_named():
    dev = bp.ACME
    failed = {f.hook: f.message for f in check_conformance(bp.WrongTypePlugin(), devices=[dev], sample_s=0.05)
              if not f.ok}
    assert "unknown precisions ['float16']" in failed["infbench_supported_precisions"]
