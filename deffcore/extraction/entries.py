"""The runs in the cache: listing them with their status, deleting one, removing stale leftovers.

Only what is provably a run entry is listed or deleted: a real folder (never a link) named like a
key that holds a run's files and nothing else (`deffcore.core.files`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from deffcore.core import files
from deffcore.core.errors import CacheCorruptError, DeffError
from deffcore.core.files import cache_dir
from deffcore.extraction.cache import (
    RunInUseError,
    UnknownRunError,
    check_meta,
    drop_lock_file,
    is_key,
    lock_path,
    read_json_file,
)
from deffcore.extraction.partial import partial_info


def is_run_entry(folder: Path) -> bool:
    """True when `folder` is a run entry and holds nothing else: a key-named real folder with
    meta.json, states.npz and/or partial/ (and our temp and side files), none of them a link
    (`deffcore.core.files.foreign_reason`: every check is an lstat)."""
    return (
        is_key(folder.name)
        and files.is_real_dir(folder)
        and files.foreign_reason(folder) is None
        and files.marked(folder)
    )


def _probe_lock(key: str, *, remove: bool) -> bool:
    """True when a process holds `<key>.lock`; when nobody does and `remove`, the stale lock
    file is removed (taken first, so nobody can be computing under it). A lock path that is a
    link or not a file is never taken or removed (and counts as not held)."""
    path = lock_path(key)
    if not files.is_regular(path):
        return False
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    except OSError:  # replaced by a link meanwhile: not ours to take
        return False
    try:
        if remove:
            drop_lock_file(path)
    finally:
        lock.release()
    return False


def _status(folder: Path) -> dict[str, Any]:
    """{"status": "complete" | "partial" | "corrupt", ...} of a run entry (cheap: the npz is
    not hashed here; `load` does that)."""
    key = folder.name
    meta_path, npz_path = folder / "meta.json", folder / "states.npz"
    if meta_path.exists() or npz_path.exists():
        try:
            meta = check_meta(read_json_file(meta_path), key)
            if not npz_path.is_file() or npz_path.stat().st_size != meta["states_bytes"]:
                raise CacheCorruptError(f"Cache entry {key}: states.npz is missing or truncated.")
        except CacheCorruptError as err:
            return {"key": key, "status": "corrupt", "reason": str(err)}
        return {**meta, "status": "complete"}
    try:
        info = partial_info(folder / "partial")
    except CacheCorruptError as err:
        return {"key": key, "status": "corrupt", "reason": str(err)}
    return {"key": key, "status": "partial", **info}


def cleanup_stale(max_age_s: float = 0.0) -> int:
    """Remove leftovers no process needs; returns how many files/folders went.

    - `<key>.lock` files older than `max_age_s` whose entry is complete, or that no process
      holds (a held lock is a run in progress and stays);
    - the partial/ folder and temp files of a complete entry whose lock nobody holds.
    Only run entries and key-named lock files are looked at.
    """
    root, now, removed = cache_dir(), time.time(), 0
    for path in root.iterdir():
        try:
            if path.suffix == ".lock" and is_key(path.stem) and files.is_regular(path):
                if now - path.stat().st_mtime < max_age_s:
                    continue
                entry = root / path.stem
                complete = is_run_entry(entry) and (entry / "meta.json").is_file()
                if complete and _status(entry)["status"] == "complete":
                    drop_lock_file(path)
                    removed += 1
                elif not _probe_lock(path.stem, remove=True):
                    removed += 1
            elif is_run_entry(path) and (path / "meta.json").is_file():
                leftovers = [path / "partial"] if files.is_real_dir(path / "partial") else []
                leftovers += [f for f in path.iterdir() if files.TMP_RE.fullmatch(f.name)]
                leftovers = [f for f in leftovers if now - f.stat().st_mtime >= max_age_s]
                if not leftovers or _status(path)["status"] != "complete":
                    continue
                if _probe_lock(path.name, remove=False):
                    continue
                for f in leftovers:
                    files.remove_partial(f) if f.name == "partial" else files.remove_file(f)
                    removed += 1
        except (OSError, DeffError):  # removed by another process first, or a read-only cache
            continue
    return removed


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())


def list_runs() -> list[dict[str, Any]]:
    """Every run entry, newest first: its meta (complete runs) or spec and progress (partial
    ones) plus `key`, `status` ("complete" | "partial" | "corrupt", with `reason`), `corrupt`
    (status == "corrupt"), `running` (a process is computing it now), `path`, `size_bytes`.

    Partial runs carry `done_passages` and `total_passages`; rerunning their spec resumes them.
    Folders that are not run entries (models/, lab folders, anything of the user's) are never
    listed. Stale lock files are removed on the way (`cleanup_stale`).
    """
    with contextlib.suppress(OSError):
        cleanup_stale()
    runs = []
    for folder in cache_dir().iterdir():
        try:
            if not is_run_entry(folder):
                continue
            info = _status(folder)
            info["corrupt"] = info["status"] == "corrupt"
            info["running"] = _probe_lock(folder.name, remove=False)
            info["path"] = str(folder)
            info["size_bytes"] = _size(folder)
        except OSError:  # removed while we looked
            continue
        runs.append(info)
    return sorted(runs, key=lambda m: str(m.get("created") or ""), reverse=True)


def delete(key: str) -> None:
    """Remove a stored run, complete, partial or corrupt.

    Refuses (UnknownRunError) anything that is not provably a run entry: a name that is not a
    key, a folder holding anything but a run's files (a lab's or a user's folder), a link; and
    (RunInUseError) a run a process is computing right now.
    """
    root = cache_dir()
    if not is_key(key):
        raise UnknownRunError(
            f"{key!r} is not a run key (20 lowercase hex digits, see `python -m deffcore runs`);"
            " nothing was deleted."
        )
    folder = root / key
    if not os.path.lexists(folder):
        raise UnknownRunError(f"No cached run with key {key!r} in {root}.")
    if not is_run_entry(folder):
        raise UnknownRunError(
            f"{folder} holds files that are not a cached run's (or is a link); nothing was deleted."
        )
    try:
        lock = files.entry_lock(lock_path(key))
    except DeffError as err:
        raise UnknownRunError(f"{err} Nothing was deleted.") from None
    try:
        with files.os_errors(root, f"The lock of run {key}"):
            lock.acquire(timeout=0)
    except Timeout:
        raise RunInUseError(
            f"The run {key} is being computed right now; wait for it or stop it first."
        ) from None
    try:
        with files.os_errors(root, f"Deleting run {key}"):
            shutil.rmtree(folder)  # a real folder of our own files: no link is followed
        drop_lock_file(lock_path(key))
    finally:
        lock.release()
