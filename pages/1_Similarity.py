"""Layer x layer similarity of the current run; pick a layer to see its row as a curve."""

from __future__ import annotations

import numpy as np
import streamlit as st

from deffcore import figures
from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.views.run_view import RunView
from explorer.cards import show_run_figure
from explorer.page import OVERVIEW_TABS, require_view
from explorer.settings import Settings


def heatmap(view: RunView, S: np.ndarray, settings: Settings) -> list[int]:
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


def rows(view: RunView, S: np.ndarray, settings: Settings, picked: list[int]) -> None:
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


def main() -> None:
    ctx = require_view("Similarity", tabs=OVERVIEW_TABS)
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


main()
