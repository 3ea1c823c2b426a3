"""Answers in minutes in the app: the live estimates of a run in progress and "Stop when
settled" (SPEC 14).

The run panel (`explorer.run_panel`) calls `live_panel(status)` under its progress bar: the
latest estimate (`deffcore.work.jobs.JobStatus.estimates`, one per mark of `prefix.schedule`) as
cards with the trust rule's level and the estimator shown, the BOS answer with its paired
interval (`anytime.Estimate.position0`), the pooling controls' regimes and whether they are
settled, and the gap-vs-N curve with its band (`deffcore.figures.gap_vs_n`). "Stop when
settled" asks the job to stop once the BOS answer is definite (`jobs.stop_when_settled`); what
it extracted becomes a normal run of that N. User text (model names) is shown as plain text,
never Markdown.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import streamlit as st

from deffcore import figures
from deffcore.core.safe_text import md_escape
from deffcore.extraction.cache import FIRST_ESTIMATE, prefix_refusal, schedule
from deffcore.statistics.bos_answer import QUESTION
from deffcore.statistics.stopping import CONFIRM, MIN_STOP_N
from deffcore.work import job_state, jobs
from explorer.cards import show_run_figure

_LEVEL_ICON = {"solid": "●", "indicative": "◐", "noise": "○"}


def next_look(status: job_state.JobStatus, est: dict[str, Any]) -> str:
    """When the next estimate lands, in words: the estimates come at the marks of
    `extraction.cache.schedule` (64, 128, 256, ... passages), so the cards stay at the last
    mark while the bar moves on, and the verdict can change (or settle) only at a mark."""
    from deffcore.extraction.cache import batch_rows, schedule
    from deffcore.inputs.model import resolve_device_dtype
    from deffcore.runs.planner import human_time

    spec = status.spec
    device = resolve_device_dtype(None, spec.dtype, check=False)[0]
    marks = [k for k in schedule(spec.n, batch_rows(spec.max_tokens, device)) if k > est["n"]]
    if not marks:
        return f"These are the numbers at N = {est['n']:,}, the run's last estimate."
    rate = (status.total - status.done) / status.eta_s if status.eta_s else None
    when = ""
    if rate and rate > 0:
        when = f" in about {human_time(max(marks[0] - status.done, 0) / rate)}"
    last = f"; the last, at N = {spec.n:,}" if marks[0] != spec.n else ""
    settle = ": the verdict can settle only at an estimate" if status.until else ""
    return (
        f"Estimated at N = {est['n']:,} ({status.done:,} passages extracted so far). The next "
        f"estimate comes at N = {marks[0]:,}{when}{last}{settle}."
    )


def _head_cards(est: dict[str, Any]) -> None:
    head = est["poolings"]["default"]
    band = "" if head["low"] is None else f"{head['band']}: [{head['low']:.4f}, {head['high']:.4f}]"
    shown = "unbiased CKA" if head["metric"] == "unbiased_cka" else head["metric"]
    cols = st.columns(4)
    cols[0].metric(
        "N of this estimate",
        f"{est['n']:,}",
        help=f"Estimates come at N = {FIRST_ESTIMATE}, {2 * FIRST_ESTIMATE}, "
        f"{4 * FIRST_ESTIMATE}, ... (whole batches); the bar counts every passage extracted.",
    )
    cols[1].metric("D_eff / L", f"{head['deff_over_L']:.4f}", help=band or None)
    cols[2].metric("Gap to F_L", f"{head['gap_pct']:+.1f}%", help=band or None)
    cols[3].metric("Trust", f"{_LEVEL_ICON[head['level']]} {head['level']}")
    note = f"Estimated with {shown}"
    if head["metric"] != est["run_metric"]:
        note += (
            f" (linear CKA's finite-sample bias is material at N = {est['n']:,}: it reads "
            f"{head['run_metric_deff_over_L']:.4f})"
        )
    st.caption(note + ".")


def _answer_line(est: dict[str, Any]) -> None:
    """The BOS answer at this mark (default vs no_pos0, paired interval), as plain text."""
    answer = est.get("position0")
    if not answer:
        return
    definite = answer["verdict"] in ("not_artefact", "artefact", "masks")
    shown = "" if answer.get("metric") == est["run_metric"] else " (unbiased CKA)"
    text = f"{QUESTION} At N = {est['n']:,}{shown}: {answer['sentence']}"
    (st.success if definite else st.info)(md_escape(text))


def _verdict_line(est: dict[str, Any]) -> None:
    if est["verdict_settled"]:
        st.success("Pooling controls' regimes settled: " + est["verdict"])
    else:
        open_ = ", ".join(est["unsettled"])
        st.info(f"Pooling controls so far (regimes can still change: {open_}): " + est["verdict"])


def settle_button(status: job_state.JobStatus) -> None:
    """Stop when the BOS answer is definite (kept as a run of that N); nothing where the run
    cannot stop early (documents, a streamed dataset): the box speaks only of what the user
    can do or asked for."""
    if prefix_refusal(status.spec.passages, status.spec.dataset_spec) is not None:
        return
    st.button(
        "Stop when settled" if not status.until else "Stopping when settled",
        key="job_settle",
        on_click=jobs.stop_when_settled,
        args=(status.job_id, "verdict"),
        disabled=bool(status.until) or status.cancel_requested,
        help="Ends extraction as soon as the BOS answer (default vs no_pos0, from one paired "
        f"bootstrap of the passages so far) is definite at {CONFIRM} estimates in a row with "
        f"at least {MIN_STOP_N} passages (at once if it already is); the passages extracted "
        "so far become a normal cached run of that N, which a larger run later resumes from.",
    )


def live_panel(status: job_state.JobStatus) -> None:
    """The latest estimates of a running run, under its progress bar."""
    if status.kind != "run" or status.spec is None:
        return
    if not status.estimates:
        first = schedule(status.spec.n, 1)[0]
        if first >= status.spec.n:  # no look below N: the run itself is the first one
            st.caption(
                f"A run of {status.spec.n:,} passages is its own first estimate: its numbers "
                f"show when it lands (a first look needs {FIRST_ESTIMATE} passages)."
            )
        else:
            st.caption(
                f"The first estimate appears once {first:,} passages (whole batches) are in."
            )
        settle_button(status)
        return
    est = status.estimates[-1]
    _head_cards(est)
    _answer_line(est)
    _verdict_line(est)
    st.caption(md_escape(next_look(status, est)))
    settle_button(status)
    if len(status.estimates) > 1:
        fig = figures.gap_vs_n(status.estimates, poolings=list(est["poolings"]))
        # the one figure helper: title clear of the toolbar, downloads named by the run
        show_run_figure(
            fig, asdict(status.spec), "gap_vs_n_live", pooling="every control",
            metric=est["run_metric"],
        )  # fmt: skip


def stopped_note(status: job_state.JobStatus) -> str:
    """What a landed job's notice adds when it stopped early."""
    if status.stopped_at is None or status.spec is None:
        return ""
    return (
        f" Stopped when settled at N = {status.stopped_at:,} of {status.spec.n:,}; kept as a "
        "run of that N."
    )
