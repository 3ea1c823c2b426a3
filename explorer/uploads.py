"""Uploaded passage files: checked, stored in the cache's .uploads/ under their content hash
(the same upload is the same dataset, and cache key, in every session), pruned to the newest
`MAX_UPLOADS` (never one in use, never a file that is not provably ours)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import streamlit as st

from deffcore.core.errors import DeffError
from deffcore.core.safe_text import md_escape  # user text is shown as text, never as Markdown
from deffcore.inputs import serving
from deffcore.work import jobs

#: Uploads kept in <cache>/.uploads (newest first); older ones that are provably ours go.
MAX_UPLOADS = 8
_UPLOAD_NAME = re.compile(r"[0-9a-f]{16}_.+")
#: {"file_id", "path", "name"} of the current upload, or {"error"}
UPLOAD_KEY = "_deff_upload"


def _upload_folder() -> Path:
    from deffcore.core.files import cache_dir

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
    in_use = {str(d) for j in jobs.active_jobs() for d in j.datasets}  # runs and sweeps
    removed = 0
    for f in candidates[MAX_UPLOADS:]:
        busy = any(u == str(f) or u.startswith(f"{f}:") for u in in_use)
        if str(f) in keep or busy or not _is_our_upload(f):
            continue
        f.unlink(missing_ok=True)
        removed += 1
    return removed


def save_upload(
    name: str, data: bytes, *, check: Callable[[str, bytes], None] | None = None
) -> str:
    """Check an upload (empty or binary: DeffError naming `name`; `check` replaces the passage
    file's check for other uploads, e.g. a scores table) and store it in the cache's
    .uploads/ under its content hash, so the same upload is the same dataset (and cache key)
    in every session; older uploads are pruned. Returns the stored path."""
    shown = Path(name).name
    (check or serving.check_upload)(shown, data)
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
    up = st.session_state.get(UPLOAD_KEY) or {}
    return {up["path"]: up["name"]} if up.get("path") else {}


def upload_widget() -> str:
    """The sidebar's file uploader -> the stored path of the current upload ("" without one).

    An upload cannot be restored into a widget on another page, so the stored path (and the
    user's file name, for messages) is kept in the session under `UPLOAD_KEY`; a refused file
    is kept as its error (shown here, and by Run)."""
    upload = st.file_uploader(
        "Passages file", type=["txt", "jsonl", "csv", "parquet"], key="data_upload"
    )
    up = st.session_state.get(UPLOAD_KEY) or {}
    if upload is not None and up.get("file_id") != upload.file_id:
        try:
            path = save_upload(upload.name, upload.getvalue())
            up = {"file_id": upload.file_id, "path": path, "name": Path(upload.name).name}
        except DeffError as err:
            up = {"file_id": upload.file_id, "error": str(err)}
        st.session_state[UPLOAD_KEY] = up
    if up.get("error"):
        st.error(md_escape(up["error"]))
    if up.get("path"):
        st.caption(f"Using {md_escape(up['name'])}")
    return up.get("path", "")
