"""Output encoding (issue 41, item 8): figures escape data strings and keep their templates, the
terminal and CSV lose bidi controls, log axes label whole values."""

from __future__ import annotations


# -- item 8: output encoding -------------------------------------------------------------------
def test_figures_escape_data_strings_and_keep_their_templates():
    from infbench.data.outputs import plotly_text

    fig = {"data": [{"name": '<a href="https://evil.example/phish">CLICK ME</a>', "x": ["<b>m</b>"],
                     "hovertemplate": "%{x}<br>%{y}<extra></extra>"}], "layout": {"title": {"text": "a & b"}}}
    out = plotly_text(fig)
    assert out["data"][0]["name"] == '&lt;a href="https://evil.example/phish"&gt;CLICK ME&lt;/a&gt;'
    assert out["data"][0]["x"] == ["&lt;b&gt;m&lt;/b&gt;"] and out["layout"]["title"]["text"] == "a &amp; b"
    assert out["data"][0]["hovertemplate"] == "%{x}<br>%{y}<extra></extra>"


def test_the_terminal_and_csv_lose_bidi_controls():
    from infbench.data.outputs import csv_cell, terminal_text

    name = "model\u202eexe.txt\u2066x\u2069"
    assert terminal_text(name) == "modelexe.txtx" and csv_cell(name) == "modelexe.txtx"


def test_log_axes_label_whole_values():
    from infbench.data.outputs import log_ticks

    t = log_ticks([3, 40])
    assert t["tickvals"] == [2, 5, 10, 20, 50, 100] and t["ticktext"] == ["2", "5", "10", "20", "50", "100"]
    wide = log_ticks([0.01, 500])
    assert wide["tickvals"] == [0.01, 0.1, 1, 10, 100, 1000] and wide["ticktext"][0] == "0.01"

