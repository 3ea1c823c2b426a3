"""Models: the place to compare models. Every run (shipped precomputed, shared, cached here) and
the paper's models in one sortable table (N, trust level, bias per row) and two plots, with
filters, a caveat whenever the rows differ in trust, N, tokens or passages, an export, and a
form that runs a sweep (deffcore.work.sweep) in the background, its cells landing as they finish."""

from __future__ import annotations

import warnings
from typing import Any

import pandas as pd
import streamlit as st

from deffcore import figures
from deffcore.core.constants import POOLINGS
from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.inputs.interventions import PAPER_LABELS
from deffcore.labs import lens_figures, lens_tables
from deffcore.labs.panels import paper_pruning_rows, stored_pruning_rows
from deffcore.runs.tables import cached_model_row, model_row, models_table
from deffcore.views.comparisons import comparison_caveats
from deffcore.views.models_overview import paper_models, with_config_depth
from deffcore.work import job_state, jobs
from deffcore.work.sweep.cells import Cell, grid_cells
from explorer.background import rerun_once
from explorer.cards import download_table, show_figure
from explorer.guard import guarded
from explorer.page import page
from explorer.settings import Settings, offline_models
from explorer.tables import show_table
from explorer.views import cached_runs, precomputed_runs

_JOB = "_models_sweep_job"
#: A sweep started from the browser is capped: the server is shared.
MAX_BROWSER_CELLS = 24
GAP_COLUMNS = [f"gap_{p}" for p in POOLINGS]
SOURCES = ["paper", "precomputed", "shared", "cached"]
#: The table's columns, in order (the rest of a row stays in the export).
COLUMNS = [
    *("label", "trust", "n", "bias", "layers", "deff_over_L", "table", "gap_default"),
    *("source", "model", "family", "weights"),
    *(c for c in GAP_COLUMNS if c != "gap_default"),
    *("random_mean", "max_tokens", "passages", "bos", "dataset", "intervention", "key"),
]


@st.cache_data(show_spinner=False, max_entries=1024)
def cached_row(key: str, created: str, metric: str, meta: dict[str, Any]) -> dict[str, Any]:
    """One cached run's row (its states read once per (run, metric); `created` re-keys it)."""
    return cached_model_row(meta, metric)


@st.cache_data(show_spinner=False, max_entries=64)
def precomputed_rows(metric: str) -> list[dict[str, Any]]:
    """The runs shipped with the app, one row each (`precomputed_runs`: the default first)."""
    return [model_row(view, "precomputed", metric) for view in precomputed_runs()]


@st.cache_data(show_spinner=False)
def paper_rows() -> list[dict[str, Any]]:
    return with_config_depth(paper_models())  # Gemma-3: L from its config (the paper gives none)


def measured_rows(metric: str) -> list[dict[str, Any]]:
    """This machine's cached runs, the shared runs kept here, the shipped precomputed runs."""
    from deffcore.views.sharing import list_shared

    rows: list[dict[str, Any]] = []
    with guarded("Reading the cached runs"):
        for meta in cached_runs():
            try:
                rows.append(cached_row(meta["key"], meta.get("created", ""), metric, meta))
            except Exception as err:  # one unreadable run must not hide the others
                st.warning(md_escape(f"Run {meta.get('key')} skipped: {err}"))
    with guarded("Reading the shared runs"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a damaged kept file: the Runs page names it
        for view in list_shared():
            try:
                rows.append(model_row(view, "shared", metric))
            except Exception as err:  # one shared run must not hide the others
                st.warning(md_escape(f"Shared run {view.sha256[:16]} skipped: {err}"))
    with guarded("Reading the precomputed runs"):
        rows += precomputed_rows(metric)
    return rows


def model_table(metric: str) -> pd.DataFrame:
    """Every run once and the paper's models, labelled by what tells them apart."""
    table = pd.DataFrame(models_table(measured_rows(metric), paper_rows()))
    for col in COLUMNS:
        if col not in table:
            table[col] = None
    return table


def filtered(table: pd.DataFrame) -> pd.DataFrame:
    """The filter widgets applied to the table (and so to both charts and the export)."""
    c1, c2, c3, c4 = st.columns(4)
    sources = c1.multiselect("Source", SOURCES, default=SOURCES, key="models_sources")
    families = c2.multiselect(
        "Family", sorted(table["family"].dropna().unique()), default=[], key="models_families"
    )
    weights = c3.multiselect(
        "Weights", ["trained", "random"], default=["trained", "random"], key="models_weights"
    )
    text = c4.text_input("Model contains", "", key="models_text")
    shown = table[table["source"].isin(sources) & table["weights"].isin(weights)]
    if families:
        shown = shown[shown["family"].isin(families)]
    if text.strip():
        shown = shown[shown["model"].str.contains(text.strip(), case=False, regex=False)]
    return shown.reset_index(drop=True)


def caveats_section(shown: pd.DataFrame) -> None:
    """A warning whenever the rows shown together differ in trust, N, tokens or passages."""
    rows = [
        {k: (None if v != v else v) for k, v in r.items()}  # NaN: not known for this row
        for r in shown[["label", "trust", "n", "max_tokens", "passages"]].to_dict("records")
    ]
    caveats = comparison_caveats(rows)
    if caveats:
        st.warning(md_escape("Read these rows side by side with care. " + " ".join(caveats)))


def table_section(shown: pd.DataFrame, metric: str) -> None:
    columns = [c for c in COLUMNS if c in shown]
    show_table(
        shown[columns],
        hide_index=True,
        width="stretch",
        column_config={
            "label": st.column_config.TextColumn("run", pinned=True),
            "n": st.column_config.NumberColumn("N", format="%d"),
            "trust": st.column_config.TextColumn(
                "trust", help="solid / indicative / noise (the trust rule); published: paper"
            ),
            "bias": st.column_config.NumberColumn("CKA bias d/(N+d)", format="%.3f"),
            "deff_over_L": st.column_config.NumberColumn("D_eff/L", format="%.4f"),
            "table": st.column_config.TextColumn(
                "D_eff/L from", help="the paper's table, or how it was derived"
            ),
            "random_mean": st.column_config.NumberColumn("random null D_eff/L", format="%.4f"),
            **{
                c: st.column_config.NumberColumn(f"gap % {c[4:]}", format="%.1f")
                for c in GAP_COLUMNS
            },
        },
    )
    n_paper = int((shown["source"] == "paper").sum())
    st.caption(
        f"{len(shown)} rows ({n_paper} published, {len(shown) - n_paper} measured runs). Paper "
        "rows are the published values (deffcore/data/paper_reference.csv), measured on "
        "N = 10,000 FineWeb-Edu passages; the others are runs shipped with the app "
        "(precomputed), shared with you, or measured on this machine (cached). Each run is "
        "named by what tells it apart from the others."
    )
    export = shown.drop(columns=["spec"], errors="ignore")
    download_table(
        export, "models_table", {"view": "models", "metric": metric, "rows": len(shown)},
        label="Export the table (CSV)",
    )  # fmt: skip


def charts_section(shown: pd.DataFrame, metric: str) -> None:
    tag = {"view": "models", "metric": metric, "rows": len(shown)}
    # one chart per row: both carry long legends or labels that a half page would cut
    show_figure(figures.models_depth_scatter(shown), "depth_scatter", tag)
    gap_table = shown.assign(model=shown["label"]).drop_duplicates("model")
    show_figure(figures.models_gap_by_pooling(gap_table, POOLINGS), "gap_by_pooling", tag)
    left_out = sorted(
        set(gap_table["model"]) - set(figures.with_a_gap(gap_table, POOLINGS)["model"])
    )
    if left_out:
        st.caption(
            md_escape(
                f"Not in this chart (no gap published or measured for any pooling): "
                f"{', '.join(left_out)}."
            )
        )


def sweep_form(settings: Settings) -> None:
    """The sweep form; a valid grid of at most MAX_BROWSER_CELLS cells goes to the job queue."""
    st.subheader("Run a sweep")
    st.caption(
        "Measures every combination below with the Runs page's run settings (now "
        f"{md_escape(settings.dataset or '(no data)')}, N = {settings.n:,}, "
        f"{settings.max_tokens} tokens, {settings.passages}), one cell at a time in this "
        "server (engine serial) or as tasks on a "
        "local Ray runtime (engine ray). Cells already cached are read, not recomputed. "
        "Offline models only; for a cluster use `python -m deffcore sweep --address` (README, "
        "Running on a cluster)."
    )
    with st.form("sweep_form"):
        models = st.multiselect(
            "Models", list(offline_models()), default=["tiny-llama"], key="sweep_models"
        )
        f1, f2, f3 = st.columns(3)
        seeds_text = f1.text_input("Random-weight seeds (comma-separated)", "", key="sweep_seeds")
        trained = f1.checkbox("Include the trained weights", value=True, key="sweep_trained")
        interventions = f2.multiselect(
            "Norm interventions",
            ["none", "no_post", "no_qk", "no_post_no_qk"],
            default=["none"],
            key="sweep_interventions",
            format_func=lambda name: PAPER_LABELS[name],  # the same words on every page
        )
        engine = f3.radio("Engine", ["serial", "ray"], horizontal=True, key="sweep_engine")
        launched = st.form_submit_button("Run the sweep", type="primary")
    if launched:
        with guarded("Starting the sweep"):
            start_sweep(settings, models, seeds_text, trained, interventions or ["none"], engine)


def start_sweep(
    settings: Settings,
    models: list[str],
    seeds_text: str,
    trained: bool,
    interventions: list[str],
    engine: str,
) -> None:
    try:
        seeds = [int(s) for s in seeds_text.split(",") if s.strip()]
    except ValueError:
        shown = md_escape(repr(seeds_text))
        st.error(f"Random seeds must be comma-separated integers, got {shown}.")
        return
    cells: list[Cell] = grid_cells(
        models,
        random_seeds=seeds,
        trained=trained,
        interventions=interventions,
        datasets=[settings.dataset],
    )
    if len(cells) > MAX_BROWSER_CELLS:
        st.error(
            f"{len(cells)} cells is more than the {MAX_BROWSER_CELLS} a browser sweep "
            "may hold; use `python -m deffcore sweep` for larger grids."
        )
        return
    st.session_state[_JOB] = jobs.start_sweep(
        cells, **settings.shared_options(), engine=engine, num_cpus=2
    )


@st.fragment(run_every=1.5)
def sweep_progress() -> None:
    """The session's sweep: a bar over cells and each landed cell, polled while it runs."""
    job_id = st.session_state.get(_JOB)
    snap = jobs.sweep_job(job_id) if job_id else None
    if snap is None:
        return
    st.progress(
        snap["landed"] / max(snap["total"], 1),
        text=f"{snap['landed']} of {snap['total']} cells landed · {snap['state']} · "
        f"{snap['elapsed_s']:.0f} s" + (f" · engine {snap['engine']}" if snap["engine"] else ""),
    )
    if snap["state"] in ("queued", "running"):
        st.button(
            "Cancel the sweep",
            key="sweep_cancel",
            on_click=jobs.cancel,
            args=(job_id,),
            help="Stops before the next cell; the cells that landed stay in the cache.",
        )
    if snap["error"]:
        st.error(md_escape(snap["error"]))
    if snap["rows"]:
        landed = pd.DataFrame(snap["rows"])
        cols = ["label", "status", "deff_over_L", "gap_pct", "seconds", "worker", "error"]
        st.dataframe(landed[[c for c in cols if c in landed]], hide_index=True, width="stretch")
    if snap["state"] in job_state.FINISHED:
        rerun_once(_JOB, job_id)  # the landed runs join the table and charts above


def pruning_tolerance_section() -> None:
    """Pruning tolerance per model (Table S17): this machine's stored pruning checks (the
    Pruning boundary page, `deffcore pruning`, `sweep --pruning`) beside the paper's; the model
    is never run here."""

    st.subheader("Pruning tolerance (Table S17)")
    stored = stored_pruning_rows()
    st.caption(
        f"{len(stored)} stored pruning check(s) on this machine (one per model: the one with "
        "the most held-out passages) beside the paper's models. f₁.₁₀ is the share of blocks "
        "that can be skipped, lowest Block Influence first, with perplexity within 1.10 × PPL₀"
        " (checks come from the Pruning boundary page, `deffcore pruning`, `sweep --pruning`)."
    )
    rows = [*stored, *paper_pruning_rows()]
    show_figure(lens_figures.pruning_tolerance_bars(rows), "pruning_tolerance", {"view": "models"})
    show_table(lens_tables.pruning_tolerance(rows), hide_index=True, key="models_pruning")


def main() -> None:
    _, settings = page("Models")
    st.title("Models")
    st.caption(
        "The place to compare models: the runs shipped with the app, shared with you and "
        "measured here, beside the paper's published models, each with its N, trust level and "
        "CKA bias. Sort by clicking a column; the filters apply to the table, both charts and "
        "the export."
    )
    shown = filtered(model_table(settings.metric))
    caveats_section(shown)
    table_section(shown, settings.metric)
    charts_section(shown, settings.metric)
    sweep_form(settings)
    sweep_progress()
    pruning_tolerance_section()


main()
