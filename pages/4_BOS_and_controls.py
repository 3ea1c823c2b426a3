"""BOS sensitivity around one answer: is the gap to F_L a position-0 artefact? (SPEC section 11)

The answer (default vs no_pos0, with its uncertainty, tolerance and trust level:
`deffcore.statistics.bos_answer`) and the pooling controls' verdict are computed from the similarity
matrices alone, so they show at once. The diagnostics of one small eager-attention pass over
the run's first 64 passages (massive activations, attention sinks) run in the background
(`deffcore.work.jobs.start_task`) with their progress, and fill in when done. Then: the controls dot
plot, the two ratios (position-0 norm ratio, massive-activation ratio), the sink share per
layer, the BOS on/off check of the current run (one sentence), and a passage inspector.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from deffcore import figures
from deffcore.core.constants import POOLINGS
from deffcore.core.errors import UndefinedSimilarityError
from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.lenses import diagnostics, diagnostics_store
from deffcore.lenses.bos_on_off import bos_on_off
from deffcore.lenses.run_extras import extras_source, snapshot_bos_on_off, snapshot_diagnostics
from deffcore.runs import measure as preflight
from deffcore.runs.action_costs import diagnostics_cost, runs_cost, with_variants
from deffcore.statistics.bos_answer import Position0Answer, identical_controls
from deffcore.statistics.control_effects import control_effects, effect_sentence, regime_intervals
from deffcore.statistics.verdict import bos_verdict, verdict_inputs
from deffcore.views.labels import run_label
from deffcore.views.paper import paper_controls, paper_table
from deffcore.views.run import Headline, Run
from deffcore.work import jobs
from explorer.answer_box import answer_box
from explorer.background import follow_task, show_failure
from explorer.cards import show_run_figure
from explorer.guard import guarded
from explorer.page import require_view
from explorer.settings import Settings

_ONOFF = "_bos_onoff_job"


def control_headlines(view: Run, settings: Settings) -> tuple[dict[str, Headline], list]:
    """The headline of every pooling control, and the controls an older snapshot lacks."""
    headlines, missing = {}, []
    for pooling in POOLINGS:
        try:
            headlines[pooling] = view.headline(pooling, settings.metric, settings.K)
        except KeyError:  # an older snapshot without this control
            missing.append(pooling)
        except UndefinedSimilarityError as err:  # a degenerate control: undefined for this run
            st.caption(md_escape(f"{pooling} is undefined for this run: {err}"))
    return headlines, missing


def verdict_section(
    view: Run, headlines: dict, diag: dict | None, k_max: int, settings: Settings,
    answer: Position0Answer | None = None,
) -> None:  # fmt: skip
    """The pooling controls' verdict (regime, gap move, identical controls; regimes from the
    run's paired bootstrap when it has one, with each control's paired move, no_pos0's the
    answer's own) and, once the diagnostics are in, massive activations and sinks."""
    m = view.measurement
    identical = identical_controls(m, m.metric) if m is not None else None
    pb, metric, K = view.paired_bootstrap(), settings.metric, settings.K
    paired = pb is not None and all(pb.has(p, metric) for p in headlines)
    spans = regime_intervals(pb, metric, K) if paired else None
    verdict = bos_verdict(
        {p: h.gap_pct for p, h in headlines.items()},
        identical=identical,
        intervals=spans,
        **verdict_inputs(diag),
    )
    st.markdown(f"**Pooling controls and diagnostics:** {verdict.sentence}")
    effects = control_effects(pb, metric, K) if spans else {}
    if effects:  # each control's move of the gap, paired (SPEC 15)
        st.caption(md_escape(effect_sentence(effects, pb.ci, answer)))
    cols = st.columns(4)
    cols[0].metric(
        "Regime vs control",
        "depends" if verdict.regime_depends else "stable",
        help="Whether the distinct controls disagree on the sign of the gap to F_L.",
    )
    cols[1].metric(
        "Gap moves by",
        f"{verdict.gap_move:.1f} pts",
        help="Largest minus smallest gap to F_L over the distinct controls (points).",
    )
    cols[2].metric(
        "Massive at position 0",
        "—"
        if verdict.massive_peak is None
        else ("no" if verdict.massive_layer is None else f"from layer {verdict.massive_layer}"),
        help="First state whose massive-activation ratio (largest |h_j| / median |h_j|) is "
        "> 100x with that maximum at position 0 (SPEC 11.2).",
    )
    cols[3].metric(
        "Sink heads",
        "—" if verdict.sink_max is None else f"{verdict.sink_max:.0%} max",
        help="Share of a block's heads whose mean attention from positions >= 1 to position 0 "
        "exceeds 0.3; the largest over blocks.",
    )
    if k_max != view.layers - 1:
        st.info(
            f"This page uses the sidebar's K = {k_max}; the paper's controls are at K = L-1, so "
            f"set K to {view.layers - 1} before comparing with them."
        )


def diagnostics_task(spec: Any) -> str:
    """Start (or find) the background diagnostic pass of `spec`; its job id."""

    def work(progress: Any, should_stop: Any) -> dict[str, Any]:
        out = diagnostics_store.diagnose(spec, progress=progress)
        return {"n_passages": out["n_passages"]}

    return jobs.start_task(f"diagnostics:{spec.key()}", work, model=spec.model)


def run_diagnostics(view: Run, spec: Any) -> dict[str, Any] | None:
    """The run's stored diagnostics, else those its snapshot carries (shipped with the app,
    or in a shared file), else their background pass: started at once for a run measured
    here, on request (its estimate said first) for a snapshot; its progress polls below."""
    diag = diagnostics_store.read_diagnostics(spec) or snapshot_diagnostics(view)
    if diag is not None:
        return diag
    name = f"diagnostics:{spec.key()}"
    last = jobs.task_job(name)
    if last is None and view.measurement is not None:
        diagnostics_task(spec)
    elif last is None or last.finished:  # failed, cancelled, or done but no longer stored
        st.caption(
            f"No massive-activation and attention-sink diagnostics yet for {md_escape(view.label)}"
            ": one small eager-attention pass over its first "
            f"{min(view.n, diagnostics.DIAG_PASSAGES)} "
            "passages computes them in the background (the model loads once): "
            f"{md_escape(diagnostics_cost(spec, device_here()).line())}."
        )
        again = "Try the diagnostics again" if last is not None else "Compute the diagnostics"
        if st.button(f"{again} of {md_escape(view.label)}", key="bos_diagnose"):
            diagnostics_task(spec)
    status = jobs.task_job(name)
    if not show_failure(status, "The diagnostic pass") and status and not status.finished:
        follow_task(name, "Diagnostics in the background")  # reruns the page once it lands
    return None


def controls_section(view: Run, headlines: dict[str, Headline], settings: Settings) -> None:
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
    show_run_figure(
        figures.controls_dotplot(table),
        view.spec,
        "pooling_controls",
        pooling="every control",
        metric=settings.metric,
    )
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


def device_here() -> str:
    """The device a background task of this server runs on (CUDA when present)."""
    from deffcore.inputs.model import resolve_device_dtype

    return resolve_device_dtype(None, None)[0]


def sinks_section(view: Run, diag: dict[str, Any] | None, metric: str) -> None:
    """The two ratios side by side (named apart), then the sink shares."""
    st.subheader("Position 0, massive activations, attention sinks")
    left, right = st.columns(2)
    spec = view.spec
    with left:
        show_run_figure(
            figures.pos0_ratio(view.pos0_norm_ratio()), spec, "pos0_norm_ratio",
            pooling="default", metric=metric,
        )  # fmt: skip
        st.caption(
            "**Position-0 norm ratio**: ‖h(pos 0)‖ / mean ‖h(t ≥ 1)‖, a whole token state's "
            "length against the others', over all N passages; dashed: 1 (no outlier)."
        )
    if not diag:
        with right:
            st.caption("The massive-activation ratio appears here when the diagnostics land.")
        return
    with right:
        show_run_figure(
            figures.massive_ratio_figure(
                diag["massive_ratio"], diag["massive_position"], diag["massive_dim"]
            ),
            spec, "massive_activation_ratio", pooling="default", metric=metric,
        )  # fmt: skip
        st.caption(
            "**Massive-activation ratio** (the project's summary): the passages' largest single "
            "feature |h_j|, averaged over passages, divided by the median |h_j|; one huge "
            "number, not a whole state's length. Dashed: 100×."
        )
    sun_section(view, diag, metric)
    gu_section(view, diag, metric)
    with st.expander("Attention to position 0 per head"):
        show_run_figure(
            figures.sink_scores_heatmap(diag["sink_scores"]), spec, "sink_scores",
            pooling="default", metric=metric,
        )  # fmt: skip
    where = (
        extras_source(view)
        if diag.get("shipped")
        else f"{'stored' if diag.get('cached') else 'computed now'} beside the run"
    )
    st.caption(  # stored values: shown as text (safe_text), never as Markdown
        md_escape(
            f"From one eager-attention pass over the first {diag['n_passages']} passages ({where})."
        )
    )


def sun_section(view: Run, diag: dict[str, Any], metric: str) -> None:
    """Sun et al.'s criterion per activation: the share of passages with one, per state."""
    if diag.get("sun_share") is None:
        return
    show_run_figure(
        figures.sun_share_figure(diag["sun_share"]), view.spec, "sun_massive_share",
        pooling="default", metric=metric,
    )  # fmt: skip
    st.caption(
        "**Sun et al.'s criterion, per activation**: the share of passages holding an "
        "activation with |a| > 100 and ≥ 1,000× the median magnitude of its own state (Sun et "
        "al., *Massive Activations in Large Language Models*, 2024). The ratio above averages "
        "the passages' maxima first: a different number, named apart."
    )


#: Gu et al.'s two windows as the page names them: the diagnostics' key prefix -> words.
GU_WINDOW_LABELS = {"gu_": "whole passages", "gu64_": "first 64 tokens (Gu et al.'s length)"}


def gu_section(view: Run, diag: dict[str, Any], metric: str) -> None:
    """The sink-head share per block, ours beside Gu et al.'s metric on the chosen window."""
    prefix = "gu_"
    if diag.get("gu_sink_fraction") is not None:
        prefix = st.radio(
            "Gu et al.'s metric on", list(GU_WINDOW_LABELS), format_func=GU_WINDOW_LABELS.get,
            key="bos_gu_window", horizontal=True,
        )  # fmt: skip
    gu = diag.get(f"{prefix}sink_fraction")
    show_run_figure(
        figures.sink_shares_figure(
            diag["sink_fraction"], gu, gu_window=GU_WINDOW_LABELS[prefix]
        ),
        view.spec, "sink_heads", pooling="default", metric=metric,
    )  # fmt: skip
    st.caption(
        "**Ours**: a head is a sink when its attention from queries ≥ 1 to position 0, "
        "averaged over passages, exceeds 0.3 (query 0 can only attend to itself). **Gu et "
        "al.** (*When Attention Sink Emerges in Language Models*, 2024): query 0 included, "
        "0.3 decided per passage, block and head, then averaged over passages."
    )
    if gu is not None:
        st.caption(
            md_escape(
                f"Gu et al.'s Sink₀.₃ over all blocks, {GU_WINDOW_LABELS[prefix]}: "
                f"{diag[f'{prefix}sink_metric']:.1%} of heads, on {diag['gu_passages']} passages "
                f"of ≥ {diag['gu_min_length']} tokens (uniform attention scores "
                f"{diag[f'{prefix}baseline']:.3f} there)."
            )
        )


def bos_on_off_section(view: Run, spec: Any, settings: Settings) -> None:
    """The current run with bos=add and with bos=none, in the background; one sentence."""
    label = run_label({**view.spec, "bos": "add / none"})
    st.subheader("BOS on or off")
    st.caption(
        "The current run measured twice, with exactly one BOS at position 0 (`bos=add`) and "
        "with none (`bos=none`): an outlier that stays at the first token without a BOS is a "
        "first-position effect, one that disappears is a BOS effect. Both runs are cached."
    )
    name = f"bos-onoff:{spec.key()}:{settings.metric}:{settings.K}"
    shipped = snapshot_bos_on_off(view, settings.metric, settings.K)
    if shipped is not None:  # computed by the CLI with the snapshot: whole at first visit
        st.caption(f"Both runs {md_escape(extras_source(view))}.")
        bos_on_off_results(shipped, settings.metric, dict(view.spec))
        return
    cost = runs_cost(with_variants(spec, "bos", ("add", "none")), device_here())
    st.caption(f"Two runs of N = {spec.n:,}: {md_escape(cost.line())}.")
    if st.button(f"Compare bos=add with bos=none: {md_escape(label)}", key="bos_compare"):
        with guarded("Starting the BOS on/off check"):
            preflight.check(spec)  # the model and data, before anything loads

            def work(progress: Any, should_stop: Any) -> dict[str, Any]:
                return bos_on_off(
                    spec, metric=settings.metric, K=settings.K,
                    progress=progress, should_stop=should_stop,
                )  # fmt: skip

            st.session_state[_ONOFF] = jobs.start_task(name, work, model=spec.model)
    status = jobs.task_job(name)
    if status is None or show_failure(status, "The BOS on/off check"):
        return
    if status.state == "done" and status.result:  # drawn by the page, not the polling
        bos_on_off_results(status.result, settings.metric, dict(view.spec))  # fragment: its
    elif not status.finished:  # downloads keep one address (a 1 s fragment replaced them)
        follow_task(name, "bos=add, then bos=none")  # the page draws it once it lands


def bos_on_off_results(result: dict[str, Any], metric: str, current: dict[str, Any]) -> None:
    box = st.success if result["kind"] in ("first_position", "bos") else st.info
    box(f"**Conclusion:** {md_escape(result['conclusion'])}")
    cols = st.columns(2)
    for col, bos in zip(cols, ("add", "none"), strict=True):
        r = result[bos]
        col.metric(f"Gap to F_L, default (bos={bos})", f"{r['gaps']['default']:+.1f}%")
        col.metric(f"Pos-0 norm ratio (bos={bos})", f"{r['pos0'][0]:.1f}×")
    compare = pd.DataFrame(
        [
            {"label": f"bos={bos}", "pooling": p, "gap_pct": g, "source": f"bos={bos}"}
            for bos in ("add", "none")
            for p, g in result[bos]["gaps"].items()
        ]
    )
    fig = figures.controls_dotplot(compare)
    fig.update_layout(title="BOS on or off: gap to F_L (%) per pooling control")
    # named by the current run (both runs are its variants); the CSV says which two
    show_run_figure(
        fig, current, "bos_add_vs_none", pooling="every control", metric=metric,
        identity={"compared": "bos=add, bos=none"},
    )  # fmt: skip


def passage_label(j: int, text: str, width: int = 80) -> str:
    """`#j: “its first words…”` as a person reads it: line breaks and runs of spaces as one
    space (repr() showed them as literal \\n\\n)."""
    flat = " ".join(text.split())
    return f"#{j}: “{flat[:width]}{'…' if len(flat) > width else ''}”"


def inspector_section(diag: dict[str, Any] | None, spec: dict[str, Any], metric: str) -> None:
    st.subheader("Passage inspector")
    if not diag or "inspector" not in diag:
        st.caption("The inspector needs the diagnostics above.")
        return
    ins = diag["inspector"]
    texts = ["".join(t) for t in ins["tokens"]]
    i = st.selectbox(
        "Passage",
        options=list(range(len(texts))),
        format_func=lambda j: passage_label(j, texts[j]),
        key="inspect_passage",
    )
    show_run_figure(
        figures.token_norm_heatmap(
            ins["token_norms"][i],
            ins["tokens"][i],
            max_position=ins["max_position"][i],
            max_dim=ins["max_dim"][i],
            max_value=ins["max_value"][i],
        ),
        spec,
        "token_norms",
        pooling="default",
        metric=metric,
        identity={"passage": i},
    )
    st.caption(
        "Each cell is ‖h_l[t]‖ for one token (column) after block l (row; layer 0 at the top), "
        "log colour; hover for the token. Norms growing down the rows are the residual stream "
        "accumulating; a bright column at position 0 is the sink token. Outlined cells: where "
        "the passage's largest single feature |h_j| sits in each layer (hover for j)."
    )


def main() -> None:
    ctx = require_view("BOS & controls")
    if ctx is None:
        st.stop()
    view, settings = ctx
    k_max = settings.K or view.layers - 1
    st.caption(f"{md_escape(view.label)} · {settings.metric} · K = {k_max}")
    answer = answer_box(view, settings.metric, settings.K)  # at once: the similarity matrices
    headlines, missing = control_headlines(view, settings)
    m = view.measurement
    spec = m.spec if m is not None else diagnostics_store.spec_from_fields(view.spec)
    verdict_box = st.container()  # filled once the diagnostics are known (or not)
    diag = None
    with guarded("Reading the diagnostics"):
        diag = run_diagnostics(view, spec)
    with verdict_box:
        verdict_section(view, headlines, diag, k_max, settings, answer)
        if missing:
            st.caption(f"Not in this precomputed run: {', '.join(missing)} (press Run to add).")
    controls_section(view, headlines, settings)
    sinks_section(view, diag, settings.metric)
    with guarded("The BOS on/off check"):
        bos_on_off_section(view, spec, settings)
    inspector_section(diag, view.spec, settings.metric)


main()
