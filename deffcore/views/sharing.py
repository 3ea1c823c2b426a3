"""Shared runs: a snapshot file someone sent, checked before anything reads it, and kept.

A snapshot is data only: JSON parsed by `json.loads` (never pickle, never eval), its size
capped before it is parsed, every field the pages read checked for type, shape and range, so
a corrupt, truncated, foreign or hostile file gets one sentence (`SnapshotError`) and nothing
else. An accepted run is a `deffcore.views.run_view.SnapshotView` with `source` "shared". Runs can
be kept in the cache's `.shared/` folder under their content hash (`save_shared`,
`share_file`), opened by that id (`open_shared`), listed (`list_shared`) and removed
(`delete_shared`, only a file provably written there); the Runs page shows them beside the
cached runs, and `deffcore app --run FILE` opens one in every new session (`APP_RUN_ENV`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.core.constants import METRICS, POOLINGS
from deffcore.core.errors import DeffError
from deffcore.views.labels import SPEC_DEFAULTS, SPEC_FIELDS
from deffcore.views.snapshot import SNAPSHOT_FORMAT, SnapshotView

#: Largest snapshot file read (a 30-layer run is ~150 kB; L = 100 is ~1.5 MB).
MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024
#: Largest L a snapshot may claim (every similarity matrix is L x L).
MAX_SNAPSHOT_LAYERS = 2048
_SHARED_NAME = re.compile(r"[0-9a-f]{16}\.json")
#: `deffcore app --run FILE` keeps the file (`share_file`) and names its content id here; each
#: new app session opens that shared run first (`open_shared`).
APP_RUN_ENV = "DEFF_APP_RUN"
_KEY = re.compile(r"[0-9a-f]{20}")


class SnapshotError(DeffError):
    """A file that is not a readable run snapshot of this format (one sentence why)."""


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _is_count(x: Any, low: int = 0) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low


def _check_spec_fields(spec: Any, where: str) -> None:
    from deffcore.core.constants import BOS_OPTIONS, PASSAGE_MODES

    if not isinstance(spec, dict) or not set(spec) <= set(SPEC_FIELDS):
        raise SnapshotError(f"{where}: its 'spec' is not a run specification.")
    full = {**SPEC_DEFAULTS, **spec}
    for name in ("model", "dataset", "dtype", "intervention"):
        value = full.get(name)
        if not isinstance(value, str) or not value or len(value) > 1000:
            raise SnapshotError(f"{where}: its spec field {name!r} is missing or not a name.")
    for name in ("n", "max_tokens", "seed"):
        if not _is_count(full.get(name)):
            raise SnapshotError(f"{where}: its spec field {name!r} is not a count.")
    if full["revision"] is not None and not isinstance(full["revision"], str):
        raise SnapshotError(f"{where}: its spec field 'revision' is not a string.")
    if full["passages"] not in PASSAGE_MODES or full["bos"] not in BOS_OPTIONS:
        raise SnapshotError(f"{where}: its spec names an unknown passages mode or BOS option.")


def _check_matrix(S: Any, L: int, where: str) -> None:
    ok = isinstance(S, list) and len(S) == L
    ok = ok and all(isinstance(row, list) and len(row) == L for row in S)
    if not ok or not all(_is_number(v) for row in S for v in row):
        raise SnapshotError(f"{where} is not an {L} x {L} matrix of numbers.")
    M = np.asarray(S, dtype=np.float64)
    if not np.isfinite(M).all() or np.abs(M).max() > 1 + 1e-6 or np.abs(M - M.T).max() > 1e-6:
        raise SnapshotError(f"{where} is not a symmetric similarity matrix with values in [-1, 1].")


def _check_numbers(obj: Any, where: str) -> None:
    """A dict of numbers (or None, or lists of numbers): what the pages read from the CLI JSON."""
    if not isinstance(obj, dict):
        raise SnapshotError(f"{where} is not an object.")
    for k, v in obj.items():
        items = v if isinstance(v, list) else [v]
        if not all(x is None or _is_number(x) or isinstance(x, str) for x in items):
            raise SnapshotError(f"{where}: field {k!r} is not a number.")


def _check_measurement(m: Any, where: str) -> None:
    if m is None:
        return
    if not isinstance(m, dict) or m.get("metric") not in METRICS:
        raise SnapshotError(f"{where}: its 'measurement' is not the CLI's JSON of a run.")
    results = m.get("results", {})
    if not isinstance(results, dict) or not set(results) <= set(POOLINGS):
        raise SnapshotError(f"{where}: its measurement results are not per pooling.")
    for pooling, r in results.items():
        if not isinstance(r, dict):
            raise SnapshotError(f"{where}: the result of pooling {pooling!r} is not an object.")
        for part in ("update_depth", "matched_references"):
            if part in r:
                _check_numbers(r[part], f"{where}: {part} of {pooling}")
    null = m.get("random_null", {})
    bands = null.get("results", {}) if isinstance(null, dict) else None
    if not isinstance(bands, dict):
        raise SnapshotError(f"{where}: its random-weight null is not per pooling.")
    for pooling, band in bands.items():
        _check_numbers(band, f"{where}: random-weight band of {pooling}")
        if band and not {"mean", "low", "high", "seeds"} <= set(band):
            raise SnapshotError(f"{where}: the random-weight band of {pooling} is incomplete.")


def validate_snapshot(data: Any, where: str = "The snapshot") -> dict[str, Any]:
    """`data` if it is a format-SNAPSHOT_FORMAT run snapshot whose every field the pages read
    has the right type, shape and range; SnapshotError (one sentence) otherwise."""
    if not isinstance(data, dict) or "similarity" not in data or "spec" not in data:
        raise SnapshotError(
            f"{where} is not a run snapshot (the JSON that `deffcore measure --snapshot` writes)."
        )
    if data.get("format") != SNAPSHOT_FORMAT:
        raise SnapshotError(
            f"{where} has snapshot format {data.get('format')!r}; this deffcore reads format "
            f"{SNAPSHOT_FORMAT}."
        )
    _check_spec_fields(data["spec"], where)
    L = data.get("layers")
    if not _is_count(L, 2) or L > MAX_SNAPSHOT_LAYERS:
        raise SnapshotError(
            f"{where}: 'layers' is not a layer count from 2 to {MAX_SNAPSHOT_LAYERS}."
        )
    if not _is_count(data.get("d_model"), 1) or not _is_count(data.get("n"), 1):
        raise SnapshotError(f"{where}: 'd_model' or 'n' is not a positive count.")
    key, command = data.get("key", ""), data.get("command", "")
    if not isinstance(key, str) or (key and not _KEY.fullmatch(key)):
        raise SnapshotError(f"{where}: 'key' is not a run key (20 hex digits).")
    if not isinstance(command, str) or len(command) > 10_000:
        raise SnapshotError(f"{where}: 'command' is not a command line.")
    ratios = data.get("pos0_norm_ratio")
    if (
        not isinstance(ratios, list)
        or len(ratios) != L + 1
        or not all(r is None or _is_number(r) for r in ratios)
    ):
        raise SnapshotError(f"{where}: 'pos0_norm_ratio' is not {L + 1} numbers (h_0 .. h_L).")
    sims = data["similarity"]
    if not isinstance(sims, dict) or "default" not in sims or not set(sims) <= set(POOLINGS):
        raise SnapshotError(f"{where}: 'similarity' is not a set of matrices per pooling.")
    for pooling, per_metric in sims.items():
        if not isinstance(per_metric, dict) or not set(per_metric) <= set(METRICS):
            raise SnapshotError(f"{where}: the similarity of {pooling!r} is not per metric.")
        for metric, S in per_metric.items():
            _check_matrix(S, L, f"{where}: the {pooling}/{metric} similarity")
    if "cka" not in sims["default"]:
        raise SnapshotError(f"{where} has no default-pooling linear CKA matrix.")
    _check_measurement(data.get("measurement"), where)
    if "paired" in data:  # the stored paired bootstrap (SPEC section 15), one schema
        from deffcore.statistics.paired import PairedBootstrap

        try:
            pb = PairedBootstrap.from_dict(data["paired"])
        except DeffError as err:
            raise SnapshotError(f"{where}: {err}") from None
        if (pb.layers, pb.n) != (L, data["n"]):
            raise SnapshotError(f"{where}: its paired bootstrap is not of this run's L and N.")
    if "supply" in data:  # what the run's data can give (tokens.WindowSource)
        from deffcore.inputs.tokens import WindowSource

        try:
            WindowSource.from_dict(data["supply"])
        except (ValueError, KeyError, TypeError):
            raise SnapshotError(f"{where}: 'supply' is not token counts per document.") from None
    return data


def read_snapshot(data: bytes, *, name: str = "The file") -> SnapshotView:
    """A shared run from the bytes of a snapshot file (an upload, a download) -> SnapshotView
    with `source` "shared" and `sha256` (of the bytes). SnapshotError when it is too large, not
    UTF-8 JSON, or not a valid snapshot; nothing in it is ever executed."""
    import hashlib

    where = str(name)
    if not isinstance(data, bytes | bytearray):
        raise SnapshotError(f"{where}: a snapshot is read from bytes, got {type(data).__name__}.")
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(
            f"{where} is {len(data) / 2**20:.1f} MiB, more than a snapshot's limit of "
            f"{MAX_SNAPSHOT_BYTES // 2**20} MiB."
        )
    try:
        parsed = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        reason = "not UTF-8 text" if isinstance(err, UnicodeDecodeError) else "not valid JSON"
        raise SnapshotError(f"{where} is {reason}, so it is not a run snapshot.") from None
    view = SnapshotView(validate_snapshot(parsed, where))
    view.source = "shared"
    view.sha256 = hashlib.sha256(bytes(data)).hexdigest()
    return view


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
                raise SnapshotError(
                    f"{shown} is {info.st_size / 2**20:.1f} MiB, more than a snapshot's limit "
                    f"of {MAX_SNAPSHOT_BYTES // 2**20} MiB."
                )
            return f.read(MAX_SNAPSHOT_BYTES + 1)
    except OSError as err:
        raise SnapshotError(f"{shown} cannot be read ({err.strerror or err}).") from None


def _resolved(path: Path | str, shown: str) -> Path:
    try:
        return Path(path).expanduser().resolve(strict=True)
    except (OSError, RuntimeError) as err:
        reason = getattr(err, "strerror", None) or err
        raise SnapshotError(f"{shown} cannot be read ({reason}).") from None


def open_snapshot(path: Path | str) -> SnapshotView:
    """A shared run from a snapshot file on disk (see `read_snapshot`). The path is resolved
    once and the opened file itself is checked (a regular file, within the size limit)."""
    shown = Path(path).name or str(path)
    resolved = _resolved(path, shown)
    view = read_snapshot(_read_bounded(resolved, shown), name=shown)
    view.path = resolved
    return view


def share_file(path: Path | str) -> SnapshotView:
    """Keep the snapshot file at `path` among the shared runs (`save_shared`): the file is
    read once, as `open_snapshot` reads it, and checked before it is kept (`deffcore app --run`).
    """
    shown = Path(path).name or str(path)
    return save_shared(_read_bounded(_resolved(path, shown), shown), name=shown)


def shared_dir() -> Path:
    """The cache's `.shared/` folder (a dot folder: never listed or deleted as a run)."""
    from deffcore.core.paths import cache_dir

    return cache_dir() / ".shared"


def save_shared(data: bytes, *, name: str = "The file") -> SnapshotView:
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
    """A file `save_shared` wrote: named by its content hash, a regular file, not a link."""
    import hashlib

    if path.is_symlink() or not path.is_file() or not _SHARED_NAME.fullmatch(path.name):
        return False
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] == path.name[:16]


def open_shared(sha256: str) -> SnapshotView:
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


def list_shared() -> list[SnapshotView]:
    """Every kept shared run, newest first: the files `save_shared` wrote (named by their
    content hash; anything else in the folder is not listed). One that no longer validates is
    skipped with a warning (a damaged file must not take the Runs page down)."""
    import warnings

    folder = shared_dir()
    if folder.is_symlink() or not folder.is_dir():
        return []
    views = []
    paths = [p for p in folder.iterdir() if _SHARED_NAME.fullmatch(p.name) and p.is_file()]
    for path in sorted(paths, key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            views.append(open_shared(path.name[:16]))
        except SnapshotError as err:
            warnings.warn(f"Skipped shared run {path.name}: {err}", stacklevel=2)
    return views


def delete_shared(sha256: str) -> None:
    """Remove the kept shared run whose content hash starts with `sha256` (16+ hex digits);
    SnapshotError for anything that is not provably a file `save_shared` wrote."""
    prefix = str(sha256)[:16]
    path = shared_dir() / f"{prefix}.json"
    if not re.fullmatch(r"[0-9a-f]{16}", prefix) or not _is_shared_file(path):
        raise SnapshotError(f"No shared run {sha256!r} is kept here; nothing was deleted.")
    path.unlink()
