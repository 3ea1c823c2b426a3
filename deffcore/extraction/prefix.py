"""A prefix of a run is a run: a window run's first k passages, batch for batch, as they land,
and a window run's batches from a cached run of the same settings with another N.

    rows = PrefixRows(n)                      # fed with each landed batch (SavedBatch)
    rows.pooled(256, max_tokens=128)          # the first 256 passages: a 256-run's states

A run's passages are a seeded permutation truncated to N (`texts.load_passages`,
`tokens.sample_windows`), so the first k passages of an N-run are the k-run's sample. In the
window modes every passage has exactly `max_tokens` tokens, so extraction keeps the sample's
order (its sort by length is stable) and cuts it into batches of one size b (`batch_rows`): for
k a multiple of b, the first k passages are extracted in the very batches a k-run uses, and
their pooled rows are bit-identical to the k-run's (tests/test_anytime.py checks it bit for
bit). `schedule` puts the looks at 32, 64, 128, ... passages, each rounded up to a multiple
of b.

Where the prefix property fails a run cannot stop early (`prefix_refusal` says why):
documents mode extracts the longest passages first (less padding), so its first k passages
are not extracted in a k-run's batches; a streamed `hf:` dataset cuts its windows from its
first N documents, so a k-run's windows are not the N-run's first k. Estimates are still
made there: `PrefixRows` counts only the sample's first k passages once all of them have
landed (a random sample of the run; in documents mode they land later, the longest first).

## From the cache: a run of another N

A cache key holds N, so a run of 4,096 passages and one of 1,024 are two entries. But by the
prefix property (above: the sample is a seeded permutation truncated to N, and in the window
modes every batch has the same b passages) the first k rows of an N'-run are the rows a k-run
computes, batch for batch, whenever k is a whole number of batches. So:

- a larger run starts from a smaller entry's rows (`PrefixCheckpoint.resume`: handed to the
  extraction like an interrupted run's batches; it continues with the next batch), and
- a smaller run is a larger entry's first n rows (`from_larger`: no model is loaded),

both bit-identical to an uninterrupted run of their N (tests/test_prefix_cache.py).

What makes an entry a source (`_usable_rows`): the same RunSpec but N (its key recomputed, so
the model's weights and the dataset's content are the same and the code version too), a window
mode over a dataset read whole (`prefix_refusal`), extracted on the same device and
dtype with right padding, every passage `max_tokens` long, none dropped, and every batch of the
b passages this run would use (`batch_rows`). The last is recorded when the run is
stored (`extract_meta["batch_rows"] = b`, by `finish`): every chunk its checkpoint saw kept the
run's batch cap (an out-of-memory halving changes it) and the extraction halved nothing. Runs
stored by other paths (a Ray worker's cell, an older version) are not sources.

Per-passage position-0 ratios: an entry keeps only their mean over its N passages
(`pos0_norm_ratio`), which a prefix cannot be recomputed from. So a window run stores, beside
its pooled states in `states.npz`, the array `pos0_ratio_prefix` (L+1, m) float32: the
per-passage ratios of its first m passages (every checkpointed batch: all but the last chunk
of an extraction; all k passages of a run stopped early). Only those m rows are reusable.
The array rides in the entry's checksummed `states.npz` (`cache.store` writes every array of
`PooledStates.pooled`; `cache.load` reads the poolings it knows and ignores it), and is read
back here from the same bytes after the checksum is checked.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import asdict, replace
from typing import Any

import numpy as np
import torch

from deffcore.core.constants import EXTRACTED_POOLINGS, NOISE_MIN_N, WINDOW_MODES
from deffcore.core.errors import DeffError
from deffcore.extraction import cache, partial
from deffcore.extraction.batches import TOKEN_BUDGET, BatchCheckpoint, SavedBatch
from deffcore.extraction.pooling import PooledStates
from deffcore.inputs.run_spec import RunSpec

#: The first estimate's size, the first look that is meaningful (the trust rule calls fewer
#: passages noise whatever else: `core.constants.NOISE_MIN_N`); each next one doubles it
#: (rounded up to whole batches).
FIRST_ESTIMATE = NOISE_MIN_N


def prefix_refusal(passages: str, dataset: str) -> str | None:
    """Why the first k passages of a run of this passages mode and dataset are not a k-run
    (so it cannot stop early, nor serve or resume another N), or None. Its estimates are made
    in every mode (`anytime_run`)."""
    if passages not in WINDOW_MODES:
        return (
            "Stopping early needs token windows (--passages windows or packed): in documents "
            "mode the longest passages are extracted first, so the first k passages are not "
            "extracted as a k-run extracts them."
        )
    if dataset.startswith("hf:"):
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
        pooled = {p: np.ascontiguousarray(self.rows[p][:, :k]) for p in EXTRACTED_POOLINGS}
        ratio = torch.from_numpy(np.ascontiguousarray(self.ratio[:, :k])).mean(1).numpy()
        return PooledStates(
            pooled=pooled,
            pos0_norm_ratio=ratio,
            n_dropped_short=0,
            tokens=int(k * (max_tokens or 0)),
            meta={**(meta or {}), "kept_indices": list(range(k))},
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


def _same_but_n(a: RunSpec, b: RunSpec) -> bool:
    return replace(a, n=b.n) == b


def sources(spec: RunSpec) -> list[tuple[RunSpec, dict[str, Any]]]:
    """Complete cache entries of `spec`'s settings with another N: (their spec, meta)."""
    if prefix_refusal(spec.passages, spec.dataset) is not None:
        return []
    root = cache.cache_dir()
    if not root.is_dir():
        return []
    found = []
    for folder in root.iterdir():
        if not cache.is_key(folder.name) or not (folder / "meta.json").is_file():
            continue
        try:
            meta = cache.load_meta(folder.name)
            other = RunSpec(**meta["spec"])
        except (cache.UnknownRunError, TypeError):
            continue
        if other.n != spec.n and _same_but_n(other, spec) and other.key() == folder.name:
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
    path = cache.cache_dir() / other.key() / "states.npz"
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    if hashlib.sha256(blob).hexdigest() != meta.get("states_sha256"):
        return None
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
    except Exception:  # a torn or foreign file is no source; the run extracts instead
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
    ratio = torch.from_numpy(np.ascontiguousarray(rows["pos0_ratio"][:, :n])).mean(1).numpy()
    pooled = {p: np.ascontiguousarray(rows[p][:, :n]) for p in EXTRACTED_POOLINGS}
    pooled[RATIO_PREFIX] = np.ascontiguousarray(rows["pos0_ratio"][:, :ratio_rows])
    return PooledStates(
        pooled=pooled,
        pos0_norm_ratio=ratio,
        n_dropped_short=0,
        tokens=int(n * spec.max_tokens),
        lengths=np.full(n, spec.max_tokens, dtype=np.int64),
        meta={
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
        },
    )


class PrefixCheckpoint:
    """`extract.BatchCheckpoint` of a run: its own partial entry (`cache.PartialRun`), or the
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
        self.partial = partial.PartialRun(spec) if use_cache else None
        self.uniform = True
        self._ratios: list[tuple[np.ndarray, np.ndarray]] = []

    def resume(self, plan: dict[str, Any], order: list[int]) -> list[SavedBatch]:
        if self.partial is None:
            return []
        saved = self.partial.resume(plan, order)
        have = sum(len(b.slots) for b in saved)
        offer = None
        if prefix_refusal(self.spec.passages, self.spec.dataset) is None:
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
    if prefix_refusal(checkpoint.spec.passages, checkpoint.spec.dataset) is not None:
        return pooled
    prefix = checkpoint.ratio_prefix(pooled.n)
    if prefix is not None and prefix.shape[1] and RATIO_PREFIX not in pooled.pooled:
        pooled.pooled[RATIO_PREFIX] = prefix
    if checkpoint.uniform and pooled.meta.get("oom_halvings") == 0:
        pooled.meta["batch_rows"] = batch_rows(
            checkpoint.spec.max_tokens, checkpoint.device, checkpoint.batch_size
        )
    return pooled


def check_rows_fit(n: int, L1: int, d: int) -> None:
    """The pooled rows of `n` passages (L1 x n x d float32 per extracted pooling, and the
    position-0 ratios; the live estimates keep one more copy) checked against the machine's
    memory before any is allocated: one sentence (OutOfMemoryError), never numpy's."""
    from deffcore.core.checks import check_memory
    from deffcore.inputs.devices import host_memory_bytes

    memory = host_memory_bytes()
    each = 4 * L1 * (d * len(EXTRACTED_POOLINGS) + 1)
    check_memory(
        n * each,
        memory,
        f"The pooled states of {n:,} passages ({L1} layers x {d} features x "
        f"{len(EXTRACTED_POOLINGS)} poolings, float32)",
        f"ask for n <= {max((memory or 0) // each, 1):,}",
    )
