"""Layer x layer similarity of the current run; pick a layer to see its row as a curve."""

from __future__ import annotations

import numpy as np
import streamlit as st

from deffcore import figures
from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.statistics.measure_table import (
    DEFAULT_B,
    DEFAULT_PERMUTATIONS,
    MEASURE_LABELS,
    TABLE_MEASURES,
)
from deffcore.views.run import Run
from explorer.cards import show_run_figure
from explorer.guard import guarded
from explorer.page import OVERVIEW_TABS, require_view
from explorer.settings import Settings


def heatmap(view: Run, S: np.ndarray, settings: Settings) -> list[int]:
    """The clickable map -> the layers picked on it (a click or a box), sorted."""
    pooling, metric = settings.pooling, settings.metric
    event = show_run_figure(
        figures.similarity_heatmap(S, metric=metric, pooling=pooling, selectable=True),
        view.spec,
        "heatmap",
        pooling=pooling,
        metric=metric,
        on_select="rerun",
        selection_mode=("points", "box"),
    )
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    return sorted({int(p["y"]) for p in points if p.get("y") is not None})


#: The map and its rows side by side share one height, so their downloads line up.
CHART_HEIGHT = 520


def rows(view: Run, S: np.ndarray, settings: Settings, picked: list[int]) -> None:
    """The picked rows S(i, :) as curves; without a pick, the slider's row (the slider sits
    under the chart, so the chart lines up with the map beside it)."""
    L = S.shape[0]
    slider_key = f"similarity_layer_L{L}"
    chosen = picked or [int(st.session_state.get(slider_key, 1))]
    pooling, metric = settings.pooling, settings.metric
    fig = figures.similarity_rows(S, chosen, metric=metric)
    fig.update_layout(height=CHART_HEIGHT)
    show_run_figure(fig, view.spec, "rows", pooling=pooling, metric=metric)
    if picked:
        shown = ", ".join(map(str, picked))
        st.caption(f"Selected on the heatmap: layer(s) {shown}. Double-click it to clear.")
    else:
        st.slider(
            "Layer i (or click a heatmap cell)",
            1,
            L,
            1,
            key=slider_key,
            help="Clicking a cell or dragging a box on the heatmap overrides this slider.",
        )


def measures_section(view: Run, settings: Settings) -> None:
    """The table across similarity measures (SPEC 17.4): shown when the run holds it, computed
    through deffcore only when asked (minutes at N in the thousands), never on first view."""
    pooling = settings.pooling
    st.subheader("Across similarity measures")
    table = view.measure_table(pooling)
    if table is not None:
        st.dataframe(
            [dict(zip(table.head(), r, strict=True)) for r in table.display_rows()],
            hide_index=True,
            key="sim_measures_table",
        )
        st.caption(md_escape(table.caption()))
    m = view.measurement
    if m is None:
        if table is None:
            st.info(
                "This run's snapshot carries no table across measures (it needs the run's "
                "pooled states). Measure the run (the run panel on the Runs page) to compute it "
                "here, or make the snapshot with `deffcore measure ... --measures all "
                "--snapshot PATH`."
            )
        return
    st.caption(
        "D_eff/L of the same pooled states under other similarity measures (SPEC 17), with a "
        "passage-bootstrap interval (one set of resamples for every measure), the regime "
        "against F_L and D_eff/L of the matrix calibrated against a permutation null. "
        "Computed on request: each SPEC 17 measure costs B + 1 + 19 all-pairs matrices."
    )
    picked = st.multiselect(
        "Measures",
        TABLE_MEASURES,
        default=list(TABLE_MEASURES),
        format_func=lambda name: MEASURE_LABELS.get(name, name),
        key="sim_measures_pick",
    )
    B = int(
        st.number_input(
            "Bootstrap replicates B", 2, 1000, DEFAULT_B, key="sim_measures_B",
            help="the same resamples for every measure (seed 0, as the run's own bootstrap)",
        )
    )  # fmt: skip
    if st.button("Compute the table", key="sim_measures_go", disabled=not picked):
        bar = st.progress(0.0, text="starting")

        def progress(measure: str, done: int, total: int) -> None:
            name = MEASURE_LABELS.get(measure, measure)
            bar.progress(done / total, text=f"{name} ({done + 1}/{total})")

        done = False
        with st.spinner("Computing the table across measures"), guarded("The table"):
            m.measure_table(
                pooling, tuple(picked), B=B, permutations=DEFAULT_PERMUTATIONS, progress=progress
            )
            done = True
        if done:
            st.rerun()


def main() -> None:
    ctx = require_view("Similarity", tabs=OVERVIEW_TABS, measures=True)
    if ctx is None:
        st.stop()
    view, settings = ctx
    st.caption(f"{md_escape(view.label)} · {settings.metric} · pooling {settings.pooling}")
    S = view.similarity(settings.pooling, settings.metric)
    # downloads say which run and view they came from (file name and leading CSV columns)
    st.markdown(
        "Each cell is the similarity S(i, j) of the residual stream after block i and after "
        "block j (1 on the diagonal). **Click a cell** to show its row i beside the map, or "
        "pick the **box select** tool (top right of the map) and drag over several rows. "
        "Double-click the map to clear the selection; the slider then picks the row."
    )
    left, right = st.columns([11, 9])
    with left:
        picked = heatmap(view, S, settings)
    with right:
        rows(view, S, settings, picked)
    measures_section(view, settings)


main()
