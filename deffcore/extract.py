"""Hooks, batching and streaming pooling: passages -> pooled states h_0 .. h_L (SPEC sections 1-2).

One forward pass of the *base* model per batch (the unembedding is never run). Hooks capture

    h_0      input of block 1 (a forward pre-hook, so Gemma's sqrt(d) embedding scale is in it)
    h_l      output of block l, l = 1..L (so h_L is the input of the final norm)

and each captured (B, T, d) state is pooled right away, in float32, into device buffers of shape
(L+1, N, d) per pooling; nothing else of the batch is kept. Only the pooled N x d per layer goes
to the host at the end.

Tokenisation uses the tokenizer's own defaults (a BOS is there exactly when the tokenizer adds
one), then truncates to `max_tokens` ids (BOS counts). Passages with fewer than 2 tokens are
dropped and counted (`n_dropped_short`); every pooling uses the same kept passages, so all
poolings have the same N.

Batches: kept passages are sorted by length (longest first) so a batch pads little, the pooled
rows are written back at each passage's original slot (original order restored). With
`batch_size=None` a batch holds as many passages as fit a token budget. An out-of-memory error
halves the batch size and retries the batch; at batch size 1 it raises OutOfMemoryError.

Padding: an attention mask and explicit `position_ids = cumsum(mask) - 1` are passed, so a
passage's states do not depend on its batch or on the padding side.

Decisions where SPEC is silent: `first_non_bos` is the state at position 1 of the passage
(its second token) whatever the tokenizer does, so for a tokenizer without BOS it is the second
word piece. The position-0 ratio of a passage is `||h[0]|| / mean_{t>=1} ||h[t]||` over its
real tokens; the reported value per layer is the mean over passages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from deffcore.constants import EXTRACTED_POOLINGS
from deffcore.errors import (
    DeffError,
    NonFiniteActivationsError,
    OutOfMemoryError,
    TooFewPassagesError,
)
from deffcore.models import LoadedModel, base_model, decoder_layers

#: Token budget per batch when `batch_size` is None (padded tokens, B * T).
TOKEN_BUDGET = {"cpu": 4096, "cuda": 32768}
_NORM_EPS = 1e-12

Progress = Callable[[int, int, str], None]


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


def pool_states(hidden: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every pooling of one layer's batch.

    hidden (B, T, d) any dtype; mask (B, T) bool, True at real tokens (>= 2 per row, any padding
    side). Returns float32 `default`, `first_non_bos`, `token_normed` (B, d) and `pos0_ratio` (B,).
    Padding positions never enter a result, even when they hold NaN.
    """
    h = hidden.float()
    m = mask.bool()
    rows = torch.arange(h.shape[0], device=h.device)
    count = m.sum(1, keepdim=True).float()  # (B, 1)
    hz = torch.where(m[..., None], h, 0.0)  # padding -> 0 (and any NaN there with it)
    norms = hz.norm(dim=-1)  # (B, T), 0 at padding
    # Both means as one batched matmul with per-token weights (few passes over the (B, T, d)
    # states: on a busy CPU every extra elementwise pass costs more than its flops suggest).
    w_mean = m.float() / count  # (B, T), 0 at padding
    w_normed = w_mean / norms.clamp_min(_NORM_EPS)
    means = torch.bmm(torch.stack([w_mean, w_normed], 1), hz)  # (B, 2, d)
    first = m.int().argmax(1)  # first real position: 0 (right padding) or the pad count (left)
    n0 = norms[rows, first]
    rest = (norms.sum(1) - n0) / (count[:, 0] - 1)
    return {
        "default": means[:, 0],
        "first_non_bos": h[rows, first + 1],
        "token_normed": means[:, 1],
        "pos0_ratio": n0 / rest,
    }


def tokenize(tokenizer, passages: list[str], max_tokens: int) -> tuple[list[list[int]], list[int]]:
    """Token ids per passage with the tokenizer's defaults, truncated to `max_tokens`.

    Returns (ids of kept passages, original index of each kept passage); passages with fewer
    than 2 tokens are not kept.
    """
    if max_tokens < 2:
        raise TooFewPassagesError(f"max_tokens must be at least 2, got {max_tokens}.")
    # the tokenizer's own truncation keeps its special tokens (BOS) inside the budget; the slice
    # below only guards tokenizers that ignore max_length
    encoded = tokenizer(list(passages), truncation=True, max_length=max_tokens).input_ids
    ids, kept = [], []
    for i, seq in enumerate(encoded):
        seq = list(seq[:max_tokens])
        if len(seq) >= 2:
            ids.append(seq)
            kept.append(i)
    return ids, kept


def _pad(
    seqs: list[list[int]], pad_id: int, side: str, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids), each (B, T) on `device`."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for b, s in enumerate(seqs):
        sl = slice(T - len(s), T) if side == "left" else slice(0, len(s))
        ids[b, sl] = torch.tensor(s, dtype=torch.long)
        mask[b, sl] = 1
    # positions count real tokens only, so left padding sees the same positions as right padding
    pos = (mask.cumsum(1) - 1).clamp_min(0)
    return ids.to(device), mask.to(device), pos.to(device)


def _forward(base: torch.nn.Module, ids, mask, pos) -> None:
    """One base-model forward (separate so tests can inject an out-of-memory error)."""
    base(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


class _Pooler:
    """Hook target: pools each captured layer of the current batch into the output buffers."""

    def __init__(self, layers: int, n: int, d: int, device: str):
        self.out = {
            p: torch.zeros((layers + 1, n, d), dtype=torch.float32, device=device)
            for p in EXTRACTED_POOLINGS
        }
        self.ratio = torch.zeros((layers + 1, n), dtype=torch.float32, device=device)
        self.mask: torch.Tensor | None = None
        self.slots: torch.Tensor | None = None

    def __call__(self, layer: int, hidden: torch.Tensor) -> None:
        pooled = pool_states(hidden, self.mask)
        # A NaN/inf at any real token propagates into both masked means, so checking the (B, d)
        # means finds it without another pass over the (B, T, d) states.
        if not bool(
            torch.isfinite(pooled["default"]).all() & torch.isfinite(pooled["token_normed"]).all()
        ):
            where = "the input of block 1 (h_0)" if layer == 0 else f"the output of block {layer}"
            raise NonFiniteActivationsError(
                f"The model produced NaN or inf at layer {layer} ({where}); the states cannot "
                "be measured. Try float32 (--dtype float32) or check the weights."
            )
        for p in EXTRACTED_POOLINGS:
            self.out[p][layer, self.slots] = pooled[p]
        self.ratio[layer, self.slots] = pooled["pos0_ratio"]


def _register_hooks(model: torch.nn.Module, pooler: _Pooler) -> list:
    blocks = decoder_layers(model)

    def pre_hook(_module, args, kwargs):
        pooler(0, args[0] if args else kwargs["hidden_states"])

    def make_hook(layer: int):
        def hook(_module, _args, output):
            pooler(layer, output[0] if isinstance(output, tuple | list) else output)

        return hook

    handles = [blocks[0].register_forward_pre_hook(pre_hook, with_kwargs=True)]
    handles += [blk.register_forward_hook(make_hook(i + 1)) for i, blk in enumerate(blocks)]
    return handles


def _next_batch(lengths: list[int], order: list[int], cap: int | None, budget: int, start: int):
    """The next batch (positions in `order`) from `start`: up to `cap` passages within `budget`."""
    longest = lengths[order[start]]  # sorted longest first: the first one sets the padding
    size = max(1, budget // longest) if cap is None else cap
    return order[start : start + size]


def extract_pooled(
    loaded: LoadedModel,
    passages: list[str],
    *,
    max_tokens: int,
    batch_size: int | None = None,
    progress: Progress | None = None,
    padding_side: str = "right",
) -> PooledStates:
    """Pooled h_0 .. h_L of `passages` for every extracted pooling, in one pass per batch.

    `batch_size` None adapts to a token budget; an OOM halves it. `progress(done, total, stage)`
    is called after each batch (stage "extract"). Raises TooFewPassagesError (fewer than 2
    passages with >= 2 tokens), NonFiniteActivationsError, OutOfMemoryError.
    """
    if padding_side not in ("left", "right"):
        raise DeffError(f"padding_side must be 'left' or 'right', got {padding_side!r}.")
    tok = loaded.tokenizer
    ids, kept = tokenize(tok, passages, max_tokens)
    n_dropped = len(passages) - len(kept)
    if len(kept) < 2:
        raise TooFewPassagesError(
            f"Only {len(kept)} of {len(passages)} passages have at least 2 tokens; at least 2 "
            "are needed."
        )
    lengths = [len(s) for s in ids]
    order = sorted(range(len(ids)), key=lambda i: -lengths[i])
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    model = loaded.model
    base = base_model(model)
    pooler = _Pooler(loaded.layers, len(ids), loaded.d_model, loaded.device)
    budget = TOKEN_BUDGET["cuda" if loaded.device.startswith("cuda") else "cpu"]
    cap, sizes, halvings, start = batch_size, [], 0, 0
    handles = _register_hooks(model, pooler)
    try:
        with torch.inference_mode():
            while start < len(order):
                batch = _next_batch(lengths, order, cap, budget, start)
                b_ids, b_mask, b_pos = _pad(
                    [ids[i] for i in batch], pad_id, padding_side, loaded.device
                )
                pooler.mask = b_mask
                pooler.slots = torch.tensor(batch, device=loaded.device)
                try:
                    _forward(base, b_ids, b_mask, b_pos)
                except (RuntimeError, torch.OutOfMemoryError) as err:
                    if not _is_oom(err):
                        raise
                    if len(batch) == 1:
                        raise OutOfMemoryError(
                            f"Even one passage of {lengths[batch[0]]} tokens does not fit in "
                            f"memory on {loaded.device}; lower max_tokens."
                        ) from err
                    cap, halvings = max(1, len(batch) // 2), halvings + 1
                    if torch.cuda.is_available():
                        torch.cuda.empty_cache()
                    continue
                sizes.append(len(batch))
                start += len(batch)
                if progress is not None:
                    progress(start, len(order), "extract")
    finally:
        for h in handles:
            h.remove()
    pooled = {p: pooler.out[p].cpu().numpy() for p in EXTRACTED_POOLINGS}
    return PooledStates(
        pooled=pooled,
        pos0_norm_ratio=pooler.ratio.mean(1).cpu().numpy(),
        n_dropped_short=n_dropped,
        tokens=int(sum(lengths)),
        lengths=np.asarray(lengths, dtype=np.int64),
        meta={
            "model": loaded.spec,
            "architecture": loaded.architecture,
            "device": loaded.device,
            "dtype": loaded.dtype,
            "max_tokens": max_tokens,
            "padding_side": padding_side,
            "adds_bos": loaded.adds_bos,
            "batches": len(sizes),
            "max_batch_size": max(sizes),
            "oom_halvings": halvings,
            "kept_indices": kept,
        },
    )
