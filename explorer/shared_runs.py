"""Shared runs on the Runs page: a snapshot file someone sent is uploaded, checked and kept in
the cache's `.shared/` (`deffcore.views.sharing.save_shared`), becomes the current run, and is
listed beside the cached runs (status "shared": open, compare, delete).

A snapshot is data from someone else: it is never executed, and every piece of its text the
page shows (file name, model, command) is escaped (`md_escape`) or shown as plain text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from deffcore.core.safe_text import md_escape  # user text is shown as text, never as Markdown
from deffcore.views.run import Run
from deffcore.views.sharing import MAX_SNAPSHOT_BYTES, SnapshotError, delete_shared, save_shared
from deffcore.views.sharing import shared_entries as sharing_entries
from explorer.guard import guarded
from explorer.views import VIEW_KEY, set_view

UPLOAD_KEY = "runs_share_upload"
#: {"file_id", "error"} of the last upload that was refused (an upload is handled once)
_UPLOADED = "_deff_shared_upload"
_MESSAGE = "_deff_shared_message"


def shared_id(view: Run) -> str:
    """A shared run's id on the Runs page: its content id (two files of one run are two)."""
    return f"shared:{view.sha256[:16]}"


def shared_entries() -> list[dict[str, Any]]:
    """The kept shared runs as Runs-page entries (like the precomputed ones: a view each). A
    kept file that no longer reads is an entry too (status "damaged", no view): a one-line note
    names it and it stays in the delete list, so one bad file never needs removing by hand."""
    entries = []
    with guarded("Listing the shared runs"):
        for kept in sharing_entries():
            if kept.view is None:
                st.caption(md_escape(f"Shared run {kept.sha256} is damaged: {kept.error}"))
                entries.append(
                    {
                        "id": f"shared:{kept.sha256}",
                        "key": kept.sha256,
                        "sha256": kept.sha256,
                        "status": "damaged",
                        "source": "shared",
                        "deletable": kept.deletable,
                    }
                )
                continue
            view = kept.view
            entries.append(
                {
                    "id": shared_id(view),
                    "key": view.key,
                    "sha256": view.sha256,
                    "spec": view.spec,
                    "n": view.n,
                    "layers": view.layers,
                    "d_model": view.d_model,
                    "status": "shared",
                    "source": "shared",
                    "view": view,
                    "deletable": True,
                }
            )
    return entries


def share_section(entries: list[dict[str, Any]]) -> None:
    """Upload a shared run (it becomes the current run); delete a kept one."""
    st.subheader("Shared runs")
    st.caption(
        "A run someone sent you: the snapshot file (JSON) of `deffcore measure ... --snapshot "
        "FILE`, `m.view().to_snapshot()` in a notebook, or `deffcore app --run FILE`. "
        "It is checked (data only, at most 16 MiB), kept with your runs, and opened as the "
        "current run; its numbers are as its sender measured them."
    )
    upload = st.file_uploader(
        "Shared run (snapshot JSON)",
        type="json",
        key=UPLOAD_KEY,
        max_upload_size=MAX_SNAPSHOT_BYTES // 2**20,  # MB: a larger file is refused at once
    )
    if upload is not None:
        receive(upload)
    message = st.session_state.pop(_MESSAGE, None)
    if message:
        st.success(message)
    delete_shared_section([e for e in entries if e["source"] == "shared" and e["deletable"]])


def receive(upload: Any) -> None:
    """Check and keep an upload once (the widget keeps returning it on every rerun), make it
    the current run and redraw the page; a refused file is one sentence while it stays."""
    done = st.session_state.get(_UPLOADED) or {}
    if done.get("file_id") == upload.file_id:
        if done.get("error"):
            st.error(md_escape(done["error"]))
        return
    try:
        view = save_shared(upload.getvalue(), name=Path(upload.name).name)
    except SnapshotError as err:
        st.session_state[_UPLOADED] = {"file_id": upload.file_id, "error": str(err)}
        st.error(md_escape(err))
        return
    st.session_state[_UPLOADED] = {"file_id": upload.file_id}
    set_view(view)
    st.session_state[_MESSAGE] = (
        f"Opened the shared run {md_escape(view.label)}; every page now shows it."
    )
    st.rerun()  # the sidebar and the table were drawn before the current run changed


def delete_shared_section(entries: list[dict[str, Any]]) -> None:
    if not entries:
        return
    by_id = {e["id"]: e for e in entries}
    c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
    picked = c1.selectbox(
        "Shared run to delete",
        list(by_id),
        format_func=lambda i: f"{_entry_label(by_id[i])} · {i}",
        key="runs_shared_delete",
    )
    if c2.button("Delete", key="runs_shared_delete_button"):
        entry = by_id[picked]
        with guarded("Deleting the shared run"):
            delete_shared(entry["sha256"])
            current = st.session_state.get(VIEW_KEY)
            if getattr(current, "sha256", "")[:16] == entry["sha256"][:16]:
                del st.session_state[VIEW_KEY]
            st.session_state[_MESSAGE] = (
                f"Deleted the shared run {md_escape(_entry_label(entry))} (the file you "
                "received is untouched)."
            )
            st.rerun()


def _entry_label(entry: dict[str, Any]) -> str:
    view = entry.get("view")
    return view.label if view is not None else "damaged file"
