"""SPEC section 17.3: each measure against its permutation null, checked against
`calibrated-similarity` 0.1.1 (pinned in requirements-dev.txt) on the same data and
permutations, and for its size under independence."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from calibrated_similarity import calibrate

from deffcore.core.errors import InvalidArgumentError
from deffcore.measures.depth import effective_depth
from deffcore.measures.similarity_measures import MEASURES, measure_matrix
from deffcore.statistics.calibration import (
    calibrate_scores,
    calibrated_similarity,
    permutations_for,
)


def _states(n=50, d=6, layers=3, seed=0):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((n, d))
    out = [h.copy()]
    for _ in range(layers - 1):
        h = h + 0.8 * rng.standard_normal((n, d))
        out.append(h.copy())
    return np.stack(out)


@pytest.mark.parametrize("measure", MEASURES)
def test_matches_calibrated_similarity_on_the_same_permutations(measure):
    st = _states()
    b, seed = 39, 7
    res = calibrated_similarity(st, measure, permutations=b, seed=seed, k=5)
    perms = permutations_for(st.shape[1], b, seed)
    for i, j in ((0, 1), (0, 2), (1, 2)):
        replay = iter(perms)

        def sim(x, y, i=i, j=j):
            return measure_matrix(np.stack([x.numpy(), y.numpy()]), measure, k=5)[0, 1]

        scal, p, tau = calibrate(
            torch.from_numpy(st[i]),
            torch.from_numpy(st[j]),
            sim,
            K=b,
            alpha=0.05,
            perm_fn=lambda n, device, replay=replay: torch.from_numpy(next(replay)),
        )
        # the reference holds its scores in float32: agreement to its precision
        assert res.threshold[i, j] == pytest.approx(float(tau), abs=1e-6)
        assert res.S_cal[i, j] == pytest.approx(float(scal), abs=1e-6)
        assert res.p_value[i, j] == pytest.approx(float(p), abs=1e-7)
    assert np.array_equal(res.S_cal, res.S_cal.T)
    assert np.all(np.diag(res.S_cal) == 1.0)
    assert res.deff_cal == pytest.approx(effective_depth(res.S_cal))
    assert res.deff == pytest.approx(effective_depth(res.S))


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.5])
def test_ties_and_order_statistic_as_calibrated_similarity(alpha):
    """Scores with ties (a discrete measure such as mutual kNN): threshold, p-value (ties
    count against the observation) and S_cal as the reference computes them."""
    obs, null = 0.5, [0.5, 0.25, 0.5, 0.75, 0.125, 0.5, 0.25, 0.375, 0.5]
    values = iter([obs, *null])
    x = torch.zeros(4, 1)
    scal, p, tau = calibrate(x, x, lambda a, b: next(values), K=len(null), alpha=alpha)
    s = np.full((2, 2), obs)
    got_tau, got_p, got_scal = calibrate_scores(
        s, np.array(null)[:, None, None] * np.ones((2, 2)), alpha
    )
    assert got_tau[0, 1] == pytest.approx(float(tau))
    assert got_p[0, 1] == pytest.approx(float(p))
    assert got_p[0, 1] == pytest.approx((1 + 5) / 10)
    assert got_scal[0, 1] == pytest.approx(float(scal))


@pytest.mark.parametrize("measure", MEASURES)
def test_threshold_exceeded_at_most_alpha_under_independence(measure):
    """200 seeded trials of two independent layers: the null's 95% threshold is exceeded in
    at most 5% of them, up to a binomial margin (3 sd: 0.05 + 0.046)."""
    trials, hits = 200, 0
    for t in range(trials):
        rng = np.random.default_rng(1000 + t)
        st = rng.standard_normal((2, 30, 4)) * np.array([1.0, 0.5, 0.3, 0.1])
        res = calibrated_similarity(st, measure, permutations=19, seed=t, k=3)
        hits += bool(res.S[0, 1] > res.threshold[0, 1])
    rate = hits / trials
    assert rate <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / trials)
    # and the threshold is not vacuous: some trials do reach it (rank 20 of 20)
    assert rate > 0.0


def test_dependent_layers_exceed_the_threshold_and_keep_a_positive_s_cal():
    res = calibrated_similarity(_states(200, 6, 4), "procrustes", permutations=50, seed=1)
    off = ~np.eye(4, dtype=bool)
    assert np.all(res.S[off] > res.threshold[off])
    assert np.all(res.S_cal[off] > 0.0)
    assert np.all(res.p_value[off] == pytest.approx(1 / 51))
    # calibration removes the null's floor: D_eff rises
    assert res.deff_cal > res.deff


def test_independent_layers_calibrate_to_zero_and_deff_to_l():
    rng = np.random.default_rng(3)
    st = rng.standard_normal((5, 200, 8))
    res = calibrated_similarity(st, "cka", permutations=99, seed=2)
    # the raw CKA of independent layers sits near its finite-sample floor d/(N+d), not 0
    off = ~np.eye(5, dtype=bool)
    assert np.all(res.S[off] > 0.01)
    np.testing.assert_allclose(res.null_mean[off], 8 / 208, rtol=0.2)
    assert res.deff_cal > 0.9 * 5
    assert res.deff < res.deff_cal


@pytest.mark.parametrize("measure", MEASURES)
def test_independent_gaussian_layers_sit_in_their_null(measure):
    """Five independent Gaussian layers: each of the 10 pairs exceeds its null's 95% threshold
    with probability 5%, so S_cal is 0 for nearly all of them (seeded)."""
    st = np.random.default_rng(11).standard_normal((5, 120, 6))
    res = calibrated_similarity(st, measure, permutations=39, seed=3, k=5)
    off = ~np.eye(5, dtype=bool)
    assert np.sum(res.S_cal[off] == 0.0) >= 2 * 7  # at most 3 of the 10 pairs above
    assert np.all(np.abs(res.S[off] - res.null_mean[off]) < 0.1)


def test_bad_arguments():
    st = _states()
    with pytest.raises(InvalidArgumentError, match="permutations"):
        calibrated_similarity(st, "cka", permutations=0)
    with pytest.raises(InvalidArgumentError, match="from 1 to 10,000, got 10001"):
        calibrated_similarity(st, "cka", permutations=10_001)
    with pytest.raises(InvalidArgumentError, match="alpha"):
        calibrated_similarity(st, "cka", alpha=1.0)
    with pytest.raises(InvalidArgumentError, match="seed"):
        calibrated_similarity(st, "cka", seed=-1)


def test_permutations_beyond_the_machines_memory_are_one_sentence(monkeypatch):
    from deffcore.core.errors import OutOfMemoryError
    from deffcore.statistics.calibration import check_permutations

    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", "1")
    assert check_permutations(19, n=1000, layers=30) == 19
    # 10,000 x (8 x 10^6 + 8 x 30^2) bytes = 74.6 GiB: refused before any is drawn
    with pytest.raises(OutOfMemoryError, match=r"use --p <= 134\b"):
        check_permutations(10_000, "--p", n=10**6, layers=30)
