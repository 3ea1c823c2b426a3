"""The cached runs: open one, compare several (overlaid lag profiles and gaps), delete."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import ui_common as ui
from deffcore import figures

view, settings = ui.page("Runs")
st.title("Runs")
runs = ui.cached_runs()
if not runs:
    st.info("No cached runs yet: press Run in the sidebar; every run is kept in the cache.")
    st.stop()

current_key = getattr(view, "key", None)
table = pd.DataFrame(
    [
        {
            "current": m["key"] == current_key,
            "model": m["spec"]["model"],
            "dataset": m["spec"]["dataset"],
            "N": m.get("n"),
            "max tokens": m["spec"]["max_tokens"],
            "seed": m["spec"]["seed"],
            "L": m.get("layers"),
            "d": m.get("d_model"),
            "created": m.get("created"),
            "size (MB)": round(m.get("size_bytes", 0) / 1e6, 2),
            "key": m["key"],
        }
        for m in runs
    ]
)
st.dataframe(table, hide_index=True)
labels = {m["key"]: f"{ui.run_label(m['spec'])} [{m['key'][:8]}]" for m in runs}
by_key = {m["key"]: m for m in runs}

st.subheader("Open")
c1, c2 = st.columns([4, 1])
to_open = c1.selectbox("Run", list(labels), format_func=labels.get, key="runs_open")
if c2.button("Open", key="runs_open_button") and ui.open_run(to_open) is not None:
    st.session_state["runs_opened"] = to_open
    st.rerun()  # redraw the sidebar too, which was drawn before the run changed
opened = st.session_state.pop("runs_opened", None)
if opened in labels:
    st.success(f"Opened {labels[opened]}; every page now shows it.")

st.subheader("Compare")
picked = st.multiselect(
    "Runs to compare (two or more)",
    list(labels),
    default=list(labels)[:2] if len(labels) >= 2 else [],
    format_func=labels.get,
    key="runs_compare",
)
if len(picked) >= 2:
    results = {}
    for key in picked:
        with ui.guarded(f"Run {key}"):
            meta = by_key[key]
            results[key] = ui.cached_result(
                key, meta.get("created", ""), settings.pooling, settings.metric
            )
    if results:
        ui.show_figure(
            figures.overlay_lag_profiles({labels[k]: r["rho"] for k, r in results.items()}),
            key="runs_lag_profiles",
        )
        gaps = pd.DataFrame(
            {
                "label": [labels[k] for k in results],
                "family": [ui.model_family(by_key[k]["spec"]["model"]) for k in results],
                "gap_pct": [r["gap_pct"] for r in results.values()],
                "source": ["cached"] * len(results),
            }
        )
        ui.show_figure(figures.gap_bars(gaps), key="runs_gaps")
        st.dataframe(
            pd.DataFrame(
                {
                    "run": [labels[k] for k in results],
                    "L": [r["layers"] for r in results.values()],
                    "D_eff": [r["deff"] for r in results.values()],
                    "D_eff/L": [r["deff_over_L"] for r in results.values()],
                    "gap (%)": [r["gap_pct"] for r in results.values()],
                    "ρ̂(1)": [r["rho1"] for r in results.values()],
                }
            ),
            hide_index=True,
        )
elif len(labels) < 2:
    st.caption(
        "Only one cached run so far: press Run in the sidebar with another model or setting "
        "(e.g. Model source → Random-weight null) to have something to compare."
    )
else:
    st.caption("Pick at least two runs, e.g. instruct vs base or trained vs random:<model>:<seed>.")

st.subheader("Delete")
c1, c2 = st.columns([4, 1])
to_delete = c1.selectbox("Run to delete", list(labels), format_func=labels.get, key="runs_delete")
if c2.button("Delete…", key="runs_delete_button"):
    st.session_state["runs_confirm_delete"] = to_delete
pending = st.session_state.get("runs_confirm_delete")
if pending in labels:
    st.warning(f"Delete {labels[pending]} from the cache? Its states cannot be recovered.")
    c1, c2, _ = st.columns([1, 1, 4])
    if c1.button("Yes, delete", type="primary", key="runs_delete_confirm"):
        with ui.guarded("Deleting the run"):
            from deffcore import cache

            cache.delete(pending)
            ui.forget_run(pending)
            del st.session_state["runs_confirm_delete"]
            st.rerun()
    if c2.button("Cancel", key="runs_delete_cancel"):
        del st.session_state["runs_confirm_delete"]
        st.rerun()
