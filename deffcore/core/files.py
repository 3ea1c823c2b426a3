"""The cache's files on disk: only what is provably deffcore's is written or deleted.

One mechanism for every write and delete of `deffcore.extraction.cache` (complete entries, partial
runs,
locks) and of the BOS diagnostics beside a run:

- `foreign_reason(folder)` says why a path named like a run entry is not provably ours, or
  None: a run entry is a real folder (never a symbolic link) that holds only real files
  deffcore writes there (`meta.json`, `states.npz`, the side files, temp files) and a real
  `partial/` folder of batch files. Every check uses `lstat`: no link is followed.
- `writable_entry(folder)` is the one door to writing: it creates an absent entry folder and
  refuses (ForeignCacheEntryError, one sentence) one that is not provably ours, so nothing is
  ever written or deleted through a link or into a user's folder.
- `entry_lock(path)` is the entry's file lock, refused when `<key>.lock` is a link or not a
  regular file (filelock would fail with ELOOP or lock the link's target).
- `atomic_write` writes to a temp name (O_EXCL: never through a link) and renames it into place
  (a rename replaces the name, never a link's target); a failed write leaves no temp file.
- `os_errors(...)` turns every OSError of the cache (disk full, permissions, a read-only disk,
  links) into CacheWriteError, one sentence naming the cache folder and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from deffcore.core.errors import CacheWriteError, DeffError, ForeignCacheEntryError

TMP_RE = re.compile(r"\..+\.tmp")
#: Files of a complete entry.
ENTRY_FILES = ("meta.json", "states.npz")
#: Files other modules keep inside a run's entry (deffcore.lenses.diagnostics_store,
#: deffcore.extraction.atlas_store, deffcore.runs.measurement), deleted with it.
SIDE_FILES = (
    "diagnostics.json", ".diagnostics.lock", "atlas.npz", "skip_effect.npz", "paired.json",
)  # fmt: skip
PARTIAL = "partial"
PARTIAL_NAMES = re.compile(r"manifest\.json|batch-\d{6}-\d{6}\.npz")


def _mode(path: Path) -> int | None:
    """`st_mode` of `path` itself (a link is not followed); None when nothing is there."""
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None


def is_regular(path: Path) -> bool:
    """A regular file, not a link (lstat)."""
    mode = _mode(path)
    return mode is not None and stat.S_ISREG(mode)


def is_real_dir(path: Path) -> bool:
    """A folder, not a link to one (lstat)."""
    mode = _mode(path)
    return mode is not None and stat.S_ISDIR(mode)


def _kind(path: Path) -> str:
    mode = _mode(path)
    if mode is None:
        return "missing"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a folder" if stat.S_ISDIR(mode) else ("a file" if stat.S_ISREG(mode) else "special")


def _our_file(path: Path, names: tuple[str, ...] | re.Pattern) -> str | None:
    """None when `path` is one of our regular files; else why not."""
    name = path.name
    known = TMP_RE.fullmatch(name) or (
        name in names if isinstance(names, tuple) else names.fullmatch(name)
    )
    if not known:
        return f"holds {name!r}, which deffcore never writes there"
    kind = _kind(path)
    return None if kind == "a file" else f"has {name} as {kind}, not a file deffcore wrote"


def foreign_reason(folder: Path) -> str | None:
    """Why `folder` is not provably a run entry deffcore made (None: it is, or it is absent).

    An empty real folder is ours to write into (an entry whose files were all removed)."""
    kind = _kind(folder)
    if kind == "missing":
        return None
    if kind != "a folder":
        return f"is {kind}, not a folder deffcore made"
    for child in folder.iterdir():
        if child.name == PARTIAL:
            if _kind(child) != "a folder":
                return f"has {PARTIAL}/ as {_kind(child)}, not a folder deffcore made"
            for f in child.iterdir():
                why = _our_file(f, PARTIAL_NAMES)
                if why is not None:
                    return f"{PARTIAL}/ {why}"
            continue
        why = _our_file(child, ENTRY_FILES + SIDE_FILES)
        if why is not None:
            return why
    return None


def marked(folder: Path) -> bool:
    """Whether a provably-ours folder holds a run (meta.json, states.npz or partial/), not only
    side files or temp files."""
    return any(is_regular(folder / name) for name in ENTRY_FILES) or is_real_dir(folder / PARTIAL)


def refuse_foreign(folder: Path) -> None:
    """ForeignCacheEntryError (one sentence) when `folder` exists and is not provably ours."""
    why = foreign_reason(folder)
    if why is not None:
        raise ForeignCacheEntryError(
            f"The cache entry {folder} {why}; deffcore reads, writes and deletes only what it "
            "made, so nothing was read, written or deleted there: move it away (a link itself, "
            "not its target) or set DEFF_CACHE_DIR to another folder."
        )


def writable_entry(folder: Path, *, create: bool = True) -> Path:
    """`folder`, created when absent; refused when it is not provably ours (see module doc)."""
    refuse_foreign(folder)
    if create and _mode(folder) is None:
        # another process may make it first
        with (
            os_errors(folder.parent, "The run's cache entry"),
            contextlib.suppress(FileExistsError),
        ):
            os.mkdir(folder)
        refuse_foreign(folder)
    return folder


def writable_partial(folder: Path) -> Path:
    """`<entry>/partial/`, created when absent (the entry must be provably ours)."""
    writable_entry(folder.parent)
    if _mode(folder) is None:
        made = contextlib.suppress(FileExistsError)
        with os_errors(folder.parent.parent, "The run's finished batches"), made:
            os.mkdir(folder)
    refuse_foreign(folder.parent)
    return folder


def entry_lock(path: Path) -> FileLock:
    """The file lock `<key>.lock`; ForeignCacheEntryError when it is a link or not a file."""
    kind = _kind(path)
    if kind not in ("missing", "a file"):
        raise ForeignCacheEntryError(
            f"The cache lock file {path} is {kind}, not a file deffcore made; nothing was "
            "locked through it: move it away or set DEFF_CACHE_DIR to another folder."
        )
    return FileLock(str(path))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[FileLock]:
    """Hold `entry_lock(path)`; an OSError while taking it is one sentence (CacheWriteError)."""
    lock = entry_lock(path)
    with os_errors(path.parent, "The run's lock"):
        lock.acquire()
    try:
        yield lock
    finally:
        lock.release()


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path`: a temp file in the same folder (created with O_EXCL, so never
    through a link), fsynced, renamed over `path` (which replaces the name itself, never a
    link's target). A failed write removes its temp file. OSErrors -> CacheWriteError."""
    if is_real_dir(path):
        raise ForeignCacheEntryError(
            f"The cache path {path} is a folder, not a file deffcore made; nothing was written "
            "there: move it away or set DEFF_CACHE_DIR to another folder."
        )
    with os_errors(path.parent, f"The cache file {path.name}"):
        replace_file(path, data)


def replace_file(path: Path, data: bytes) -> None:
    """The mechanism of `atomic_write`, for any output file: `data` to a temp file beside
    `path` (O_EXCL), fsynced, renamed over `path`; nothing is left behind when it fails (the
    OSError is raised for the caller to word)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_file(path: Path) -> None:
    """Remove one of our files (a regular file; a link or folder there is left alone)."""
    if is_regular(path):
        gone = contextlib.suppress(FileNotFoundError)
        with os_errors(path.parent, f"Removing {path.name}"), gone:
            os.unlink(path)


def remove_partial(folder: Path) -> None:
    """Remove `<entry>/partial/` when it is provably ours (its files one by one, never a link's
    target); anything else there is left alone."""
    if not is_real_dir(folder) or foreign_reason(folder.parent) is not None:
        return
    for f in folder.iterdir():
        if _our_file(f, PARTIAL_NAMES) is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f)
    with contextlib.suppress(OSError):  # not empty (a file appeared): left for later
        os.rmdir(folder)


_ADVICE = {
    errno.ENOSPC: "the disk is full; free some space or set DEFF_CACHE_DIR to a folder on "
    "another disk",
    errno.EDQUOT: "the disk quota is exceeded; free some space or set DEFF_CACHE_DIR to a "
    "folder on another disk",
    errno.EACCES: "permission denied; set DEFF_CACHE_DIR to a folder you can write",
    errno.EPERM: "operation not permitted; set DEFF_CACHE_DIR to a folder you can write",
    errno.EROFS: "the disk is read-only; set DEFF_CACHE_DIR to a writable folder",
    errno.ELOOP: "a symbolic link is in the way (deffcore never writes through one); move it "
    "away or set DEFF_CACHE_DIR to another folder",
}


@contextlib.contextmanager
def os_errors(folder: Path, what: str) -> Iterator[None]:
    """Any OSError inside becomes CacheWriteError: `what` could not be written in `folder`,
    why, and what to do (one sentence). DeffErrors pass unchanged."""
    try:
        yield
    except (DeffError, Timeout):  # a held lock (filelock's Timeout is an OSError) is no fault
        raise
    except OSError as err:
        why = _ADVICE.get(err.errno or -1) or f"{err.strerror or type(err).__name__}"
        raise CacheWriteError(
            f"{what} could not be written in the cache folder {folder}: {why}. Nothing "
            "half-written was left."
        ) from err
