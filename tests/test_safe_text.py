"""The one escaping path (deffcore.core.safe_text): text that cannot fail an encoder, Markdown and
Plotly that show the characters, and CSV cells no spreadsheet reads as a formula (OWASP)."""

from __future__ import annotations

import csv
import io

import pandas as pd
import plotly.graph_objects as go
import pytest

from deffcore import figures
from deffcore.core.safe_text import (
    CSV_FORMULA_STARTS,
    as_text,
    csv_cell,
    csv_safe,
    md_code,
    md_escape,
    plotly_text,
)


def test_as_text_replaces_what_is_not_text_and_keeps_the_rest():
    assert as_text("smollm2\ud800") == "smollm2\ufffd"
    assert as_text("a\x1b[31mb\x00c\x7f\x85") == "a\ufffd[31mb\ufffdc\ufffd\ufffd"
    assert as_text("ls \u202etxt.exe") == "ls \ufffdtxt.exe"
    assert as_text("tab\tand\nline é 😀 ⊂") == "tab\tand\nline é 😀 ⊂"
    for value in ("x\ud800", "\udc80y"):
        for shown in (as_text(value), md_escape(value), plotly_text(value)):
            shown.encode("utf-8")  # never a UnicodeEncodeError downstream


def test_md_code_is_a_code_span_nothing_breaks_out_of():
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    for text in ("python -m deffcore measure --n 8", "a `b` ![x](y) <img>", "``x``", "`"):
        span = md_code(text)
        html = md.render(span)
        assert html.count("<code>") == 1 and "<img" not in html and "<a " not in html, span
    assert md_code("python -m deffcore") == "`python -m deffcore`"
    assert md_code("a\nb\x1b") == "`a b\ufffd`"


def test_plotly_text_escapes_tags_entities_and_template_fields():
    assert plotly_text("<b>50%</b> & %{x}") == "&lt;b&gt;50&#37;&lt;/b&gt; &amp; &#37;{x}"
    assert "%{" not in plotly_text("%{customdata[0]}") and "<" not in plotly_text("<a href=x>")
    assert plotly_text('"quoted"') == '"quoted"'  # Plotly has no &quot;: left as it is


@pytest.mark.parametrize("start", CSV_FORMULA_STARTS)
def test_a_cell_that_starts_like_a_formula_is_text(start):
    value = f'{start}HYPERLINK("http://x")'
    assert csv_cell(value) == "'" + value
    assert csv_cell("model " + value) == "model " + value  # only the first character counts


def test_numbers_and_plain_text_are_left_alone():
    for value in (-1, -0.5, 3, None, "smollm2-135m", "a=b", "", "'quoted"):
        assert csv_cell(value) == value
    assert set(CSV_FORMULA_STARTS) == {"=", "+", "-", "@", "\t", "\r"}


def test_a_downloaded_figure_or_table_has_no_formula_cell():
    table = pd.DataFrame({"=label": ["=1+1", "@SUM(A1)", "ok"], "value": [-1.5, 2.0, 3.0]})
    safe = csv_safe(table)
    assert list(safe.columns) == ["'=label", "value"]
    assert list(safe["'=label"]) == ["'=1+1", "'@SUM(A1)", "ok"]
    assert list(safe["value"]) == [-1.5, 2.0, 3.0] and table["=label"].iloc[0] == "=1+1"
    fig = go.Figure(go.Bar(x=[1.0, -2.0], y=["+cmd", "-x"], name="=trace"))
    figures.tag_run(fig, {"run": "=HYPERLINK(1)", "model": "@model", "n": 8})
    rows = list(csv.reader(io.StringIO(figures.figure_csv(fig))))
    cells = [c for row in rows for c in row]
    assert not any(c.startswith(CSV_FORMULA_STARTS) for c in cells if not _number(c)), rows
    assert "'=HYPERLINK(1)" in cells and "'+cmd" in cells and "-2.0" in cells


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_display_escapes_customdata_that_hover_templates_substitute():
    fig = go.Figure(
        go.Bar(
            x=[1.0],
            y=["a"],
            customdata=[["<img src=x>", 0.5]],
            hovertemplate="%{customdata[0]}<extra></extra>",
        )
    )
    shown = figures.plain_text_labels(fig)
    assert list(shown.data[0].customdata[0]) == ["&lt;img src=x&gt;", 0.5]
    assert fig.data[0].customdata[0][0] == "<img src=x>"  # the CSV keeps the user's text
    again = figures.plain_text_labels(shown)  # never escaped twice
    assert again.data[0].customdata[0][0] == "&lt;img src=x&gt;"
