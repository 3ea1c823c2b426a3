"""Norm interventions (paper Table S6): every pooling control with Gemma's norms removed."""

from __future__ import annotations

import streamlit as st

from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.inputs.interventions import INTERVENTIONS, PAPER_LABELS
from deffcore.labs import figures
from deffcore.labs.interventions import intervention_table, paper_intervention_rows
from deffcore.views.comparisons import PAPER_N, comparison_caveats
from explorer.cards import show_figure
from explorer.guard import guarded
from explorer.page import page
from explorer.progress import run_in_page
from explorer.settings import Settings
from explorer.tables import show_table

MODELS = ("gemma3-270m", "tiny-gemma3", "tiny-olmo2", "tiny-qwen3")


def run_form(settings: Settings) -> None:
    """The model, size and interventions; Run measures them in this script run."""
    c1, c2, c3 = st.columns(3)
    model = c1.selectbox("Model", MODELS, key="iv_model", help="Gemma-3, OLMo-2 or Qwen3 blocks")
    n = c2.number_input("N passages", 4, 10_000, 64, key="iv_n")
    max_tokens = c3.number_input("Max tokens", 2, 4096, 128, key="iv_max_tokens")
    chosen = st.multiselect(
        "Interventions",
        INTERVENTIONS,
        default=list(INTERVENTIONS),
        key="iv_which",
        format_func=lambda name: PAPER_LABELS[name],
    )
    what = md_escape(
        f"{model} · {settings.dataset or '(no data)'} · N={int(n)} · T={int(max_tokens)} · "
        f"seed {settings.seed}"
    )  # the lab's own model and size, with the sidebar's data and seed: said in the button
    cost = variants_cost(model, settings, int(n), int(max_tokens), chosen)
    st.caption(md_escape(f"{len(chosen)} runs: {cost}."))
    if st.button(f"Run interventions: {what}", type="primary", key="iv_run"):
        run_in_page(
            "The intervention run",
            "iv_result",
            lambda progress: intervention_table(
                model,
                settings.dataset,
                n=int(n),
                max_tokens=int(max_tokens),
                seed=settings.seed,
                metric=settings.metric,
                interventions=chosen,
                progress=progress,
            ),
        )


def variants_cost(
    model: str, settings: Settings, n: int, max_tokens: int, chosen: list[str]
) -> str:
    """What measuring `model` under each chosen intervention will take here (cached runs are
    read), in words."""
    from deffcore.inputs.model import resolve_device_dtype
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.runs.action_costs import runs_cost, with_variants

    try:
        device, dtype = resolve_device_dtype(None, None)
        spec = RunSpec(model=model, revision=None, dataset=settings.dataset, n=n,
                       max_tokens=max_tokens, seed=settings.seed, dtype=dtype)  # fmt: skip
        return runs_cost(with_variants(spec, "intervention", chosen), device).line()
    except Exception:  # no dataset chosen yet: the button says what is missing
        return "time unknown until the data is chosen"


def results_section(paper: list) -> None:
    result = st.session_state.get("iv_result")
    rows = result["rows"] if result else []
    identity = {"lab": "interventions", "view": "paper values"}
    if result:
        trust = next((r.get("trust") for r in rows if r["pooling"] == "default"), None)
        st.caption(
            f"{md_escape(result['model'])} · N = {result['n']} · "
            f"max tokens {result['max_tokens']} · metric {result['metric']} · trust of this "
            f"run's default gap: {trust}. Gap to F_L in %: > 0 is more redundant than "
            "orthogonal updates."
        )
        compared = [
            {"label": "this run", "trust": trust, "n": result["n"]},
            {"label": "the paper", "trust": "published", "n": PAPER_N},
        ]
        st.warning(
            md_escape(
                "Beside the paper's values (Gemma-3-4B/12B, another model and data): "
                + " ".join(comparison_caveats(compared))
            )
        )
        identity = {
            "lab": "interventions",
            **{k: result[k] for k in ("model", "n", "max_tokens", "metric")},
        }
    else:
        st.info("Press **Run interventions** to measure; the paper's values are shown meanwhile.")
    frame = figures.intervention_frame(rows, paper)
    if not frame.empty:
        show_table(frame.style.format("{:.1f}", na_rep="—"), key="iv_table")
    show_figure(figures.intervention_plot(rows, paper), "gaps", identity)


def main() -> None:
    _, settings = page("Norm interventions")
    st.title("Norm interventions")
    st.markdown(
        "Gemma-style blocks normalise each sub-layer's output before adding it to the residual "
        "stream (**post** norms) and normalise queries and keys (**QK** norms). Here the same "
        "weights run with those norms replaced by identity (inference only), and every pooling "
        "control is measured under each intervention. Architectures without those norms are "
        "refused. Columns marked *paper* and open markers are the paper's Gemma-3-4B/12B values "
        "(Table S6, display only; never measured here)."
    )
    paper = []
    with guarded("Reading the paper's values"):
        paper = paper_intervention_rows()
    run_form(settings)
    results_section(paper)


main()
