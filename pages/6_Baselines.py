"""Is the measured depth special? Random-weight null, matched references, updates, bootstrap."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import ui_common as ui
from deffcore import figures
from deffcore.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.snapshot import download_stem, run_identity

try:  # teach's glossary (issue 12.4): human names for the references
    from deffcore.glossary import human_label
except ImportError:  # pragma: no cover - before the glossary lands

    def human_label(name: object) -> object:
        return name


RANDOM_SEEDS = (1, 2, 3)

ctx = ui.require_view("Baselines")
if ctx is None:
    st.stop()
view, settings = ctx
pooling, metric = settings.pooling, settings.metric
h = view.headline(pooling, metric)
identity = run_identity(view.spec, pooling=pooling, metric=metric)


def name(what: str) -> str:
    """Widget key and download file stem: the run, the view and what the figure shows."""
    return download_stem(view.spec, what, pooling=pooling, metric=metric)


st.caption(f"{md_escape(view.label)} · {metric} · pooling {pooling} · K = L-1")

# --- random-weight null ----------------------------------------------------------------------
st.subheader("Trained vs random-weight null")
st.markdown(
    "The same architecture and config, freshly initialised (several seeds), measured on the "
    "same passages. Band: mean ± 2σ over seeds."
)
band = view.random_band(pooling, metric)
if band:
    ui.show_figure(
        figures.tag_run(
            figures.null_baseline(h.deff_over_L, band["deff_over_L"], label="trained"), identity
        ),
        key=name("random_null"),
    )
    inside = band["low"] <= h.deff_over_L <= band["high"]
    st.markdown(
        f"Trained D_eff/L = **{h.deff_over_L:.4f}**; random seeds "
        f"{', '.join(map(str, band['seeds']))}: mean "
        f"**{band['mean']:.4f}**, band [{band['low']:.4f}, {band['high']:.4f}] — the trained "
        f"model is {'inside' if inside else 'outside'} the null band."
    )
elif view.measurement is None:
    st.info("The precomputed run has no random-weight null for this metric; press Run first.")
else:
    st.info(f"No random-weight null yet for this run ({len(RANDOM_SEEDS)} seeds to compute).")
    if st.button(f"Compute the random-weight null ({len(RANDOM_SEEDS)} seeds)", key="run_null"):
        spec = view.spec
        bar = st.progress(0.0, text="starting")
        with ui.guarded("The random-weight null"):
            from deffcore.measurement import measure

            m = measure(
                model=spec["model"],
                revision=spec["revision"],
                dataset=spec["dataset"],
                n=int(spec["n"]),
                max_tokens=int(spec["max_tokens"]),
                seed=int(spec["seed"]),
                dtype=spec["dtype"],
                metric=metric,
                random_seeds=RANDOM_SEEDS,
                progress=ui.progress_callback(bar),
            )
            ui.set_view(ui.MeasurementView(m))
            st.rerun()

# --- matched references ------------------------------------------------------------------------
st.subheader("Matched references")
st.markdown(
    "Closed forms from this run's own statistics: F_norm uses the measured update sizes, "
    "F_h0+norm adds the persistent initial state h_0, F_h0+corr also keeps the measured update "
    "correlations."
)
refs = None
with ui.guarded("The matched references"):
    refs = view.matched_references(pooling, metric)
if refs:
    names = ["F_L", "F_norm", "F_h0+norm", "F_h0+corr"]
    ui.show_figure(
        figures.tag_run(
            figures.matched_references_bars(refs["deff"], {k: refs[k] for k in names}), identity
        ),
        key=name("matched_references"),
    )
    st.dataframe(
        pd.DataFrame(
            {
                "reference": [human_label(k) for k in names],
                "depth": [refs[k] for k in names],
                "gap (%)": [refs[f"gap_pct_{k}"] for k in names],
            }
        ),
        hide_index=True,
        column_config={
            "depth": st.column_config.NumberColumn("depth (layers)", format="%.4f"),
            "gap (%)": st.column_config.NumberColumn(format="%+.2f"),
        },
    )
elif refs is None and view.measurement is None:
    st.info("The precomputed run holds matched references for the cka metric only.")

# --- update-based depth ------------------------------------------------------------------------
st.subheader("Update-based depth")
upd = None
with ui.guarded("The update-based depth"):
    upd = view.update_depth(pooling, metric)
if upd:
    c1, c2, c3 = st.columns(3)
    c1.metric("D_eff^upd / L", f"{upd['deff_upd_over_L']:.4f}", help=f"states: {h.deff_over_L:.4f}")
    c2.metric("ρ̂_upd(1)", f"{upd['rho1_upd']:.4f}", help=f"states: {h.rho1:.4f}")
    c3.metric("‖f‖ / ‖h‖", f"{upd['update_to_state_norm']:.3f}")
    if upd.get("rho_upd"):
        ui.show_figure(
            figures.tag_run(
                figures.states_vs_updates(view.lag_profile(pooling, metric), upd["rho_upd"]),
                identity,
            ),
            key=name("updates_vs_states"),
        )
elif view.measurement is None:
    st.info("The precomputed run holds the update-based depth for the cka metric only.")

# --- bootstrap -----------------------------------------------------------------------------------
st.subheader("Passage bootstrap")
m = view.measurement
if m is None:
    st.info("The bootstrap resamples the pooled states: press Run to measure this run here first.")
else:
    B = st.select_slider("Resamples B", [20, 50, 100, 200, 500], value=100, key="bootstrap_B")
    boot_key = ("bootstrap", view.key, pooling, metric, B)
    if st.button("Compute the bootstrap CI", key="run_bootstrap"):
        with st.spinner(f"Bootstrapping D_eff/L ({B} resamples)…"), ui.guarded("The bootstrap"):
            st.session_state[boot_key] = m.bootstrap(pooling, metric, B=B).to_dict()
    boot = st.session_state.get(boot_key)
    if boot:
        ui.show_figure(
            figures.tag_run(
                figures.bootstrap_histogram(
                    boot["samples"], point=boot["point"], low=boot["low"], high=boot["high"]
                ),
                {**identity, "resamples B": boot["B"]},
            ),
            key=name(f"bootstrap_B{boot['B']}"),
        )
        st.markdown(
            f"D_eff/L = **{boot['point']:.4f}**, {100 * boot['ci']:.0f}% percentile CI "
            f"[{boot['low']:.4f}, {boot['high']:.4f}], bias-corrected (basic) CI "
            f"[{boot['basic_low']:.4f}, {boot['basic_high']:.4f}], bootstrap bias "
            f"{boot['bias']:+.4f}, from B = {boot['B']} resamples."
        )
        if not boot["low"] <= boot["point"] <= boot["high"]:
            st.warning(
                "The point estimate lies outside its own percentile interval. A resample "
                "draws passages with replacement, so it holds fewer distinct passages, and the "
                "similarity metric's finite-sample bias grows as N shrinks, shifting every "
                "resample's D_eff. "
                "Read the percentile interval's width as the sampling spread, not its "
                "position. The bias-corrected (basic) interval treats the shift as the "
                "estimator's own finite-N bias and moves the other way, towards the large-N "
                "value; with more passages both shifts get smaller."
            )
