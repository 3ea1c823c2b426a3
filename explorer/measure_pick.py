"""The sidebar's metric beyond the CKA family (SPEC 17): which pages draw it, and what a page
shows while the run holds no matrix of the chosen measure.

A page that draws a SPEC 17 measure (Overview, Similarity, Lag decay, Gap to F_L) reads the
run's matrix of it and computes D_eff, the lag profile and the gap from it as from CKA. A run
without that matrix never computes it on view: `measure_ready` says what it would take and
offers to compute it in the background. Every other page is defined for the CKA family only
(the trust rule, the BOS answer, the baselines and the labs): it shows linear CKA and says so
(`cka_only`). No numbers are computed here.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from deffcore.core.constants import METRICS, TABLE_MEASURES
from deffcore.core.errors import DeffError
from deffcore.core.safe_text import md_escape
from deffcore.statistics.measure_table import MEASURE_LABELS
from deffcore.work import jobs
from explorer.background import follow_task, show_failure

#: What the sidebar's metric picker offers: the CKA family, then the SPEC 17 measures.
PICKER_METRICS: tuple[str, ...] = TABLE_MEASURES


def metric_label(name: str) -> str:
    """How a metric reads in the picker: its group, then its name."""
    group = "CKA family" if name in METRICS else "SPEC 17, computed on request"
    return f"{label(name)} ({group})"


def cka_family(metric: str) -> bool:
    """Whether `metric` is one of the run's own metrics (linear CKA, unbiased CKA, cosine)."""
    return metric in METRICS


def label(metric: str) -> str:
    return MEASURE_LABELS.get(metric, metric)


def cka_only(settings: Any, *, say: bool = True) -> None:
    """On a page defined for the CKA family only: when the sidebar holds a SPEC 17 measure,
    `settings.metric` becomes "cka", said when `say` (a page that shows no metric says
    nothing)."""
    if cka_family(settings.metric):
        return
    if say:
        st.info(
            "This page is defined for the CKA family only (linear CKA, unbiased CKA, "
            f"cosine): it shows linear CKA, not the sidebar's {label(settings.metric)}, "
            "which the Overview, Similarity, Lag decay and Gap to F_L pages draw."
        )
    settings.metric = "cka"


def cached_summary(meta: dict[str, Any], pooling: str, measure: str) -> Any | None:
    """`DepthSummary` of a cached run's kept `measure` matrix (its measures.json, read without
    its pooled states), or None when it keeps none."""
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.measures.depth import depth_summary
    from deffcore.runs.measure import stored_measure_matrices

    try:
        spec = RunSpec(**meta["spec"])
        kept = stored_measure_matrices(spec, int(meta["layers"]), int(meta["n"]))
    except (KeyError, TypeError, ValueError):
        return None
    S = kept.get(pooling, {}).get(measure)
    return None if S is None else depth_summary(S)


def task_name(m: Any, pooling: str, measure: str) -> str:
    return f"measure-matrix:{m.spec.key()}:{pooling}:{measure}"


def measure_ready(view: Any, settings: Any) -> bool:
    """True when the page can draw `settings.metric` for this run; otherwise the sentence of
    what it would take, the button that computes it in the background (or its progress), and
    False: the caller draws nothing more of the run (the page never waits for it)."""
    pooling, metric = settings.pooling, settings.metric
    if cka_family(metric):
        return True
    try:
        view.similarity(pooling, metric)
        return True
    except (KeyError, DeffError):
        pass
    m = view.measurement
    if m is None:  # a snapshot: its states are not in it
        st.info(
            f"This run's snapshot carries no {label(metric)} matrix for pooling {pooling}, and "
            "computing one needs the run's pooled states: measure the run (the Runs page) to "
            "compute it here, or choose a metric of the CKA family."
        )
        return False
    from deffcore.runs.measure import measure_missing_sentence

    st.info(md_escape(measure_missing_sentence(m, pooling, metric)))
    name = task_name(m, pooling, metric)
    status = jobs.task_job(name)
    show_failure(status, f"Computing the {label(metric)} matrix")
    running = status is not None and not status.finished
    if not running and st.button(
        f"Compute {label(metric)} in the background", key=f"measure_go_{pooling}_{metric}"
    ):

        def work(progress: Any, should_stop: Any) -> dict[str, Any]:
            m.measure_similarity(pooling, metric, progress=progress)
            return {"pooling": pooling, "measure": metric}

        jobs.start_task(name, work, model=m.spec.model)
        running = True
    if running:
        follow_task(name, "In the background")  # the page reruns once it lands and draws it
    return False
