"""Is the measured depth special? Random-weight null, matched references, updates, bootstrap."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import streamlit as st

from deffcore import figures
from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.lenses.run_extras import extras_source, snapshot_bootstrap
from deffcore.runs.action_costs import runs_cost, with_variants
from deffcore.views.glossary import human_label
from deffcore.views.run import Headline, Run
from explorer.cards import show_run_figure
from explorer.guard import guarded
from explorer.page import require_view
from explorer.progress import progress_callback
from explorer.views import set_view

RANDOM_SEEDS = (1, 2, 3)
REFERENCES = ("F_L", "F_norm", "F_h0+norm", "F_h0+corr")


class Baselines:
    """The run and view every section of this page reads."""

    def __init__(self, view: Run, pooling: str, metric: str) -> None:
        self.view, self.pooling, self.metric = view, pooling, metric
        self.h: Headline = view.headline(pooling, metric)

    def show(self, fig, what: str, **identity: object) -> None:
        """A figure of this run and view; its key and downloads say which (and `identity`)."""
        show_run_figure(
            fig, self.view.spec, what, pooling=self.pooling, metric=self.metric, identity=identity
        )


def random_null_section(b: Baselines) -> None:
    st.subheader("Trained vs random-weight null")
    st.markdown(
        "The same architecture and config, freshly initialised (several seeds), measured on "
        "the same passages. Band: mean ± 2σ over seeds."
    )
    band = b.view.random_band(b.pooling, b.metric)
    if band:
        b.show(
            figures.null_baseline(b.h.deff_over_L, band["deff_over_L"], label="trained"),
            "random_null",
        )
        inside = band["low"] <= b.h.deff_over_L <= band["high"]
        st.markdown(
            f"Trained D_eff/L = **{b.h.deff_over_L:.4f}**; random seeds "
            f"{', '.join(map(str, band['seeds']))}: mean "
            f"**{band['mean']:.4f}**, band [{band['low']:.4f}, {band['high']:.4f}] — the "
            f"trained model is {'inside' if inside else 'outside'} the null band."
        )
        if b.view.measurement is None:  # a snapshot: say where the band comes from
            st.caption(f"The random-weight runs are {md_escape(extras_source(b.view))}.")
    elif b.view.measurement is None:
        st.info("The precomputed run has no random-weight null for this metric; press Run first.")
    else:
        st.info(f"No random-weight null yet for this run ({len(RANDOM_SEEDS)} seeds to compute).")
        st.caption(f"{len(RANDOM_SEEDS)} runs of N = {b.view.n:,}: {md_escape(null_cost(b))}.")
        label = md_escape(b.view.label)  # the button says which run it measures again
        if st.button(
            f"Compute the random-weight null of {label} ({len(RANDOM_SEEDS)} seeds)",
            key="run_null",
        ):
            compute_random_null(b)


def null_cost(b: Baselines) -> str:
    """What measuring the random-weight nulls of this run will take here, in words."""
    from deffcore.inputs.model import resolve_device_dtype

    spec = b.view.measurement.spec
    specs = with_variants(spec, "model", [f"random:{spec.model}:{s}" for s in RANDOM_SEEDS])
    return runs_cost(specs, resolve_device_dtype(None, None)[0]).line()


def compute_random_null(b: Baselines) -> None:
    """Measure the run again with its random-weight nulls; the result becomes the current run."""
    spec = b.view.spec
    bar = st.progress(0.0, text="starting")
    with guarded("The random-weight null"):
        from deffcore.runs.measure import measure

        m = measure(
            model=spec["model"],
            revision=spec["revision"],
            dataset=spec["dataset"],
            n=int(spec["n"]),
            max_tokens=int(spec["max_tokens"]),
            seed=int(spec["seed"]),
            dtype=spec["dtype"],
            passages=spec["passages"],  # the current run exactly: its windows and BOS option
            bos=spec["bos"],
            intervention=spec["intervention"],
            metric=b.metric,
            random_seeds=RANDOM_SEEDS,
            progress=progress_callback(bar),
        )
        set_view(Run.from_measurement(m))
        st.rerun()


def matched_references_section(b: Baselines) -> None:
    st.subheader("Matched references")
    st.markdown(
        "Closed forms from this run's own statistics: F_norm uses the measured update sizes, "
        "F_h0+norm adds the persistent initial state h_0, F_h0+corr also keeps the measured "
        "update correlations."
    )
    refs = None
    with guarded("The matched references"):
        refs = b.view.matched_references(b.pooling, b.metric)
    if refs:
        b.show(
            figures.matched_references_bars(refs["deff"], {k: refs[k] for k in REFERENCES}),
            "matched_references",
        )
        st.dataframe(
            pd.DataFrame(
                {
                    "reference": [human_label(k) for k in REFERENCES],
                    "depth": [refs[k] for k in REFERENCES],
                    "gap (%)": [refs[f"gap_pct_{k}"] for k in REFERENCES],
                }
            ),
            hide_index=True,
            column_config={
                "depth": st.column_config.NumberColumn("depth (layers)", format="%.4f"),
                "gap (%)": st.column_config.NumberColumn(format="%+.2f"),
            },
        )
    elif refs is None and b.view.measurement is None:
        st.info("The precomputed run holds matched references for the cka metric only.")


def update_depth_section(b: Baselines) -> None:
    st.subheader("Update-based depth")
    upd = None
    with guarded("The update-based depth"):
        upd = b.view.update_depth(b.pooling, b.metric)
    if upd:
        c1, c2, c3 = st.columns(3)
        c1.metric(
            "D_eff^upd / L", f"{upd['deff_upd_over_L']:.4f}", help=f"states: {b.h.deff_over_L:.4f}"
        )
        c2.metric("ρ̂_upd(1)", f"{upd['rho1_upd']:.4f}", help=f"states: {b.h.rho1:.4f}")
        c3.metric("‖f‖ / ‖h‖", f"{upd['update_to_state_norm']:.3f}")
        if upd.get("rho_upd"):
            rho = b.view.lag_profile(b.pooling, b.metric)
            b.show(figures.states_vs_updates(rho, upd["rho_upd"]), "updates_vs_states")
    elif b.view.measurement is None:
        st.info("The precomputed run holds the update-based depth for the cka metric only.")


def bootstrap_section(b: Baselines) -> None:
    st.subheader("Passage bootstrap")
    m = b.view.measurement
    if m is None:
        stored = snapshot_bootstrap(b.view, b.pooling, b.metric)
        if stored is not None:  # checked, and the bootstrap of this very headline
            st.caption(
                f"Stored with this run when it was measured (B = {stored['B']} resamples of "
                "its passages); the trust level on every page uses this interval, the run's "
                f"own measured spread. The bootstrap is {md_escape(extras_source(b.view))}."
            )
            bootstrap_result(b, stored)
            return
        st.info(
            "This run was stored without a bootstrap for this pooling and metric (a snapshot "
            "holds the default pooling's, under the metric it was made with, when it was "
            "measured with --bootstrap); the bootstrap resamples the pooled states: press Run "
            "to measure this run here."
        )
        return
    B = st.select_slider("Resamples B", [20, 50, 100, 200, 500], value=100, key="bootstrap_B")
    boot_key = ("bootstrap", b.view.key, b.pooling, b.metric, B)
    if st.button("Compute the bootstrap CI", key="run_bootstrap"):
        with st.spinner(f"Bootstrapping D_eff/L ({B} resamples)…"), guarded("The bootstrap"):
            st.session_state[boot_key] = m.bootstrap(b.pooling, b.metric, B=B).to_dict()
    boot = st.session_state.get(boot_key)
    if boot:
        bootstrap_result(b, boot)


def bootstrap_result(b: Baselines, boot: dict) -> None:
    if boot.get("samples"):
        b.show(
            figures.bootstrap_histogram(
                boot["samples"], point=boot["point"], low=boot["low"], high=boot["high"]
            ),
            f"bootstrap_B{boot['B']}",
            **{"resamples B": boot["B"]},
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


SECTIONS: tuple[Callable[[Baselines], None], ...] = (
    random_null_section,
    matched_references_section,
    update_depth_section,
    bootstrap_section,
)


def main() -> None:
    ctx = require_view("Baselines")
    if ctx is None:
        st.stop()
    view, settings = ctx
    b = Baselines(view, settings.pooling, settings.metric)
    st.caption(f"{md_escape(view.label)} · {b.metric} · pooling {b.pooling} · K = L-1")
    for section in SECTIONS:
        section(b)


main()
