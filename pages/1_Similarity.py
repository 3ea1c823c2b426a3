"""Layer x layer similarity of the current run; pick a layer to see its row as a curve."""

from __future__ import annotations

import streamlit as st

import ui_common as ui
from deffcore import figures

ctx = ui.require_view("Similarity")
if ctx is None:
    st.stop()
view, settings = ctx
st.caption(f"{view.label} · {settings.metric} · pooling {settings.pooling}")

S = view.similarity(settings.pooling, settings.metric)
L = S.shape[0]
st.markdown("Click a cell (or drag a box) to pick rows; the slider is the fallback.")
event = ui.show_figure(
    figures.similarity_heatmap(S, metric=settings.metric, pooling=settings.pooling),
    key="similarity_heatmap",
    on_select="rerun",
    selection_mode=("points", "box"),
)
points = (event or {}).get("selection", {}).get("points", []) if event else []
picked = sorted({int(p["y"]) for p in points if p.get("y") is not None})
if not picked:
    picked = [st.slider("Layer i", 1, L, 1, key=f"similarity_layer_L{L}")]
else:
    st.caption(f"Selected layer(s): {', '.join(map(str, picked))}")
ui.show_figure(figures.similarity_rows(S, picked, metric=settings.metric), key="similarity_rows")
