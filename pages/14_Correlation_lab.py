"""Correlation lab (paper Tables S18, S20, S21, Figure S6): a depth number across models against
a per-model quantity, with the robustness rows the paper reports."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from deffcore.core.errors import DeffError
from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.labs import correlation_lab, lens_figures, lens_tables
from deffcore.labs.panels import MAX_SWEEP_BYTES, SOURCES, X_QUANTITIES
from deffcore.labs.scores import MAX_BYTES, check_upload, read_scores
from deffcore.runs.measure import display
from deffcore.views.glossary import human_columns, human_label
from explorer.cards import show_figure
from explorer.page import page
from explorer.uploads import save_upload
from explorer.views import cached_runs

KINDS = {
    "pruning": "Pruning tolerance (stored pruning checks)",
    "scores": "Benchmark scores (a CSV you upload)",
    "geometry": "Geodesic efficiency (cached runs)",
    "atlas": "Depth-use atlas (runs with an atlas)",
}
SOURCE_LABELS = {"cached": "cached runs", "sweep": "a sweep result file", "paper": "the paper"}
EXAMPLE = "model,task,score,family\nLlama-3.1-8B,MMLU,66.7,Llama\nQwen3-8B,MMLU,76.9,Qwen\n..."


@st.cache_data(show_spinner=False)
def s18_check() -> dict[str, Any]:
    return correlation_lab.s18_check()


@st.cache_data(show_spinner=False, max_entries=64)
def geometry(runs: tuple[tuple[str, str], ...], x: str, metric: str) -> dict[str, Any]:
    """`geometry_correlations` once per set of cached runs (`runs`: their keys and times)."""
    return correlation_lab.geometry_correlations(x=x, metric=metric)


def uploaded(
    label: str, types: list[str], key: str, what: str, max_bytes: int = MAX_BYTES
) -> dict[str, str] | None:
    """A file uploader whose file is checked and stored (.uploads): {path, name} or None; a
    refused file is its sentence on the page."""
    upload = st.file_uploader(label, type=types, key=key)
    if upload is None:
        return None
    try:
        path = save_upload(
            upload.name,
            upload.getvalue(),
            check=lambda name, data: check_upload(name, data, what, max_bytes),
        )
    except DeffError as err:
        st.error(md_escape(err))
        return None
    return {"path": path, "name": upload.name}


def pruning_form() -> dict[str, Any]:
    c1, c2 = st.columns(2)
    x = c1.radio("x", ["deff_over_L", "gap_pct"], format_func=human_label, key="cl_pr_x",
                 horizontal=True)  # fmt: skip
    with_paper = c2.checkbox(
        "Add the paper's Table S17 models", value=True, key="cl_pr_paper",
        help="Their published D_eff/L and k₁.₁₀ beside this machine's stored checks (two "
        "settings mixed: an illustration of the structure, not a finding).",
    )  # fmt: skip
    st.caption(
        "One point per model: the stored pruning check with the most held-out passages (run "
        "checks on the Pruning boundary page, `python -m deffcore pruning`, or `sweep "
        "--pruning`); x is the D_eff/L of the check's own measured passages."
    )
    return correlation_lab.pruning_correlations(x=x, with_paper=with_paper)


def scores_form(metric: str) -> dict[str, Any] | None:
    st.caption("A CSV with a header row and the columns model, task, score (optional: family):")
    st.code(EXAMPLE, language="text")
    scores = uploaded("Scores CSV", ["csv"], "cl_scores", "scores file")
    c1, c2, c3 = st.columns(3)
    x = c1.selectbox("x", X_QUANTITIES, format_func=human_label, key="cl_sc_x")
    sources = c2.multiselect("Panel: x from", SOURCES, default=list(SOURCES),
                             format_func=SOURCE_LABELS.get, key="cl_sc_sources")  # fmt: skip
    ignore = c3.checkbox("Leave out scored models the panel lacks", key="cl_sc_ignore")
    sweep = None
    if "sweep" in sources:
        sweep = uploaded("Sweep result (optional: `sweep --json` output or a CSV)",
                         ["json", "csv"], "cl_sc_sweep", "sweep file", MAX_SWEEP_BYTES)  # fmt: skip
    if scores is None:
        st.info("Upload a scores file to correlate it with the panel's depth numbers.")
        return None
    names = {f["path"]: f["name"] for f in (scores, sweep) if f}
    try:
        table = read_scores(scores["path"])
        return correlation_lab.score_correlations(
            table, x=x, sources=sources or list(SOURCES), metric=metric, ignore_unknown=ignore,
            sweep_file=sweep["path"] if sweep else None,
        )  # fmt: skip
    except DeffError as err:  # the user's file names, never the stored paths
        st.error(md_escape(display(str(err), names)))
        return None


def geometry_form(metric: str) -> dict[str, Any]:
    x = st.selectbox("x", X_QUANTITIES, format_func=human_label, key="cl_geo_x")
    st.caption(
        "One point per cached run of trained weights (model–dataset pairs, as Figure S6), "
        f"similarity metric {metric} (the sidebar's); the efficiency is defined in SPEC 13."
    )
    runs = tuple((m["key"], str(m.get("created", ""))) for m in cached_runs())
    return geometry(runs, x, metric)


@st.cache_data(show_spinner=False, max_entries=64)
def atlas_correlations(runs: tuple[tuple[str, str], ...], x: str, metric: str) -> dict[str, Any]:
    """`atlas_correlations` once per set of cached runs (`runs`: their keys and times)."""
    return correlation_lab.atlas_correlations(x=x, metric=metric)


def atlas_form(metric: str) -> dict[str, Any]:
    x = st.selectbox("x", X_QUANTITIES, format_func=human_label, key="cl_atlas_x")
    st.caption(
        "One point per model whose run carries a depth-use atlas (this machine's cached runs, "
        "then the shipped precomputed ones), x from the same run; y: the share of blocks past "
        "the phase point, the mean Block Influence of the second half, the depth Gromov et al. "
        "keep at a 10% angular budget (over L), the late-over-early relative contribution "
        "(SPEC 16; the Depth use page shows one run's atlas)."
    )
    runs = tuple((m["key"], str(m.get("created", ""))) for m in cached_runs())
    out = atlas_correlations(runs, x, metric)
    cols = ["model", "source", "n", x, *correlation_lab.ATLAS_Y]
    frame = pd.DataFrame([{k: r.get(k) for k in cols} for r in out["panel"]], columns=cols)
    st.dataframe(human_columns(frame), hide_index=True, key="cl_atlas_panel")
    return out


def result_section(kind: str, i: int, result: dict[str, Any]) -> None:
    title = result.get("task") or human_label(result.get("y", ""))
    st.subheader(md_escape(title))  # a task is the user's text
    if "skipped" in result:
        st.info(md_escape(result["skipped"]))
        return
    for warning in result["warnings"]:
        st.warning(md_escape(warning))
    st.dataframe(lens_tables.correlation_summary(result), hide_index=True)
    fig = lens_figures.correlation_scatter(
        result, x_title=str(human_label(result["x"])), y_title=str(human_label(result["y"]))
    )
    what = result["y"] if kind != "scores" else f"task{i + 1}"  # a task name is no file name
    show_figure(fig, "scatter", {"lab": "correlation", "panel": kind, "y": what})
    with st.expander("Leave one out, leave one family out, the points"):
        st.caption("Every model left out in turn; Table S18 drops the two extreme-x ones.")
        st.dataframe(lens_tables.leave_one_out(result), hide_index=True)
        if result["lofo"]:
            st.caption("Every family left out in turn (those leaving at least 3 models).")
            st.dataframe(lens_tables.leave_one_family_out(result), hide_index=True)
        st.dataframe(lens_tables.points_frame(result), hide_index=True)


def results_section(kind: str, out: dict[str, Any]) -> None:
    if out.get("unknown_models"):
        st.info("Left out (not in the panel): " + md_escape(", ".join(out["unknown_models"])))
    for i, result in enumerate(out["results"]):
        result_section(kind, i, result)
    if kind == "scores":
        with st.expander("The paper's Tables S20 and S21 (published correlations only)"):
            for table, frame in lens_tables.published_scores(out["paper"]).items():
                st.caption(table)
                st.dataframe(frame, hide_index=True)
    if kind == "geometry":
        st.caption(
            f"Paper, Figure S6: Pearson r = {out['paper']['figure_s6_pearson_r']} over its "
            f"model–dataset pairs. {out['paper']['note']}"
        )


def s18_section() -> None:
    st.subheader("Table S18 from the paper's own values")
    check = s18_check()
    st.markdown(
        f"The paper prints six models' k₁.₁₀ (Table S17) but correlates eight. "
        f"**{check['agree']} of {check['total']}** printed values of Table S18 are reproduced "
        "to their printed precision with the two missing models added; their k₁.₁₀ is "
        "**inferred, not published**; the last column but one uses Table S17's six alone."
    )
    st.dataframe(lens_tables.s18_table(check), hide_index=True, key="cl_s18")
    st.warning(md_escape(lens_tables.s18_conflict_note(check)), icon=":material/report:")
    inferred = pd.DataFrame(check["inferred"])
    st.caption("The two models added (inferred, not published): " + check["note"])
    st.dataframe(human_columns(inferred), hide_index=True, key="cl_s18_inferred")


def main() -> None:
    _, settings = page("Correlation lab")
    st.title("Correlation lab")
    st.markdown(
        "Does a model's effective depth go with something else about it? One point per model: "
        "x a depth number (D_eff/L by default), y a per-model quantity. Pearson r and Spearman "
        "ρ with two-sided p (Spearman's exact for n ≤ 9), leave-one-out and leave-one-family-"
        "out rows, the scatter with its least-squares line. Few models make any such number "
        "fragile: the rows below say how much one model moves it."
    )
    kind = st.radio("y", list(KINDS), format_func=KINDS.get, key="cl_kind", horizontal=True)
    try:
        out = {"pruning": pruning_form, "scores": lambda: scores_form(settings.metric),
               "geometry": lambda: geometry_form(settings.metric),
               "atlas": lambda: atlas_form(settings.metric)}[kind]()  # fmt: skip
    except correlation_lab.TooFewModelsError as err:  # not a mistake: there is not enough yet
        st.info(md_escape(err))
        out = None
    except DeffError as err:
        st.error(md_escape(err))
        out = None
    if out is not None:
        results_section(kind, out)
    s18_section()


main()
