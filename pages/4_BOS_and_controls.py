"""Every pooling control side by side (the paper's Figure 2) and the position-0 norm ratio."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import ui_common as ui
from deffcore import figures
from deffcore.constants import POOLINGS

ctx = ui.require_view("BOS & controls")
if ctx is None:
    st.stop()
view, settings = ctx
k_max = settings.K or view.layers - 1
st.caption(f"{view.label} · {settings.metric} · K = {k_max}")
if k_max != view.layers - 1:
    st.info(
        f"This run uses the sidebar's K = {k_max}; the paper's controls are at K = L-1, so set K "
        f"to {view.layers - 1} before comparing the two."
    )

with st.spinner("Similarity of every pooling control (computed once per run)…"):
    headlines = {}
    for pooling in POOLINGS:
        with ui.guarded(f"Pooling {pooling}"):
            headlines[pooling] = view.headline(pooling, settings.metric, settings.K)
rows = [
    {
        "label": "this run",
        "pooling": pooling,
        "gap_pct": h.gap_pct,
        "deff_over_L": h.deff_over_L,
        "rho1": h.rho1,
        "source": "this run",
    }
    for pooling, h in headlines.items()
]
table = pd.DataFrame(rows)
show_paper = st.checkbox("Show the paper's published controls (labelled 'paper')", value=True)
paper = ui.paper_table()
if show_paper and paper is not None:
    pub = paper[
        (paper["quantity"] == "gap_pct")
        & paper["source"].isin(["Table S4", "Table S5", "Table S6"])
    ]
    pub = pub[pub["note"].isna() | (pub["note"] == "intervention: none")]
    pub = pub.drop_duplicates(["model", "setting"], keep="first")
    table = pd.concat(
        [
            table,
            pd.DataFrame(
                {
                    "label": pub["model"] + " (paper)",
                    "pooling": pub["setting"],
                    "gap_pct": pub["value"].astype(float),
                    "source": "paper: " + pub["source"],
                }
            ),
        ],
        ignore_index=True,
    )
elif show_paper:
    st.info("The paper's reference values (paper_reference.csv) were not found.")
ui.show_figure(figures.controls_dotplot(table), key="controls_dotplot")

mine = table[table["source"] == "this run"].set_index("pooling")
if not mine.empty:
    gaps = mine["gap_pct"]
    default = gaps.get("default")
    others = gaps.drop("default", errors="ignore")
    spread = float(others.sub(default).abs().max()) if default is not None else float("nan")
    regimes = {"sub-reference" if g > 0 else "above reference" for g in gaps}
    if len(regimes) == 1:
        st.success(
            f"BOS sensitivity: every control stays {regimes.pop()}; the largest move from the "
            f"default gap ({default:+.1f}%) is {spread:.1f} points."
        )
    else:
        flipped = ", ".join(p for p, g in gaps.items() if (g > 0) != (default > 0))
        st.warning(
            f"BOS sensitivity: the regime depends on the control ({flipped} cross F_L); the "
            f"default gap is {default:+.1f}% and the largest move is {spread:.1f} points."
        )
    st.dataframe(
        mine[["gap_pct", "deff_over_L", "rho1"]]
        .rename(columns={"gap_pct": "gap to F_L (%)", "deff_over_L": "D_eff/L", "rho1": "ρ̂(1)"})
        .style.format({"gap to F_L (%)": "{:+.2f}", "D_eff/L": "{:.4f}", "ρ̂(1)": "{:.4f}"})
    )

ratios = view.pos0_norm_ratio()
ui.show_figure(figures.pos0_ratio(ratios), key="pos0_ratio")
st.caption(
    "How much larger the state at position 0 (the BOS / first token) is than the mean state of "
    "the other positions, per layer; dashed: 1 (no outlier). A large ratio means default "
    "pooling is dominated by position 0, which first_non_bos and token_normed remove."
)
