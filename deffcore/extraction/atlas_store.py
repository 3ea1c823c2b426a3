"""A run's depth-use atlas kept beside its cache entry: per-passage rows, versioned, checked.

Stage: extraction (a side file of `deffcore.extraction.cache`'s run entry, like the BOS
diagnostics).

    <cache>/<key>/atlas.npz         the run's `AtlasRows`: r, c, bi (N, L), angular (N, L+1, L+1),
                                    lengths (N,), the split's four (N, L) arrays when known, and
                                    `meta` (JSON bytes: format, key, spec, split_kind, created)
    <cache>/<key>/skip_effect.npz   the skip effect's per-passage rows (`atlas_skip.SkipRows`)
                                    and `meta` (format, key, spec, passages, created)

The run's own files (meta.json, states.npz) and its key are never touched: the atlas is an
addition beside the numbers the key names. A file is used only when its format is this
version's (`ROWS_FORMAT`, `SKIP_FORMAT`: bump them when the content changes), its key and spec
are the run's, and every array has the shape, finiteness and range its meaning allows; anything
else reads as absent (recomputed on request), never as numbers. Written atomically, never
through a link (`deffcore.core.files`), and only into an entry that exists: a run without one
(the shipped snapshots, a notebook run that is not cached) keeps its rows in this process's
memory (the last `MEMORY_RUNS` runs), as the diagnostics do.
"""

from __future__ import annotations

import io
import json
import time
from collections import OrderedDict
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.extraction.atlas_tap import QUANTITIES, SPLIT_QUANTITIES, AtlasRows, AtlasTap

ROWS_FILE = "atlas.npz"
SKIP_FILE = "skip_effect.npz"
#: Bump when what the files hold changes (older files then read as absent).
ROWS_FORMAT = 1
SKIP_FORMAT = 1
MEMORY_RUNS = 16
_MEMORY: OrderedDict[tuple[str, str, str], dict[str, np.ndarray]] = OrderedDict()
#: Largest |value| of each quantity: ratios are non-negative (a relative contribution of 1e6
#: would be a broken state, not a block), cosines within [-1, 1], BI within [0, 2].
_RANGES = {
    "r": (0.0, 1e6),
    "c": (-1.0, 1.0),
    "bi": (0.0, 2.0),
    "r_attn": (0.0, 1e6),
    "c_attn": (-1.0, 1.0),
    "r_mlp": (0.0, 1e6),
    "c_mlp": (-1.0, 1.0),
}
_TOL = 1e-6


def _folder(spec: Any) -> Path:
    from deffcore.core.files import cache_dir

    return cache_dir() / spec.key()


def _in_cache(folder: Path) -> bool:
    """The run's folder is a cache entry of ours (else its files live in memory only)."""
    from deffcore.extraction.cache import is_run_entry

    return is_run_entry(folder)


def _meta(spec: Any, fmt: int, **extra: Any) -> dict[str, Any]:
    return {
        "format": fmt,
        "key": spec.key(),
        "spec": asdict(spec),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **extra,
    }


def _keep(spec: Any, name: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Write `name` beside the run's entry (atomic), or keep it in memory without one."""
    from deffcore.core.files import atomic_write, writable_entry

    arrays = {**arrays, "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}
    folder = _folder(spec)
    memo = (str(folder.parent), spec.key(), name)
    if _in_cache(folder):
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        # writable_entry refuses a folder that is not provably ours (a link, a user's folder)
        atomic_write(writable_entry(folder, create=False) / name, buf.getvalue())
        _MEMORY.pop(memo, None)
        return
    _MEMORY[memo] = arrays
    _MEMORY.move_to_end(memo)
    while len(_MEMORY) > MEMORY_RUNS:
        _MEMORY.popitem(last=False)


def _load(spec: Any, name: str, fmt: int) -> tuple[dict[str, np.ndarray], dict] | None:
    """The arrays and meta of `name` for `spec`, or None (absent, unreadable, another format,
    another run's)."""
    arrays, folder = None, _folder(spec)
    if _in_cache(folder) and (folder / name).is_file():
        try:
            with np.load(io.BytesIO((folder / name).read_bytes()), allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except Exception:  # a damaged file is absent, never a crash
            arrays = None
    if arrays is None:
        arrays = _MEMORY.get((str(folder.parent), spec.key(), name))
    if arrays is None or "meta" not in arrays or arrays["meta"].dtype != np.uint8:
        return None
    try:
        meta = json.loads(arrays["meta"].tobytes().decode())
    except (UnicodeDecodeError, ValueError):
        return None
    mine = isinstance(meta, dict) and meta.get("format") == fmt and meta.get("key") == spec.key()
    if not mine or meta.get("spec") != asdict(spec):
        return None
    return arrays, meta


# ---------------------------------------------------------------------------------------------
# The atlas rows


def atlas_taps() -> tuple[AtlasTap]:
    """The taps an extraction takes the atlas with (`measurement.measure_spec`)."""
    return (AtlasTap(),)


def keep_atlas(spec: Any, taps: tuple, pooled: Any) -> AtlasRows | None:
    """After an extraction with `atlas_taps()`: keep the rows when every passage ran here
    (a resumed or served run has none); a failed write warns and loses only the atlas."""
    import warnings

    from deffcore.core.errors import DeffError

    rows = None
    for tap in taps:
        if isinstance(tap, AtlasTap) and pooled.lengths is not None:
            rows = tap.rows(pooled.lengths) if tap.n == pooled.n else None
    if rows is None:
        return None
    try:
        write_rows(spec, rows)
    except DeffError as err:
        warnings.warn(f"The run's depth-use atlas was not kept: {err}", stacklevel=2)
    return rows


def write_rows(spec: Any, rows: AtlasRows) -> None:
    """Keep a run's atlas rows (see the module docstring)."""
    arrays = {q: getattr(rows, q) for q in QUANTITIES}
    arrays.update(angular=rows.angular, lengths=rows.lengths)
    if rows.split is not None:
        arrays.update(rows.split)
    meta = _meta(spec, ROWS_FORMAT, split_kind=rows.split_kind)
    _keep(spec, ROWS_FILE, arrays, meta)


def _valid(a: np.ndarray | None, shape: tuple[int, ...], low: float, high: float) -> bool:
    if a is None or a.shape != shape or a.dtype.kind != "f" or not np.isfinite(a).all():
        return False
    return bool(a.size == 0 or (a.min() >= low - _TOL and a.max() <= high + _TOL))


def check_rows(arrays: dict[str, np.ndarray], split_kind: Any) -> AtlasRows | None:
    """`AtlasRows` of stored arrays when every one has its shape, finiteness and range."""
    r, lengths = arrays.get("r"), arrays.get("lengths")
    if r is None or r.ndim != 2 or lengths is None or lengths.shape != (r.shape[0],):
        return None
    (N, L), kind = r.shape, split_kind if split_kind in ("sequential", "parallel") else None
    if N < 1 or L < 1 or lengths.dtype.kind not in "iu" or (lengths < 1).any():
        return None
    names = QUANTITIES + (SPLIT_QUANTITIES if kind else ())
    if not all(_valid(arrays.get(q), (N, L), *_RANGES[q]) for q in names):
        return None
    ang = arrays.get("angular")
    if not _valid(ang, (N, L + 1, L + 1), 0.0, 1.0):
        return None
    if np.abs(ang - ang.transpose(0, 2, 1)).max() > _TOL:
        return None
    split = {q: arrays[q].astype(np.float64) for q in SPLIT_QUANTITIES} if kind else None
    return AtlasRows(
        r=r.astype(np.float64),
        c=arrays["c"].astype(np.float64),
        bi=arrays["bi"].astype(np.float64),
        angular=ang.astype(np.float64),
        lengths=lengths.astype(np.int64),
        split=split,
        split_kind=kind,
    )


def read_rows(spec: Any) -> AtlasRows | None:
    """The run's atlas rows, or None (never stored, or not a valid file of this version)."""
    found = _load(spec, ROWS_FILE, ROWS_FORMAT)
    if found is None:
        return None
    arrays, meta = found
    rows = check_rows(arrays, meta.get("split_kind"))
    if rows is None or (isinstance(spec.n, int) and rows.n > spec.n):
        return None
    return rows


# ---------------------------------------------------------------------------------------------
# The skip effect's rows


def write_skip(spec: Any, rows: Any) -> None:
    """Keep a run's skip-effect rows (`deffcore.lenses.atlas_skip.SkipRows`)."""
    arrays = {"later": rows.later, "later_max": rows.later_max, "kl": rows.kl}
    _keep(spec, SKIP_FILE, arrays, _meta(spec, SKIP_FORMAT, passages=int(rows.kl.shape[0])))


def read_skip(spec: Any, passages: int | None = None) -> dict[str, np.ndarray] | None:
    """The stored skip-effect arrays of the run (for `passages` passages; None: whichever
    count it was computed on), or None."""
    found = _load(spec, SKIP_FILE, SKIP_FORMAT)
    if found is None or (passages is not None and found[1].get("passages") != passages):
        return None
    arrays = found[0]
    kl = arrays.get("kl")
    if kl is None or kl.ndim != 2 or kl.shape[0] != found[1].get("passages"):
        return None
    P, L = kl.shape
    later, top = arrays.get("later"), arrays.get("later_max")
    upper = np.triu(np.ones((L, L), dtype=bool), k=1)
    for a in (later, top):
        if a is None or a.shape != (P, L, L) or a.dtype.kind != "f":
            return None
        inside = a[:, upper]
        if not np.isfinite(inside).all() or (inside.size and inside.min() < 0):
            return None
    if not np.isfinite(kl).all() or kl.min() < -_TOL:
        return None
    return {"later": later, "later_max": top, "kl": kl}
