"""Start a page: page config, the shared sidebar (the view controls), a background run's
progress; returns the run and settings.

Every page starts with `page()` (or `require_view()` when it needs a run). The run panel (the
run settings and Run) is drawn by the Runs page only; every other page reads the run settings
as last chosen there. `page_links` draws a tab-like row of links to related pages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import streamlit as st

from deffcore.core.errors import DeffError
from deffcore.core.safe_text import md_escape  # user text is shown as text, never as Markdown
from deffcore.views.run import Run
from explorer.current_run import start_page, write_url
from explorer.measure_pick import cka_only, measure_ready
from explorer.run_panel import job_panel, settle_job, start_run
from explorer.settings import (
    PAGE_CHANGED_KEY,
    Settings,
    glossary_expander,
    run_panel_settings,
    sidebar,
)
from explorer.views import current_view

#: The Overview's tab-like row: the result pages the navigation lists under "Overview".
OVERVIEW_TABS: list[tuple[str, str]] = [
    ("pages/0_Overview.py", "Overview"),
    ("pages/1_Similarity.py", "Similarity"),
    ("pages/2_Lag_decay.py", "Lag decay"),
    ("pages/3_Gap_to_F_L.py", "Gap to F_L"),
]


def page(
    title: str,
    *,
    run_panel: bool = False,
    measures: bool = False,
    uses_metric: bool = True,
    glossary: bool = True,
) -> tuple[Run | None, Settings]:
    """Start a page: page config, the shared sidebar, the run box (and, with `run_panel`, the
    run settings and Run at the top of the main area); returns (run, settings). Without
    `measures` the page is defined for the CKA family only: a SPEC 17 metric in the sidebar
    is replaced by linear CKA (`measure_pick.cka_only`), said where the page `uses_metric`.
    `glossary=False`: the page draws the sidebar's glossary itself, last (`sidebar_glossary`)."""
    # a Material icon, not the emoji: Streamlit recognises an emoji by compiling its whole
    # emoji pattern, 0.03-0.14 s of every cold first screen on a 2-core machine
    st.set_page_config(
        page_title=f"{title} · Effective Depth Explorer",
        page_icon=":material/straighten:",
        layout="wide",
    )
    st.session_state[PAGE_CHANGED_KEY] = st.session_state.get("_deff_page") != title
    st.session_state["_deff_page"] = title
    settle_job()
    start_page()  # the run a link names; the sidebar set to the current run's settings
    settings = sidebar(glossary=glossary)
    if run_panel:  # the page's title first, then the panel
        st.title(title)
        with st.container(border=True):
            st.subheader("Measure a run")
            run_settings, run_clicked = run_panel_settings()
        if run_clicked:
            start_run(run_settings)  # checked and queued before the main area shows progress
    job_panel()
    if not measures:
        cka_only(settings, say=uses_metric)
    view = current_view()
    write_url(view)  # a reload, a bookmark or a shared link shows this run again
    return view, settings


@contextlib.contextmanager
def sidebar_glossary() -> Iterator[None]:
    """Run the page's body, then draw the sidebar's glossary (below the view controls, where
    `sidebar` draws it): the first screen sends its ~20 kB of text after the charts, so the
    browser draws the charts first. The body ends early by returning, not by `st.stop()`
    (nothing is drawn after a stop)."""
    yield
    with st.sidebar:
        glossary_expander()


def require_view(
    title: str,
    *,
    tabs: list[tuple[str, str]] | None = None,
    measures: bool = False,
    uses_metric: bool = True,
) -> tuple[Run, Settings] | None:
    """Start a page that needs a run: the run and settings, or a message and None. `tabs`:
    a row of links to related pages under the title (`page_links`). `measures`: the page draws
    a SPEC 17 metric (None, with the offer to compute it, while the run holds no matrix of it:
    `measure_pick.measure_ready`); without, it shows linear CKA and says so."""
    view, settings = page(title, measures=measures, uses_metric=uses_metric)
    st.title(title)
    if tabs:
        page_links(tabs)
    if view is None:
        st.warning("No run yet: choose a model and dataset on the Runs page and press Run.")
        return None
    if not measure_ready(view, settings):  # a SPEC 17 measure the run does not hold yet
        return None
    try:  # e.g. a pooling control undefined for this run (no variance): a sentence
        view.similarity(settings.pooling, settings.metric)
    except DeffError as err:
        st.warning(md_escape(err))
        return None
    if view.source in ("shared", "precomputed"):  # a snapshot: a run without its states
        st.caption(
            "ℹ️ Showing a shared run (a snapshot file someone sent, see the Runs page): its "
            "numbers are as its sender measured them; press **Run** to measure your own."
            if view.source == "shared"
            else "ℹ️ Showing the shipped precomputed default run (see the first page); press "
            "**Run** on the Runs page to measure your own model and data."
        )
    return view, settings


def page_links(row: list[tuple[str, str]]) -> None:
    """A tab-like row of links at the top of a page: (page file, label) each, e.g. the
    Overview's Similarity, Lag decay and Gap to F_L. A page file run on its own (no router:
    nothing registered) shows the labels as a caption instead."""
    from streamlit.errors import StreamlitAPIException

    line = st.container(horizontal=True, gap="small")
    for file, label in row:
        try:
            line.page_link(file, label=label, width="content")
        except StreamlitAPIException:  # not registered: an AppTest of one page file
            line.caption(label)
