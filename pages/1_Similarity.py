"""Layer x layer similarity of the current run; pick a layer to see its row as a curve."""

from __future__ import annotations

import streamlit as st

import ui_common as ui
from deffcore import figures
from deffcore.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.snapshot import download_stem, run_identity

ctx = ui.require_view("Similarity")
if ctx is None:
    st.stop()
view, settings = ctx
st.caption(f"{md_escape(view.label)} · {settings.metric} · pooling {settings.pooling}")

pooling, metric = settings.pooling, settings.metric
S = view.similarity(pooling, metric)
L = S.shape[0]
# downloads say which run and view they came from (file name and leading CSV columns)
identity = run_identity(view.spec, pooling=pooling, metric=metric)
st.markdown(
    "Each cell is the similarity S(i, j) of the residual stream after block i and after "
    "block j (1 on the diagonal). **Click a cell** to show its row i beside the map, or pick "
    "the **box select** tool (top right of the map) and drag over several rows. Double-click "
    "the map to clear the selection; the slider then picks the row."
)
left, right = st.columns([11, 9])
with left:
    event = ui.show_figure(
        figures.tag_run(
            figures.similarity_heatmap(S, metric=metric, pooling=pooling, selectable=True),
            identity,
        ),
        key=download_stem(view.spec, "heatmap", pooling=pooling, metric=metric),
        on_select="rerun",
        selection_mode=("points", "box"),
    )
points = (event or {}).get("selection", {}).get("points", []) if event else []
picked = sorted({int(p["y"]) for p in points if p.get("y") is not None})
with right:
    if picked:
        shown = ", ".join(map(str, picked))
        st.caption(f"Selected on the heatmap: layer(s) {shown}. Double-click it to clear.")
    else:
        picked = [
            st.slider(
                "Layer i (or click a heatmap cell)",
                1,
                L,
                1,
                key=f"similarity_layer_L{L}",
                help="Clicking a cell or dragging a box on the heatmap overrides this slider.",
            )
        ]
    ui.show_figure(
        figures.tag_run(figures.similarity_rows(S, picked, metric=metric), identity),
        key=download_stem(view.spec, "rows", pooling=pooling, metric=metric),
    )
