"""The run report's page on the shipped default run itself (deffcore.views.run_report), no cache
and no command: plotly.js inlined once, in the first figure; a file's text in a paragraph or a
box escaped. Fast beside tests/test_run_report.py, which writes reports through the CLI."""

from __future__ import annotations

import copy
import html
import json
import re

import pytest
from shipped_helpers import shipped_view

from deffcore.views.run import DEFAULT_RUN_PATH
from deffcore.views.run_report import report_html

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def default_run() -> dict:
    return json.loads(DEFAULT_RUN_PATH.read_text())


def test_plotly_js_is_inlined_once_in_the_first_figure(default_run):
    """The library comes with the first figure's div, before any figure is drawn; every later
    figure only calls it."""
    page = report_html(shipped_view(copy.deepcopy(default_run)))
    banners = [m.start() for m in re.finditer(r"plotly\.js v\d", page)]
    plots = [m.start() for m in re.finditer(r"Plotly\.newPlot\(", page)]
    divs = [m.start() for m in re.finditer(r'<div class="fig">', page)]
    assert len(banners) == 1 and len(plots) == len(divs) >= 2
    assert divs[0] < banners[0] < plots[0] < divs[1]


def test_a_stored_text_in_a_paragraph_or_a_box_is_escaped(default_run):
    """A snapshot's random-null seeds are digits (markup in one is refused when the file is
    read), so the text that reaches a paragraph is the view's source name and the BOS
    answer's sentence a box: markup in either is shown as text, never parsed."""
    from deffcore.views.run_schema import SnapshotError

    data = copy.deepcopy(default_run)
    band = data["measurement"]["random_null"]["results"]["default"]
    band["seeds"] = ["<img src=x onerror=alert(1)>", *band["seeds"][1:]]
    with pytest.raises(SnapshotError, match="seeds"):
        shipped_view(data)
    view = shipped_view(copy.deepcopy(default_run), source=f"run {HOSTILE}")
    page = report_html(view, answer={"verdict": "cannot_tell", "sentence": f"Δ {HOSTILE}"})
    assert "<script>alert" not in page and "<img src=x" not in page
    assert page.count(html.escape(HOSTILE)) == 2
