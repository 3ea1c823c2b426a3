"""Massive activations and attention sinks as numbers: reductions of states and attention (SPEC 11).

Per state h_l, l = 0..L (Sun et al. 2024, SPEC 11.2), over real tokens only:

    m_b                 max over positions t and features j of |h_l[b, t, j]|     (passage b)
    massive_ratio_l     mean_b m_b / median over all real (b, t, j) of |h_l[b, t, j]|
    massive_position_l  the most frequent position t of that maximum over passages (ties: smaller)
    massive_dim_l       the most frequent feature j of that maximum (ties: smaller)
    onset               the first l with massive_ratio_l > 100 (None when there is none)

Per block l = 1..L and head h (Gu et al. 2024, SPEC 11.3):

    a_{l,h}          mean over passages b of [ mean over queries t = 1..n_b-1 of A_{l,h}[b, t, 0] ]
    sink_fraction_l  share of heads with a_{l,h} > 0.3

Decisions where SPEC is silent: the median is numpy's (the mean of the two middle values for
an even count), computed in float64 from float32 |h| values; positions count from the
passage's first real token. Pure functions, tested on hand-made inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch loads when a function needs it (a stored run's view never does)
    import torch

from deffcore.core.errors import DeffError

#: A state has a massive activation when its ratio exceeds this (SPEC 11.2, the onset).
MASSIVE_THRESHOLD = 100.0


#: Sun et al.'s criterion (|a| > SUN_MIN_ABS and >= SUN_MIN_RATIO x its state's median) is
#: `deffcore.measures.paper_massive`'s, applied per activation (SPEC 11.2).
#: A head is a sink when its mean attention to position 0 exceeds this (SPEC 11.3).
SINK_THRESHOLD = 0.3


def passage_maxima(
    hidden: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Largest |h| of each passage and where it is.

    hidden (B, T, d), mask (B, T) bool (True at real tokens, any padding side).
    Returns (value (B,) float32, position (B,) long counted from the passage's first real
    token, feature (B,) long). Padding never wins, even when it holds NaN or inf.
    """
    import torch

    a = hidden.float().abs()
    a = torch.where(mask.bool()[..., None], a, -1.0)
    B, _, d = a.shape
    value, flat = a.reshape(B, -1).max(1)
    first = mask.int().argmax(1)
    return value, flat // d - first, flat % d


def most_frequent(values: Sequence[int] | np.ndarray) -> int:
    """The most frequent value; ties go to the smaller value (SPEC 11.2)."""
    vals, counts = np.unique(np.asarray(values, dtype=np.int64), return_counts=True)
    return int(vals[np.argmax(counts)])  # np.unique sorts, argmax takes the first maximum


def median_abs(chunks: Sequence[np.ndarray]) -> float:
    """Median of the concatenated |h| values (float32 chunks), computed in float64."""
    x = np.concatenate([np.ravel(c) for c in chunks]).astype(np.float64)
    return float(np.median(x))


def massive_onset(ratio: Sequence[float], threshold: float = MASSIVE_THRESHOLD) -> int | None:
    """The first layer index l whose massive ratio exceeds `threshold`, None if none does."""
    for layer, r in enumerate(ratio):
        if r is not None and np.isfinite(r) and r > threshold:
            return layer
    return None


def sink_scores_batch(attn: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per passage and head, the mean attention of queries t >= 1 to position 0.

    attn (B, H, T, T) attention probabilities (query, key); mask (B, T) bool (real tokens; each
    row has >= 2). Position 0 is the passage's first real token and t counts from it.
    Returns (B, H) float64. Query 0 is excluded: it can only attend to itself.
    """
    import torch

    m = mask.bool()
    B, H, T, _ = attn.shape
    first = m.int().argmax(1)  # (B,)
    idx = first.view(B, 1, 1, 1).expand(B, H, T, 1)
    to_first = attn.gather(3, idx)[..., 0].double()  # (B, H, T): A[b, h, t, first_b]
    w = m.double()
    w[torch.arange(B, device=m.device), first] = 0.0
    w = w / w.sum(1, keepdim=True)  # 1/(n_b - 1) at the real queries after the first
    to_first = torch.where(w[:, None, :] > 0, to_first, 0.0)  # padded rows may hold anything
    return (to_first * w[:, None, :]).sum(-1)


def sink_fraction(scores: np.ndarray, threshold: float = SINK_THRESHOLD) -> np.ndarray:
    """scores (L, H) mean attention to position 0 per block and head -> (L,) share of sinks
    (NaN for a block without scores: no passage long enough, see `sink_min_length`)."""
    s = np.asarray(scores, dtype=np.float64)
    share = (s > threshold).mean(axis=1)
    return np.where(np.isnan(s).any(axis=1), np.nan, share)


def uniform_sink_score(n_tokens: int) -> float:
    """a_{l,h} of uniform causal attention on a passage of n tokens: query t attends 1/(t+1)
    to position 0, so mean_{t=1..n-1} 1/(t+1) = (H_n - 1) / (n - 1) (0.5 at 2 tokens, 0.06 at
    64). Needs n >= 2 (query 0 is excluded, SPEC 11.3)."""
    if n_tokens < 2:
        raise DeffError(f"The sink score needs a passage of >= 2 tokens, not {n_tokens}.")
    return float(sum(1.0 / (t + 1) for t in range(1, n_tokens)) / (n_tokens - 1))


def sink_min_length(threshold: float = SINK_THRESHOLD) -> int:
    """The shortest passage on which uniform attention alone stays at or below `threshold`
    (6 tokens for 0.3): shorter passages would make every head a "sink"."""
    n = 2
    while uniform_sink_score(n) > threshold:
        n += 1
    return n
