"""dc.correlate (deffcore.measures.correlation): p-values against scipy and a brute-force
permutation,
and the robustness rows."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from scipy.stats import t as student_t

import deffcore as dc
from deffcore.measures.correlation import (
    EXACT_MAX_N,
    SMALL_N,
    CorrelationInputError,
    correlate,
    spearman_exact_p,
)

# A fixed example with a tie in x and one in y.
X = [0.070, 0.059, 0.048, 0.046, 0.036, 0.036, 0.034]
Y = [0.0, 0.1, 1.0, 0.9, 1.0, 1.5, 2.0]


def test_exported_from_the_package():
    assert dc.correlate is correlate


def test_pearson_and_spearman_against_scipy_on_a_fixed_example():
    c = correlate(X, Y)
    r, p = pearsonr(X, Y)
    rho, p_t = spearmanr(X, Y)
    assert c.n == 7
    assert c.pearson_r == pytest.approx(r, abs=1e-12)
    assert c.pearson_p == pytest.approx(p, abs=1e-12)
    assert c.spearman_rho == pytest.approx(rho, abs=1e-12)
    assert c.spearman_p_t == pytest.approx(p_t, abs=1e-12)
    # independently: r from numpy, p from the t form 2 P(T_{n-2} > |r| sqrt((n-2)/(1-r^2)))
    r_np = np.corrcoef(X, Y)[0, 1]
    t = abs(r_np) * math.sqrt(5 / (1 - r_np**2))
    assert c.pearson_r == pytest.approx(r_np, abs=1e-12)
    assert c.pearson_p == pytest.approx(2 * student_t.sf(t, 5), rel=1e-9)


def _naive_exact_p(x, y) -> float:
    """Independent: scipy's rho for every permutation of y itself (not of its ranks)."""
    observed = abs(spearmanr(x, y)[0])
    count = total = 0
    for perm in itertools.permutations(y):
        total += 1
        count += abs(spearmanr(x, perm)[0]) >= observed - 1e-9
    return count / total


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_permutation_p_matches_a_brute_force_over_y_itself(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=6)
    y = np.round(x + rng.normal(size=6), 0)  # rounding makes ties
    assert spearman_exact_p(x, y) == pytest.approx(_naive_exact_p(x, y), abs=1e-12)


def test_exact_p_closed_forms():
    # perfectly ordered, no ties: only the identity and the reversal reach |rho| = 1
    assert spearman_exact_p([1, 2, 3, 4, 5], [2, 4, 6, 8, 10]) == pytest.approx(2 / 120)
    assert spearman_exact_p([1, 2, 3], [3, 2, 1]) == pytest.approx(2 / 6)


def test_spearman_p_is_exact_for_small_n_and_t_above():
    small = correlate(X, Y)
    assert small.spearman_p == small.spearman_p_exact
    assert small.spearman_p_method.startswith("exact permutation over 5,040")
    rng = np.random.default_rng(3)
    x = rng.normal(size=EXACT_MAX_N + 3)
    big = correlate(x, x + rng.normal(size=x.size))
    assert big.spearman_p_exact is None and big.spearman_p == big.spearman_p_t
    assert "t distribution" in big.spearman_p_method
    with pytest.raises(CorrelationInputError, match="enumerates n!"):
        spearman_exact_p(x, x)


def test_the_exact_p_boundary_is_n_9_inclusive():
    """n = 9 is the largest n with the exact permutation p (9! orderings), n = 10 the first
    with scipy's t (a surviving mutation moved the boundary)."""
    assert EXACT_MAX_N == 9
    ordered = list(range(1, 10))
    at = correlate(ordered, [2 * v for v in ordered])
    assert at.spearman_p_exact == pytest.approx(2 / math.factorial(9), rel=1e-12)
    assert at.spearman_p == at.spearman_p_exact  # the exact one, by hand: 2 / 9!
    assert at.spearman_p_method == "exact permutation over 362,880 orderings"
    rng = np.random.default_rng(4)
    x = rng.normal(size=10)
    above = correlate(x, x + rng.normal(size=10))
    assert above.spearman_p_exact is None and above.spearman_p == above.spearman_p_t
    with pytest.raises(CorrelationInputError, match="n = 10 is above 9"):
        spearman_exact_p(x, x)


def test_leave_one_out_rows_are_the_correlation_without_each_model():
    labels = [f"m{i}" for i in range(7)]
    c = correlate(X, Y, labels=labels)
    assert [row["dropped"] for row in c.loo] == labels
    for i, row in enumerate(c.loo):
        xs = [v for j, v in enumerate(X) if j != i]
        ys = [v for j, v in enumerate(Y) if j != i]
        assert row["n"] == 6
        assert row["pearson_r"] == pytest.approx(pearsonr(xs, ys)[0], abs=1e-12)
        assert row["spearman_rho"] == pytest.approx(spearmanr(xs, ys)[0], abs=1e-12)
        assert row["spearman_p"] == pytest.approx(_naive_exact_p(xs, ys), abs=1e-12)
    assert c.extremes == {"largest_x": "m0", "smallest_x": "m6"}


def test_leave_one_family_out():
    fam = ["A", "A", "B", "B", "B", "C", "C"]
    c = correlate(X, Y, families=fam)
    assert [row["dropped_family"] for row in c.lofo] == ["A", "B", "C"]
    for row in c.lofo:
        keep = [f != row["dropped_family"] for f in fam]
        xs = [v for v, k in zip(X, keep, strict=True) if k]
        ys = [v for v, k in zip(Y, keep, strict=True) if k]
        assert row["n"] == len(xs) and row["dropped"] == 7 - len(xs)
        assert row["pearson_r"] == pytest.approx(pearsonr(xs, ys)[0], abs=1e-12)
    assert all("same_as_loo" not in row for row in c.lofo)
    single = correlate(X, Y, families=["A", "A", "B", "B", "B", "C", "D"], labels=list("abcdefg"))
    by_family = {row["dropped_family"]: row for row in single.lofo}
    assert by_family["D"]["same_as_loo"] == "g" and "same_as_loo" not in by_family["A"]
    loo_g = next(row for row in single.loo if row["dropped"] == "g")
    assert by_family["D"]["pearson_r"] == loo_g["pearson_r"]
    # a family that would leave fewer than 3 models is not dropped
    c2 = correlate([1, 2, 3, 4], [1, 3, 2, 4], families=["A", "A", "B", "A"])
    assert [row["dropped_family"] for row in c2.lofo] == ["B"]


def test_small_n_warns_and_large_n_does_not():
    assert any("Only n = 7" in w for w in correlate(X, Y).warnings)
    rng = np.random.default_rng(0)
    x = rng.normal(size=SMALL_N)
    assert correlate(x, x + rng.normal(size=SMALL_N)).warnings == []


def test_fit_line_is_least_squares():
    c = correlate([1, 2, 3, 4], [3, 5, 7, 9.0])
    assert c.slope == pytest.approx(2.0) and c.intercept == pytest.approx(1.0)
    assert c.pearson_r == pytest.approx(1.0)


def test_constant_input_is_undefined_with_a_warning():
    c = correlate([1, 2, 3, 4], [5, 5, 5, 5])
    assert math.isnan(c.pearson_r) and math.isnan(c.spearman_rho)
    assert any("same for every model" in w for w in c.warnings)


@pytest.mark.parametrize(
    ("x", "y", "message"),
    [
        ([1, 2, 3], [1, 2], "one value per model each"),
        ([1, 2], [1, 2], "at least 3 models"),
        ([1, 2, float("nan")], [1, 2, 3], "not finite for: 2"),
        ("abc", "abd", "sequences of numbers"),  # numpy's ValueError before
        ([1, 2, "x"], [1, 2, 3], "sequences of numbers"),
        ([[1, 2], [3]], [1, 2, 3], "sequences of numbers"),
    ],
)
def test_bad_input_is_one_sentence(x, y, message):
    with pytest.raises(CorrelationInputError, match=message):
        correlate(x, y)
    with pytest.raises(CorrelationInputError, match="labels must name"):
        correlate([1, 2, 3], [1, 2, 3], labels=["a"])


def test_the_exact_p_is_calibrated_under_the_null_and_the_t_p_is_not_at_n_5():
    """Independent x, y (the null holds): at n = 5 the exact test rejects at alpha = 0.05 with
    its exact size 2/120 (only |rho| = 1 has p <= 0.05), while scipy's t approximation rejects
    about 8% of the time: why the exact p is the reported one for small n."""
    rng = np.random.default_rng(0)
    sims = 1500
    exact = t = 0
    for _ in range(sims):
        x, y = rng.standard_normal(5), rng.standard_normal(5)
        exact += spearman_exact_p(x, y) <= 0.05
        t += spearmanr(x, y)[1] <= 0.05
    se = math.sqrt((1 / 60) * (59 / 60) / sims)
    assert abs(exact / sims - 1 / 60) < 3 * se
    assert t / sims > 0.06
