"""The background run panel: start a run, follow it, settle it when it lands, resume one.

Run checks the settings, the model path and the data (`deffcore.runs.measure.plan`, before a model
loads; messages name the user's own file) and hands the run to `deffcore.work.jobs`, whose worker
thread lives in the server process, so switching pages or reloading does not stop it. The
session keeps the job id, and every page's URL carries it (`?job=`, put back after each page
switch), so a reload or a new tab of any page finds and follows the job; the main area
polls it with `st.fragment(run_every=...)`: stage, passages, tokens/s, ETA, Cancel. When the job
lands, its result is read back from the cache by key and becomes the current run, with a notice
(and "served from the cache" when it was)."""

from __future__ import annotations

import time

import streamlit as st

from deffcore.core.errors import DeffError
from deffcore.core.safe_text import md_escape  # user text is shown as text, never as Markdown
from deffcore.runs import measure as preflight
from deffcore.views.labels import run_label
from deffcore.views.run import Run
from deffcore.work import job_state, jobs
from explorer.live import live_panel, stopped_note
from explorer.settings import REFUSED_KEY, Settings
from explorer.uploads import UPLOAD_KEY, upload_names
from explorer.views import JOB_SYNC_KEY, set_view

#: How long the Run click's own script run waits for its job before the polling fragment
#: takes over (a cache hit lands at once). AppTest has no browser to poll: it waits for the
#: job unless the session sets `_deff_run_wait_s` (tests of the background behaviour do).
RUN_GRACE_S = 1.5
POLL_S = 1.0
JOB_KEY = "_deff_job"
#: The URL's query parameter naming the session's job (`?job=<id>`), on every page.
JOB_PARAM = "job"
_JUST_STARTED = "_deff_job_started"
_NOTICE = "_deff_notice"
_RUN_ERROR = "_deff_run_error"


def start_run(settings: Settings) -> str | None:
    """Check the run's settings, model path and data (before any model loads) and start it in
    the background; the session follows the job. Returns the job id, None after an error
    (kept for the main area: it names the user's own file)."""
    names = upload_names()
    if st.session_state.get(REFUSED_KEY):
        return None  # the sidebar already says why (a path the server does not read)
    try:
        if not settings.model:
            raise DeffError("Enter a model (Hugging Face id or local path) before pressing Run.")
        if not settings.dataset:
            up = st.session_state.get(UPLOAD_KEY) or {}
            raise DeffError(
                up.get("error")
                or "Choose a dataset (a Hugging Face spec, an uploaded file or a path) first."
            )
        spec, device = preflight.plan(
            names=names,
            windows=settings.windows(),
            model=settings.model,
            revision=settings.revision,
            dataset=settings.dataset,
            **settings.shared_options(),
        )
        job_id = jobs.start(spec, metric=settings.metric, device=device, names=names, checked=True)
    except DeffError as err:
        st.session_state[_RUN_ERROR] = preflight.display(str(err), names)
        return None
    except MemoryError:
        st.session_state[_RUN_ERROR] = "The run ran out of memory; lower N or max tokens."
        return None
    except Exception as err:  # keep the app usable whatever a third-party library raises
        msg = f"The run could not start ({type(err).__name__}): {err}"
        st.session_state[_RUN_ERROR] = preflight.display(msg, names)
        return None
    follow_job(job_id)
    return job_id


def follow_job(job_id: str) -> None:
    """Make `job_id` the session's run in progress (shown on every page until it lands)."""
    st.session_state[JOB_KEY] = job_id
    st.session_state[_JUST_STARTED] = True
    st.query_params[JOB_PARAM] = job_id  # a reload of this URL finds the job again


def resume_run(key: str) -> str | None:
    """Restart the run of a partial (interrupted) cache entry in the background; it continues
    from its last finished batch. DeffError when `key` is not an interrupted run."""
    job_id = jobs.start(jobs.partial_spec(key))
    follow_job(job_id)
    return job_id


def _session_job() -> str | None:
    """The session's run in progress (or landed, not yet settled): the session's own, else the
    one the URL names (a reload or a new tab of any page). Every page puts it back in the URL:
    a page switch (`st.navigation`) clears the query parameters."""
    job_id = st.session_state.get(JOB_KEY)
    if job_id is None:
        from_url = st.query_params.get(JOB_PARAM)
        found = jobs.status(from_url) if from_url else None
        if found is not None and found.kind == "run":
            job_id = st.session_state[JOB_KEY] = from_url
            if not found.finished:  # a reload mid-run: the sidebar shows the run's settings
                st.session_state[JOB_SYNC_KEY] = dict(found.spec.__dict__)
        elif from_url:  # a job this server does not know (it restarted): the link is stale
            del st.query_params[JOB_PARAM]
    if job_id is not None and st.query_params.get(JOB_PARAM) != job_id:
        st.query_params[JOB_PARAM] = job_id
    return job_id


def _drop_job() -> None:
    st.session_state.pop(JOB_KEY, None)
    st.session_state.pop(_JUST_STARTED, None)
    if JOB_PARAM in st.query_params:
        del st.query_params[JOB_PARAM]


def settle_job() -> None:
    """If the session's job finished: its result becomes the current run (read back from the
    cache by key) and its notice waits for the main area."""
    job_id = _session_job()
    status = jobs.status(job_id) if job_id else None
    if job_id and status is None:  # the server restarted: the cache still has what finished
        _drop_job()
    if status is None or not status.finished:
        return
    _drop_job()
    if status.state == "done":
        try:
            view = Run.from_measurement(jobs.load_result(status.result_key))
        except DeffError as err:
            st.session_state[_NOTICE] = ("error", str(err))
            return
        set_view(view)
        if status.from_cache:
            how = "served from the cache"
        else:
            how = f"measured in {status.elapsed_s:.0f} s"
            if status.tokens_per_s:
                how += f" ({status.tokens_per_s:,.0f} tokens/s)"
            if status.resumed:
                how += f", {status.resumed:,} passages resumed from an interrupted run"
        st.session_state[_NOTICE] = (
            "success",
            f"Run finished: {view.label} — {how}.{stopped_note(status)}",
        )
    elif status.state == "cancelled":
        kept = jobs.kept_passages(status.spec)
        st.session_state[_NOTICE] = (
            "info",
            f"Run cancelled: {run_label(status.spec.__dict__)}. "
            + (
                f"{kept:,} finished passages are kept as an interrupted run: Run with the same "
                "settings (or Resume on the Runs page) continues from there."
                if kept
                else "No finished batch had been saved yet; nothing is kept."
            ),
        )
    else:
        st.session_state[_NOTICE] = ("error", status.error or "The run failed.")


def _grace_s() -> float:
    override = st.session_state.get("_deff_run_wait_s")
    if override is not None:
        return float(override)
    # AppTest patches `streamlit.config.get_option` (not `st.get_option`, bound at import)
    from streamlit import config as st_config

    return 3600.0 if st_config.get_option("global.appTest") else RUN_GRACE_S


def _draw_progress(status: job_state.JobStatus, *, cancel: bool) -> None:
    with st.container(border=True):
        st.markdown(f"**Running:** {md_escape(run_label(status.spec.__dict__))}")
        # every stage has its bar: a one-off stage (assembly, model load) by its time estimate
        st.progress(status.stage_fraction, text=status.describe())
        if cancel:
            st.button(
                "Cancel run",
                key="job_cancel",
                on_click=jobs.cancel,
                args=(status.job_id,),
                disabled=status.cancel_requested,
                help="Stops before the next batch; finished batches are kept for a resume.",
            )
            live_panel(status)  # the estimates so far, Stop when settled (SPEC 14)
        st.caption(
            "The run goes on in the background: switch pages or reload, it keeps going and "
            "becomes the current run when it lands."
        )


@st.fragment(run_every=POLL_S)
def _job_fragment(job_id: str) -> None:
    status = jobs.status(job_id)
    if status is None or status.finished:
        st.rerun(scope="app")  # lands on a full run: every page element shows the result
    _draw_progress(status, cancel=True)


def job_panel() -> None:
    """The main area's run box: a notice when a run landed, an error from Run, or the
    progress of the session's run in progress (polled, with Cancel)."""
    err = st.session_state.pop(_RUN_ERROR, None)
    if err:
        st.error(md_escape(err))
    notice = st.session_state.pop(_NOTICE, None)
    if notice:  # one notice at the top of the page (a toast beside it covered half of it)
        kind, text = notice
        getattr(st, kind)(md_escape(text))
    job_id = _session_job()
    status = jobs.status(job_id) if job_id else None
    if status is None:
        return
    if st.session_state.pop(_JUST_STARTED, False) and not status.finished:
        box = st.empty()
        deadline = time.monotonic() + _grace_s()
        while not status.finished and time.monotonic() < deadline:
            with box.container():
                _draw_progress(status, cancel=False)
            status = jobs.wait(job_id, timeout=min(0.5, max(deadline - time.monotonic(), 0)))
        box.empty()
    if status.finished:
        st.rerun()  # the next run lands it before the sidebar is drawn
    _job_fragment(job_id)
