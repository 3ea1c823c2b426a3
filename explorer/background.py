"""A background task on a page: its bar while it runs, the page run again once when it lands.

A page starts work with `deffcore.work.jobs.start_task(name, ...)` (the diagnostics, the BOS
on/off check, the paired bootstrap, a SPEC 17 measure's matrix) and calls `follow_task(name,
doing)` while it runs: a fragment polls the task every `POLL_S` and draws its bar ("doing:
stage, steps, ETA"); when the task lands, the whole page runs again, exactly once per job
(`rerun_once`), so it draws the result; a job that landed on an earlier run is never rerun
for again. A failure is one sentence (`show_failure`). The session's own runs and sweeps
are followed by `explorer.run_panel` and the Models page, which settle what lands.
"""

from __future__ import annotations

import streamlit as st

from deffcore.core.safe_text import md_escape
from deffcore.work import jobs
from deffcore.work.job_state import JobStatus

#: Seconds between two polls of a running task.
POLL_S = 1.0
#: The session key prefix under which the job id a page was last rerun for is kept.
LANDED_KEY = "_deff_landed:"


def rerun_once(key: str, job_id: str) -> None:
    """Run the whole page again, unless it already was for `job_id` under `key`: the guard
    that keeps a landed job from rerunning the page on every poll."""
    if st.session_state.get(LANDED_KEY + key) != job_id:
        st.session_state[LANDED_KEY + key] = job_id
        st.rerun(scope="app")


def show_failure(status: JobStatus | None, what: str) -> bool:
    """`what failed: <its error>` as one sentence (as text, never Markdown) when the task
    failed; whether it did."""
    if status is None or status.state != "failed":
        return False
    st.error(md_escape(f"{what} failed: {status.error}"))
    return True


@st.fragment(run_every=POLL_S)
def follow_task(name: str, doing: str, *, failed: str = "") -> None:
    """The task `name`'s bar, `doing: <stage, steps, ETA>`, while it runs; the page runs
    again once when it lands. With `failed` (the sentence's subject), a failure is said here
    and the page is not rerun (a rerun would start the task again); without it, the page
    runs again once and says the failure itself (`show_failure`)."""
    status = jobs.task_job(name)
    if status is None or (failed and show_failure(status, failed)):
        return
    if status.finished:
        rerun_once(name, status.job_id)
        return
    st.progress(status.stage_fraction, text=f"{doing}: {status.describe()}")
