"""Overview: the first page (the default of `st.navigation` in app.py): the current run's
headline numbers with their trust badge, its similarity matrix and lag decay, and its BOS answer
(`explorer.answer_box`: the BOS page's box, its paired bootstrap drawn here when the run holds
none, so the Overview opened first answers as the BOS page does)."""

from __future__ import annotations

import streamlit as st

from deffcore import figures
from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.runs.tables import metric_comparison, metric_difference
from deffcore.views.labels import run_identity
from deffcore.views.run import Run
from explorer.answer_box import answer_box
from explorer.cards import download_html, headline_cards, precomputed_note, show_run_figure
from explorer.measure_pick import cka_family, measure_ready, metric_label
from explorer.page import OVERVIEW_TABS, page, page_links, sidebar_glossary
from explorer.settings import Settings
from explorer.tables import markdown_table

#: The two charts side by side share one height, so their download rows line up, and fit
#: above the fold at 1400 x 900 with the headline cards.
CHART_HEIGHT = 430

#: Plain text, no formula markup: the first screen draws its charts without loading KaTeX
#: (the glossary, sent last, and About and methods typeset the formulas).
INTRO = (
    "How does a transformer's residual stream accumulate across depth? "
    "**Effective depth** D\\_eff = L² / Σᵢⱼ Sᵢⱼ counts how many "
    "*independent* layers the similarity matrix S is worth; accumulated orthogonal "
    "updates give exactly F\\_L = 2L/(L+1)."
)
PAGES_NOTE = (
    "Pages, by who comes for what. Browsing models: Similarity (the matrix; click a layer), "
    "Lag decay (ρ(k) and K) and Gap to F_L (beside the paper's models) in the row above; "
    "Models (every run and the paper's models in one table: N, trust, bias); Depth use (other "
    "papers' measures of how a model uses its depth, beside D_eff). Teaching: Teach "
    "(constructions with known answers). Checking BOS sensitivity: BOS check (is the gap a "
    "position-0 artefact?); Runs (measure a run; open, compare, resume, delete; Baselines: "
    "random-weight null, matched references, bootstrap); Labs: Interventions (Gemma norms), "
    "Pruning boundary (BI vs ΔD_eff), Residual carry (train γ-carry GPTs), Training dynamics "
    "(checkpoints over training), Aggregations (other ways to count layers), Correlation lab "
    "(D_eff/L against pruning tolerance and benchmarks), Short pretraining (norm variants "
    "trained from random weights). For everyone: About and methods (what D_eff is, the docs)."
)


def metric_section(view: Run, settings: Settings) -> None:
    """Linear vs unbiased CKA side by side: is the headline an artefact of N?"""
    table = metric_comparison(view, settings.pooling, settings.K)
    if table is None:
        return
    st.markdown(
        f"**Linear vs unbiased CKA** (pooling `{settings.pooling}`). Linear CKA of independent "
        f"data is about d/(N+d) = {view.headline(settings.pooling, 'cka').cka_bias:.2f} here, "
        "not 0; unbiased CKA removes that finite-sample bias. Close values mean the headline "
        "is not an artefact of N."
    )
    st.markdown(markdown_table(table))  # a few numbers: no pandas on the first screen
    diff = metric_difference(view, settings.pooling, settings.K)
    if diff is not None:  # the two metrics on the same passages: a paired interval (SPEC 15)
        lo, hi = diff.interval
        st.caption(
            f"Linear minus unbiased CKA, D_eff/L: {diff.delta:+.4f}, {diff.ci:.0%} "
            f"[{lo:+.4f}, {hi:+.4f}] (paired: both on the same {diff.B} bootstrap resamples)."
        )


def charts_section(view: Run, settings: Settings) -> None:
    pooling, metric = settings.pooling, settings.metric
    left, right = st.columns(2)
    with left:
        S = view.similarity(pooling, metric)
        fig = figures.similarity_heatmap(S, metric=metric, pooling=pooling)
        fig.update_layout(height=CHART_HEIGHT)
        show_run_figure(fig, view.spec, "heatmap", pooling=pooling, metric=metric)
    with right:
        rho = view.lag_profile(pooling, metric)
        biased = metric == "cka"  # d/(N+d) is linear CKA's finite-sample floor
        fig = figures.lag_decay(
            rho, n=view.n if biased else None, d=view.d_model if biased else None
        )
        fig.update_layout(height=CHART_HEIGHT)
        show_run_figure(fig, view.spec, "lag_decay", pooling=pooling, metric=metric)


def report_button(view: Run, settings: Settings) -> None:
    """The run as one HTML file to send (`deffcore report`): built when clicked."""
    from deffcore.lenses.run_extras import report_parts
    from deffcore.views.run_report import report_html

    pooling, metric, K = settings.pooling, settings.metric, settings.K

    def build() -> str:
        parts = report_parts(view, metric, K, pooling)
        return report_html(view, **parts, pooling=pooling, metric=metric, K=K)

    download_html(
        build, "report", run_identity(view.spec, pooling=pooling, metric=metric),
        "Download this run as one HTML file",
        "Headline, trust, BOS answer, every chart and the command that remakes the run in one "
        "file that opens offline in any browser (`deffcore report` writes the same).",
    )  # fmt: skip


def main() -> None:
    view, settings = page("Overview", measures=True, glossary=False)
    with sidebar_glossary():  # the glossary's text after the charts: they are drawn first
        body(view, settings)


def body(view: Run | None, settings: Settings) -> None:
    st.title("Effective Depth Explorer")
    page_links(OVERVIEW_TABS)  # the matrix, ρ(k) and the gap in full, one click away
    st.markdown(INTRO)
    if view is None:
        st.warning("No run yet: choose a model and dataset on the Runs page and press Run.")
        return  # not st.stop(): the sidebar's glossary is drawn after the body
    st.caption(f"Current run: {md_escape(view.label)}")
    if not measure_ready(view, settings):  # a SPEC 17 measure the run does not hold yet
        return
    headline_cards(view, settings)
    charts_section(view, settings)  # one picture above the fold
    if cka_family(settings.metric):
        answer_box(view, settings.metric, settings.K)  # the BOS page's answer, paired alike
        report_button(view, settings)
    else:  # the answer's paired rule and the report's trust are the CKA family's (SPEC 15)
        st.info(
            "The BOS answer (is the gap a position-0 artefact?) and the run's report are "
            "decided under the CKA family only (their paired bootstrap and trust rule are "
            f"calibrated there), not under {metric_label(settings.metric)}: choose linear CKA, "
            "unbiased CKA or cosine in the sidebar to see them."
        )
    precomputed_note(view)
    metric_section(view, settings)
    st.caption(PAGES_NOTE)


main()
