"""The current run stays put: its key in the URL (`?run=`), restored on a reload, a bookmark
or a link a colleague opens, and its settings in the sidebar.

A run's reference in the URL says where it lives: `cached:<key>` (this machine's cache),
`precomputed:<key>` (a run shipped with the app), `shared:<content hash>` (a shared snapshot
kept in the cache's `.shared/`). The implicit start (the shipped default before anything is
chosen) puts nothing in the URL: the bare URL shows it again. `page()` calls `start_page`
before the sidebar is drawn (a widget cannot change once drawn), then `write_url` after it.
"""

from __future__ import annotations

import re
from typing import Any

import streamlit as st

from deffcore.core.errors import DeffError
from deffcore.core.safe_text import md_escape  # user text is shown as text, never as Markdown
from deffcore.inputs.model import Kind, ModelSpec
from deffcore.inputs.texts import DatasetSpec
from deffcore.views.run import Run
from explorer import settings as sidebar
from explorer.views import (
    JOB_SYNC_KEY,
    SYNC_KEY,
    VIEW_KEY,
    precomputed_runs,
    requested_run,
    set_view,
)

URL_KEY = "run"
_RESTORED = "_deff_url_restored"
_REF = re.compile(r"(cached|precomputed|shared):([0-9a-f]{16,64})")


def run_ref(view: Run) -> str:
    """Where `view` lives, as the URL says it (module docstring)."""
    if view.source == "shared":
        return f"shared:{view.sha256[:16]}"
    if view.source == "precomputed":
        return f"precomputed:{view.key}"
    return f"cached:{view.key}"


def open_ref(ref: str) -> Run:
    """The run a URL reference names; DeffError (a sentence) when it cannot be opened."""
    from deffcore.views.run import Run
    from deffcore.views.sharing import open_shared
    from deffcore.work import jobs

    found = _REF.fullmatch(ref.strip())
    if found is None:
        raise DeffError(f"The link names no run this app knows ({ref[:60]!r}).")
    where, key = found.groups()
    if where == "cached":
        try:
            return Run.from_measurement(jobs.load_result(key))
        except DeffError:  # its own message names the cache folder: never shown to a visitor
            raise DeffError(
                f"This machine's cache has no run {key} (the link was made on another machine, "
                "or the run was deleted)."
            ) from None
    if where == "shared":
        return open_shared(key)
    for view in precomputed_runs():
        if view.key == key:
            return view
    raise DeffError(f"No precomputed run {key} ships with this version of the app.")


def restore_from_url() -> None:
    """Once per session (a reload is a new session): the run the URL names becomes current.
    A link to a run this machine does not have says so and shows the default."""
    if st.session_state.get(_RESTORED):
        return
    st.session_state[_RESTORED] = True
    ref = st.query_params.get(URL_KEY)
    if not ref or VIEW_KEY in st.session_state:
        return
    try:
        set_view(open_ref(ref))
    except DeffError as err:
        st.warning(md_escape(f"{err} Showing the shipped default run instead."))
        del st.query_params[URL_KEY]


def write_url(view: Run | None) -> None:
    """Put the session's chosen run in the URL (nothing for the implicit default)."""
    chosen = st.session_state.get(VIEW_KEY)
    ref = run_ref(chosen) if chosen is not None and chosen is view else None
    if ref and st.query_params.get(URL_KEY) != ref:
        st.query_params[URL_KEY] = ref
    elif ref is None and URL_KEY in st.query_params:
        del st.query_params[URL_KEY]


def sidebar_values(spec: dict[str, Any]) -> dict[str, Any]:
    """The sidebar widgets' values (by key) that choose the run `spec`: model source and
    model, dataset source and dataset, N, max tokens, passages, BOS, seed. A field the
    sidebar cannot express (a notebook's model or texts, an uploaded file) is left out."""
    from deffcore.inputs import model as catalog

    out: dict[str, Any] = {}
    model, choices = str(spec.get("model", "")), sidebar.offline_models()
    parsed = ModelSpec.stored(model)
    base = parsed.base
    if base is not None and base.text in choices and (parsed.seed or 0) >= 0:  # a random null
        out.update(model_source=sidebar.MODEL_SOURCES[3], model_random_base=base.text)
        out["model_random_seed"] = parsed.seed
    elif model in choices:
        out.update(model_source=sidebar.MODEL_SOURCES[0], model_packaged=model)
        if model in catalog.TINY_MODELS and model != sidebar.DEMO_MODEL:
            out["model_all_demo"] = True
    elif (
        model
        and parsed.kind not in (Kind.LOADED, Kind.RANDOM)
        and not model.startswith(("/", ".", "~"))
    ):
        out.update(model_source=sidebar.MODEL_SOURCES[1], model_hf=model)
        out["model_revision"] = spec.get("revision") or ""
    dataset = str(spec.get("dataset", ""))
    if dataset == sidebar.DEFAULT_DATASET:
        out["data_source"] = sidebar.DATA_SOURCES[0]
    elif DatasetSpec.stored(dataset).streamed:
        out.update(data_source=sidebar.DATA_SOURCES[1], data_hf=dataset)
    for key in ("n", "max_tokens", "seed", "passages", "bos"):
        if spec.get(key) is not None:
            out[key] = spec[key]
    return out


def sync_sidebar() -> None:
    """Before the sidebar is drawn: set its widgets to the run `set_view` made current."""
    spec = st.session_state.pop(SYNC_KEY, None)
    spec = st.session_state.pop(JOB_SYNC_KEY, None) or spec  # a run in progress comes first
    if not spec:
        return
    for key, value in sidebar_values(spec).items():
        st.session_state[key] = value
        st.session_state[f"_keep_{key}"] = value  # `persisted` restores from here


def start_page() -> None:
    """What a page does before its sidebar: the run a link names, the one `deffcore app --run`
    named, then the sidebar set to the current run's settings."""
    restore_from_url()
    requested_run()
    sync_sidebar()
