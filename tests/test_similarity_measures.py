"""SPEC section 17: similarity measures beside linear CKA, against reference implementations.

References: `repsim` 0.1.5 (PWCCA, CCA; pinned in requirements-dev.txt), and for the measures
no installable package covers (rsatoolbox needs matplotlib and scikit-image; Huh et al.'s
platonic-rep is not on PyPI; no package computes Procrustes over layers) an independent naive
implementation here: scipy's orthogonal_procrustes / pdist / spearmanr, a dense transcription
of Huh et al.'s metrics.py, CCA from covariance eigenvalues.
"""

from __future__ import annotations

import numpy as np
import pytest
import repsim
import scipy.linalg
import scipy.spatial.distance
import scipy.stats
import torch

from deffcore.core.errors import DeffError, InvalidArgumentError, UndefinedSimilarityError
from deffcore.measures.similarity import similarity_matrix
from deffcore.measures.similarity_measures import (
    MEASURES,
    MeasureOptions,
    Permutation,
    measure_matrix,
    pairs_matrix,
    prepare_layers,
    prepared_bytes,
)

TOL = 1e-9


def _states(n=120, d=12, layers=4, seed=0, dtype=np.float64):
    """Accumulated, anisotropic layers: every measure is well inside (0, 1)."""
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((n, d)) * np.linspace(2.0, 0.2, d)
    out = [h.copy()]
    for _ in range(layers - 1):
        h = h + rng.standard_normal((n, d)) @ rng.standard_normal((d, d)) * 0.3
        out.append(h.copy())
    return np.stack(out).astype(dtype)


# ---------------------------------------------------------------------------------------------
# naive references


def _naive_procrustes(x, y):
    x = x - x.mean(0)
    y = y - y.mean(0)
    x = x / np.linalg.norm(x)
    y = y / np.linalg.norm(y)
    r, _ = scipy.linalg.orthogonal_procrustes(x, y)
    return 1.0 - np.linalg.norm(x @ r - y) ** 2 / 2.0


def _huh_knn(feats, k):
    # Huh et al. (platonic-rep metrics.py), compute_nearest_neighbors on L2-normalised features
    return (feats @ feats.T).fill_diagonal_(-1e8).argsort(dim=1, descending=True)[:, :k]


def _huh_mutual_knn(a, b, k):
    a = torch.nn.functional.normalize(torch.as_tensor(a), dim=-1)
    b = torch.nn.functional.normalize(torch.as_tensor(b), dim=-1)
    ka, kb = _huh_knn(a, k), _huh_knn(b, k)
    n = a.shape[0]
    rng = torch.arange(n).unsqueeze(1)
    ma = torch.zeros(n, n, dtype=a.dtype)
    mb = torch.zeros(n, n, dtype=a.dtype)
    ma[rng, ka] = 1.0
    mb[rng, kb] = 1.0
    return float(((ma * mb).sum(dim=1) / k).mean())


def _huh_hsic_unbiased(k_, l_):
    m = k_.shape[0]
    kt = k_.clone().fill_diagonal_(0)
    lt = l_.clone().fill_diagonal_(0)
    v = (
        torch.sum(kt * lt.T)
        + torch.sum(kt) * torch.sum(lt) / ((m - 1) * (m - 2))
        - 2 * torch.sum(torch.mm(kt, lt)) / (m - 2)
    )
    return v / (m * (m - 3))


def _huh_cknna(a, b, k):
    """Huh et al.'s cknna (unbiased=True), without its +1e-6 in the denominator (SPEC 17.2)."""
    a = torch.nn.functional.normalize(torch.as_tensor(a), dim=-1)
    b = torch.nn.functional.normalize(torch.as_tensor(b), dim=-1)
    n = a.shape[0]
    kk, ll = a @ a.T, b @ b.T

    def sim(k_, l_):
        kh = k_.clone().fill_diagonal_(float("-inf"))
        lh = l_.clone().fill_diagonal_(float("-inf"))
        _, ik = torch.topk(kh, k, dim=1)
        _, il = torch.topk(lh, k, dim=1)
        mk = torch.zeros(n, n, dtype=a.dtype).scatter_(1, ik, 1)
        ml = torch.zeros(n, n, dtype=a.dtype).scatter_(1, il, 1)
        mask = mk * ml
        return _huh_hsic_unbiased(mask * k_, mask * l_)

    return float(sim(kk, ll) / torch.sqrt(sim(kk, kk) * sim(ll, ll)))


def _naive_rsa(x, y, method):
    dx = scipy.spatial.distance.pdist(x, "correlation")
    dy = scipy.spatial.distance.pdist(y, "correlation")
    if method == "spearman":
        return scipy.stats.spearmanr(dx, dy).statistic
    return scipy.stats.pearsonr(dx, dy).statistic


def _naive_cca(x, y):
    """Canonical correlations from covariance matrices: eig(Sxx^-1 Sxy Syy^-1 Syx)."""
    x = x - x.mean(0)
    y = y - y.mean(0)
    sxx, syy, sxy = x.T @ x, y.T @ y, x.T @ y
    m = scipy.linalg.solve(sxx, sxy) @ scipy.linalg.solve(syy, sxy.T)
    ev = np.sort(np.real(np.linalg.eigvals(m)))[::-1][: min(x.shape[1], y.shape[1])]
    return np.sqrt(np.clip(ev, 0, 1))


def _naive_svcca(x, y, keep=0.99):
    def reduce(a):
        a = a - a.mean(0)
        u, s, _ = np.linalg.svd(a, full_matrices=False)
        share = np.cumsum(s**2) / np.sum(s**2)
        r = int(np.argmax(share >= keep)) + 1
        return u[:, :r] * s[:r]

    return float(np.mean(_naive_cca(reduce(x), reduce(y))))


def _pairwise(states, fn):
    n_layers = states.shape[0]
    s = np.eye(n_layers)
    for i in range(n_layers):
        for j in range(i + 1, n_layers):
            s[i, j] = s[j, i] = fn(states[i].astype(np.float64), states[j].astype(np.float64))
    return s


# ---------------------------------------------------------------------------------------------
# against references


@pytest.mark.parametrize("shape", [(120, 12), (30, 50)])
def test_procrustes_matches_scipy_orthogonal_procrustes(shape):
    st = _states(*shape)
    np.testing.assert_allclose(
        measure_matrix(st, "procrustes"), _pairwise(st, _naive_procrustes), atol=TOL
    )


def test_cka_pair_step_matches_similarity_matrix():
    st = _states(dtype=np.float32)
    np.testing.assert_allclose(measure_matrix(st, "cka"), similarity_matrix(st), atol=1e-7)
    wide = _states(30, 50)
    np.testing.assert_allclose(measure_matrix(wide, "cka"), similarity_matrix(wide), atol=TOL)


@pytest.mark.parametrize("k", [1, 5, 10])
def test_mutual_knn_matches_huh_et_al(k):
    st = _states()
    np.testing.assert_allclose(
        measure_matrix(st, "mutual_knn", k=k),
        _pairwise(st, lambda a, b: _huh_mutual_knn(a, b, k)),
        atol=TOL,
    )


@pytest.mark.parametrize("k", [2, 10])
def test_cknna_matches_huh_et_al(k):
    st = _states()
    np.testing.assert_allclose(
        measure_matrix(st, "cknna", k=k), _pairwise(st, lambda a, b: _huh_cknna(a, b, k)), atol=TOL
    )


@pytest.mark.parametrize("method", ["spearman", "pearson"])
def test_rsa_matches_scipy(method):
    st = _states(dtype=np.float32)
    np.testing.assert_allclose(
        measure_matrix(st, "rsa", rsa_method=method),
        _pairwise(st, lambda a, b: _naive_rsa(a, b, method)),
        atol=TOL,
    )


def test_pwcca_matches_repsim():
    st = _states()
    ref = repsim.pwcca([st[i] for i in range(st.shape[0])])
    np.testing.assert_allclose(measure_matrix(st, "pwcca"), ref, atol=TOL)


def test_cca_summary_matches_repsim_when_all_variance_is_kept():
    st = _states()
    ref = repsim.cca([st[i] for i in range(st.shape[0])])
    got = measure_matrix(st, "svcca", variance=1.0, cca_summary="mean_sq")
    np.testing.assert_allclose(got, ref, atol=TOL)


def test_svcca_matches_a_naive_reduce_then_cca():
    st = _states()
    # a decaying spectrum: the 99% cut keeps 6 to 9 of 12 directions by variance (squared
    # singular values), 11 to 12 by singular values, so the two rules give different numbers
    st[:, :, -6:] *= 0.2
    np.testing.assert_allclose(measure_matrix(st, "svcca"), _pairwise(st, _naive_svcca), atol=1e-8)
    # the 99% cut bites on these states (fewer than d components kept)
    kept = prepare_layers(st, "svcca")
    assert all(u.shape[1] < st.shape[2] for u in kept)


# ---------------------------------------------------------------------------------------------
# cases whose answer is known


@pytest.mark.parametrize("measure", MEASURES)
def test_identical_layers_give_one(measure):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((60, 8))
    st = np.stack([x, x, x])
    np.testing.assert_allclose(measure_matrix(st, measure), np.ones((3, 3)), atol=1e-10)


@pytest.mark.parametrize("measure", [m for m in MEASURES if m != "rsa"])
def test_rotation_invariant_measures_give_one_for_a_rotation(measure):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((60, 8)) * np.linspace(2, 0.5, 8)
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    s = measure_matrix(np.stack([x, x @ q]), measure)
    assert s[0, 1] == pytest.approx(1.0, abs=1e-10)


def test_rsa_is_invariant_to_per_passage_affine_maps_not_rotation():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((60, 8))
    y = x * rng.uniform(0.5, 2.0, (60, 1)) + rng.standard_normal((60, 1))
    assert measure_matrix(np.stack([x, y]), "rsa")[0, 1] == pytest.approx(1.0, abs=1e-12)
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    assert measure_matrix(np.stack([x, x @ q]), "rsa")[0, 1] < 0.99


@pytest.mark.parametrize("measure", MEASURES)
def test_symmetric_bitwise_with_unit_diagonal(measure):
    s = measure_matrix(_states(dtype=np.float32), measure)
    assert np.array_equal(s, s.T)
    assert np.all(np.diag(s) == 1.0)
    assert np.all(s[~np.eye(len(s), dtype=bool)] < 1.0)


@pytest.mark.parametrize("measure", MEASURES)
def test_a_permutation_of_the_second_layer_equals_permuting_the_states(measure):
    """The null's cheap path (index maps on prepared layers) is the measure on permuted states."""
    st = _states(60, 10, 3)
    pi = np.random.default_rng(4).permutation(60)
    opts = MeasureOptions(k=5)
    prep = prepare_layers(st, measure, opts)
    got = pairs_matrix(prep, measure, opts, Permutation(pi))
    for i, j in ((0, 1), (0, 2), (1, 2)):
        want = measure_matrix(np.stack([st[i], st[j][pi]]), measure, k=5)[0, 1]
        assert got[i, j] == pytest.approx(want, abs=1e-10)


@pytest.mark.parametrize("measure", MEASURES)
def test_independent_layers_are_far_below_dependent_ones(measure):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((200, 6))
    indep = measure_matrix(np.stack([x, rng.standard_normal((200, 6))]), measure)[0, 1]
    dep = measure_matrix(np.stack([x, x + 0.3 * rng.standard_normal((200, 6))]), measure)[0, 1]
    assert dep > indep + 0.2


# ---------------------------------------------------------------------------------------------
# bad input and memory


def test_bad_input_gets_one_sentence():
    st = _states()
    with pytest.raises(DeffError, match="Unknown similarity measure"):
        measure_matrix(st, "nope")
    with pytest.raises(InvalidArgumentError, match="k \\(nearest neighbours\\)"):
        measure_matrix(st, "mutual_knn", k=0)
    with pytest.raises(InvalidArgumentError, match="CKNNA needs k >= 2"):
        measure_matrix(st, "cknna", k=1)
    with pytest.raises(InvalidArgumentError, match="rsa_method"):
        measure_matrix(st, "rsa", rsa_method="kendall")
    with pytest.raises(InvalidArgumentError, match="variance"):
        measure_matrix(st, "svcca", variance=0.0)
    flat = st.copy()
    flat[1] = 1.0
    with pytest.raises(UndefinedSimilarityError, match="Layer 1"):
        measure_matrix(flat, "procrustes")
    flat[1] = 0.0
    with pytest.raises(UndefinedSimilarityError, match=r"Layer 1 .* zero"):
        measure_matrix(flat, "mutual_knn")


def test_memory_is_checked_before_allocation():
    n_states, n, d = 31, 4096, 576
    assert prepared_bytes("rsa", n_states, n, d) == 31 * (n * (n - 1) // 2) * 4
    assert prepared_bytes("procrustes", n_states, n, d) == 31 * n * d * 8
    assert prepared_bytes("cknna", n_states, n, d) == 31 * n * 10 * 16
    with pytest.raises(InvalidArgumentError, match="max_bytes"):
        measure_matrix(_states(), "rsa", max_bytes=1000)
