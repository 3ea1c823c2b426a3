"""Models: every cached run and the paper's models in one sortable table and plot, with filters
and export, and a form that runs a sweep (deffcore.sweep) in the background, its cells landing
on the page as they finish."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from deffcore import figures, jobs
from deffcore.constants import POOLINGS
from deffcore.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.sweep import Cell, cached_model_row, grid_cells, paper_models
from explorer.guard import guarded
from explorer.page import page
from explorer.settings import Settings, offline_models
from explorer.views import cached_runs

_JOB = "_models_sweep_job"
#: A sweep started from the browser is capped: the server is shared.
MAX_BROWSER_CELLS = 24
GAP_COLUMNS = [f"gap_{p}" for p in POOLINGS]


@st.cache_data(show_spinner=False, max_entries=1024)
def cached_row(key: str, created: str, metric: str, meta: dict[str, Any]) -> dict[str, Any]:
    """One cached run's row (its states read once per (run, metric); `created` re-keys it)."""
    return cached_model_row(meta, metric)


@st.cache_data(show_spinner=False)
def paper_table() -> pd.DataFrame:
    return pd.DataFrame(paper_models())


def model_table(metric: str) -> pd.DataFrame:
    rows = []
    with guarded("Reading the cached runs"):
        for meta in cached_runs():
            try:
                rows.append(cached_row(meta["key"], meta.get("created", ""), metric, meta))
            except Exception as err:  # one unreadable run must not hide the others
                st.warning(f"Run {meta.get('key')} skipped: {md_escape(err)}")
    table = pd.concat([paper_table(), pd.DataFrame(rows)], ignore_index=True, sort=False)
    for col in ("n", "max_tokens", "dataset", "intervention", "key", "created", "random_mean"):
        if col not in table:
            table[col] = None
    return table


def filtered(table: pd.DataFrame) -> pd.DataFrame:
    """The filter widgets applied to the table (and so to both charts and the export)."""
    c1, c2, c3, c4 = st.columns(4)
    sources = c1.multiselect(
        "Source", ["paper", "cached"], default=["paper", "cached"], key="models_sources"
    )
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


def table_section(shown: pd.DataFrame) -> None:
    columns = [
        # gap_default carries the default-pooling gap (gap_pct is the same number)
        *("source", "model", "family", "weights", "layers", "deff_over_L"),
        *GAP_COLUMNS,
        *("random_mean", "n", "max_tokens", "dataset", "intervention", "key"),
    ]
    columns = [c for c in columns if c in shown]
    st.dataframe(
        shown[columns],
        hide_index=True,
        width="stretch",
        column_config={
            "deff_over_L": st.column_config.NumberColumn("D_eff/L", format="%.4f"),
            "random_mean": st.column_config.NumberColumn("random null D_eff/L", format="%.4f"),
            **{
                c: st.column_config.NumberColumn(f"gap % {c[4:]}", format="%.1f")
                for c in GAP_COLUMNS
            },
        },
    )
    n_paper = int((shown["source"] == "paper").sum())
    st.caption(
        f"{len(shown)} rows ({n_paper} published, {len(shown) - n_paper} cached runs). Paper "
        "rows are the published values (deffcore/data/paper_reference.csv), measured on "
        "FineWeb-Edu; cached runs are this machine's measurements (N and tokens in their "
        "columns)."
    )
    st.download_button(
        "Export the table (CSV)",
        shown[columns].to_csv(index=False),
        file_name="models.csv",
        mime="text/csv",
    )


def gap_label(row: Any) -> str:
    """A model's label on the gap chart: source, and the intervention when there is one."""
    extra = (
        row.intervention if isinstance(row.intervention, str) and row.intervention != "none" else ""
    )
    return f"{row.model} ({row.source}{', ' + extra if extra else ''})"


def charts_section(shown: pd.DataFrame) -> None:
    st.plotly_chart(figures.models_depth_scatter(shown), width="stretch")
    gap_table = shown.assign(model=[gap_label(r) for r in shown.itertuples()])
    gap_table = gap_table.drop_duplicates("model")
    st.plotly_chart(figures.models_gap_by_pooling(gap_table, POOLINGS), width="stretch")


def sweep_form(settings: Settings) -> None:
    """The sweep form; a valid grid of at most MAX_BROWSER_CELLS cells goes to the job queue."""
    st.subheader("Run a sweep")
    st.caption(
        "Measures every combination below with the sidebar's dataset, N, max tokens and "
        "passage settings, one cell at a time in this server (engine serial) or as tasks on a "
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
    if snap["state"] in jobs.FINISHED and st.session_state.get(f"{_JOB}_shown") != job_id:
        st.session_state[f"{_JOB}_shown"] = job_id
        st.rerun(scope="app")  # the landed runs join the table and charts above


def pruning_tolerance_section() -> None:
    """Pruning tolerance per model (Table S17): this machine's stored pruning checks (the
    Pruning boundary page, `deffcore pruning`, `sweep --pruning`) beside the paper's; the model
    is never run here. (Imports kept local: this section is issue 20's, the page issue 19's.)"""
    from deffcore.labs import lens_figures, lens_tables
    from deffcore.labs.panels import paper_pruning_rows, stored_pruning_rows
    from explorer.cards import show_figure

    st.subheader("Pruning tolerance (Table S17)")
    stored = stored_pruning_rows()
    st.caption(
        f"{len(stored)} stored pruning check(s) on this machine (one per model: the one with "
        "the most held-out passages) beside the paper's models. f₁.₁₀ is the share of blocks "
        "that can be skipped, lowest Block Influence first, with perplexity within 1.10 × PPL₀"
        " (checks come from the Pruning boundary page, `deffcore pruning`, `sweep --pruning`)."
    )
    rows = [*stored, *paper_pruning_rows()]
    show_figure(lens_figures.pruning_tolerance_bars(rows), key="models_pruning_tolerance")
    st.dataframe(lens_tables.pruning_tolerance(rows), hide_index=True, key="models_pruning")


def main() -> None:
    _, settings = page("Models")
    st.title("Models")
    st.caption(
        "Every run in this machine's cache beside the paper's published models: D_eff/L "
        "against depth, the gap to F_L per pooling control, trained vs random weights. Sort by "
        "clicking a column; the filters apply to the table, both charts and the export."
    )
    shown = filtered(model_table(settings.metric))
    table_section(shown)
    charts_section(shown)
    sweep_form(settings)
    sweep_progress()
    pruning_tolerance_section()


main()
