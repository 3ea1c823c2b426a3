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

Resuming (issue 9): with a `checkpoint` (e.g. `deffcore.cache.PartialRun`), the pooled rows of
finished batches are handed to `checkpoint.save` as the run goes, the batches finished since the
last save as one chunk, at most every CHECKPOINT_EVERY_S seconds (the last chunk is not saved:
the complete entry follows at once), and at the start
`checkpoint.resume(plan, order)` returns the batches an interrupted run already finished. Their
rows are put back and the loop continues from the next passage of the same plan with the batch
cap in force when the run stopped, so the remaining batches are exactly those of an
uninterrupted run and the result is bit-identical. `should_stop()` is asked before every batch;
when it says True the run ends with RunCancelled, its finished batches kept.

Padding: an attention mask and explicit `position_ids = cumsum(mask) - 1` are passed, so a
passage's states do not depend on its batch or on the padding side.

Decisions where SPEC is silent: `first_non_bos` is the state at position 1 of the passage
(its second token) whatever the tokenizer does, so for a tokenizer without BOS it is the second
word piece. The position-0 ratio of a passage is `||h[0]|| / mean_{t>=1} ||h[t]||` over its
real tokens; the reported value per layer is the mean over passages.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from deffcore.constants import EXTRACTED_POOLINGS
from deffcore.errors import (
    DeffError,
    NonFiniteActivationsError,
    OutOfMemoryError,
    RunCancelled,
    TooFewPassagesError,
)
from deffcore.models import LoadedModel, base_model, decoder_layers
from deffcore.tokens import encode_documents

#: Token budget per batch when `batch_size` is None (padded tokens, B * T).
TOKEN_BUDGET = {"cpu": 4096, "cuda": 32768}
#: Finished batches are handed to the checkpoint at most this often (seconds), as one chunk of
#: consecutive batches: a kill loses at most this much work plus one batch, and writing
#: (~0.2 s per 9 MB chunk on the 2-core CPU) stays a small share of fast GPU extraction too.
CHECKPOINT_EVERY_S = 10.0
_clock = time.monotonic  # separate so tests can drive the checkpoint interval
_NORM_EPS = 1e-12

#: progress(done, total, stage): stage "extract" after every batch (done = passages finished,
#: resumed ones included), "resume" once when a partial run is picked up (done = passages
#: resumed). A caller wanting a rate takes done over elapsed time; tokens per passage are at most
#: max_tokens.
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
    """Where `extract_pooled` keeps finished batches (`deffcore.cache.PartialRun` is one)."""

    def resume(self, plan: dict[str, Any], order: list[int]) -> list[SavedBatch]:
        """The saved batches that continue `order` from its start, if saved under `plan`."""
        ...

    def save(self, index: int, batch: SavedBatch) -> None:
        """Keep finished batch number `index` (0, 1, 2 ... in plan order)."""
        ...


def _ids_sha256(ids: list[list[int]]) -> str:
    """Content hash of the token ids: a partial run is reused only for exactly these ids."""
    h = hashlib.sha256()
    for seq in ids:
        h.update(len(seq).to_bytes(4, "little"))
        h.update(np.asarray(seq, dtype=np.int64).tobytes())
    return h.hexdigest()


def pool_states(hidden: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every pooling of one layer's batch.

    hidden (B, T, d) any dtype; mask (B, T) bool, True at real tokens (>= 2 per row, any padding
    side). Returns float32 `default`, `first_non_bos`, `token_normed`, `no_pos0` (B, d) and
    `pos0_ratio` (B,). `no_pos0` is the mean over real positions t >= 1 (SPEC section 11.1).
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
    first = m.int().argmax(1)  # first real position: 0 (right padding) or the pad count (left)
    w_rest = m.float()
    w_rest[rows, first] = 0.0
    w_rest = w_rest / (count - 1)  # (B, T): 1/(n-1) at real positions t >= 1
    means = torch.bmm(torch.stack([w_mean, w_normed, w_rest], 1), hz)  # (B, 3, d)
    n0 = norms[rows, first]
    rest = (norms.sum(1) - n0) / (count[:, 0] - 1)
    return {
        "default": means[:, 0],
        "first_non_bos": h[rows, first + 1],
        "token_normed": means[:, 1],
        "no_pos0": means[:, 2],
        "pos0_ratio": n0 / rest,
    }


def tokenize(
    tokenizer, passages: list[str], max_tokens: int, bos: str = "default"
) -> tuple[list[list[int]], list[int]]:
    """Token ids per passage with the tokenizer's special tokens (adjusted by the BOS option
    `bos`, see `deffcore.tokens`), truncated to `max_tokens` (special tokens count).

    Returns (ids of kept passages, original index of each kept passage); passages with fewer
    than 2 tokens are not kept.
    """
    if max_tokens < 2:
        raise TooFewPassagesError(f"max_tokens must be at least 2, got {max_tokens}.")
    return keep_long_enough(encode_documents(tokenizer, list(passages), max_tokens, bos))


def keep_long_enough(encoded: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """(sequences with >= 2 tokens, their original indices)."""
    ids, kept = [], []
    for i, seq in enumerate(encoded):
        if len(seq) >= 2:
            ids.append(list(seq))
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
    passages: list[str] | None,
    *,
    max_tokens: int,
    batch_size: int | None = None,
    progress: Progress | None = None,
    padding_side: str = "right",
    bos: str = "default",
    token_ids: list[list[int]] | None = None,
    checkpoint: BatchCheckpoint | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> PooledStates:
    """Pooled h_0 .. h_L of `passages` for every extracted pooling, in one pass per batch.

    Either `passages` (texts, tokenised here with the BOS option `bos`) or `token_ids`
    (ready ids, e.g. token windows; `passages` None). `batch_size` None adapts to a token
    budget; an OOM halves it. `progress(done, total, stage)` is called after each batch (stage
    "extract") and once with stage "resume" when `checkpoint` returns finished batches.
    `checkpoint` keeps finished batches and returns those of an interrupted run (see the module
    docstring); `should_stop()`, asked before each batch, ends the run with RunCancelled.
    `meta["resumed_passages"]` counts the passages taken from the checkpoint.
    Raises TooFewPassagesError (fewer than 2 passages with >= 2 tokens),
    NonFiniteActivationsError, OutOfMemoryError, RunCancelled.
    """
    if padding_side not in ("left", "right"):
        raise DeffError(f"padding_side must be 'left' or 'right', got {padding_side!r}.")
    tok = loaded.tokenizer
    if token_ids is not None:
        total = len(token_ids)
        ids, kept = keep_long_enough([list(s[:max_tokens]) for s in token_ids])
    else:
        total = len(passages or [])
        ids, kept = tokenize(tok, list(passages or []), max_tokens, bos)
    n_dropped = total - len(kept)
    if len(kept) < 2:
        raise TooFewPassagesError(
            f"Only {len(kept)} of {total} passages have at least 2 tokens; at least 2 are needed."
        )
    lengths = [len(s) for s in ids]
    order = sorted(range(len(ids)), key=lambda i: -lengths[i])
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    model = loaded.model
    base = base_model(model)
    pooler = _Pooler(loaded.layers, len(ids), loaded.d_model, loaded.device)
    budget = TOKEN_BUDGET["cuda" if loaded.device.startswith("cuda") else "cpu"]
    cap, sizes, halvings, start = batch_size, [], 0, 0
    saved: list[SavedBatch] = []
    if checkpoint is not None:
        plan = {
            "n": len(ids),
            "layers": loaded.layers,
            "d_model": loaded.d_model,
            "ids_sha256": _ids_sha256(ids),
            "device": loaded.device,
            "dtype": loaded.dtype,
            "padding_side": padding_side,
            "pad_id": int(pad_id),
            "batch_size": batch_size,
            "budget": budget,
            "poolings": list(EXTRACTED_POOLINGS),
        }
        saved = checkpoint.resume(plan, order)
    for done in saved:  # rows of an interrupted run: put back, continue after them
        slots = torch.as_tensor(done.slots, device=loaded.device)
        for p in EXTRACTED_POOLINGS:
            pooler.out[p][:, slots] = torch.as_tensor(done.rows[p], device=loaded.device)
        pooler.ratio[:, slots] = torch.as_tensor(done.rows["pos0_ratio"], device=loaded.device)
        assert done.slots.tolist() == order[start : start + len(done.slots)]
        start += len(done.slots)
        sizes.append(len(done.slots))
        cap = done.cap
    resumed = flushed = start
    n_saved = len(saved)
    last_save = _clock()
    if resumed and progress is not None:
        progress(resumed, len(order), "resume")
    handles = _register_hooks(model, pooler)
    try:
        with torch.inference_mode():
            while start < len(order):
                if should_stop is not None and should_stop():
                    raise RunCancelled(
                        f"The run was stopped after {start} of {len(order)} passages"
                        + ("; rerun it to resume from there." if checkpoint else ".")
                    )
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
                if (
                    checkpoint is not None
                    and start < len(order)
                    and _clock() - last_save >= CHECKPOINT_EVERY_S
                ):
                    # one chunk: every batch finished since the last save (order[flushed:start])
                    chunk = order[flushed:start]
                    idx = torch.tensor(chunk, device=loaded.device)
                    rows = {p: pooler.out[p][:, idx].cpu().numpy() for p in EXTRACTED_POOLINGS}
                    rows["pos0_ratio"] = pooler.ratio[:, idx].cpu().numpy()
                    checkpoint.save(
                        n_saved, SavedBatch(np.asarray(chunk, dtype=np.int64), rows, cap)
                    )
                    n_saved, flushed, last_save = n_saved + 1, start, _clock()
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
            "bos": bos,
            "batches": len(sizes),
            "max_batch_size": max(sizes),
            "oom_halvings": halvings,
            "kept_indices": kept,
            "resumed_passages": resumed,
        },
    )
