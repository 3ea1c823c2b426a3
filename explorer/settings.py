"""The settings: what to measure (the run settings, drawn by the run panel on the Runs page
only) and how to look at it (the view controls, the shared sidebar of every page), values kept
across pages (`persisted`). Every other page reads the run settings as last chosen, without
drawing them (`run_settings(draw=False)`); until anything is chosen they are the shipped run's
(`run_defaults`: deffcore/data/default_run.json's spec), so a first run compares with the
headline.

DEFF_LOCAL_PATHS is enforced here, once, for every page: a refused model path or dataset file
never reaches a page. Pooling, metric and K are *view* settings: changing them only recomputes
an L x L similarity or a sum over it, never the model; a SPEC 17 metric is read from the run's
matrix of it, computed only when asked (`explorer.measure_pick`).
"""

from __future__ import annotations

import contextlib
import functools
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import streamlit as st

from deffcore.core.constants import BOS_OPTIONS, METRICS, PASSAGE_MODES, POOLINGS, WINDOW_MODES
from deffcore.core.errors import DeffError
from deffcore.core.safe_text import md_escape  # user text is shown as text, never as Markdown
from deffcore.inputs import serving
from deffcore.inputs.model import ModelSpec
from deffcore.inputs.texts import DatasetSpec
from deffcore.runs import measure as preflight
from explorer.measure_pick import PICKER_METRICS, metric_label
from explorer.plan_line import plan_caption
from explorer.uploads import UPLOAD_KEY, upload_names, upload_widget
from explorer.views import current_view

DEFAULT_MODEL = "smollm2-135m"
#: The one demo model listed by default; the other tiny test models behind a checkbox.
DEMO_MODEL = "tiny-llama"
DEFAULT_DATASET = "bbc-news"
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
#: True on the first script run of a page after another page (`persisted` restores then).
PAGE_CHANGED_KEY = "_deff_page_changed"
#: The sidebar's refusals of this script run (DEFF_LOCAL_PATHS): Run does nothing while any.
REFUSED_KEY = "_deff_refused"
#: False while the run settings are read without drawing them (every page but Runs).
_DRAW: ContextVar[bool] = ContextVar("deff_draw_settings", default=True)


@functools.lru_cache(maxsize=1)
def run_defaults() -> dict[str, Any]:
    """The run panel's defaults: the shipped default run's spec (deffcore/data/default_run.json,
    read once), so a visitor's first run measures what the first screen shows. Only a missing
    snapshot falls back to the packaged model and data, with the library's own defaults."""
    from deffcore.views.labels import SPEC_DEFAULTS
    from explorer import views

    snap = views.default_snapshot()  # the first screen's copy: the file is read and checked once
    spec = {**SPEC_DEFAULTS, **(snap.spec if snap is not None else {})}
    return {
        "model": spec.get("model") or DEFAULT_MODEL,
        "n": int(spec.get("n") or 512),
        "max_tokens": int(spec.get("max_tokens") or 128),
        "seed": int(spec.get("seed") or 0),
        "passages": spec.get("passages") or PASSAGE_MODES[0],
        "bos": spec.get("bos") or BOS_OPTIONS[0],
    }


@dataclass(kw_only=True)
class Settings:
    """What to measure (the run settings: the run panel's, on the Runs page) and how to look
    at it (the view: the sidebar's), in the order they are asked for (keyword-only, so the
    order is free to follow it)."""

    model: str
    revision: str | None
    dataset: str
    #: the local dataset path typed by the user (checked against DEFF_LOCAL_PATHS), if any
    local_data: str | None = None
    n: int
    max_tokens: int
    passages: str = "documents"
    bos: str = "default"
    seed: int
    # the view: how the measured run is looked at
    pooling: str
    metric: str
    K: int | None

    def shared_options(self) -> dict[str, Any]:
        """What every run of these settings shares beyond model and data (a run's, a
        sweep's or a comparison's keyword arguments)."""
        return {
            "n": self.n,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "metric": self.metric,
            "passages": self.passages,
            "bos": self.bos,
        }

    def joins_model_file(self) -> int:
        """Bytes of the packaged model file a run of these settings first joins into the cache
        folder (0: none, or the cache folder cannot be told here)."""
        from deffcore.inputs.model import assembly_bytes

        try:
            return assembly_bytes(self.model) if self.model else 0
        except (DeffError, OSError):  # no cache folder, no package: the Run click says which
            return 0

    def windows(self) -> int | None:
        """How many token windows these settings yield (`windows_available`); None when the
        passages are documents or the count cannot be told here, or when the model is a
        packaged file still in parts: its tokenizer would join that file into the cache
        (hundreds of MB) before Run is pressed (SPEC 14, "Writes said first")."""
        if self.passages not in WINDOW_MODES or self.joins_model_file():
            return None
        return windows_available(
            self.model, self.dataset, self.max_tokens, self.bos, self.revision, self.passages
        )


def offline_models() -> dict[str, str]:
    """Packaged models first, then the tiny random-init demo models: spec -> description."""
    from deffcore.inputs import model as catalog

    choices = dict(catalog.PACKAGED_MODELS)
    tiny = catalog.TINY_MODELS
    for name in tiny:
        choices[name] = tiny[name] if isinstance(tiny, dict) else "tiny random-init model (demo)"
    return choices


def model_choice_label(spec: str, description: str) -> str:
    """How a model appears in the list: tiny test models are marked as the demo group."""
    from deffcore.inputs import model as catalog

    if spec in catalog.TINY_MODELS:
        return f"demo · {spec} — {description}"
    return f"{spec} — {description}"


def persisted(widget: Any, label: str, key: str, default: Any, **kwargs: Any) -> Any:
    """A sidebar widget whose value survives page switches.

    Every page is its own script, and Streamlit drops a widget's state when a run does not
    draw it (and a page's widget is a new widget even under the same key), so the value is
    mirrored under `_keep_<key>` and restored into the widget's key before it is drawn on the
    first run of a page (the widget gets no `value=`/`index=` of its own, which would conflict
    with the restored state). A kept value that is no longer among `options` falls back to
    `default` (e.g. a source the server's DEFF_LOCAL_PATHS setting hides). While the run
    settings are read undrawn (`run_settings(draw=False)`), the kept value is returned as is.
    """
    keep = f"_keep_{key}"
    options = kwargs.get("options")
    if not _DRAW.get():
        value = st.session_state.get(keep, default)
        return default if options is not None and value not in list(options) else value
    if options is not None and st.session_state.get(keep, default) not in list(options):
        st.session_state[keep] = default
        st.session_state.pop(key, None)
    if key not in st.session_state or (
        st.session_state.get(PAGE_CHANGED_KEY) and keep in st.session_state
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
        from deffcore.inputs import model as catalog

        all_demo = persisted(
            st.checkbox,
            "More demo models",
            "model_all_demo",
            False,
            help="Tiny random-init test models of every architecture (4 blocks, d = 64): "
            "they run in seconds but measure nothing real.",
        )
        first = run_defaults()["model"]
        first = first if first in choices else DEFAULT_MODEL
        kept = st.session_state.get("_keep_model_packaged", first)
        shown = [
            m
            for m in choices
            if m in catalog.PACKAGED_MODELS or m in (DEMO_MODEL, kept, first) or all_demo
        ]
        spec = persisted(
            st.selectbox,
            "Model",
            "model_packaged",
            first,
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
    return ModelSpec.random(base, int(seed)).text, None


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
        path = upload_widget() if _DRAW.get() else _kept_upload()
    else:
        typed = persisted(
            st.text_input, "Path", "data_path", "", placeholder="/data/passages.jsonl"
        ).strip()
        path = typed
    spec = f"{path}:{column.strip()}" if path and column.strip() else path
    return spec, typed or None


def _kept_upload() -> str:
    """The stored path of the session's upload ("" without one), read without the uploader."""
    return (st.session_state.get(UPLOAD_KEY) or {}).get("path", "")


@st.cache_data(show_spinner=False, max_entries=256)
def windows_available(
    model: str,
    dataset: str,
    max_tokens: int,
    bos: str,
    revision: str | None,
    passages: str = "windows",
) -> int | None:
    """How many token windows this choice yields (`deffcore.inputs.texts.count_windows`, tokenizer
    only), None when it cannot be told here (hub data, a tokenizer that does not load)."""
    from deffcore.inputs.texts import count_windows

    if not model or not dataset or DatasetSpec.stored(dataset).streamed:
        return None
    try:
        return int(count_windows(model, dataset, max_tokens, bos, revision, mode=passages))
    except Exception:  # the Run click reports the real error, checked before the model loads
        return None


def _check_data_input(dataset: str, local_data: str | None) -> str:
    """DEFF_LOCAL_PATHS: refuse a dataset file the server does not allow, and a path typed
    where a Hugging Face dataset spec belongs (it would be read as a file)."""
    ds = serving.check_dataset_spec(dataset, local_data)  # resolved: the checked path is opened
    uploaded = any(ds == p or ds.startswith(f"{p}:") for p in upload_names())
    typed_hf = ds != DEFAULT_DATASET and not local_data and not uploaded
    if ds and typed_hf and not DatasetSpec.stored(ds).streamed:
        raise DeffError(
            f"A Hugging Face dataset spec starts with 'hf:' (got {ds!r}); choose Upload a "
            "file or Local file for a file."
        )
    return ds


def _run_summary(settings: Settings) -> str:
    from deffcore.runs.planner import human_bytes

    what = f"{settings.model or '(no model)'} · {settings.dataset or '(no data)'}"
    text = f"{what} · N = {settings.n:,} · {settings.max_tokens} tokens"
    available = settings.windows()
    joined = settings.joins_model_file()
    if joined:  # its tokenizer lies in that file: counted once Run has joined it
        text += f" · Run first joins the model's file ({human_bytes(joined)}) into the cache"
    if available is not None:
        text += f" · this choice yields {available:,} windows"
        if settings.n > available:
            text += f" (fewer than N: lower N to ≤ {available:,})"
    return text


def glossary_expander() -> None:
    """Every symbol and term in plain words (`deffcore.views.glossary`)."""
    try:
        from deffcore.views.glossary import glossary_markdown
    except ImportError:
        return
    with st.expander("Glossary: what the symbols mean"):
        st.markdown(glossary_markdown())


def sidebar(*, glossary: bool = True) -> Settings:
    """Draw the shared sidebar: the view controls, then the glossary (unless `glossary` is
    False: a page that draws it last itself, `explorer.page.sidebar_glossary`). The run
    settings are read as last chosen (the run panel of the Runs page draws them), not drawn."""
    settings = run_settings(draw=False)
    with st.sidebar:
        view_settings(settings)
        if glossary:
            glossary_expander()
    return settings


def run_panel_settings() -> tuple[Settings, bool]:
    """Draw the run panel (Run, what it will measure and cost, then every run setting) where
    the caller is; returns the settings and whether Run was pressed (the caller starts it)."""
    top = st.container()  # Run first: the settings below it, the plan beside the button
    settings = run_settings(draw=True)
    with top:
        run_clicked = st.button("Run", type="primary", key="run")
        st.caption(md_escape(preflight.display(_run_summary(settings), upload_names())))
        plan_caption(settings)  # what the run will cost, before Run (SPEC 14)
    return settings, run_clicked


def run_settings(*, draw: bool = True) -> Settings:
    """What to measure: model, data, N, max tokens, passages, BOS, seed (view left default).
    `draw=False` reads the values last chosen (or the shipped run's) without drawing them."""
    token = _DRAW.set(draw)
    try:
        return _drawn_run_settings()
    finally:
        _DRAW.reset(token)


def _drawn_run_settings() -> Settings:
    first = run_defaults()
    left, right = st.columns(2) if _DRAW.get() else [contextlib.nullcontext()] * 2
    with left:
        model, revision = _model_spec()
    with right:
        dataset, local_data = _dataset_spec()
    c1, c2, c3, c4, c5 = st.columns(5) if _DRAW.get() else [contextlib.nullcontext()] * 5
    with c1:
        n = persisted(st.number_input, "N passages", "n", first["n"], min_value=4, step=32)
    with c2:
        max_tokens = persisted(
            st.number_input, "Max tokens", "max_tokens", first["max_tokens"], min_value=2
        )
    with c3:
        passages = persisted(
            st.selectbox,
            "Passages",
            "passages",
            first["passages"],
            options=list(PASSAGE_MODES),
            help=PASSAGES_HELP,
        )
    with c4:
        bos = persisted(
            st.selectbox, "BOS", "bos", first["bos"], options=list(BOS_OPTIONS), help=BOS_HELP
        )
    with c5:
        seed = persisted(st.number_input, "Sample seed", "seed", first["seed"], min_value=0)
    model, dataset = _refuse_paths(model, dataset, local_data)
    return Settings(
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


def _refuse_paths(model: str, dataset: str, local_data: str | None) -> tuple[str, str]:
    """DEFF_LOCAL_PATHS, once for every page: a refused model path or dataset file is shown as
    an error and becomes "" (the labs read settings.model / .dataset too)."""
    refused = []
    try:
        model = serving.check_model_spec(model)
    except DeffError as err:
        refused.append(str(err))
        model = ""
    try:
        dataset = _check_data_input(dataset, local_data)
    except DeffError as err:
        refused.append(str(err))
        dataset = ""
    for text in refused if _DRAW.get() else ():  # undrawn: the run panel shows them
        st.error(md_escape(text))
    st.session_state[REFUSED_KEY] = refused
    return model, dataset


def view_settings(settings: Settings) -> None:
    """How to look at the run: pooling, metric and K (never re-run the model), set on
    `settings`; then which run is current."""
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
        options=PICKER_METRICS,
        format_func=metric_label,
        help="CKA family: linear CKA (default), unbiased CKA (no finite-sample bias), mean "
        "cosine. SPEC 17: the similarity measures of the table across measures, drawn on the "
        "Overview, Similarity, Lag decay and Gap to F_L pages from the run's matrix of that "
        "measure (computed on request, in the background: minutes at N in the thousands).",
    )
    view = current_view()
    if view is not None and view.layers > 2:
        L = view.layers
        settings.K = persisted(
            st.slider, "Maximum lag K", f"K_L{L}", L - 1, min_value=1, max_value=L - 1
        )
    if view is not None:
        tag = view.source if view.source in ("precomputed", "shared") else "measured"
        st.caption(f"Current run ({tag}): {md_escape(view.label)}")
