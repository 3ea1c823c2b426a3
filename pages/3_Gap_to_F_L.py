"""This run beside every cached run and the paper's published models: the paper's Figure 1."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import ui_common as ui
from deffcore import figures
from deffcore.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.snapshot import (
    SnapshotView,
    common_label,
    download_stem,
    load_gallery,
    run_identity,
    run_labels,
)


@st.cache_resource(show_spinner=False)
def gallery() -> list[SnapshotView]:
    """The precomputed runs shipped with the app (the default first)."""
    return load_gallery()


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
    "linear CKA), never re-measured here. A positive gap means D_eff < F_L: more redundant "
    "than accumulated orthogonal updates. (precomputed): runs shipped with the app."
)

h = view.headline(settings.pooling, settings.metric)
runs: list[dict] = [
    {
        "spec": view.spec,
        "source": "this run",
        "family": ui.model_family(view.spec["model"]),
        "gap_pct": h.gap_pct,
        "deff_over_L": h.deff_over_L,
        "layers": view.layers,
    }
]
seen = {(getattr(view, "key", None), view.source == "precomputed")}
for meta in ui.cached_runs():
    if meta.get("status", "complete") != "complete" or (meta["key"], False) in seen:
        continue
    seen.add((meta["key"], False))
    with ui.guarded(f"Cached run {meta['key']}"):
        g = ui.cached_result(
            meta["key"], meta.get("created", ""), settings.pooling, settings.metric
        )
        runs.append(
            {
                "spec": meta["spec"],
                "source": "cached",
                "family": ui.model_family(meta["spec"]["model"]),
                "gap_pct": g["gap_pct"],
                "deff_over_L": g["deff_over_L"],
                "layers": g["layers"],
            }
        )
for snap in gallery():
    if (snap.key, True) in seen:
        continue
    with ui.guarded(f"Precomputed run {snap.label}"):
        g = snap.headline(settings.pooling, settings.metric)
        runs.append(
            {
                "spec": snap.spec,
                "source": "precomputed",
                "family": ui.model_family(snap.spec["model"]),
                "gap_pct": g.gap_pct,
                "deff_over_L": g.deff_over_L,
                "layers": g.layers,
            }
        )
# every measured bar named by what tells it apart (intervention variants and random-weight
# seeds used to read the same), tagged with where it comes from
names = run_labels([r["spec"] for r in runs])
rows = [
    {
        "label": (
            f"this run: {name}"
            if r["source"] == "this run"
            else f"{name} (precomputed)"
            if r["source"] == "precomputed"
            else name
        ),
        **{k: v for k, v in r.items() if k != "spec"},
    }
    for name, r in zip(names, runs, strict=True)
]
shared = common_label([r["spec"] for r in runs]) if len(runs) > 1 else ""
if shared:
    st.caption(f"Every measured run here: {md_escape(shared)}.")

paper = ui.paper_table()
if paper is None:
    st.info(
        "The paper's published values were not found (deffcore/data/paper_reference.csv is "
        "missing from this copy, and DEFF_PAPER_REFERENCE names no file), so only measured "
        "runs are shown."
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
ui.show_figure(
    figures.tag_run(
        figures.gap_bars(table),
        run_identity(view.spec, pooling=settings.pooling, metric=settings.metric),
    ),
    key=download_stem(view.spec, "gap_to_FL", pooling=settings.pooling, metric=settings.metric),
)
# published values give only the gap: their D_eff/L (and some L) are blank, not "None"
shown = table.sort_values(["family", "gap_pct"]).assign(
    deff_over_L=lambda t: [f"{v:.4f}" if v == v else "" for v in t["deff_over_L"]],
    layers=lambda t: [f"{int(v)}" if v == v and v is not None else "" for v in t["layers"]],
)
st.dataframe(
    shown,
    hide_index=True,
    column_order=["label", "family", "source", "gap_pct", "deff_over_L", "layers"],
    column_config={
        "label": st.column_config.TextColumn("run"),
        "family": st.column_config.TextColumn("family"),
        "source": st.column_config.TextColumn("source"),
        "gap_pct": st.column_config.NumberColumn("gap to F_L (%)", format="%.2f"),
        "deff_over_L": st.column_config.TextColumn("D_eff/L"),
        "layers": st.column_config.TextColumn("L (layers)"),
    },
)
