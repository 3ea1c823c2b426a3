"""A prefix of a run is a run: a window run's first k passages, batch for batch, as they land.

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
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from deffcore.core.constants import EXTRACTED_POOLINGS, NOISE_MIN_N, WINDOW_MODES
from deffcore.core.errors import DeffError
from deffcore.extraction.batches import TOKEN_BUDGET, SavedBatch
from deffcore.extraction.pooling import PooledStates

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
        self.filled = np.zeros(self.n, dtype=bool)
        self.done = 0

    def add(self, batch: SavedBatch) -> None:
        slots = np.asarray(batch.slots, dtype=np.int64)
        if not self.rows:
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
