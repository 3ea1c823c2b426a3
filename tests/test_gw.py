"""Gromov–Wasserstein between layers: invariances, symmetry, the pair Spearman figures."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

import deffcore as dc
from deffcore.core.errors import DeffError, GWSolverError, InvalidStatesError
from deffcore.measures.gw import (
    PAPER_INIT,
    asymmetry,
    coupling_problem,
    distance_matrix,
    gw_distance,
    gw_matrix,
    gw_start_matrices,
    pair_spearman,
)


def _cloud(n: int = 40, d: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d))


def _rotation(d: int, seed: int = 1) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q


def test_distance_matrix_is_mean_normalised_symmetric_zero_diagonal():
    X = _cloud(10, 3)
    D = distance_matrix(X)
    direct = np.linalg.norm(X[:, None] - X[None], axis=-1)
    off = ~np.eye(10, dtype=bool)
    np.testing.assert_allclose(D, direct / direct[off].mean(), rtol=1e-10, atol=1e-12)
    assert D[off].mean() == pytest.approx(1.0)
    assert np.array_equal(D, D.T) and not np.diag(D).any()
    # scale-free, as CKA is
    np.testing.assert_allclose(distance_matrix(7.5 * X), D, atol=1e-10)
    sq = distance_matrix(X, "sqeuclidean")
    np.testing.assert_allclose(sq, direct**2 / (direct[off] ** 2).mean(), atol=1e-10)
    with pytest.raises(DeffError, match="Unknown GW metric"):
        distance_matrix(X, "manhattan")


@pytest.mark.parametrize("init", ["both", "product"])
def test_gw_of_a_rotated_permuted_copy_is_zero(init):
    X = _cloud()
    Y = (X @ _rotation(8))[np.random.default_rng(2).permutation(len(X))]
    assert gw_distance(distance_matrix(X), distance_matrix(Y), init=init) == pytest.approx(
        0.0, abs=1e-10
    )


def test_gw_between_different_clouds_is_positive_and_symmetric_in_value():
    X = _cloud(seed=0)
    Z = _cloud(seed=5) * np.linspace(0.2, 3.0, 8)  # anisotropic: a different shape
    C1, C2 = distance_matrix(X), distance_matrix(Z)
    forward, backward = gw_distance(C1, C2), gw_distance(C2, C1)
    assert forward > 1e-3
    assert backward == pytest.approx(forward, rel=1e-6)  # the solver is direction-blind here
    assert asymmetry([C1, C2], [(0, 1)]) < 1e-6 * forward


def test_both_inits_keep_the_smaller_local_optimum():
    C1 = distance_matrix(_cloud(seed=0))
    C2 = distance_matrix(_cloud(seed=5) * np.linspace(0.2, 3.0, 8))
    both = gw_distance(C1, C2, init="both")
    assert both == pytest.approx(
        min(gw_distance(C1, C2, init="product"), gw_distance(C1, C2, init="identity"))
    )
    # the identity coupling's own cost bounds GW from above (GW is a minimum over couplings)
    n = len(C1)
    aligned = float(np.sum((C1 - C2) ** 2)) / n**2
    assert both <= aligned + 1e-12


def test_gw_matrix_shape_symmetry_zero_diagonal_and_subsample():
    rng = np.random.default_rng(0)
    base = rng.standard_normal((30, 6))
    # layer 2 is a rotation of layer 1 (GW 0); layer 3 another shape
    states = np.stack([base, base @ _rotation(6), rng.standard_normal((30, 6)) ** 3])
    G = gw_matrix(states, n=20, seed=3)
    assert G.shape == (3, 3)
    assert np.array_equal(G, G.T) and not np.diag(G).any()
    assert G[0, 1] == pytest.approx(0.0, abs=1e-10)
    assert G[0, 2] > 1e-3 and G[1, 2] > 1e-3
    assert dc.gw_matrix is gw_matrix
    # the same seed draws the same passages; n above N uses all of them
    np.testing.assert_array_equal(G, gw_matrix(states, n=20, seed=3))
    assert gw_matrix(states, n=500).shape == (3, 3)
    with pytest.raises(InvalidStatesError):
        gw_matrix(states[0])
    with pytest.raises(DeffError, match="at least 2 passages"):
        gw_matrix(states, n=1)


def test_entropic_option_runs_and_orders_like_exact():
    X = _cloud(30, seed=0)
    Y = (X @ _rotation(8))[::-1]
    Z = _cloud(30, seed=7) ** 3
    same = gw_distance(distance_matrix(X), distance_matrix(Y), solver="entropic", epsilon=0.05)
    other = gw_distance(distance_matrix(X), distance_matrix(Z), solver="entropic", epsilon=0.05)
    assert 0.0 <= same < other
    with pytest.raises(DeffError, match="Unknown GW solver"):
        gw_distance(distance_matrix(X), distance_matrix(Y), solver="sinkhorn")


def test_pair_spearman_against_scipy_on_a_fixed_example():
    G = np.array([[0, 1.0, 2.5, 2.0], [1.0, 0, 1.2, 3.0], [2.5, 1.2, 0, 0.5], [2.0, 3.0, 0.5, 0]])
    S = np.array([[1, 0.9, 0.4, 0.5], [0.9, 1, 0.7, 0.2], [0.4, 0.7, 1, 0.95], [0.5, 0.2, 0.95, 1]])
    # pairs i < j in row order: (1,2) (1,3) (1,4) (2,3) (2,4) (3,4)
    g = [1.0, 2.5, 2.0, 1.2, 3.0, 0.5]
    s = [0.9, 0.4, 0.5, 0.7, 0.2, 0.95]
    lag = [1, 2, 3, 1, 2, 1]
    out = pair_spearman(G, S)
    assert out["spearman_gw_cka"] == pytest.approx(spearmanr(g, s)[0])
    assert out["spearman_lag_gw"] == pytest.approx(spearmanr(lag, g)[0])
    assert out["spearman_lag_cka"] == pytest.approx(spearmanr(lag, s)[0])
    assert out["spearman_gw_cka"] == pytest.approx(-1.0)  # g is the reverse order of s


def _neighbours(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two clouds like neighbouring layers: the second is the first plus a little noise."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((40, 8))
    return distance_matrix(X), distance_matrix(X + 0.3 * rng.standard_normal((40, 8)))


def test_the_product_start_is_pots_default_and_stalls_where_the_default_does_not():
    """The paper's start (`init="product"`) is POT's own G0 = p q^T; on two neighbouring
    clouds it ends in a local optimum far above the identity alignment's cost, which the
    default (the lower of the two starts, SPEC 13.1) keeps."""
    import ot

    C1, C2 = _neighbours()
    n = len(C1)
    p = np.full(n, 1.0 / n)
    pot = ot.gromov.gromov_wasserstein2(
        C1, C2, p, p, loss_fun="square_loss", symmetric=True, G0=np.outer(p, p)
    )
    product = gw_distance(C1, C2, init="product")
    assert product == pytest.approx(float(pot), rel=1e-12)
    assert PAPER_INIT == "product"
    # the GW objective of T = I/n, computed by hand
    aligned = float(np.sum((C1 - C2) ** 2)) / n**2
    default = gw_distance(C1, C2)
    assert default == gw_distance(C1, C2, init="both")
    assert default == pytest.approx(aligned, rel=1e-9)
    assert product > 3 * default


def _random_walk(layers: int = 6, n: int = 60, d: int = 8, seed: int = 0) -> np.ndarray:
    """(layers, n, d): each layer the previous one plus a standard normal step."""
    return np.cumsum(np.random.default_rng(seed).standard_normal((layers, n, d)), axis=0)


def test_the_default_is_the_minimum_over_the_two_starts_on_a_random_walk():
    """SPEC 13.1: a GW distance is a minimum over couplings, so the default is the lower
    objective of the product and identity starts. On a 6-layer random walk (60 points, d = 8)
    the product start stalls at about 0.06 for every pair (rho(GW, CKA) = -0.14); the default
    is never above either start, is exactly their minimum, and orders the pairs as CKA does."""
    from deffcore.measures.similarity import similarity_matrix

    states = _random_walk()
    by_start = gw_start_matrices(states, n=60)
    assert set(by_start) == {"product", "identity"}
    G = gw_matrix(states, n=60)
    iu = np.triu_indices(6, k=1)
    for start, M in by_start.items():
        assert (G[iu] <= M[iu]).all(), start
        np.testing.assert_array_equal(M, gw_matrix(states, n=60, init=start))
    np.testing.assert_array_equal(G, np.minimum(by_start["product"], by_start["identity"]))
    product = by_start["product"][iu]
    assert product.min() > 0.05 and product.max() < 0.07  # the stall
    assert G[iu].min() < 0.03
    S = similarity_matrix(states, "cka")
    assert pair_spearman(G, S)["spearman_gw_cka"] < -0.8
    assert pair_spearman(by_start["product"], S)["spearman_gw_cka"] > -0.5


def test_gw_matrix_default_start_is_the_lower_of_the_two():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 6))
    states = np.stack([X, X + 0.3 * rng.standard_normal((30, 6)), rng.standard_normal((30, 6))])
    G = gw_matrix(states, n=30)
    C = [distance_matrix(x) for x in states]
    for i, j in ((0, 1), (0, 2), (1, 2)):
        assert G[i, j] == min(
            gw_distance(C[i], C[j], init="product"), gw_distance(C[i], C[j], init="identity")
        )
    assert G[0, 1] != pytest.approx(gw_matrix(states, n=30, init="product")[0, 1], rel=1e-3)


def test_a_failed_entropic_solve_is_an_error_in_one_sentence():
    """epsilon = 1e-300: Sinkhorn underflows, POT returns an all-zero plan and GW = 0."""
    C1, C2 = _neighbours()
    with pytest.raises(GWSolverError) as err:
        gw_distance(C1, C2, solver="entropic", epsilon=1e-300)
    text = str(err.value)
    assert "no valid coupling" in text and "epsilon = 1e-300" in text
    assert "\n" not in text and text.count(". ") == 0 and text.endswith(".")
    with pytest.raises(GWSolverError):
        gw_matrix(np.random.default_rng(0).standard_normal((3, 20, 4)), solver="entropic",
                  epsilon=1e-300)  # fmt: skip
    # a working epsilon still answers
    assert gw_distance(C1, C2, solver="entropic", epsilon=0.05) > 0


def test_coupling_problem_on_hand_made_plans():
    p = np.full(4, 0.25)
    q = np.full(4, 0.25)
    assert coupling_problem(np.eye(4) / 4, p, q, 0.1) is None
    assert coupling_problem(np.outer(p, q), p, q, 0.0) is None
    assert "not sum" in coupling_problem(np.zeros((4, 4)), p, q, 0.0)
    assert "not finite" in coupling_problem(np.full((4, 4), np.nan), p, q, 0.0)
    assert "not finite" in coupling_problem(np.eye(4) / 4, p, q, float("inf"))
    skew = np.eye(4) / 4
    skew[0, 0], skew[0, 1] = 0.3, -0.05  # rows still sum to p, one entry negative
    assert "negative" in coupling_problem(skew, p, q, 0.1)
    off = np.eye(4) / 4 * 1.02  # 2% too much mass everywhere: beyond the 1% tolerance
    assert "not sum" in coupling_problem(off, p, q, 0.1)
    assert coupling_problem(np.eye(4) / 4 * 1.005, p, q, 0.1) is None  # Sinkhorn's slack


def test_a_round_off_negative_value_is_stored_as_zero(monkeypatch):
    """POT can return -1e-17 for identical clouds; a GW^2 is never below 0 (`_solve`'s floor),
    so the default keeps 0, not the negative round-off of either start."""
    import ot

    C = distance_matrix(_cloud(12, 4, seed=5))
    n = C.shape[0]

    def solver(C1, C2, p, q, **kwargs):
        return -1e-17, {"T": np.full((n, n), 1.0 / n**2)}

    monkeypatch.setattr(ot.gromov, "gromov_wasserstein2", solver)
    for init in ("both", "product", "identity"):
        assert gw_distance(C, C, init=init) == 0.0


def test_gw_distance_refuses_what_is_not_a_distance_matrix():
    """gw_distance(states_a, states_b) with (N, d) states, not (N, N) distances, raised
    numpy's 'shapes not aligned' ValueError; text was numpy's conversion error; NaN, a
    negative or an asymmetric 'distance' gave a number for a problem POT was told is
    symmetric. Each is one sentence naming the argument."""
    rng = np.random.default_rng(0)
    C = distance_matrix(rng.standard_normal((6, 3)))
    asym = C.copy()
    asym[0, 1] += 0.5
    for bad in (rng.standard_normal((6, 3)), "x", np.full((6, 6), np.nan), -C, asym, C[None]):
        with pytest.raises(InvalidStatesError, match="C2 must be"):
            gw_distance(C, bad)
        with pytest.raises(InvalidStatesError, match="C1 must be"):
            gw_distance(bad, C)
    assert gw_distance(C, C) == pytest.approx(0.0, abs=1e-12)
