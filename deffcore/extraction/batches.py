"""Ready token ids into batches: the token budget, padding, and how finished batches are kept.

The ids come tokenised (`deffcore.inputs.tokens.prepare_ids`: the tokenizer's special tokens
per the BOS option, truncated to `max_tokens`, passages with fewer than 2 tokens dropped and
counted). Kept passages are sorted by length (longest first) so a batch pads little; with
`batch_size=None` a batch holds as many passages as fit a token budget. Padding: an attention
mask and explicit `position_ids = cumsum(mask) - 1` are passed, so a passage's states do not
depend on its batch or on the padding side.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

#: Token budget per batch when `batch_size` is None (padded tokens, B * T).
TOKEN_BUDGET = {"cpu": 4096, "cuda": 32768}


@dataclass
class SavedBatch:
    """One finished batch as a checkpoint keeps it.

    slots: (b,) int64 rows of the batch (indices into the kept passages, in plan order)
    rows:  {pooling: (L+1, b, d) float32 for each extracted pooling, "pos0_ratio": (L+1, b)}
    cap:   the batch-size cap in force after this batch (None: token budget), so a resumed run
           continues with the batches an uninterrupted one would have made
    """

    slots: np.ndarray
    rows: dict[str, np.ndarray]
    cap: int | None


class BatchCheckpoint(Protocol):
    """Where `extract_pooled` keeps finished batches (`deffcore.extraction.partial.PartialRun` is
    one)."""

    def resume(self, plan: dict[str, Any], order: list[int]) -> list[SavedBatch]:
        """The saved batches that continue `order` from its start, if saved under `plan`."""
        ...

    def save(self, index: int, batch: SavedBatch) -> None:
        """Keep finished batch number `index` (0, 1, 2 ... in plan order)."""
        ...


def token_ids_sha256(ids: list[list[int]]) -> str:
    """Content hash of the token ids: a partial run is reused only for exactly these ids."""
    h = hashlib.sha256()
    for seq in ids:
        h.update(len(seq).to_bytes(4, "little"))
        h.update(np.asarray(seq, dtype=np.int64).tobytes())
    return h.hexdigest()


def pad_batch(
    seqs: list[list[int]], pad_id: int, side: str, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids), each (B, T) on `device`.

    Built on the host; to CUDA through pinned memory without blocking (the copy is queued
    behind the work already on the GPU, so the host can prepare the next batch meanwhile).
    """
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for b, s in enumerate(seqs):
        sl = slice(T - len(s), T) if side == "left" else slice(0, len(s))
        ids[b, sl] = torch.tensor(s, dtype=torch.long)
        mask[b, sl] = 1
    # positions count real tokens only, so left padding sees the same positions as right padding
    pos = (mask.cumsum(1) - 1).clamp_min(0)
    if torch.device(device).type == "cuda":
        return tuple(t.pin_memory().to(device, non_blocking=True) for t in (ids, mask, pos))
    return ids.to(device), mask.to(device), pos.to(device)


def next_batch(lengths: list[int], order: list[int], cap: int | None, budget: int, start: int):
    """The next batch (positions in `order`) from `start`: up to `cap` passages within `budget`."""
    longest = lengths[order[start]]  # sorted longest first: the first one sets the padding
    size = max(1, budget // longest) if cap is None else cap
    return order[start : start + size]
