"""The explorer's shared Streamlit helpers: sidebar, session state, running and showing results.

`app.py` calls `sidebar()` on every rerun before the selected page runs (st.navigation), so the
sidebar and its widget state are shared by all pages. Pages call `current()` for the run and
the view settings, then draw with `deffcore.figures` and `show_figure`.

Caching: the expensive step (the forward pass) is cached on disk by `deffcore.cache`, keyed by
model, data, N, max tokens and seed. Pooling, metric and K are *view* settings: changing them
only recomputes an L x L similarity (memoised in the `Measurement`) or a sum over it, never the
model. Until the user presses Run, the view is the shipped snapshot of the default run.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from deffcore import figures
from deffcore.constants import METRICS, POOLINGS
from deffcore.errors import DeffError
from deffcore.paper import paper_reference_path
from deffcore.snapshot import MeasurementView, RunView, SnapshotView, load_snapshot
from deffcore.snapshot import run_label as run_label  # re-exported for the pages

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_DATASET = "bbc-news"
DEFAULT_N = 512
DEFAULT_MAX_TOKENS = 128

MODEL_SOURCES = ("Packaged (offline)", "Hugging Face id", "Local path", "Random-weight null")
DATA_SOURCES = ("BBC news (offline)", "Hugging Face dataset", "Upload a file", "Local file")
POOLING_HELP = {
    "default": "mean over all tokens, position 0 included",
    "first_non_bos": "the state at position 1 only",
    "token_normed": "each token state L2-normalised, then the mean",
    "top1_pc": "default pooling with the top principal direction projected out",
    "top3_pc": "default pooling with the top 3 principal directions projected out",
}
_VIEW_KEY = "deff_view"
_PAGE_CHANGED = "_deff_page_changed"


@dataclass
class Settings:
    """The sidebar's values: what to measure (run settings) and how to look at it (view)."""

    model: str
    revision: str | None
    dataset: str
    n: int
    max_tokens: int
    seed: int
    pooling: str
    metric: str
    K: int | None


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def guarded(what: str = "This step") -> Iterator[None]:
    """Show bad input as one clear error on the page instead of a traceback; the app goes on.

    DeffError text is already a complete sentence for a person. Anything else (a torch error,
    an OSError) is unexpected: name its type so it can be reported.
    """
    try:
        yield
    except DeffError as err:
        st.error(str(err))
    except MemoryError:
        st.error(f"{what} ran out of memory; lower N or max tokens and try again.")
    except Exception as err:  # keep the app usable whatever a third-party library raises
        st.error(f"{what} failed unexpectedly ({type(err).__name__}): {err}")


# ---------------------------------------------------------------------------------------------
# Model and data choices
# ---------------------------------------------------------------------------------------------


def offline_models() -> dict[str, str]:
    """Packaged models, then the tiny random-init demo models: spec -> description."""
    from deffcore import models

    choices = dict(models.PACKAGED_MODELS)
    tiny = models.TINY_MODELS
    for name in tiny:
        choices[name] = tiny[name] if isinstance(tiny, dict) else "tiny random-init model (demo)"
    return choices


def persisted(widget: Any, label: str, key: str, default: Any, **kwargs: Any) -> Any:
    """A sidebar widget whose value survives page switches.

    Every page is its own script (the pages/ folder), and Streamlit drops a widget's state when
    a run does not draw it (and a page's widget is a new widget even under the same key), so
    the value is mirrored under `_keep_<key>` and restored into the widget's key before it is
    drawn on the first run of a page (the widget gets no `value=`/`index=` of its own, which
    would conflict with the restored state).
    """
    keep = f"_keep_{key}"
    if key not in st.session_state or (
        st.session_state.get(_PAGE_CHANGED) and keep in st.session_state
    ):
        st.session_state[key] = st.session_state.get(keep, default)
    value = widget(label, key=key, **kwargs)
    st.session_state[keep] = value
    return value


def _model_spec() -> tuple[str, str | None]:
    source = persisted(
        st.radio, "Model source", "model_source", MODEL_SOURCES[0], options=MODEL_SOURCES
    )
    choices = offline_models()
    if source == MODEL_SOURCES[0]:
        spec = persisted(
            st.selectbox,
            "Model",
            "model_packaged",
            DEFAULT_MODEL,
            options=list(choices),
            format_func=lambda s: f"{s} — {choices[s]}",
        )
        return spec, None
    if source == MODEL_SOURCES[1]:
        spec = persisted(
            st.text_input, "Hugging Face id", "model_hf", "", placeholder="EleutherAI/pythia-70m"
        )
        revision = persisted(st.text_input, "Revision (optional)", "model_revision", "") or None
        return spec.strip(), revision
    if source == MODEL_SOURCES[2]:
        spec = persisted(
            st.text_input,
            "Local folder or .gguf file",
            "model_path",
            "",
            placeholder="/models/my-model",
        )
        return spec.strip(), None
    base = persisted(
        st.selectbox, "Architecture of", "model_random_base", DEFAULT_MODEL, options=list(choices)
    )
    seed = persisted(st.number_input, "Init seed", "model_random_seed", 1, min_value=0, step=1)
    return f"random:{base}:{int(seed)}", None


def _save_upload(upload: Any) -> str:
    """Write an uploaded file into the cache folder, named by its content hash, so the same
    upload is the same dataset spec (and cache key) in every session."""
    from deffcore.cache import cache_dir

    data = upload.getvalue()
    digest = hashlib.sha256(data).hexdigest()[:16]
    folder = Path(cache_dir()) / ".uploads"  # dot: list_runs skips it
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{digest}_{Path(upload.name).name}"
    if not path.exists():
        path.write_bytes(data)
    return str(path)


def _dataset_spec() -> str:
    source = persisted(
        st.radio, "Dataset source", "data_source", DATA_SOURCES[0], options=DATA_SOURCES
    )
    if source == DATA_SOURCES[0]:
        return DEFAULT_DATASET
    if source == DATA_SOURCES[1]:
        spec = persisted(
            st.text_input,
            "hf:<name>[:<config>]:<split>[:<column>]",
            "data_hf",
            "",
            placeholder="hf:wikitext:wikitext-103-raw-v1:test:text",
        )
        return spec.strip()
    column = persisted(
        st.text_input, "Text column (csv/jsonl/parquet; optional)", "data_column", ""
    )
    if source == DATA_SOURCES[2]:
        # an upload cannot be restored into a widget; the saved path is kept instead
        upload = st.file_uploader(
            "Passages file", type=["txt", "jsonl", "csv", "parquet"], key="data_upload"
        )
        if upload is not None:
            st.session_state["_keep_upload_path"] = _save_upload(upload)
        path = st.session_state.get("_keep_upload_path", "")
        if path:
            st.caption(f"Using {Path(path).name.split('_', 1)[-1]}")
    else:
        path = persisted(
            st.text_input, "Path", "data_path", "", placeholder="/data/passages.jsonl"
        ).strip()
    return f"{path}:{column.strip()}" if path and column.strip() else path


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------


def progress_callback(bar: Any) -> Any:
    """measure's progress(done, total, stage) -> the bar's fraction, stage and ETA."""
    start = time.monotonic()

    def progress(done: int, total: int, stage: str) -> None:
        frac = min(max(done / total, 0.0), 1.0) if total else 0.0
        elapsed = time.monotonic() - start
        eta = f" · ETA {elapsed * (total - done) / done:.0f} s" if done and total > done else ""
        bar.progress(frac, text=f"{stage}: {done}/{total}{eta}")

    return progress


_progress_callback = progress_callback  # the name the first pages used


def run_measurement(settings: Settings, *, progress_bar: Any = None) -> RunView | None:
    """Measure (or read from the cache) and make it the session's current run."""
    from deffcore.measurement import measure

    if not settings.model:
        st.error("Enter a model (Hugging Face id or local path) before pressing Run.")
        return None
    if not settings.dataset:
        st.error("Choose a dataset (a Hugging Face spec, an uploaded file or a path) first.")
        return None
    view = None
    with guarded("The run"):
        m = measure(
            model=settings.model,
            revision=settings.revision,
            dataset=settings.dataset,
            n=settings.n,
            max_tokens=settings.max_tokens,
            seed=settings.seed,
            metric=settings.metric,
            progress=progress_callback(progress_bar) if progress_bar is not None else None,
        )
        view = MeasurementView(m)
        st.session_state[_VIEW_KEY] = view
    return view


def cached_runs() -> list[dict[str, Any]]:
    """Meta of every readable cached run, newest first (`deffcore.cache.list_runs`)."""
    from deffcore import cache

    return [m for m in cache.list_runs() if not m.get("corrupt") and "spec" in m]


def measurement_from_cache(key: str) -> Any:
    """The `Measurement` of a cached run, read from disk (the model is not run)."""
    from deffcore import cache
    from deffcore.measurement import Measurement

    meta = cache.load_meta(key)
    spec = cache.RunSpec(**meta["spec"])
    pooled = cache.load(spec)
    if pooled is None:
        raise DeffError(
            f"The cached run {key} can no longer be read (its model, data or code version "
            "changed, or the entry is damaged); run it again from the sidebar."
        )
    return Measurement(spec=spec, pooled=pooled, cached=True, meta=meta)


def open_run(key: str) -> RunView | None:
    """Make a cached run the session's current run."""
    view = None
    with guarded(f"Opening run {key}"):
        view = MeasurementView(measurement_from_cache(key))
        st.session_state[_VIEW_KEY] = view
    return view


def set_view(view: RunView) -> None:
    """Make `view` the session's current run (every page shows it)."""
    st.session_state[_VIEW_KEY] = view


def forget_run(key: str) -> None:
    """After a delete: drop the session's run if it was that one (the snapshot stays)."""
    view = st.session_state.get(_VIEW_KEY)
    if view is not None and getattr(view, "key", None) == key:
        del st.session_state[_VIEW_KEY]


@st.cache_data(show_spinner=False, max_entries=512)
def cached_result(key: str, created: str, pooling: str, metric: str) -> dict[str, Any]:
    """Headline numbers and lag profile of a cached run (memoised: the states are read once
    per (run, pooling, metric); `created` makes a recomputed entry a new cache line)."""
    view = MeasurementView(measurement_from_cache(key))
    h = view.headline(pooling, metric)
    return {**h.to_dict(), "rho": view.lag_profile(pooling, metric)}


@st.cache_resource(show_spinner=False)
def default_snapshot() -> SnapshotView | None:
    return load_snapshot()


def current_view() -> RunView | None:
    """The run pressed last in this session, else the shipped default snapshot."""
    return st.session_state.get(_VIEW_KEY) or default_snapshot()


# ---------------------------------------------------------------------------------------------
# Sidebar
# ---------------------------------------------------------------------------------------------


def sidebar() -> Settings:
    """Draw the shared sidebar; press Run here. Returns the settings (also kept in state)."""
    with st.sidebar:
        st.header("Measure")
        model, revision = _model_spec()
        dataset = _dataset_spec()
        c1, c2 = st.columns(2)
        with c1:
            n = persisted(st.number_input, "N passages", "n", DEFAULT_N, min_value=4, step=32)
        with c2:
            max_tokens = persisted(
                st.number_input, "Max tokens", "max_tokens", DEFAULT_MAX_TOKENS, min_value=2
            )
        seed = persisted(st.number_input, "Sample seed", "seed", 0, min_value=0)
        run_clicked = st.button("Run", type="primary", key="run", width="stretch")
        settings = Settings(
            model=model,
            revision=revision,
            dataset=dataset,
            n=int(n),
            max_tokens=int(max_tokens),
            seed=int(seed),
            pooling="default",
            metric="cka",
            K=None,
        )
        if run_clicked:
            bar = st.progress(0.0, text="starting")
            if run_measurement(settings, progress_bar=bar) is not None:
                bar.progress(1.0, text="done")

        st.header("View")
        st.caption("Changing these never re-runs the model.")
        settings.pooling = persisted(
            st.radio,
            "Pooling control",
            "pooling",
            POOLINGS[0],
            options=POOLINGS,
            help="\n".join(f"- **{k}**: {v}" for k, v in POOLING_HELP.items()),
        )
        settings.metric = persisted(
            st.selectbox,
            "Metric",
            "metric",
            METRICS[0],
            options=METRICS,
            help="linear CKA (default), unbiased CKA (no finite-sample bias), mean cosine",
        )
        view = current_view()
        if view is not None and view.layers > 2:
            L = view.layers
            settings.K = persisted(
                st.slider, "Maximum lag K", f"K_L{L}", L - 1, min_value=1, max_value=L - 1
            )
        if view is not None:
            tag = "precomputed" if view.source == "precomputed" else "measured"
            st.caption(f"Current run ({tag}): {view.label}")
    return settings


def page(title: str) -> tuple[RunView | None, Settings]:
    """Start a page: page config, the shared sidebar; returns (the current run, settings)."""
    st.set_page_config(
        page_title=f"{title} · Effective Depth Explorer", page_icon="📐", layout="wide"
    )
    st.session_state[_PAGE_CHANGED] = st.session_state.get("_deff_page") != title
    st.session_state["_deff_page"] = title
    settings = sidebar()
    return current_view(), settings


# ---------------------------------------------------------------------------------------------
# Showing results
# ---------------------------------------------------------------------------------------------


def precomputed_note(view: RunView) -> None:
    if isinstance(view, SnapshotView):
        st.info(
            f"Precomputed with `{view.command}`; press **Run** to compute it here "
            f"(about 1–2 minutes on a CPU for N = {view.n}).",
            icon="ℹ️",
        )


def headline_cards(view: RunView, settings: Settings) -> None:
    """D_eff, D_eff/L, gap to F_L, rho_hat(1), position-0 ratio, N, CKA bias (one row)."""
    h = view.headline(settings.pooling, settings.metric, settings.K)
    cols = st.columns(7)
    cols[0].metric("D_eff", f"{h.deff:.3f}", help=f"K = {h.K}, L = {h.layers}")
    cols[1].metric("D_eff / L", f"{h.deff_over_L:.4f}")
    sub = h.gap_pct > 0
    cols[2].metric(
        "Gap to F_L",
        f"{h.gap_pct:+.1f}%",
        delta="sub-reference" if sub else "above reference",
        delta_color="red" if sub else "green",
        delta_arrow="off",
        help=f"100 (1 - D_eff / F_L), F_L = 2L/(L+1) = {h.reference_FL:.4f}; positive: D_eff < "
        "F_L, more redundancy than accumulated orthogonal updates",
    )
    cols[3].metric("ρ̂(1)", f"{h.rho1:.4f}")
    cols[4].metric("Pos-0 norm ratio", f"{h.pos0_ratio:.1f}x", help=f"peak at layer {h.pos0_layer}")
    cols[5].metric("N", f"{h.n}", help=f"d = {h.d_model}, L = {h.layers}")
    cols[6].metric("CKA bias d/(N+d)", f"{h.cka_bias:.3f}")
    if h.n < 10 * h.d_model and settings.metric == "cka":
        st.warning(
            f"N = {h.n} is not much larger than d = {h.d_model}: linear CKA between unrelated "
            f"layers would still be about d/(N+d) = {h.cka_bias:.3f}, which inflates similarity "
            "and lowers D_eff. Use more passages or switch the metric to unbiased_cka."
        )


def show_figure(fig: go.Figure, key: str, *, on_select: str = "ignore", **kwargs: Any) -> Any:
    """Plot a figure with HTML and CSV downloads (built on click, so reruns stay fast)."""
    event = st.plotly_chart(fig, key=key, on_select=on_select, **kwargs)
    row = st.container(horizontal=True)
    row.download_button(
        "Figure (HTML)",
        data=lambda: figures.figure_html(fig),
        file_name=f"{key}.html",
        mime="text/html",
        key=f"{key}_html",
        on_click="ignore",
    )
    row.download_button(
        "Data (CSV)",
        data=lambda: figures.figure_csv(fig),
        file_name=f"{key}.csv",
        mime="text/csv",
        key=f"{key}_csv",
        on_click="ignore",
    )
    return event


def require_view(title: str) -> tuple[RunView, Settings] | None:
    """Start a page that needs a run: the run and settings, or a message and None."""
    view, settings = page(title)
    st.title(title)
    if view is None:
        st.warning("No run yet: choose a model and dataset in the sidebar and press Run.")
        return None
    if isinstance(view, SnapshotView):
        st.caption(
            "ℹ️ Showing the shipped precomputed default run (see the first page); press **Run** "
            "in the sidebar to measure your own model and data."
        )
    return view, settings


@st.cache_data(show_spinner=False)
def _read_paper(path: str, mtime: float) -> pd.DataFrame:
    return pd.read_csv(path)


def paper_table() -> pd.DataFrame | None:
    """The paper's published values (display only), or None when the CSV is not found."""
    path = paper_reference_path()
    return None if path is None else _read_paper(str(path), path.stat().st_mtime)


def paper_default_gaps(paper: pd.DataFrame) -> pd.DataFrame:
    """One published default-pooling gap per model (no intervention), as in the paper's Figure 1.

    Table 2 first, then the appendix tables for models that Table 2 lacks (Gemma, Mistral, ...).
    """
    order = ["Table 2", "Table S4", "Table S5", "Table S6", "Table S17"]
    pub = paper[
        (paper["quantity"] == "gap_pct")
        & (paper["setting"] == "default")
        & (paper["note"].isna() | (paper["note"] == "intervention: none"))
        & paper["source"].isin(order)
    ].copy()
    pub["rank"] = pub["source"].map(order.index)
    return pub.sort_values("rank").drop_duplicates("model", keep="first").drop(columns="rank")


def model_family(spec: str) -> str:
    """`Pythia-70M` -> `Pythia`, `EleutherAI/pythia-70m` -> `pythia`, `random:x:1` -> `random`."""
    if spec.startswith("random:"):
        return "random-weight null"
    name = spec.rstrip("/").split("/")[-1].removesuffix(".gguf")
    return re.sub(r"-[^-]*\d[^-]*$", "", name) if "-" in name else name
