"""The paired bootstrap of a measured run, in the background (the BOS page; SPEC section 15).

A run measured here has no paired bootstrap until one is drawn: `ensure_paired(view, metric)`
starts one (`deffcore.work.jobs.start_task`) over every pooling the run defines, under the view's
metric and its BOS answer's stand-in (`Measurement.answer_bootstrap`: unbiased CKA beside
linear CKA), B = PAGE_B replicates on the same passage multisets (`Measurement.paired_bootstrap`,
memoised on the run, so the page's next run reads it through `RunView.paired_bootstrap`).
Meanwhile the page shows the unpaired answer, said as such, and `paired_progress` its bar; a
snapshot carries its own (or none: `measure --bootstrap B --snapshot` stores one).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from deffcore.core.safe_text import md_escape
from deffcore.statistics.position0 import ANSWER_B
from deffcore.views.run_answer import held
from deffcore.work import jobs

#: Replicates of the page's paired bootstrap: the one B of every surface's answer.
PAGE_B = ANSWER_B


def _name(view: Any, metric: str) -> str:
    return f"paired:{view.measurement.spec.key()}:{metric}:{PAGE_B}"


def ensure_paired(view: Any, metric: str) -> str | None:
    """The background task's name while the view's run lacks a paired bootstrap under
    `metric` (started here when needed); None when it has one or is not a live run."""
    m = view.measurement
    if m is None or held(view.paired_bootstrap(), metric, stand_in=True):  # SPEC 15
        return None
    name = _name(view, metric)
    last = jobs.task_job(name)
    if last is None or (last.finished and last.state != "done"):

        def work(progress: Any, should_stop: Any) -> dict[str, Any]:
            pb = m.answer_bootstrap(metric=metric, B=PAGE_B, seed=m.spec.seed, progress=progress)
            return {"B": pb.B, "poolings": sorted({p for p, _ in pb.profiles})}

        jobs.start_task(name, work, model=m.spec.model)
    elif last.finished:  # done: the run holds it now (the same Measurement)
        m.answer_bootstrap(metric=metric, B=PAGE_B, seed=m.spec.seed)  # memoised: the view's now
        return None
    return name


@st.fragment(run_every=1.0)
def paired_progress(name: str) -> None:
    """The paired bootstrap's bar; the page reruns when it lands, so the answer is paired."""
    status = jobs.task_job(name)
    if status is None:
        return
    if status.state == "failed":
        st.error(md_escape(f"The paired bootstrap failed: {status.error}"))
        return
    if status.finished:
        if st.session_state.get("_paired_shown") != status.job_id:
            st.session_state["_paired_shown"] = status.job_id
            st.rerun(scope="app")
        return
    st.progress(
        status.stage_fraction,
        text=f"Pairing the interval (one bootstrap of every pooling, B = {PAGE_B}): "
        f"{status.describe()}",
    )
