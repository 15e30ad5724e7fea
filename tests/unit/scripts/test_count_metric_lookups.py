"""scripts/count_metric_lookups.py counts the string lookups of stored metrics and nothing else,
and the core has none (issue 40, item 5)."""

from __future__ import annotations

from tests.unit.scripts import load_script

counter = load_script("count_metric_lookups")

SAMPLE = '''
def read(r, m, roof, metrics):
    a = r["metrics"]                      # counted: a cell's metrics as a dict key
    b = r.get("metrics") or {}            # counted
    c = r.metrics.get("tpot_s")           # counted: read by string
    d = r.metrics["find_max"]             # counted
    e = m.get("ttft_s")                   # counted: m is a metrics dict, ttft_s a metric
    f = metrics["suspect"]                # counted: a field
    g = roof.get("ttft_floor_s")          # not: another dict
    h = m.get("mode")                     # not: no metric or field of that name
    i = r.field("suspect")                # not: the typed read
    j = M.TTFT.value(r.metrics, "p50")    # not: the metric table
    k = doc["metrics"]  # metrics-dict: a foreign file's own object
    m["ttft_s"] = 1                       # not: a write
    return a, b, c, d, e, f, g, h, i, j, k
'''


def test_only_string_lookups_of_stored_metrics_count(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(SAMPLE)
    counted, marked = counter.lookups(path)
    assert [line for line, _ in counted] == [3, 4, 5, 6, 7, 8]
    assert [line for line, _ in marked] == [13]


def test_the_total_and_the_bound(tmp_path, capsys):
    (tmp_path / "m.py").write_text(SAMPLE)
    assert counter.main([str(tmp_path), "--max", "6"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("string lookups of stored metrics: 6 (1 lines")
    assert counter.main([str(tmp_path), "--max", "5"]) == 1


def test_the_core_reads_stored_metrics_through_the_metric_table(capsys):
    assert counter.main(["--max", "0", "--list"]) == 0, capsys.readouterr().out
