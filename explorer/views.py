"""The session's current run and views of cached runs (read from the cache, never re-run).

Until a run lands (or a link or the Runs page names one), the current run is the shared run
`deffcore app --run FILE` named, else the shipped default snapshot. `set_view` is the one way
a run becomes current: it also asks `explorer.current_run` to put the run's key in the URL and
its settings in the sidebar on the next page start.
"""

from __future__ import annotations

import os
from typing import Any

import streamlit as st

from deffcore.views.run import Run, load_gallery, load_snapshot
from deffcore.views.sharing import APP_RUN_ENV, open_shared
from deffcore.work import jobs
from explorer.guard import guarded

VIEW_KEY = "deff_view"
#: The run the sidebar should show next (set by `set_view`, applied by `explorer.current_run`
#: before the sidebar is drawn: widgets cannot change once drawn in a script run).
SYNC_KEY = "_deff_sync_sidebar"
#: The settings of a run in progress that a reload found again (its `?job=`): the sidebar shows
#: them rather than its defaults or the current run's, like before the reload.
JOB_SYNC_KEY = "_deff_sync_sidebar_job"
_RUN_ENV_DONE = "_deff_run_env_opened"


def cached_runs() -> list[dict[str, Any]]:
    """Meta of every complete cached run, newest first (`deffcore.extraction.cache.list_runs`)."""
    from deffcore.extraction import cache as entries

    return [
        m
        for m in entries.list_runs()
        if m.get("status", "complete") == "complete" and not m.get("corrupt") and "spec" in m
    ]


def measurement_from_cache(key: str) -> Any:
    """The `Measurement` of a cached run, read from disk (the model is not run)."""
    return jobs.load_result(key)


def open_run(key: str) -> Run | None:
    """Make a cached run the session's current run."""
    view = None
    with guarded(f"Opening run {key}"):
        view = Run.from_measurement(measurement_from_cache(key))
        set_view(view)
    return view


def set_view(view: Run) -> None:
    """Make `view` the session's current run (every page shows it; the URL names it and the
    sidebar shows its settings from the next page start on)."""
    st.session_state[VIEW_KEY] = view
    st.session_state[SYNC_KEY] = dict(view.spec)


def forget_run(key: str) -> None:
    """After a delete: drop the session's run if it was that one (the snapshot stays)."""
    view = st.session_state.get(VIEW_KEY)
    if view is not None and getattr(view, "key", None) == key:
        del st.session_state[VIEW_KEY]


@st.cache_data(show_spinner=False, max_entries=512)
def cached_result(key: str, created: str, pooling: str, metric: str) -> dict[str, Any]:
    """Headline numbers, lag profile and trust level of a cached run (memoised: the states are
    read once per (run, pooling, metric); `created` makes a recomputed entry a new cache line)."""
    view = Run.from_measurement(measurement_from_cache(key))
    h = view.headline(pooling, metric)
    trust = view.trust(pooling, metric).level
    return {**h.to_dict(), "rho": view.lag_profile(pooling, metric), "trust": trust}


@st.cache_resource(show_spinner=False)
def default_snapshot() -> Run | None:
    return load_snapshot()


@st.cache_resource(show_spinner=False)
def precomputed_runs() -> list[Run]:
    """The precomputed runs shipped with the app (the default first)."""
    return load_gallery()


def requested_run() -> None:
    """Once per session: make the shared run `deffcore app --run FILE` kept the current run,
    unless the session already has one (a link or a reload named it: the run stays put)."""
    if st.session_state.get(_RUN_ENV_DONE) or not os.environ.get(APP_RUN_ENV):
        return
    st.session_state[_RUN_ENV_DONE] = True
    if st.session_state.get(VIEW_KEY) is not None:
        return
    with guarded("Opening the shared run"):
        set_view(open_shared(os.environ[APP_RUN_ENV]))


def current_view() -> Run | None:
    """The run landed last in this session, else the shipped default snapshot."""
    requested_run()
    return st.session_state.get(VIEW_KEY) or default_snapshot()
