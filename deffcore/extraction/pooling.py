"""Pooling arithmetic: one layer of one batch into every pooling, on its device (SPEC section 2).

Each captured (B, T, d) state is pooled right away, in float32: one float32 copy of the state
with padding zeroed, its token norms, one batched matmul for the three means (per-token weights
computed once per batch from the mask), one gather for `first_non_bos`. No host-device
synchronisation: kernels are only queued.

Decisions where SPEC is silent: `first_non_bos` is the state at position 1 of the passage
(its second token) whatever the tokenizer does, so for a tokenizer without BOS it is the second
word piece. The position-0 ratio of a passage is `||h[0]|| / mean_{t>=1} ||h[t]||` over its
real tokens; the reported value per layer is the mean over passages.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

_NORM_EPS = 1e-12

#: The pooled means, in the order of the rows of `BatchWeights.weights` (one batched matmul).
POOLED_MEANS: tuple[str, ...] = ("default", "token_normed", "no_pos0")


@dataclass
class PooledStates:
    """Pooled states of one run.

    pooled:           {pooling: (L+1, N, d) float32}, layer 0 = h_0, layer L = h_L (pre-norm)
    pos0_norm_ratio:  (L+1,) mean over passages of ||h_l[0]|| / mean_{t>=1} ||h_l[t]||
    n_dropped_short:  passages dropped for having fewer than 2 tokens
    tokens:           total tokens processed (BOS included, padding excluded)
    meta:             plain values describing the extraction (JSON-ready)
    lengths:          (N,) tokens per kept passage
    """

    pooled: dict[str, np.ndarray]
    pos0_norm_ratio: np.ndarray
    n_dropped_short: int
    tokens: int
    meta: dict[str, Any] = field(default_factory=dict)
    lengths: np.ndarray | None = None

    @property
    def layers(self) -> int:
        return self.pooled["default"].shape[0] - 1

    @property
    def n(self) -> int:
        return self.pooled["default"].shape[1]

    @property
    def d_model(self) -> int:
        return self.pooled["default"].shape[2]


@dataclass
class BatchWeights:
    """Per-token weights of one batch, shared by all its layers (computed once from the mask).

    weights:  (B, 3, T) float32, rows = the `POOLED_MEANS`: 1/n at real tokens (default), row 1
              rewritten per layer as (1/n) / ||h_t|| (token_normed), 1/(n-1) at real tokens
              t >= 1 (no_pos0); 0 at padding
    keep:     (B, T, 1) bool, True at real tokens; None when the batch has no padding
    first:    (B, 1) int64, first real position (0 with right padding, the pad count with left)
    second:   (B,) int64, index of position first+1 in the (B*T, d) view of a state
    count:    (B, 1) float32 real tokens per passage
    """

    weights: torch.Tensor
    keep: torch.Tensor | None
    first: torch.Tensor
    second: torch.Tensor
    count: torch.Tensor

    @classmethod
    def from_mask(cls, mask: torch.Tensor, padded: bool = True) -> BatchWeights:
        """`mask` (B, T), True/1 at real tokens (>= 2 per row, any padding side)."""
        m = mask.bool()
        B, T = m.shape
        rows = torch.arange(B, device=m.device)
        count = m.sum(1, keepdim=True).float()  # (B, 1)
        first = m.int().argmax(1)
        w_rest = m.float()
        w_rest[rows, first] = 0.0
        weights = torch.empty((B, 3, T), dtype=torch.float32, device=m.device)
        weights[:, 0] = m.float() / count
        weights[:, 2] = w_rest / (count - 1)
        return cls(
            weights=weights,
            keep=m[..., None] if padded else None,
            first=first[:, None],
            second=rows * T + first + 1,
            count=count,
        )

    def to(self, device: torch.device) -> BatchWeights:
        """A copy on `device` (a model spread over several devices)."""

        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            # asynchronous only between CUDA devices: a host copy must be complete when read
            fast = t is not None and t.is_cuda and device.type == "cuda"
            return None if t is None else t.to(device, non_blocking=fast)

        return BatchWeights(*(move(getattr(self, f)) for f in self.__dataclass_fields__))


@contextlib.contextmanager
def _ieee_float32(on_cuda: bool):
    """Full float32 for the pooling matmul even when the user enabled TF32 (whose 10-bit
    mantissa would round the token weights: ~5e-4 relative error in the pooled means)."""
    if not (on_cuda and torch.backends.cuda.matmul.allow_tf32):
        yield
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = True


def pool_layer(
    hidden: torch.Tensor,
    w: BatchWeights,
    means: torch.Tensor,
    first: torch.Tensor,
    norms: torch.Tensor,
) -> None:
    """Pool one layer into the given outputs; queues kernels only (no host synchronisation).

    hidden (B, T, d) any dtype; outputs float32 on hidden's device: means (B, 3, d) (the
    `POOLED_MEANS`), first (B, d) (`first_non_bos`), norms (B, T) (token norms, 0 at padding).
    Padding positions never enter a result, even when they hold NaN.
    """
    # padding -> 0 (and any NaN there with it), then float32: one pass each
    hz = (hidden if w.keep is None else torch.where(w.keep, hidden, 0.0)).float()
    torch.linalg.vector_norm(hz, dim=-1, out=norms)
    torch.div(w.weights[:, 0], norms.clamp_min(_NORM_EPS), out=w.weights[:, 1])
    # The three means as one batched matmul with per-token weights: one more pass over the state.
    with _ieee_float32(hz.is_cuda):
        torch.bmm(w.weights, hz, out=means)
    torch.index_select(hz.reshape(-1, hz.shape[-1]), 0, w.second, out=first)


def position0_ratio(norms: torch.Tensor, w: BatchWeights) -> torch.Tensor:
    """||h[first]|| / mean of the other real tokens' norms: norms (..., B, T) -> (..., B)."""
    n0 = norms.gather(-1, w.first.expand(*norms.shape[:-1], 1)).squeeze(-1)
    rest = (norms.sum(-1) - n0) / (w.count[:, 0] - 1)
    return n0 / rest


def pool_states(hidden: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every pooling of one layer's batch (the arithmetic the hooks use, for one layer).

    hidden (B, T, d) any dtype; mask (B, T) bool, True at real tokens (>= 2 per row, any padding
    side). Returns float32 `default`, `first_non_bos`, `token_normed`, `no_pos0` (B, d) and
    `pos0_ratio` (B,). `no_pos0` is the mean over real positions t >= 1 (SPEC section 11.1).
    Padding positions never enter a result, even when they hold NaN.
    """
    w = BatchWeights.from_mask(mask.to(hidden.device))
    B, T, d = hidden.shape
    means = hidden.new_empty((B, 3, d), dtype=torch.float32)
    first = hidden.new_empty((B, d), dtype=torch.float32)
    norms = hidden.new_empty((B, T), dtype=torch.float32)
    pool_layer(hidden, w, means, first, norms)
    out = {p: means[:, k] for k, p in enumerate(POOLED_MEANS)}
    return {**out, "first_non_bos": first, "pos0_ratio": position0_ratio(norms, w)}
