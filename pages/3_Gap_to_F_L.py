"""This run beside every cached run and the paper's published models: the paper's Figure 1."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import ui_common as ui
from deffcore import figures

ctx = ui.require_view("Gap to F_L")
if ctx is None:
    st.stop()
view, settings = ctx
st.latex(
    r"\mathrm{gap} = 100\,\Big(1 - \frac{D_\mathrm{eff}}{F_L}\Big), \qquad F_L = \frac{2L}{L+1}"
)
st.caption(
    f"Measured runs use pooling {settings.pooling} and metric {settings.metric} at K = L-1; "
    "the grey hatched bars labelled (paper) are the paper's published values (default pooling, "
    "linear CKA), never re-measured here. Positive gaps are sub-reference (more redundancy "
    "than orthogonal updates); red: sub-reference, green: above."
)

h = view.headline(settings.pooling, settings.metric)
rows = [
    {
        "label": f"this run: {view.label}",
        "family": ui.model_family(view.spec["model"]),
        "gap_pct": h.gap_pct,
        "deff_over_L": h.deff_over_L,
        "layers": view.layers,
        "source": "this run",
    }
]
for meta in ui.cached_runs():
    if meta["key"] == getattr(view, "key", None):
        continue
    with ui.guarded(f"Cached run {meta['key']}"):
        g = ui.cached_result(
            meta["key"], meta.get("created", ""), settings.pooling, settings.metric
        )
        rows.append(
            {
                "label": ui.run_label(meta["spec"]),
                "family": ui.model_family(meta["spec"]["model"]),
                "gap_pct": g["gap_pct"],
                "deff_over_L": g["deff_over_L"],
                "layers": g["layers"],
                "source": "cached",
            }
        )

paper = ui.paper_table()
if paper is None:
    st.info(
        "The paper's published values were not found (looked for ../shared/paper_reference.csv "
        "beside the repository; set DEFF_PAPER_REFERENCE to its path)."
    )
else:
    pub = ui.paper_default_gaps(paper)
    rows += [
        {
            "label": f"{r.model} (paper)",
            "family": ui.model_family(r.model),
            "gap_pct": float(r.value),
            "deff_over_L": float("nan"),
            "layers": r.layers,
            "source": "paper",
        }
        for r in pub.itertuples()
    ]
table = pd.DataFrame(rows)
ui.show_figure(figures.gap_bars(table), key="gap_bars")
st.dataframe(
    table.sort_values(["family", "gap_pct"]),
    hide_index=True,
    column_config={
        "gap_pct": st.column_config.NumberColumn("gap to F_L (%)", format="%.2f"),
        "deff_over_L": st.column_config.NumberColumn("D_eff/L", format="%.4f"),
        "layers": st.column_config.NumberColumn("L", format="%d"),
    },
)
