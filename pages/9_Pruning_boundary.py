"""Pruning boundary check (paper Tables S16-S18): BI vs local Delta D_eff as skip rankings."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.labs import figures, lens_tables
from deffcore.labs.panels import paper_pruning_rows
from deffcore.labs.pruning import RANKING_LABELS, pruning_check
from deffcore.views.glossary import GLOSSARY
from explorer.cards import show_figure
from explorer.page import page
from explorer.progress import run_in_page
from explorer.settings import Settings


def run_form(settings: Settings) -> None:
    c1, c2, c3, c4 = st.columns(4)
    model = c1.text_input("Model", settings.model, key="pr_model")
    n = c2.number_input("Measured passages", 4, 10_000, 32, key="pr_n")
    n_heldout = c3.number_input("Held-out passages", 1, 10_000, 16, key="pr_heldout")
    max_tokens = c4.number_input("Max tokens", 2, 4096, 128, key="pr_max_tokens")
    what = md_escape(
        f"{model or '(no model)'} · {settings.dataset or '(no data)'} · N={int(n)} + "
        f"{int(n_heldout)} held out · T={int(max_tokens)}"
    )  # the model typed here (the sidebar's by default) and the sizes: said in the button
    cost = check_cost(model, settings, int(n), int(n_heldout), int(max_tokens))
    st.caption(md_escape(f"The check: {cost}."))
    if st.button(f"Run boundary check: {what}", type="primary", key="pr_run"):
        run_in_page(
            "The boundary check",
            "pr_result",
            lambda progress: pruning_check(
                model,
                settings.dataset,
                n=int(n),
                n_heldout=int(n_heldout),
                max_tokens=int(max_tokens),
                seed=settings.seed,
                metric=settings.metric,
                revision=settings.revision,
                progress=progress,
            ),
        )


def check_cost(model: str, settings: Settings, n: int, n_heldout: int, max_tokens: int) -> str:
    """The check's estimate here, in words (before it starts)."""
    from deffcore.inputs.model import resolve_device_dtype
    from deffcore.labs.pruning import pruning_cost

    try:
        device = resolve_device_dtype(None, None)[0]
        return pruning_cost(model, n=n, n_heldout=n_heldout, max_tokens=max_tokens,
                            device=device, revision=settings.revision).line()  # fmt: skip
    except Exception:  # a half-typed model name: the button says what is wrong
        return "time unknown until the model is named"


def headline(result: dict[str, Any]) -> None:
    """PPL_0, k_1.10 by each ranking, and how alike the two rankings are."""
    cols = st.columns(4)
    cols[0].metric("PPL₀ (held-out)", f"{result['ppl0']:.2f}")
    k_help = GLOSSARY["k₁.₁₀"] + " f₁.₁₀ = k₁.₁₀ / L."
    for col, ranking, name in ((cols[1], "bi", "BI"), (cols[2], "local_deff", "local ΔD_eff")):
        col.metric(
            f"k₁.₁₀ by {name}",
            f"{result['k_1.10'][ranking]}",
            f"f = {result['f_1.10'][ranking]:.3f}",
            delta_color="off",
            help=k_help,
        )
    cols[3].metric("Spearman (BI, ΔD_eff)", f"{result['spearman_bi_vs_local_deff']:.2f}")
    st.caption(
        f"{md_escape(result['model'])} · L = {result['layers']} · "
        f"D_eff/L = {result['deff_over_L']:.3f} · "
        f"gap {result['gap_pct']:.1f}% · {result['n']} measured and {result['n_heldout']} "
        f"held-out passages ({result['heldout_tokens']} predicted tokens) · Spearman p = "
        f"{result['spearman_p']:.2f}"
    )


def tables(result: dict[str, Any]) -> None:
    table = pd.DataFrame(
        {RANKING_LABELS[r]: {int(k): v for k, v in p.items()} for r, p in result["ppl"].items()}
    )
    table.index.name = "k skipped"
    # 4 significant digits: a skipped block can make PPL explode (1e63), which .3f would spell out
    st.dataframe(table.style.format("{:.4g}"), key="pr_table")
    order = pd.DataFrame(
        {RANKING_LABELS[r]: [b + 1 for b in o] for r, o in result["skip_order"].items()}
    )
    order.index = range(1, result["layers"] + 1)
    order.index.name = "skip rank"
    with st.expander("Skip order (block numbers, 1-based)"):
        st.dataframe(order, key="pr_order")


def tolerance_section(result: dict[str, Any]) -> None:
    """Table S17's pruning tolerance of this check (BI ranking): PPL_k, k_1.10, f_1.10, the
    non-monotone case, whether the check was read from the store; the paper's models below."""
    st.subheader("Pruning tolerance (Table S17)")
    cols = st.columns(4)
    cols[0].metric("k₁.₁₀ (BI)", f"{result['k_110']}", help=GLOSSARY["k₁.₁₀"])
    cols[1].metric("f₁.₁₀ = k₁.₁₀ / L", f"{result['f_110']:.3f}", help=GLOSSARY["f₁.₁₀"])
    monotone = result["k_110_monotone"]
    cols[2].metric("Perplexity curve", "monotone" if monotone else "not monotone")
    cols[3].metric("Result", "read from the store" if result["cached"] else "computed now")
    if not monotone:
        st.warning(
            f"Not monotone: k = {result['k_110']} is within 1.10 PPL₀ on its own although a "
            "smaller k is not. k₁.₁₀ judges each k alone, as Table S17 words it; every k up to "
            f"{result['k_110_contiguous']} qualifies."
        )
    st.dataframe(lens_tables.ppl_k_frame(result).style.format("{:.4g}", subset=["PPL_k"])
                 .format("{:.3f}", subset=["PPL_k / PPL₀"]), key="pr_ppl_k")  # fmt: skip
    st.caption(
        "Stored under the cache's labs/pruning folder and read back when the same check is "
        "repeated (the Correlation lab and the Models page read every stored check)."
        if result["cached"]
        else "Stored: the same check is read back next time; the Correlation lab and the "
        "Models page read every stored check."
    )
    with st.expander("The paper's Table S17 (FineWeb-Edu, N = 10,000; display only)"):
        st.dataframe(lens_tables.pruning_tolerance(paper_pruning_rows()), hide_index=True,
                     key="pr_paper")  # fmt: skip


def main() -> None:
    _, settings = page("Pruning boundary check")
    st.title("Pruning boundary check")
    st.markdown(
        "Is D_eff a per-layer importance signal? Blocks are ranked by **Block Influence** "
        "(1 − mean cosine between a block's input and output) and by **local ΔD_eff** (how "
        "much D_eff drops when the layer is left out of S). The k lowest-ranked blocks are "
        "skipped (they pass their input through) and perplexity is measured on held-out "
        "passages. This is the one lab that runs the LM head."
    )
    run_form(settings)
    result = st.session_state.get("pr_result")
    if result is None:
        st.info("Press **Run boundary check** (its estimate is above the button).")
        return
    headline(result)
    identity = {
        "lab": "pruning",
        "model": result["model"],
        **{k: result.get(k) for k in ("n", "n_heldout", "max_tokens", "metric")},
    }
    show_figure(figures.pruning_plot(result), "perplexity", identity)
    show_figure(figures.pruning_scores_plot(result), "scores", identity)
    tables(result)
    tolerance_section(result)


main()
