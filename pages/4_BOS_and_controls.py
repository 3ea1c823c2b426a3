"""BOS sensitivity in ten seconds: one verdict, then the evidence (SPEC section 11).

The verdict joins the pooling controls (does the regime, the sign of the gap to F_L, depend on
the control, and by how many points does the gap move) with the diagnostics of one small
eager-attention pass over the run's first 64 passages (massive activations, attention sinks),
cached beside the run. Then: the controls dot plot (no_pos0 included), the position-0 norm
ratio, the massive ratio and the sink share per layer, a one-click comparison of `bos=add`
against `bos=none`, and a passage inspector (token-state norms per layer and position).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

import ui_common as ui
from deffcore import diagnostics as dg
from deffcore import figures
from deffcore.constants import POOLINGS
from deffcore.errors import UndefinedSimilarityError
from deffcore.safe_text import md_escape  # user text shown as text, not Markdown

ctx = ui.require_view("BOS & controls")
if ctx is None:
    st.stop()
view, settings = ctx
k_max = settings.K or view.layers - 1
st.caption(f"{md_escape(view.label)} · {settings.metric} · K = {k_max}")

# --- the numbers the verdict needs -------------------------------------------------------------

headlines = {}
missing = []
with st.spinner("Similarity of every pooling control (computed once per run)…"):
    for pooling in POOLINGS:
        try:
            headlines[pooling] = view.headline(pooling, settings.metric, settings.K)
        except KeyError:  # an older snapshot without this control
            missing.append(pooling)
        except UndefinedSimilarityError as err:  # a degenerate control: undefined for this run
            st.caption(md_escape(f"{pooling} is undefined for this run: {err}"))

m = view.measurement
spec = m.spec if m is not None else dg.spec_from_fields(view.spec)
diag = dg.read_diagnostics(spec)


def _compute_diagnostics(run_spec, label: str):
    """diagnose(run_spec) with a status box and progress bar; None when it failed."""
    out = None
    with st.status(f"Massive activations and attention sinks of {label}…", expanded=True) as box:
        bar = st.progress(0.0, text="starting")
        with ui.guarded("The diagnostic pass"):
            out = dg.diagnose(run_spec, progress=ui.progress_callback(bar))
        box.update(
            label="Diagnostics ready" if out else "Diagnostics failed",
            state="complete" if out else "error",
            expanded=False,
        )
    return out


verdict_box = st.container()
if diag is None:
    if m is not None:  # a live run: the small pass is worth doing right away
        diag = _compute_diagnostics(spec, view.label)
    else:
        st.info(
            "The shipped run has no massive-activation and attention-sink diagnostics yet: one "
            f"small eager-attention pass over its first {min(view.n, dg.DIAG_PASSAGES)} passages "
            "computes them (a few minutes on a busy CPU; kept while the app runs)."
        )
        if st.button("Compute the diagnostics for this run", key="bos_diagnose"):
            diag = _compute_diagnostics(spec, view.label)

verdict = dg.bos_verdict(
    {p: h.gap_pct for p, h in headlines.items()},
    massive_ratio=diag["massive_ratio"] if diag else None,
    massive_position=diag["massive_position"] if diag else None,
    sink_fraction=diag["sink_fraction"] if diag else None,
)

# --- the verdict -------------------------------------------------------------------------------

with verdict_box:
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

# --- evidence: the controls --------------------------------------------------------------------

st.subheader("Pooling controls")
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
st.dataframe(
    mine[["gap_pct", "deff_over_L", "rho1"]]
    .rename(columns={"gap_pct": "gap to F_L (%)", "deff_over_L": "D_eff/L", "rho1": "ρ̂(1)"})
    .style.format({"gap to F_L (%)": "{:+.2f}", "D_eff/L": "{:.4f}", "ρ̂(1)": "{:.4f}"})
)
st.caption(
    "default: mean over all tokens; first_non_bos: position 1 only; token_normed: unit-norm "
    "tokens; no_pos0: mean over positions ≥ 1 (position 0 dropped whatever sits there, so it "
    "removes a first-token sink with or without a BOS); top1_pc/top3_pc: dominant directions "
    "projected out."
)

# --- evidence: position 0, massive activations, sinks ------------------------------------------

st.subheader("Position 0, massive activations, attention sinks")
left, right = st.columns(2)
with left:
    ui.show_figure(figures.pos0_ratio(view.pos0_norm_ratio()), key="pos0_ratio")
    st.caption(
        "‖h(pos 0)‖ / mean ‖h(t ≥ 1)‖ per layer over all N passages; dashed: 1 (no outlier)."
    )
if diag:
    with right:
        ui.show_figure(
            figures.massive_ratio_figure(
                diag["massive_ratio"], diag["massive_position"], diag["massive_dim"]
            ),
            key="massive_ratio",
        )
        st.caption(
            "Mean over passages of the largest |h_j| over tokens and features, divided by the "
            "median |h_j|; hover for where the maximum sits (position, feature). Dashed: 100x."
        )
    ui.show_figure(figures.sink_fraction_figure(diag["sink_fraction"]), key="sink_fraction")
    with st.expander("Attention to position 0 per head"):
        ui.show_figure(figures.sink_scores_heatmap(diag["sink_scores"]), key="sink_scores")
    st.caption(
        f"From one eager-attention pass over the first {diag['n_passages']} passages "
        f"({'stored' if diag.get('cached') else 'computed now'} beside the run)."
    )

# --- BOS on / off ------------------------------------------------------------------------------

st.subheader(f"BOS on or off: {md_escape(settings.model or 'the sidebar model')}")
st.caption(
    "Two runs with the sidebar's settings, one with exactly one BOS at position 0 (`bos=add`), "
    "one with none (`bos=none`): a sink that moves to the first token without a BOS is a "
    "first-position effect, one that disappears is a BOS effect. Both runs are cached."
)
compare_id = (
    settings.model,
    settings.revision,
    settings.dataset,
    settings.n,
    settings.max_tokens,
    settings.seed,
    getattr(settings, "passages", "documents"),
)
if st.button("Compare bos=add with bos=none", key="bos_compare"):
    from deffcore.measurement import measure

    results = {}
    for bos in ("add", "none"):
        with st.status(f"bos={bos}: run and diagnostics…", expanded=True) as box:
            bar = st.progress(0.0, text="starting")
            ok = False
            with ui.guarded(f"The bos={bos} run"):
                run = measure(
                    model=settings.model,
                    revision=settings.revision,
                    dataset=settings.dataset,
                    n=settings.n,
                    max_tokens=settings.max_tokens,
                    seed=settings.seed,
                    metric=settings.metric,
                    passages=compare_id[-1],
                    bos=bos,
                    progress=ui.progress_callback(bar),
                )
                d = dg.diagnose(run.spec, progress=ui.progress_callback(bar))
                results[bos] = {
                    "gaps": {p: run.summary(p, settings.metric).gap_pct for p in POOLINGS},
                    "verdict": dg.verdict_for(run, d, settings.metric).to_dict(),
                    "pos0": run.pos0_peak(),
                }
                ok = True
            box.update(
                label=f"bos={bos}: {'done' if ok else 'failed'}",
                state="complete" if ok else "error",
                expanded=not ok,
            )
    st.session_state["bos_compare_result"] = (compare_id, results)

stored = st.session_state.get("bos_compare_result")
if stored and stored[0] == compare_id and stored[1]:
    results = stored[1]
    cols = st.columns(len(results))
    for col, (bos, r) in zip(cols, results.items(), strict=True):
        with col:
            v = r["verdict"]
            st.markdown(f"**bos={bos}**")
            st.metric(f"Gap to F_L, default (bos={bos})", f"{r['gaps']['default']:+.1f}%")
            st.metric(f"Pos-0 norm ratio (bos={bos})", f"{r['pos0'][0]:.1f}x")
            st.write(v["sentence"])
    compare = pd.DataFrame(
        [
            {"label": f"bos={bos}", "pooling": p, "gap_pct": g, "source": f"bos={bos}"}
            for bos, r in results.items()
            for p, g in r["gaps"].items()
        ]
    )
    fig = figures.controls_dotplot(compare)
    fig.update_layout(title="BOS on or off: gap to F_L (%) per pooling control")
    ui.show_figure(fig, key="bos_compare_dotplot")

# --- passage inspector -------------------------------------------------------------------------

st.subheader("Passage inspector")
if not diag or "inspector" not in diag:
    st.caption("The inspector needs the diagnostics above.")
else:
    ins = diag["inspector"]
    texts = ["".join(t) for t in ins["tokens"]]
    i = st.selectbox(
        "Passage",
        options=list(range(len(texts))),
        format_func=lambda j: f"#{j}: {texts[j][:80]!r}",
        key="inspect_passage",
    )
    ui.show_figure(
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
        "Each cell is ‖h_l[t]‖ for one token (column) after block l (row), log colour; hover for "
        "the token. Norms growing down the rows are the residual stream accumulating; a bright "
        "column at position 0 is the sink token. Crosses: where the passage's largest single "
        "feature |h_j| sits in each layer (hover for j)."
    )
