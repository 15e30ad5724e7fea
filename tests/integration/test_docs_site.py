"""The documentation site builds strictly (`mkdocs build --strict`: every link and anchor
resolves, every page is in the nav, the API reference of infbench.plugin renders from its
docstrings), and the docs' figure markers survive into the built pages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_mkdocs_builds_strictly_with_the_plugin_api_reference(tmp_path):
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600, env={"NO_MKDOCS_2_WARNING": "1",
                                                                          **__import__("os").environ})
    assert p.returncode == 0, p.stderr[-4000:]
    api = (site / "api" / "plugin" / "index.html").read_text()
    for name in ("PowerSampler", "ManagedServerEngine", "hookimpl", "assert_conforms", "slots_needed"):
        assert name in api, name
    bench = (site / "benchmarks" / "index.html").read_text()
    assert "numbers: harness_overhead" in bench  # the figure markers stay (HTML comments pass through)


def test_the_readme_fits_on_two_screens():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 100, len(lines)
    assert "pip install . && infbench detect && infbench run" in lines and "bash scripts/test.sh" in lines
