"""The skip effect (Csordás, Manning, Potts 2025 §3.2): skip one block, see what changes later.

Stage: lenses (forward passes of the whole model, logits included; on request only).

For every block s = 1..L, block s is skipped (h_s := h_{s-1}) and the later blocks run again on
the changed stream. Per passage, over its real tokens (SPEC section 16):

    later[s, l] = mean_t ||u_l^{skip s} - u_l|| / ||u_l||     l > s   (effect on later blocks)
    kl[s]       = mean_t KL(p_t || p_t^{skip s})                      (effect on the output)

with u_l = h_l - h_{l-1} and p_t the next-token distribution at position t (every real position,
the last included: its prediction is a distribution too). `later_max` keeps Csordás et al.'s own
aggregation beside it (the max over tokens instead of the mean; the summary takes the max over
passages). Decisions where the paper and SPEC differ or are silent: SPEC's mean over tokens and
KL are the headline (the paper plots the max relative change and the L2 norm of the
probability change); every token is skipped (the paper's code keeps the first token's block
untouched); the passages are the first `passages` kept passages of the run, in the run's order
(default 64), padding masked.

Cost: the baseline forward, then per s only blocks s+1..L and the head run: blocks 1..s are
replayed from the baseline (each is swapped for a module that returns its baseline output, and
block s for one returning its input), so the model's own forward code (masks, rotary
embeddings, the final norm, soft-capping) runs unchanged and about half the block work of L
full forwards is saved: the skip effect costs less than (L + 1) forwards of its passages
(BENCHMARKS.md "Depth-use atlas"). The swapped modules are put back in a `finally`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from deffcore.extraction.atlas import EPS

#: Passages of the skip effect (the first of the run's kept passages).
SKIP_PASSAGES = 64
#: Bytes held per batch (log-probabilities, the block outputs and updates): CPU / CUDA.
SKIP_BUDGET = {"cpu": 512 * 2**20, "cuda": 8 * 2**30}
Progress = Callable[[int, int, str], None]


@dataclass
class SkipRows:
    """Per-passage skip effect: later, later_max (P, L, L) [s-1, l-1] float64, NaN where l <= s;
    kl (P, L) float64 [s-1]."""

    later: np.ndarray
    later_max: np.ndarray
    kl: np.ndarray


class _Replay(nn.Module):
    """Stands in for a block: returns a stored output (the block's baseline output, or for the
    skipped block its input in the block's output structure); other attributes are the
    block's own (e.g. Gemma's `attention_type`)."""

    def __init__(self, block: nn.Module, output: Any) -> None:
        super().__init__()
        object.__setattr__(self, "_block", block)
        object.__setattr__(self, "_output", output)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._output

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(object.__getattribute__(self, "_block"), name)


@contextlib.contextmanager
def _replayed(layers: nn.ModuleList, outputs: list[Any]) -> Iterator[None]:
    """Blocks 1..len(outputs) return `outputs` instead of running; put back afterwards."""
    originals = [layers[i] for i in range(len(outputs))]
    try:
        for i, out in enumerate(outputs):
            layers[i] = _Replay(originals[i], out)
        yield
    finally:
        for i, block in enumerate(originals):
            layers[i] = block


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, tuple | list) else output


def _like(output: Any, hidden: torch.Tensor) -> Any:
    """`hidden` in the structure of a block's `output` (a tensor or a tuple led by one)."""
    return (hidden, *output[1:]) if isinstance(output, tuple) else hidden


class _Capture:
    """Hooks on every block: its raw input (block 1) and output, and its update u_l (float32,
    padding zeroed), for the forward that runs under them."""

    def __init__(self, layers: nn.ModuleList) -> None:
        self.keep: torch.Tensor | None = None
        self.inputs: dict[int, torch.Tensor] = {}
        self.outputs: dict[int, Any] = {}
        self.updates: dict[int, torch.Tensor] = {}
        self.handles = [
            blk.register_forward_hook(self._hook(i), with_kwargs=True)
            for i, blk in enumerate(layers)
        ]

    def _hook(self, i: int):
        def hook(_m: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            h_in = args[0] if args else kwargs["hidden_states"]
            self.inputs[i], self.outputs[i] = h_in, output
            u = (_first(output).float() - h_in.float()).to(self.keep.device)
            self.updates[i] = torch.where(self.keep, u, 0.0)

        return hook

    def clear(self) -> None:
        self.inputs, self.outputs, self.updates = {}, {}, {}

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _logprobs(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor):
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
    return torch.log_softmax(logits.float(), dim=-1)


def _batch_size(loaded: Any, T: int) -> int:
    vocab = int(loaded.model.get_output_embeddings().weight.shape[0])
    per_token = 4 * (2 * vocab + 3 * loaded.layers * loaded.d_model)
    budget = SKIP_BUDGET["cuda" if str(loaded.device).startswith("cuda") else "cpu"]
    return max(1, int(budget // (per_token * T)))


def _skip_batch(loaded: Any, seqs: list[list[int]], on_step: Callable[[], None]):
    """One batch's (later, later_max, kl): (B, L, L), (B, L, L), (B, L) float64 numpy."""
    from deffcore.extraction.forward import pad_batch
    from deffcore.inputs.architecture import decoder_layers

    model, layers, L = loaded.model, decoder_layers(loaded.model), loaded.layers
    tok = loaded.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    ids, mask, pos = pad_batch(seqs, int(pad), "right", loaded.device)
    B = ids.shape[0]
    keep = mask.bool()
    w = keep.double() / keep.sum(1, keepdim=True).double()
    cap = _Capture(layers)
    cap.keep = keep[..., None]
    later = torch.full((B, L, L), float("nan"), dtype=torch.float64)
    top = torch.full((B, L, L), float("nan"), dtype=torch.float64)
    kl = torch.empty((B, L), dtype=torch.float64)
    try:
        logp = _logprobs(model, ids, mask, pos)
        base_out, base_u = dict(cap.outputs), dict(cap.updates)
        h0 = cap.inputs[0]
        on_step()
        for s in range(L):  # skip block s+1 (0-based s)
            cap.clear()
            skipped = _like(base_out[s], _first(base_out[s - 1]) if s else h0)
            with _replayed(layers, [base_out[i] for i in range(s)] + [skipped]):
                logq = _logprobs(model, ids, mask, pos)
            for j in range(s + 1, L):
                rel = torch.linalg.vector_norm(cap.updates[j] - base_u[j], dim=-1) / (
                    torch.linalg.vector_norm(base_u[j], dim=-1).clamp_min(EPS)
                )
                rel = torch.where(keep, rel, 0.0)
                later[:, s, j] = (rel.double() * w).sum(-1).cpu()
                top[:, s, j] = rel.max(-1).values.double().cpu()
            per_t = (logp.exp() * (logp - logq)).sum(-1)  # KL(p || q) per position
            kl[:, s] = (torch.where(keep, per_t, 0.0).double() * w).sum(-1).cpu()
            on_step()
    finally:
        cap.remove()
    return later.numpy(), top.numpy(), kl.numpy()


@torch.inference_mode()
def skip_rows(
    loaded: Any,
    token_ids: list[list[int]],
    *,
    batch_size: int | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SkipRows:
    """The skip effect of every block on `token_ids` (each >= 2 tokens), see the module doc.

    `progress(done, total, "skip effect")` after the baseline and each skipped block of each
    batch; `should_stop()` is asked before every batch (RunCancelled)."""
    from deffcore.core.errors import RunCancelled, TooFewPassagesError

    seqs = [list(s) for s in token_ids]
    if not seqs or min(len(s) for s in seqs) < 2:
        raise TooFewPassagesError("The skip effect needs passages of at least 2 tokens.")
    size = batch_size or _batch_size(loaded, max(len(s) for s in seqs))
    batches = [seqs[i : i + size] for i in range(0, len(seqs), size)]
    total, done = len(batches) * (loaded.layers + 1), [0]

    def step() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], total, "skip effect")

    parts = []
    for batch in batches:
        if should_stop is not None and should_stop():
            raise RunCancelled("The skip effect was stopped; nothing of it was kept.")
        parts.append(_skip_batch(loaded, batch, step))
    return SkipRows(*(np.concatenate([p[k] for p in parts]) for k in range(3)))
