"""The explorer's shared Streamlit helpers: sidebar, session state, background runs, results.

Every page starts with `page()` (or `require_view()`): it draws the shared sidebar (Run and the
run settings at the top, view controls below, a glossary at the bottom; values persist across
pages), shows the session's background run in the main area, and returns the current run and
the settings. Pages then draw with `deffcore.figures` and `show_figure`.

Runs: Run checks the settings, the model path and the data (`deffcore.jobs.plan`, before any
model loads; messages name the user's own file) and hands the run to `deffcore.jobs`, whose
worker thread lives in the server process, so switching pages or reloading does not stop it.
The session keeps the job id (and the URL's `?job=` query parameter, for a reload); the main
area polls it with `st.fragment(run_every=...)`: stage, passages, tokens/s, ETA, Cancel. When
the job lands, its result is read back from the cache by key and becomes the current run,
with a notice (and "served from the cache" when it was).

Caching: the expensive step (the forward pass) is cached on disk by `deffcore.cache`, keyed by
model, data, N, max tokens, seed, passages mode and BOS option. Pooling, metric and K are *view*
settings: changing them only recomputes an L x L similarity (memoised in the `Measurement`) or
a sum over it, never the model. Until a run lands, the view is the shipped default snapshot.
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

from deffcore import figures, jobs, serving
from deffcore.constants import BOS_OPTIONS, METRICS, PASSAGE_MODES, POOLINGS, WINDOW_MODES
from deffcore.errors import DeffError
from deffcore.paper import paper_reference_path
from deffcore.snapshot import MeasurementView, RunView, SnapshotView, load_snapshot
from deffcore.snapshot import run_label as run_label  # re-exported for the pages
from deffcore.trust_rule import Trust, trust_badge

DEFAULT_MODEL = "smollm2-135m"
#: The one demo model listed by default; the other tiny test models behind a checkbox.
DEMO_MODEL = "tiny-llama"
DEFAULT_DATASET = "bbc-news"
DEFAULT_N = 512
#: Extraction speed used for time estimates (SmolLM2-135M, quiet 2-core CPU, BENCHMARKS.md).
CPU_TOKENS_PER_S = 600
DEFAULT_MAX_TOKENS = 128

MODEL_SOURCES = ("Packaged (offline)", "Hugging Face id", "Local path", "Random-weight null")
DATA_SOURCES = ("BBC news (offline)", "Hugging Face dataset", "Upload a file", "Local file")
PASSAGES_HELP = (
    "documents: one passage per document, its first max-tokens tokens. windows: every "
    "document cut into consecutive windows of max-tokens tokens (many more passages from the "
    "same text; SPEC section 12). packed: all documents joined with a blank line, then cut "
    "the same way (a window may span two documents; a few more windows at long lengths)."
)
BOS_HELP = (
    "default: the tokenizer's own special tokens. add: a BOS token at the start of every "
    "passage. none: no BOS token (the model sees the text alone)."
)
POOLING_HELP = {
    "default": "mean over all tokens, position 0 included",
    "first_non_bos": "the state at position 1 only",
    "token_normed": "each token state L2-normalised, then the mean",
    "no_pos0": "mean over the tokens after position 0",
    "top1_pc": "default pooling with the top principal direction projected out",
    "top3_pc": "default pooling with the top 3 principal directions projected out",
}
#: Uploads kept in <cache>/.uploads (newest first); older ones that are provably ours go.
MAX_UPLOADS = 8
_UPLOAD_NAME = re.compile(r"[0-9a-f]{16}_.+")
#: How long the Run click's own script run waits for its job before the polling fragment
#: takes over (a cache hit lands at once). AppTest has no browser to poll: it waits for the
#: job unless the session sets `_deff_run_wait_s` (tests of the background behaviour do).
RUN_GRACE_S = 1.5
POLL_S = 1.0

_VIEW_KEY = "deff_view"
_PAGE_CHANGED = "_deff_page_changed"
_JOB_KEY = "_deff_job"
_JUST_STARTED = "_deff_job_started"
_NOTICE = "_deff_notice"
_RUN_ERROR = "_deff_run_error"
_UPLOAD = "_deff_upload"  # {"file_id", "path", "name"} of the current upload, or {"error"}


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
    passages: str = "documents"
    bos: str = "default"
    #: the local dataset path typed by the user (checked against DEFF_LOCAL_PATHS), if any
    local_data: str | None = None


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
    """Packaged models first, then the tiny random-init demo models: spec -> description."""
    from deffcore import models

    choices = dict(models.PACKAGED_MODELS)
    tiny = models.TINY_MODELS
    for name in tiny:
        choices[name] = tiny[name] if isinstance(tiny, dict) else "tiny random-init model (demo)"
    return choices


def model_choice_label(spec: str, description: str) -> str:
    """How a model appears in the list: tiny test models are marked as the demo group."""
    from deffcore import models

    if spec in models.TINY_MODELS:
        return f"demo · {spec} — {description}"
    return f"{spec} — {description}"


def persisted(widget: Any, label: str, key: str, default: Any, **kwargs: Any) -> Any:
    """A sidebar widget whose value survives page switches.

    Every page is its own script, and Streamlit drops a widget's state when a run does not
    draw it (and a page's widget is a new widget even under the same key), so the value is
    mirrored under `_keep_<key>` and restored into the widget's key before it is drawn on the
    first run of a page (the widget gets no `value=`/`index=` of its own, which would conflict
    with the restored state). A kept value that is no longer among `options` falls back to
    `default` (e.g. a source the server's DEFF_LOCAL_PATHS setting hides).
    """
    keep = f"_keep_{key}"
    options = kwargs.get("options")
    if options is not None and st.session_state.get(keep, default) not in list(options):
        st.session_state[keep] = default
        st.session_state.pop(key, None)
    if key not in st.session_state or (
        st.session_state.get(_PAGE_CHANGED) and keep in st.session_state
    ):
        st.session_state[key] = st.session_state.get(keep, default)
    if options is not None and st.session_state[key] not in list(options):
        st.session_state[key] = default
    value = widget(label, key=key, **kwargs)
    st.session_state[keep] = value
    return value


def _model_spec() -> tuple[str, str | None]:
    local = serving.local_path_policy().allowed
    sources = [s for s in MODEL_SOURCES if local or s != "Local path"]
    source = persisted(st.radio, "Model source", "model_source", MODEL_SOURCES[0], options=sources)
    choices = offline_models()
    if source == MODEL_SOURCES[0]:
        from deffcore import models

        all_demo = persisted(
            st.checkbox,
            "More demo models",
            "model_all_demo",
            False,
            help="Tiny random-init test models of every architecture (4 blocks, d = 64): "
            "they run in seconds but measure nothing real.",
        )
        kept = st.session_state.get("_keep_model_packaged", DEFAULT_MODEL)
        shown = [
            m for m in choices if m in models.PACKAGED_MODELS or m in (DEMO_MODEL, kept) or all_demo
        ]
        spec = persisted(
            st.selectbox,
            "Model",
            "model_packaged",
            DEFAULT_MODEL,
            options=shown,
            format_func=lambda s: model_choice_label(s, choices[s]),
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
        st.selectbox,
        "Architecture of",
        "model_random_base",
        DEFAULT_MODEL,
        options=list(choices),
        format_func=lambda s: model_choice_label(s, choices[s]),
    )
    seed = persisted(st.number_input, "Init seed", "model_random_seed", 1, min_value=0, step=1)
    return f"random:{base}:{int(seed)}", None


def _upload_folder() -> Path:
    from deffcore.cache import cache_dir

    return Path(cache_dir()) / ".uploads"  # dot: never listed as a run


def _is_our_upload(path: Path) -> bool:
    """A file we wrote: in .uploads/, named `<first 16 hex of its sha256>_<name>`, not a link."""
    if path.is_symlink() or not path.is_file() or not _UPLOAD_NAME.fullmatch(path.name):
        return False
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16] == path.name[:16]


def prune_uploads(keep: set[str] = frozenset()) -> int:  # type: ignore[assignment]
    """Remove all but the MAX_UPLOADS newest uploads (never one in `keep` or used by an active
    job, never a file that is not provably ours); returns how many went."""
    folder = _upload_folder()
    if not folder.is_dir():
        return 0
    candidates = [f for f in folder.iterdir() if _UPLOAD_NAME.fullmatch(f.name)]
    candidates.sort(key=lambda f: f.stat().st_mtime, reverse=True)
    in_use = {str(j.spec.dataset) for j in jobs.active_jobs()}
    removed = 0
    for f in candidates[MAX_UPLOADS:]:
        busy = any(u == str(f) or u.startswith(f"{f}:") for u in in_use)
        if str(f) in keep or busy or not _is_our_upload(f):
            continue
        f.unlink(missing_ok=True)
        removed += 1
    return removed


def save_upload(name: str, data: bytes) -> str:
    """Check an upload (empty or binary: DeffError naming `name`) and store it in the cache's
    .uploads/ under its content hash, so the same upload is the same dataset (and cache key)
    in every session; older uploads are pruned. Returns the stored path."""
    shown = Path(name).name
    serving.check_upload(shown, data)
    folder = _upload_folder()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}_{shown}"
    if path.exists():
        path.touch()  # newest again: pruning keeps it
    else:
        path.write_bytes(data)
    prune_uploads(keep={str(path)})
    return str(path)


def upload_names() -> dict[str, str]:
    """Stored upload path -> the user's file name (for messages)."""
    up = st.session_state.get(_UPLOAD) or {}
    return {up["path"]: up["name"]} if up.get("path") else {}


def _dataset_spec() -> tuple[str, str | None]:
    """(dataset spec, the local path the user typed or None)."""
    local = serving.local_path_policy().allowed
    sources = [s for s in DATA_SOURCES if local or s != "Local file"]
    source = persisted(st.radio, "Dataset source", "data_source", DATA_SOURCES[0], options=sources)
    if source == DATA_SOURCES[0]:
        return DEFAULT_DATASET, None
    if source == DATA_SOURCES[1]:
        spec = persisted(
            st.text_input,
            "hf:<name>[:<config>]:<split>[:<column>]",
            "data_hf",
            "",
            placeholder="hf:wikitext:wikitext-103-raw-v1:test:text",
        )
        return spec.strip(), None
    column = persisted(
        st.text_input, "Text column (csv/jsonl/parquet; optional)", "data_column", ""
    )
    typed = None
    if source == DATA_SOURCES[2]:
        # an upload cannot be restored into a widget; the stored path is kept instead
        upload = st.file_uploader(
            "Passages file", type=["txt", "jsonl", "csv", "parquet"], key="data_upload"
        )
        up = st.session_state.get(_UPLOAD) or {}
        if upload is not None and up.get("file_id") != upload.file_id:
            try:
                path = save_upload(upload.name, upload.getvalue())
                up = {"file_id": upload.file_id, "path": path, "name": Path(upload.name).name}
            except DeffError as err:
                up = {"file_id": upload.file_id, "error": str(err)}
            st.session_state[_UPLOAD] = up
        if up.get("error"):
            st.error(up["error"])
        path = up.get("path", "")
        if path:
            st.caption(f"Using {up['name']}")
    else:
        typed = persisted(
            st.text_input, "Path", "data_path", "", placeholder="/data/passages.jsonl"
        ).strip()
        path = typed
    spec = f"{path}:{column.strip()}" if path and column.strip() else path
    return spec, typed or None


@st.cache_data(show_spinner=False, max_entries=256)
def windows_available(
    model: str,
    dataset: str,
    max_tokens: int,
    bos: str,
    revision: str | None,
    passages: str = "windows",
) -> int | None:
    """How many token windows this choice yields (`deffcore.tokens.count_windows`, tokenizer
    only), None when it cannot be told here (hub data, a tokenizer that does not load)."""
    from deffcore import tokens

    count = getattr(tokens, "count_windows", None)
    if count is None or not model or not dataset or dataset.startswith("hf:"):
        return None
    try:
        return int(count(model, dataset, max_tokens, bos, revision, mode=passages))
    except Exception:  # the Run click reports the real error, checked before the model loads
        return None


# ---------------------------------------------------------------------------------------------
# Running: background jobs (deffcore.jobs)
# ---------------------------------------------------------------------------------------------


def progress_callback(bar: Any) -> Any:
    """measure's progress(done, total, stage) -> the bar's fraction, stage and ETA (the labs'
    in-page runs)."""
    start = time.monotonic()

    def progress(done: int, total: int, stage: str) -> None:
        frac = min(max(done / total, 0.0), 1.0) if total else 0.0
        elapsed = time.monotonic() - start
        eta = f" · ETA {elapsed * (total - done) / done:.0f} s" if done and total > done else ""
        bar.progress(frac, text=f"{stage}: {done}/{total}{eta}")

    return progress


_progress_callback = progress_callback  # the name the first pages used


def _check_data_input(dataset: str, local_data: str | None) -> None:
    """DEFF_LOCAL_PATHS: refuse a dataset file the server does not allow, and a path typed
    where a Hugging Face dataset spec belongs (it would be read as a file)."""
    if local_data:
        serving.check_local_path(local_data, what="dataset file")
    ds = dataset
    uploaded = any(ds == p or ds.startswith(f"{p}:") for p in upload_names())
    typed_hf = ds != DEFAULT_DATASET and not local_data and not uploaded
    if ds and typed_hf and not ds.startswith("hf:"):
        raise DeffError(
            f"A Hugging Face dataset spec starts with 'hf:' (got {ds!r}); choose Upload a "
            "file or Local file for a file."
        )


def start_run(settings: Settings) -> str | None:
    """Check the run's settings, model path and data (before any model loads) and start it in
    the background; the session follows the job. Returns the job id, None after an error
    (kept for the main area: it names the user's own file)."""
    names = upload_names()
    if st.session_state.get("_deff_refused"):
        return None  # the sidebar already says why (a path the server does not read)
    try:
        if not settings.model:
            raise DeffError("Enter a model (Hugging Face id or local path) before pressing Run.")
        if not settings.dataset:
            up = st.session_state.get(_UPLOAD) or {}
            raise DeffError(
                up.get("error")
                or "Choose a dataset (a Hugging Face spec, an uploaded file or a path) first."
            )
        windows = None
        if settings.passages in WINDOW_MODES:
            windows = windows_available(
                settings.model,
                settings.dataset,
                settings.max_tokens,
                settings.bos,
                settings.revision,
                settings.passages,
            )
        spec, device = jobs.plan(
            names=names,
            windows=windows,
            model=settings.model,
            revision=settings.revision,
            dataset=settings.dataset,
            n=settings.n,
            max_tokens=settings.max_tokens,
            seed=settings.seed,
            metric=settings.metric,
            passages=settings.passages,
            bos=settings.bos,
        )
        job_id = jobs.start(spec, metric=settings.metric, device=device, names=names, checked=True)
    except DeffError as err:
        st.session_state[_RUN_ERROR] = jobs.display(str(err), names)
        return None
    except MemoryError:
        st.session_state[_RUN_ERROR] = "The run ran out of memory; lower N or max tokens."
        return None
    except Exception as err:  # keep the app usable whatever a third-party library raises
        msg = f"The run could not start ({type(err).__name__}): {err}"
        st.session_state[_RUN_ERROR] = jobs.display(msg, names)
        return None
    follow_job(job_id)
    return job_id


def follow_job(job_id: str) -> None:
    """Make `job_id` the session's run in progress (shown on every page until it lands)."""
    st.session_state[_JOB_KEY] = job_id
    st.session_state[_JUST_STARTED] = True
    st.query_params["job"] = job_id  # a reload of this URL finds the job again


def resume_run(key: str) -> str | None:
    """Restart the run of a partial (interrupted) cache entry in the background; it continues
    from its last finished batch. DeffError when `key` is not an interrupted run."""
    job_id = jobs.start(jobs.partial_spec(key))
    follow_job(job_id)
    return job_id


def _session_job() -> str | None:
    job_id = st.session_state.get(_JOB_KEY)
    if job_id is None:
        from_url = st.query_params.get("job")
        if from_url and jobs.status(from_url) is not None:
            job_id = st.session_state[_JOB_KEY] = from_url
    return job_id


def _drop_job() -> None:
    st.session_state.pop(_JOB_KEY, None)
    st.session_state.pop(_JUST_STARTED, None)
    if "job" in st.query_params:
        del st.query_params["job"]


def _settle_job() -> None:
    """If the session's job finished: its result becomes the current run (read back from the
    cache by key) and its notice waits for the main area."""
    job_id = _session_job()
    status = jobs.status(job_id) if job_id else None
    if job_id and status is None:  # the server restarted: the cache still has what finished
        _drop_job()
    if status is None or not status.finished:
        return
    _drop_job()
    if status.state == "done":
        try:
            view = MeasurementView(jobs.load_result(status.result_key))
        except DeffError as err:
            st.session_state[_NOTICE] = ("error", str(err))
            return
        set_view(view)
        if status.from_cache:
            how = "served from the cache"
        else:
            how = f"measured in {status.elapsed_s:.0f} s"
            if status.tokens_per_s:
                how += f" ({status.tokens_per_s:,.0f} tokens/s)"
            if status.resumed:
                how += f", {status.resumed:,} passages resumed from an interrupted run"
        st.session_state[_NOTICE] = ("success", f"Run finished: {view.label} — {how}.")
    elif status.state == "cancelled":
        kept = jobs.kept_passages(status.spec)
        st.session_state[_NOTICE] = (
            "info",
            f"Run cancelled: {run_label(status.spec.__dict__)}. "
            + (
                f"{kept:,} finished passages are kept as an interrupted run: Run with the same "
                "settings (or Resume on the Runs page) continues from there."
                if kept
                else "No finished batch had been saved yet; nothing is kept."
            ),
        )
    else:
        st.session_state[_NOTICE] = ("error", status.error or "The run failed.")


def _grace_s() -> float:
    override = st.session_state.get("_deff_run_wait_s")
    if override is not None:
        return float(override)
    # AppTest patches `streamlit.config.get_option` (not `st.get_option`, bound at import)
    from streamlit import config as st_config

    return 3600.0 if st_config.get_option("global.appTest") else RUN_GRACE_S


def _draw_progress(status: jobs.JobStatus, *, cancel: bool) -> None:
    with st.container(border=True):
        st.markdown(f"**Running:** {run_label(status.spec.__dict__)}")
        frac = status.done / status.total if status.stage == "extracting" and status.total else 0
        st.progress(min(max(frac, 0.0), 1.0), text=status.describe())
        if cancel:
            st.button(
                "Cancel run",
                key="job_cancel",
                on_click=jobs.cancel,
                args=(status.job_id,),
                disabled=status.cancel_requested,
                help="Stops before the next batch; finished batches are kept for a resume.",
            )
        st.caption(
            "The run goes on in the background: switch pages or reload, it keeps going and "
            "becomes the current run when it lands."
        )


@st.fragment(run_every=POLL_S)
def _job_fragment(job_id: str) -> None:
    status = jobs.status(job_id)
    if status is None or status.finished:
        st.rerun(scope="app")  # lands on a full run: every page element shows the result
    _draw_progress(status, cancel=True)


def job_panel() -> None:
    """The main area's run box: a notice when a run landed, an error from Run, or the
    progress of the session's run in progress (polled, with Cancel)."""
    err = st.session_state.pop(_RUN_ERROR, None)
    if err:
        st.error(err)
    notice = st.session_state.pop(_NOTICE, None)
    if notice:
        kind, text = notice
        getattr(st, kind)(text)
        if kind == "success":
            st.toast(text, icon="✅")
    job_id = _session_job()
    status = jobs.status(job_id) if job_id else None
    if status is None:
        return
    if st.session_state.pop(_JUST_STARTED, False) and not status.finished:
        box = st.empty()
        deadline = time.monotonic() + _grace_s()
        while not status.finished and time.monotonic() < deadline:
            with box.container():
                _draw_progress(status, cancel=False)
            status = jobs.wait(job_id, timeout=min(0.5, max(deadline - time.monotonic(), 0)))
        box.empty()
    if status.finished:
        st.rerun()  # the next run lands it before the sidebar is drawn
    _job_fragment(job_id)


def cached_runs() -> list[dict[str, Any]]:
    """Meta of every complete cached run, newest first (`deffcore.cache.list_runs`)."""
    from deffcore import cache

    return [
        m
        for m in cache.list_runs()
        if m.get("status", "complete") == "complete" and not m.get("corrupt") and "spec" in m
    ]


def measurement_from_cache(key: str) -> Any:
    """The `Measurement` of a cached run, read from disk (the model is not run)."""
    return jobs.load_result(key)


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
    """The run landed last in this session, else the shipped default snapshot."""
    return st.session_state.get(_VIEW_KEY) or default_snapshot()


# ---------------------------------------------------------------------------------------------
# Sidebar
# ---------------------------------------------------------------------------------------------


def _run_summary(settings: Settings) -> str:
    what = f"{settings.model or '(no model)'} · {settings.dataset or '(no data)'}"
    text = f"{what} · N = {settings.n:,} · {settings.max_tokens} tokens"
    if settings.passages in WINDOW_MODES:
        available = windows_available(
            settings.model,
            settings.dataset,
            settings.max_tokens,
            settings.bos,
            settings.revision,
            settings.passages,
        )
        if available is not None:
            text += f" · this choice yields {available:,} windows"
            if settings.n > available:
                text += f" (fewer than N: lower N to ≤ {available:,})"
    return text


def glossary_expander() -> None:
    """Every symbol and term in plain words (`deffcore.glossary`)."""
    try:
        from deffcore.glossary import glossary_markdown
    except ImportError:
        return
    with st.expander("Glossary: what the symbols mean"):
        st.markdown(glossary_markdown())


def sidebar() -> Settings:
    """Draw the shared sidebar: Run and the run settings, then the view. Returns the settings."""
    with st.sidebar:
        top = st.container()  # Run first: visible without scrolling at 900 px
        model, revision = _model_spec()
        dataset, local_data = _dataset_spec()
        c1, c2 = st.columns(2)
        with c1:
            n = persisted(st.number_input, "N passages", "n", DEFAULT_N, min_value=4, step=32)
        with c2:
            max_tokens = persisted(
                st.number_input, "Max tokens", "max_tokens", DEFAULT_MAX_TOKENS, min_value=2
            )
        c3, c4 = st.columns(2)
        with c3:
            passages = persisted(
                st.selectbox,
                "Passages",
                "passages",
                PASSAGE_MODES[0],
                options=list(PASSAGE_MODES),
                help=PASSAGES_HELP,
            )
        with c4:
            bos = persisted(
                st.selectbox, "BOS", "bos", BOS_OPTIONS[0], options=list(BOS_OPTIONS),
                help=BOS_HELP,
            )  # fmt: skip
        seed = persisted(st.number_input, "Sample seed", "seed", 0, min_value=0)
        # DEFF_LOCAL_PATHS is enforced here, once, for every page: a refused model path or
        # dataset file never reaches a page (the labs read settings.model / .dataset too).
        refused = []
        try:
            serving.check_model_spec(model)
        except DeffError as err:
            refused.append(str(err))
            model = ""
        try:
            _check_data_input(dataset, local_data)
        except DeffError as err:
            refused.append(str(err))
            dataset = ""
        for text in refused:
            st.error(text)
        st.session_state["_deff_refused"] = refused
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
            passages=passages,
            bos=bos,
            local_data=local_data,
        )
        with top:
            run_clicked = st.button("Run", type="primary", key="run", width="stretch")
            st.caption(_run_summary(settings))

        st.header("View")
        st.caption("Changing these never re-runs the model.")
        settings.pooling = persisted(
            st.radio,
            "Pooling control",
            "pooling",
            POOLINGS[0],
            options=POOLINGS,
            help="\n".join(f"- **{k}**: {v}" for k, v in POOLING_HELP.items() if k in POOLINGS),
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
        glossary_expander()
        if run_clicked:
            start_run(settings)
    return settings


def page(title: str) -> tuple[RunView | None, Settings]:
    """Start a page: page config, the shared sidebar, the run box; returns (run, settings)."""
    st.set_page_config(
        page_title=f"{title} · Effective Depth Explorer", page_icon="📐", layout="wide"
    )
    st.session_state[_PAGE_CHANGED] = st.session_state.get("_deff_page") != title
    st.session_state["_deff_page"] = title
    _settle_job()
    settings = sidebar()
    job_panel()
    return current_view(), settings


# ---------------------------------------------------------------------------------------------
# Showing results
# ---------------------------------------------------------------------------------------------


def precomputed_note(view: RunView) -> None:
    if isinstance(view, SnapshotView):
        tokens = view.n * int(view.spec.get("max_tokens", 128))
        # ~600 tokens/s: SmolLM2-135M on a quiet 2-core CPU (BENCHMARKS.md, extraction)
        minutes = max(1, round(tokens / CPU_TOKENS_PER_S / 60))
        st.info(
            f"Precomputed with `{view.command}`. To compute it here, choose the same settings "
            f"in the sidebar and press **Run** (about {minutes} minutes on a quiet 2-core CPU "
            f"for {tokens:,} tokens; seconds on a GPU; a smaller N is quicker).",
            icon="ℹ️",
        )


def trust_of(view: RunView, settings: Settings) -> Trust:
    """The trust badge of the current headline (`deffcore.trust`): N against d, the bias's
    effect (linear vs unbiased CKA), the bootstrap interval when the Baselines page computed
    one for this view, the random-weight band when the run has one."""
    pooling, metric, K = settings.pooling, settings.metric, settings.K
    h = view.headline(pooling, metric, K)
    unbiased = None
    if metric == "cka":
        with contextlib.suppress(KeyError):  # a snapshot may lack unbiased CKA
            unbiased = view.headline(pooling, "unbiased_cka", K).deff_over_L
    ci = None
    if K in (None, view.layers - 1):
        for k, v in st.session_state.items():
            if (
                isinstance(k, tuple)
                and k[:4] == ("bootstrap", getattr(view, "key", None), pooling, metric)
                and isinstance(v, dict)
                and {"low", "high"} <= set(v)
            ):
                ci = (float(v["low"]), float(v["high"]))
    band = view.random_band(pooling, metric) or {}
    seeds = len(band.get("seeds") or band.get("deff_over_L") or [])
    null = (band["low"], band["high"]) if seeds and "low" in band and "high" in band else None
    return trust_badge(
        h.n,
        h.d_model,
        metric=metric,
        value=h.deff_over_L,
        unbiased_value=unbiased,
        ci=ci,
        null_band=null,
        null_seeds=seeds,
    )


_BADGE_COLOR = {"solid": "green", "indicative": "orange", "noise": "red"}
_BADGE_ICON = {
    "solid": ":material/verified:",
    "indicative": ":material/info:",
    "noise": ":material/warning:",
}


def trust_line(trust: Trust) -> None:
    """The badge (shape + word + colour) and its one sentence."""
    row = st.container(horizontal=True, vertical_alignment="center")
    row.badge(
        f"Trust: {trust.level}", icon=_BADGE_ICON[trust.level], color=_BADGE_COLOR[trust.level]
    )
    row.caption(trust.sentence())


def headline_cards(view: RunView, settings: Settings) -> None:
    """D_eff, D_eff/L, gap to F_L, rho_hat(1), position-0 ratio, N, CKA bias (one row), with
    the trust badge of these numbers; the CKA-bias warning only when the bias moves them."""
    h = view.headline(settings.pooling, settings.metric, settings.K)
    trust = trust_of(view, settings)
    badge = f"Trust: {trust.badge}. "
    cols = st.columns(7)
    cols[0].metric("D_eff", f"{h.deff:.3f}", help=f"{badge}K = {h.K}, L = {h.layers}")
    cols[1].metric("D_eff / L", f"{h.deff_over_L:.4f}", help=badge.strip())
    sub = h.gap_pct > 0
    cols[2].metric(
        "Gap to F_L",
        f"{h.gap_pct:+.1f}%",
        delta="more redundant than orthogonal updates" if sub else "less redundant",
        delta_color="red" if sub else "green",
        delta_arrow="off",
        help=f"{badge}100 (1 - D_eff / F_L), F_L = 2L/(L+1) = {h.reference_FL:.4f}; positive: "
        "D_eff < F_L, more redundancy than accumulated orthogonal updates",
    )
    cols[3].metric("ρ̂(1)", f"{h.rho1:.4f}", help=f"{badge}mean similarity of adjacent layers")
    cols[4].metric("Pos-0 norm ratio", f"{h.pos0_ratio:.1f}x", help=f"peak at layer {h.pos0_layer}")
    cols[5].metric("N", f"{h.n}", help=f"d = {h.d_model}, L = {h.layers}")
    cols[6].metric("CKA bias d/(N+d)", f"{h.cka_bias:.3f}")
    trust_line(trust)
    if trust.bias_material:
        st.warning(
            f"Linear CKA's finite-sample bias matters here: with N = {h.n} passages and d = "
            f"{h.d_model}, unrelated layers would still score about d/(N+d) = "
            f"{h.cka_bias:.3f}, which inflates similarity and lowers D_eff. Use ≥ "
            f"{trust.solid_n:,} passages or switch the metric to unbiased_cka."
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


def metric_comparison(view: RunView, settings: Settings) -> pd.DataFrame | None:
    """D_eff, D_eff/L, gap and rho_hat(1) under linear and unbiased CKA side by side (the first
    screen's answer to "is this the finite-sample bias?"); None when a snapshot lacks one."""
    rows = []
    for metric, name in (("cka", "linear CKA"), ("unbiased_cka", "unbiased CKA")):
        try:
            h = view.headline(settings.pooling, metric, settings.K)
        except (KeyError, DeffError):
            return None
        rows.append(
            {
                "similarity": name,
                "D_eff": round(h.deff, 3),
                "D_eff / L": round(h.deff_over_L, 4),
                "gap to F_L (%)": round(h.gap_pct, 1),
                "ρ̂(1)": round(h.rho1, 3),
            }
        )
    return pd.DataFrame(rows)
