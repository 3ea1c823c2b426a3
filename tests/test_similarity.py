"""Similarity matrices against a naive float64 reference, closed forms and invariances."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import deffcore as dc
from deffcore.core.errors import DeffError, InvalidStatesError
from deffcore.measures.similarity import choose_route, route_costs

METRICS = ("cka", "unbiased_cka", "cosine")


def correlated_states(n: int = 60, d: int = 9, layers: int = 5, seed: int = 0) -> np.ndarray:
    """(L, N, d) float32 with a random walk across layers and a large non-zero mean."""
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.standard_normal((layers, n, d)), axis=0) + 5.0
    return x.astype(np.float32)


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("route", ["gram", "feature", "auto"])
@pytest.mark.parametrize(("n", "d"), [(60, 9), (12, 40)])
def test_matches_naive_reference(metric: str, route: str, n: int, d: int) -> None:
    x = correlated_states(n=n, d=d)
    slow = dc.naive_similarity_matrix(x, metric)
    # small blocks stream several row blocks (the symmetric strips of the Gram route)
    blocked = dc.similarity_matrix(x, metric, route=route, block_size=5 * n * 7)
    np.testing.assert_allclose(blocked, slow, atol=1e-5, rtol=0)
    fast = dc.similarity_matrix(x, metric, route=route)
    assert fast.dtype == np.float64 and fast.shape == (5, 5)
    np.testing.assert_allclose(fast, slow, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(fast, fast.T)
    if metric != "unbiased_cka":
        np.testing.assert_array_equal(np.diag(fast), 1.0)


def test_linear_cka_of_one_feature_is_squared_correlation() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal(50)
    b = 0.3 * a + rng.standard_normal(50)
    x = np.stack([a[:, None], b[:, None]])
    expected = np.corrcoef(a, b)[0, 1] ** 2
    for route in ("gram", "feature"):
        assert dc.similarity_matrix(x, route=route)[0, 1] == pytest.approx(expected, abs=1e-12)


def test_cosine_hand_computed() -> None:
    # passage 0: (1,0) vs (1,1) -> 1/sqrt(2); passage 1: (0,2) vs (0,-3) -> -1
    x = np.array([[[1.0, 0.0], [0.0, 2.0]], [[1.0, 1.0], [0.0, -3.0]]])
    s = dc.similarity_matrix(x, "cosine")
    assert s[0, 1] == pytest.approx((1 / np.sqrt(2) - 1) / 2, abs=1e-12)


@pytest.mark.parametrize("metric", ["cka", "unbiased_cka"])
def test_cka_invariances(metric: str) -> None:
    x = correlated_states(n=40, d=6).astype(np.float64)
    rng = np.random.default_rng(2)
    base = dc.similarity_matrix(x, metric)
    q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    rotated = np.einsum("lnd,de->lne", x, q)
    scaled = x * np.array([3.0, 0.1, 7.0, 1.0, 2.5])[:, None, None]
    shifted = x + rng.standard_normal((5, 1, 6)) * 100.0
    for variant in (rotated, scaled, shifted):
        np.testing.assert_allclose(dc.similarity_matrix(variant, metric), base, atol=1e-9)
    # a non-orthogonal linear map does change CKA: the invariance test can fail
    skew = np.einsum("lnd,de->lne", x, np.diag([1.0, 10.0, 1.0, 1.0, 1.0, 0.1]))
    assert np.abs(dc.similarity_matrix(skew, metric) - base).max() > 1e-3


def test_cosine_invariant_to_rotation_and_scale_not_translation() -> None:
    x = correlated_states(n=30, d=5).astype(np.float64)
    rng = np.random.default_rng(3)
    base = dc.similarity_matrix(x, "cosine")
    q, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    np.testing.assert_allclose(
        dc.similarity_matrix(np.einsum("lnd,de->lne", x, q) * 4.0, "cosine"), base, atol=1e-12
    )
    assert np.abs(dc.similarity_matrix(x - 5.0, "cosine") - base).max() > 1e-3


def test_unbiased_cka_removes_finite_sample_bias() -> None:
    n, d = 200, 100
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, n, d)).astype(np.float32)
    off = ~np.eye(4, dtype=bool)
    biased = dc.similarity_matrix(x, "cka")[off]
    unbiased = dc.similarity_matrix(x, "unbiased_cka")[off]
    assert dc.cka_finite_sample_bias(n, d) == pytest.approx(1 / 3)
    np.testing.assert_allclose(biased, 1 / 3, atol=0.02)
    # sampling noise of one pair is ~0.01 here; the average over pairs is much tighter
    assert abs(unbiased.mean()) < 0.01
    np.testing.assert_allclose(unbiased, 0.0, atol=0.04)


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("route", ["gram", "feature"])
def test_block_size_does_not_change_result(metric: str, route: str) -> None:
    x = correlated_states(n=37, d=11, layers=4)
    ref = dc.similarity_matrix(x, metric, route=route)
    for block in (1, 50, 999, 10**9):
        got = dc.similarity_matrix(x, metric, route=route, block_size=block)
        np.testing.assert_allclose(got, ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize("metric", METRICS)
def test_torch_numpy_and_list_inputs_agree(metric: str) -> None:
    x = correlated_states()
    ref = dc.similarity_matrix(x, metric)
    np.testing.assert_array_equal(dc.similarity_matrix(torch.from_numpy(x), metric), ref)
    np.testing.assert_array_equal(dc.similarity_matrix(list(x), metric), ref)
    np.testing.assert_allclose(
        dc.similarity_matrix(x.astype(np.float64), metric), ref, atol=1e-5, rtol=0
    )


def test_read_only_and_big_endian_arrays(recwarn: pytest.WarningsRecorder) -> None:
    x = correlated_states()
    ref = dc.similarity_matrix(x)
    ro = x.copy()
    ro.flags.writeable = False
    np.testing.assert_array_equal(dc.similarity_matrix(ro), ref)
    np.testing.assert_array_equal(dc.similarity_matrix(x.astype(">f4")), ref)
    assert not [w for w in recwarn if "writable" in str(w.message)]


def test_input_is_not_modified() -> None:
    x = correlated_states()
    copy = x.copy()
    for metric in METRICS:
        dc.similarity_matrix(x, metric)
    np.testing.assert_array_equal(x, copy)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu() -> None:
    x = correlated_states()
    for metric in METRICS:
        gpu = dc.similarity_matrix(torch.from_numpy(x).cuda(), metric)
        np.testing.assert_allclose(gpu, dc.similarity_matrix(x, metric), atol=1e-5)


def test_cost_model_picks_the_cheaper_route() -> None:
    # N < d*L: the Gram route; N >> d*L: the feature route
    assert choose_route(n=2000, d=576, n_layers=30) == "gram"
    assert choose_route(n=100_000, d=16, n_layers=4) == "feature"
    costs = route_costs(10, 3, 2)
    assert costs["feature"] == 10 * 9 * 3
    assert costs["gram"] == 50 * (6 + 4)


def test_bad_input_messages() -> None:
    x = correlated_states(n=10, d=3, layers=3)
    with pytest.raises(InvalidStatesError, match="at least 4"):
        dc.similarity_matrix(x[:, :3], "unbiased_cka")
    with pytest.raises(InvalidStatesError, match=r"1 layer\(s\); at least 2"):
        dc.similarity_matrix(x[:1])
    bad = x.copy()
    bad[2, 4, 1] = np.nan
    bad[2, 5, 0] = np.inf
    with pytest.raises(InvalidStatesError, match=r"Layer 2 .* 2 NaN or inf"):
        dc.similarity_matrix(bad)
    with pytest.raises(InvalidStatesError, match=r"Layer 1 has shape \(9, 3\) but layer 0"):
        dc.similarity_matrix([x[0], x[1, :9], x[2]])
    with pytest.raises(InvalidStatesError, match="3-D"):
        dc.similarity_matrix(x[0])
    with pytest.raises(InvalidStatesError, match="1 passage"):
        dc.validate_states(x[:, :1])
    with pytest.raises(DeffError, match="Unknown similarity metric 'rbf'"):
        dc.similarity_matrix(x, "rbf")
    with pytest.raises(DeffError, match="Unknown route"):
        dc.similarity_matrix(x, route="fast")
    dc.validate_states(x)  # a good stack passes


def test_degenerate_layers_raise_instead_of_nan() -> None:
    x = correlated_states(n=10, d=3, layers=3)
    const = x.copy()
    const[1] = const[1, :1]  # every passage identical -> no variance
    with pytest.raises(InvalidStatesError, match=r"Layer 1 .* no variance"):
        dc.similarity_matrix(const)
    with pytest.raises(InvalidStatesError, match=r"Layer 1 .* non-positive unbiased HSIC"):
        dc.similarity_matrix(const, "unbiased_cka")
    zero = x.copy()
    zero[2, 3] = 0.0
    with pytest.raises(InvalidStatesError, match=r"Layer 2 .* 1 passage\(s\) .* zero"):
        dc.similarity_matrix(zero, "cosine")


def test_unbiased_cka_equals_brute_force_u_statistic() -> None:
    """Song et al. (2012), Theorem 2: the unbiased HSIC is the U-statistic over ordered distinct
    quadruples (i, j, q, r) of k_ij l_ij + k_ij l_qr - 2 k_ij l_iq. Summed by brute force here,
    on uncentred data, so it shares no algebra with either the fast path or the naive matrix
    formula (both could carry the same wrong constant and still agree with each other)."""
    from itertools import permutations

    rng = np.random.default_rng(7)
    n, d = 6, 3
    x = rng.standard_normal((3, n, d)) + np.array([2.0, -1.0, 4.0])  # non-zero mean
    x[1] += 0.8 * x[0]
    x[2] += 0.5 * x[1]

    def hsic_u(k: np.ndarray, l: np.ndarray) -> float:
        total = sum(
            k[i, j] * l[i, j] + k[i, j] * l[q, r] - 2.0 * k[i, j] * l[i, q]
            for i, j, q, r in permutations(range(n), 4)
        )
        return total / (n * (n - 1) * (n - 2) * (n - 3))

    grams = [layer @ layer.T for layer in x]
    want = np.array(
        [
            [hsic_u(ki, kj) / np.sqrt(hsic_u(ki, ki) * hsic_u(kj, kj)) for kj in grams]
            for ki in grams
        ]
    )
    for route in ("gram", "feature"):
        got = dc.similarity_matrix(x, "unbiased_cka", route=route)
        np.testing.assert_allclose(got, want, atol=1e-10)
    np.testing.assert_allclose(dc.naive_similarity_matrix(x, "unbiased_cka"), want, atol=1e-10)


def offset_walk(layers: int, n: int, d: int, seed: int = 0) -> np.ndarray:
    """(L, N, d) float32 random walk across layers plus a large common offset (not centred)."""
    rng = np.random.default_rng(seed)
    return (np.cumsum(rng.standard_normal((layers, n, d)), axis=0) + 50.0).astype(np.float32)


# Sizes where a float32 L x L contraction fails: few layers, thousands of passages, a large
# common offset. With the contraction in float32, (6, 3000, 512) was off by 1.5e-3 (Gram
# route), 7.7e-6 (cosine), and cosine was not symmetric.
@pytest.mark.parametrize(("layers", "n", "d"), [(2, 10_000, 64), (6, 3000, 256)])
def test_float32_states_give_float64_accuracy_and_exact_symmetry(layers: int, n: int, d: int):
    x = offset_walk(layers, n, d)
    x64 = x.astype(np.float64)  # the same float32 values, computed in float64 throughout
    for metric in METRICS:
        for route in ("gram", "feature") if metric != "cosine" else ("auto",):
            got = dc.similarity_matrix(x, metric, route=route)
            ref = dc.similarity_matrix(x64, metric, route=route)
            assert np.abs(got - ref).max() <= 1e-6, (metric, route, np.abs(got - ref).max())
            np.testing.assert_array_equal(got, got.T)
            np.testing.assert_array_equal(np.diag(got), 1.0)
    # the float64 path itself against the independent per-pair loop
    np.testing.assert_allclose(
        dc.similarity_matrix(x64, "cka", route="gram"),
        dc.naive_similarity_matrix(x, "cka"),
        atol=1e-9,
        rtol=0,
    )


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("route", ["gram", "feature"])
def test_symmetry_is_exact_for_any_block_size(metric: str, route: str) -> None:
    x = offset_walk(7, 53, 11, seed=3)
    ref = dc.naive_similarity_matrix(x, metric)
    for block in (1, 7, 13, 101, 389, 1001, None):
        got = dc.similarity_matrix(x, metric, route=route, block_size=block)
        np.testing.assert_array_equal(got, got.T)
        np.testing.assert_array_equal(np.diag(got), 1.0)
        np.testing.assert_allclose(got, ref, atol=1e-6, rtol=0)


def test_symmetry_survives_a_blas_that_sums_ij_and_ji_differently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A BLAS may sum entry (i, j) of A @ A.T in another order than (j, i); emulate one that
    # perturbs the lower triangle of every square accumulation. Mirroring the upper
    # triangle must still give S == S.T bitwise (averaging or A @ A.T alone would not).
    original = torch.Tensor.addmm_
    calls = []

    def skewed(self: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        out = original(self, *args, **kwargs)
        if out.ndim == 2 and out.shape[0] == out.shape[1] > 1:
            out[-1, 0] = out[-1, 0] * (1 + 1e-9) + 1e-12
            calls.append(1)
        return out

    monkeypatch.setattr(torch.Tensor, "addmm_", skewed)
    x = offset_walk(5, 40, 9)
    for metric in METRICS:
        got = dc.similarity_matrix(x, metric, route="gram")
        np.testing.assert_array_equal(got, got.T)
    assert calls  # the perturbation really ran


@pytest.mark.parametrize("metric", METRICS)
def test_non_finite_found_without_a_separate_pass(metric: str) -> None:
    # similarity_matrix checks finiteness on its float64 column means / row norms, not in
    # `_validated`; every kind of bad value must still be caught and located
    x = correlated_states(n=10, d=3, layers=4)
    cases = [
        [(1, 2, 0, np.nan)],
        [(3, 0, 2, np.inf)],
        [(2, 1, 1, np.inf), (2, 7, 1, -np.inf)],  # one column: its sum is NaN, not inf
        [(3, 0, 0, np.nan), (1, 4, 2, -np.inf)],  # two layers: the first one is named
    ]
    for entries in cases:
        bad = x.copy()
        for layer, row, col, value in entries:
            bad[layer, row, col] = value
        first = min(layer for layer, *_ in entries)
        count = sum(layer == first for layer, *_ in entries)
        with pytest.raises(InvalidStatesError, match=rf"Layer {first} .* {count} NaN or inf"):
            dc.similarity_matrix(bad, metric)
        # the cheap check agrees with the full pass of validate_states
        with pytest.raises(InvalidStatesError, match=rf"Layer {first} .* {count} NaN or inf"):
            dc.validate_states(bad)


def test_float64_overflow_of_finite_values_is_reported_as_such() -> None:
    x = correlated_states(n=10, d=3, layers=3).astype(np.float64)
    x[1] = 1e308 * (1.0 + np.random.default_rng(5).uniform(0, 0.5, (10, 3)))  # sums overflow
    with pytest.raises(InvalidStatesError, match=r"Layer 1 .* overflow float64"):
        dc.similarity_matrix(x)
    dc.validate_states(x)  # every value is finite
