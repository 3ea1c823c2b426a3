"""The app's navigation: eight entries for three kinds of visitor, every other page hidden with
its URL kept, and the run panel in one place (the Runs page) with the shipped run's settings.

The browser's side (the sidebar's height at 1400 x 900, old URLs typed in) is
tests/e2e/test_navigation_browser.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from apptest_helpers import assert_clean, plain
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parents[2]
RUNS = "pages/7_Runs.py"
#: What the run panel draws: none of it may show anywhere but the Runs page.
RUN_WIDGETS = ("model_source", "data_source", "n", "max_tokens", "seed", "passages", "bos")


def new_app() -> AppTest:
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=300)


def run_widget_keys(at: AppTest) -> set[str]:
    keys = {w.key for kind in ("radio", "number_input", "selectbox") for w in at.get(kind)}
    keys |= {b.key for b in at.button}
    return keys & {*RUN_WIDGETS, "run"}


def test_the_navigation_lists_at_most_eight_entries_and_registers_every_page():
    import app

    pages = app.navigation()
    assert sum(p.visibility == "visible" for p in pages) <= 8
    listed = [title for _, _, title in app.LISTED]
    assert len(listed) <= 8 and len(pages) == len(list((REPO / "pages").glob("[0-9]*.py")))
    assert listed[0] == "Overview" and {"Teach", "BOS check", "Runs", "Labs"} <= set(listed)
    # grouped by who comes for what: each group's pages side by side
    groups = [group for group, _, _ in app.LISTED]
    assert list(dict.fromkeys(groups)) == [
        "Browse models", "Teach", "Check BOS sensitivity", "About",
    ]  # fmt: skip
    assert all(groups.index(g) + groups.count(g) - 1 == len(groups) - 1 - groups[::-1].index(g)
               for g in groups)  # fmt: skip
    at = new_app().run()  # what st.navigation registered: every page file, hidden or listed
    files = sorted(Path(str(p["script_path"])).name for p in at._registered_pages.values())
    assert files == sorted(p.name for p in (REPO / "pages").glob("[0-9]*.py"))


def test_old_page_urls_still_open_their_page():
    """Every page file keeps the URL its file name gave it (/Similarity, /Interventions, ...)."""
    at = new_app().run()
    urls = {
        Path(str(p["script_path"])).name: p.get("url_pathname")
        for p in at._registered_pages.values()
    }
    for file in (p.name for p in (REPO / "pages").glob("[0-9]*.py")):
        if file == "0_Overview.py":
            assert urls[file] == ""  # the default page: the bare URL
            continue
        assert urls[file] == re.sub(r"^\d+_", "", Path(file).stem), file
    assert urls["1_Similarity.py"] == "Similarity"
    assert urls["8_Interventions.py"] == "Interventions"
    for page, title in (("pages/1_Similarity.py", "Similarity"), ("pages/8_Interventions.py", "")):
        at.switch_page(page).run()
        assert_clean(at)
        assert at.title and (not title or at.title[0].value == title)


@pytest.mark.parametrize(
    "page",
    [
        "pages/0_Overview.py",
        "pages/5_Synthetic_lab.py",
        "pages/1_Similarity.py",
        "pages/4_BOS_and_controls.py",
        "pages/17_Labs.py",
        "pages/18_About.py",
    ],
)
def test_the_run_panel_is_on_the_runs_page_only(page):
    at = new_app().run()
    at.switch_page(page).run()
    assert_clean(at)
    assert run_widget_keys(at) == set(), page
    # the sidebar keeps the view controls only
    assert [w.key for w in at.sidebar.radio] == ["pooling"]
    assert not at.sidebar.button and not at.sidebar.number_input and not at.sidebar.text_input
    at.switch_page(RUNS).run()
    assert run_widget_keys(at) == {*RUN_WIDGETS, "run"}
    assert not at.sidebar.button  # in the main area, not the sidebar


def test_the_run_panel_starts_at_the_shipped_runs_settings():
    """A first run compares with the headline: the panel's defaults are the shipped run's."""
    from deffcore.views.run import load_snapshot

    spec = load_snapshot().spec
    at = new_app().run()
    at.switch_page(RUNS).run()
    assert_clean(at)
    assert at.selectbox(key="model_packaged").value == spec["model"]
    assert at.radio(key="data_source").value == "BBC news (offline)"
    assert spec["dataset"] == "bbc-news"
    for key in ("n", "max_tokens", "seed"):
        assert at.number_input(key=key).value == spec[key], key
    for key in ("passages", "bos"):
        assert at.selectbox(key=key).value == spec[key], key
    summary = f"{spec['model']} · {spec['dataset']} · N = {spec['n']:,} · {spec['max_tokens']}"
    assert any(plain(c.value).startswith(summary) for c in at.caption)


def test_the_run_settings_reach_every_page_without_the_panel():
    """A setting chosen on the Runs page is what the other pages (the labs) read, undrawn,
    and what the panel shows again when the visitor comes back."""
    from explorer import settings as sidebar

    at = new_app().run()
    at.switch_page(RUNS).run()
    at.number_input(key="seed").set_value(7).run()
    at.switch_page("pages/5_Synthetic_lab.py").run()
    assert at.session_state["_keep_seed"] == 7
    at.switch_page(RUNS).run()
    assert at.number_input(key="seed").value == 7
    assert sidebar.run_defaults()["seed"] != 7


def test_the_overview_links_its_tabs_and_the_labs_page_every_lab():
    at = new_app().run()
    links = [p.proto.page for p in at.get("page_link")]
    assert links[:4] == ["", "Similarity", "Lag_decay", "Gap_to_F_L"]
    at.switch_page("pages/17_Labs.py").run()
    assert_clean(at)
    labs = {p.proto.page for p in at.get("page_link")}
    assert labs == {
        "Interventions", "Pruning_boundary", "Residual_carry", "Training_dynamics",
        "Aggregations", "Correlation_lab", "Short_pretraining",
    }  # fmt: skip
    at.switch_page(RUNS).run()
    assert "Baselines" in {p.proto.page for p in at.get("page_link")}
