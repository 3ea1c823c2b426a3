"""Lag profile, effective depth and the orthogonal-update reference F_L (SPEC section 4).

    rho(k)  = mean_{i=1..L-k} S(i, i+k),  k = 1..L-1
    D_eff(K) = L / (1 + 2 * sum_{k=1..K} (1 - k/L) * rho(k))      (K = L-1 by default)
    F_L     = 2L / (L+1)       (S(i,j) = min(i,j)/max(i,j): accumulated equal orthogonal updates)
    gap%    = 100 * (1 - D_eff / F_L)   (positive = sub-reference)

At K = L-1, D_eff = L^2 / sum_{i,j} S(i,j) for a symmetric S with unit diagonal.

Decision: K = 0 is allowed and gives D_eff = L (no lag counted). A non-positive denominator
(possible only with strongly negative similarities) makes D_eff undefined and raises.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from deffcore.core.checks import is_real, real_array
from deffcore.core.constants import SENSITIVITY_LAGS
from deffcore.core.errors import DeffError, InvalidStatesError

#: Largest |S(i, j) - S(j, i)| read as float rounding of a symmetric measure, relative to
#: max(1, max |S|); a stored snapshot's matrices are checked with it too (`run_schema`).
SYMMETRY_TOL = 1e-6


def _check_matrix(s: Any) -> np.ndarray:
    """S as float64 (L, L): real numbers, square, L >= 2, finite and symmetric (SPEC 3),
    else one sentence (InvalidStatesError): D_eff reads only the upper triangle, so a
    matrix that is not symmetric would give a number for a matrix it never read."""
    s = real_array(s)
    if s is None:
        raise InvalidStatesError(
            "A similarity matrix must hold real numbers (an (L, L) array of floats)."
        )
    if s.ndim != 2 or s.shape[0] != s.shape[1]:
        raise InvalidStatesError(
            f"A similarity matrix must be square (L, L); got shape {tuple(s.shape)}."
        )
    if s.shape[0] < 2:
        raise InvalidStatesError(
            f"A similarity matrix needs at least 2 layers to have a lag profile; got L = "
            f"{s.shape[0]}."
        )
    if not np.all(np.isfinite(s)):
        raise InvalidStatesError("The similarity matrix contains NaN or inf values.")
    asymmetry = float(np.abs(s - s.T).max())
    if asymmetry > SYMMETRY_TOL * max(1.0, float(np.abs(s).max())):
        raise InvalidStatesError(
            f"A similarity matrix must be symmetric, S(i, j) = S(j, i); this one differs by up "
            f"to {asymmetry:.3g} (symmetrise it, (S + S.T) / 2, if that is what it means)."
        )
    return s


def lag_profile(S: Any) -> np.ndarray:
    """S (L, L) -> rho (L-1,) with rho[k-1] = mean of the k-th superdiagonal."""
    s = _check_matrix(S)
    n_layers = s.shape[0]
    return np.array([np.diagonal(s, offset=k).mean() for k in range(1, n_layers)])


def _deff_from_profile(rho: np.ndarray, n_layers: int, K: int) -> float:
    k = np.arange(1, K + 1)
    denom = 1.0 + 2.0 * np.sum((1.0 - k / n_layers) * rho[:K])
    if denom <= 0:
        raise DeffError(
            f"Effective depth is undefined: 1 + 2*sum (1-k/L) rho(k) = {denom:.4g} <= 0 "
            "(the similarities are strongly negative)."
        )
    return float(n_layers / denom)


def _check_k(K: int | None, n_layers: int) -> int:
    if K is None:
        return n_layers - 1
    if isinstance(K, bool) or not isinstance(K, int | np.integer) or not 0 <= K <= n_layers - 1:
        raise DeffError(f"The maximum lag K must be an integer in 0..{n_layers - 1}; got {K!r}.")
    return int(K)


def deff_from_profile(rho: Any, n_layers: int, K: int | None = None) -> float:
    """D_eff(K) from a lag profile rho (L-1,) of an L-layer similarity (as `effective_depth`
    computes it from S): what a stored replicate profile gives at any K."""
    rho = np.asarray(rho, dtype=np.float64)
    if rho.shape != (n_layers - 1,):
        raise InvalidStatesError(
            f"A lag profile of L = {n_layers} layers has {n_layers - 1} lags; got {rho.shape}."
        )
    return _deff_from_profile(rho, n_layers, _check_k(K, n_layers))


def effective_depth(S: Any, K: int | None = None) -> float:
    """D_eff of a similarity matrix S (L, L) with maximum lag K (default L-1)."""
    s = _check_matrix(S)
    n_layers = s.shape[0]
    return _deff_from_profile(lag_profile(s), n_layers, _check_k(K, n_layers))


def reference_depth(L: int) -> float:
    """F_L = 2L/(L+1): effective depth of accumulated equal-size orthogonal updates. L is a
    whole number of layers >= 1 (4 or 4.0, numpy's too), else one sentence (DeffError)."""
    if not (is_real(L) and np.isfinite(L) and L >= 1 and int(L) == L):
        raise DeffError(f"The number of layers must be a whole number >= 1; got {L!r}.")
    return 2.0 * L / (L + 1)


def gap_percent(D: float, L: int) -> float:
    """100 * (1 - D / F_L); positive means below the orthogonal-update reference."""
    if not is_real(D):
        raise DeffError(f"D_eff must be a number; got {D!r}.")
    return 100.0 * (1.0 - D / reference_depth(L))


def lag_sensitivity(S: Any, Ks: tuple[int, ...] = SENSITIVITY_LAGS) -> dict[int, float]:
    """D_eff/L at each K in Ks with K < L, plus K = L-1 (SPEC section 8)."""
    s = _check_matrix(S)
    n_layers = s.shape[0]
    rho = lag_profile(s)
    lags = sorted({int(k) for k in Ks if 1 <= k < n_layers} | {n_layers - 1})
    return {k: _deff_from_profile(rho, n_layers, k) / n_layers for k in lags}


@dataclass
class DepthSummary:
    """The headline numbers of one similarity matrix."""

    layers: int
    deff: float
    deff_over_L: float
    gap_pct: float
    rho1: float
    reference_FL: float
    deff_over_L_at_K: dict[int, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["deff_over_L_at_K"] = {str(k): v for k, v in self.deff_over_L_at_K.items()}
        return out


def depth_summary(S: Any) -> DepthSummary:
    """S (L, L) -> DepthSummary (D_eff at K = L-1, gap to F_L, rho_hat(1), K sensitivity)."""
    s = _check_matrix(S)
    n_layers = s.shape[0]
    deff = effective_depth(s)
    return DepthSummary(
        layers=n_layers,
        deff=deff,
        deff_over_L=deff / n_layers,
        gap_pct=gap_percent(deff, n_layers),
        rho1=float(lag_profile(s)[0]),
        reference_FL=reference_depth(n_layers),
        deff_over_L_at_K=lag_sensitivity(s),
    )
