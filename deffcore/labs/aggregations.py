"""Alternative aggregations of one similarity matrix, and D_eff under each metric (Fig. S4, S11).

D_eff compresses an L x L layer-similarity matrix S into one number. The paper checks that the
conclusion does not hinge on that particular formula by aggregating the same S in other ways
(Figure S4) and by recomputing D_eff under other similarity metrics (Table S11). Every
aggregation here is an "effective number of layers" in [~1, L]: L when the layers are
mutually dissimilar (S = I), about 1 when they are all the same (S = all-ones).

    deff                 L^2 / sum_ij S_ij (= L / (1 + 2 sum_k (1 - k/L) rho(k)); the engine's)
    ess_truncated        L / (1 + 2 sum_{k=1..K*} rho(k)), the effective sample size of an
                         autocorrelated series (integrated autocorrelation time) with Geyer's
                         truncation: K* is the last lag before rho first drops to <= 0.
                         Unlike D_eff it has no (1 - k/L) weights and ignores lags past K*.
    participation_ratio  (sum lambda)^2 / sum lambda^2 over the eigenvalues of S
                         = tr(S)^2 / ||S||_F^2: how many eigen-directions carry the spectrum.
    entropy_rank         exp(H(p)), p = lambda / sum lambda (eigenvalues clipped at 0): the
                         spectral-entropy effective rank (Roy & Vetterli 2007).
    exp_fit              D_eff of the exponential profile rho(k) = exp(-k / xi) that best fits
                         the measured lag profile (least squares on log rho over the lags with
                         rho > 0, line through the origin); `xi` is the correlation length.

Beside them, the trajectory geometry of the layers (`deffcore.measures.geometry`, SPEC 13): the
geodesic efficiency theta_{1,L} / sum theta_{l,l+1} with theta = arccos S under each metric
(with the orthogonal-update reference's value at the same L), and the Euclidean chord/path
ratio and mean turning angle of the pooled-state trajectory (metric-independent).

Decisions: eigenvalue-based aggregations symmetrise S first ((S + S^T)/2; the engine's S is
already symmetric). `exp_fit` uses only lags with rho(k) > 0 (log undefined otherwise); if
none are positive the profile is taken as uncorrelated (xi = 0, D = L); if every positive lag
has rho >= 1 the layers are identical (xi = inf, D = 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from deffcore.core.errors import InvalidStatesError
from deffcore.measures.depth import effective_depth, lag_profile
from deffcore.measures.geometry import euclidean_path, geodesic_efficiency, reference_efficiency

#: The aggregations this module computes, in display order.
AGGREGATIONS: tuple[str, ...] = (
    "deff",
    "ess_truncated",
    "participation_ratio",
    "entropy_rank",
    "exp_fit",
)
AGGREGATION_LABELS: dict[str, str] = {
    "deff": "D_eff = L²/ΣS",
    "ess_truncated": "ESS, Geyer-truncated",
    "participation_ratio": "participation ratio of eig(S)",
    "entropy_rank": "spectral-entropy rank of S",
    "exp_fit": "exponential lag fit",
}


def _check_square(S: np.ndarray) -> np.ndarray:
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or S.shape[0] < 2:
        raise InvalidStatesError(
            f"A similarity matrix must be square with at least 2 layers; got shape {S.shape}."
        )
    if not np.all(np.isfinite(S)):
        raise InvalidStatesError("The similarity matrix contains NaN or inf values.")
    return S


def ess_truncated(S: np.ndarray) -> float:
    """L / (1 + 2 sum_{k<=K*} rho(k)), K* = last lag before the first rho(k) <= 0."""
    S = _check_square(S)
    total = 0.0
    for r in lag_profile(S):
        if r <= 0:
            break
        total += r
    return float(S.shape[0] / (1.0 + 2.0 * total))


def _eigenvalues(S: np.ndarray) -> np.ndarray:
    S = _check_square(S)
    return np.linalg.eigvalsh((S + S.T) / 2.0)


def participation_ratio(S: np.ndarray) -> float:
    """(sum lambda)^2 / sum lambda^2, computed as tr(S)^2 / ||S||_F^2 for symmetric S."""
    S = _check_square(S)
    sym = (S + S.T) / 2.0
    return float(np.trace(sym) ** 2 / np.sum(sym * sym))


def entropy_rank(S: np.ndarray) -> float:
    """exp(-sum p log p) with p = max(lambda, 0) / sum max(lambda, 0)."""
    lam = np.clip(_eigenvalues(S), 0.0, None)
    p = lam / lam.sum()
    p = p[p > 0]
    return float(np.exp(-np.sum(p * np.log(p))))


def exp_fit_length(S: np.ndarray) -> float:
    """Correlation length xi of the least-squares fit log rho(k) = -k / xi (lags with rho > 0)."""
    rho = lag_profile(_check_square(S))
    k = np.arange(1, len(rho) + 1, dtype=np.float64)
    keep = rho > 0
    if not keep.any():
        return 0.0
    y = np.log(np.minimum(rho[keep], 1.0))
    slope = float(np.dot(k[keep], y) / np.dot(k[keep], k[keep]))  # slope = -1/xi
    if slope >= 0.0:
        return math.inf
    return -1.0 / slope


def exp_profile_depth(xi: float, L: int) -> float:
    """D_eff of the profile rho(k) = exp(-k/xi): L / (1 + 2 sum_{k<L} (1 - k/L) e^{-k/xi})."""
    if xi == 0.0:
        return float(L)
    k = np.arange(1, L, dtype=np.float64)
    rho = np.ones_like(k) if math.isinf(xi) else np.exp(-k / xi)
    return float(L / (1.0 + 2.0 * np.sum((1.0 - k / L) * rho)))


def exp_fit(S: np.ndarray) -> float:
    """D_eff of the fitted exponential lag profile (see `exp_fit_length`)."""
    S = _check_square(S)
    return exp_profile_depth(exp_fit_length(S), S.shape[0])


def aggregate(S: np.ndarray) -> dict[str, Any]:
    """Every aggregation of S, each also divided by L, plus the fitted correlation length.

    Returns {"layers": L, "values": {name: float}, "over_L": {name: float}, "xi": float}.
    """
    S = _check_square(S)
    L = S.shape[0]
    values = {
        "deff": float(effective_depth(S)),
        "ess_truncated": ess_truncated(S),
        "participation_ratio": participation_ratio(S),
        "entropy_rank": entropy_rank(S),
        "exp_fit": exp_fit(S),
    }
    return {
        "layers": L,
        "values": values,
        "over_L": {name: v / L for name, v in values.items()},
        "xi": exp_fit_length(S),
    }


def aggregation_table(
    measurement: Any,
    *,
    pooling: str = "default",
    metrics: Sequence[str] = ("cka", "unbiased_cka", "cosine"),
) -> dict[str, Any]:
    """All aggregations under every metric for one run (a `deffcore.runs.measure.Measurement`).

    Returns {"lab": "aggregations", "pooling", "layers", "rows": [{metric, aggregation, value,
    value_over_L}], "xi": {metric: xi}, "similarity": {metric: S as nested lists},
    "geometry": {metric: TrajectoryGeometry dict}, "trajectory": {euclidean_efficiency,
    euclidean_turning_angles, euclidean_mean_turning (None when `measurement` has no pooled
    states, e.g. a snapshot), reference_efficiency}}.
    """
    rows = []
    geometry = {}
    xis = {}
    matrices = {}
    layers = None
    for metric in metrics:
        S = measurement.similarity(pooling, metric=metric)
        agg = aggregate(S)
        layers = agg["layers"]
        xis[metric] = agg["xi"]
        matrices[metric] = np.asarray(S, dtype=np.float64).tolist()
        geometry[metric] = geodesic_efficiency(S, metric=metric).to_dict()
        for name in AGGREGATIONS:
            rows.append(
                {
                    "metric": metric,
                    "aggregation": name,
                    "value": agg["values"][name],
                    "value_over_L": agg["over_L"][name],
                }
            )
    return {
        "lab": "aggregations",
        "pooling": pooling,
        "layers": layers,
        "rows": rows,
        "xi": xis,
        "similarity": matrices,
        "geometry": geometry,
        "trajectory": _trajectory(_states_of(measurement, pooling), reference_efficiency(layers)),
    }


def _states_of(measurement: Any, pooling: str) -> np.ndarray | None:
    """The pooled states h_1 .. h_L (L, N, d) behind `measurement`, or None: a Measurement
    has them, an app view (`deffcore.views.run.Run`) holds one or, for a snapshot, none."""
    if hasattr(measurement, "states"):
        return measurement.states(pooling)
    inner = getattr(measurement, "measurement", None)  # a view's live Measurement (property)
    return inner.states(pooling) if inner is not None and hasattr(inner, "states") else None


def _trajectory(states: np.ndarray | None, reference: float) -> dict[str, Any]:
    """The Euclidean path of the states (None values without states) and E_L."""
    if states is None:
        return {"euclidean_efficiency": None, "euclidean_turning_angles": None,
                "euclidean_mean_turning": None, "reference_efficiency": reference}  # fmt: skip
    efficiency, turns = euclidean_path(states)
    finite = turns[np.isfinite(turns)]
    return {
        "euclidean_efficiency": efficiency,
        "euclidean_turning_angles": turns.tolist(),
        "euclidean_mean_turning": float(finite.mean()) if finite.size else math.nan,
        "reference_efficiency": reference,
    }
