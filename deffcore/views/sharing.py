"""Shared runs: a snapshot file someone sent, checked before anything reads it, and kept.

A snapshot is data only: JSON parsed by `json.loads` (never pickle, never eval), its size
capped before it is parsed, every field the pages read checked for type, shape and range, so
a corrupt, truncated, foreign or hostile file gets one sentence (`SnapshotError`) and nothing
else. An accepted run is a `deffcore.views.run.Run` with `source` "shared". Runs can be
kept in the cache's `.shared/` folder under their content hash (`save_shared`, `share_file`),
opened by that id (`open_shared`), listed (`list_shared`) and removed (`delete_shared`, only a
file provably written there); the Runs page shows them beside the cached runs, and `deffcore
app --run FILE` opens one in every new session (`APP_RUN_ENV`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from deffcore.core.errors import SnapshotError
from deffcore.views.run import Run

#: Largest snapshot file read (a 30-layer run is ~150 kB; L = 100 is ~1.5 MB).
MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024
_SHARED_NAME = re.compile(r"[0-9a-f]{16}\.json")
#: `deffcore app --run FILE` keeps the file (`share_file`) and names its content id here; each
#: new app session opens that shared run first (`open_shared`).
APP_RUN_ENV = "DEFF_APP_RUN"


def read_snapshot(data: bytes, *, name: str = "The file") -> Run:
    """A shared run from the bytes of a snapshot file (an upload, a download) -> Run
    with `source` "shared" and `sha256` (of the bytes). SnapshotError when it is too large, not
    UTF-8 JSON, or not a valid snapshot; nothing in it is ever executed."""
    import hashlib

    from deffcore.views.run_schema import parse_snapshot_json

    where = str(name)
    if not isinstance(data, bytes | bytearray):
        raise SnapshotError(f"{where}: a snapshot is read from bytes, got {type(data).__name__}.")
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise _too_large(where, len(data))
    try:
        parsed = parse_snapshot_json(bytes(data).decode("utf-8"), where)
    except SnapshotError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        reason = "not UTF-8 text" if isinstance(err, UnicodeDecodeError) else "not valid JSON"
        raise SnapshotError(f"{where} is {reason}, so it is not a run snapshot.") from None
    view = Run.from_snapshot(parsed, where)
    view.source = "shared"
    view.sha256 = hashlib.sha256(bytes(data)).hexdigest()
    return view


def _too_large(shown: str, size: int) -> SnapshotError:
    return SnapshotError(
        f"{shown} is {size / 2**20:.1f} MiB, more than a snapshot's limit of "
        f"{MAX_SNAPSHOT_BYTES // 2**20} MiB."
    )


def _read_bounded(path: Path, shown: str, *, follow_links: bool = True) -> bytes:
    """The bytes of the regular file at `path`, at most `MAX_SNAPSHOT_BYTES`: the file is
    opened once and checked through its descriptor (a FIFO must not hang the open: O_NONBLOCK;
    `follow_links=False`: a link is refused, O_NOFOLLOW)."""
    import os
    import stat

    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise SnapshotError(f"{shown} is not a regular file.")
            if info.st_size > MAX_SNAPSHOT_BYTES:
                raise _too_large(shown, info.st_size)
            return f.read(MAX_SNAPSHOT_BYTES + 1)
    except OSError as err:
        raise SnapshotError(f"{shown} cannot be read ({err.strerror or err}).") from None


def _shown(path: Path | str) -> str:
    """The file's name as messages show it; one sentence unless `path` is a path (text or an
    os.PathLike of text), never pathlib's TypeError."""
    import os

    if not isinstance(path, str | os.PathLike) or not isinstance(os.fspath(path), str):
        raise SnapshotError(
            f"Give the path to a snapshot file as text or a pathlib.Path, not "
            f"{type(path).__name__}."
        )
    return Path(path).name or str(path)


def _resolved(path: Path | str, shown: str) -> Path:
    try:
        return Path(path).expanduser().resolve(strict=True)
    except (OSError, RuntimeError) as err:
        reason = getattr(err, "strerror", None) or err
        raise SnapshotError(f"{shown} cannot be read ({reason}).") from None


def open_snapshot(path: Path | str) -> Run:
    """A shared run from a snapshot file on disk (see `read_snapshot`). The path is resolved
    once and the opened file itself is checked (a regular file, within the size limit)."""
    shown = _shown(path)
    resolved = _resolved(path, shown)
    view = read_snapshot(_read_bounded(resolved, shown), name=shown)
    view.path = resolved
    return view


def share_file(path: Path | str) -> Run:
    """Keep the snapshot file at `path` among the shared runs (`save_shared`): the file is
    read once, as `open_snapshot` reads it, and checked before it is kept (`deffcore app --run`).
    """
    shown = _shown(path)
    return save_shared(_read_bounded(_resolved(path, shown), shown), name=shown)


def shared_dir() -> Path:
    """The cache's `.shared/` folder (a dot folder: never listed or deleted as a run)."""
    from deffcore.core.files import cache_dir

    return cache_dir() / ".shared"


def save_shared(data: bytes, *, name: str = "The file") -> Run:
    """Check a shared snapshot and keep it in `shared_dir()` as `<sha256[:16]>.json` (the same
    file twice is one entry). Returns its view (with `path`). Refuses a `.shared` that is a
    link or not a folder."""
    import os
    import tempfile

    view = read_snapshot(data, name=name)
    folder = shared_dir()
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise SnapshotError(f"{folder} is not a folder of ours; nothing was saved.")
    target = folder / f"{view.sha256[:16]}.json"
    try:
        folder.mkdir(exist_ok=True)
        if _is_shared_file(target):  # kept before: newest again (listed first)
            os.utime(target, follow_symlinks=False)
        else:  # written whole, then renamed over whatever held the name (a link is replaced)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
            with open(fd, "wb") as f:
                f.write(bytes(data))
            Path(tmp).replace(target)
    except OSError as err:
        raise SnapshotError(
            f"{name} is a valid run but cannot be kept in {folder} ({err.strerror or err})."
        ) from None
    view.path = target
    return view


def _is_shared_file(path: Path) -> bool:
    """A file `save_shared` wrote: named by its content hash, a regular file, not a link, no
    larger than a snapshot, in a real `.shared/` folder (not a link to one)."""
    import hashlib

    from deffcore.core.files import is_real_dir, is_regular

    if not is_real_dir(path.parent) or not is_regular(path):
        return False
    if not _SHARED_NAME.fullmatch(path.name) or path.lstat().st_size > MAX_SNAPSHOT_BYTES:
        return False
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] == path.name[:16]


def open_shared(sha256: str) -> Run:
    """The kept shared run whose content hash starts with `sha256` (16+ hex digits), read once.
    SnapshotError unless it is provably a file `save_shared` wrote: a regular file, not a link,
    named by the hash of the very bytes read."""
    prefix = str(sha256)[:16]
    folder = shared_dir()
    missing = SnapshotError(f"No shared run {str(sha256)[:40]!r} is kept here.")
    if not re.fullmatch(r"[0-9a-f]{16}", prefix) or folder.is_symlink() or not folder.is_dir():
        raise missing
    path = folder / f"{prefix}.json"
    if not path.exists():
        raise missing
    shown = f"The shared run {prefix}"
    view = read_snapshot(_read_bounded(path, shown, follow_links=False), name=shown)
    if view.sha256[:16] != prefix:
        raise SnapshotError(f"{shown} has changed since it was kept; share it again.")
    view.path = path
    return view


@dataclass
class SharedEntry:
    """One file `.shared/` holds under a content id: its view, or the one sentence why it
    cannot be read (a file kept by an older deffcore whose schema was looser, or changed since
    it was kept). `deletable`: provably a file `save_shared` wrote (`delete_shared` removes it).
    """

    sha256: str  # the 16 hex digits of its name
    path: Path
    view: Run | None
    error: str | None
    deletable: bool


def shared_entries() -> list[SharedEntry]:
    """Every file named like a kept shared run, newest first, each read on its own: one that
    does not read is an entry with its reason, never an exception (it must stay deletable)."""
    folder = shared_dir()
    if folder.is_symlink() or not folder.is_dir():
        return []
    paths = [p for p in folder.iterdir() if _SHARED_NAME.fullmatch(p.name) and p.is_file()]
    entries = []
    for path in sorted(paths, key=lambda p: p.lstat().st_mtime, reverse=True):
        prefix = path.name[:16]
        try:
            view, error = open_shared(prefix), None
        except SnapshotError as err:
            view, error = None, str(err)
        except Exception as err:  # one entry never takes the list down, whatever it raised
            view, error = None, f"The shared run {prefix} cannot be read ({type(err).__name__})."
        entries.append(SharedEntry(prefix, path, view, error, _is_shared_file(path)))
    return entries


def list_shared() -> list[Run]:
    """Every kept shared run that reads, newest first: the files `save_shared` wrote (named by
    their content hash; anything else in the folder is not listed). One that no longer
    validates is skipped with a warning (`shared_entries` lists it, to delete it)."""
    import warnings

    views = []
    for entry in shared_entries():
        if entry.view is not None:
            views.append(entry.view)
        else:
            warnings.warn(f"Skipped shared run {entry.path.name}: {entry.error}", stacklevel=2)
    return views


def delete_shared(sha256: str) -> None:
    """Remove the kept shared run whose content hash starts with `sha256` (16+ hex digits);
    SnapshotError for anything that is not provably a file `save_shared` wrote."""
    prefix = str(sha256).removeprefix("shared:")[:16]
    path = shared_dir() / f"{prefix}.json"
    if not re.fullmatch(r"[0-9a-f]{16}", prefix) or not _is_shared_file(path):
        raise SnapshotError(
            f"No shared run {str(sha256)[:40]!r} is kept here; nothing was deleted."
        )
    try:
        path.unlink()
    except OSError as err:
        raise SnapshotError(
            f"The shared run {prefix} cannot be deleted ({err.strerror or err})."
        ) from None
