"""Gu et al.'s attention-sink metric, as their paper defines it (stage: measures).

Gu, Pang, Du, Liu, Zhang, Wang & Lin, "When Attention Sink Emerges in Language Models: An
Empirical View" (2024), section 3: for a passage of T tokens, block l, head h and key k, the
importance score is the mean attention of the queries that can see k,

    alpha_{l,h}(k) = 1 / (T - k + 1) * sum_{i = k .. T} A_{l,h}[i, k]        (1-based),

and the sink metric is the share of heads whose score exceeds eps = 0.3, **decided per
sample**, then averaged: Sink_eps^k = (1/L) sum_l (1/H) sum_h 1[alpha_{l,h}(k) > eps], on
sequences of T = 64 tokens, averaged over sequences. For the first token (k = 1, our position
0) the sum runs over every query, query 0 included (A[0, 0] = 1 under causal attention).

Reported here, per block l = 1..L, for passage b with n_b real tokens:

    alpha_{b,l,h}      mean over queries t = 0 .. n'_b - 1 of A_{l,h}[b, t, 0], n'_b = n_b
                       (the whole passage) or min(n_b, 64) (`GU_TOKENS`, Gu et al.'s length:
                       causal attention makes the first 64 queries' rows those of the first 64
                       tokens, so no second forward pass is needed)
    gu_sink_rate_{l,h}  share of passages with alpha_{b,l,h} > 0.3            (L, H)
    gu_sink_fraction_l  mean over heads of that = mean over passages of the share of sink heads
    gu_sink_metric      mean over blocks: Gu et al.'s Sink_0.3 of the first token
    (gu64_...           the same on each passage's first 64 tokens)

Decisions where the paper is silent: passages on which uniform causal attention alone would
pass the threshold are left out (uniform attention scores mean_{t=0..n-1} 1/(t+1) = H_n / n,
above 0.3 below `gu_min_length()` = 10 tokens); `gu_baseline` is that uniform score averaged
over the passages kept. The project's own score (`activations.sink_scores_batch`) differs in
two ways and keeps its name (`sink_fraction`): it drops query 0 (which can only attend to
itself) and thresholds a_{l,h} after averaging over passages, so a head that is a sink in
half of the passages counts fully or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch loads when a function needs it (a stored run's view never does)
    import torch

#: Gu et al.'s threshold eps on the importance score.
GU_THRESHOLD = 0.3
#: Gu et al.'s sequence length (their metric is computed on 64-token sequences).
GU_TOKENS = 64
#: The two windows reported: the whole passage (None) and Gu et al.'s first 64 tokens.
GU_WINDOWS: tuple[int | None, ...] = (None, GU_TOKENS)


def gu_uniform_score(n_tokens: int) -> float:
    """alpha of uniform causal attention on n tokens, query 0 included: H_n / n."""
    if n_tokens < 1:
        raise ValueError(f"The importance score needs a passage of >= 1 token, not {n_tokens}.")
    return float(sum(1.0 / (t + 1) for t in range(n_tokens)) / n_tokens)


def gu_min_length(threshold: float = GU_THRESHOLD) -> int:
    """The shortest passage on which uniform attention stays at or below `threshold` (10
    tokens for 0.3)."""
    n = 1
    while gu_uniform_score(n) > threshold:
        n += 1
    return n


def gu_scores_batch(
    attn: torch.Tensor, mask: torch.Tensor, max_tokens: int | None = None
) -> torch.Tensor:
    """alpha_{b,h} of position 0 over queries t = 0 .. min(n_b, max_tokens) - 1.

    attn (B, H, T, T) attention probabilities (query, key); mask (B, T) bool (real tokens,
    any padding side, >= 1 per row); position 0 is each passage's first real token.
    Returns (B, H) float64; query 0 included (module docstring).
    """
    import torch

    m = mask.bool()
    B, H, T, _ = attn.shape
    first = m.int().argmax(1)  # (B,)
    idx = first.view(B, 1, 1, 1).expand(B, H, T, 1)
    to_first = attn.gather(3, idx)[..., 0].double()  # (B, H, T): A[b, h, t, first_b]
    n = m.sum(1)
    limit = n if max_tokens is None else n.clamp(max=int(max_tokens))
    rel = torch.arange(T, device=m.device)[None, :] - first[:, None]  # query index from 0
    w = (m & (rel < limit[:, None])).double()
    w = w / limit[:, None].double()
    to_first = torch.where(w[:, None, :] > 0, to_first, 0.0)  # padded rows may hold anything
    return (to_first * w[:, None, :]).sum(-1)


def window_prefix(window: int | None) -> str:
    """The result keys' prefix of a window: "gu_" (whole passage) or "gu64_" (first 64)."""
    return "gu_" if window is None else f"gu{int(window)}_"


@dataclass
class GuCounts:
    """Running sums of Gu et al.'s metric over batches: per window, (L, H) counts of passages
    in which the head is a sink, the passages counted and their uniform-attention scores."""

    layers: int
    sinks: dict[str, np.ndarray] = field(default_factory=dict)
    baselines: dict[str, list[float]] = field(default_factory=dict)
    passages: int = 0
    #: the 0-based blocks that have attention (a hybrid's others keep NaN rows); None: all
    blocks: list[int] | None = None

    def add(self, attentions: Any, mask: torch.Tensor) -> None:
        """One batch: `attentions` one (B, H, T, T) tensor per attention block (`blocks`),
        mask (B, T) bool."""
        lengths = mask.bool().sum(1)
        keep = lengths >= gu_min_length()
        if not bool(keep.any()):
            return
        heads = int(attentions[0].shape[1])
        for window in GU_WINDOWS:
            key = window_prefix(window)
            counts = self.sinks.setdefault(key, np.zeros((self.layers, heads)))
            blocks = range(self.layers) if self.blocks is None else self.blocks
            for layer, attn in zip(blocks, attentions, strict=True):
                alpha = gu_scores_batch(attn, mask.to(attn.device), window)
                sinks = (alpha > GU_THRESHOLD)[keep.to(attn.device)]
                counts[layer] += sinks.double().sum(0).cpu().numpy()
            n = lengths[keep] if window is None else lengths[keep].clamp(max=window)
            self.baselines.setdefault(key, []).extend(gu_uniform_score(int(v)) for v in n.tolist())
        self.passages += int(keep.sum())

    def result(self) -> dict[str, Any]:
        """Plain values, per window (prefix `window_prefix`: "gu_" the whole passage, "gu64_"
        the first 64 tokens): `<p>sink_rate` (L, H), `<p>sink_fraction` (L,), `<p>sink_metric`,
        `<p>baseline`; and `gu_passages` (None values when no passage qualified)."""
        out: dict[str, Any] = {"gu_passages": self.passages}
        for window in GU_WINDOWS:
            p = window_prefix(window)
            counts = self.sinks.get(p)
            rate = None if counts is None or not self.passages else counts / self.passages
            if rate is not None and self.blocks is not None:
                rate[[i for i in range(self.layers) if i not in self.blocks]] = np.nan
            out[f"{p}sink_rate"] = None if rate is None else rate.tolist()
            out[f"{p}sink_fraction"] = None if rate is None else rate.mean(axis=1).tolist()
            out[f"{p}sink_metric"] = None if rate is None else float(np.nanmean(rate))
            out[f"{p}baseline"] = None if rate is None else float(np.mean(self.baselines[p]))
        return out
