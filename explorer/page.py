"""Start a page: page config, the shared sidebar, the run panel; returns the run and settings.

Every page starts with `page()` (or `require_view()` when it needs a run). Caching: the expensive
step (the forward pass) is cached on disk by `deffcore.extraction.cache`, keyed by model, data, N,
max
tokens, seed, passages mode and BOS option; everything a page draws from a run is cheap.
"""

from __future__ import annotations

import streamlit as st

from deffcore.core.errors import DeffError
from deffcore.core.safe_text import md_escape  # user text is shown as text, never as Markdown
from deffcore.views.run_view import RunView
from deffcore.views.snapshot import SnapshotView
from explorer.current_run import start_page, write_url
from explorer.run_panel import job_panel, settle_job, start_run
from explorer.settings import PAGE_CHANGED_KEY, Settings, sidebar
from explorer.views import current_view


def page(title: str) -> tuple[RunView | None, Settings]:
    """Start a page: page config, the shared sidebar, the run box; returns (run, settings)."""
    st.set_page_config(
        page_title=f"{title} · Effective Depth Explorer", page_icon="📐", layout="wide"
    )
    st.session_state[PAGE_CHANGED_KEY] = st.session_state.get("_deff_page") != title
    st.session_state["_deff_page"] = title
    settle_job()
    start_page()  # the run a link names; the sidebar set to the current run's settings
    settings, run_clicked = sidebar()
    if run_clicked:
        start_run(settings)  # checked and queued before the main area shows its progress
    job_panel()
    view = current_view()
    write_url(view)  # a reload, a bookmark or a shared link shows this run again
    return view, settings


def require_view(title: str) -> tuple[RunView, Settings] | None:
    """Start a page that needs a run: the run and settings, or a message and None."""
    view, settings = page(title)
    st.title(title)
    if view is None:
        st.warning("No run yet: choose a model and dataset in the sidebar and press Run.")
        return None
    try:  # e.g. a pooling control undefined for this run (no variance): a sentence
        view.similarity(settings.pooling, settings.metric)
    except DeffError as err:
        st.warning(md_escape(err))
        return None
    if isinstance(view, SnapshotView):
        st.caption(
            "ℹ️ Showing a shared run (a snapshot file someone sent, see the Runs page): its "
            "numbers are as its sender measured them; press **Run** to measure your own."
            if view.source == "shared"
            else "ℹ️ Showing the shipped precomputed default run (see the first page); press "
            "**Run** in the sidebar to measure your own model and data."
        )
    return view, settings
