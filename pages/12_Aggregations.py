"""Aggregations and metrics (paper Figure S4, Table S11) of the current run."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from deffcore.glossary import human_columns, human_label
from deffcore.labs import figures as lab_figures
from deffcore.labs.aggregations import AGGREGATION_LABELS, aggregation_table
from deffcore.paper import paper_table
from deffcore.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.snapshot import RunView
from explorer.cards import show_run_figure
from explorer.guard import guarded
from explorer.page import require_view


def aggregations_section(view: RunView, pooling: str) -> None:
    with guarded("The aggregations"):
        table = aggregation_table(view, pooling=pooling)
        show_run_figure(
            lab_figures.aggregations_plot(table), view.spec, "aggregations",
            pooling=pooling, metric="every metric",
        )  # fmt: skip
        frame = lab_figures.aggregations_frame(table)
        frame.index = pd.Index([AGGREGATION_LABELS[a] for a in frame.index], name="aggregation")
        st.dataframe(human_columns(frame).style.format("{:.4f}"), key="ag_table")
        st.caption(
            "Fitted correlation length ξ (layers) of the exponential lag fit: "
            + ", ".join(f"{m} {xi:.2f}" for m, xi in table["xi"].items())
        )


def paper_section() -> None:
    paper = paper_table()
    if paper is None:
        return
    st.subheader("Paper, Table S11: D_eff/L under each metric (display only)")
    s11 = paper[paper["source"] == "Table S11"].pivot(
        index="model", columns="quantity", values="value"
    )
    s11.columns = [f"{human_label(c.removeprefix('deff_over_L_'))} (paper)" for c in s11.columns]
    st.dataframe(human_columns(s11), key="ag_paper")


def main() -> None:
    ctx = require_view("Aggregations and metrics")
    if ctx is None:
        st.stop()
    view, settings = ctx
    st.markdown(
        "D_eff is one way to turn the layer-similarity matrix into an effective number of "
        "layers. Here the same matrix is aggregated four other ways, under each similarity "
        "metric: "
        + "; ".join(f"**{v}**" for v in AGGREGATION_LABELS.values())
        + ". Every value is divided by L: 1 means all layers differ, 1/L means all are the same."
    )
    st.caption(
        f"Run: {md_escape(view.label)} · pooling {settings.pooling} (change it in the sidebar)"
    )
    aggregations_section(view, settings.pooling)
    paper_section()


main()
