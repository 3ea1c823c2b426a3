"""Each aggregation against a closed form or an independent eigenvalue computation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from deffcore.core.errors import InvalidStatesError
from deffcore.labs.aggregations import (
    AGGREGATIONS,
    aggregate,
    aggregation_table,
    entropy_rank,
    ess_truncated,
    exp_fit,
    exp_fit_length,
    participation_ratio,
)


def minmax(L: int) -> np.ndarray:
    i = np.arange(1, L + 1)
    return np.minimum.outer(i, i) / np.maximum.outer(i, i)


def toeplitz(rho: list[float]) -> np.ndarray:
    L = len(rho) + 1
    r = np.concatenate([[1.0], rho])
    return r[np.abs(np.subtract.outer(np.arange(L), np.arange(L)))]


@pytest.mark.parametrize("L", [2, 5, 12])
def test_identity_gives_L_everywhere(L):
    agg = aggregate(np.eye(L))
    for name in AGGREGATIONS:
        assert agg["values"][name] == pytest.approx(L), name
        assert agg["over_L"][name] == pytest.approx(1.0), name
    assert agg["xi"] == 0.0


@pytest.mark.parametrize("L", [2, 5, 12])
def test_all_ones(L):
    agg = aggregate(np.ones((L, L)))["values"]
    assert agg["deff"] == pytest.approx(1.0)
    assert agg["participation_ratio"] == pytest.approx(1.0)
    assert agg["entropy_rank"] == pytest.approx(1.0)
    assert agg["exp_fit"] == pytest.approx(1.0)  # rho == 1 at every lag: xi = inf
    assert agg["ess_truncated"] == pytest.approx(L / (2 * L - 1))
    assert math.isinf(exp_fit_length(np.ones((L, L))))


def test_minmax_reference_by_hand_L3():
    # rho(1) = mean(1/2, 2/3) = 7/12, rho(2) = 1/3.
    S = minmax(3)
    agg = aggregate(S)["values"]
    assert agg["deff"] == pytest.approx(2 * 3 / 4)  # F_L
    assert agg["ess_truncated"] == pytest.approx(3 / (1 + 2 * (7 / 12 + 1 / 3)))  # 18/17


@pytest.mark.parametrize("L", [3, 8, 20])
def test_spectral_aggregations_match_eigenvalues(L):
    S = minmax(L)
    lam = np.linalg.eigvals(S).real  # independent route: general eigen-solver
    assert participation_ratio(S) == pytest.approx(lam.sum() ** 2 / (lam**2).sum())
    p = lam / lam.sum()
    assert entropy_rank(S) == pytest.approx(math.exp(-(p * np.log(p)).sum()))
    assert aggregate(S)["values"]["deff"] == pytest.approx(2 * L / (L + 1))


@pytest.mark.parametrize("xi", [0.5, 2.0, 7.0])
def test_exponential_profile_is_recovered(xi):
    L = 10
    S = toeplitz([math.exp(-k / xi) for k in range(1, L)])
    assert exp_fit_length(S) == pytest.approx(xi)
    assert exp_fit(S) == pytest.approx(aggregate(S)["values"]["deff"])  # same profile, same D


def test_ess_truncates_at_first_non_positive_lag():
    S = toeplitz([0.5, -0.1, 0.4])
    assert ess_truncated(S) == pytest.approx(4 / (1 + 2 * 0.5))


def test_rejects_bad_matrices():
    with pytest.raises(InvalidStatesError, match="square"):
        aggregate(np.ones((3, 4)))
    with pytest.raises(InvalidStatesError, match="NaN"):
        aggregate(np.array([[1.0, np.nan], [np.nan, 1.0]]))


class _FakeMeasurement:
    """Stands in for a Measurement: one known matrix per metric."""

    def similarity(self, pooling, metric=None):
        return {"cka": np.eye(4), "unbiased_cka": minmax(4), "cosine": np.ones((4, 4))}[metric]


def test_table_has_every_metric_and_aggregation():
    table = aggregation_table(_FakeMeasurement())
    # the geometry of each S; no pooled states here, so no Euclidean path
    # S = I: every angle pi/2, so chord / path = 1 / (L - 1)
    assert table["geometry"]["cka"]["efficiency"] == pytest.approx(1 / 3)
    assert table["geometry"]["unbiased_cka"]["efficiency"] == pytest.approx(
        table["trajectory"]["reference_efficiency"]
    )  # S = min/max
    assert table["trajectory"]["euclidean_efficiency"] is None
    assert table["layers"] == 4
    assert len(table["rows"]) == 3 * len(AGGREGATIONS)
    by = {(r["metric"], r["aggregation"]): r for r in table["rows"]}
    assert by[("cka", "deff")]["value_over_L"] == pytest.approx(1.0)
    assert by[("unbiased_cka", "deff")]["value"] == pytest.approx(8 / 5)
    assert by[("cosine", "participation_ratio")]["value"] == pytest.approx(1.0)
