"""Passage bootstrap: the fast Gram route against resample-and-recompute and the naive loop."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import deffcore as dc
from deffcore.core.errors import DeffError
from deffcore.measures import teaching
from deffcore.statistics.bootstrap import (
    bootstrap_costs,
    bootstrap_deff_over_L,
    bootstrap_similarities,
    resample_indices,
)


def walk(layers: int = 6, n: int = 40, d: int = 7, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (np.cumsum(rng.standard_normal((layers, n, d)), axis=0) + 3.0).astype(np.float32)


def naive_u_statistic_similarity(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Unbiased CKA of a resample straight from the definition: the HSIC_1 kernel summed over
    ordered tuples of distinct *slots* of the resampled sample, a tuple dropped when two of
    its slots hold the same passage. Uncentred float64 data (the kernel is translation
    invariant). Independent of the closed form in deffcore.statistics.bootstrap."""
    layers = x.shape[0]
    grams = [x[layer][idx] @ x[layer][idx].T for layer in range(layers)]
    tuples = [t for t in itertools.permutations(range(len(idx)), 4) if len(set(idx[list(t)])) == 4]
    a, b, c, e = (np.array(col) for col in zip(*tuples, strict=True))
    h = np.empty((layers, layers))
    for i in range(layers):
        for j in range(layers):
            k, l = grams[i], grams[j]
            h[i, j] = np.sum(k[a, b] * l[a, b] + k[a, b] * l[c, e] - 2 * k[a, b] * l[a, c])
    return h / np.sqrt(np.outer(np.diag(h), np.diag(h)))


@pytest.mark.parametrize("metric", ["cka", "cosine"])
def test_fast_replicates_equal_resampled_naive(metric: str) -> None:
    x = walk()
    indices = resample_indices(40, 4, seed=3)
    assert (np.diff(np.sort(indices[0])) == 0).any()  # duplicates are really present
    fast = bootstrap_similarities(x, indices, metric, method="gram")
    recompute = bootstrap_similarities(x, indices, metric, method="recompute")
    for idx, f, r in zip(indices, fast, recompute, strict=True):
        naive = dc.naive_similarity_matrix(x[:, idx], metric)
        np.testing.assert_allclose(f, naive, atol=1e-5, rtol=0)
        np.testing.assert_allclose(r, naive, atol=1e-5, rtol=0)


@pytest.mark.parametrize("method", ["gram", "recompute"])
def test_unbiased_replicates_are_the_u_statistic_over_distinct_passages(method: str) -> None:
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.standard_normal((3, 9, 3)), axis=0) + 2.0  # uncentred, float64
    indices = resample_indices(9, 3, seed=1)
    assert all(len(set(idx)) < 9 for idx in indices)  # every replicate repeats passages
    # one strip, and many strips (the off-diagonal blocks counted twice)
    for block in (None, 40):
        fast = bootstrap_similarities(x, indices, "unbiased_cka", method, block_size=block)
        for idx, f in zip(indices, fast, strict=True):
            np.testing.assert_allclose(f, naive_u_statistic_similarity(x, idx), atol=1e-12)
            # and not the estimator of the literally resampled rows (the old, biased way)
            resampled = dc.naive_similarity_matrix(x[:, idx], "unbiased_cka")
            assert np.abs(f - resampled).max() > 1e-3


def test_unbiased_replicate_without_repeats_is_the_estimator_itself() -> None:
    x = walk(layers=4, n=30, d=5)
    indices = np.stack([np.arange(30), np.random.default_rng(0).permutation(30)])
    for method in ("gram", "recompute"):
        for s in bootstrap_similarities(x, indices, "unbiased_cka", method=method):
            np.testing.assert_allclose(s, dc.similarity_matrix(x, "unbiased_cka"), atol=1e-9)


def test_unbiased_replicates_do_not_bring_the_bias_back() -> None:
    # the case: independent states, L=8, N=128, d=32; the truth D_eff/L is 1. With
    # literally resampled rows the replicate mean was 0.421 (linear CKA's 0.419) against a
    # point of 1.007, and the interval [0.374, 0.470] excluded both.
    x = dc.independent_states(128, 32, 8, seed=0).states
    res = bootstrap_deff_over_L(x, B=40, seed=0, metric="unbiased_cka")
    linear = dc.effective_depth(dc.similarity_matrix(x, "cka")) / 8
    assert linear < 0.5 < res.point
    assert abs(res.mean - res.point) < 0.01
    assert res.low <= 1.0 <= res.high and res.contains_point


COVERAGE_CASES = [
    ("independent", teaching.Knobs(L=6)),
    ("h0", teaching.Knobs(L=6, h0=1.0, growth=1.0, rho=0.0)),
    ("correlated", teaching.Knobs(L=6, h0=1.0, growth=1.1, rho=0.5)),
    ("growing", teaching.Knobs(L=6, h0=0.5, growth=1.5, rho=0.0)),
]


def test_unbiased_interval_covers_the_population_value() -> None:
    # 24 datasets with a known population D_eff/L (closed form of the teaching constructions,
    # SPEC section 7): the nominal 95% interval must cover it in >= 85% of them, and the
    # replicates' mean must sit on the point (the old replicates were shifted by 0.58)
    covered, shifts = 0, []
    for step, knobs in COVERAGE_CASES:
        truth = dc.effective_depth(teaching.population_similarity(step, knobs)) / knobs.L
        for s in range(6):
            x = teaching.sample_states(step, knobs, 200, 16, seed=100 + s)
            res = bootstrap_deff_over_L(x, B=50, seed=s, metric="unbiased_cka")
            covered += res.low <= truth <= res.high
            shifts.append(res.mean - res.point)
    assert covered / 24 >= 0.85, covered
    assert np.mean(np.abs(shifts)) <= 0.002, shifts
    assert np.max(np.abs(shifts)) <= 0.005, shifts


def test_result_fields_and_reproducibility() -> None:
    x = walk(n=60)
    res = bootstrap_deff_over_L(x, B=30, seed=1)
    again = bootstrap_deff_over_L(x, B=30, seed=1, method="recompute")
    np.testing.assert_allclose(res.samples, again.samples, atol=1e-6)
    assert res.samples.shape == (30,) and res.B == 30 and res.ci == 0.95
    assert res.point == pytest.approx(dc.effective_depth(dc.similarity_matrix(x)) / 6)
    assert res.low == pytest.approx(np.quantile(res.samples, 0.025))
    assert res.high == pytest.approx(np.quantile(res.samples, 0.975))
    assert res.low <= res.mean <= res.high
    assert res.high > res.low  # resampling actually varies the estimate
    other = bootstrap_deff_over_L(x, B=30, seed=2)
    assert not np.allclose(other.samples, res.samples)
    assert json.loads(json.dumps(res.to_dict()))["B"] == 30
    at_k = bootstrap_deff_over_L(x, B=5, seed=1, K=1)
    assert at_k.point == pytest.approx(dc.effective_depth(dc.similarity_matrix(x), K=1) / 6)
    # each replicate is the K = 1 statistic of its own resample (a naive recompute), not the
    # K = L-1 one nor the point (a surviving mutation replicated another statistic)
    idx = resample_indices(x.shape[1], 5, 1)
    naive = [dc.effective_depth(dc.similarity_matrix(x[:, i]), K=1) / 6 for i in idx]
    np.testing.assert_allclose(at_k.samples, naive, rtol=1e-9)
    full = bootstrap_deff_over_L(x, B=5, seed=1)
    assert np.abs(at_k.samples - full.samples).min() > 1e-3
    assert at_k.low == pytest.approx(np.quantile(naive, 0.025))


def test_basic_interval_reflects_the_percentile_interval_about_the_point() -> None:
    res = bootstrap_deff_over_L(walk(n=50, seed=5), B=40, seed=2)
    assert res.bias == pytest.approx(res.samples.mean() - res.point)
    # basic interval = [2 point - q_hi, 2 point - q_lo]: same width, mirrored about the point
    assert res.basic_low == pytest.approx(2 * res.point - np.quantile(res.samples, 0.975))
    assert res.basic_high == pytest.approx(2 * res.point - np.quantile(res.samples, 0.025))
    assert res.basic_high - res.basic_low == pytest.approx(res.high - res.low)
    d = res.to_dict()
    assert (d["basic_low"], d["basic_high"], d["bias"]) == (res.basic_low, res.basic_high, res.bias)


def test_duplicates_shift_replicates_down_and_the_basic_interval_corrects_towards_large_n() -> None:
    # Independent isotropic layers: at infinite N their CKA is 0 and D_eff/L = 1; at finite N
    # CKA's bias ~ d/(N+d) pulls D_eff/L down, more so in a resample with ~0.63 N distinct
    # passages. So every replicate falls below the point (the percentile interval misses it),
    # and the basic interval, which subtracts the bootstrap bias, moves towards 1.
    x = dc.independent_states(60, 40, 8, seed=0).states
    res = bootstrap_deff_over_L(x, B=40, seed=0)
    assert res.bias < 0 and res.high < res.point
    assert res.point < res.basic_low < res.basic_high < 1.0


def test_ci_narrows_with_more_passages() -> None:
    small = bootstrap_deff_over_L(walk(n=30, seed=4), B=40)
    large = bootstrap_deff_over_L(walk(n=400, seed=4), B=40)
    assert large.high - large.low < small.high - small.low


def test_bad_arguments() -> None:
    x = walk()
    with pytest.raises(DeffError, match="B must be an integer >= 2"):
        bootstrap_deff_over_L(x, B=1)
    with pytest.raises(DeffError, match="strictly between 0 and 1"):
        bootstrap_deff_over_L(x, ci=1.5)
    with pytest.raises(DeffError, match="Unknown bootstrap method"):
        bootstrap_deff_over_L(x, method="jackknife")
    for seed in (-1, 1.5, "0"):  # numpy's ValueError / TypeError before; checked first now
        with pytest.raises(DeffError, match="seed must be an integer >= 0"):
            bootstrap_deff_over_L(x, B=5, seed=seed)
    with pytest.raises(DeffError, match="strictly between 0 and 1"):
        bootstrap_deff_over_L(x, ci="0.9")
    same = bootstrap_deff_over_L(x, B=5, seed=np.int64(3)).samples
    assert np.array_equal(same, bootstrap_deff_over_L(x, B=5, seed=3).samples)


def _reference(x: np.ndarray, idx: np.ndarray, metric: str) -> np.ndarray:
    """float64 reference of one replicate: the naive loop on the resampled rows (linear CKA,
    cosine), the U-statistic's float64 feature route (unbiased CKA; checked against the
    explicit tuple sum above)."""
    x64 = np.asarray(x, dtype=np.float64)
    if metric == "unbiased_cka":
        return bootstrap_similarities(x64, idx[None], metric, method="recompute")[0]
    return dc.naive_similarity_matrix(x64[:, idx], metric)


@pytest.mark.parametrize("metric", ["cka", "unbiased_cka", "cosine"])
def test_streamed_replicates_with_small_blocks_equal_the_reference(metric: str) -> None:
    # block sizes that force many strips, many column chunks and replicate chunks
    x = walk(layers=5, n=41, d=6, seed=2)
    indices = resample_indices(41, 5, seed=4)
    for block in (1, 37, 211, 1999):
        fast = bootstrap_similarities(x, indices, metric, method="gram", block_size=block)
        for idx, f in zip(indices, fast, strict=True):
            np.testing.assert_allclose(f, _reference(x, idx, metric), atol=1e-6)
            np.testing.assert_array_equal(f, f.T)
            np.testing.assert_array_equal(np.diag(f), 1.0)


@pytest.mark.parametrize("metric", ["cka", "unbiased_cka", "cosine"])
def test_replicates_of_float32_states_have_float64_accuracy(metric: str) -> None:
    # few layers, thousands of passages, a large common offset: where float32 sums fail
    rng = np.random.default_rng(0)
    x = (np.cumsum(rng.standard_normal((3, 4000, 48)), axis=0) + 50.0).astype(np.float32)
    indices = resample_indices(4000, 2, seed=1)
    for block in (None, 444_001):  # default strips; 37-row strips (3 * 4000 * 37 + 1)
        fast = bootstrap_similarities(x, indices, metric, method="gram", block_size=block)
        for idx, f in zip(indices, fast, strict=True):
            ref = (
                bootstrap_similarities(x.astype(np.float64), idx[None], metric, "recompute")[0]
                if metric == "unbiased_cka"
                else dc.similarity_matrix(x.astype(np.float64)[:, idx], metric)
            )
            assert np.abs(f - ref).max() <= 1e-6
            np.testing.assert_array_equal(f, f.T)


def test_cost_model_and_auto_method() -> None:
    # gram: L d N^2/2 once + 4 * B * L(L+1)/2 * N^2/2; recompute: B * cheaper route
    costs = bootstrap_costs(n=10, d=3, n_layers=2, B=5)
    assert costs["gram"] == 2 * 3 * 50 + 4 * 5 * 3 * 50
    assert costs["recompute"] == 5 * min(10 * 9 * 3, 50 * (6 + 4))
    # unbiased CKA: twice the per-replicate work on both sides, recompute on the feature route
    unb = bootstrap_costs(n=10, d=3, n_layers=2, B=5, metric="unbiased_cka")
    assert unb["gram"] == 2 * 3 * 50 + 2 * 4 * 5 * 3 * 50
    assert unb["recompute"] == 2 * 5 * 10 * 9 * 3
    big = bootstrap_costs(n=10_000, d=1024, n_layers=32, B=100)
    assert big["gram"] * 5 < big["recompute"]
    narrow = bootstrap_costs(n=10_000, d=16, n_layers=32, B=100)  # d << L: recompute wins
    assert narrow["recompute"] < narrow["gram"]
    # measured: the feature-route recompute won at N=10,000, d=128, L=8
    assert (
        bootstrap_costs(n=10_000, d=128, n_layers=8, B=100)["recompute"]
        < (bootstrap_costs(n=10_000, d=128, n_layers=8, B=100)["gram"])
    )
    x = walk(layers=4, n=30, d=5)
    indices = resample_indices(30, 3, seed=0)
    auto = bootstrap_similarities(x, indices, "cka")
    for a, g in zip(auto, bootstrap_similarities(x, indices, "cka", method="gram"), strict=True):
        np.testing.assert_allclose(a, g, atol=1e-9)
