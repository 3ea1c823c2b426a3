"""Passage bootstrap of D_eff/L (SPEC section 8): resample passages with replacement B times.

A replicate draws N passage indices with replacement; only the multiplicities w (N,)
(sum w = N) matter. Instead of rebuilding each resampled (L, N, d) stack, the "gram" method
streams the Gram matrices once and serves all B replicates from each strip. With X_l
centred once (unweighted), G_l = X_l X_l^T, and the replicate's weighted mean
mu_l = X_l^T w / N, the resampled stack's centred rows are x_{l,a} - mu_l, and

    <K_i, K_j>_w = A_ij - 2 N E_ij + N^2 c_i c_j
    A_ij = sum_{a,b} w_a w_b G_i[a,b] G_j[a,b]       (= ||X_i^T W X_j||_F^2)
    E_ij = sum_a w_a g_i[a] g_j[a],  g_l = X_l mu_l,  c_l = |mu_l|^2

which is exactly <K_i, K_j> of the resampled stack (the expansion of
||X_i^T W X_j - N mu_i mu_j^T||_F^2). Only A is expensive. For a strip of Gram entries
(rows a, columns b, every layer) and each layer i, the products Q[j, a, b] = G_i G_j for
j >= i (L(L+1)/2 layer pairs in all) form one ((L - i) rows, cols) @ (cols, B) float64
product with the replicates' weights w_b, then a weighted sum over the rows w_a: fat
matrix products, so the per-replicate cost is L(L+1)/2 * N^2/2 multiply-adds instead of
L d N^2/2 + L^2 N^2/2 for recomputing. Memory is bounded: one centred copy of the states,
one strip and its float64 chunks (the same budget as `similarity_matrix`), never the L N^2
Gram matrices.
Everything after the float32 strip is float64 (float32 products are exact there).
Unbiased CKA uses the resampled rows' squared norms |x|^2 - 2 g + c with the weights (see
`unbiased_hsic_matrix`); cosine sums the per-passage cosines with the weights, one passage
block at a time.

Decision: "auto" picks "gram" unless the cost model (`bootstrap_costs`) says recomputing
is cheaper, which happens when d is small against L (the feature route's N d^2 L^2 / 2 per
replicate then undercuts the gram method's L(L+1)/2 N^2 / 2, counted four times);
both give the same numbers.

Intervals: `low, high` is the percentile interval SPEC asks for. Resampling with replacement
leaves ~0.63 N distinct passages, and CKA's finite-sample bias (about d/(N+d)) grows as the
distinct count falls, so at small N every replicate's D_eff/L is shifted down and the
percentile interval can exclude the point estimate. `basic_low, basic_high` is the basic
(reverse-percentile) interval [2 point - q_hi, 2 point - q_lo]: it treats the replicates'
shift as an estimate of the estimator's own finite-N bias and corrects for it, so it moves
towards the large-N value. Both are reported, and `bias = mean - point` says how large the
shift is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from deffcore.constants import METRICS
from deffcore.depth import effective_depth
from deffcore.errors import DeffError
from deffcore.similarity import (
    CONTRACT_ELEMENTS,
    DEFAULT_BLOCK_ELEMENTS,
    _as_tensor,
    _centred,
    _gram_rows,
    _layer_norms,
    _mirror_upper,
    _normalise,
    _unit_rows,
    _validated,
    route_costs,
    similarity_matrix,
    unbiased_hsic_matrix,
)

METHODS = ("auto", "gram", "recompute")


@dataclass
class BootstrapResult:
    """Point estimate, bootstrap mean, percentile CI and the B replicate values of D_eff/L."""

    point: float
    mean: float
    low: float
    high: float
    samples: np.ndarray = field(repr=False)
    B: int = 100
    ci: float = 0.95

    @property
    def bias(self) -> float:
        """Bootstrap estimate of the estimator's bias: mean of the replicates - point."""
        return self.mean - self.point

    @property
    def basic_low(self) -> float:
        """Lower end of the basic (bias-corrected, reverse-percentile) interval."""
        return 2.0 * self.point - self.high

    @property
    def basic_high(self) -> float:
        """Upper end of the basic (bias-corrected, reverse-percentile) interval."""
        return 2.0 * self.point - self.low

    def to_dict(self) -> dict[str, Any]:
        return {
            "point": self.point,
            "mean": self.mean,
            "low": self.low,
            "high": self.high,
            "bias": self.bias,
            "basic_low": self.basic_low,
            "basic_high": self.basic_high,
            "B": self.B,
            "ci": self.ci,
            "samples": self.samples.tolist(),
        }


def resample_indices(n: int, B: int, seed: int = 0) -> np.ndarray:
    """(B, n) passage indices drawn with replacement; the same seed gives the same draws."""
    return np.random.default_rng(seed).integers(0, n, size=(B, n))


def bootstrap_costs(n: int, d: int, n_layers: int, B: int) -> dict[str, float]:
    """Multiply-adds of the two methods for B replicates (the model `method="auto"` uses).

    "gram": the float32 strips once (L d N^2 / 2) plus, per replicate, L(L+1)/2 * N^2 / 2
    float64 multiply-adds, counted four times: float64 runs below the float32 rate and the
    elementwise products Q are memory-bound (measured: at N=10,000, d=128, L=8, B=100 the
    gram method was 2.8x slower than recomputing on the feature route).
    "recompute": one `similarity_matrix` per replicate, on its cheaper route.
    """
    pairs = n_layers * (n_layers + 1) / 2
    gram = n_layers * d * n * n / 2 + 4.0 * B * pairs * n * n / 2
    recompute = B * min(route_costs(n, d, n_layers).values())
    return {"gram": float(gram), "recompute": float(recompute)}


def _counts(indices: np.ndarray, n: int, device: torch.device) -> torch.Tensor:
    """(B, N) indices -> (B, N) float64 multiplicities w (each row sums to N)."""
    counts = np.stack([np.bincount(idx, minlength=n) for idx in indices])
    return torch.from_numpy(counts.astype(np.float64)).to(device)


def _weighted_gram_sums(xc: torch.Tensor, w: torch.Tensor, budget: int) -> torch.Tensor:
    """Centred (L, N, d), weights (B, N) -> A (B, L, L) float64, A[r, i, j] = w_r' (G_i o G_j) w_r.

    Streams the upper triangle of the Gram matrices in strips of rows a (as the Gram route
    of `similarity_matrix`: the square part once, the rest twice). Within a strip, for each
    float64 chunk of columns b and each layer i, Q = G_i[a, b] * G_j[a, b] for all j >= i
    and Z_i += Q @ w[:, b]^T (one product over the columns, accumulated over the strip's
    chunks); at the end of the strip A[:, i, j] += sum_a w_a Z_i[j, a]. Few, large calls:
    each call costs a thread synchronisation, which dominates on a loaded machine.
    """
    n_layers, n, _ = xc.shape
    n_rep = w.shape[0]
    dev = xc.device
    f64 = torch.float64
    n_pairs = n_layers * (n_layers + 1) // 2
    rows = _gram_rows(n, n_layers, budget)
    rows = max(1, min(rows, budget // max(1, n_pairs * n_rep)))  # Z is (pairs, rows, B)
    cols = max(1, min(budget, CONTRACT_ELEMENTS) // max(1, n_layers * rows))
    wt = w.T.contiguous()  # (N, B)
    acc = torch.zeros(n_pairs, n_rep, dtype=f64, device=dev)  # row-major upper triangle
    starts = [i * n_layers - i * (i - 1) // 2 for i in range(n_layers)]  # pair offset of (i, i)
    strip_buf = torch.empty(n_layers * rows * n, dtype=xc.dtype, device=dev)
    chunk_buf = torch.empty(n_layers * rows * cols, dtype=f64, device=dev)
    q_buf = torch.empty(n_layers * rows * cols, dtype=f64, device=dev)
    z_buf = torch.empty(n_pairs * rows * n_rep, dtype=f64, device=dev)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        b, width = r1 - r0, n - r0
        strip = strip_buf[: n_layers * b * width].view(n_layers, b, width)
        torch.bmm(xc[:, r0:r1], xc[:, r0:].transpose(1, 2), out=strip)
        z = z_buf[: n_pairs * b * n_rep].view(n_pairs, b, n_rep)
        z.zero_()
        for lo, hi, weight in ((0, b, 1.0), (b, width, 2.0)):
            for c0 in range(lo, hi, cols):
                c1 = min(hi, c0 + cols)
                c = c1 - c0
                chunk = chunk_buf[: n_layers * b * c].view(n_layers, b, c)
                chunk.copy_(strip[:, :, c0:c1])
                wb = wt[r0 + c0 : r0 + c1]  # (c, B)
                for i in range(n_layers):
                    k = n_layers - i
                    q = q_buf[: k * b * c].view(k, b, c)
                    torch.mul(chunk[i], chunk[i:], out=q)
                    zi = z[starts[i] : starts[i] + k].view(k * b, n_rep)
                    zi.addmm_(q.view(k * b, c), wb, alpha=weight)
        acc += z.mul_(wt[r0:r1]).sum(dim=1)  # the rows' weights w_a
    a = torch.zeros(n_rep, n_layers, n_layers, dtype=f64, device=dev)
    iu = torch.triu_indices(n_layers, n_layers, device=dev)
    a[:, iu[0], iu[1]] = acc.T
    return torch.stack([_mirror_upper(m) for m in a])


def _gram_replicates(
    x: torch.Tensor, indices: np.ndarray, metric: str, block_size: int | None = None
) -> list[np.ndarray]:
    xc = _centred(x)  # (L, N, d), centred with the unweighted mean
    n_layers, n, _ = xc.shape
    budget = block_size if block_size is not None else DEFAULT_BLOCK_ELEMENTS
    w = _counts(indices, n, x.device)  # (B, N)
    a = _weighted_gram_sums(xc, w, budget)  # (B, L, L)
    out = []
    # the cheap centring terms, a chunk of replicates at a time: g is (B_c, L, N) float64
    per = max(1, budget // max(1, n_layers * n))
    for r0 in range(0, w.shape[0], per):
        wc = w[r0 : r0 + per]  # (B_c, N)
        g = torch.empty(wc.shape[0], n_layers, n, dtype=torch.float64, device=x.device)
        c = torch.empty(wc.shape[0], n_layers, dtype=torch.float64, device=x.device)
        sq = torch.empty(n_layers, n, dtype=torch.float64, device=x.device)
        for layer in range(n_layers):
            xl = xc[layer].to(torch.float64)  # (N, d)
            mu = wc @ xl / n  # (B_c, d) weighted means
            g[:, layer] = mu @ xl.T
            c[:, layer] = mu.pow(2).sum(dim=1)
            sq[layer] = xl.pow(2).sum(dim=1)
        e = torch.bmm(g * wc[:, None, :], g.transpose(1, 2))  # (B_c, L, L)
        m = a[r0 : r0 + per] - 2.0 * n * e + n * n * c[:, :, None] * c[:, None, :]
        for k in range(wc.shape[0]):
            mk = _mirror_upper(m[k])
            if metric == "cka":
                out.append(_normalise(mk, "CKA"))
            else:
                rows = sq - 2.0 * g[k] + c[k][:, None]  # (L, N) resampled squared row norms
                out.append(
                    _normalise(unbiased_hsic_matrix(mk, rows, n, weights=wc[k]), "unbiased CKA")
                )
    return out


def _cosine_replicates(
    x: torch.Tensor, indices: np.ndarray, block_size: int | None = None
) -> list[np.ndarray]:
    """Replicate r: sum_a w_a cos_ij(a) / N, the per-passage cosines a passage block at a time."""
    n_layers, n, d = x.shape
    norms = _layer_norms(x)  # raises on a zero vector, as `similarity_matrix` does
    w = _counts(indices, n, x.device)  # (B, N)
    budget = block_size if block_size is not None else DEFAULT_BLOCK_ELEMENTS
    rows = max(1, min(n, budget // max(1, n_layers * (d + n_layers))))
    total = torch.zeros(w.shape[0], n_layers * n_layers, dtype=torch.float64, device=x.device)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        unit = _unit_rows(x, norms, r0, r1).transpose(0, 1)  # (b, L, d)
        per_passage = torch.bmm(unit, unit.transpose(1, 2)).reshape(r1 - r0, -1)  # (b, L*L)
        total.addmm_(w[:, r0:r1], per_passage)
    out = []
    for s in total.view(-1, n_layers, n_layers) / n:
        s = _mirror_upper(s)
        s.fill_diagonal_(1.0)
        out.append(s.cpu().numpy())
    return out


def bootstrap_similarities(
    states: Any,
    indices: np.ndarray,
    metric: str = "cka",
    method: str = "auto",
    *,
    block_size: int | None = None,
) -> list[np.ndarray]:
    """One (L, L) similarity matrix per row of `indices` (B, N): the resampled stacks.

    block_size bounds the elements of one streamed block, as in `similarity_matrix`.
    """
    if metric not in METRICS:
        raise DeffError(
            f"Unknown similarity metric {metric!r}; choose one of {', '.join(METRICS)}."
        )
    if method not in METHODS:
        raise DeffError(f"Unknown bootstrap method {method!r}; choose one of {', '.join(METHODS)}.")
    x = _validated(states, min_passages=4 if metric == "unbiased_cka" else 2)
    if not x.is_floating_point():
        x = x.to(torch.float64)
    n_layers, n, d = x.shape
    if method == "auto" and metric != "cosine":
        costs = bootstrap_costs(n, d, n_layers, len(indices))
        method = "gram" if costs["gram"] <= costs["recompute"] else "recompute"
    if method == "recompute":
        return [
            similarity_matrix(x[:, torch.from_numpy(idx)], metric, block_size=block_size)
            for idx in indices
        ]
    if block_size is not None and block_size < 1:
        raise DeffError(f"block_size must be a positive number of elements, not {block_size}.")
    if metric == "cosine":
        return _cosine_replicates(x, indices, block_size)
    return _gram_replicates(x, indices, metric, block_size)


def bootstrap_deff_over_L(
    states: Any,
    *,
    B: int = 100,
    seed: int = 0,
    metric: str = "cka",
    ci: float = 0.95,
    K: int | None = None,
    method: str = "auto",
) -> BootstrapResult:
    """Passage bootstrap of D_eff/L. states (L, N, d) -> BootstrapResult (percentile CI).

    K: maximum lag (default L-1). method: "auto", "gram" (all replicates from one streamed
    pass over the Gram matrices, see the module docstring) or "recompute" (resample the
    stack and call `similarity_matrix`); both give the same numbers.
    """
    if isinstance(B, bool) or not isinstance(B, int) or B < 2:
        raise DeffError(f"The number of bootstrap replicates B must be an integer >= 2; got {B!r}.")
    if not 0 < ci < 1:
        raise DeffError(f"The confidence level must lie strictly between 0 and 1; got {ci}.")
    x = _as_tensor(states)
    n_layers = x.shape[0] if x.ndim == 3 else 0
    point = effective_depth(similarity_matrix(x, metric), K) / n_layers
    indices = resample_indices(x.shape[1], B, seed)
    mats = bootstrap_similarities(x, indices, metric, method)
    samples = np.array([effective_depth(s, K) / n_layers for s in mats])
    alpha = (1.0 - ci) / 2.0
    return BootstrapResult(
        point=point,
        mean=float(samples.mean()),
        low=float(np.quantile(samples, alpha)),
        high=float(np.quantile(samples, 1.0 - alpha)),
        samples=samples,
        B=B,
        ci=ci,
    )
