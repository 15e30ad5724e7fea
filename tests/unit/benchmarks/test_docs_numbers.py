"""Every figure in docs/ and README.md is rendered from its committed JSON
(benchmarks/docs_numbers.py): the check that fails CI when a table drifts from its numbers,
and the mechanics of the markers on small documents."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("docs_numbers", ROOT / "benchmarks" / "docs_numbers.py")
dn = importlib.util.module_from_spec(spec)
sys.modules["docs_numbers"] = dn
spec.loader.exec_module(dn)


def test_docs_match_their_json():
    """`python benchmarks/docs_numbers.py --check` passes on the committed docs and results:
    rendering only, no measuring."""
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "docs_numbers.py"), "--check"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr


BENCH = '''
def render(data, variant=None):
    if variant == "line":
        return f"median {data['x']:.1f} ms"
    return "| a | b |\\n|---|---:|\\n" + "\\n".join(f"| {k} | {v} |" for k, v in data["rows"].items())
'''


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "bench" / "toy.py").write_text(BENCH)
    (tmp_path / "results" / "toy.json").write_text(json.dumps({"x": 1.26, "rows": {"p": 3, "q": 4}}))
    return tmp_path


def run(tree, text, write=False):
    doc = tree / "doc.md"
    doc.write_text(text)
    dn._modules.clear()
    return doc, [p.replace(f"{tree}/", "") for p in dn.process([doc], write, tree / "bench", tree / "results")]


def test_region_rendered_checked_and_rewritten(tree):
    text = "# t\n\n<!-- numbers: toy -->\n| a | b |\n|---|---:|\n| p | 3 |\n| q | 5 |\n<!-- /numbers -->\n\n" \
           "<!-- numbers: toy:line -->\nmedian 1.2 ms\n<!-- /numbers -->\n"
    doc, problems = run(tree, text)
    assert len(problems) == 2 and "doc.md:3 toy differs" in problems[1] and "doc.md:10 toy:line" in problems[0]
    assert "-| q | 5 |" in problems[1] and "+| q | 4 |" in problems[1]
    doc, problems = run(tree, text, write=True)
    assert problems == [] and "| q | 4 |" in doc.read_text() and "median 1.3 ms" in doc.read_text()
    assert dn.process([doc], False, tree / "bench", tree / "results") == []


def test_unmarked_figures_are_found_and_can_be_exempted(tree):
    text = "| what | result |\n|---|---|\n| speed | **92 ms** |\n\n```\n$ python benchmarks/x.py\n1 2 3\n```\n\n" \
           "| option | meaning |\n|---|---|\n| `--n` | count |\n\n<!-- numbers: none (a configuration) -->\n" \
           "| engine | memory |\n|---|---:|\n| vllm | 0.9 |\n"
    _, problems = run(tree, text)
    assert problems == ["doc.md:1 table of figures outside numbers markers",
                        "doc.md:5 captured output with figures outside numbers markers"]


@pytest.mark.parametrize("text, msg", [
    ("<!-- numbers: toy -->\nx\n", "never closed"),
    ("<!-- /numbers -->\n", "without an opening marker"),
    ("<!-- numbers: toy -->\n<!-- numbers: toy -->\n<!-- /numbers -->\n", "opened inside"),
    ("<!-- numbers: nosuch -->\n<!-- /numbers -->\n", "nosuch.json is missing"),
])
def test_malformed_regions_are_named(tree, text, msg):
    _, problems = run(tree, text)
    assert len(problems) == 1 and msg in problems[0]


def test_render_errors_name_the_region(tree):
    (tree / "results" / "toy.json").write_text(json.dumps({"rows": {}}))
    _, problems = run(tree, "<!-- numbers: toy:line -->\n<!-- /numbers -->\n")
    assert problems == ["doc.md:1 toy:line: render failed: KeyError: 'x'"]
