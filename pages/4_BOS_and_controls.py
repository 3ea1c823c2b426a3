"""BOS sensitivity in ten seconds: one verdict, then the evidence (SPEC section 11).

The verdict joins the pooling controls (does the regime, the sign of the gap to F_L, depend on
the control, and by how many points does the gap move) with the diagnostics of one small
eager-attention pass over the run's first 64 passages (massive activations, attention sinks),
cached beside the run. Then: the controls dot plot (no_pos0 included), the position-0 norm
ratio, the massive ratio and the sink share per layer, a one-click comparison of `bos=add`
against `bos=none`, and a passage inspector (token-state norms per layer and position).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from deffcore import diagnostics as dg
from deffcore import figures
from deffcore.constants import POOLINGS
from deffcore.paper import paper_controls, paper_table
from deffcore.snapshot import Headline, RunView
from explorer.cards import show_figure
from explorer.guard import guarded
from explorer.page import require_view
from explorer.progress import progress_callback
from explorer.settings import Settings


def control_headlines(view: RunView, settings: Settings) -> tuple[dict[str, Headline], list]:
    """The headline of every pooling control (computed once per run), and the controls an
    older snapshot lacks."""
    headlines, missing = {}, []
    with st.spinner("Similarity of every pooling control (computed once per run)…"):
        for pooling in POOLINGS:
            try:
                headlines[pooling] = view.headline(pooling, settings.metric, settings.K)
            except KeyError:  # an older snapshot without this control
                missing.append(pooling)
    return headlines, missing


def compute_diagnostics(run_spec: Any, label: str) -> dict[str, Any] | None:
    """diagnose(run_spec) with a status box and progress bar; None when it failed."""
    out = None
    with st.status(f"Massive activations and attention sinks of {label}…", expanded=True) as box:
        bar = st.progress(0.0, text="starting")
        with guarded("The diagnostic pass"):
            out = dg.diagnose(run_spec, progress=progress_callback(bar))
        box.update(
            label="Diagnostics ready" if out else "Diagnostics failed",
            state="complete" if out else "error",
            expanded=False,
        )
    return out


def run_diagnostics(view: RunView, spec: Any) -> dict[str, Any] | None:
    """The run's stored diagnostics; computed now for a live run, on request for a snapshot."""
    diag = dg.read_diagnostics(spec)
    if diag is not None:
        return diag
    if view.measurement is not None:  # a live run: the small pass is worth doing right away
        return compute_diagnostics(spec, view.label)
    st.info(
        "The shipped run has no massive-activation and attention-sink diagnostics yet: one "
        f"small eager-attention pass over its first {min(view.n, dg.DIAG_PASSAGES)} passages "
        "computes them (a few minutes on a busy CPU; stored beside the run)."
    )
    if st.button("Compute the diagnostics for this run", key="bos_diagnose"):
        return compute_diagnostics(spec, view.label)
    return None


def verdict_section(
    verdict: Any, view: RunView, settings: Settings, missing: list[str], k_max: int
) -> None:
    say = st.warning if verdict.regime_depends else st.success
    say(f"**BOS sensitivity:** {verdict.sentence}")
    cols = st.columns(4)
    cols[0].metric(
        "Regime vs control",
        "depends" if verdict.regime_depends else "stable",
        help="Whether the controls disagree on the sign of the gap to F_L (D_eff below or "
        "above the orthogonal-update reference).",
    )
    cols[1].metric(
        "Gap moves by",
        f"{verdict.gap_move:.1f} pts",
        help="Largest minus smallest gap to F_L over the controls (percentage points).",
    )
    cols[2].metric(
        "Massive at position 0",
        "—"
        if verdict.massive_peak is None
        else ("no" if verdict.massive_layer is None else f"from layer {verdict.massive_layer}"),
        help="First state whose largest |h| is > 100x the median |h| with that maximum at "
        "position 0 (SPEC 11.2).",
    )
    cols[3].metric(
        "Sink heads",
        "—" if verdict.sink_max is None else f"{verdict.sink_max:.0%} max",
        help="Share of a block's heads whose mean attention from positions >= 1 to position 0 "
        "exceeds 0.3; the largest over blocks (the mean is in the sentence above).",
    )
    if k_max != view.layers - 1:
        st.info(
            f"This page uses the sidebar's K = {k_max}; the paper's controls are at K = L-1, so "
            f"set K to {view.layers - 1} before comparing with them."
        )
    if missing:
        st.caption(f"Not in this precomputed run: {', '.join(missing)} (press Run to add them).")


def controls_section(headlines: dict[str, Headline]) -> None:
    """The controls dot plot (with the paper's published controls on request) and table."""
    st.subheader("Pooling controls")
    table = pd.DataFrame(
        [
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
    )
    show_paper = st.checkbox("Show the paper's published controls (labelled 'paper')", value=True)
    paper = paper_table()
    if show_paper and paper is not None:
        pub = paper_controls(paper)
        published = pd.DataFrame(
            {
                "label": pub["model"] + " (paper)",
                "pooling": pub["setting"],
                "gap_pct": pub["value"].astype(float),
                "source": "paper: " + pub["source"],
            }
        )
        table = pd.concat([table, published], ignore_index=True)
    elif show_paper:
        st.info("The paper's reference values (paper_reference.csv) were not found.")
    show_figure(figures.controls_dotplot(table), key="controls_dotplot")
    mine = table[table["source"] == "this run"].set_index("pooling")
    st.dataframe(
        mine[["gap_pct", "deff_over_L", "rho1"]]
        .rename(columns={"gap_pct": "gap to F_L (%)", "deff_over_L": "D_eff/L", "rho1": "ρ̂(1)"})
        .style.format({"gap to F_L (%)": "{:+.2f}", "D_eff/L": "{:.4f}", "ρ̂(1)": "{:.4f}"})
    )
    st.caption(
        "default: mean over all tokens; first_non_bos: position 1 only; token_normed: unit-norm "
        "tokens; no_pos0: mean over positions ≥ 1 (position 0 dropped whatever sits there, so "
        "it removes a first-token sink with or without a BOS); top1_pc/top3_pc: dominant "
        "directions projected out."
    )


def sinks_section(view: RunView, diag: dict[str, Any] | None) -> None:
    st.subheader("Position 0, massive activations, attention sinks")
    left, right = st.columns(2)
    with left:
        show_figure(figures.pos0_ratio(view.pos0_norm_ratio()), key="pos0_ratio")
        st.caption(
            "‖h(pos 0)‖ / mean ‖h(t ≥ 1)‖ per layer over all N passages; dashed: 1 (no outlier)."
        )
    if not diag:
        return
    with right:
        show_figure(
            figures.massive_ratio_figure(
                diag["massive_ratio"], diag["massive_position"], diag["massive_dim"]
            ),
            key="massive_ratio",
        )
        st.caption(
            "Mean over passages of the largest |h_j| over tokens and features, divided by the "
            "median |h_j|; hover for where the maximum sits (position, feature). Dashed: 100x."
        )
    show_figure(figures.sink_fraction_figure(diag["sink_fraction"]), key="sink_fraction")
    with st.expander("Attention to position 0 per head"):
        show_figure(figures.sink_scores_heatmap(diag["sink_scores"]), key="sink_scores")
    st.caption(
        f"From one eager-attention pass over the first {diag['n_passages']} passages "
        f"({'stored' if diag.get('cached') else 'computed now'} beside the run)."
    )


def bos_on_off_section(settings: Settings) -> None:
    """Two runs with the sidebar's settings, bos=add and bos=none, side by side (on request)."""
    st.subheader(f"BOS on or off: {settings.model or 'the sidebar model'}")
    st.caption(
        "Two runs with the sidebar's settings, one with exactly one BOS at position 0 "
        "(`bos=add`), one with none (`bos=none`): a sink that moves to the first token without "
        "a BOS is a first-position effect, one that disappears is a BOS effect. Both runs are "
        "cached."
    )
    compare_id = (
        settings.model,
        settings.revision,
        settings.dataset,
        settings.n,
        settings.max_tokens,
        settings.seed,
        settings.passages,
    )
    if st.button("Compare bos=add with bos=none", key="bos_compare"):
        results = {}
        for bos in ("add", "none"):
            result = bos_run(settings, bos)
            if result is not None:
                results[bos] = result
        st.session_state["bos_compare_result"] = (compare_id, results)
    stored = st.session_state.get("bos_compare_result")
    if stored and stored[0] == compare_id and stored[1]:
        bos_on_off_results(stored[1])


def bos_run(settings: Settings, bos: str) -> dict[str, Any] | None:
    """One run with `bos` and its diagnostics, in a status box; None when it failed."""
    from deffcore.measurement import measure

    result = None
    with st.status(f"bos={bos}: run and diagnostics…", expanded=True) as box:
        bar = st.progress(0.0, text="starting")
        with guarded(f"The bos={bos} run"):
            run = measure(
                model=settings.model,
                revision=settings.revision,
                dataset=settings.dataset,
                **{**settings.shared_options(), "bos": bos},
                progress=progress_callback(bar),
            )
            d = dg.diagnose(run.spec, progress=progress_callback(bar))
            result = {
                "gaps": {p: run.summary(p, settings.metric).gap_pct for p in POOLINGS},
                "verdict": dg.verdict_for(run, d, settings.metric).to_dict(),
                "pos0": run.pos0_peak(),
            }
        box.update(
            label=f"bos={bos}: {'done' if result else 'failed'}",
            state="complete" if result else "error",
            expanded=not result,
        )
    return result


def bos_on_off_results(results: dict[str, dict[str, Any]]) -> None:
    cols = st.columns(len(results))
    for col, (bos, r) in zip(cols, results.items(), strict=True):
        with col:
            st.markdown(f"**bos={bos}**")
            st.metric(f"Gap to F_L, default (bos={bos})", f"{r['gaps']['default']:+.1f}%")
            st.metric(f"Pos-0 norm ratio (bos={bos})", f"{r['pos0'][0]:.1f}x")
            st.write(r["verdict"]["sentence"])
    compare = pd.DataFrame(
        [
            {"label": f"bos={bos}", "pooling": p, "gap_pct": g, "source": f"bos={bos}"}
            for bos, r in results.items()
            for p, g in r["gaps"].items()
        ]
    )
    fig = figures.controls_dotplot(compare)
    fig.update_layout(title="BOS on or off: gap to F_L (%) per pooling control")
    show_figure(fig, key="bos_compare_dotplot")


def inspector_section(diag: dict[str, Any] | None) -> None:
    st.subheader("Passage inspector")
    if not diag or "inspector" not in diag:
        st.caption("The inspector needs the diagnostics above.")
        return
    ins = diag["inspector"]
    texts = ["".join(t) for t in ins["tokens"]]
    i = st.selectbox(
        "Passage",
        options=list(range(len(texts))),
        format_func=lambda j: f"#{j}: {texts[j][:80]!r}",
        key="inspect_passage",
    )
    show_figure(
        figures.token_norm_heatmap(
            ins["token_norms"][i],
            ins["tokens"][i],
            max_position=ins["max_position"][i],
            max_dim=ins["max_dim"][i],
            max_value=ins["max_value"][i],
        ),
        key="token_norms",
    )
    st.caption(
        "Each cell is ‖h_l[t]‖ for one token (column) after block l (row), log colour; hover "
        "for the token. Norms growing down the rows are the residual stream accumulating; a "
        "bright column at position 0 is the sink token. Crosses: where the passage's largest "
        "single feature |h_j| sits in each layer (hover for j)."
    )


def main() -> None:
    ctx = require_view("BOS & controls")
    if ctx is None:
        st.stop()
    view, settings = ctx
    k_max = settings.K or view.layers - 1
    st.caption(f"{view.label} · {settings.metric} · K = {k_max}")
    headlines, missing = control_headlines(view, settings)
    m = view.measurement
    spec = m.spec if m is not None else dg.spec_from_fields(view.spec)
    verdict_box = st.container()  # the verdict on top, drawn once the diagnostics are known
    diag = run_diagnostics(view, spec)
    verdict = dg.bos_verdict(
        {p: h.gap_pct for p, h in headlines.items()},
        massive_ratio=diag["massive_ratio"] if diag else None,
        massive_position=diag["massive_position"] if diag else None,
        sink_fraction=diag["sink_fraction"] if diag else None,
    )
    with verdict_box:
        verdict_section(verdict, view, settings, missing, k_max)
    controls_section(headlines)
    sinks_section(view, diag)
    bos_on_off_section(settings)
    inspector_section(diag)


main()
