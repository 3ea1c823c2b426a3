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
(`deffcore.core.files`, the one mechanism every write and delete goes through); every OS error
of the cache (a full disk, permissions) is one sentence (CacheWriteError) and leaves nothing
half-written. States holding NaN or inf are never stored, and a stored entry holding them is
corrupt.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.core import files
from deffcore.core.constants import CODE_VERSION, EXTRACTED_POOLINGS
from deffcore.core.errors import CacheCorruptError, DeffError, ForeignCacheEntryError
from deffcore.core.files import cache_dir
from deffcore.extraction.pooling import PooledStates
from deffcore.inputs.run_spec import RunSpec

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


def drop_lock_file(lock: Path) -> None:
    """Remove a lock file we hold (or that guards a complete entry).

    Safe for waiters: filelock notices that the inode it locked was unlinked and retries on a
    fresh file, where it finds the complete entry."""
    files.remove_file(lock)


def get_or_compute(
    spec: RunSpec, compute: Callable[[], PooledStates], *, sources: dict[str, Any]
) -> tuple[PooledStates, bool, dict[str, Any]]:
    """(pooled, cached, meta): the stored entry, or `compute()` stored under a file lock
    (`sources`: `spec.sources()`, recorded in a new entry's meta, see `store`).

    The lock makes concurrent processes asking for the same key compute it once: the second
    waits, then finds the first one's entry. The lock file is removed once the entry is
    complete. `compute` may persist finished batches through `PartialRun(spec)` (it runs under
    the lock, so one process writes a partial at a time).
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
            drop_lock_file(lock)
            return found[0], True, found[1]
        start = time.perf_counter()
        pooled = compute()
        elapsed = time.perf_counter() - start
        store(spec, pooled, sources=sources, elapsed_s=elapsed)
        found = _read_entry(key)
        assert found is not None  # just written under the lock
        drop_lock_file(lock)
        return found[0], False, found[1]
