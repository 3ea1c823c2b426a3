"""Keyed on-disk store of pooled states: atomic, locked, corruption-safe, resumable.

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

Only a *run entry* is ever listed, written or deleted: a real folder (never a link) named like a
key (20 lowercase hex digits) that holds meta.json, states.npz or partial/ and nothing but those
(and our temp and side files), none of them a link. Anything else named like a run's entry or
lock is refused in one sentence and never read, written or deleted through
(`deffcore.cache_files`, the one mechanism every write and delete goes through); every OS error
of the cache (a full disk, permissions) is one sentence (CacheWriteError) and leaves nothing
half-written. States holding NaN or inf are never stored, and a stored entry holding them is
corrupt.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock, Timeout

from deffcore.core import files
from deffcore.core.constants import CODE_VERSION, EXTRACTED_POOLINGS
from deffcore.core.errors import CacheCorruptError, DeffError, ForeignCacheEntryError
from deffcore.core.paths import cache_dir
from deffcore.extraction.batches import SavedBatch
from deffcore.extraction.pooling import PooledStates

__all__ = [
    "FORMAT_VERSION",
    "PartialRun",
    "RunInUseError",
    "RunSpec",
    "UnknownRunError",
    "cache_dir",
    "cleanup_stale",
    "delete",
    "get_or_compute",
    "is_key",
    "list_runs",
    "load",
    "load_meta",
    "store",
]

FORMAT_VERSION = 1
PARTIAL_FORMAT = 1
_KEY_RE = re.compile(r"[0-9a-f]{20}")
_TMP_RE = files.TMP_RE
_BATCH_RE = re.compile(r"batch-(\d{6})-(\d{6})\.npz")


class UnknownRunError(DeffError):
    """A cache key that names no stored run."""


class RunInUseError(DeffError):
    """A run that a process is computing right now (its lock is held)."""


def is_key(name: object) -> bool:
    """True when `name` has the format of a run key (20 lowercase hex digits)."""
    return isinstance(name, str) and _KEY_RE.fullmatch(name) is not None


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines a run's pooled states; `key()` names its cache entry."""

    model: str
    revision: str | None
    dataset: str
    n: int
    max_tokens: int
    seed: int
    dtype: str
    intervention: str = "none"
    #: "documents", "windows" (SPEC section 12) or "packed": part of the dataset's identity.
    passages: str = "documents"
    #: BOS option "default", "add" or "none" (SPEC section 11.4).
    bos: str = "default"

    def identity(self) -> dict[str, Any]:
        """The plain values hashed into the key (model weights id and dataset content id too)."""
        from deffcore.inputs.identity import model_identity
        from deffcore.inputs.texts import dataset_identity

        return {
            **asdict(self),
            "weights_id": model_identity(self.model, self.revision)["weights_id"],
            "dataset_id": dataset_identity(self.dataset)["content_id"],
            "code_version": CODE_VERSION,
        }

    def key(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


_SPEC_FIELDS = {f.name for f in fields(RunSpec)}
_SPEC_REQUIRED = {"model": str, "dataset": str, "n": int, "max_tokens": int, "seed": int}


def _entry(key: str) -> Path:
    return cache_dir() / key


def _lock_path(key: str) -> Path:
    return cache_dir() / f"{key}.lock"


_atomic_write = files.atomic_write  # the name deffcore.diagnostics imports


# ----------------------------------------------------------------------------------------------
# Validation: nothing read from disk is trusted.


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_spec(spec: object, where: str) -> dict[str, Any]:
    if not isinstance(spec, dict) or not set(spec) <= _SPEC_FIELDS:
        raise CacheCorruptError(f"{where}: its 'spec' is not a run specification.")
    for name, kind in _SPEC_REQUIRED.items():
        value = spec.get(name)
        if not (_is_int(value) if kind is int else isinstance(value, kind)):
            raise CacheCorruptError(f"{where}: its spec field {name!r} is missing or not {kind}.")
    return spec


def _check_meta(meta: object, key: str) -> dict[str, Any]:
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
        if not _is_int(value) or value < (1 if name in ("layers", "d_model") else 0):
            raise CacheCorruptError(f"{where}: meta field {name!r} is missing or not a count.")
    sha = meta.get("states_sha256")
    if not isinstance(sha, str) or re.fullmatch(r"[0-9a-f]{64}", sha) is None:
        raise CacheCorruptError(f"{where}: meta field 'states_sha256' is not a sha256.")
    if not isinstance(meta.get("extract_meta", {}), dict | None):
        raise CacheCorruptError(f"{where}: meta field 'extract_meta' is not an object.")
    _check_spec(meta.get("spec"), where)
    return meta


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CacheCorruptError(f"{path} cannot be read: {err}.") from err


# ----------------------------------------------------------------------------------------------
# Complete entries


def store(spec: RunSpec, pooled: PooledStates, *, elapsed_s: float | None = None) -> Path:
    """Write `pooled` under `spec.key()` atomically; returns the entry folder.

    The entry's partial/ folder (finished batches of an interrupted run) is removed once the
    complete entry is in place.
    """
    from deffcore.inputs.identity import model_identity
    from deffcore.inputs.texts import dataset_identity

    key = spec.key()
    check_finite(pooled, spec.dtype)  # a broken entry is never stored
    folder = files.writable_entry(_entry(key))  # never through a link, never a user's folder
    arrays = {name: np.asarray(pooled.pooled[name], dtype=np.float32) for name in pooled.pooled}
    arrays["pos0_norm_ratio"] = np.asarray(pooled.pos0_norm_ratio, dtype=np.float32)
    arrays["lengths"] = np.asarray(pooled.lengths, dtype=np.int64)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    npz = buf.getvalue()
    L1, n, d = arrays["default"].shape
    meta = {
        "format": FORMAT_VERSION,
        "key": key,
        "spec": asdict(spec),
        "code_version": CODE_VERSION,
        "states_sha256": hashlib.sha256(npz).hexdigest(),
        "states_bytes": len(npz),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "layers": L1 - 1,
        "d_model": d,
        "n": n,
        "n_dropped_short": int(pooled.n_dropped_short),
        "tokens": int(pooled.tokens),
        "elapsed_s": elapsed_s,
        "model_identity": model_identity(spec.model, spec.revision),
        "dataset_identity": dataset_identity(spec.dataset),
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


def _read_entry(key: str) -> tuple[PooledStates, dict[str, Any]] | None:
    """The stored run, None if absent; CacheCorruptError if present but invalid."""
    folder = _entry(key)
    files.refuse_foreign(folder)  # a link or a user's folder is never read as a run
    meta_path, npz_path = folder / "meta.json", folder / "states.npz"
    if not meta_path.exists():
        if npz_path.exists():
            raise CacheCorruptError(f"Cache entry {key} has states but no meta.json.")
        return None
    meta = _check_meta(_read_json(meta_path), key)
    try:
        npz = npz_path.read_bytes()
    except OSError as err:
        raise CacheCorruptError(f"Cache entry {key} cannot be read: {err}.") from err
    if hashlib.sha256(npz).hexdigest() != meta["states_sha256"]:
        raise CacheCorruptError(f"Cache entry {key}: states.npz does not match its checksum.")
    try:
        with np.load(io.BytesIO(npz), allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
    except Exception as err:  # a valid checksum makes this unlikely; never crash on it
        raise CacheCorruptError(f"Cache entry {key}: states.npz is unreadable: {err}.") from err
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
    folder = _entry(key)
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
        return _check_meta(_read_json(folder / "meta.json"), key)
    except CacheCorruptError as err:
        raise UnknownRunError(
            f"No readable cached run with key {key!r} in {cache_dir()} ({err})"
        ) from err


def _drop_lock_file(lock: Path) -> None:
    """Remove a lock file we hold (or that guards a complete entry).

    Safe for waiters: filelock notices that the inode it locked was unlinked and retries on a
    fresh file, where it finds the complete entry."""
    files.remove_file(lock)


def get_or_compute(
    spec: RunSpec, compute: Callable[[], PooledStates]
) -> tuple[PooledStates, bool, dict[str, Any]]:
    """(pooled, cached, meta): the stored entry, or `compute()` stored under a file lock.

    The lock makes concurrent processes asking for the same key compute it once: the second
    waits, then finds the first one's entry. The lock file is removed once the entry is
    complete. `compute` may persist finished batches through `PartialRun(spec)` (it runs under
    the lock, so one process writes a partial at a time).
    """
    key = spec.key()
    files.refuse_foreign(_entry(key))  # before any work: a link or a user's folder is refused
    try:
        found = _read_entry(key)
    except CacheCorruptError:
        found = None
    if found is not None:
        return found[0], True, found[1]
    lock = _lock_path(key)
    with files.locked(lock):
        try:
            found = _read_entry(key)
        except CacheCorruptError as err:
            warnings.warn(f"{err} Recomputing it.", stacklevel=2)
            found = None
        if found is not None:
            _drop_lock_file(lock)
            return found[0], True, found[1]
        start = time.perf_counter()
        pooled = compute()
        elapsed = time.perf_counter() - start
        store(spec, pooled, elapsed_s=elapsed)
        found = _read_entry(key)
        assert found is not None  # just written under the lock
        _drop_lock_file(lock)
        return found[0], False, found[1]


# ----------------------------------------------------------------------------------------------
# Partial entries: finished batches of an unfinished extraction (issue 9, resumable runs).


class PartialRun:
    """The finished batches of `spec`'s extraction, kept in `<key>/partial/` as it goes.

    Implements `deffcore.extract.BatchCheckpoint`. Files:

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
        self.folder = _entry(self.key) / "partial"

    def discard(self) -> None:
        files.remove_partial(self.folder)

    def _start(self, plan: dict[str, Any]) -> None:
        self.discard()
        files.writable_partial(self.folder)
        manifest = {
            "format": PARTIAL_FORMAT,
            "key": self.key,
            "spec": asdict(self.spec),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
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
            manifest = _read_json(self.folder / "manifest.json")
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
            if _TMP_RE.fullmatch(tmp.name):
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
            with np.load(path, allow_pickle=False) as z:
                arrays = {name: z[name] for name in z.files}
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
        buf = io.BytesIO()
        np.savez(
            buf,
            slots=np.asarray(batch.slots, dtype=np.int64),
            cap=np.asarray(-1 if batch.cap is None else batch.cap, dtype=np.int64),
            **{name: np.asarray(arr, dtype=np.float32) for name, arr in batch.rows.items()},
        )
        name = f"batch-{index:06d}-{len(batch.slots):06d}.npz"
        files.refuse_foreign(self.folder.parent)
        files.atomic_write(self.folder / name, buf.getvalue())


def _partial_info(folder: Path) -> dict[str, Any]:
    """Spec and progress of a partial folder (CacheCorruptError if its manifest is bad)."""
    manifest = _read_json(folder / "manifest.json")
    where = f"Unfinished run {folder.parent.name}"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("plan"), dict):
        raise CacheCorruptError(f"{where}: manifest.json is not a run manifest.")
    total = manifest["plan"].get("n")
    if not _is_int(total):
        raise CacheCorruptError(f"{where}: manifest.json has no passage count.")
    done = 0
    for path in folder.iterdir():
        m = _BATCH_RE.fullmatch(path.name)
        if m:
            done += int(m.group(2))
    layers = manifest["plan"].get("layers")
    return {
        "layers": layers if _is_int(layers) else None,
        "spec": _check_spec(manifest.get("spec"), where),
        "created": manifest.get("created") if isinstance(manifest.get("created"), str) else "",
        "done_passages": min(done, total),
        "total_passages": total,
    }


# ----------------------------------------------------------------------------------------------
# Listing, deleting, cleaning: only what is provably a run entry.


def _is_run_entry(folder: Path) -> bool:
    """True when `folder` is a run entry and holds nothing else: a key-named real folder with
    meta.json, states.npz and/or partial/ (and our temp and side files), none of them a link
    (`deffcore.cache_files.foreign_reason`: every check is an lstat)."""
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
    path = _lock_path(key)
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
            _drop_lock_file(path)
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
            meta = _check_meta(_read_json(meta_path), key)
            if not npz_path.is_file() or npz_path.stat().st_size != meta["states_bytes"]:
                raise CacheCorruptError(f"Cache entry {key}: states.npz is missing or truncated.")
        except CacheCorruptError as err:
            return {"key": key, "status": "corrupt", "reason": str(err)}
        return {**meta, "status": "complete"}
    try:
        info = _partial_info(folder / "partial")
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
                complete = _is_run_entry(entry) and (entry / "meta.json").is_file()
                if complete and _status(entry)["status"] == "complete":
                    _drop_lock_file(path)
                    removed += 1
                elif not _probe_lock(path.stem, remove=True):
                    removed += 1
            elif _is_run_entry(path) and (path / "meta.json").is_file():
                leftovers = [path / "partial"] if files.is_real_dir(path / "partial") else []
                leftovers += [f for f in path.iterdir() if _TMP_RE.fullmatch(f.name)]
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
            if not _is_run_entry(folder):
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
    if not _is_run_entry(folder):
        raise UnknownRunError(
            f"{folder} holds files that are not a cached run's (or is a link); nothing was deleted."
        )
    try:
        lock = files.entry_lock(_lock_path(key))
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
        _drop_lock_file(_lock_path(key))
    finally:
        lock.release()
