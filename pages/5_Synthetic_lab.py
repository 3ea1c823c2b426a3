"""Synthetic lab: a guided story of constructions with known effective depth, and a free sweep.

Every curve is a closed form (deffcore.measures.teaching), so sliders answer in milliseconds;
samples
are drawn only when a button asks, within a size budget. The logic lives in
deffcore.measures.teaching.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from deffcore import figures
from deffcore.core.errors import DeffError
from deffcore.measures import teaching
from deffcore.measures.depth import lag_profile
from deffcore.views.glossary import glossary_markdown, human_columns
from explorer.cards import show_figure
from explorer.guard import guarded
from explorer.page import page
from explorer.settings import Settings

N_OPTIONS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 10_000, 100_000]
D_OPTIONS = [8, 16, 32, 64, 128, 256, 512, 1024]
CUSTOM = "(your own settings)"
KNOB_KEYS = {"L": "syn_t_L", "h0": "syn_t_h0", "growth": "syn_t_growth", "rho": "syn_t_rho"}
KNOB_KEYS |= {"n": "syn_t_n", "d": "syn_t_d"}
#: The story's sliders that a step may grey out: (knob, label, low, high, step, help).
STORY_SLIDERS = (
    ("h0", "h_0 size", 0.0, 10.0, 0.25,
     "‖h_0‖² in units of one update. Enters at step 3."),
    ("growth", "growth g", 0.8, 1.5, 0.05,
     "Update m has squared size g^(m-1). Enters at step 4."),
    ("rho", "correlation ρ", 0.0, 0.9, 0.05,
     "Updates k layers apart have correlation ρ^k. Enters at step 5."),
)  # fmt: skip
#: The projector layout: chart height and figure font that put the step's sliders, its
#: lesson, its chart and its numbers above the fold at 1280 x 720 (browser screenshots,
#: tests/e2e; the page's title is left out there).
PROJECTOR_CHART_PX = 380
PROJECTOR_FONT_PX = 20
PROJECTOR_HELP = (
    "Every text large, for the back of a room: the lesson, the sliders, the chart and its "
    "numbers on the first screen."
)
STEP_HELP = (
    "The story builds one construction a step at a time; each step keeps the knobs of the "
    "ones before it. The address of this page carries the step and the layout."
)
#: Projector sizes for the step's own text (widgets, metrics, notes), scoped to its container.
PROJECTOR_CSS = """<style>
[data-testid="stMainBlockContainer"]:has(.st-key-syn_projector_view) { padding-top: 2rem; }
.st-key-syn_projector_view p, .st-key-syn_projector_view li { font-size: 1.5rem;
  line-height: 1.35; }
.st-key-syn_projector_view [data-testid="stWidgetLabel"] p { font-size: 1.2rem; }
.st-key-syn_projector_view .st-key-syn_step [data-testid="stWidgetLabel"] { display: none; }
.st-key-syn_projector_view [data-testid="stMetricLabel"] p { font-size: 1.35rem; }
.st-key-syn_projector_view [data-testid="stMetricValue"] p { font-size: 2.6rem;
  line-height: 1.15; }
.st-key-syn_projector_view [data-testid="stCaptionContainer"] p { font-size: 1.3rem; }
.st-key-syn_projector_view [data-testid="stSliderThumbValue"] p,
.st-key-syn_projector_view [data-testid="stSliderTickBarMin"] p,
.st-key-syn_projector_view [data-testid="stSliderTickBarMax"] p { font-size: 1.2rem; }
.st-key-syn_projector_view [data-testid="stSlider"] { padding-top: .5rem; }
.st-key-syn_projector_view [data-baseweb="select"] * { font-size: 1.3rem; }
.st-key-syn_projector_view [data-testid="stSelectbox"] input { font-size: 1.3rem; }
body:has(.st-key-syn_projector_view) [role="listbox"] [role="option"] { font-size: 1.3rem; }
.st-key-syn_projector_view blockquote { color: inherit; }
.st-key-syn_projector_view button p { font-size: 1.25rem; }
</style>"""
#: The normal layout: a smaller top margin, so the step's chart, its sliders beside it and its
#: numbers share the first screen at 1280 x 720 (browser screenshots, tests/e2e).
STORY_CSS = """<style>
[data-testid="stMainBlockContainer"]:has(.st-key-syn_story_view) { padding-top: 2.5rem; }
</style>"""
STORY_CHART_PX = 380
#: Sweep sampling budget: sum over the depths of L * N * d, three constructions each.
SWEEP_BUDGET = 4 * teaching.SAMPLE_BUDGET


def depth_grid(L_max: int) -> list[int]:
    """About ten depths from 2 to L_max, always including both ends."""
    return sorted({round(x) for x in np.geomspace(2, L_max, num=min(10, L_max - 1))} | {L_max})


def apply_preset() -> None:
    """on_change of the preset box: write the preset's step and knobs into the widgets."""
    name = st.session_state["syn_preset"]
    if name in teaching.PRESETS:
        step, knobs = teaching.PRESETS[name]
        st.session_state["syn_step"] = step
        for field, key in KNOB_KEYS.items():
            st.session_state[key] = getattr(knobs, field)


def init_defaults() -> None:
    """The widgets' first values: the step and the layout from the link when it names them
    (a reload, a shared address), else step 1 in the normal layout; the default knobs."""
    defaults = teaching.Knobs()
    if "syn_step" not in st.session_state:
        step = teaching.STEP_KEYS[0]
        if "step" in st.query_params:
            try:
                step = teaching.step_for(st.query_params["step"])
            except DeffError as err:
                st.info(f"{err} Showing step 1.", icon="ℹ️")
        st.session_state["syn_step"] = step
    if "syn_projector" not in st.session_state:
        st.session_state["syn_projector"] = st.query_params.get("layout") == "projector"
    for field, key in KNOB_KEYS.items():
        st.session_state.setdefault(key, getattr(defaults, field))


@st.cache_data(show_spinner=False, max_entries=16)
def sampled_sweep(n: int, d: int, L_max: int, scale: float, metric: str, seed: int) -> pd.DataFrame:
    """D_eff/L and rho(1) of every buildable construction, sampled at each depth."""
    from deffcore.measures import synthetic
    from deffcore.measures.depth import effective_depth
    from deffcore.measures.similarity import similarity_matrix

    rows = []
    for L in depth_grid(L_max):
        built = {
            "independent states": synthetic.independent_states(n, d, L, seed=seed),
            teaching.UPDATES_ON_H0: synthetic.orthogonal_updates(n, d, L, scale=scale, seed=seed),
        }
        if n > L:  # orthogonal states need one centred direction per layer
            built["orthogonal states"] = synthetic.orthogonal_states(n, d, L, seed=seed)
        for name, s in built.items():
            S = similarity_matrix(s.states, metric)
            rows.append(
                {
                    "construction": name,
                    "L": L,
                    "deff_over_L": effective_depth(S) / L,
                    "rho1": float(lag_profile(S)[0]),
                }
            )
    return pd.DataFrame(rows)


def story_knobs(step: str, per_row: int = 6) -> teaching.Knobs:
    """The story's sliders (those the step does not use are greyed out) -> its knobs; rows of
    `per_row` (six above the projector's chart, two in the column beside the normal chart)."""
    active = teaching.active_knobs(step)
    c = [col for _ in range(6 // per_row) for col in st.columns(per_row)]
    L = c[0].slider("L (layers)", 2, 64, key=KNOB_KEYS["L"])
    h0, growth, rho = (
        col.slider(
            label,
            low,
            high,
            step=step_size,
            key=KNOB_KEYS[field],
            disabled=field not in active,
            help=help_text,
        )
        for col, (field, label, low, high, step_size, help_text) in zip(
            c[1:4], STORY_SLIDERS, strict=True
        )
    )
    n = c[4].select_slider(
        "N (passages)",
        N_OPTIONS,
        key=KNOB_KEYS["n"],
        help="Used at step 6 and when sampling.",
    )
    d = c[5].select_slider(
        "d (features)", D_OPTIONS, key=KNOB_KEYS["d"], help="Used at step 6 and when sampling."
    )
    return teaching.Knobs(
        L=int(L), h0=float(h0), growth=float(growth), rho=float(rho), n=int(n), d=int(d)
    )


def story_metrics(res: teaching.StepResult, columns: int = 2) -> None:
    """The step's numbers: D_eff, D_eff/L, F_L and the gap, in rows of `columns`."""
    gap_words = figures.regime_label(res.gap_pct) if abs(res.gap_pct) >= 0.05 else "= F_L"
    cells = [
        ("D_eff", f"{res.deff:.3f}", "Effective number of layers, L²/ΣS"),
        ("D_eff / L", f"{res.deff / res.knobs.L:.3f}", None),
        ("F_L = 2L/(L+1)", f"{res.F_L:.3f}", "Accumulated equal orthogonal updates"),
        ("Gap to F_L", f"{res.gap_pct:+.1f}%", gap_words),
    ]
    for start in range(0, len(cells), columns):
        for col, (label, value, why) in zip(
            st.columns(columns), cells[start : start + columns], strict=False
        ):
            col.metric(label, value, help=why)


def story_text(res: teaching.StepResult) -> None:
    """What changes, what to notice, the step's notes, the previous D_eff, the summary."""
    st.markdown(f"**What changes:** {res.adds}  \n**What to notice:** {res.takeaway}")
    for note in res.notes:
        st.info(note, icon="ℹ️")
    if res.deff_previous is not None:
        st.caption(f"Previous step's D_eff: {res.deff_previous:.3f}")
    st.markdown(f"> {res.summary()}")


def story_sample(step: str, res: teaching.StepResult) -> Any:
    """Sampling on request, stored with the settings it was drawn for -> the samples or None."""
    sample_key = (step, res.knobs)
    sampled = st.session_state.get("syn_sampled")
    if sampled is not None and sampled[0] != sample_key:
        sampled = None
    row = st.columns([1, 3])
    if row[0].button("Sample this step", key="syn_sample", help="Draw N × d random data"):
        refusal = teaching.sampling_refusal(res.knobs, res.knobs.n, res.knobs.d)
        if refusal:
            row[1].info(refusal, icon="ℹ️")
        else:
            with st.spinner("Sampling and measuring…"):
                out = teaching.sample_step(step, res.knobs, res.knobs.n, res.knobs.d)
            st.session_state["syn_sampled"] = (sample_key, out)
            st.rerun()  # the charts above are drawn again with the samples
    if sampled is None:
        row[1].caption(
            f"Draws L = {res.knobs.L} states of N = {res.knobs.n} passages × d = "
            f"{res.knobs.d} features and measures them with linear and unbiased CKA."
        )
    return sampled[1] if sampled else None


BIAS_NOTE = (
    "Why a sampled curve can sit below F_L: linear CKA on N passages of d features reads "
    "unrelated states as about b = d/(N+d) alike, not 0. Every similarity is pulled up "
    "towards 1 by b — expected CKA ≈ (1−b)·S + b — so D_eff comes out lower than the closed "
    "form at N → ∞. Unbiased CKA removes this (its samples follow the N → ∞ curve, with more "
    "scatter)."
)


def story_identity(res: teaching.StepResult) -> dict[str, Any]:
    """What a story chart's downloads carry: the step and its knobs."""
    k = res.knobs
    return {"view": "synthetic-story", "step": res.step, "L": k.L, "h0": k.h0, "g": k.growth,
            "rho": k.rho, "N": k.n, "d": k.d}  # fmt: skip


def story_figures(res: teaching.StepResult, samples: Any, projector: bool) -> dict:
    curves, depths = teaching.story_curves(res, samples)
    out = {
        "lag": figures.story_lag_profiles(curves, L=res.knobs.L, bias=res.bias),
        "heatmap": figures.similarity_heatmap(
            res.S, metric="CKA", pooling="closed form", title=f"S(i, j), closed form: {res.title}"
        ),
        "depth": figures.story_depth_bars(depths, F_L=res.F_L, L=res.knobs.L),
    }
    out["heatmap"].update_layout(height=420)
    out["lag"].update_layout(height=STORY_CHART_PX)
    if projector:  # every text large: readable from the back of a room
        for fig in out.values():
            figures.projector(fig, PROJECTOR_FONT_PX)
        out["lag"].update_layout(height=PROJECTOR_CHART_PX)  # above the fold at 1280 x 720
    figures.legend_above(out["lag"], short=True)  # never over a curve, two names a row
    return out


def story_tab() -> None:
    """The teaching story: the step (by name), the preset and the layout on one line, the
    step's sliders, then its chart with its numbers beside it, so the chart and the sliders
    that move it share the first screen at 1280 x 720; more charts and samples below. The
    projector layout (`PROJECTOR_CSS`) sets every text of the step large and puts the lesson
    in one sentence above the chart. The step and the layout live in the link
    (`link_state`), so a reload or a shared address opens the same view."""
    init_defaults()
    projector = bool(st.session_state.get("syn_projector"))
    st.html(PROJECTOR_CSS if projector else STORY_CSS)  # our own constants: no user text
    with st.container(key="syn_projector_view" if projector else "syn_story_view"):
        top = st.columns([5, 2] if projector else [4, 3, 2], vertical_alignment="bottom")
        step = top[0].selectbox(
            "Story step",
            teaching.STEP_KEYS,
            key="syn_step",
            format_func=lambda s: teaching.STEPS[s][0],
            help=STEP_HELP,
        )
        if not projector:
            preset_box(top[1])
        top[-1].toggle("Projector layout", key="syn_projector", help=PROJECTOR_HELP)
        link_state(step, projector)
        with guarded("The story step"):
            if projector:  # the sliders in one row above the lesson and the chart
                knobs = story_knobs(step, per_row=6)
            else:  # the sliders beside the chart, above its numbers
                left, right = st.columns([3, 2])
                with right:
                    knobs = story_knobs(step, per_row=2)
            res = teaching.story_step(step, knobs)
            samples = sampled_for(step, res)
            figs = story_figures(res, samples, projector)
            ident = story_identity(res)
            if projector:
                st.markdown(res.lesson)
                left, right = st.columns([3, 1])
            with left:
                show_figure(figs["lag"], "lag_profile", ident)
            with right:
                story_metrics(res, columns=1 if projector else 2)
                if not projector:
                    story_text(res)
            if projector:
                preset_box(st)
                story_text(res)
            story_more(res, step, figs, ident, projector)


def link_state(step: str, projector: bool) -> None:
    """The step and the layout into the link (`?step=3&layout=projector`); other parameters
    of the link are left as they are."""
    st.query_params["step"] = str(teaching.step_number(step))
    if projector:
        st.query_params["layout"] = "projector"
    elif "layout" in st.query_params:
        del st.query_params["layout"]


def preset_box(where: Any) -> None:
    where.selectbox(
        "Preset",
        [CUSTOM, *teaching.PRESETS],
        key="syn_preset",
        on_change=apply_preset,
        help="Sets the story step and every slider at once.",
    )


def sampled_for(step: str, res: teaching.StepResult) -> Any:
    """The samples drawn for exactly this step and knobs, if any (`story_sample` draws them)."""
    sampled = st.session_state.get("syn_sampled")
    return sampled[1] if sampled is not None and sampled[0] == (step, res.knobs) else None


def story_more(res: Any, step: str, figs: dict, ident: dict, projector: bool) -> None:
    """The similarity map and the depth bars, sampling, and the bias note where it applies."""
    if projector:
        show_figure(figs["heatmap"], "heatmap", ident)
        show_figure(figs["depth"], "depth_bars", ident)
    else:  # side by side at one height, so their downloads line up
        tall = max(figs["heatmap"].layout.height or 0, figs["depth"].layout.height or 0)
        left, right = st.columns(2)
        with left:
            show_figure(figs["heatmap"].update_layout(height=tall), "heatmap", ident)
        with right:
            show_figure(figs["depth"].update_layout(height=tall), "depth_bars", ident)
    samples = story_sample(step, res)
    if step == "finite_sample" or samples is not None:  # the note applies to this step only
        st.caption(BIAS_NOTE)


def sweep_tab(settings: Settings) -> None:
    """Three constructions over depth: closed forms, samples on request, updates vs states."""
    st.markdown(
        "Three constructions over depth. Lines: the closed forms of **linear CKA** at this N "
        "and d (bias included). Press *Sample the sweep* to overlay samples measured with the "
        f"sidebar's metric (now **{settings.metric}**)."
    )
    c1, c2, c3, c4 = st.columns(4)
    sw_n = c1.select_slider("N (passages)", N_OPTIONS[:8], value=256, key="syn_n")
    sw_d = c2.select_slider("d (features)", D_OPTIONS[:7], value=64, key="syn_d")
    L_max = c3.slider("L (deepest)", 3, 48, 24, key="syn_L")
    scale = c4.slider("update scale s", 0.05, 5.0, 1.0, step=0.05, key="syn_scale")
    with guarded("The synthetic sweep"):
        grid = depth_grid(L_max)
        table = pd.DataFrame(teaching.sweep_closed_form(sw_n, sw_d, grid, scale=float(scale)))
        sampled_table = sweep_samples(sw_n, sw_d, L_max, float(scale), settings.metric)
        ident = {"view": "synthetic-sweep", "N": sw_n, "d": sw_d, "L_max": L_max, "s": scale}
        show_figure(
            figures.synthetic_sweep(table, n=sw_n, d=sw_d, sampled=sampled_table),
            "depth_sweep",
            ident,
        )
        sweep_numbers(table, sw_n, L_max)
        if sampled_table is not None:
            with st.expander("Sampled values"):
                st.dataframe(human_columns(sampled_table), hide_index=True, key="syn_sampled_tbl")
        updates_vs_states(sw_n, sw_d, L_max, float(scale))


def sweep_samples(n: int, d: int, L_max: int, scale: float, metric: str) -> pd.DataFrame | None:
    """The sweep's samples when asked for these settings and within the budget, else None.

    Samples belong to the settings they were asked for: moving a slider afterwards shows the
    closed forms alone again (fast), until the button is pressed again."""
    cost = sum(depth_grid(L_max)) * n * d * 3
    request = (n, d, L_max, scale, metric)
    if st.button("Sample the sweep", key="syn_sweep_sample"):
        st.session_state["syn_sweep_request"] = request
    if st.session_state.get("syn_sweep_request") != request:
        return None
    if cost > SWEEP_BUDGET:
        st.info(
            f"Sampling this sweep means {cost / 1e6:.0f} million random numbers, beyond "
            f"the classroom budget of {SWEEP_BUDGET / 1e6:.0f} million (a few seconds); "
            "the lines are exact in expectation. Lower N, d or L to sample.",
            icon="ℹ️",
        )
        return None
    with st.spinner("Sampling the three constructions…"):
        return sampled_sweep(n, d, L_max, scale, metric, 0)


def sweep_numbers(table: pd.DataFrame, n: int, L_max: int) -> None:
    deepest = table[table["L"] == L_max].set_index("construction")
    cols = st.columns(3)
    for col, name in zip(cols, figures.CONSTRUCTION_COLORS, strict=True):
        value = deepest.loc[name, "deff_over_L"]
        col.metric(
            f"{name}: D_eff/L at L = {L_max}",
            f"{value:.4f}" if np.isfinite(value) else "needs N > L",
            help=f"ρ̂(1) = {deepest.loc[name, 'rho1']:.4f} (closed form, linear CKA)",
        )
    if n <= L_max:
        st.info(
            f"Orthogonal states need N > L (one direction per layer); with N = {n} they "
            f"exist only up to L = {n - 1}.",
            icon="ℹ️",
        )
    st.caption(
        "Why orthogonal updates on h_0 sit below the dashed F_L/L: they start from a random h_0 "
        "as large as one update at s = 1, which every state shares, and linear CKA adds "
        "its finite-sample bias d/(N+d). F_L is the limit of large s and N ≫ d. Independent "
        "states follow the vermillion dotted iid reference: that is the bias alone, not depth."
    )


def updates_vs_states(n: int, d: int, L_max: int, scale: float) -> None:
    st.subheader("Updates vs accumulated states")
    u = teaching.updates_vs_states(n, d, L_max, scale)
    ident = {"view": "synthetic-sweep", "N": n, "d": d, "L": L_max, "s": scale}
    show_figure(
        figures.states_vs_updates(u["rho_states"], u["rho_updates"]), "updates_vs_states", ident
    )
    st.caption(
        f"L = {L_max}, closed forms: D_eff(h)/L = {u['deff_states'] / L_max:.4f} for the "
        f"accumulated states, D_eff(f)/L = {u['deff_updates'] / L_max:.4f} for the updates "
        f"themselves (F_L/L = {2 / (L_max + 1):.4f})."
    )


def formulas() -> None:
    with st.expander("The formulas", expanded=False):
        st.markdown("**Effective depth** from the lag profile of the similarity matrix:")
        st.latex(
            r"\rho(k) = \frac{1}{L-k}\sum_{i=1}^{L-k} S(i,i+k),\qquad "
            r"D_\mathrm{eff} = \frac{L}{1 + 2\sum_{k=1}^{L-1}(1-\tfrac{k}{L})\,\rho(k)}"
            r" = \frac{L^2}{\sum_{i,j} S(i,j)}"
        )
        st.markdown(
            "**Accumulated updates** with sizes $a_m$, a persistent $h_0$ of size $a_0$ and update "
            "correlations $r(k)$ (SPEC section 5):"
        )
        st.latex(
            r"G_{ij} = a_0 + \sum_{m\le i,\,n\le j} r(|m-n|)\sqrt{a_m a_n},\qquad "
            r"S(i,j) = \frac{G_{ij}^2}{G_{ii}G_{jj}}"
        )
        st.markdown("Equal sizes, no $h_0$, unrelated updates:")
        st.latex(r"S(i,j) = \frac{\min(i,j)}{\max(i,j)} \;\Rightarrow\; F_L = \frac{2L}{L+1} < 2")
        st.markdown(
            "**Finite-sample bias** of linear CKA on N passages of d isotropic features (derived "
            "in `deffcore/measures/teaching.py`, checked against sampling):"
        )
        st.latex(
            r"\mathbb{E}[\mathrm{CKA}_{ij}] \approx (1-b)\,S(i,j) + b,\qquad b = \frac{d}{N+d},"
            r"\qquad D_\mathrm{iid} = \frac{L}{1 + b\,(L-1)}"
        )
        st.markdown(
            "**Orthogonal states** have mutually orthogonal column spaces, so CKA between "
            "different layers is exactly 0 (no bias) and $D_\\mathrm{eff}/L = 1$."
        )


def words_used() -> None:
    with st.expander("Words used on this page"):
        st.markdown(
            glossary_markdown(
                [
                    "D_eff",
                    "D_eff/L",
                    "F_L",
                    "gap",
                    "more redundant than orthogonal updates",
                    "less redundant than orthogonal updates",
                    "lag profile",
                    "ρ̂(1)",
                    "CKA",
                    "unbiased CKA",
                    "finite-sample bias",
                    "iid reference",
                    "h_0",
                    "independent states",
                    "orthogonal updates",
                    "orthogonal updates on h_0",
                    "orthogonal states",
                    "growing update norms",
                    "correlated updates",
                ]
            )
        )


def main() -> None:
    _, settings = page("Synthetic lab", uses_metric=False)
    init_defaults()  # the link's step and layout, before the title
    if not st.session_state.get("syn_projector"):  # the projector's first screen: the step
        st.title("Synthetic lab")
        st.caption(
            "Constructions whose effective depth is known exactly, in linear CKA (the paper's "
            "metric): every curve is a closed form, so the sliders answer at once; *Sample* "
            "draws real random data of that size and measures it with the models' code."
        )
    story, sweep = st.tabs(["Teaching story", "Free sweep"])
    with story:
        story_tab()
    with sweep:
        sweep_tab(settings)
    formulas()
    words_used()


main()
