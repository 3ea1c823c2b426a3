"""The teaching story's closed forms: hand-computed cases, monotone effects, Monte Carlo."""

from __future__ import annotations

import numpy as np
import pytest

from deffcore.core.errors import DeffError
from deffcore.measures import teaching
from deffcore.measures.depth import effective_depth, reference_depth
from deffcore.measures.references import iid_reference_depth
from deffcore.measures.similarity import similarity_matrix


def deff(step: str, **knobs) -> float:
    return teaching.story_step(step, teaching.Knobs(**knobs)).deff


@pytest.mark.parametrize("L", [2, 5, 24, 64])
def test_equal_orthogonal_updates_give_F_L_exactly(L):
    # the step ignores the later knobs (h0, growth, rho): they enter at later steps
    r = teaching.story_step("orthogonal_updates", teaching.Knobs(L=L, h0=7.0, growth=1.9, rho=0.8))
    assert r.deff == pytest.approx(reference_depth(L), rel=1e-12)
    assert r.gap_pct == pytest.approx(0.0, abs=1e-9)
    i = np.arange(1, L + 1)
    np.testing.assert_allclose(r.S, np.minimum.outer(i, i) / np.maximum.outer(i, i), rtol=1e-12)


def test_independent_states_count_every_layer():
    r = teaching.story_step("independent", teaching.Knobs(L=9))
    np.testing.assert_array_equal(r.S, np.eye(9))
    assert r.deff == 9.0 and r.deff_previous is None


@pytest.mark.parametrize("a0", [0.5, 1.0, 4.0])
def test_persistent_h0_lowers_deff_by_the_closed_form(a0):
    # L = 2, equal updates: A_1 = a0 + 1, A_2 = a0 + 2, S12 = A_1/A_2, D = 4 / (2 + 2 S12)
    s12 = (a0 + 1) / (a0 + 2)
    assert deff("h0", L=2, h0=a0) == pytest.approx(4 / (2 + 2 * s12), rel=1e-12)
    # L = 3 by hand: S_ij = (a0 + min) / (a0 + max)
    s = {(1, 2): (a0 + 1) / (a0 + 2), (1, 3): (a0 + 1) / (a0 + 3), (2, 3): (a0 + 2) / (a0 + 3)}
    assert deff("h0", L=3, h0=a0) == pytest.approx(9 / (3 + 2 * sum(s.values())), rel=1e-12)
    assert deff("h0", L=12, h0=a0) < reference_depth(12)


def test_larger_h0_is_more_redundant():
    values = [deff("h0", L=16, h0=a0) for a0 in (0.0, 0.5, 2.0, 10.0)]
    assert values[0] == pytest.approx(reference_depth(16))
    assert values == sorted(values, reverse=True)


def test_growing_update_norms_raise_deff():
    # L = 2, no h0: S12 = A_1/A_2 = 1/(1+g)
    g = 1.5
    assert deff("growing", L=2, h0=0.0, growth=g) == pytest.approx(2 / (1 + 1 / (1 + g)))
    values = [deff("growing", L=16, h0=0.0, growth=g) for g in (1.0, 1.1, 1.3)]
    assert values[0] == pytest.approx(reference_depth(16))
    assert values == sorted(values) and values[1] > reference_depth(16)


def test_correlated_updates_lower_deff():
    # L = 2, equal updates, no h0: G11 = 1, G22 = 2 + 2 rho, G12 = 1 + rho, S12 = (1 + rho)/2
    rho = 0.6
    s12 = (1 + rho) / 2
    got = deff("correlated", L=2, h0=0.0, growth=1.0, rho=rho)
    assert got == pytest.approx(2 / (1 + s12), rel=1e-12)
    values = [deff("correlated", L=20, h0=1.0, growth=1.1, rho=r) for r in (0.0, 0.2, 0.5, 0.9)]
    assert values == sorted(values, reverse=True) and values[0] > values[1]


def test_finite_sample_bias_of_independent_states_is_the_iid_reference():
    for n, d, L in ((256, 64, 24), (10_000, 1024, 32), (16, 512, 48)):
        S = teaching.finite_sample_similarity(np.eye(L), n, d)
        assert effective_depth(S) == pytest.approx(iid_reference_depth(n, d, L), rel=1e-12)
    # the paper's anchor, Figure/SPEC section 7: 0.258
    r = teaching.story_step(
        "finite_sample", teaching.PRESETS["Paper anchor: N = 10,000, d = 1024, L = 32"][1]
    )
    assert round(r.deff_iid / 32, 3) == 0.258


def test_finite_sample_bias_vanishes_as_N_grows():
    S = teaching.population_similarity("correlated", teaching.Knobs(L=10))
    gaps = [
        np.abs(teaching.finite_sample_similarity(S, n, 64) - S).max() for n in (100, 10_000, 10**12)
    ]
    assert gaps == sorted(gaps, reverse=True)
    assert gaps[-1] < 1e-9
    biased = teaching.finite_sample_similarity(S, 100, 64)
    np.testing.assert_array_equal(np.diag(biased), 1.0)
    np.testing.assert_array_equal(biased, biased.T)
    # bias lowers D_eff: the finite-sample step sits below its population value
    r = teaching.story_step("finite_sample", teaching.Knobs(L=10, n=100, d=64))
    assert r.deff < r.deff_population == r.deff_previous
    assert r.bias == pytest.approx(64 / 164)


@pytest.mark.parametrize("step", ["orthogonal_updates", "h0", "correlated", "independent"])
@pytest.mark.parametrize(("n", "d"), [(200, 40), (64, 128)])
def test_closed_forms_match_monte_carlo(step, n, d):
    """Mean over seeds of sampled linear CKA vs (1-b) S + b; unbiased CKA vs S itself.

    Observed worst entries: 0.007 (linear), 0.018 (unbiased); a wrong bias form such as
    S + b (no 1-b factor) is off by b * S >= 0.1 here, far outside the tolerance.
    """
    knobs = teaching.Knobs(L=8, h0=1.0, growth=1.2, rho=0.4)
    seeds = range(6)
    cka = np.mean(
        [similarity_matrix(teaching.sample_states(step, knobs, n, d, s)) for s in seeds], 0
    )
    unb = np.mean(
        [
            similarity_matrix(teaching.sample_states(step, knobs, n, d, s), "unbiased_cka")
            for s in seeds
        ],
        0,
    )
    population = teaching.population_similarity(step, knobs)
    expected = teaching.finite_sample_similarity(population, n, d)
    np.testing.assert_allclose(cka, expected, atol=0.015)
    np.testing.assert_allclose(unb, population, atol=0.035)
    assert effective_depth(cka) == pytest.approx(effective_depth(expected), rel=0.01)


def test_sample_step_reports_all_four_depths():
    out = teaching.sample_step("h0", teaching.Knobs(L=6, h0=2.0), 128, 32, seed=1)
    depths = out.depths()
    assert list(depths) == [
        "sampled, linear CKA",
        "closed form with bias b = d/(N+d)",
        "sampled, unbiased CKA",
        "closed form, N → ∞",
    ]
    assert depths["sampled, linear CKA"] < depths["closed form, N → ∞"]


def test_extreme_settings_are_clamped_not_errors():
    r = teaching.story_step("finite_sample", teaching.Knobs(L=48, n=16, d=512))
    assert np.isfinite(r.deff) and r.deff >= 1.0 and any("not much larger" in n for n in r.notes)
    r = teaching.story_step("h0", teaching.Knobs(L=500, h0=float("nan"), rho=3.0))
    assert r.knobs.L == 64 and r.knobs.h0 == teaching.Knobs().h0 and r.knobs.rho == 0.95
    assert len(r.notes) == 3
    for step, knobs in teaching.PRESETS.values():
        assert teaching.clamp_knobs(knobs)[1] == []
        assert np.isfinite(teaching.story_step(step, knobs).deff)


def test_sampling_budget_and_bad_input():
    big = teaching.Knobs(L=48)
    assert teaching.sampling_refusal(big, 2048, 512) is not None
    assert teaching.sampling_refusal(teaching.Knobs(L=8), 256, 64) is None
    with pytest.raises(DeffError, match="budget"):
        teaching.sample_states("h0", big, 2048, 512)
    with pytest.raises(DeffError, match="Unknown story step"):
        teaching.story_step("nope", teaching.Knobs())
    with pytest.raises(DeffError, match="N >= 4"):
        teaching.sample_states("h0", teaching.Knobs(L=4), 2, 8)


def test_sampled_construction_has_the_assumed_covariance():
    # per-entry covariance of the states: G_ij = a0 + sum_{m<=i,n<=j} rho^|m-n| sqrt(a_m a_n)
    knobs = teaching.Knobs(L=4, h0=0.5, growth=1.5, rho=0.5)
    x = (
        teaching.sample_states("correlated", knobs, 4000, 50, seed=3)
        .reshape(4, -1)
        .astype(np.float64)
    )
    a = teaching.update_sizes(4, 1.5)
    r = teaching.correlation_profile(4, 0.5)
    lags = np.abs(np.subtract.outer(np.arange(4), np.arange(4)))
    G = 0.5 + np.cumsum(np.cumsum(r[lags] * np.sqrt(np.outer(a, a)), 0), 1)
    np.testing.assert_allclose(x @ x.T / x.shape[1], G, rtol=0.02, atol=0.02)


def test_sweep_closed_form_against_the_sampled_constructions():
    from deffcore.measures.synthetic import orthogonal_updates

    n, d = 256, 32
    rows = teaching.sweep_closed_form(n, d, [4, 12], scale=0.7)
    by = {(r["construction"], r["L"]): r for r in rows}
    assert by[("independent states", 12)]["deff_over_L"] == pytest.approx(
        iid_reference_depth(n, d, 12) / 12
    )
    assert by[("orthogonal states", 12)]["deff_over_L"] == 1.0
    sampled = np.mean(
        [
            effective_depth(similarity_matrix(orthogonal_updates(n, d, 12, 0.7, seed=s).states))
            for s in range(4)
        ]
    )
    assert by[("orthogonal updates on h_0", 12)]["deff_over_L"] == pytest.approx(
        sampled / 12, rel=0.01
    )
    # orthogonal states cannot be built with N <= L: NaN, not an error
    assert np.isnan(teaching.sweep_closed_form(16, 8, [48])[2]["deff_over_L"])
    with pytest.raises(DeffError, match="positive scale"):
        teaching.sweep_closed_form(16, 8, [4], scale=0.0)


def test_story_curves_compare_with_the_previous_step_and_the_samples():
    knobs = teaching.Knobs(L=6, h0=2.0)
    # step 3's previous step is the F_L reference, which the charts draw once anyway
    curves, depths = teaching.story_curves(teaching.story_step("h0", knobs))
    assert list(curves) == list(depths) == ["this step (closed form)"]
    curves, depths = teaching.story_curves(teaching.story_step("growing", knobs))
    assert list(curves) == ["this step (closed form)", "previous step (3 · A persistent h_0)"]
    assert depths[list(depths)[1]] == pytest.approx(teaching.story_step("h0", knobs).deff)
    np.testing.assert_allclose(curves[list(curves)[1]][0], teaching.story_step("h0", knobs).rho)
    # step 2 is not compared with step 1 (D_eff = L would squash the chart)
    assert list(teaching.story_curves(teaching.story_step("orthogonal_updates", knobs))[1]) == [
        "this step (closed form)"
    ]
    final = teaching.story_step("finite_sample", knobs)
    sampled = teaching.sample_step("finite_sample", knobs, 64, 16)
    curves, depths = teaching.story_curves(final, sampled)
    assert curves["same construction, N → ∞"][1] == "population"
    assert depths["same construction, N → ∞"] == final.deff_population
    assert depths["independent states at this N, d (iid reference)"] == final.deff_iid
    assert depths["sampled, linear CKA"] == pytest.approx(effective_depth(sampled.S_cka))
    assert {"sampled, linear CKA", "sampled, unbiased CKA"} <= set(curves)


# ---------------------------------------------------------------------------------------------
# updates_vs_states: a hand computation


@pytest.mark.parametrize(("n", "d", "L", "scale"), [(64, 16, 6, 1.0), (30, 10, 5, 0.5)])
def test_updates_vs_states_against_a_hand_computation(n, d, L, scale):
    from deffcore.measures.teaching import updates_vs_states

    b = d / (n + d)  # linear CKA's finite-sample bias
    idx = np.arange(1, L + 1)
    lo, hi = np.minimum.outer(idx, idx), np.maximum.outer(idx, idx)
    # accumulated states h_i = h_0 + f_1 + ... + f_i, ||h_0||^2 = 1, ||f_m||^2 = scale^2
    S_h = (1 - b) * (1 + lo * scale**2) / (1 + hi * scale**2) + b
    np.fill_diagonal(S_h, 1.0)
    rho_h = [np.mean([S_h[i, i + k] for i in range(L - k)]) for k in range(1, L)]
    got = updates_vs_states(n, d, L, scale)
    np.testing.assert_allclose(got["rho_states"], rho_h, rtol=1e-12)
    assert got["deff_states"] == pytest.approx(L**2 / S_h.sum(), rel=1e-12)
    # independent updates: every lag is the bias, D_eff = L / (1 + b (L - 1))
    np.testing.assert_allclose(got["rho_updates"], [b] * (L - 1), rtol=1e-12)
    assert got["deff_updates"] == pytest.approx(L / (1 + b * (L - 1)), rel=1e-12)
    assert got["deff_updates"] > got["deff_states"]  # updates look deeper than the states


@pytest.mark.parametrize(("L", "scale"), [(1, 1.0), (4, 0.0), (4, -1.0), (4, float("nan"))])
def test_updates_vs_states_refuses_bad_knobs(L, scale):
    from deffcore.measures.teaching import updates_vs_states

    with pytest.raises(DeffError):
        updates_vs_states(64, 16, L, scale)
