"""BOS and attention-sink diagnostics of a run (SPEC section 11): one small eager-attention pass.

One small extra forward pass, separate from the measurement, over the first `min(N, 64)`
passages of a run's sample (the passages with >= 2 tokens, in the run's order), with the
model's *eager* attention so the attention probabilities exist (ordinary runs keep their fast
attention and are not slowed down). Hooks on the blocks capture every token state h_0 .. h_L
(the same hooks as extraction: h_0 is the input of block 1, h_L the input of the final norm);
the reductions are `deffcore.measures.activations`'s. Per-token state norms ||h_l[b, t]|| of
every diagnosed passage are kept for the passage inspector. Memory: the exact median needs a
layer's |h| values at once, tokens x d x 4 bytes per layer (0.6 GB for all 31 states of SmolLM2
at 64 x 128); layers that do not fit `VALUES_BUDGET` together are collected in further passes,
one group per pass. The eager pass runs in batches sized so that the attention probabilities of
all L blocks fit a budget (`ATTENTION_BUDGET`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from deffcore.core.errors import DeffError, NonFiniteActivationsError, UnsupportedArchitectureError
from deffcore.measures.activations import (
    MASSIVE_THRESHOLD,
    SINK_THRESHOLD,
    massive_onset,
    median_abs,
    most_frequent,
    passage_maxima,
    sink_fraction,
    sink_min_length,
    sink_scores_batch,
    uniform_sink_score,
)
from deffcore.measures.paper_massive import (
    SUN_MIN_ABS,
    SUN_MIN_RATIO,
    sun_flags,
    sun_onset,
    sun_positions,
    sun_share,
)
from deffcore.measures.paper_sinks import GU_THRESHOLD, GU_TOKENS, GuCounts, gu_min_length

#: Passages in the diagnostic pass (SPEC 11: the first min(N, 64) of the run's sample).
DIAG_PASSAGES = 64

#: Bytes of attention probabilities (all L blocks of one batch) per diagnostic batch.
ATTENTION_BUDGET = {"cpu": 256 * 2**20, "cuda": 2 * 2**30}

#: Bytes of |h| values held at once for the exact medians; above it, layers go in groups,
#: one extra forward pass per group (e.g. 64 passages x 2,048 tokens of Gemma-3: 4 passes).
VALUES_BUDGET = 2 * 2**30

Progress = Callable[[int, int, str], None]


@dataclass
class BosDiagnostics:
    """Massive activations (h_0 .. h_L) and attention sinks (blocks 1..L) of one run.

    massive_ratio, massive_position, massive_dim, massive_max (mean_b m_b), massive_median:
        (L+1,) per state h_0 .. h_L
    sink_scores:  (L, H) a_{l,h} over the passages of >= `sink_min_length()` tokens (NaN when
                  there is none); sink_fraction: (L,); sink_passages: how many passages that
                  is; sink_baseline: uniform causal attention's a_{l,h} on them (the mean of
                  `uniform_sink_score(n_b)`)
    token_ids:    ids of each diagnosed passage; tokens: their strings
    token_norms:  per passage (L+1, n_b) ||h_l[t]||
    passage_max_position, passage_max_dim, passage_max_value: (n, L+1) where each passage's
        largest |h| sits per state (the inspector marks it)
    sun_share, sun_position: (L+1,) Sun et al.'s criterion per activation
        (`deffcore.measures.paper_massive`); gu: Gu et al.'s sink metric
        (`paper_sinks.GuCounts.result`)
    """

    massive_ratio: np.ndarray
    massive_position: np.ndarray
    massive_dim: np.ndarray
    massive_max: np.ndarray
    massive_median: np.ndarray
    sink_scores: np.ndarray
    token_ids: list[list[int]]
    tokens: list[list[str]]
    token_norms: list[np.ndarray]
    passage_max_position: np.ndarray
    passage_max_dim: np.ndarray
    passage_max_value: np.ndarray
    sink_passages: int = 0
    sink_baseline: float = float("nan")
    sun_share: np.ndarray | None = None
    sun_position: np.ndarray | None = None
    gu: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def layers(self) -> int:
        return int(self.sink_scores.shape[0])

    @property
    def n_passages(self) -> int:
        return len(self.token_ids)

    @property
    def sink_fraction(self) -> np.ndarray:
        return sink_fraction(self.sink_scores)

    @property
    def massive_onset(self) -> int | None:
        return massive_onset(self.massive_ratio)

    @property
    def sun_onset(self) -> int | None:
        return None if self.sun_share is None else sun_onset(self.sun_share)

    def to_dict(self, tokens: bool = True) -> dict[str, Any]:
        """Plain JSON-ready values; `tokens=False` leaves out the per-token inspector data."""
        out: dict[str, Any] = {
            "layers": self.layers,
            "heads": int(self.sink_scores.shape[1]),
            "n_passages": self.n_passages,
            "massive_ratio": _floats(self.massive_ratio),
            "massive_position": [int(v) for v in self.massive_position],
            "massive_dim": [int(v) for v in self.massive_dim],
            "massive_max": _floats(self.massive_max),
            "massive_median": _floats(self.massive_median),
            "massive_onset": self.massive_onset,
            "massive_threshold": MASSIVE_THRESHOLD,
            "sun_share": None if self.sun_share is None else _floats(self.sun_share),
            "sun_position": None if self.sun_position is None else self.sun_position.tolist(),
            "sun_onset": self.sun_onset,
            "sun_min_abs": SUN_MIN_ABS,
            "sun_min_ratio": SUN_MIN_RATIO,
            "sink_fraction": _floats(self.sink_fraction),
            "sink_scores": [_floats(row) for row in self.sink_scores],
            "sink_threshold": SINK_THRESHOLD,
            "sink_passages": int(self.sink_passages),
            "sink_baseline": _floats([self.sink_baseline])[0],
            "sink_min_length": sink_min_length(),
            **self.gu,
            "gu_threshold": GU_THRESHOLD,
            "gu_tokens": GU_TOKENS,
            "gu_min_length": gu_min_length(),
            "meta": self.meta,
        }
        if tokens:
            out["inspector"] = {
                "token_ids": self.token_ids,
                "tokens": self.tokens,
                "token_norms": [[_floats(row, 5) for row in n] for n in self.token_norms],
                "max_position": self.passage_max_position.tolist(),
                "max_dim": self.passage_max_dim.tolist(),
                "max_value": [_floats(row, 5) for row in self.passage_max_value],
            }
        return out


def _floats(x: Any, digits: int | None = None) -> list[float | None]:
    """float64 values as plain floats (NaN -> None); `digits` significant digits if given."""
    out: list[float | None] = []
    for v in np.asarray(x, dtype=np.float64).ravel():
        if not np.isfinite(v):
            out.append(None)
        elif digits is None or v == 0:
            out.append(float(v))
        else:
            out.append(float(f"{v:.{digits}g}"))
    return out


class _Collector:
    """Hook target: keeps what the massive statistics and the inspector need from each state."""

    def __init__(self, layers: int, n: int):
        self.values: list[list[np.ndarray]] = [[] for _ in range(layers + 1)]
        self.max_value = np.zeros((n, layers + 1), dtype=np.float64)
        self.max_position = np.zeros((n, layers + 1), dtype=np.int64)
        self.max_dim = np.zeros((n, layers + 1), dtype=np.int64)
        self.norms: list[np.ndarray | None] = [None] * n
        self.layers = layers
        self.mask: torch.Tensor | None = None
        self.slots: list[int] = []
        #: layers whose |h| values this pass keeps (for the median); the per-passage maxima
        #: and norms are taken on the first pass only
        self.keep: set[int] = set(range(layers + 1))
        self.first_pass = True

    def __call__(self, layer: int, hidden: torch.Tensor) -> None:
        m = self.mask.bool()
        h = hidden.float()
        if layer in self.keep:
            self.values[layer].append(h[m].abs().cpu().numpy())  # (real tokens, d) float32
        if not self.first_pass:
            return
        value, pos, dim = passage_maxima(h, m)
        if not bool(torch.isfinite(value).all()):
            raise NonFiniteActivationsError(
                f"The model produced NaN or inf at layer {layer} during the diagnostic pass; "
                "try float32 (--dtype float32) or check the weights."
            )
        norms = h.norm(dim=-1).cpu().numpy()  # (B, T)
        lengths = m.sum(1).tolist()
        for row, slot in enumerate(self.slots):
            self.max_value[slot, layer] = float(value[row])
            self.max_position[slot, layer] = int(pos[row])
            self.max_dim[slot, layer] = int(dim[row])
            if self.norms[slot] is None:
                self.norms[slot] = np.zeros((self.layers + 1, lengths[row]), dtype=np.float64)
            self.norms[slot][layer] = norms[row, : lengths[row]]  # right padding


def _num_heads(model: torch.nn.Module) -> int:
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else None
    cfg = cfg or model.config
    for name in ("num_attention_heads", "n_head", "num_heads"):
        if getattr(cfg, name, None):
            return int(getattr(cfg, name))
    return 16


@contextlib.contextmanager
def eager_attention(model: torch.nn.Module) -> Iterator[None]:
    """Inside the `with`, the model uses transformers' eager attention (it returns attention
    probabilities); on exit the previous implementation is restored."""
    previous = getattr(model.config, "_attn_implementation", None)
    if previous == "eager":
        yield
        return
    if not hasattr(model, "set_attn_implementation"):
        raise UnsupportedArchitectureError(
            f"{type(model).__name__} cannot switch to eager attention, so its attention "
            "probabilities (needed for the sink diagnostics) cannot be read."
        )
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


def _add_sink_scores(
    scores: np.ndarray,
    out: Any,
    mask: torch.Tensor,
    arch: str,
    eligible: torch.Tensor,
    blocks: list[int] | None = None,
    gu: GuCounts | None = None,
) -> np.ndarray:
    """scores (L, H) plus this batch's sums of a_{l,h} over its `eligible` (B,) bool passages
    (the model output's `attentions`, one (B, H, T, T) per attention block: `blocks`, the
    0-based blocks that have attention, `Architecture.attention_blocks`; None: every block).
    A hybrid's blocks without attention keep NaN rows (no sink score); `gu` adds the batch to
    Gu et al.'s counts."""
    attentions = getattr(out, "attentions", None)
    L = scores.shape[0]
    blocks = list(range(L)) if blocks is None else blocks
    if not blocks or not attentions or len(attentions) != len(blocks) or attentions[0] is None:
        raise UnsupportedArchitectureError(
            f"{arch} does not return attention probabilities for all its attention blocks, so "
            "the sink diagnostics cannot be computed."
        )
    if attentions[0].shape[1] != scores.shape[1]:  # the config's head count was wrong
        if np.nan_to_num(scores).any():
            raise UnsupportedArchitectureError(f"{arch} changed its number of heads mid-run.")
        scores = np.zeros((L, attentions[0].shape[1]), dtype=np.float64)
    scores[[i for i in range(L) if i not in blocks]] = np.nan
    keep = eligible.to(attentions[0].device)
    for layer, attn in zip(blocks, attentions, strict=True):
        scores[layer] += sink_scores_batch(attn, mask.bool())[keep].sum(0).cpu().numpy()
    if gu is not None:
        gu.add(attentions, mask.bool())
    return scores


def _token_strings(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each id decoded on its own (readable, unlike raw vocabulary pieces); specials kept."""
    return [tokenizer.decode([i]) for i in ids]


def _diagnostic_ids(
    loaded: Any,
    passages: list[str] | None,
    token_ids: list[list[int]] | None,
    max_tokens: int | None,
    bos: str,
    max_passages: int,
) -> list[list[int]]:
    """The ids of the first `max_passages` passages with >= 2 tokens (texts tokenised with
    `max_tokens` and `bos`, or ready `token_ids`)."""
    from deffcore.core.errors import TooFewPassagesError
    from deffcore.inputs.texts import keep_long_enough, tokenize

    if token_ids is None:
        if max_tokens is None:
            raise DeffError("bos_diagnostics needs max_tokens when it is given passages.")
        ids, _ = tokenize(loaded.tokenizer, list(passages or []), max_tokens, bos)
    else:
        ids, _ = keep_long_enough([list(s) for s in token_ids])
    ids = ids[:max_passages]
    if not ids:
        raise TooFewPassagesError("No passage has the 2 tokens the diagnostics need.")
    return ids


def _value_groups(ids: list[list[int]], layers: int, d_model: int) -> list[list[int]]:
    """The exact median needs every |h| value of a layer at once: when all layers do not fit
    VALUES_BUDGET, later passes (no attention output) collect the remaining layers in groups."""
    per_layer = sum(len(s) for s in ids) * d_model * 4
    group = max(1, min(layers + 1, VALUES_BUDGET // max(per_layer, 1)))
    return [list(range(g, min(g + group, layers + 1))) for g in range(0, layers + 1, group)]


def _diagnostic_passes(
    loaded: Any,
    ids: list[list[int]],
    collector: _Collector,
    heads: int,
    batch_size: int,
    progress: Progress | None,
) -> tuple[np.ndarray, np.ndarray, GuCounts]:
    """The eager forward passes: sums of a_{l,h} (L, H) over the passages long enough for the
    sink test, the (L+1,) medians of |h| and Gu et al.'s counts; the collector keeps the rest."""
    from deffcore.extraction.forward import pad_batch, register_hooks
    from deffcore.inputs.architecture import architecture_of

    model, L = loaded.model, loaded.layers
    tok = loaded.tokenizer
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    long_enough = torch.tensor([len(s) >= sink_min_length() for s in ids])
    scores = np.zeros((L, heads), dtype=np.float64)
    medians = np.zeros(L + 1, dtype=np.float64)
    groups = _value_groups(ids, L, loaded.d_model)
    arch = architecture_of(model)
    handles = register_hooks(arch, collector)
    attention_blocks = arch.attention_blocks()
    gu = GuCounts(L, blocks=attention_blocks)
    try:
        with eager_attention(arch.base), torch.inference_mode():  # the text model only
            for g, layers in enumerate(groups):
                collector.keep, collector.first_pass = set(layers), g == 0
                for start in range(0, len(ids), batch_size):
                    batch = list(range(start, min(start + batch_size, len(ids))))
                    b_ids, b_mask, b_pos = pad_batch(
                        [ids[i] for i in batch], pad_id, "right", loaded.device
                    )
                    collector.mask, collector.slots = b_mask, batch
                    out = arch.forward(b_ids, b_mask, b_pos, output_attentions=g == 0)
                    if g == 0:
                        eligible = long_enough[batch]
                        scores = _add_sink_scores(
                            scores,
                            out,
                            b_mask,
                            loaded.architecture,
                            eligible,
                            attention_blocks,
                            gu,
                        )
                    if progress is not None:
                        done = g * len(ids) + batch[-1] + 1
                        progress(done, len(groups) * len(ids), "diagnostics")
                for layer in layers:  # free each group's |h| values once its median is taken
                    medians[layer] = median_abs(collector.values[layer])
                    collector.values[layer] = []
    finally:
        for h in handles:
            h.remove()
    return scores, medians, gu


def bos_diagnostics(
    loaded: Any,
    passages: list[str] | None = None,
    *,
    token_ids: list[list[int]] | None = None,
    max_tokens: int | None = None,
    bos: str = "default",
    max_passages: int = DIAG_PASSAGES,
    batch_size: int | None = None,
    progress: Progress | None = None,
) -> BosDiagnostics:
    """Massive activations and attention sinks of `loaded` (a `LoadedModel`) on the first
    `max_passages` passages with >= 2 tokens.

    Either `passages` (texts, tokenised with `max_tokens` and the BOS option `bos`) or
    `token_ids` (ready ids, e.g. the run's windows). One eager-attention forward pass per batch,
    right padding; the model's attention implementation is restored afterwards. Sink scores
    count only passages of >= `sink_min_length()` tokens (uniform attention passes the
    threshold on shorter ones). Raises TooFewPassagesError (no passage with >= 2 tokens),
    NonFiniteActivationsError, UnsupportedArchitectureError (no attention probabilities).
    """
    ids = _diagnostic_ids(loaded, passages, token_ids, max_tokens, bos, max_passages)
    L, heads = loaded.layers, _num_heads(loaded.model)
    if batch_size is None:
        T = max(len(s) for s in ids)
        budget = ATTENTION_BUDGET["cuda" if loaded.device.startswith("cuda") else "cpu"]
        batch_size = max(1, budget // (L * heads * T * T * 4))
    from deffcore.inputs.architecture import architecture_of

    if architecture_of(loaded.model).pad_sensitive:  # sparse attention reads padded keys
        batch_size = 1
    collector = _Collector(L, len(ids))
    scores, medians, gu = _diagnostic_passes(loaded, ids, collector, heads, batch_size, progress)
    lengths = [len(s) for s in ids if len(s) >= sink_min_length()]
    mean_max = collector.max_value.mean(0)
    flags = sun_flags(collector.max_value, medians)  # (n, L+1): Sun et al. per activation
    return BosDiagnostics(
        massive_ratio=mean_max / medians,
        massive_position=np.array([most_frequent(c) for c in collector.max_position.T]),
        massive_dim=np.array([most_frequent(c) for c in collector.max_dim.T]),
        massive_max=mean_max,
        massive_median=medians,
        sink_scores=scores / len(lengths) if lengths else np.full_like(scores, np.nan),
        token_ids=[list(map(int, s)) for s in ids],
        tokens=[_token_strings(loaded.tokenizer, s) for s in ids],
        token_norms=[np.asarray(x) for x in collector.norms],
        passage_max_position=collector.max_position,
        passage_max_dim=collector.max_dim,
        passage_max_value=collector.max_value,
        sink_passages=len(lengths),
        sink_baseline=(
            float(np.mean([uniform_sink_score(n) for n in lengths])) if lengths else float("nan")
        ),
        sun_share=sun_share(collector.max_value, medians),
        sun_position=sun_positions(flags, collector.max_position),
        gu=gu.result(),
        meta={
            "model": loaded.spec,
            "architecture": loaded.architecture,
            "device": loaded.device,
            "dtype": loaded.dtype,
            "adds_bos": bool(loaded.adds_bos),
            "batch_size": int(batch_size),
            "passages": len(ids),
            "tokens": int(sum(len(s) for s in ids)),
        },
    )
