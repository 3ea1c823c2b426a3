"""Files on disk: where deffcore keeps them (`cache_dir`, `DATA_DIR`, first below), and only
what is provably deffcore's is written or deleted.

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

The same rule holds for every file a command writes for the user (`report -o`, `measure
--snapshot`, a checkpoint's records): `check_output` is the one check and `write_output` the one
write. A path may be replaced only when it does not exist or is a regular file this tool wrote
(its first bytes say so: `REPORT`, `SNAPSHOT`); never a link, a folder, a FIFO, a device or a
socket, never anything inside a cache entry's folder or inside the installed package (its
shipped runs and data), never the run's input.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
from filelock import FileLock, Timeout

from deffcore.core.errors import (
    CacheWriteError,
    DeffError,
    ForeignCacheEntryError,
    InvalidArgumentError,
)

# ---------------------------------------------------------------------------------------------
# Where deffcore keeps files on disk: the cache folder, and the data shipped in the package.
#
# A leaf module (it imports only `deffcore.core.errors`, itself a leaf), so every stage can ask
# for the cache folder without importing another.

#: The package folder, `deffcore/`.
PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: The data shipped with the package: the paper's values, the precomputed runs.
DATA_DIR = PACKAGE_DIR / "data"
#: The default cache folder of a source checkout, `<repo>/cache` (see cache/README.md).
REPO_CACHE = PACKAGE_DIR.parent / "cache"


def default_cache_dir() -> Path:
    """`<repo>/cache` in a source checkout (the package sits beside the project's
    pyproject.toml); for an installed package (the wheel in site-packages, where no such file
    is) the user's cache folder, `$XDG_CACHE_HOME/deffcore` or `~/.cache/deffcore`, so an
    install never writes into site-packages."""
    if (REPO_CACHE.parent / "pyproject.toml").is_file():
        return REPO_CACHE
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "deffcore"


def cache_dir() -> Path:
    """`$DEFF_CACHE_DIR` if set, else `default_cache_dir()`; created on first use.

    Raises DeffError (one sentence) when the path is a file or cannot be created.
    """
    from_env = os.environ.get("DEFF_CACHE_DIR")
    path = Path(from_env or default_cache_dir()).expanduser()
    where = "DEFF_CACHE_DIR" if from_env else "The cache folder"
    if path.exists() and not path.is_dir():
        raise DeffError(
            f"{where} points at {path}, which is a file, not a folder; set DEFF_CACHE_DIR to a "
            "folder (it is created if missing)."
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DeffError(
            f"{where} {path} cannot be created ({err.strerror or err}); set DEFF_CACHE_DIR to a "
            "writable folder."
        ) from err
    return path


TMP_RE = re.compile(r"\..+\.tmp")
#: Files of a complete entry.
ENTRY_FILES = ("meta.json", "states.npz")
#: Files other modules keep inside a run's entry (deffcore.lenses.diagnostics_store,
#: deffcore.extraction.atlas, deffcore.runs.measure), deleted with it.
SIDE_FILES = (
    "diagnostics.json", ".diagnostics.lock", "atlas.npz", "skip_effect.npz", "paired.json",
    "measures.json",
)  # fmt: skip
PARTIAL = "partial"
PARTIAL_NAMES = re.compile(r"manifest\.json|batch-\d{6}-\d{6}\.npz")


def _mode(path: Path) -> int | None:
    """`st_mode` of `path` itself (a link is not followed); None when nothing is there."""
    try:
        return os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # a file where a folder is: nothing there
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


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """`arrays` as the bytes of an uncompressed .npz file (`np.savez`)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def npz_arrays(blob: bytes) -> dict[str, np.ndarray]:
    """Every array of an .npz file's bytes, pickles refused; a damaged file raises what
    `np.load` raises (callers treat any exception as a file that is not theirs)."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        return {name: z[name] for name in z.files}


def utc_stamp() -> str:
    """Now, as the "created" field of every file deffcore writes: 2026-01-31T12:00:00Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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


# ---------------------------------------------------------------------------------------------
# The user's outputs (module docstring): one check, one write.

#: What every HTML report deffcore writes carries in its <head> (`views.run_report`).
REPORT_MARK = '<meta name="generator" content="deffcore report">'
#: The recognisers of our outputs' first bytes: a report (its mark, first in its <head>) and a
#: run snapshot (a JSON object whose first key is "format", compact or indented:
#: `views.run.Run.to_snapshot`; the snapshot's own check then reads the whole of it).
REPORT = re.compile(rb"\A<!DOCTYPE html>\s*<html[^>]*><head>" + re.escape(REPORT_MARK.encode()))
SNAPSHOT = re.compile(rb'\A\s*\{\s*"format"\s*:\s*\d')
#: A lab's records (`labs.residual_carry`'s records.json: a JSON object whose first key is "lab").
LAB_RECORDS = re.compile(rb'\A\s*\{\s*"lab"\s*:')
#: A carry-lab checkpoint: its sidecar (a JSON object whose first key is "kind", ours), and the
#: checkpoint itself (torch.save's zip archive), replaced only beside such a sidecar.
CARRY_SIDECAR = re.compile(rb'\A\s*\{\s*"kind"\s*:\s*"deffcore-carry-gpt"')
CARRY_CHECKPOINT = re.compile(rb"\APK\x03\x04")
#: Bytes of an existing file read to recognise it as ours (its mark sits at its start).
MARK_PREFIX = 4096

_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind_refusal(path: Path, name: str) -> InvalidArgumentError | None:
    """Why `path` itself (never followed) can be no output: a link, a folder, a special file."""
    mode = _mode(path)
    if mode is None or stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return InvalidArgumentError(
            f"{name} {path} is a symbolic link; nothing is written through one: give the file "
            "itself, or another name."
        )
    if stat.S_ISDIR(mode):
        return InvalidArgumentError(f"{name} {path} is a folder; give a file name.")
    what = next((w for test, w in _SPECIAL if test(mode)), "not a regular file")
    return InvalidArgumentError(
        f"{name} {path} is {what}, not a file; deffcore writes only regular files, so nothing "
        "was run or replaced: give a file name."
    )


def has_mark(path: Path, marks: tuple[re.Pattern[bytes], ...]) -> bool:
    """Whether the regular file `path` begins (its first `MARK_PREFIX` bytes) as one of
    `marks` says (`REPORT`, `SNAPSHOT`). Opened with O_NOFOLLOW | O_NONBLOCK: a link or a FIFO
    put there meanwhile is no mark, never a hang."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, MARK_PREFIX)
    except OSError:
        return False
    finally:
        os.close(fd)
    return any(m.match(head) for m in marks)


def _inside(target: Path, folder: Path) -> bool:
    return folder == target or folder in target.parents


def _same_file(output: Path, source: Path) -> bool:
    """Whether writing `output` would replace `source` (the same file through any link)."""
    try:
        if output.exists() and os.path.samefile(output, source):
            return True
    except OSError:
        return False
    return output.resolve() == source.resolve()


def local_input(spec: object) -> Path | None:
    """The local file or folder an input spec names (`path`, `path:column`, `hf:path`; a random
    model's caller passes its base, `ModelSpec.trained`), or None for anything else (a packaged
    or hub name, a file that is not there)."""
    text = str(spec or "").removeprefix("hf:")
    for candidate in (text, text.rpartition(":")[0]):
        if candidate and Path(candidate).expanduser().exists():
            return Path(candidate).expanduser()
    return None


#: A run entry's folder name: its key, 20 lowercase hex digits (`extraction.cache.is_key`).
RUN_KEY = re.compile(r"[0-9a-f]{20}")


def _in_cache_records(target: Path, root: Path) -> bool:
    """Whether `target` lies in what the cache keeps of runs: a folder that holds a run (its
    meta.json, states, partial/), a key-named folder, or one of the app's dot folders
    (`.shared/`, `.uploads/`).
    A lab's own folder under the cache (the Residual carry page's `carry/<preset>/`) is not
    one: its records file is written under the output rule like any other."""
    if root not in target.parents:
        return False
    between = [p for p in target.parents if root in p.parents]
    top = target.relative_to(root).parts[0]
    return (
        top.startswith(".")
        or RUN_KEY.fullmatch(top) is not None
        or any(marked(folder) for folder in between)
    )


def check_output(
    path: str | Path,
    name: str,
    *,
    marks: tuple[re.Pattern[bytes], ...] = (),
    kind: str = "file",
    inputs: Mapping[str, object] | None = None,
    replaceable: Callable[[Path], str | None] | None = None,
) -> Path:
    """The one check of every output file a command writes (module docstring), run before
    hours of work are spent on it and again just before writing. Returns the path.

    Refused, one sentence each (InvalidArgumentError, nothing touched): a symbolic link, a
    folder, a FIFO, a device or a socket (`lstat`: nothing is followed); a path inside a cache
    entry's folder (its meta.json, states) or the app's shared and uploaded runs, or inside the
    installed package (its shipped runs and data); an input of the run (`inputs` maps what it
    is, e.g. "--dataset", to its spec; the same file through any link too); an existing file
    that does not begin as one of `marks` says (a `kind` this tool wrote), or that
    `replaceable(path)` gives a reason not to replace (e.g. the snapshot of another run).
    Creates the missing parent folders and writes and removes one temporary file there:
    permissions alone cannot tell (root ignores them, /proc refuses everything).
    """

    path = Path(path).expanduser()
    refusal = _kind_refusal(path, name)
    if refusal is not None:
        raise refusal
    target = Path(os.path.abspath(path))
    target = target.parent.resolve() / target.name  # the folder's links resolved, not the name
    root = cache_dir().resolve()
    if _in_cache_records(target, root):  # a run entry, .shared/, .uploads/
        raise InvalidArgumentError(
            f"{name} {path} is inside the cache's own folder {target.parent.name}, which only "
            "deffcore writes; give a path outside it."
        )
    if _inside(target, PACKAGE_DIR.resolve()):
        raise InvalidArgumentError(
            f"{name} {path} is inside the deffcore package (its shipped runs and data), which "
            "no command writes; give a path outside it."
        )
    for what, spec in (inputs or {}).items():
        source = local_input(spec)
        if source is not None and _same_file(path, source):
            raise InvalidArgumentError(
                f"{name} {path} is the {what} file; an output never overwrites an input, so "
                "nothing was run: give another file name."
            )
    if _mode(path) is not None:
        why = None if has_mark(path, marks) else f"is not a {kind} deffcore wrote"
        if why is None and replaceable is not None:
            why = replaceable(path)
        if why is not None:
            raise InvalidArgumentError(
                f"{name} {path} already exists and {why}; nothing was run or replaced: give "
                "another file name, or delete that file first."
            )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".deff-write-test-"):
            pass
    except OSError as err:
        raise InvalidArgumentError(
            f"{name} {path} cannot be written ({reason(err, path.parent)})."
        ) from err
    return path


def write_output(path: str | Path, data: bytes, name: str, *, then: str = "") -> Path:
    """Write an output file whole or not at all (`replace_file`: a temp file renamed into
    place, so a full disk or a crash leaves the old file, never half a new one). What is at
    `path` now is looked at again first: a link, folder or special file put there since
    `check_output` is refused, never written through or replaced. An OSError is one sentence
    (InvalidArgumentError) naming `name`, ending with `then`."""
    path = Path(path).expanduser()
    refusal = _kind_refusal(path, name)
    if refusal is not None:
        raise refusal
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, data)
    except OSError as err:
        advice = {
            errno.ENOSPC: "the disk is full",
            errno.EDQUOT: "the disk quota is exceeded",
            errno.EROFS: "the disk is read-only",
        }.get(err.errno or -1) or reason(err, path.parent)
        raise InvalidArgumentError(
            f"{name} {path} could not be written ({advice}); nothing half-written was left "
            f"and any file there is unchanged{then}."
        ) from err
    return path


def reason(err: OSError, folder: Path) -> str:
    """A short reason; a path whose parent is a file gets the plain explanation."""
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is a file, not a folder"
            break
    return err.strerror or type(err).__name__
