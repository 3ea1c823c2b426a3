"""BOS and attention-sink diagnostics (SPEC section 11): massive activations, sink heads, verdict.

One small extra forward pass, separate from the measurement, over the first `min(N, 64)`
passages of a run's sample (the passages with >= 2 tokens, in the run's order), with the
model's *eager* attention so the attention probabilities exist (ordinary runs keep their fast
attention and are not slowed down). Hooks on the blocks capture every token state h_0 .. h_L
(the same hooks as extraction: h_0 is the input of block 1, h_L the input of the final norm).

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
passage's first real token; per-token state norms ||h_l[b, t]|| of every diagnosed passage are
kept for the passage inspector. Memory: the exact median needs a layer's |h| values at once,
tokens x d x 4 bytes per layer (0.6 GB for all 31 states of SmolLM2 at 64 x 128); layers that
do not fit `VALUES_BUDGET` together are collected in further passes, one group per pass.
The eager pass runs in batches sized so that the attention probabilities of all L blocks fit a
budget (`ATTENTION_BUDGET`).

`diagnose(spec)` stores the result as `diagnostics.json` inside the run's cache entry folder
(`cache_dir()/<key>/`) when the run is in the cache (complete or partial), so the app reads it
without recomputing and deleting the run deletes it. A run that has no entry (the shipped
default snapshot, never measured here) keeps its diagnostics in this process's memory: no
folder is created that `runs` could not list or `delete` remove. A stored file is trusted only
when its format, key and spec are the run's. `bos_verdict` turns the controls' gaps and the
diagnostics into one sentence.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from deffcore.core.constants import REGIME_TOLERANCE
from deffcore.core.errors import (
    DeffError,
    NonFiniteActivationsError,
    UnsupportedArchitectureError,
    fit_advice,
)
from deffcore.statistics.trust_rule import REGIME_WORDS as _REGIME_WORDS
from deffcore.statistics.trust_rule import regime_of

#: Passages in the diagnostic pass (SPEC 11: the first min(N, 64) of the run's sample).
DIAG_PASSAGES = 64
#: A state has a massive activation when its ratio exceeds this (SPEC 11.2, the onset).
MASSIVE_THRESHOLD = 100.0
#: Sun et al. (2024), "Massive Activations in Large Language Models": an activation is
#: massive when |a| > SUN_MIN_ABS and |a| >= SUN_MIN_RATIO x the median |a| (SPEC 11.2).
SUN_MIN_ABS = 100.0
SUN_MIN_RATIO = 1000.0
#: A head is a sink when its mean attention to position 0 exceeds this (SPEC 11.3).
SINK_THRESHOLD = 0.3
#: Bytes of attention probabilities (all L blocks of one batch) per diagnostic batch.
ATTENTION_BUDGET = {"cpu": 256 * 2**20, "cuda": 2 * 2**30}
#: Bytes of |h| values held at once for the exact medians; above it, layers go in groups,
#: one extra forward pass per group (e.g. 64 passages x 2,048 tokens of Gemma-3: 4 passes).
VALUES_BUDGET = 2 * 2**30
#: Name of the file inside a run's cache entry; bump the format when its content changes.
DIAG_FILE = "diagnostics.json"
DIAG_FORMAT = 2  # 2: sink scores on passages long enough to beat uniform attention

Progress = Callable[[int, int, str], None]


# ---------------------------------------------------------------------------------------------
# Reductions (pure; tested on hand-made inputs)
# ---------------------------------------------------------------------------------------------


def passage_maxima(
    hidden: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Largest |h| of each passage and where it is.

    hidden (B, T, d), mask (B, T) bool (True at real tokens, any padding side).
    Returns (value (B,) float32, position (B,) long counted from the passage's first real
    token, feature (B,) long). Padding never wins, even when it holds NaN or inf.
    """
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


def sun_massive(massive_max: Sequence[float], massive_median: Sequence[float]) -> np.ndarray:
    """(L+1,) bool: state l has a massive activation by Sun et al.'s criterion, applied to the
    typical largest activation mean_b m_b: > SUN_MIN_ABS and >= SUN_MIN_RATIO x the median."""
    top = np.asarray([np.nan if v is None else v for v in massive_max], dtype=np.float64)
    med = np.asarray([np.nan if v is None else v for v in massive_median], dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return (top > SUN_MIN_ABS) & (top >= SUN_MIN_RATIO * med)


def sun_onset(massive_max: Sequence[float], massive_median: Sequence[float]) -> int | None:
    """The first state meeting Sun et al.'s criterion (`sun_massive`), None if none does."""
    hits = np.flatnonzero(sun_massive(massive_max, massive_median))
    return int(hits[0]) if hits.size else None


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


# ---------------------------------------------------------------------------------------------
# The diagnostic pass
# ---------------------------------------------------------------------------------------------


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
    def sun_massive(self) -> np.ndarray:
        return sun_massive(self.massive_max, self.massive_median)

    @property
    def sun_onset(self) -> int | None:
        return sun_onset(self.massive_max, self.massive_median)

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
            "sun_massive": [bool(v) for v in self.sun_massive],
            "sun_onset": self.sun_onset,
            "sun_min_abs": SUN_MIN_ABS,
            "sun_min_ratio": SUN_MIN_RATIO,
            "sink_fraction": _floats(self.sink_fraction),
            "sink_scores": [_floats(row) for row in self.sink_scores],
            "sink_threshold": SINK_THRESHOLD,
            "sink_passages": int(self.sink_passages),
            "sink_baseline": _floats([self.sink_baseline])[0],
            "sink_min_length": sink_min_length(),
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
    scores: np.ndarray, out: Any, mask: torch.Tensor, arch: str, eligible: torch.Tensor
) -> np.ndarray:
    """scores (L, H) plus this batch's sums of a_{l,h} over its `eligible` (B,) bool passages
    (the model output's `attentions`, one (B, H, T, T) per block)."""
    attentions = getattr(out, "attentions", None)
    L = scores.shape[0]
    if not attentions or len(attentions) != L or attentions[0] is None:
        raise UnsupportedArchitectureError(
            f"{arch} does not return attention probabilities for all its blocks, so the sink "
            "diagnostics cannot be computed."
        )
    if attentions[0].shape[1] != scores.shape[1]:  # the config's head count was wrong
        if scores.any():
            raise UnsupportedArchitectureError(f"{arch} changed its number of heads mid-run.")
        scores = np.zeros((L, attentions[0].shape[1]), dtype=np.float64)
    keep = eligible.to(attentions[0].device)
    for layer, attn in enumerate(attentions):
        scores[layer] += sink_scores_batch(attn, mask.bool())[keep].sum(0).cpu().numpy()
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
    from deffcore.extraction.batches import keep_long_enough, tokenize

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
) -> tuple[np.ndarray, np.ndarray]:
    """The eager forward passes: sums of a_{l,h} (L, H) over the passages long enough for the
    sink test, and the (L+1,) medians of |h|; the collector keeps the rest."""
    from deffcore.extraction.batches import pad_batch
    from deffcore.extraction.forward import register_hooks
    from deffcore.inputs.architecture import base_model

    model, L = loaded.model, loaded.layers
    tok = loaded.tokenizer
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    long_enough = torch.tensor([len(s) >= sink_min_length() for s in ids])
    scores = np.zeros((L, heads), dtype=np.float64)
    medians = np.zeros(L + 1, dtype=np.float64)
    groups = _value_groups(ids, L, loaded.d_model)
    handles = register_hooks(model, collector)
    base = base_model(model)
    try:
        with eager_attention(model), torch.inference_mode():
            for g, layers in enumerate(groups):
                collector.keep, collector.first_pass = set(layers), g == 0
                for start in range(0, len(ids), batch_size):
                    batch = list(range(start, min(start + batch_size, len(ids))))
                    b_ids, b_mask, b_pos = pad_batch(
                        [ids[i] for i in batch], pad_id, "right", loaded.device
                    )
                    collector.mask, collector.slots = b_mask, batch
                    out = base(
                        input_ids=b_ids,
                        attention_mask=b_mask,
                        position_ids=b_pos,
                        use_cache=False,
                        output_attentions=g == 0,
                    )
                    if g == 0:
                        eligible = long_enough[batch]
                        scores = _add_sink_scores(
                            scores, out, b_mask, loaded.architecture, eligible
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
    return scores, medians


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
    collector = _Collector(L, len(ids))
    scores, medians = _diagnostic_passes(loaded, ids, collector, heads, batch_size, progress)
    lengths = [len(s) for s in ids if len(s) >= sink_min_length()]
    mean_max = collector.max_value.mean(0)
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


# ---------------------------------------------------------------------------------------------
# A run's diagnostics, cached in its cache entry
# ---------------------------------------------------------------------------------------------


def spec_from_fields(fields: Mapping[str, Any]) -> Any:
    """The `RunSpec` of a run described by plain fields (e.g. a snapshot's `spec`); fields a
    run did not record (`intervention`, `passages`, `bos`) take their defaults."""
    from dataclasses import fields as dc_fields

    from deffcore.inputs.run_spec import RunSpec

    names = {f.name for f in dc_fields(RunSpec)}
    return RunSpec(**{k: v for k, v in fields.items() if k in names})


def diagnostics_path(spec: Any):
    """`cache_dir()/<key>/diagnostics.json` (the folder is not created here)."""
    from deffcore.core.paths import cache_dir

    return cache_dir() / spec.key() / DIAG_FILE


#: Diagnostics of runs with no cache entry (e.g. the shipped snapshot), by (cache folder, key).
_IN_MEMORY: dict[tuple[str, str], dict[str, Any]] = {}


def _memory_key(spec: Any) -> tuple[str, str]:
    return str(diagnostics_path(spec).parent.parent), spec.key()


def _in_cache(spec: Any) -> bool:
    """Whether `spec` has a run entry (complete or partial) to keep its diagnostics in."""
    from deffcore.extraction.entries import is_run_entry

    return is_run_entry(diagnostics_path(spec).parent)


def read_diagnostics(spec: Any) -> dict[str, Any] | None:
    """The diagnostics of `spec` (from its cache entry, else from this process's memory), or
    None: absent, unreadable, of another format, or written for another run (its key or spec
    differ from `spec`'s)."""
    from dataclasses import asdict

    data: Any = None
    if _in_cache(spec):
        try:
            data = json.loads(diagnostics_path(spec).read_text())
        except (OSError, ValueError):
            data = None
    if not isinstance(data, dict):
        data = _IN_MEMORY.get(_memory_key(spec))
    mine = isinstance(data, dict) and data.get("format") == DIAG_FORMAT
    if not mine or data.get("key") != spec.key() or data.get("spec") != asdict(spec):
        return None
    return data


def _keep(spec: Any, data: dict[str, Any]) -> None:
    """Store `data` beside the run when it is in the cache (atomic, never through a link),
    else in memory."""
    from deffcore.core.files import atomic_write

    if _in_cache(spec):
        atomic_write(diagnostics_path(spec), json.dumps(data, allow_nan=False).encode())
        _IN_MEMORY.pop(_memory_key(spec), None)
    else:
        _IN_MEMORY[_memory_key(spec)] = data


def diagnose(
    spec: Any,
    *,
    device: str | None = None,
    loaded: Any = None,
    batch_size: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The diagnostics of a run (`BosDiagnostics.to_dict()` plus `key`, `spec`, `cached`).

    Read from `diagnostics.json` in the run's cache entry when present; else computed on the
    first min(N, 64) passages of the run's sample (the dataset is opened before the model
    loads; `loaded` reuses a model already in memory) and written there atomically, or kept
    in memory for a run with no cache entry. Only that one file is written: a complete
    entry's meta.json/states.npz are never touched, and no folder is ever created.
    """
    from dataclasses import asdict

    from deffcore.core.files import locked
    from deffcore.inputs.devices import resolve_device_dtype
    from deffcore.inputs.loading import load_model

    found = read_diagnostics(spec)
    if found is not None:
        if _memory_key(spec) in _IN_MEMORY and _in_cache(spec):
            _keep(spec, found)  # measured since: the diagnostics move beside the run
        return {**found, "cached": True}
    from deffcore.inputs.tokens import run_texts, run_token_ids

    texts = run_texts(spec)
    path = diagnostics_path(spec)
    lock = path.parent / ".diagnostics.lock"
    with locked(lock) if _in_cache(spec) else contextlib.nullcontext():
        found = read_diagnostics(spec)
        if found is not None:
            return {**found, "cached": True}
        start = time.perf_counter()
        if loaded is None:
            device = device or resolve_device_dtype(None, spec.dtype)[0]
            if progress is not None:
                progress(0, spec.n, f"loading {spec.model}")
            loaded = load_model(spec.model, revision=spec.revision, device=device, dtype=spec.dtype)
        ids = run_token_ids(spec, loaded.tokenizer, texts)
        with contextlib.ExitStack() as stack:
            if spec.intervention != "none":
                from deffcore.inputs.interventions import norm_intervention

                stack.enter_context(norm_intervention(loaded.model, spec.intervention))
            try:
                diag = bos_diagnostics(
                    loaded, token_ids=ids, batch_size=batch_size, progress=progress
                )
            except NonFiniteActivationsError as err:  # never "try float32" to a float32 run
                raise fit_advice(err, spec.dtype) from err
        data = {
            "format": DIAG_FORMAT,
            "key": spec.key(),
            "spec": asdict(spec),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "elapsed_s": time.perf_counter() - start,
            **diag.to_dict(),
        }
        _keep(spec, data)
    return {**data, "cached": False}


# ---------------------------------------------------------------------------------------------
# The verdict
# ---------------------------------------------------------------------------------------------


#: Without the run's structure (`bos_verdict(identical=None)`), controls whose gaps agree to
#: this many points count as one control.
IDENTICAL_GAP_POINTS = 1e-3
#: `no_pos0_identity`: the centred default and (n-1)/n times the centred no_pos0 may differ by
#: this much (relative, per state) and still be one control (float32 pooled means differ by
#: ~1e-7; a first token that varies over passages differs by far more).
IDENTICAL_REL = 1e-4


def no_pos0_identity(pooled: Any, metric: str = "cka") -> str | None:
    """Why `no_pos0` is the same control as `default` for this run, or None (SPEC 11.5).

    When every passage has the same length n and h_l[0] is one vector v_l for all passages
    (one first token id: under causal attention h_l[0] depends on it alone), each passage's
    default pooling is v_l / n + (n-1)/n times its no_pos0 pooling; centring removes v_l / n,
    so linear and unbiased CKA (invariant to scale) give exactly the same S. Checked on the
    pooled states themselves (`PooledStates`: pooled h_0..h_L and lengths):
    ||centred default - (n-1)/n centred no_pos0|| <= IDENTICAL_REL ||centred default|| at
    every state. Cosine is not translation invariant: never identical.
    """
    lengths = getattr(pooled, "lengths", None)
    if metric == "cosine" or lengths is None or len(lengths) == 0:
        return None
    lengths = np.asarray(lengths)
    if not (lengths == lengths[0]).all() or "no_pos0" not in pooled.pooled:
        return None
    n = int(lengths[0])
    for layer in range(pooled.pooled["default"].shape[0]):
        full = np.asarray(pooled.pooled["default"][layer], dtype=np.float64)
        rest = np.asarray(pooled.pooled["no_pos0"][layer], dtype=np.float64)
        full = full - full.mean(axis=0)
        rest = (rest - rest.mean(axis=0)) * (n - 1) / n
        if np.linalg.norm(full - rest) > IDENTICAL_REL * np.linalg.norm(full):
            return None
    return (
        f"every passage has {n} tokens and starts with the same token, so h_l[0] is one vector "
        "for all passages and centring removes it"
    )


def identical_controls(measurement: Any, metric: str | None = None) -> dict[str, str]:
    """{control: why it equals `default`} for this run (so far only `no_pos0`, see
    `no_pos0_identity`); empty when every control is its own."""
    reason = no_pos0_identity(measurement.pooled, metric or measurement.metric)
    return {"no_pos0": reason} if reason else {}


@dataclass
class BosVerdict:
    """What a researcher wants to know about BOS sensitivity, and one sentence saying it.

    regimes: each control's regime ("below", "at the reference", "above" F_L; SPEC 11.5, a gap
    within ±REGIME_TOLERANCE points is at the reference); regime_depends: the distinct
    controls include both signs; flipped: the controls whose sign is the opposite of
    `default`'s; at_reference: those at the reference; identical: {control: why it is
    `default` for this run}, counted once; distinct: how many controls are their own;
    gap_move: max - min gap over the controls (points). Massive activations, by the ratio
    (ours): massive_layer: the first state with a ratio > 100 *at position 0* (None: none);
    massive_onset/_position: the first state with a ratio > 100 and where its maximum sits;
    by Sun et al.'s criterion (|a| > 100 and >= 1,000x the median): sun_onset/_position
    (None also when not evaluated, see sun_evaluated). Sinks: sink_max (its layer) and
    sink_mean: share of sink heads over blocks 1..L; sink_baseline: uniform attention's
    score on the diagnosed passages; sink_passages: how many were long enough.
    """

    gaps: dict[str, float]
    default_gap: float
    regime_depends: bool
    flipped: list[str]
    gap_move: float
    regimes: dict[str, str] = field(default_factory=dict)
    at_reference: list[str] = field(default_factory=list)
    identical: dict[str, str] = field(default_factory=dict)
    distinct: int = 0
    massive_layer: int | None = None
    massive_onset: int | None = None
    massive_onset_position: int | None = None
    massive_peak: float | None = None
    sun_evaluated: bool = False
    sun_onset: int | None = None
    sun_onset_position: int | None = None
    sink_max: float | None = None
    sink_max_layer: int | None = None
    sink_mean: float | None = None
    sink_baseline: float | None = None
    sink_passages: int | None = None
    sentence: str = ""

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def _numbers(values: Sequence[Any] | None) -> np.ndarray | None:
    if values is None:
        return None
    return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)


def _guess_identical(clean: Mapping[str, float]) -> dict[str, str]:
    """Without the run's structure: no_pos0 counts as default when their gaps agree to
    IDENTICAL_GAP_POINTS (see `no_pos0_identity` for when they are exactly equal)."""
    if "no_pos0" in clean and abs(clean["no_pos0"] - clean["default"]) <= IDENTICAL_GAP_POINTS:
        return {
            "no_pos0": f"its gap equals default's to {IDENTICAL_GAP_POINTS:g} points, as when "
            "every passage has the same length and first token, which makes h_l[0] one vector "
            "that centring removes"
        }
    return {}


def _controls_part(v: BosVerdict) -> str:
    """The sentence about the pooling controls (regimes with the tolerance, identities)."""
    distinct = {p: g for p, g in v.gaps.items() if p not in v.identical}
    by = {r: [p for p in distinct if v.regimes[p] == r] for r in _REGIME_WORDS}
    default = v.regimes["default"]
    lo, hi = min(distinct.values()), max(distinct.values())
    count = f"{len(distinct)} {'distinct ' if v.identical else ''}controls"
    at = (
        f"; {_and(by['at the reference'])} {_is(by['at the reference'])} at the reference "
        f"(gap within ±{REGIME_TOLERANCE:g} point{'s' if REGIME_TOLERANCE != 1 else ''})"
        if by["at the reference"]
        else ""
    )
    if v.regime_depends and default != "at the reference":
        text = (
            f"the regime depends on the control: default gives {_REGIME_WORDS[default]} (gap "
            f"{v.default_gap:+.1f}%) but {_and(v.flipped)} {_give(v.flipped)} "
            f"{_REGIME_WORDS['above' if default == 'below' else 'below']}{at}, and the gap "
            f"moves by {v.gap_move:.1f} points across the {count}"
        )
    elif v.regime_depends:
        text = (
            f"the regime depends on the control: {_and(by['below'])} {_give(by['below'])} "
            f"D_eff < F_L but {_and(by['above'])} {_give(by['above'])} D_eff > F_L{at}, and the "
            f"gap moves by {v.gap_move:.1f} "
            f"points across the {count}"
        )
    else:
        sign = next((r for r in ("below", "above") if by[r]), None)
        gives = f"give {_REGIME_WORDS[sign]}" if sign else "are at the reference"
        every = "both" if len(distinct) == 2 else "all"
        which = f"{every} {count}" if not (sign and at) else f"{len(by[sign])} of the {count}"
        text = (
            f"the regime does not depend on the control: {which} {gives} (gaps {lo:+.1f}% to "
            f"{hi:+.1f}%, a {v.gap_move:.1f}-point move){at if sign else ''}"
        )
    for control, why in v.identical.items():
        text += f"; {control} is the same control as default here ({why}), counted once"
    return text


def _massive_part(
    v: BosVerdict,
    ratio: np.ndarray,
    position: Sequence[int],
    top: np.ndarray | None,
    median: np.ndarray | None,
    threshold: float,
) -> str:
    """The sentence about massive activations: the ratio's onset, then Sun et al.'s."""
    pos = list(position)
    v.massive_peak = float(np.nanmax(ratio))
    v.massive_onset = massive_onset(ratio, threshold)
    if v.massive_onset is not None:
        v.massive_onset_position = int(pos[v.massive_onset])
    at0 = [i for i, r in enumerate(ratio) if np.isfinite(r) and r > threshold and pos[i] == 0]
    v.massive_layer = at0[0] if at0 else None
    peak_layer = int(np.nanargmax(ratio))
    if v.massive_layer is not None:
        text = (
            f"a massive activation sits at position 0 from layer {v.massive_layer} by the ratio "
            f"(> {threshold:.0f}x the median; peak ratio {v.massive_peak:,.0f}x at layer "
            f"{peak_layer})"
        )
    elif v.massive_onset is not None:
        text = (
            f"a massive activation appears from layer {v.massive_onset}, at position "
            f"{v.massive_onset_position}, not position 0, by the ratio (> {threshold:.0f}x)"
        )
    else:
        text = (
            f"no massive activation (peak ratio {v.massive_peak:,.1f}x at layer "
            f"{peak_layer}, below {threshold:.0f}x)"
        )
    if top is None or median is None:
        return text + "; Sun et al.'s criterion needs the activations' magnitudes (not given)"
    v.sun_evaluated = True
    v.sun_onset = sun_onset(top, median)
    sun = f"Sun et al.'s criterion (|a| > {SUN_MIN_ABS:.0f} and ≥ {SUN_MIN_RATIO:,.0f}x the median)"
    if v.sun_onset is None:
        return text + f"; by {sun} no state has one"
    v.sun_onset_position = int(pos[v.sun_onset])
    return text + f"; by {sun} from layer {v.sun_onset}, at position {v.sun_onset_position}"


def _sink_part(
    v: BosVerdict, frac: np.ndarray | None, baseline: float | None, passages: int | None
) -> str:
    """The sentence about attention sinks, beside uniform attention's score."""
    v.sink_baseline, v.sink_passages = baseline, passages
    if frac is None or not len(frac):
        return "attention sinks not computed"
    if passages == 0 or np.isnan(frac).all():
        return (
            f"attention sinks not computed: no diagnosed passage has the {sink_min_length()} "
            f"tokens on which uniform attention stays below {SINK_THRESHOLD}"
        )
    v.sink_max = float(np.nanmax(frac))
    v.sink_max_layer = int(np.nanargmax(frac)) + 1
    v.sink_mean = float(np.nanmean(frac))
    uniform = "" if baseline is None else f"uniform attention would score {baseline:.2f}"
    if v.sink_max > 0:
        return (
            f"up to {100 * v.sink_max:.0f}% of a block's heads are attention sinks "
            f"(block {v.sink_max_layer}; {100 * v.sink_mean:.0f}% on average over blocks"
            f"{'; ' + uniform if uniform else ''})"
        )
    return "no head is an attention sink in any block" + (f" ({uniform})" if uniform else "")


def bos_verdict(
    gaps: Mapping[str, float],
    *,
    massive_ratio: Sequence[float] | None = None,
    massive_position: Sequence[int] | None = None,
    sink_fraction: Sequence[float] | None = None,
    threshold: float = MASSIVE_THRESHOLD,
    massive_max: Sequence[float] | None = None,
    massive_median: Sequence[float] | None = None,
    sink_baseline: float | None = None,
    sink_passages: int | None = None,
    identical: Mapping[str, str] | None = None,
) -> BosVerdict:
    """One verdict from the gap to F_L (%) of each pooling control and the diagnostics.

    gaps: {pooling: gap_pct}, `default` included; NaN gaps are left out. massive_ratio,
    massive_position, massive_max, massive_median: (L+1,) per state h_0..h_L; sink_fraction:
    (L,) per block 1..L (layer l = index + 1); sink_baseline, sink_passages: see
    `BosDiagnostics` (`verdict_inputs(diagnose(...))` gives all of these). Any may be None
    (not computed): the sentence then says so. identical: {control: why it equals default
    for this run} (`identical_controls`); None: guessed from equal gaps (`_guess_identical`).
    """
    clean = {p: float(g) for p, g in gaps.items() if g is not None and math.isfinite(g)}
    if "default" not in clean:
        raise DeffError("The verdict needs the default pooling's gap to F_L.")
    same = dict(_guess_identical(clean) if identical is None else identical)
    same = {p: why for p, why in same.items() if p in clean and p != "default"}
    regimes = {p: regime_of(g) for p, g in clean.items()}
    distinct = [p for p in clean if p not in same]
    signs = {regimes[p] for p in distinct} - {"at the reference"}
    default = regimes["default"]
    opposite = {"below": "above", "above": "below"}.get(default)
    v = BosVerdict(
        gaps=clean,
        default_gap=clean["default"],
        regime_depends=len(signs) == 2,
        flipped=[p for p in distinct if regimes[p] == opposite],
        gap_move=max(clean[p] for p in distinct) - min(clean[p] for p in distinct),
        regimes=regimes,
        at_reference=[p for p in distinct if regimes[p] == "at the reference"],
        identical=same,
        distinct=len(distinct),
    )
    parts = [_controls_part(v)]
    ratio = _numbers(massive_ratio)
    if ratio is not None and massive_position is not None:
        top, median = _numbers(massive_max), _numbers(massive_median)
        parts.append(_massive_part(v, ratio, massive_position, top, median, threshold))
    else:
        parts.append("massive activations not computed")
    parts.append(_sink_part(v, _numbers(sink_fraction), sink_baseline, sink_passages))
    sentence = "; ".join(parts) + "."
    v.sentence = sentence[0].upper() + sentence[1:]
    return v


def _and(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _is(items: Sequence[str]) -> str:
    return "is" if len(items) == 1 else "are"


def _give(items: Sequence[str]) -> str:
    return "gives" if len(items) == 1 else "give"


def verdict_inputs(diagnostics: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keyword arguments of `bos_verdict` held by a `diagnose` dict (None: not computed);
    keys an older or partial dict lacks stay None."""
    d = diagnostics or {}
    keys = ("massive_ratio", "massive_position", "massive_max", "massive_median")
    out = {k: d.get(k) for k in keys}
    out.update(
        sink_fraction=d.get("sink_fraction"),
        sink_baseline=d.get("sink_baseline"),
        sink_passages=d.get("sink_passages"),
    )
    return out


def verdict_for(
    measurement: Any,
    diagnostics: Mapping[str, Any] | None,
    metric: str | None = None,
    K: int | None = None,
) -> BosVerdict:
    """`bos_verdict` of a `Measurement` (every pooling control, maximum lag K, the controls
    identical for this run) and its `diagnose` dict (None: not computed)."""
    from deffcore.core.constants import POOLINGS

    gaps = {p: measurement.summary(p, metric, K).gap_pct for p in POOLINGS}
    return bos_verdict(
        gaps,
        identical=identical_controls(measurement, metric),
        **verdict_inputs(diagnostics),
    )


def bos_report(
    measurement: Any,
    diagnostics: Mapping[str, Any],
    metric: str | None = None,
    bootstrap: int | None = None,
) -> dict[str, Any]:
    """The `bos` command's JSON object (see `python -m deffcore bos --help`).

    Each result names the control it is identical to for this run (`identical_to`, else None);
    `trust` is the default pooling's trust (`deffcore.trust_rule.measurement_trust`, with a
    `bootstrap`-replicate interval when given).
    """
    from deffcore.core.constants import POOLINGS
    from deffcore.measures.depth import reference_depth
    from deffcore.statistics.trust_rule import measurement_trust

    metric = metric or measurement.metric
    verdict = verdict_for(measurement, diagnostics, metric)
    results = {}
    for p in POOLINGS:
        s = measurement.summary(p, metric)
        results[p] = {
            "deff": s.deff,
            "deff_over_L": s.deff_over_L,
            "gap_pct": s.gap_pct,
            "rho1": s.rho1,
            "identical_to": "default" if p in verdict.identical else None,
        }
    ratio, layer = measurement.pos0_peak()
    spec = measurement.spec
    keys = ("massive_ratio", "massive_position", "massive_dim", "massive_onset", "sun_massive")
    keys += ("sun_onset", "sink_fraction", "sink_baseline", "sink_passages", "sink_min_length")
    return {
        "model": spec.model,
        "dataset": spec.dataset,
        "n": measurement.n,
        "n_requested": spec.n,
        "max_tokens": spec.max_tokens,
        "seed": spec.seed,
        "passages": spec.passages,
        "bos": spec.bos,
        "adds_bos": (diagnostics.get("meta") or {}).get("adds_bos"),
        "metric": metric,
        "key": spec.key(),
        "layers": measurement.layers,
        "reference_FL": float(reference_depth(measurement.layers)),
        "diagnostic_passages": diagnostics["n_passages"],
        **{k: diagnostics.get(k) for k in keys},
        "pos0_norm_ratio": {
            "max": ratio,
            "layer": layer,
            "per_layer": np.asarray(measurement.pooled.pos0_norm_ratio, dtype=float).tolist(),
        },
        "results": results,
        "verdict": verdict.sentence,
        "verdict_detail": verdict.to_dict(),
        "trust": measurement_trust(measurement, "default", metric, bootstrap=bootstrap).to_dict(),
        "cached": {"run": bool(measurement.cached), "diagnostics": bool(diagnostics["cached"])},
    }
