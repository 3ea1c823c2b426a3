"""Depth use: the other papers' measures of how the model uses its depth, beside the lag profile
and D_eff of the current run (SPEC 16, the depth-use atlas)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from deffcore import figures
from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.measures.atlas import Atlas
from deffcore.views.atlas_read import phase_words
from deffcore.views.glossary import glossary_markdown, human_columns
from deffcore.views.labels import run_identity
from deffcore.views.run import Run
from explorer.cards import download_table, show_figure
from explorer.guard import guarded
from explorer.page import require_view
from explorer.progress import progress_callback
from explorer.settings import Settings

#: The glossary terms of this page, in the order it shows them.
TERMS = (
    "relative contribution",
    "alignment",
    "Block Influence",
    "angular distance",
    "phase point",
    "Gromov et al.'s block",
    "skip effect",
    "logit lens",
    "prediction depth",
)


def beside_section(view: Run, settings: Settings) -> None:
    """The run's own D_eff and lag profile, the numbers the atlas is read beside."""
    h = view.headline("default", settings.metric)
    cols = st.columns(4)
    cols[0].metric("D_eff", f"{h.deff:.3f}", help=f"L = {h.layers}, default pooling")
    cols[1].metric("D_eff / L", f"{h.deff_over_L:.4f}")
    cols[2].metric("Gap to F_L", f"{h.gap_pct:+.1f}%")
    cols[3].metric("ρ̂(1)", f"{h.rho1:.4f}")
    show_figure(
        figures.lag_decay(view.lag_profile("default", settings.metric)),
        "lag_decay",
        run_identity(view.spec, pooling="default", metric=settings.metric),
    )


def identity(view: Run) -> dict[str, Any]:
    return run_identity(view.spec, pooling="every token", metric="depth use")


def compute(view: Run, *, skip_effect: bool, logit_lens: bool = False) -> None:
    """The atlas (one extraction pass, with the logit lens when asked) or the skip effect, with
    a progress bar; all are kept beside the run, so the page reads them on every later visit."""
    from deffcore.lenses.atlas import atlas_of

    what = "The skip effect" if skip_effect else "The depth-use atlas"
    what = "Where predictions form" if logit_lens else what
    with st.status(what, expanded=True) as status:
        bar = st.progress(0.0, text="starting")
        done = None
        with guarded(what):
            done = atlas_of(
                view.measurement,
                skip_effect=skip_effect,
                logit_lens=logit_lens,
                progress=progress_callback(bar),
            )
        status.update(
            label=f"{what}: {'done' if done else 'failed'}",
            state="complete" if done else "error",
            expanded=False,
        )


def cost_caption(view: Run, part: str) -> None:
    """What the button below will take and write into the cache, said first (SPEC 14)."""
    from deffcore.inputs.model import resolve_device_dtype
    from deffcore.runs.action_costs import atlas_cost

    device = resolve_device_dtype(None, None)[0]
    spec = view.measurement.spec  # the buttons show only beside a measured run
    cost = atlas_cost(spec, device, n=view.n, layers=view.layers, part=part).line()
    st.caption(md_escape(f"The pass: {cost}."))


def missing_section(view: Run) -> None:
    if view.measurement is None:
        st.info(
            "This run carries no depth-use atlas (a snapshot made before the atlas existed). "
            "Measure the run (press **Run** on the Runs page): a new run takes its atlas during "
            "its own extraction."
        )
        return
    st.info(
        "This run was measured before the atlas existed (or resumed from another run's "
        "batches), so it has none yet: computing it is one more pass over its passages."
    )
    cost_caption(view, "atlas")
    if st.button("Compute the depth-use atlas", key="du_compute", type="primary"):
        compute(view, skip_effect=False)
        st.rerun()


def numbers_section(atlas: Atlas) -> None:
    L, g, cols = atlas.layers, atlas.gromov, atlas.columns()
    phase = phase_words(atlas)  # p = L: "none found", never "after block L … 0% past it"
    c = st.columns(4)
    c[0].metric("Phase point", phase["value"], help=phase["help"])
    c[1].metric("Blocks past the phase point", phase["share"])
    c[2].metric("Mean BI, second half", f"{cols['bi_second_half']:.4f}")
    first = g["first_dropped_block"]
    c[3].metric(
        f"Gromov et al. drop at {g['budget']:.0%}",
        f"{g['n_drop']} of {L}",
        help="the most consecutive blocks whose input and output differ by at most "
        "the budget in angular distance"
        + (f"; blocks {first}–{first + g['n_drop'] - 1}" if first else ""),
    )


def measures_section(view: Run, atlas: Atlas) -> None:
    tag = identity(view)
    numbers_section(atlas)
    show_figure(figures.contribution_figure(atlas), "relative_contribution", tag)
    if atlas.sublayers is None:
        st.caption(
            "No attention / MLP split: this architecture's sublayer writes are not "
            "verified here (the block's total write is shown)."
        )
    show_figure(figures.block_influence_figure(atlas), "block_influence", tag)
    show_figure(figures.angular_figure(atlas), "angular_distance", tag)
    st.caption(
        f"Each number is a mean over the run's {atlas.n} passages (each passage weighs the "
        f"same) of a mean over the passage's tokens; bars are {atlas.ci:.0%} passage-bootstrap "
        f"intervals ({atlas.B} resamples). The angular distance is taken at each passage's last "
        "token, as Gromov et al. do."
    )
    with st.expander("Per block, with intervals"):
        frame = atlas.frame()
        st.dataframe(human_columns(frame), hide_index=True, key="du_table")
        download_table(frame, "atlas_blocks", tag)


def lens_section(view: Run, atlas: Atlas) -> None:
    """Where predictions form (the logit lens, SPEC 16.2), read beside D_eff above."""
    st.subheader("Where predictions form (logit lens)")
    lens = atlas.logit_lens
    if lens is None:
        refused = atlas.meta.get("logit_lens_refused")
        if refused:
            st.caption(str(refused))
        elif view.measurement is None:
            st.caption("The snapshot carries no logit lens; a measured run computes it here.")
        else:
            st.caption(
                "The model's final norm and unembedding applied to every layer's residual "
                f"stream: one more pass over the run's passages with {atlas.layers + 1} "
                "unembeddings per token (kept beside the run)."
            )
            cost_caption(view, "lens")
            if st.button("Compute where predictions form", key="du_lens"):
                compute(view, skip_effect=False, logit_lens=True)
                st.rerun()
        return
    L, depth = atlas.layers, lens["prediction_depth"]
    band = atlas.intervals.get("prediction_depth")
    c = st.columns(3)
    c[0].metric(
        "Prediction depth",
        f"{depth:.2f} of {L}",
        help=None if band is None else f"{atlas.ci:.0%} interval {band[0]:.2f}–{band[1]:.2f}",
    )
    half = max(1, L // 2)
    c[1].metric(f"Top-1 = final at layer {half}", f"{lens['top1_agreement'][half]:.1%}")
    c[2].metric(f"KL(p_L ‖ p_l) at layer {half}", f"{lens['kl'][half]:.3f} nats")
    show_figure(figures.lens_figure(atlas), "logit_lens", identity(view))
    st.caption(
        "The model's final norm and unembedding applied to each layer's residual stream "
        "(layer 0: the embeddings); means over the passages' tokens, then over passages, with "
        f"{atlas.ci:.0%} passage-bootstrap intervals. Read it beside D_eff above: a model whose "
        "predictions settle early uses its last blocks to refine."
    )
    with st.expander("Per layer, with intervals"):
        import pandas as pd

        frame = pd.DataFrame({"layer": range(L + 1), "kl": lens["kl"]})
        for name, key in (("kl", "logit_lens_kl"), ("top1_agreement", "logit_lens_top1")):
            if name != "kl":
                frame[name] = lens[name]
            if key in atlas.intervals:
                frame[f"{name}_low"], frame[f"{name}_high"] = atlas.intervals[key]
        st.dataframe(human_columns(frame), hide_index=True, key="du_lens_table")
        download_table(frame, "atlas_logit_lens", identity(view))


def geometry_section(view: Run, atlas: Atlas) -> None:
    """Consecutive-layer geometry per block (SPEC 16.3)."""
    geo = atlas.geometry
    if geo is None:
        return
    st.subheader("Consecutive layers: how far and how much each block turns the states")
    import pandas as pd

    frame = pd.DataFrame({"block": range(1, atlas.layers + 1)})
    for name in ("displacement", "rotation_angle", "procrustes_residual"):
        if name in geo:
            frame[name] = geo[name]
    st.dataframe(human_columns(frame), hide_index=True, key="du_geometry")
    download_table(frame, "atlas_geometry", identity(view))
    st.caption(
        "Displacement: ‖h_l − h_{l−1}‖ / ‖h_{l−1}‖ per token (the relative contribution above). "
        "Rotation angle and Procrustes residual: the orthogonal Procrustes fit of layer l−1's "
        "centred pooled states (default pooling, scaled to unit norm) onto layer l's; the angle "
        "(degrees) is how far the fitted rotation turns the states, the residual (0 to 2) what "
        "no rotation explains."
    )


def skip_section(view: Run, atlas: Atlas) -> None:
    st.subheader("Skip one block: what changes later (Csordás et al. §3.2)")
    if atlas.skip_effect is not None:
        show_figure(figures.skip_figure(atlas.skip_effect), "skip_effect", identity(view))
        st.caption(
            "Left: mean relative change of each later block's write; right: mean "
            "next-token KL between the model and the model without the block."
        )
        return
    if view.measurement is None:
        st.caption("The snapshot carries no skip effect; a measured run computes it here.")
        return
    st.caption(
        f"Each of the {atlas.layers} blocks skipped in turn on the run's first "
        f"{min(64, atlas.n)} passages: at most {atlas.layers + 1} forward passes of them."
    )
    cost_caption(view, "skip")
    if st.button("Compute the skip effect", key="du_skip"):
        compute(view, skip_effect=True)
        st.rerun()


def main() -> None:
    ctx = require_view("Depth use")
    if ctx is None:
        st.stop()
    view, settings = ctx
    st.markdown(
        "How does the model use its depth? Other papers' measures on the **same passages** "
        "as D_eff: how much each block writes to the residual stream and in which direction "
        "(Csordás et al.), ShortGPT's Block Influence, Gromov et al.'s angular distance "
        "between layers and the blocks they would drop, and where the contributions fall "
        "off (the phase point). Definitions and papers are in the glossary below."
    )
    st.caption(f"Run: {md_escape(view.label)}")
    beside_section(view, settings)
    atlas = None
    with guarded("Reading the depth-use atlas"):
        atlas = view.atlas()
    if atlas is None:
        missing_section(view)
    else:
        measures_section(view, atlas)
        lens_section(view, atlas)
        geometry_section(view, atlas)
        skip_section(view, atlas)
    with st.expander("Glossary: the measures and their papers"):
        st.markdown(glossary_markdown(TERMS))


main()
