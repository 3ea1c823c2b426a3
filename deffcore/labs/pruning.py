"""Pruning boundary check (paper Tables S16-S18): is D_eff a per-layer importance signal?

Two rankings of the L blocks are compared as guides for skipping blocks:

- **Block Influence** (ShortGPT): `BI_l = 1 - mean over tokens of cos(h_{l-1}, h_l)`, with
  h_{l-1} the block's input and h_l its output, per token.
- **Local Delta D_eff**: `dD_l = D_eff(S) - D_eff(S without row and column l)`, S the L x L
  similarity matrix of the measured passages (`default` pooling).

For each ranking the k lowest-ranked blocks (k in {0, 1, 2, 4, 6, 8}, those < L) are skipped
(a skipped block passes its input through unchanged) and perplexity is measured on held-out
passages, disjoint from the measured ones. `k_1.10` is the largest k with
`PPL_k <= 1.10 PPL_0` and `f_1.10 = k_1.10 / L`. The Spearman correlation between BI and dD
says whether the two rankings agree.

Decisions (SPEC section 9 leaves these open):
- "Mean over tokens" pools every non-padding token of every measured passage (BOS included),
  token-weighted; the cosine is computed in float32 (from h_{l-1} and u_l = h_l - h_{l-1}),
  each passage's mean in float64. It is the depth-use atlas's arithmetic (one function for
  both, `deffcore.extraction.atlas`), taken during the check's own extraction of its measured
  passages (no separate pass); the atlas shows it as `block_influence_tokens` beside its
  passage-weighted BI.
- Low rank = skipped first: the smallest BI (the block changes its input least) and the
  smallest dD (leaving the layer out lowers D_eff least, or raises it). Ties break by index.
- Perplexity = exp(total NLL / number of predicted tokens) over all held-out passages, each
  truncated to `max_tokens`; every token after the first is predicted (a BOS is never a
  target). It is computed from the model's own logits (so soft-capping etc. is included).
- Held-out passages: the next passages of the same seeded sample
  (`load_passages(dataset, n + n_heldout, seed)`), with any text equal to a measured passage
  removed, so the two sets never share a passage.
- `k_1.10` is the largest qualifying k even if a smaller k did not qualify: Table S17 defines
  it as "the largest k in {0,1,2,4,6,8} at which PPL_k <= 1.10 PPL_0", a condition on each k
  alone. Beside it `k_110_contiguous` is the largest k up to which *every* k qualifies (the
  two differ only on a non-monotone perplexity curve, flagged by `k_110_monotone = False`).
- Results are stored (`deffcore.labs.store`, `cache_dir()/labs/pruning/<key>.json`, keyed by
  the model and its weights id, the dataset and its content id, n, n_heldout, max_tokens, seed,
  the skip counts, metric, device kind and dtype): a repeated check is read back, and the
  correlation lab reads every stored check as the per-model pruning tolerance.
- Skipping uses forward hooks that replace the block's output by its input; the block still
  runs (its result is discarded), which keeps every architecture's output structure intact.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from deffcore.core.errors import DeffError, InvalidStatesError, TooFewPassagesError
from deffcore.extraction.atlas import AtlasTap
from deffcore.extraction.forward import extract_pooled
from deffcore.inputs.architecture import architecture_of
from deffcore.inputs.model import model_identity, model_size
from deffcore.inputs.texts import dataset_identity, load_passages, tokenize
from deffcore.labs import store as lab_store
from deffcore.measures.atlas import token_weighted_bi
from deffcore.measures.depth import effective_depth, gap_percent
from deffcore.measures.similarity import similarity_matrix
from deffcore.runs.action_costs import forward_cost

#: The skip counts of the paper's Table S16.
SKIP_COUNTS: tuple[int, ...] = (0, 1, 2, 4, 6, 8)
#: The two rankings, as named in results.
RANKINGS: tuple[str, ...] = ("bi", "local_deff")
RANKING_LABELS: dict[str, str] = {"bi": "Block Influence", "local_deff": "local ΔD_eff"}
PPL_TOLERANCE = 1.10

ProgressFn = Callable[[int, int, str], None]


# ----------------------------------------------------------------------------------------------
# Pure parts: local Delta D_eff, rankings, k_1.10


def local_delta_deff(S: np.ndarray) -> np.ndarray:
    """S (L, L) -> dD (L,): `D_eff(S) - D_eff(S with row and column l removed)`."""
    S = np.asarray(S, dtype=np.float64)
    L = S.shape[0]
    if S.ndim != 2 or S.shape[1] != L or L < 3:
        raise InvalidStatesError(
            f"Local Delta D_eff needs a square similarity matrix with at least 3 layers; "
            f"got shape {S.shape}."
        )
    full = effective_depth(S)
    out = np.empty(L)
    for layer in range(L):
        keep = np.delete(np.arange(L), layer)
        out[layer] = full - effective_depth(S[np.ix_(keep, keep)])
    return out


def rank_lowest_first(scores: Sequence[float]) -> list[int]:
    """Block indices (0-based) from lowest score to highest; ties by index."""
    scores = np.asarray(scores, dtype=np.float64)
    return [int(i) for i in np.lexsort((np.arange(len(scores)), scores))]


def skip_counts(L: int, ks: Sequence[int] = SKIP_COUNTS) -> list[int]:
    """The k of `ks` that leave at least one block (k < L), sorted, always including 0."""
    return sorted({0, *(int(k) for k in ks if 0 <= int(k) < L)})


def _qualifies(ppl: dict[int, float], tolerance: float) -> dict[int, bool]:
    if 0 not in ppl:
        raise DeffError("k_1.10 needs the baseline perplexity at k = 0.")
    return {k: math.isfinite(p) and p <= tolerance * ppl[0] for k, p in ppl.items()}


def k_tolerance(ppl: dict[int, float], tolerance: float = PPL_TOLERANCE) -> int:
    """The largest k with `ppl[k] <= tolerance * ppl[0]` (0 if none; ppl must contain k = 0).

    Each k is judged alone (Table S17's wording): a k can count after a smaller one failed.
    """
    ok = [k for k, good in _qualifies(ppl, tolerance).items() if good]
    return max(ok) if ok else 0


def k_tolerance_contiguous(ppl: dict[int, float], tolerance: float = PPL_TOLERANCE) -> int:
    """The largest k such that every k' <= k of `ppl` has `ppl[k'] <= tolerance * ppl[0]`."""
    best = 0
    for k, good in sorted(_qualifies(ppl, tolerance).items()):
        if not good:
            break
        best = k
    return best


# ----------------------------------------------------------------------------------------------
# Forward-pass parts: skipping blocks, Block Influence, perplexity


@contextlib.contextmanager
def skip_blocks(model: nn.Module, indices: Sequence[int]) -> Iterator[nn.Module]:
    """Inside the `with`, the blocks at `indices` (0-based) return their input unchanged."""
    arch = architecture_of(model)
    layers = arch.blocks
    bad = [i for i in indices if not 0 <= i < len(layers)]
    if bad:
        raise DeffError(
            f"Block indices {bad} are out of range for a model with {len(layers)} blocks."
        )

    def passthrough(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        return arch.replace_output(output, arch.block_input(args, kwargs))

    handles = [layers[i].register_forward_hook(passthrough, with_kwargs=True) for i in indices]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


def _token_batches(
    tokenizer: Any, passages: Sequence[str], max_tokens: int, batch_size: int, device: Any
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(input_ids (B, T), attention_mask (B, T)) per batch, tokenised exactly as extraction does.

    Right padding with id 0 (masked), so tokenizers without a pad token work.
    """
    rows, _ = tokenize(tokenizer, list(passages), max_tokens)
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        width = max(len(r) for r in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for i, r in enumerate(batch):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = 1
        yield ids.to(device), mask.to(device)


def _device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def block_influence(
    model: nn.Module,
    tokenizer: Any,
    passages: Sequence[str],
    *,
    max_tokens: int = 128,
    batch_size: int = 8,
) -> np.ndarray:
    """BI (L,): 1 - token-weighted mean cos(block input, block output) over non-padding tokens.

    The depth-use atlas's arithmetic (`deffcore.extraction.atlas.AtlasTap` on the
    extraction's own hooks, `deffcore.measures.atlas.token_weighted_bi`): the atlas shows this
    same number beside its passage-weighted BI."""
    from deffcore.extraction.forward import register_hooks  # patched by the pipeline tests

    n = len(tokenize(tokenizer, list(passages), max_tokens)[0])
    tap = AtlasTap(split=False)
    arch = architecture_of(model)
    handles = tap.attach(model, n) + register_hooks(arch, tap)
    lengths: list[int] = []
    try:
        for ids, mask in _token_batches(
            tokenizer, passages, max_tokens, batch_size, _device_of(model)
        ):
            tap.begin(mask)
            arch.forward(ids, mask, (mask.cumsum(1) - 1).clamp_min(0))
            tap.end(list(range(len(lengths), len(lengths) + ids.shape[0])))
            lengths += mask.sum(1).tolist()
    finally:
        for handle in handles:
            handle.remove()
    rows = tap.rows(lengths)
    if rows is None:
        raise TooFewPassagesError("No passage has the 2 tokens Block Influence needs.")
    return token_weighted_bi(rows)


@torch.no_grad()
def perplexity(
    model: nn.Module,
    tokenizer: Any,
    passages: Sequence[str],
    *,
    max_tokens: int = 128,
    batch_size: int | None = None,
    skip: Sequence[int] = (),
) -> dict[str, float]:
    """exp(mean NLL) over every predicted token of `passages`, with blocks `skip` skipped.

    Returns {"ppl", "nll", "tokens"}. batch_size None: as many passages as keep the float32
    logits (B, T, vocab) under ~256 MB.
    """
    vocab = int(model.get_output_embeddings().weight.shape[0])
    if batch_size is None:
        batch_size = max(1, int(64e6 // (max_tokens * vocab)))
    total, tokens = 0.0, 0
    with skip_blocks(model, list(skip)):
        for ids, mask in _token_batches(
            tokenizer, passages, max_tokens, batch_size, _device_of(model)
        ):
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            target = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
            nll = F.cross_entropy(
                logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                target.reshape(-1),
                ignore_index=-100,
                reduction="sum",
            )
            total += float(nll)
            tokens += int((target != -100).sum())
    if tokens == 0:
        raise TooFewPassagesError("The held-out passages have no token to predict (all too short).")
    return {"ppl": math.exp(total / tokens), "nll": total / tokens, "tokens": tokens}


# ----------------------------------------------------------------------------------------------
# The lab


@dataclass
class PruningResult:
    """Everything of one boundary check; `ppl[ranking][k]` is the perplexity after skipping k."""

    model: str
    layers: int
    n: int
    n_heldout: int
    deff: float
    bi: list[float]
    local_deff: list[float]
    order: dict[str, list[int]]
    ks: list[int]
    ppl: dict[str, dict[int, float]] = field(default_factory=dict)
    heldout_tokens: int = 0
    spearman: float = float("nan")
    spearman_p: float = float("nan")
    dataset: str = "bbc-news"
    max_tokens: int = 128
    seed: int = 0
    #: True when the result was read back from the lab store instead of computed
    cached: bool = False

    @property
    def ppl0(self) -> float:
        return self.ppl[RANKINGS[0]][0]

    def k_1_10(self, ranking: str = "bi") -> int:
        return k_tolerance(self.ppl[ranking])

    def to_dict(self) -> dict[str, Any]:
        """The CLI's JSON: the two rankings' curves (`ppl`, `k_1.10`, `f_1.10` per ranking) and
        the pruning tolerance of Table S17 by BI (`ppl0`, `ppl_k`, `k_110`, `f_110`)."""
        L = self.layers
        bi = self.ppl.get("bi", {})
        k110 = self.k_1_10("bi") if bi else 0
        contiguous = k_tolerance_contiguous(bi) if bi else 0
        return {
            "lab": "pruning",
            "model": self.model,
            "dataset": self.dataset,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "layers": L,
            "n": self.n,
            "n_heldout": self.n_heldout,
            "heldout_tokens": self.heldout_tokens,
            "deff": self.deff,
            "deff_over_L": self.deff / L,
            "gap_pct": gap_percent(self.deff, L),
            "ppl0": self.ppl0,
            "block_influence": self.bi,
            "local_delta_deff": self.local_deff,
            "skip_order": self.order,
            "ks": self.ks,
            "ppl": {r: {str(k): v for k, v in p.items()} for r, p in self.ppl.items()},
            "k_1.10": {r: self.k_1_10(r) for r in self.ppl},
            "f_1.10": {r: self.k_1_10(r) / L for r in self.ppl},
            "spearman_bi_vs_local_deff": self.spearman,
            "spearman_p": self.spearman_p,
            "ppl_k": {str(k): v for k, v in bi.items()},
            "k_110": k110,
            "f_110": k110 / L,
            "k_110_contiguous": contiguous,
            "k_110_monotone": contiguous == k110,
            "cached": self.cached,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PruningResult:
        """The inverse of `to_dict` (for stored results)."""
        return cls(
            model=d["model"],
            layers=int(d["layers"]),
            n=int(d["n"]),
            n_heldout=int(d["n_heldout"]),
            deff=float(d["deff"]),
            bi=[float(x) for x in d["block_influence"]],
            local_deff=[float(x) for x in d["local_delta_deff"]],
            order={r: [int(i) for i in v] for r, v in d["skip_order"].items()},
            ks=[int(k) for k in d["ks"]],
            ppl={r: {int(k): _num(v) for k, v in p.items()} for r, p in d["ppl"].items()},
            heldout_tokens=int(d["heldout_tokens"]),
            spearman=_num(d["spearman_bi_vs_local_deff"]),
            spearman_p=_num(d["spearman_p"]),
            dataset=d.get("dataset", "bbc-news"),
            max_tokens=int(d.get("max_tokens", 128)),
            seed=int(d.get("seed", 0)),
        )


def _num(v: Any) -> float:
    return float("nan") if v is None else float(v)


def heldout_passages(
    dataset: str, measured: Sequence[str], n_heldout: int, *, seed: int = 0
) -> list[str]:
    """`n_heldout` passages from the same seeded sample, none equal to a measured passage."""
    seen = set(measured)
    pool = load_passages(dataset, len(measured) + n_heldout, seed=seed)
    held = [p for p in pool[len(measured) :] if p not in seen]
    if len(held) < n_heldout:
        held += [p for p in pool[: len(measured)] if p not in seen and p not in held]
    if len(held) < n_heldout:
        raise TooFewPassagesError(
            f"The dataset {dataset!r} has too few passages for {len(measured)} measured plus "
            f"{n_heldout} held-out ones that do not overlap."
        )
    return held[:n_heldout]


@dataclass(frozen=True)
class PruningSetup:
    """What one boundary check measures: `model`'s blocks ranked on `n` passages of `dataset`
    and skipped `ks` at a time on `n_heldout` others (`max_tokens` each, sampled with `seed`),
    the similarity under `metric`."""

    model: str
    dataset: str
    n: int
    n_heldout: int
    max_tokens: int
    seed: int
    ks: tuple[int, ...]
    metric: str

    def identity(
        self, *, revision: str | None, device: str, dtype: str, weights_id: str | None = None
    ) -> dict[str, Any]:
        """The plain values that determine the check on this device and dtype (its key in the
        lab store); `weights_id` when the loaded model's is known, else the model's own."""
        return {
            "model": self.model,
            "revision": revision,
            "weights_id": weights_id or model_identity(self.model, revision)["weights_id"],
            "dataset": self.dataset,
            "dataset_id": dataset_identity(self.dataset)["content_id"],
            "n": int(self.n),
            "n_heldout": int(self.n_heldout),
            "max_tokens": int(self.max_tokens),
            "seed": int(self.seed),
            "ks": sorted({int(k) for k in self.ks}),
            "metric": self.metric,
            "device": str(device).split(":")[0],  # cuda:0 and cuda:1 compute the same
            "dtype": dtype,
        }


def pruning_cost(
    model: str,
    *,
    n: int,
    n_heldout: int,
    max_tokens: int,
    device: str,
    revision: str | None = None,
    ks: Sequence[int] = SKIP_COUNTS,
) -> Any:
    """What `pruning_check` will take here (`action_costs.Cost`), before it starts: the
    measured passages twice (the pooled states, then Block Influence) and the held-out
    passages once per (ranking, k) but one (k = 0 is shared), each with the LM head (its
    vocab x d multiply-adds per token beside the blocks'; skipped blocks are not discounted:
    an upper bound)."""
    size = model_size(model, revision)
    layers = size.layers if size is not None else max(ks) + 1
    evals = len(RANKINGS) * len(skip_counts(layers, ks)) - 1
    head = 1.0 + (size.vocab * size.d_model / size.block_params if size else 0.0)
    tokens = int((2 * n + head * evals * n_heldout) * max_tokens)
    return forward_cost(model, tokens, device, revision=revision, max_tokens=max_tokens)


def pruning_check(
    model: str = "smollm2-135m",
    dataset: str = "bbc-news",
    *,
    n: int = 64,
    n_heldout: int = 32,
    max_tokens: int = 128,
    seed: int = 0,
    ks: Sequence[int] = SKIP_COUNTS,
    metric: str = "cka",
    revision: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    loaded: Any = None,
    progress: ProgressFn | None = None,
    store: bool = True,
) -> PruningResult:
    """BI and local dD rankings on `n` measured passages, PPL on `n_heldout` disjoint ones.

    `loaded`: an already loaded `LoadedModel` (the app keeps one); else `model` is loaded.
    `store`: read a stored result of the same identity instead of computing, and store a
    computed one (`deffcore.labs.store`, lab "pruning").
    """
    from deffcore.inputs.model import lease_or_given, resolve_device_dtype  # patched in tests

    if loaded is not None:
        device, dtype, weights_id = loaded.device, loaded.dtype, loaded.weights_id
    else:
        device, dtype = resolve_device_dtype(device, dtype)
        weights_id = None
    setup = PruningSetup(model, dataset, n, n_heldout, max_tokens, seed, tuple(ks), metric)
    identity = setup.identity(revision=revision, device=device, dtype=dtype, weights_id=weights_id)
    if store:
        found = lab_store.read_result("pruning", identity)
        if found is not None:
            result = PruningResult.from_dict(found)
            result.cached = True
            return result
    with lease_or_given(loaded, model, revision=revision, device=device, dtype=dtype,
                        progress=progress, total=1) as loaded:  # fmt: skip
        result = _compute(loaded, setup, progress)
    if store:
        lab_store.write_result("pruning", identity, result.to_dict())
    return result


def _compute(loaded: Any, setup: PruningSetup, progress: ProgressFn | None) -> PruningResult:
    """The check itself on a loaded model (see `pruning_check`)."""
    from scipy.stats import spearmanr

    report = progress or (lambda done, total, stage: None)
    s, L = setup, loaded.layers
    if L < 3:
        raise InvalidStatesError(f"The pruning check needs at least 3 blocks; {s.model} has {L}.")
    measured = load_passages(s.dataset, s.n, seed=s.seed)
    held = heldout_passages(s.dataset, measured, s.n_heldout, seed=s.seed)
    ks = skip_counts(L, s.ks)
    total = 2 + 2 * len(ks)

    report(0, total, "measuring D_eff")
    tap = AtlasTap(split=False)  # BI from the same extraction: one forward pass, not two
    pooled = extract_pooled(loaded, measured, max_tokens=s.max_tokens, taps=[tap])
    states = pooled.pooled["default"][1:]  # h_1 .. h_L
    S = similarity_matrix(states, s.metric)
    local = local_delta_deff(S)
    report(1, total, "block influence")
    bi = token_weighted_bi(tap.rows(pooled.lengths))
    order = {"bi": rank_lowest_first(bi), "local_deff": rank_lowest_first(local)}
    rho, p = spearmanr(bi, local)

    result = PruningResult(
        model=s.model,
        layers=L,
        n=len(measured),
        n_heldout=len(held),
        deff=effective_depth(S),
        bi=[float(x) for x in bi],
        local_deff=[float(x) for x in local],
        order=order,
        ks=ks,
        spearman=float(rho),
        spearman_p=float(p),
        dataset=s.dataset,
        max_tokens=s.max_tokens,
        seed=s.seed,
    )
    done = 2
    for ranking in RANKINGS:
        result.ppl[ranking] = {}
        for k in ks:
            report(done, total, f"perplexity, {RANKING_LABELS[ranking]}, k={k}")
            if k == 0 and ranking != RANKINGS[0]:
                result.ppl[ranking][0] = result.ppl[RANKINGS[0]][0]  # same model, same text
            else:
                out = perplexity(
                    loaded.model,
                    loaded.tokenizer,
                    held,
                    max_tokens=s.max_tokens,
                    skip=order[ranking][:k],
                )
                result.ppl[ranking][k] = out["ppl"]
                result.heldout_tokens = out["tokens"]
            done += 1
    report(total, total, "done")
    return result
