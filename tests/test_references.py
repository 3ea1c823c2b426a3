"""Matched references, update depth and the iid reference against closed forms and Monte Carlo."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import deffcore as dc
from deffcore.core.errors import DeffError
from deffcore.measures.references import (
    accumulated_similarity,
    iid_reference_depth,
    matched_references,
    update_depth,
    update_states,
)
from deffcore.measures.synthetic import centred_orthonormal


def minmax_matrix(L: int) -> np.ndarray:
    i = np.arange(1, L + 1)
    return np.minimum.outer(i, i) / np.maximum.outer(i, i)


@pytest.mark.parametrize("L", [2, 5, 16, 33])
def test_equal_sizes_without_h0_give_F_L(L: int) -> None:
    s = accumulated_similarity(np.full(L, 2.5))
    np.testing.assert_allclose(s, minmax_matrix(L), atol=1e-14)
    assert dc.effective_depth(s) == pytest.approx(2 * L / (L + 1), rel=1e-12)
    # uncorrelated updates: r = delta is the same as r = None
    np.testing.assert_allclose(accumulated_similarity(np.full(L, 2.5), r=np.eye(L)[0]), s)


def test_hand_computed_closed_form() -> None:
    # a0 = 1, a = (1, 2): A = (2, 4) -> S(1, 2) = 2/4
    s = accumulated_similarity([1.0, 2.0], a0=1.0)
    assert s[0, 1] == pytest.approx(0.5)
    # r(1) = 0.5: G_11 = 1 + 1, G_12 = 1 + 1 + 0.5*sqrt(2), G_22 = 1 + 1 + 2 + 2*0.5*sqrt(2)
    g12, g22 = 2 + 0.5 * np.sqrt(2), 4 + np.sqrt(2)
    s = accumulated_similarity([1.0, 2.0], a0=1.0, r=[1.0, 0.5])
    assert s[0, 1] == pytest.approx(g12**2 / (2 * g22))


def test_closed_form_matches_monte_carlo() -> None:
    """Isotropic updates with sizes a_m, AR(1) correlations r(k) = phi^k, and an initial state."""
    n, d, L, phi, a0 = 40_000, 6, 5, 0.6, 0.5
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 2.0, L)
    lags = np.abs(np.subtract.outer(np.arange(L), np.arange(L)))
    chol = np.linalg.cholesky(phi**lags)
    z = rng.standard_normal((L, n, d))
    f = np.sqrt(a)[:, None, None] * np.einsum("mk,knd->mnd", chol, z)
    h0 = np.sqrt(a0) * rng.standard_normal((n, d))
    states = h0 + np.cumsum(f, axis=0)
    measured = dc.similarity_matrix(states)
    closed = accumulated_similarity(a, a0=a0, r=phi ** np.arange(L))
    np.testing.assert_allclose(measured, closed, atol=5e-3)
    # the measured update profile recovers r^2, so F_h0+corr reproduces the measured D_eff
    refs = matched_references(np.concatenate([h0[None], states]))
    assert refs.F_h0_corr == pytest.approx(dc.effective_depth(measured), rel=0.01)
    assert abs(refs.gap_Fh0corr) < 1.0
    # without the correlations the reference is much deeper: the gap is the correlation
    assert refs.F_h0_norm > refs.F_h0_corr + 0.1


def orthogonal_isotropic_updates(n: int, d: int, L: int, sizes: np.ndarray) -> np.ndarray:
    """h_0 = 0 and updates f_m = sqrt(n a_m) Q_m: exactly orthogonal, isotropic, centred."""
    q = centred_orthonormal(n, L * d, np.random.default_rng(1)) * np.sqrt(n)
    f = np.stack([np.sqrt(sizes[m]) * q[:, m * d : (m + 1) * d] for m in range(L)])
    return np.concatenate([np.zeros((1, n, d)), np.cumsum(f, axis=0)])


def test_matched_references_reduce_to_F_L_and_to_each_other() -> None:
    n, d, L = 100, 4, 6
    with_h0 = orthogonal_isotropic_updates(n, d, L, np.ones(L))
    refs = matched_references(with_h0)
    FL = 2 * L / (L + 1)
    # equal sizes, no initial state: every reference is F_L, and so is the measured D_eff
    for value in (refs.F_L, refs.F_norm, refs.F_h0_norm, refs.F_h0_corr, refs.deff):
        assert value == pytest.approx(FL, rel=1e-6)
    assert refs.a0 == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(refs.rho_upd, 0.0, atol=1e-12)
    # unequal sizes and an initial state: orthogonal updates still give F_h0+corr = F_h0+norm
    sizes = np.linspace(1.0, 4.0, L)
    with_h0 = orthogonal_isotropic_updates(n, d, L + 1, np.concatenate([[2.0], sizes]))
    with_h0 = with_h0[1:]  # the first accumulated block becomes h_0
    refs = matched_references(with_h0)
    assert refs.a0 == pytest.approx(2.0 * n * d, rel=1e-9)
    np.testing.assert_allclose(refs.update_sizes, sizes * n * d, rtol=1e-9)
    assert refs.F_h0_corr == pytest.approx(refs.F_h0_norm, rel=1e-6)
    assert refs.F_norm == pytest.approx(dc.effective_depth(accumulated_similarity(sizes)))
    assert refs.F_norm != pytest.approx(FL, rel=1e-3)  # unequal sizes move F_norm off F_L
    assert refs.deff == pytest.approx(refs.F_h0_norm, rel=1e-6)  # isotropic: exact closed form
    d_json = json.loads(json.dumps(refs.to_dict()))
    assert set(d_json) >= {"F_L", "F_norm", "F_h0+norm", "F_h0+corr", "gap_pct_F_h0+corr"}
    assert d_json["gap_pct_F_L"] == pytest.approx(100 * (1 - refs.deff / FL))


def test_update_depth() -> None:
    rng = np.random.default_rng(2)
    h0 = rng.standard_normal((50, 5))
    f = rng.standard_normal((4, 50, 5)) * np.array([1.0, 2.0, 3.0, 4.0])[:, None, None]
    with_h0 = np.concatenate([h0[None], h0 + np.cumsum(f, axis=0)])
    np.testing.assert_allclose(update_states(with_h0), f, atol=1e-12)
    assert isinstance(update_states(torch.from_numpy(with_h0)), torch.Tensor)
    ud = update_depth(with_h0)
    s_f = dc.similarity_matrix(f)
    assert ud.deff_upd == pytest.approx(dc.effective_depth(s_f))
    assert ud.deff_upd_over_L == pytest.approx(dc.effective_depth(s_f) / 4)
    assert ud.rho1_upd == pytest.approx(dc.lag_profile(s_f)[0])
    fc = f - f.mean(axis=1, keepdims=True)
    hc = with_h0[1:] - with_h0[1:].mean(axis=1, keepdims=True)
    ratio = np.mean([np.linalg.norm(fc[i]) / np.linalg.norm(hc[i]) for i in range(4)])
    assert ud.update_to_state_norm == pytest.approx(ratio)
    assert json.loads(json.dumps(ud.to_dict()))["rho1_upd"] == pytest.approx(ud.rho1_upd)


def test_iid_reference_depth() -> None:
    b = 1024 / 11024
    assert iid_reference_depth(10_000, 1024, 32) == pytest.approx(32 / (1 + 31 * b))
    assert round(iid_reference_depth(10_000, 1024, 32) / 32, 3) == 0.258
    assert iid_reference_depth(10**12, 1, 7) == pytest.approx(7.0)


def test_the_iid_reference_and_the_cka_bias_take_only_sizes() -> None:
    """cka_finite_sample_bias(-1, 8) was 1.14 and (0, 8) 1.0 (a 'bias' no CKA can have);
    iid_reference_depth(nan, 8, 4) was nan and (2.5 layers) a number; text a TypeError."""
    for n, d in ((0, 8), (-1, 8), (16, 0), (float("nan"), 8), (16, float("inf")), ("16", 8)):
        with pytest.raises(DeffError, match="n >= 1 passages and d >= 1 features"):
            dc.cka_finite_sample_bias(n, d)
    for n, d, L in ((float("nan"), 8, 4), (16, 8, 2.5), ("16", 8, 4), (16, 8, True), (0, 8, 4)):
        with pytest.raises(DeffError, match="numbers >= 1"):
            iid_reference_depth(n, d, L)
    assert dc.cka_finite_sample_bias(np.int64(56), np.float64(8.0)) == 0.125
    assert dc.cka_finite_sample_bias(float("inf"), 8) == 0.0  # the population: no bias
    assert iid_reference_depth(16, 8, 4.0) == iid_reference_depth(16, 8, 4)


def test_bad_reference_input() -> None:
    for bad in ({"a": "x"}, {"a": [1.0, "b"]}, {"a": [1.0], "a0": "0"}, {"a": [1.0], "r": ["1"]}):
        with pytest.raises(DeffError, match="must be numbers"):  # numpy's ValueError before
            accumulated_similarity(**bad)
    with pytest.raises(DeffError, match="at least L = 3"):
        accumulated_similarity([1.0, 1.0, 1.0], r=[1.0, 0.5])
    with pytest.raises(DeffError, match="r\\[0\\] = 1"):
        accumulated_similarity([1.0, 1.0], r=[0.5, 0.5])
    with pytest.raises(DeffError, match="zero size"):
        accumulated_similarity([0.0, 1.0])
    with pytest.raises(DeffError, match=">= 0"):
        accumulated_similarity([-1.0, 1.0])


def _naive_matched_depths(with_h0: np.ndarray, metric: str) -> tuple[float, float, float]:
    """F_norm, F_h0+norm, F_h0+corr straight from SPEC section 5, with explicit loops.

    Index 0 is the initial state: its correlation with every update is 0, with itself 1.
    """
    L = with_h0.shape[0] - 1
    centred = [x - x.mean(axis=0) for x in with_h0]
    updates = [with_h0[m] - with_h0[m - 1] for m in range(1, L + 1)]
    a = [0.0] + [float(np.sum((f - f.mean(axis=0)) ** 2)) for f in updates]  # a[m], m = 1..L
    a0 = float(np.sum(centred[0] ** 2))
    s_upd = dc.naive_similarity_matrix(np.stack(updates), metric)
    rho_upd = [np.mean([s_upd[i, i + k] for i in range(L - k)]) for k in range(1, L)]

    def corr(m: int, n: int) -> float:
        if m == n:
            return 1.0
        if m == 0 or n == 0:
            return 0.0  # the initial state is uncorrelated with the updates
        return float(np.sqrt(max(rho_upd[abs(m - n) - 1], 0.0)))

    def depth(sizes: list[float], with_corr: bool) -> float:
        G = np.zeros((L + 1, L + 1))
        for i in range(1, L + 1):
            for j in range(1, L + 1):
                G[i, j] = sum(
                    (corr(m, n) if with_corr else float(m == n)) * np.sqrt(sizes[m] * sizes[n])
                    for m in range(i + 1)
                    for n in range(j + 1)
                )
        S = np.array(
            [[G[i, j] ** 2 / (G[i, i] * G[j, j]) for j in range(1, L + 1)] for i in range(1, L + 1)]
        )
        return L**2 / S.sum()

    return depth(a, False), depth([a0, *a[1:]], False), depth([a0, *a[1:]], True)


@pytest.mark.parametrize("metric", ["cka", "unbiased_cka"])
def test_matched_references_match_naive_loops(metric: str) -> None:
    """Uncentred states and updates (large per-layer offsets): a_m and a_0 must be the sizes of
    the *centred* pooled matrices; unbiased CKA gives some negative rho_upd(k), which SPEC clamps
    at 0 before the square root."""
    rng = np.random.default_rng(0)
    n, d, L = 40, 5, 6
    h0 = rng.standard_normal((n, d)) + 10.0 * rng.standard_normal(d)
    f = rng.standard_normal((L, n, d)) * rng.uniform(0.5, 2.0, L)[:, None, None]
    f += 10.0 * rng.standard_normal((L, 1, d))  # non-zero mean per update
    f[1:] += 0.5 * f[:-1]  # correlated neighbours: rho_upd(1) > 0
    with_h0 = np.concatenate([h0[None], h0 + np.cumsum(f, axis=0)])
    refs = matched_references(with_h0, metric=metric)
    if metric == "unbiased_cka":
        assert min(refs.rho_upd) < -0.01  # the clamp matters here
    F_norm, F_h0_norm, F_h0_corr = _naive_matched_depths(with_h0, metric)
    assert refs.F_norm == pytest.approx(F_norm, rel=1e-9)
    assert refs.F_h0_norm == pytest.approx(F_h0_norm, rel=1e-9)
    assert refs.F_h0_corr == pytest.approx(F_h0_corr, rel=1e-9)
    assert refs.F_h0_corr < refs.F_h0_norm  # the correlations lower the reference
