"""Lag profile, effective depth, F_L reference and gap against closed forms."""

from __future__ import annotations

import json

import numpy as np
import pytest

import deffcore as dc
from deffcore.core.errors import DeffError, InvalidStatesError


def minmax_matrix(L: int) -> np.ndarray:
    i = np.arange(1, L + 1)
    return np.minimum.outer(i, i) / np.maximum.outer(i, i)


def random_similarity(L: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 1, (L, L))
    s = (a + a.T) / 2
    np.fill_diagonal(s, 1.0)
    return s


@pytest.mark.parametrize("L", range(2, 65))
def test_minmax_matrix_gives_F_L(L: int) -> None:
    assert dc.effective_depth(minmax_matrix(L)) == pytest.approx(2 * L / (L + 1), rel=1e-12)
    assert dc.reference_depth(L) == 2 * L / (L + 1)


@pytest.mark.parametrize("L", [2, 3, 7, 32])
def test_full_lag_equals_L_squared_over_sum(L: int) -> None:
    s = random_similarity(L, seed=L)
    assert dc.effective_depth(s, K=L - 1) == pytest.approx(L**2 / s.sum(), rel=1e-12)
    assert dc.effective_depth(s) == dc.effective_depth(s, K=L - 1)


def test_lag_profile_hand_computed() -> None:
    s = np.array([[1.0, 0.5, 0.2], [0.5, 1.0, 0.7], [0.2, 0.7, 1.0]])
    np.testing.assert_allclose(dc.lag_profile(s), [0.6, 0.2])
    # D(K=1) = 3 / (1 + 2*(2/3)*0.6) = 3 / 1.8
    assert dc.effective_depth(s, K=1) == pytest.approx(3 / 1.8)
    # D(K=2) = 3 / (1 + 0.8 + 2*(1/3)*0.2)
    assert dc.effective_depth(s, K=2) == pytest.approx(3 / (1.8 + 0.4 / 3))
    assert dc.effective_depth(s, K=0) == 3.0


def test_extremes_and_gap() -> None:
    assert dc.effective_depth(np.eye(6)) == pytest.approx(6.0)
    assert dc.effective_depth(np.ones((6, 6))) == pytest.approx(1.0)
    assert dc.gap_percent(dc.reference_depth(12), 12) == pytest.approx(0.0)
    # Pythia-70M, Table 2: D = 1.23, L = 6 -> gap +28.2 %
    assert dc.gap_percent(1.23, 6) == pytest.approx(100 * (1 - 1.23 / (12 / 7)))
    assert round(dc.gap_percent(1.23, 6), 1) == 28.2
    assert dc.gap_percent(2.0, 6) < 0


@pytest.mark.parametrize(
    ("L", "keys"), [(32, [5, 10, 15, 25, 31]), (12, [5, 10, 11]), (6, [5]), (3, [2])]
)
def test_lag_sensitivity(L: int, keys: list[int]) -> None:
    s = random_similarity(L, seed=1)
    sens = dc.lag_sensitivity(s)
    assert list(sens) == keys
    for k, v in sens.items():
        assert v == pytest.approx(dc.effective_depth(s, K=k) / L)


def test_depth_summary_fields_and_json() -> None:
    s = minmax_matrix(10)
    summary = dc.depth_summary(s)
    assert summary.layers == 10
    assert summary.deff == pytest.approx(20 / 11)
    assert summary.deff_over_L == pytest.approx(2 / 11)
    assert summary.gap_pct == pytest.approx(0.0, abs=1e-10)
    assert summary.rho1 == pytest.approx(np.mean([i / (i + 1) for i in range(1, 10)]))
    assert summary.reference_FL == pytest.approx(20 / 11)
    assert list(summary.deff_over_L_at_K) == [5, 9]
    d = json.loads(json.dumps(summary.to_dict()))
    assert d["deff_over_L_at_K"]["9"] == pytest.approx(2 / 11)


def test_bad_matrices() -> None:
    with pytest.raises(InvalidStatesError, match="square"):
        dc.effective_depth(np.ones((2, 3)))
    with pytest.raises(InvalidStatesError, match="at least 2 layers"):
        dc.lag_profile(np.ones((1, 1)))
    with pytest.raises(InvalidStatesError, match="NaN"):
        dc.depth_summary(np.full((3, 3), np.nan))
    with pytest.raises(DeffError, match=r"K must be an integer in 0\.\.2"):
        dc.effective_depth(np.eye(3), K=3)
    with pytest.raises(DeffError, match="undefined"):
        dc.effective_depth(np.array([[1.0, -0.9], [-0.9, 1.0]]) * 2 - np.eye(2))


def test_a_matrix_that_is_not_a_symmetric_real_one_is_refused() -> None:
    """S is symmetric (SPEC 3) and D_eff reads only its upper triangle, so a transposed
    directional score or a lower-triangular S gave a number for a matrix it never read; text,
    objects and complex numbers were numpy's ValueError or a silently dropped imaginary part."""
    lower = np.tril(np.full((4, 4), 0.5)) + np.eye(4) * 0.5
    for call in (dc.effective_depth, dc.depth_summary, dc.lag_profile, dc.lag_sensitivity):
        with pytest.raises(InvalidStatesError, match="symmetric"):
            call(lower)
        for bad in ("x", np.array([[1, "a"], ["a", 1]], dtype=object), np.eye(3) * (1 + 1j)):
            with pytest.raises(InvalidStatesError, match="real numbers"):
                call(bad)
    S = dc.accumulated_similarity(np.ones(5))
    noisy = S + np.triu(np.full((5, 5), 1e-9), 1)  # float rounding of a symmetric measure
    assert dc.effective_depth(noisy) == pytest.approx(dc.effective_depth(S), abs=1e-8)
    assert dc.effective_depth(np.eye(3, dtype=int)) == 3.0  # integers are real numbers


def test_reference_depth_and_gap_take_a_whole_number_of_layers() -> None:
    for bad in (2.5, float("nan"), float("inf"), "5", [3], None, True, 0, -1):
        with pytest.raises(DeffError, match="number of layers"):
            dc.reference_depth(bad)
        with pytest.raises(DeffError, match="number of layers"):
            dc.gap_percent(1.0, bad)
    with pytest.raises(DeffError, match="D_eff must be a number"):
        dc.gap_percent("1", 4)
    assert dc.reference_depth(np.int64(4)) == dc.reference_depth(4.0) == 1.6
