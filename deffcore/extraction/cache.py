"""Keyed on-disk store of pooled states: atomic, locked, corruption-safe, resumable; below it,
in order, an unfinished run's batches (`PartialRun`), the entries (listing, deleting) and a
run's prefixes (a window run served from, or resumed from, a run of another N).

Layout (under `cache_dir()`, which is `$DEFF_CACHE_DIR` or `<repo>/cache`):

    <key>/states.npz   pooled matrices, float32:
                         default, first_non_bos, token_normed, no_pos0   (L+1, N, d)  h_0 .. h_L
                         pos0_norm_ratio                                 (L+1,)
                         lengths                                 (N,) int64   tokens per passage
    <key>/meta.json    {"format": 1, "key", "spec": {RunSpec fields}, "code_version",
                        "states_sha256": sha256 of states.npz, "states_bytes", "created",
                        "layers", "d_model", "n", "n_dropped_short", "tokens", "elapsed_s",
                        "model_identity", "dataset_identity", "extract_meta": {...}}
    <key>/partial/     an unfinished extraction (see `PartialRun`): manifest.json (the plan)
                       and one batch-<index>-<rows>.npz per saved chunk of finished batches;
                       removed once the complete entry is written
    <key>.lock         a filelock held while one process computes the entry
    models/, carry/,   other owners' folders (packaged model files, lab checkpoints): never
    .uploads/ ...      listed, never deleted here

`key` is the first 20 hex digits of a sha256 over the RunSpec fields, the model's weights id,
the dataset's content id and `CODE_VERSION` (see `RunSpec.key`).

Writes are atomic: each file is written to a temp name in its folder and moved into place with
`os.replace`; `meta.json` is written last, so an entry without a valid meta is incomplete.
Nothing read is trusted: a meta.json that is not an object with the documented fields and types,
an npz whose sha256 does not match the meta, arrays whose shapes differ from what the meta
states — each makes the entry corrupt: `load` returns None with a warning and `get_or_compute`
recomputes and overwrites.

Only a *run entry* (`is_run_entry`) is ever listed, written or deleted; anything else named
like a run's entry or lock is refused in one sentence and never read, written or deleted
through (`deffcore.core.files`, the one mechanism every write and delete goes through); every
OS error of the cache is one sentence (CacheWriteError) and leaves nothing half-written.
States holding NaN or inf are never stored, and a stored entry holding them is corrupt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from filelock import FileLock, Timeout

from deffcore.core import files
from deffcore.core.constants import CODE_VERSION, EXTRACTED_POOLINGS, NOISE_MIN_N, WINDOW_MODES
from deffcore.core.errors import CacheCorruptError, DeffError, ForeignCacheEntryError
from deffcore.core.files import cache_dir
from deffcore.core.lazy import torch  # imported on first use
from deffcore.extraction.forward import (
    TOKEN_BUDGET,
    BatchCheckpoint,
    PooledStates,
    SavedBatch,
    check_rows_fit,
)
from deffcore.inputs.run_spec import RunSpec

if TYPE_CHECKING:
    from deffcore.inputs.texts import DatasetSpec  # a type only: `RunSpec.dataset_spec`

FORMAT_VERSION = 1

_KEY_RE = files.RUN_KEY


class UnknownRunError(DeffError):
    """A cache key that names no stored run."""


class RunInUseError(DeffError):
    """A run that a process is computing right now (its lock is held)."""


def is_key(name: object) -> bool:
    """True when `name` has the format of a run key (20 lowercase hex digits)."""
    return isinstance(name, str) and _KEY_RE.fullmatch(name) is not None


_SPEC_FIELDS = {f.name for f in fields(RunSpec)}

_SPEC_REQUIRED = {"model": str, "dataset": str, "n": int, "max_tokens": int, "seed": int}


def entry_folder(key: str) -> Path:
    return cache_dir() / key


def lock_path(key: str) -> Path:
    return cache_dir() / f"{key}.lock"


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_spec(spec: object, where: str) -> dict[str, Any]:
    if not isinstance(spec, dict) or not set(spec) <= _SPEC_FIELDS:
        raise CacheCorruptError(f"{where}: its 'spec' is not a run specification.")
    for name, kind in _SPEC_REQUIRED.items():
        value = spec.get(name)
        if not (is_int(value) if kind is int else isinstance(value, kind)):
            raise CacheCorruptError(f"{where}: its spec field {name!r} is missing or not {kind}.")
    return spec


def check_meta(meta: object, key: str) -> dict[str, Any]:
    """`meta` if it is a format-1 meta.json of run `key`; CacheCorruptError otherwise."""
    where = f"Cache entry {key}"
    if not isinstance(meta, dict):
        raise CacheCorruptError(f"{where}: meta.json is not a JSON object.")
    if meta.get("format") != FORMAT_VERSION:
        raise CacheCorruptError(f"{where} has format {meta.get('format')!r}.")
    if meta.get("key") != key:
        raise CacheCorruptError(f"{where}: meta.json names key {meta.get('key')!r}.")
    for name in ("layers", "d_model", "n", "n_dropped_short", "tokens", "states_bytes"):
        value = meta.get(name)
        if not is_int(value) or value < (1 if name in ("layers", "d_model") else 0):
            raise CacheCorruptError(f"{where}: meta field {name!r} is missing or not a count.")
    sha = meta.get("states_sha256")
    if not isinstance(sha, str) or re.fullmatch(r"[0-9a-f]{64}", sha) is None:
        raise CacheCorruptError(f"{where}: meta field 'states_sha256' is not a sha256.")
    if not isinstance(meta.get("extract_meta", {}), dict | None):
        raise CacheCorruptError(f"{where}: meta field 'extract_meta' is not an object.")
    check_spec(meta.get("spec"), where)
    return meta


def read_json_file(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CacheCorruptError(f"{path} cannot be read: {err}.") from err


def store(
    spec: RunSpec,
    pooled: PooledStates,
    *,
    sources: dict[str, Any],
    elapsed_s: float | None = None,
) -> Path:
    """Write `pooled` under `spec.key()` atomically; returns the entry folder.

    `sources` is `spec.sources()`, made by the caller before the run (what the model and the
    dataset were: the entry's meta records them), so the store never asks the inputs again.

    The entry's partial/ folder (finished batches of an interrupted run) is removed once the
    complete entry is in place.
    """
    key = spec.key()
    check_finite(pooled, spec.dtype)  # a broken entry is never stored
    folder = files.writable_entry(entry_folder(key))  # never through a link, never a user's folder
    arrays = {name: np.asarray(pooled.pooled[name], dtype=np.float32) for name in pooled.pooled}
    arrays["pos0_norm_ratio"] = np.asarray(pooled.pos0_norm_ratio, dtype=np.float32)
    arrays["lengths"] = np.asarray(pooled.lengths, dtype=np.int64)
    npz = files.npz_bytes(arrays)
    L1, n, d = arrays["default"].shape
    meta = {
        "format": FORMAT_VERSION,
        "key": key,
        "spec": asdict(spec),
        "code_version": CODE_VERSION,
        "states_sha256": hashlib.sha256(npz).hexdigest(),
        "states_bytes": len(npz),
        "created": files.utc_stamp(),
        "layers": L1 - 1,
        "d_model": d,
        "n": n,
        "n_dropped_short": int(pooled.n_dropped_short),
        "tokens": int(pooled.tokens),
        "elapsed_s": elapsed_s,
        "model_identity": sources["model_identity"],
        "dataset_identity": sources["dataset_identity"],
        "extract_meta": pooled.meta,
    }
    # meta.json last: it is the commit marker and carries the npz checksum.
    files.remove_file(folder / "meta.json")
    files.atomic_write(folder / "states.npz", npz)
    try:
        files.atomic_write(folder / "meta.json", json.dumps(meta, indent=2, default=str).encode())
    except BaseException:  # (a full disk) no states without their meta; partial/ stays to resume
        with contextlib.suppress(DeffError):
            files.remove_file(folder / "states.npz")
        raise
    files.remove_partial(folder / files.PARTIAL)
    return folder


def check_finite(pooled: PooledStates, dtype: str | None = None) -> None:
    """NonFiniteActivationsError (one sentence) unless every pooled array and the position-0
    norm ratio are finite: the states of a model whose residual norms overflow float32, or that
    produced NaN, are never stored or measured."""
    from deffcore.core.errors import NonFiniteActivationsError, non_finite_advice

    where = _non_finite(pooled)
    if where is not None:
        raise NonFiniteActivationsError(
            f"The pooled states hold NaN or inf ({where}), so they cannot be measured and were "
            f"not stored; {non_finite_advice(dtype)}."
        )


def _non_finite(pooled: PooledStates) -> str | None:
    """Where the first NaN/inf of `pooled` is ("pooling 'default' at layer 3"), None if none."""
    arrays = [(f"pooling {name!r}", arr) for name, arr in pooled.pooled.items()]
    arrays.append(("the position-0 norm ratio", pooled.pos0_norm_ratio))
    for what, arr in arrays:
        finite = np.isfinite(np.asarray(arr))
        if not finite.all():
            return f"{what} at layer {int(np.argwhere(~finite)[0][0])}"
    return None


def _checked_arrays(key: str, sha256: object) -> dict[str, np.ndarray]:
    """The arrays of entry `key`'s states.npz when its bytes have the checksum `sha256`;
    CacheCorruptError (one sentence) otherwise."""
    try:
        npz = (entry_folder(key) / "states.npz").read_bytes()
    except OSError as err:
        raise CacheCorruptError(f"Cache entry {key} cannot be read: {err}.") from err
    if hashlib.sha256(npz).hexdigest() != sha256:
        raise CacheCorruptError(f"Cache entry {key}: states.npz does not match its checksum.")
    try:
        return files.npz_arrays(npz)
    except Exception as err:  # a valid checksum makes this unlikely; never crash on it
        raise CacheCorruptError(f"Cache entry {key}: states.npz is unreadable: {err}.") from err


def _read_entry(key: str) -> tuple[PooledStates, dict[str, Any]] | None:
    """The stored run, None if absent; CacheCorruptError if present but invalid."""
    folder = entry_folder(key)
    files.refuse_foreign(folder)  # a link or a user's folder is never read as a run
    meta_path, npz_path = folder / "meta.json", folder / "states.npz"
    if not meta_path.exists():
        if npz_path.exists():
            raise CacheCorruptError(f"Cache entry {key} has states but no meta.json.")
        return None
    meta = check_meta(read_json_file(meta_path), key)
    arrays = _checked_arrays(key, meta["states_sha256"])
    L1, n, d = meta["layers"] + 1, meta["n"], meta["d_model"]
    for name in EXTRACTED_POOLINGS:
        if name not in arrays or arrays[name].shape != (L1, n, d):
            raise CacheCorruptError(f"Cache entry {key}: pooling {name!r} is missing or misshapen.")
    ratio, lengths = arrays.get("pos0_norm_ratio"), arrays.get("lengths")
    if ratio is None or ratio.shape != (L1,) or lengths is None or lengths.shape != (n,):
        raise CacheCorruptError(f"Cache entry {key}: pos0_norm_ratio or lengths is misshapen.")
    pooled = PooledStates(
        pooled={name: arrays[name] for name in EXTRACTED_POOLINGS},
        pos0_norm_ratio=ratio,
        n_dropped_short=meta["n_dropped_short"],
        tokens=meta["tokens"],
        meta=meta.get("extract_meta") or {},
        lengths=lengths,
    )
    where = _non_finite(pooled)
    if where is not None:  # stored by an older version: corrupt, so recomputed
        raise CacheCorruptError(f"Cache entry {key} holds NaN or inf states ({where}).")
    return pooled, meta


def load(spec: RunSpec, *, strict: bool = False) -> PooledStates | None:
    """The cached states of `spec`, or None (absent, or corrupt: a warning unless `strict`).

    A partial entry (an interrupted extraction) is absent here: it never loads as complete.
    """
    try:
        found = _read_entry(spec.key())
    except CacheCorruptError as err:
        if strict:
            raise
        again = "" if isinstance(err, ForeignCacheEntryError) else " It will be recomputed."
        warnings.warn(f"{err}{again}", stacklevel=2)
        return None
    return None if found is None else found[0]


def load_meta(key: str) -> dict[str, Any]:
    """The meta.json of a complete stored run (UnknownRunError if there is none)."""
    if not is_key(key):
        raise UnknownRunError(f"{key!r} is not a run key (20 lowercase hex digits).")
    folder = entry_folder(key)
    try:
        files.refuse_foreign(folder)
    except ForeignCacheEntryError as err:
        raise UnknownRunError(str(err)) from None
    if not (folder / "meta.json").exists() and (folder / "partial").is_dir():
        raise UnknownRunError(
            f"The run {key} was interrupted before it finished; run the same settings again to "
            "resume it from its last finished batch."
        )
    try:
        return check_meta(read_json_file(folder / "meta.json"), key)
    except CacheCorruptError as err:
        raise UnknownRunError(
            f"No readable cached run with key {key!r} in {cache_dir()} ({err})"
        ) from err


def get_or_compute(
    spec: RunSpec, compute: Callable[[], PooledStates], *, sources: dict[str, Any]
) -> tuple[PooledStates, bool, dict[str, Any]]:
    """(pooled, cached, meta): the stored entry, or `compute()` stored under a file lock
    (`sources`: `spec.sources()`, recorded in a new entry's meta, see `store`).

    The lock makes concurrent processes asking for the same key compute it once: the second
    waits, then finds the first one's entry. The lock file is removed once the entry is
    complete (safe for waiters: filelock notices that the inode it locked was unlinked and
    retries on a fresh file, where it finds the complete entry). `compute` may persist
    finished batches through `PartialRun(spec)` (it runs under the lock, so one process writes
    a partial at a time).
    """
    key = spec.key()
    files.refuse_foreign(entry_folder(key))  # before any work: a link or a user's folder is refused
    try:
        found = _read_entry(key)
    except CacheCorruptError:
        found = None
    if found is not None:
        return found[0], True, found[1]
    lock = lock_path(key)
    with files.locked(lock):
        try:
            found = _read_entry(key)
        except CacheCorruptError as err:
            warnings.warn(f"{err} Recomputing it.", stacklevel=2)
            found = None
        if found is not None:
            files.remove_file(lock)
            return found[0], True, found[1]
        start = time.perf_counter()
        pooled = compute()
        elapsed = time.perf_counter() - start
        store(spec, pooled, sources=sources, elapsed_s=elapsed)
        found = _read_entry(key)
        assert found is not None  # just written under the lock
        files.remove_file(lock)
        return found[0], False, found[1]


# ---------------------------------------------------------------------------------------------
# An unfinished extraction's finished batches, kept in `<key>/partial/` so a run resumes.

PARTIAL_FORMAT = 1

_BATCH_RE = re.compile(r"batch-(\d{6})-(\d{6})\.npz")


class PartialRun:
    """The finished batches of `spec`'s extraction, kept in `<key>/partial/` as it goes.

    Implements `deffcore.extraction.forward.BatchCheckpoint`. Files:

        manifest.json                {"format": 1, "key", "spec", "created", "plan": {...}}
        batch-<index>-<rows>.npz     one chunk of consecutive finished batches: slots (b,)
                                     int64 (passage rows, in plan order), cap () int64
                                     (batch-size cap after it, -1 = auto),
                                     one (L+1, b, d) float32 array per extracted pooling,
                                     pos0_ratio (L+1, b) float32

    Every file is written to a temp name and renamed into place, so a kill at any instant
    leaves whole files only. `plan` (from `extract_pooled`: token ids' sha256, L, d, device,
    dtype, batching) must match the manifest's for the batches to be reused; otherwise the
    partial is discarded. Only a caller holding the entry's lock (inside `get_or_compute`)
    should write one.
    """

    def __init__(self, spec: RunSpec, key: str | None = None):
        self.spec = spec
        self.key = key or spec.key()
        self.folder = entry_folder(self.key) / "partial"

    def discard(self) -> None:
        files.remove_partial(self.folder)

    def _start(self, plan: dict[str, Any]) -> None:
        self.discard()
        files.writable_partial(self.folder)
        manifest = {
            "format": PARTIAL_FORMAT,
            "key": self.key,
            "spec": asdict(self.spec),
            "created": files.utc_stamp(),
            "plan": plan,
        }
        files.atomic_write(self.folder / "manifest.json", json.dumps(manifest, indent=2).encode())

    def resume(self, plan: dict[str, Any], order: list[int]) -> list[SavedBatch]:
        """The finished batches that continue `order` from its start, in order.

        Starts a fresh partial (and returns []) when there is none or its plan differs. A batch
        file that is unreadable, misshapen, non-finite or does not continue `order` ends the
        resumed prefix; it and every later file are deleted.
        """
        plan = json.loads(json.dumps(plan))  # the manifest's JSON form, for comparison
        files.refuse_foreign(self.folder.parent)
        try:
            manifest = read_json_file(self.folder / "manifest.json")
        except CacheCorruptError:
            manifest = None
        if not (
            isinstance(manifest, dict)
            and manifest.get("format") == PARTIAL_FORMAT
            and manifest.get("key") == self.key
            and manifest.get("plan") == plan
        ):
            if manifest is not None:
                warnings.warn(
                    f"The unfinished run {self.key} was extracted with other settings (device, "
                    "dtype or batching); starting it again.",
                    stacklevel=2,
                )
            self._start(plan)
            return []
        for tmp in self.folder.iterdir():  # half-written files of a killed process
            if files.TMP_RE.fullmatch(tmp.name):
                files.remove_file(tmp)
        batch_files: dict[int, list[Path]] = {}
        for path in self.folder.iterdir():
            m = _BATCH_RE.fullmatch(path.name)
            if m:
                batch_files.setdefault(int(m.group(1)), []).append(path)
        L1, d = plan["layers"] + 1, plan["d_model"]
        saved: list[SavedBatch] = []
        start, index = 0, 0
        while len(batch_files.get(index, [])) == 1:
            batch = self._read_batch(batch_files[index][0], L1, d)
            if batch is None or batch.slots.tolist() != order[start : start + len(batch.slots)]:
                break
            saved.append(batch)
            start += len(batch.slots)
            index += 1
        for idx, paths in batch_files.items():
            if idx >= index:
                for path in paths:
                    files.remove_file(path)
        return saved

    @staticmethod
    def _read_batch(path: Path, L1: int, d: int) -> SavedBatch | None:
        try:
            arrays = files.npz_arrays(path.read_bytes())
        except Exception:  # a torn or foreign file: not a finished batch
            return None
        slots, cap = arrays.get("slots"), arrays.get("cap")
        if slots is None or slots.ndim != 1 or slots.dtype != np.int64 or cap is None:
            return None
        b = len(slots)
        rows = {}
        for name in (*EXTRACTED_POOLINGS, "pos0_ratio"):
            shape = (L1, b) if name == "pos0_ratio" else (L1, b, d)
            arr = arrays.get(name)
            if arr is None or arr.shape != shape or arr.dtype != np.float32:
                return None
            if not np.isfinite(arr).all():
                return None
            rows[name] = arr
        cap_value = int(cap)
        return SavedBatch(slots=slots, rows=rows, cap=None if cap_value < 1 else cap_value)

    def save(self, index: int, batch: SavedBatch) -> None:
        """Persist finished batch `index` (atomic)."""
        npz = files.npz_bytes(
            {
                "slots": np.asarray(batch.slots, dtype=np.int64),
                "cap": np.asarray(-1 if batch.cap is None else batch.cap, dtype=np.int64),
                **{name: np.asarray(arr, dtype=np.float32) for name, arr in batch.rows.items()},
            }
        )
        name = f"batch-{index:06d}-{len(batch.slots):06d}.npz"
        files.refuse_foreign(self.folder.parent)
        files.atomic_write(self.folder / name, npz)


def partial_info(folder: Path) -> dict[str, Any]:
    """Spec and progress of a partial folder (CacheCorruptError if its manifest is bad)."""
    manifest = read_json_file(folder / "manifest.json")
    where = f"Unfinished run {folder.parent.name}"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("plan"), dict):
        raise CacheCorruptError(f"{where}: manifest.json is not a run manifest.")
    total = manifest["plan"].get("n")
    if not is_int(total):
        raise CacheCorruptError(f"{where}: manifest.json has no passage count.")
    done = 0
    for path in folder.iterdir():
        m = _BATCH_RE.fullmatch(path.name)
        if m:
            done += int(m.group(2))
    layers = manifest["plan"].get("layers")
    return {
        "layers": layers if is_int(layers) else None,
        "spec": check_spec(manifest.get("spec"), where),
        "created": manifest.get("created") if isinstance(manifest.get("created"), str) else "",
        "done_passages": min(done, total),
        "total_passages": total,
    }


# ---------------------------------------------------------------------------------------------
# The runs in the cache: listing them with their status, deleting one, removing stale leftovers
# (only run entries: `is_run_entry`).


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
            files.remove_file(path)
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
                    files.remove_file(path)
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
        files.remove_file(lock_path(key))
    finally:
        lock.release()


# ---------------------------------------------------------------------------------------------
# A prefix of a run is a run: a window run's first k passages, batch for batch, as they land,
# and a window run's batches from a cached run of the same settings with another N.
#
#     rows = PrefixRows(n)                      # fed with each landed batch (SavedBatch)
#     rows.pooled(256, max_tokens=128)          # the first 256 passages: a 256-run's states
#
# The prefix property (SPEC 14, "Prefix estimate"): a run's passages are a seeded permutation
# truncated to N (`texts.load_passages`, `tokens.sample_windows`), and in the window modes every
# passage has `max_tokens` tokens, so extraction keeps the sample's order (its sort by length is
# stable) and cuts it into batches of one size b (`batch_rows`). For k a multiple of b the first
# k passages of an N-run are extracted in the very batches a k-run uses: their pooled rows are
# bit-identical (tests/test_anytime.py). `schedule` puts the looks at 32, 64, 128, ... passages.
# Where the property fails a run cannot stop early (`prefix_refusal` says why), but estimates
# are still made: `PrefixRows` counts the sample's first k passages once all of them landed.
#
# ## From the cache: a run of another N
#
# A cache key holds N, so runs of 4,096 and 1,024 passages are two entries; by the prefix
# property they share their first rows, whole batch for whole batch:
#
# - a larger run starts from a smaller entry's rows (`PrefixCheckpoint.resume`: handed to the
#   extraction like an interrupted run's batches; it continues with the next batch), and
# - a smaller run is a larger entry's first n rows (`from_larger`: no model is loaded),
#
# both bit-identical to an uninterrupted run of their N (tests/test_prefix_cache.py).
#
# What makes an entry a source (`_usable_rows`): the same RunSpec but N (its key recomputed, so
# the model's weights and the dataset's content are the same and the code version too), a window
# mode over a dataset read whole (`prefix_refusal`), extracted on the same device and
# dtype with right padding, every passage `max_tokens` long, none dropped, and every batch of the
# b passages this run would use (`batch_rows`). The last is recorded when the run is
# stored (`extract_meta["batch_rows"] = b`, by `finish`): every chunk its checkpoint saw kept the
# run's batch cap (an out-of-memory halving changes it) and the extraction halved nothing. Runs
# stored by other paths (a Ray worker's cell, an older version) are not sources.
#
# Per-passage position-0 ratios: an entry keeps only their mean over its N passages
# (`pos0_norm_ratio`), which a prefix cannot be recomputed from. So a window run stores, beside
# its pooled states in `states.npz`, the array `pos0_ratio_prefix` (L+1, m) float32: the
# per-passage ratios of its first m passages (every checkpointed batch: all but the last chunk
# of an extraction; all k passages of a run stopped early). Only those m rows are reusable.
# The array rides in the entry's checksummed `states.npz` (`cache.store` writes every array of
# `PooledStates.pooled`; `cache.load` reads the poolings it knows and ignores it), and is read
# back here from the same bytes after the checksum is checked.

#: The first estimate's size, the first look that is meaningful (the trust rule calls fewer
#: passages noise whatever else: `core.constants.NOISE_MIN_N`); each next one doubles it
#: (rounded up to whole batches).
FIRST_ESTIMATE = NOISE_MIN_N


def prefix_refusal(passages: str, dataset: DatasetSpec) -> str | None:
    """Why the first k passages of a run of this passages mode and dataset (parsed:
    `RunSpec.dataset_spec`) are not a k-run (so it cannot stop early, nor serve or resume
    another N), or None. Its estimates are made in every mode (`anytime_run`)."""
    if passages not in WINDOW_MODES:
        return (
            "Stopping early needs token windows (--passages windows or packed): in documents "
            "mode the longest passages are extracted first, so the first k passages are not "
            "extracted as a k-run extracts them."
        )
    if dataset.streamed:
        return (
            "Stopping early needs a dataset read whole (bbc-news or a local file): a streamed "
            "hf: dataset cuts its windows from its first N documents, so the first k windows "
            "of an N-run are not a k-run's."
        )
    return None


def batch_rows(max_tokens: int, device: str, batch_size: int | None = None) -> int:
    """Passages per batch when every passage has `max_tokens` tokens (`extract.next_batch`):
    the fixed `batch_size`, else the device's token budget over the passage length."""
    if batch_size is not None:
        return int(batch_size)
    budget = TOKEN_BUDGET["cuda" if str(device).startswith("cuda") else "cpu"]
    return max(1, budget // max_tokens)


def schedule(n: int, batch: int, first: int = FIRST_ESTIMATE) -> list[int]:
    """Passage counts with an estimate: first, 2 first, 4 first, ... each rounded up to a
    multiple of `batch` (so each is a run of its own, batch for batch), below n; then n."""
    if n < 1 or batch < 1 or first < 1:
        raise DeffError(f"A schedule needs positive n, batch and first size; got {n}, {batch}.")
    marks: list[int] = []
    size = first
    while True:
        k = -(-size // batch) * batch
        if k >= n:
            break
        if not marks or k > marks[-1]:
            marks.append(k)
        size *= 2
    return [*marks, n]


class PrefixRows:
    """The pooled rows of a run's passages as its batches land, and its finished prefix.

    `add(batch)` writes a landed batch (`extract.SavedBatch`: slots, rows per extracted pooling
    and `pos0_ratio`); `done` is the length of the prefix 0..done-1 whose rows are all in;
    `pooled(k)` is that prefix as the `PooledStates` of a k-run. Arrays (L+1, N, d) float32 per
    pooling, allocated on the first batch (untouched pages cost no memory).
    """

    def __init__(self, n: int):
        self.n = int(n)
        self.rows: dict[str, np.ndarray] = {}
        self.ratio: np.ndarray | None = None
        self.filled: np.ndarray | None = None  # with the rows: after the data gave n passages
        self.done = 0

    def add(self, batch: SavedBatch) -> None:
        slots = np.asarray(batch.slots, dtype=np.int64)
        if not self.rows:
            L1, _, d = batch.rows[EXTRACTED_POOLINGS[0]].shape
            check_rows_fit(self.n, L1, d)  # before allocating: one sentence, never numpy's
            self.filled = np.zeros(self.n, dtype=bool)
            for p in EXTRACTED_POOLINGS:
                L1, _, d = batch.rows[p].shape
                self.rows[p] = np.zeros((L1, self.n, d), dtype=np.float32)
            self.ratio = np.zeros((batch.rows["pos0_ratio"].shape[0], self.n), dtype=np.float32)
        for p in EXTRACTED_POOLINGS:
            self.rows[p][:, slots] = batch.rows[p]
        self.ratio[:, slots] = batch.rows["pos0_ratio"]
        self.filled[slots] = True
        while self.done < self.n and self.filled[self.done]:
            self.done += 1

    def pooled(
        self, k: int, *, max_tokens: int | None, meta: dict[str, Any] | None = None
    ) -> PooledStates:
        """The first k passages as a k-run's `PooledStates` (window modes: every passage has
        `max_tokens` tokens; None: lengths unknown, documents mode). `pos0_norm_ratio` is the
        float32 mean over passages, as extraction takes it."""
        if not 0 < k <= self.done:
            raise DeffError(f"Only {self.done} passages have landed; no estimate at {k}.")
        meta = {**(meta or {}), "kept_indices": list(range(k))}
        return _first_rows(self.rows, self.ratio, k, max_tokens, meta)


def _first_rows(
    rows: dict[str, np.ndarray],
    ratio: np.ndarray,
    k: int,
    max_tokens: int | None,
    meta: dict[str, Any],
) -> PooledStates:
    """The first k of `rows` (each extracted pooling (L+1, >= k, d)) and of the per-passage
    position-0 `ratio` (L+1, >= k) as a k-run's `PooledStates`: every passage `max_tokens`
    long (None: lengths unknown, documents mode); the ratio the float32 mean over passages,
    as extraction takes it."""
    return PooledStates(
        pooled={p: np.ascontiguousarray(rows[p][:, :k]) for p in EXTRACTED_POOLINGS},
        pos0_norm_ratio=torch.from_numpy(np.ascontiguousarray(ratio[:, :k])).mean(1).numpy(),
        n_dropped_short=0,
        tokens=int(k * (max_tokens or 0)),
        meta=meta,
        lengths=None if max_tokens is None else np.full(k, max_tokens, dtype=np.int64),
    )


def finished_rows(pooled: PooledStates) -> SavedBatch:
    """A finished run's rows as one landed batch. Its per-passage position-0 ratios are not
    kept (only their mean): every passage carries the mean (estimates do not use them)."""
    ratio = np.asarray(pooled.pos0_norm_ratio, dtype=np.float32)
    rows = {p: pooled.pooled[p] for p in EXTRACTED_POOLINGS}
    rows["pos0_ratio"] = np.repeat(ratio[:, None], pooled.n, axis=1)
    return SavedBatch(slots=np.arange(pooled.n, dtype=np.int64), rows=rows, cap=None)


#: Name of the per-passage position-0 ratios of an entry's first m passages in states.npz.
RATIO_PREFIX = "pos0_ratio_prefix"


def sources(spec: RunSpec) -> list[tuple[RunSpec, dict[str, Any]]]:
    """Complete cache entries of `spec`'s settings with another N: (their spec, meta)."""
    if prefix_refusal(spec.passages, spec.dataset_spec) is not None:
        return []
    root = cache_dir()
    if not root.is_dir():
        return []
    found = []
    for folder in root.iterdir():
        if not is_key(folder.name) or not (folder / "meta.json").is_file():
            continue
        try:
            meta = load_meta(folder.name)
            other = RunSpec(**meta["spec"])
        except (UnknownRunError, TypeError):
            continue
        if other.n != spec.n and replace(other, n=spec.n) == spec and other.key() == folder.name:
            found.append((other, meta))
    return found


def _usable_rows(meta: dict[str, Any], spec: RunSpec, device: str, batch: int) -> int:
    """Rows of an entry any run of `spec`'s settings on `device` may take (a multiple of
    `batch`), 0 when its extraction was batched otherwise (module docstring)."""
    em = meta.get("extract_meta") or {}
    n_other = int(meta["n"])
    alike = (
        em.get("batch_rows") == batch
        and em.get("device") == device
        and em.get("dtype") == spec.dtype
        and em.get("padding_side") == "right"
        and meta.get("n_dropped_short") == 0
        and meta.get("tokens") == n_other * spec.max_tokens
    )
    return (n_other // batch) * batch if alike else 0


def _read_rows(other: RunSpec, meta: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """The entry's arrays (checksum checked), None when unreadable or without RATIO_PREFIX."""
    try:
        arrays = _checked_arrays(other.key(), meta.get("states_sha256"))
    except CacheCorruptError:  # a torn or foreign file is no source; the run extracts instead
        return None
    if RATIO_PREFIX not in arrays or any(p not in arrays for p in EXTRACTED_POOLINGS):
        return None
    return arrays


def best_prefix(
    spec: RunSpec, device: str, batch_size: int | None, *, larger: bool
) -> SavedBatch | None:
    """The most rows another entry offers `spec` as one finished chunk: from a smaller entry
    (`larger` False: rows to resume from) or the first `spec.n` rows of a larger one."""
    batch = batch_rows(spec.max_tokens, device, batch_size)
    best: SavedBatch | None = None
    for other, meta in sources(spec):
        if (other.n > spec.n) != larger:
            continue
        rows = _usable_rows(meta, spec, device, batch)
        arrays = _read_rows(other, meta) if rows else None
        if arrays is None:
            continue
        rows = min(rows, arrays[RATIO_PREFIX].shape[1], spec.n)
        if larger and rows < spec.n:
            continue
        if rows and (best is None or rows > len(best.slots)):
            chunk = {p: np.ascontiguousarray(arrays[p][:, :rows]) for p in EXTRACTED_POOLINGS}
            chunk["pos0_ratio"] = np.ascontiguousarray(arrays[RATIO_PREFIX][:, :rows])
            best = SavedBatch(np.arange(rows, dtype=np.int64), chunk, batch_size)
    return best


def from_larger(spec: RunSpec, device: str, batch_size: int | None = None) -> PooledStates | None:
    """`spec`'s pooled states as the first n rows of a larger cached run (no model), when
    one qualifies and n is a whole number of its batches; None otherwise."""
    batch = batch_rows(spec.max_tokens, device, batch_size)
    if spec.n % batch:
        return None
    chunk = best_prefix(spec, device, batch_size, larger=True)
    if chunk is None:
        return None
    return pooled_from_rows(
        chunk.rows, spec, device=device, batch=batch, resumed=spec.n, ratio_rows=spec.n
    )


def pooled_from_rows(
    rows: dict[str, np.ndarray],
    spec: RunSpec,
    *,
    device: str,
    batch: int,
    resumed: int,
    ratio_rows: int,
) -> PooledStates:
    """The `PooledStates` a run of `spec` (window modes) extracts, from its rows: `rows` holds
    each extracted pooling (L+1, n, d) and `pos0_ratio` (L+1, n) float32; the first
    `ratio_rows` per-passage ratios are kept as RATIO_PREFIX."""
    n = spec.n
    meta = {
        "model": spec.model,
        "device": device,
        "dtype": spec.dtype,
        "max_tokens": spec.max_tokens,
        "padding_side": "right",
        "bos": spec.bos,
        "batches": -(-n // batch),
        "max_batch_size": min(batch, n),
        "oom_halvings": 0,
        "batch_rows": batch,
        "kept_indices": list(range(n)),
        "resumed_passages": int(resumed),
        "spec": asdict(spec),
    }
    pooled = _first_rows(rows, rows["pos0_ratio"], n, spec.max_tokens, meta)
    pooled.pooled[RATIO_PREFIX] = np.ascontiguousarray(rows["pos0_ratio"][:, :ratio_rows])
    return pooled


class PrefixCheckpoint:
    """`extract.BatchCheckpoint` of a run: its own partial entry (`PartialRun`), or the
    rows of a smaller cached run of the same settings when those go further (module doc).

    Every chunk saved and resumed is also handed to `tap(batch)` (the live estimates) and
    its per-passage position-0 ratios kept (`ratio_prefix`), so the finished run can store
    them (RATIO_PREFIX); `uniform` stays True while every chunk kept the run's batch cap.
    `partial` None: nothing is written (a run without the cache), only the tap sees batches.
    """

    def __init__(
        self,
        spec: RunSpec,
        device: str,
        batch_size: int | None,
        tap: Any = None,
        *,
        use_cache: bool = True,
    ):
        self.spec, self.device, self.batch_size, self.tap = spec, device, batch_size, tap
        self.partial = PartialRun(spec) if use_cache else None
        self.uniform = True
        self._ratios: list[tuple[np.ndarray, np.ndarray]] = []

    def resume(self, plan: dict[str, Any], order: list[int]) -> list[SavedBatch]:
        if self.partial is None:
            return []
        saved = self.partial.resume(plan, order)
        have = sum(len(b.slots) for b in saved)
        offer = None
        if prefix_refusal(self.spec.passages, self.spec.dataset_spec) is None:
            offer = best_prefix(self.spec, self.device, self.batch_size, larger=False)
        goes_further = offer is not None and len(offer.slots) > have
        if goes_further and order[: len(offer.slots)] == offer.slots.tolist():
            self.partial.discard()  # the smaller entry goes further: start from it
            self.partial.resume(plan, order)
            self.partial.save(0, offer)
            saved = [offer]
        for batch in saved:
            self._seen(batch)
        return saved

    def save(self, index: int, batch: SavedBatch) -> None:
        if self.partial is not None:
            self.partial.save(index, batch)
        self._seen(batch)

    def _seen(self, batch: SavedBatch) -> None:
        self.uniform = self.uniform and batch.cap == self.batch_size
        self._ratios.append((np.asarray(batch.slots), batch.rows["pos0_ratio"]))
        if self.tap is not None:
            self.tap(batch)

    def ratio_prefix(self, n: int) -> np.ndarray | None:
        """Per-passage position-0 ratios (L+1, m) of the contiguous prefix 0..m-1 seen."""
        if not self._ratios:
            return None
        out = np.zeros((self._ratios[0][1].shape[0], n), dtype=np.float32)
        seen = np.zeros(n, dtype=bool)
        for slots, ratio in self._ratios:
            out[:, slots] = ratio
            seen[slots] = True
        m = int(np.argmin(seen)) if not seen.all() else n
        return np.ascontiguousarray(out[:, :m])


def finish(pooled: PooledStates, checkpoint: BatchCheckpoint | None) -> PooledStates:
    """`pooled` as it is stored: with the per-passage ratios its checkpoint saw (RATIO_PREFIX)
    and, when its batches were uniform (module docstring), `meta["batch_rows"]`."""
    if not isinstance(checkpoint, PrefixCheckpoint):
        return pooled
    if prefix_refusal(checkpoint.spec.passages, checkpoint.spec.dataset_spec) is not None:
        return pooled
    prefix = checkpoint.ratio_prefix(pooled.n)
    if prefix is not None and prefix.shape[1] and RATIO_PREFIX not in pooled.pooled:
        pooled.pooled[RATIO_PREFIX] = prefix
    if checkpoint.uniform and pooled.meta.get("oom_halvings") == 0:
        pooled.meta["batch_rows"] = batch_rows(
            checkpoint.spec.max_tokens, checkpoint.device, checkpoint.batch_size
        )
    return pooled
