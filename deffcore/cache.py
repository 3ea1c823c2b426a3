"""Keyed on-disk store of pooled states: atomic, locked, corruption-safe.

Layout (under `cache_dir()`, which is `$DEFF_CACHE_DIR` or `<repo>/cache`):

    <key>/states.npz   pooled matrices, float32:
                         default, first_non_bos, token_normed   (L+1, N, d)  h_0 .. h_L
                         pos0_norm_ratio                        (L+1,)
                         lengths                                (N,) int64   tokens per passage
    <key>/meta.json    {"format": 1, "key", "spec": {RunSpec fields}, "code_version",
                        "states_sha256": sha256 of states.npz, "states_bytes", "created",
                        "layers", "d_model", "n", "n_dropped_short", "tokens", "elapsed_s",
                        "model_identity", "dataset_identity", "extract_meta": {...}}
    <key>.lock         a filelock held while one process computes the entry
    models/            assembled packaged model files (gemma3-270m GGUF)

`key` is the first 20 hex digits of a sha256 over the RunSpec fields, the model's weights id,
the dataset's content id and `CODE_VERSION` (see `RunSpec.key`).

Writes are atomic: each file is written to a temp name in the entry folder and moved into place
with `os.replace`; `meta.json` is written last, so an entry without a valid meta is incomplete.
On load, the npz's sha256 must match the meta and every array must have the shapes the meta
states; anything else (truncated file, bad JSON, wrong checksum) counts as corrupt: `load`
returns None with a warning and `get_or_compute` recomputes and overwrites.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from deffcore.constants import CODE_VERSION, EXTRACTED_POOLINGS
from deffcore.errors import CacheCorruptError, DeffError
from deffcore.extract import PooledStates

FORMAT_VERSION = 1
_REPO_CACHE = Path(__file__).resolve().parent.parent / "cache"


class UnknownRunError(DeffError):
    """A cache key that names no stored run."""


def cache_dir() -> Path:
    """`$DEFF_CACHE_DIR` if set, else `<repo>/cache`; created on first use."""
    path = Path(os.environ.get("DEFF_CACHE_DIR") or _REPO_CACHE).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


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

    def identity(self) -> dict[str, Any]:
        """The plain values hashed into the key (model weights id and dataset content id too)."""
        from deffcore.models import model_identity
        from deffcore.texts import dataset_identity

        return {
            **asdict(self),
            "weights_id": model_identity(self.model, self.revision)["weights_id"],
            "dataset_id": dataset_identity(self.dataset)["content_id"],
            "code_version": CODE_VERSION,
        }

    def key(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _entry(key: str) -> Path:
    return cache_dir() / key


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def store(spec: RunSpec, pooled: PooledStates, *, elapsed_s: float | None = None) -> Path:
    """Write `pooled` under `spec.key()` atomically; returns the entry folder."""
    from deffcore.models import model_identity
    from deffcore.texts import dataset_identity

    key = spec.key()
    folder = _entry(key)
    folder.mkdir(parents=True, exist_ok=True)
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
    (folder / "meta.json").unlink(missing_ok=True)
    _atomic_write(folder / "states.npz", npz)
    _atomic_write(folder / "meta.json", json.dumps(meta, indent=2, default=str).encode())
    return folder


def _read_entry(key: str) -> tuple[PooledStates, dict[str, Any]] | None:
    """The stored run, None if absent; CacheCorruptError if present but invalid."""
    folder = _entry(key)
    meta_path, npz_path = folder / "meta.json", folder / "states.npz"
    if not meta_path.exists():
        if npz_path.exists():
            raise CacheCorruptError(f"Cache entry {key} has states but no meta.json.")
        return None
    try:
        meta = json.loads(meta_path.read_text())
        npz = npz_path.read_bytes()
    except (OSError, ValueError) as err:
        raise CacheCorruptError(f"Cache entry {key} cannot be read: {err}.") from err
    if meta.get("format") != FORMAT_VERSION:
        raise CacheCorruptError(f"Cache entry {key} has format {meta.get('format')!r}.")
    if hashlib.sha256(npz).hexdigest() != meta.get("states_sha256"):
        raise CacheCorruptError(f"Cache entry {key}: states.npz does not match its checksum.")
    try:
        with np.load(io.BytesIO(npz)) as z:
            arrays = {name: z[name] for name in z.files}
    except Exception as err:  # a valid checksum makes this unlikely; never crash on it
        raise CacheCorruptError(f"Cache entry {key}: states.npz is unreadable: {err}.") from err
    L1, n, d = meta["layers"] + 1, meta["n"], meta["d_model"]
    for name in EXTRACTED_POOLINGS:
        if name not in arrays or arrays[name].shape != (L1, n, d):
            raise CacheCorruptError(f"Cache entry {key}: pooling {name!r} is missing or misshapen.")
    pooled = PooledStates(
        pooled={name: arrays[name] for name in EXTRACTED_POOLINGS},
        pos0_norm_ratio=arrays["pos0_norm_ratio"],
        n_dropped_short=meta["n_dropped_short"],
        tokens=meta["tokens"],
        meta=meta.get("extract_meta") or {},
        lengths=arrays["lengths"],
    )
    return pooled, meta


def load(spec: RunSpec, *, strict: bool = False) -> PooledStates | None:
    """The cached states of `spec`, or None (absent, or corrupt: a warning unless `strict`)."""
    try:
        found = _read_entry(spec.key())
    except CacheCorruptError as err:
        if strict:
            raise
        warnings.warn(f"{err} It will be recomputed.", stacklevel=2)
        return None
    return None if found is None else found[0]


def load_meta(key: str) -> dict[str, Any]:
    """The meta.json of a stored run (UnknownRunError if there is none)."""
    path = _entry(key) / "meta.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UnknownRunError(f"No readable cached run with key {key!r} in {cache_dir()}.") from err


def get_or_compute(
    spec: RunSpec, compute: Callable[[], PooledStates]
) -> tuple[PooledStates, bool, dict[str, Any]]:
    """(pooled, cached, meta): the stored entry, or `compute()` stored under a file lock.

    The lock makes concurrent processes asking for the same key compute it once: the second
    waits, then finds the first one's entry.
    """
    key = spec.key()
    try:
        found = _read_entry(key)
    except CacheCorruptError:
        found = None
    if found is not None:
        return found[0], True, found[1]
    with FileLock(str(cache_dir() / f"{key}.lock")):
        try:
            found = _read_entry(key)
        except CacheCorruptError as err:
            warnings.warn(f"{err} Recomputing it.", stacklevel=2)
            found = None
        if found is not None:
            return found[0], True, found[1]
        start = time.perf_counter()
        pooled = compute()
        elapsed = time.perf_counter() - start
        store(spec, pooled, elapsed_s=elapsed)
        found = _read_entry(key)
        assert found is not None  # just written under the lock
        return found[0], False, found[1]


def list_runs() -> list[dict[str, Any]]:
    """Meta of every stored run, newest first, plus `path` and `size_bytes`; corrupt ones marked."""
    runs = []
    for folder in cache_dir().iterdir():
        if not folder.is_dir() or folder.name == "models" or folder.name.startswith("."):
            continue
        meta_path = folder / "meta.json"
        try:
            meta = json.loads(meta_path.read_text())
            meta["corrupt"] = False
        except (OSError, ValueError):
            meta = {"key": folder.name, "corrupt": True}
        meta["path"] = str(folder)
        meta["size_bytes"] = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        runs.append(meta)
    return sorted(runs, key=lambda m: m.get("created", ""), reverse=True)


def delete(key: str) -> None:
    """Remove a stored run (UnknownRunError if the key names none)."""
    folder = _entry(key)
    if not key or "/" in key or key.startswith(".") or key == "models" or not folder.is_dir():
        raise UnknownRunError(f"No cached run with key {key!r} in {cache_dir()}.")
    shutil.rmtree(folder)
    (cache_dir() / f"{key}.lock").unlink(missing_ok=True)
