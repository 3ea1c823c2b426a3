"""Aggregations and metrics (paper Figure S4, Table S11), trajectory geometry (Figure S6) and
Gromov–Wasserstein between layers (Table S22) of the current run."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.labs import figures, lens_figures, lens_tables
from deffcore.labs.aggregations import AGGREGATION_LABELS, aggregation_table
from deffcore.labs.gw_lens import GwOptions, gw_lens, stored_gw
from deffcore.measures.gw import INITS
from deffcore.views.glossary import human_columns, human_label
from deffcore.views.paper import paper_table
from deffcore.views.run import Run
from explorer.cards import show_run_figure
from explorer.guard import guarded
from explorer.page import require_view
from explorer.progress import progress_callback
from explorer.tables import show_table

#: The app's default GW subsample: 45 s (SmolLM2, L = 30) to 100 s (Gemma-3, L = 18) on 2 CPU
#: cores (BENCHMARKS.md); the library's default (SPEC 13.1) is 512.
APP_N_GW = 128
#: The starting couplings as the page names them (`deffcore.measures.gw.INITS`).
START_LABELS = {
    "both": "both (product and identity, smaller kept)",
    "product": "product (POT's default, the paper's)",
    "identity": "identity (passage a with passage a)",
}


def aggregations_section(view: Run, pooling: str) -> dict[str, Any] | None:
    table = None
    with guarded("The aggregations"):
        table = aggregation_table(view, pooling=pooling)
        show_run_figure(
            figures.aggregations_plot(table), view.spec, "aggregations",
            pooling=pooling, metric="every metric",
        )  # fmt: skip
        frame = figures.aggregations_frame(table)
        frame.index = pd.Index([AGGREGATION_LABELS[a] for a in frame.index], name="aggregation")
        show_table(human_columns(frame).style.format("{:.4f}"), key="ag_table")
        st.caption(
            "Fitted correlation length ξ (layers) of the exponential lag fit: "
            + ", ".join(f"{m} {xi:.2f}" for m, xi in table["xi"].items())
        )
    return table


def geometry_section(view: Run, table: dict[str, Any], pooling: str) -> None:
    """Geodesic efficiency and turning angles (SPEC 13) beside D_eff/L, from the same table."""
    st.subheader("Trajectory geometry: how straight is the path through the layers?")
    st.markdown(
        "Each layer is a point; the angle between two layers is arccos of their similarity. "
        "The **geodesic efficiency** is the angle from the first to the last layer divided by "
        "the sum of the angles between neighbouring layers (1: a straight path); accumulated "
        "orthogonal updates give E_L and turn by 90° at every layer. The Euclidean row is the "
        "same ratio for the pooled states themselves (the paper's Figure S6 does not define "
        "its efficiency; this one is documented in SPEC 13)."
    )
    show_table(lens_tables.geometry_frame(table).style.format("{:.4f}", na_rep="—"),
                 key="ag_geometry")  # fmt: skip
    show_run_figure(
        lens_figures.turning_angles_plot(table), view.spec, "turning_angles",
        pooling=pooling, metric="every metric",
    )  # fmt: skip
    if table["trajectory"]["euclidean_efficiency"] is None:
        st.caption(
            "A snapshot holds the similarity matrices, not the pooled states: the Euclidean "
            "path needs a measured run (press **Run** on the Runs page)."
        )


def gw_section(view: Run, pooling: str) -> None:
    """GW between layers, read from the store or computed on request (it takes minutes)."""
    st.subheader("Gromov–Wasserstein between layers (Table S22)")
    st.markdown(
        "GW compares two layers' point clouds through their internal distances only: a "
        "seeded subsample of n_gw passages (the same rows in every layer), Euclidean "
        "distances divided by their mean, uniform weights, exact GW² by POT's solver, which "
        "finds a local optimum from its starting coupling (SPEC 13.1). Then Spearman ρ over "
        "layer pairs: GW against the similarity, and each against the layer distance |i−j|."
    )
    m = view.measurement
    c1, c2, c3 = st.columns(3)
    n_gw = c1.number_input("Subsample (n_gw passages)", 8, 2048, APP_N_GW, key="ag_gw_n",
                           help=f"The library's default is 512; {APP_N_GW} takes 45–100 s for "
                           "the packaged models on 2 CPU cores.")  # fmt: skip
    seed = c2.number_input("Subsample seed", 0, 2**31 - 1, 0, key="ag_gw_seed")
    init = c3.selectbox("Starting coupling", INITS, key="ag_gw_init",
                        format_func=lambda v: START_LABELS[v],
                        help="Both (the default): product and identity, the smaller GW² "
                        "kept, since GW is a minimum over couplings (the identity start aligns "
                        "passage a with passage a, as CKA does); the product start's own "
                        "figures are shown beside it. Product: POT's default and the paper's "
                        "(compared with Table S22).")  # fmt: skip
    if m is None:
        st.button("Compute Gromov–Wasserstein (minutes)", disabled=True, key="ag_gw_run")
        st.info(
            "This is a snapshot: it holds the similarity matrices, not the pooled states GW "
            "needs. Measure the run (press **Run** on the Runs page) to compute GW here."
        )
        return
    options = GwOptions(pooling=pooling, n_gw=int(n_gw), seed=int(seed), init=init)
    result = stored_gw(m, options)
    if st.button("Compute Gromov–Wasserstein (minutes)", disabled=result is not None,
                 key="ag_gw_run", type="primary"):  # fmt: skip
        result = compute_gw(m, options)
    if result is None:
        pairs = m.layers * (m.layers - 1) // 2
        st.caption(f"{pairs} layer pairs of {min(int(n_gw), m.n)} passages each; stored once "
                   "computed, so it is shown at once on the next visit.")  # fmt: skip
        return
    gw_result_section(view, result)


def compute_gw(m: Any, options: GwOptions) -> dict[str, Any] | None:
    result = None
    with st.status("Gromov–Wasserstein between every pair of layers", expanded=True) as status:
        bar = st.progress(0.0, text="starting")
        with guarded("Gromov–Wasserstein"):
            result = gw_lens(m, options, progress=progress_callback(bar))
        state = "complete" if result is not None else "error"
        done = f"done in {result['seconds']:.0f} s" if result is not None else "failed"
        status.update(label=f"Gromov–Wasserstein: {done}", state=state, expanded=False)
    return result


def gw_result_section(view: Run, result: dict[str, Any]) -> None:
    cols = st.columns(4)
    for col, key in zip(cols, lens_tables.GW_STATS, strict=False):
        col.metric(str(human_label(key)), f"{result[key]:+.2f}")
    cols[3].metric("Compute time", f"{result['seconds']:.0f} s")
    if result["cached"]:
        st.caption("Read from the lab store (computed before with these settings).")
    show_run_figure(
        lens_figures.gw_heatmaps(result), view.spec, "gw", pooling=result["pooling"],
        metric=result["metric"],
        identity={"n_gw": result["n_gw"], "gw_seed": result["gw_seed"], "start": result["init"]},
    )  # fmt: skip
    show_table(lens_tables.gw_beside_paper(result), hide_index=True, key="ag_gw_paper")
    note = lens_tables.gw_paper_note(result)
    if note is not None:
        st.info(note)


def paper_section() -> None:
    paper = paper_table()
    if paper is None:
        return
    st.subheader("Paper, Table S11: D_eff/L under each metric (display only)")
    s11 = paper[paper["source"] == "Table S11"].pivot(
        index="model", columns="quantity", values="value"
    )
    s11.columns = [f"{human_label(c.removeprefix('deff_over_L_'))} (paper)" for c in s11.columns]
    show_table(human_columns(s11), key="ag_paper")


def main() -> None:
    ctx = require_view("Aggregations and metrics", uses_metric=False)
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
    table = aggregations_section(view, settings.pooling)
    paper_section()
    if table is not None:
        geometry_section(view, table, settings.pooling)
    gw_section(view, settings.pooling)


main()
