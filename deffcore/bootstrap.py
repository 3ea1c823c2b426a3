"""Passage bootstrap of D_eff/L (SPEC section 8): resample passages with replacement B times.

A replicate draws N passage indices with replacement; only the multiplicities w (N,)
(sum w = N) matter. Instead of rebuilding the resampled (L, N, d) stack, the "gram" method
reuses per-passage quantities computed once:

    G_l = X_l X_l^T (centred once, (N, N) per layer)
    weighted centring  K_l = H_w G_l H_w^T,  H_w = I - 1 w^T / N
                       (K_l = G_l - g 1^T - 1 g^T + c,  g = G_l w / N,  c = w^T G_l w / N^2)
    <K_i, K_j>_w = sum_{a,b} w_a w_b K_i[a,b] K_j[a,b]   (passages with w_a = 0 dropped)

which is exactly the resampled stack's <K_i, K_j>, at O(L^2 N_u^2) per replicate
(N_u ~ 0.63 N distinct passages) instead of O(L N^2 d + L^2 N^2). Unbiased CKA uses the
weighted row norms (see `unbiased_hsic_matrix`); cosine uses the per-passage cosines
c[i, j, a] once, and a replicate is c @ w / N.

Decision: the "gram" method stores L N^2 floats; when that exceeds `GRAM_BUDGET_ELEMENTS`
("auto") the bootstrap falls back to "recompute" (`similarity_matrix` on each resampled
stack), which gives the same numbers more slowly.

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
    _as_tensor,
    _centred,
    _normalise,
    _validated,
    similarity_matrix,
    unbiased_hsic_matrix,
)

#: Largest L * N^2 the "gram" method keeps in memory (~1 GB in float32).
GRAM_BUDGET_ELEMENTS = 2**28
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


def _gram_replicates(x: torch.Tensor, indices: np.ndarray, metric: str) -> list[np.ndarray]:
    xc = _centred(x)  # (L, N, d)
    n_layers, n, _ = xc.shape
    gram = torch.bmm(xc, xc.transpose(1, 2))  # (L, N, N)
    out = []
    for idx in indices:
        counts = torch.from_numpy(np.bincount(idx, minlength=n)).to(x.device)
        used = counts.nonzero().squeeze(1)
        w = counts[used].to(gram.dtype)  # (N_u,)
        g = gram[:, used][:, :, used]  # (L, N_u, N_u)
        gw = g @ w / n  # (L, N_u)
        c = (gw @ w) / n  # (L,)
        k = g - gw[:, :, None] - gw[:, None, :] + c[:, None, None]
        sw = torch.sqrt(w)
        kw = (k * sw[None, :, None] * sw[None, None, :]).reshape(n_layers, -1)
        m = (kw @ kw.T).to(torch.float64)
        if metric == "cka":
            out.append(_normalise(m, "CKA"))
        else:
            row = torch.diagonal(k, dim1=1, dim2=2)  # (L, N_u) centred squared row norms
            out.append(_normalise(unbiased_hsic_matrix(m, row, n, weights=w), "unbiased CKA"))
    return out


def _cosine_replicates(x: torch.Tensor, indices: np.ndarray) -> list[np.ndarray]:
    n = x.shape[1]
    # per-passage cosines through the fast path's own checks (zero-norm vectors raise there)
    similarity_matrix(x, "cosine")
    xf = x.to(torch.float64)
    unit = xf / torch.linalg.vector_norm(xf, dim=2, keepdim=True)
    per_passage = torch.einsum("ind,jnd->ijn", unit, unit)  # (L, L, N)
    out = []
    for idx in indices:
        w = torch.from_numpy(np.bincount(idx, minlength=n)).to(per_passage)
        s = (per_passage @ w / n).cpu().numpy()
        np.fill_diagonal(s, 1.0)
        out.append(s)
    return out


def bootstrap_similarities(
    states: Any, indices: np.ndarray, metric: str = "cka", method: str = "auto"
) -> list[np.ndarray]:
    """One (L, L) similarity matrix per row of `indices` (B, N): the resampled stacks."""
    if metric not in METRICS:
        raise DeffError(
            f"Unknown similarity metric {metric!r}; choose one of {', '.join(METRICS)}."
        )
    if method not in METHODS:
        raise DeffError(f"Unknown bootstrap method {method!r}; choose one of {', '.join(METHODS)}.")
    x = _validated(states, min_passages=4 if metric == "unbiased_cka" else 2)
    if not x.is_floating_point():
        x = x.to(torch.float64)
    n_layers, n, _ = x.shape
    if method == "auto":
        method = "gram" if n_layers * n * n <= GRAM_BUDGET_ELEMENTS else "recompute"
    if method == "recompute":
        return [similarity_matrix(x[:, torch.from_numpy(idx)], metric) for idx in indices]
    if metric == "cosine":
        return _cosine_replicates(x, indices)
    return _gram_replicates(x, indices, metric)


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

    K: maximum lag (default L-1). method: "auto", "gram" (reuse per-passage Gram matrices) or
    "recompute" (resample the stack and call `similarity_matrix`); both give the same numbers.
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
