"""Geodesic efficiency and turning angles on closed forms (deffcore.measures.geometry, SPEC 13)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import deffcore as dc
from deffcore.core.errors import InvalidStatesError
from deffcore.measures.geometry import geodesic_efficiency, reference_efficiency
from deffcore.measures.similarity import similarity_matrix
from deffcore.measures.synthetic import orthogonal_updates


def _min_over_max(L: int) -> np.ndarray:
    i = np.arange(1, L + 1)
    return np.minimum.outer(i, i) / np.maximum.outer(i, i)


def test_exported():
    assert dc.geodesic_efficiency is geodesic_efficiency


def test_points_on_one_great_circle_have_efficiency_one_and_no_turning():
    t = np.array([0.0, 0.1, 0.35, 0.6, 1.0, 1.4])  # angles along one geodesic, increasing
    S = np.cos(np.abs(t[:, None] - t[None, :]))
    g = geodesic_efficiency(S)
    assert g.efficiency == pytest.approx(1.0, abs=1e-12)
    assert g.path == pytest.approx(1.4) and g.chord == pytest.approx(1.4)
    np.testing.assert_allclose(g.turning_angles, 0.0, atol=1e-6)
    np.testing.assert_allclose(g.step_angles, np.diff(t), atol=1e-12)


@pytest.mark.parametrize("L", [2, 3, 5, 12, 30])
def test_orthogonal_update_reference_closed_form(L):
    g = geodesic_efficiency(_min_over_max(L))
    expected = math.acos(1 / L) / sum(math.acos(l / (l + 1)) for l in range(1, L))
    assert g.efficiency == pytest.approx(expected, rel=1e-12)
    assert reference_efficiency(L) == pytest.approx(expected, rel=1e-12)
    # each new update is orthogonal to the path so far: a right-angle turn at every layer
    np.testing.assert_allclose(g.turning_angles, math.pi / 2, atol=1e-9)


def test_reference_values_by_hand():
    assert reference_efficiency(2) == pytest.approx(1.0)
    # L = 3: arccos(1/3) / (arccos(1/2) + arccos(2/3))
    assert reference_efficiency(3) == pytest.approx(1.2309594 / (1.0471976 + 0.8410687), rel=1e-6)
    assert reference_efficiency(30) < reference_efficiency(10) < reference_efficiency(3)


def test_euclidean_straight_line_is_one_with_zero_turning():
    rng = np.random.default_rng(0)
    start, step = rng.standard_normal((50, 8)), rng.standard_normal((50, 8))
    states = np.stack([start + s * step for s in (0.0, 0.5, 1.5, 2.0, 4.0)])  # monotone steps
    g = geodesic_efficiency(states)
    assert g.euclidean_efficiency == pytest.approx(1.0, abs=1e-10)
    np.testing.assert_allclose(g.euclidean_turning_angles, 0.0, atol=1e-6)


def test_euclidean_random_walk_is_about_one_over_sqrt_steps():
    # iid Gaussian steps in N x d = 20,000 dimensions: chord/path -> 1/sqrt(L-1), turns -> pi/2
    rng = np.random.default_rng(1)
    L = 10
    states = np.cumsum(rng.standard_normal((L, 400, 50)), axis=0)
    g = geodesic_efficiency(states)
    assert g.euclidean_efficiency == pytest.approx(1 / math.sqrt(L - 1), rel=0.02)
    np.testing.assert_allclose(g.euclidean_turning_angles, math.pi / 2, atol=0.03)


def test_measured_orthogonal_updates_approach_the_reference():
    # SPEC 7 orthogonal updates without h_0 dominance: CKA tends to min/max for N >> d
    syn = orthogonal_updates(n=4000, d=16, layers=8, scale=10.0, seed=0)
    S = similarity_matrix(syn.states, "cka")
    g = geodesic_efficiency(S)
    assert g.efficiency == pytest.approx(reference_efficiency(8), rel=0.05)
    assert g.mean_turning == pytest.approx(math.pi / 2, abs=0.1)


def test_cka_efficiency_is_at_most_one_triangle_inequality():
    rng = np.random.default_rng(2)
    for _ in range(5):
        states = rng.standard_normal((6, 30, 5)).cumsum(axis=0) * rng.uniform(0.1, 3, (6, 1, 1))
        g = geodesic_efficiency(states)
        assert 0.0 <= g.efficiency <= 1.0 + 1e-12
        S = similarity_matrix(states, "cka")
        assert g.efficiency == pytest.approx(geodesic_efficiency(S).efficiency, rel=1e-12)


def test_bad_input():
    with pytest.raises(InvalidStatesError, match="takes an"):
        geodesic_efficiency(np.ones((3, 4)))
    with pytest.raises(InvalidStatesError, match="at least 2 layers"):
        geodesic_efficiency(np.ones((1, 1)))
    with pytest.raises(InvalidStatesError):
        reference_efficiency(1)
