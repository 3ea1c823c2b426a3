"""No download is named without its run: every page's downloads go through the one helper
(`explorer.cards.show_figure` / `download_table`) and their names say the run and the view (or,
for a page of no run, what made the figure)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from apptest_helpers import assert_clean
from streamlit.testing.v1 import AppTest

from deffcore.views.labels import run_slug
from deffcore.views.run import Run

REPO = Path(__file__).resolve().parents[2]
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}
#: Pages of the current run: every download names it.
RUN_PAGES = (
    "pages/0_Overview.py",
    "pages/1_Similarity.py",
    "pages/2_Lag_decay.py",
    "pages/3_Gap_to_F_L.py",
    "pages/4_BOS_and_controls.py",
    "pages/6_Baselines.py",
    "pages/7_Runs.py",
    "pages/12_Aggregations.py",
)


def test_only_the_helper_makes_download_buttons():
    """One helper: no page builds a download button or names a figure's file itself."""
    for path in [*(REPO / "pages").glob("*.py"), *(REPO / "explorer").glob("*.py")]:
        text = path.read_text()
        if path.name != "cards.py":
            assert "download_button(" not in text, path.name
        assert not re.search(r"show_figure\([^)]*\bkey=", text), path.name


@pytest.fixture(scope="module")
def app(cache_dir, measurement):
    from explorer import views

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    at.session_state[views.VIEW_KEY] = Run.from_measurement(measurement)
    return at.run()


def download_ids(at: AppTest) -> list[str]:
    return [b.proto.id for b in at.get("download_button")]


@pytest.mark.parametrize("page", RUN_PAGES)
def test_every_download_of_a_run_page_names_the_run(app, measurement, page):
    at = app.switch_page(page).run()
    assert not at.exception
    slug = run_slug(measurement.spec.__dict__)
    ids = download_ids(at)
    assert ids, f"{page} offers no download"
    assert all(slug in i for i in ids), ids
    assert not any(re.search(r"-(overview|controls|pos0)_[a-z]+_(csv|html)$", i) for i in ids)


def test_pages_of_no_run_name_what_made_the_figure(app):
    at = app.switch_page("pages/5_Synthetic_lab.py").run()
    assert_clean(at)
    ids = download_ids(at)
    assert ids and all("synthetic-story" in i or "synthetic-sweep" in i for i in ids), ids
    assert any("_L24_" in i for i in ids)  # the knobs are in the name
    at = app.switch_page("pages/13_Models.py").run()
    ids = download_ids(at)  # the runs' table and plots by metric; the pruning checks by name
    assert all("models_cka" in i or "models_pruning_tolerance" in i for i in ids), ids
    assert any("models_pruning_tolerance" in i for i in ids)


def _hostile_figure():
    import plotly.graph_objects as go

    from explorer.cards import show_figure

    fig = go.Figure(go.Bar(x=[1.0], y=["<a href='http://127.0.0.1:9/x'>m</a>"], name="<b>m</b>"))
    show_figure(fig, "bars", {"lab": "test"})


def test_a_shown_figure_renders_user_text_in_labels_as_text():
    """The chart on the page (and its HTML) escapes a label's HTML (`plain_text_labels`)."""
    at = AppTest.from_function(_hostile_figure).run()
    assert not at.exception
    spec = at.get("plotly_chart")[0].proto.spec.replace("\\u002f", "/")
    assert "<a href" not in spec and "<b>" not in spec
    assert "&lt;a href=" in spec and "&lt;b&gt;m&lt;/b&gt;" in spec
