"""The trust rule (deffcore.statistics.trust_rule, `dc.trust`): a checkable claim, tested at its
edges,
on states whose population value is known, and on a slice of the calibration harness."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

import deffcore as dc
from deffcore.core.errors import DeffError
from deffcore.measures import teaching
from deffcore.statistics import trust_rule
from deffcore.statistics.trust_rule import assess, trust_badge

REPO = Path(__file__).resolve().parent.parent
D = 576  # SmolLM2's width


def test_dc_trust_is_the_function_and_the_module_keeps_its_api():
    assert callable(dc.trust) and dc.trust is trust_rule.trust
    assert dc.trust_badge is trust_rule.trust_badge and dc.Trust is trust_rule.Trust


# ---------------------------------------------------------------------------------------------
# the pieces, by hand


def test_gap_and_regime_with_the_tolerance():
    # D_eff / F_L = (D_eff/L) (L+1)/2: D_eff/L = 2/(L+1) is exactly F_L
    assert trust_rule.gap_of(2 / 13, 12) == pytest.approx(0.0, abs=1e-12)
    assert trust_rule.gap_of(0.1, 12) == pytest.approx(100 * (1 - 0.65))
    assert (
        trust_rule.regime_of(1.0) == trust_rule.regime_of(-1.0) == "at the reference"
    )  # ±1 point inclusive
    assert trust_rule.regime_of(1.01) == "below" and trust_rule.regime_of(-1.01) == "above"
    assert (
        trust_rule.regime_of(0.3) == trust_rule.regime_of(-0.2) == "at the reference"
    )  # the case
    assert trust_rule.regime_of(5.0, (-0.5, 9.0)) == "at the reference"  # the interval contains 0
    assert trust_rule.regime_of(0.5, (0.1, 0.9)) == "below"  # excludes 0: the sign, however small


def test_spread_and_passages_needed_closed_forms():
    assert trust_rule.spread(10_000) == pytest.approx(trust_rule.SPREAD_C / 100)
    # spread only: s sqrt(N / N*) = 0.02 -> N* = N (s / 0.02)^2
    assert trust_rule.passages_needed(1000, 0.0, 0.04) == 4000
    # bias only (1/N): b N / N* = 0.02
    assert trust_rule.passages_needed(1000, 0.06, 0.0) == 3000
    # both: the smallest N' with b n/N' + s sqrt(n/N') <= 0.02
    need = trust_rule.passages_needed(1000, 0.01, 0.03)
    assert 0.01 * 1000 / need + 0.03 * math.sqrt(1000 / need) <= 0.02
    assert 0.01 * 1000 / (need - 1) + 0.03 * math.sqrt(1000 / (need - 1)) > 0.02
    assert trust_rule.passages_needed(5000, 0.0, 0.01) == 5000  # already enough


def test_null_band_forms():
    band = trust_rule.null_band({"seeds": ["1", "2", "3"], "deff_over_L": [0.1, 0.2, 0.3]})
    assert band.seeds == 3 and band.low == pytest.approx(0.2 - 2 * 0.1)
    assert band.high == pytest.approx(0.4)
    given = trust_rule.null_band(
        {"seeds": ["1"] * 6, "low": 0.5, "high": 0.4, "deff_over_L": [1] * 6}
    )
    assert (given.low, given.high, given.seeds) == (0.4, 0.5, 6)
    values = trust_rule.null_band([0.1, 0.1, 0.1, 0.1, 0.1])
    assert (values.low, values.high, values.seeds) == (pytest.approx(0.1), pytest.approx(0.1), 5)
    assert (
        trust_rule.null_band(None) is None
        and trust_rule.null_band({}) is None
        and trust_rule.null_band([]) is None
    )


# ---------------------------------------------------------------------------------------------
# the rule's levels at their edges

L = 12
POINT = 0.10  # gap +35% at L = 12: the regime is far from the tolerance


def test_too_few_passages_are_noise_and_the_action_is_more_passages():
    t = assess(31, D, metric="unbiased_cka", point=POINT, layers=L)
    assert t.level == "noise" and "far too few" in t.sentence()
    assert (
        t.action == f"use ≥ {trust_rule.passages_needed(31, 0.0, trust_rule.spread(31)):,} passages"
    )
    assert t.badge == "○ noise"


def test_unbiased_cka_is_solid_where_the_spread_fits_two_percent():
    # the calibrated edge, by hand (not from the constants it checks): a spread of 1.5/sqrt(N)
    # is 2% at N = (1.5 / 0.02)^2 = 5,625 passages, and no lower
    edge = 5625
    assert trust_rule.spread(edge) == pytest.approx(0.02, abs=1e-15)
    assert trust_rule.spread(edge - 1) > 0.02
    solid = assess(edge, D, metric="unbiased_cka", point=POINT, layers=L)
    assert solid.level == "solid" and solid.action is None
    assert solid.reasons == (
        f"The estimated error of D_eff/L is {solid.error:.1%} (bias 0.0%, spread "
        f"{solid.error:.1%}, the prior 1.5/√N), within 2%; the regime (D_eff < F_L) is settled.",
    )
    assert solid.error == pytest.approx(trust_rule.spread(edge))
    below = assess(edge - 1, D, metric="unbiased_cka", point=POINT, layers=L)
    assert below.level == "indicative" and "solid needs at most 2%" in below.sentence()
    needed = trust_rule.passages_needed(edge - 1, 0.0, trust_rule.spread(edge - 1))
    assert below.action == f"use ≥ {needed:,} passages"


def test_linear_cka_bias_is_measured_against_unbiased_cka():
    n = 90_000  # spread 1.5 / 300 = 0.5%
    ok = assess(n, D, metric="cka", point=0.1, unbiased=0.101, layers=L)  # 1.0% bias
    assert ok.level == "solid" and not ok.bias_material
    assert (ok.bias_corrected, ok.corrected_by) == (0.101, "unbiased_cka")
    moved = assess(n, D, metric="cka", point=0.10, unbiased=0.11, layers=L)  # 9.1%
    assert moved.level == "indicative" and moved.bias_material
    assert moved.action == "switch to unbiased CKA" and moved.bias_corrected == 0.11
    far = assess(n, D, metric="cka", point=0.10, unbiased=0.2, layers=L)  # 50%
    assert far.level == "noise" and "above 10%" in far.sentence()
    blind = assess(n, D, metric="cka", point=0.10, layers=L)
    assert blind.level == "indicative" and blind.action == "compare with unbiased CKA"
    assert "not checked against unbiased CKA" in blind.sentence()


def test_solid_is_never_shown_for_an_interval_that_excludes_the_point():
    # the case: linear CKA, N = 2,000, d = 64, L = 12: point 0.1184, truth 0.1199,
    # percentile interval [0.1166, 0.1172] (the duplicates' shift), replicate mean 0.1169
    t = assess(2000, 64, metric="cka", point=0.1184, unbiased=0.1186, layers=12,
               interval=(0.1166, 0.1172), bootstrap_mean=0.1169)  # fmt: skip
    assert t.level != "solid" and "excludes the point 0.1184" in t.sentence()
    assert t.corrected_by == "bootstrap" and t.bias_corrected == pytest.approx(0.1199)
    assert t.action == "switch to unbiased CKA"
    # and never, over many random cases
    rng = np.random.default_rng(0)
    for _ in range(2000):
        point = rng.uniform(0.05, 1.0)
        lo, hi = sorted(point * (1 + rng.uniform(-0.03, 0.03, size=2)))
        t = assess(int(rng.integers(100, 10**6)), 64, metric="unbiased_cka", point=point,
                   layers=12, interval=(lo, hi), bootstrap_mean=(lo + hi) / 2)  # fmt: skip
        if not lo <= point <= hi:
            assert t.level != "solid"


def test_an_interval_can_make_a_small_n_solid_and_a_wide_one_demotes():
    narrow = assess(500, 16, metric="unbiased_cka", point=0.5, layers=6,
                    interval=(0.496, 0.504), bootstrap_mean=0.5)  # fmt: skip
    assert narrow.level == "solid" and narrow.interval == (0.496, 0.504)
    wide = assess(50_000, 16, metric="unbiased_cka", point=0.5, layers=6,
                  interval=(0.47, 0.53), bootstrap_mean=0.5)  # fmt: skip
    # spread = 1.5 x the half-width / point = 1.5 x 6% (heavy tails)
    assert wide.level == "indicative" and wide.error == pytest.approx(1.5 * 0.06)
    assert "measured by the bootstrap" in wide.sentence()
    # the half-width 1.6% alone would read solid; widened by 1.5 (2.4%) it does not
    edge = assess(50_000, 16, metric="unbiased_cka", point=0.5, layers=6,
                  interval=(0.492, 0.508), bootstrap_mean=0.5)  # fmt: skip
    assert edge.error == pytest.approx(0.024) and edge.level == "indicative"
    noisy = assess(50_000, 16, metric="unbiased_cka", point=0.5, layers=6,
                   interval=(0.4, 0.6), bootstrap_mean=0.5)  # fmt: skip
    assert noisy.level == "noise"


def test_a_regime_inside_the_error_band_is_not_settled():
    # gap +1.5 points, error band about 1.9 points at N = 1,200: the sign is not settled
    point = (1 - 0.015) * 2 / (L + 1)
    t = assess(1200, 64, metric="unbiased_cka", point=point, layers=L)
    assert t.regime == "below" and t.level == "indicative" and "not settled" in t.sentence()
    # the band's scale, by hand: a relative error e of D_eff/L is 100 e u gap points, where
    # u = (D_eff/L)(L+1)/2 = D_eff/F_L and gap = 100 (1 - u); so the sign is inside the band
    # exactly from u* = 1/(1 + e) up (a changed scale survived the test above)
    e = 1.5 / math.sqrt(1200)  # unbiased CKA: the spread alone
    assert t.error == pytest.approx(e) and f"(±{100 * e * point * (L + 1) / 2:.1f})" in t.sentence()
    edge = 1 / (1 + e)
    for u, settled in ((edge * 0.998, True), (edge * 1.002, False)):
        near = assess(1200, 64, metric="unbiased_cka", point=2 * u / (L + 1), layers=L)
        assert near.regime == "below" and ("not settled" not in near.sentence()) is settled, u
    # at the reference (|gap| <= 1): the claim "at F_L" stands, solid once N is large
    at = assess(100_000, 64, metric="unbiased_cka", point=2 / (L + 1), layers=L)
    assert at.regime == "at the reference" and at.level == "solid"


def test_cosine_is_never_solid():
    t = assess(10**6, 64, metric="cosine", point=0.3, layers=L)
    assert t.level == "indicative" and t.action == "switch to linear or unbiased CKA"


def test_the_null_is_a_separate_statement():
    few = trust_rule.NullBand(0.04, 0.05, 3)
    enough = trust_rule.NullBand(0.04, 0.05, 5)
    kw = {"metric": "unbiased_cka", "point": 0.1, "layers": L}
    t = assess(50_000, D, band=few, interval=(0.099, 0.101), **kw)
    assert t.level == "solid" and t.null == "too_few_seeds"  # the badge does not move
    assert "too few seeds to tell" in t.sentence()
    assert assess(50_000, D, band=enough, **kw).null == "no_interval"
    differs = assess(50_000, D, band=enough, interval=(0.099, 0.101), **kw)
    assert differs.null == "differs" and "Differs from random weights" in differs.sentence()
    touch = assess(50_000, D, band=enough, interval=(0.05, 0.101), **kw)  # shares 0.05
    assert touch.null == "overlaps"
    # never "differs" for an interval that overlaps the band, over many random cases
    rng = np.random.default_rng(1)
    for _ in range(2000):
        lo, hi = sorted(rng.uniform(0, 1, size=2))
        blo, bhi = sorted(rng.uniform(0, 1, size=2))
        t = assess(5000, 64, band=trust_rule.NullBand(blo, bhi, 5), interval=(lo, hi), **kw)
        if hi >= blo and lo <= bhi:
            assert t.null != "differs"
        else:
            assert t.null == "differs"


def test_trust_badge_keeps_the_apps_api():
    # the shipped default's numbers (SmolLM2, 4,096 windows): without an interval the spread
    # prior 1.5 / sqrt(4096) = 2.3% is above 2%; its bootstrap interval (2.2% half-width,
    # 3.3% once widened) agrees: indicative, and "use more passages" is the one action
    kw = {"metric": "cka", "value": 0.05839, "unbiased_value": 0.05845, "layers": 30}
    t = trust_badge(4096, D, null_band=(0.0417, 0.0419), null_seeds=3, **kw)
    assert t.level == "indicative" and t.null == "too_few_seeds" and t.regime == "below"
    assert t.action == f"use ≥ {t.solid_n:,} passages" and t.solid_n > 4096
    assert not t.bias_material and t.bias == pytest.approx(576 / 4672)
    boot = trust_badge(4096, D, ci=(0.05671, 0.05927), bootstrap_mean=0.05819, **kw)
    # bias 0.34% (|point - replicate mean| / point) + 1.5 x the 2.19% half-width
    half = (0.05927 - 0.05671) / 2 / 0.05839
    assert boot.level == "indicative"
    assert boot.error == pytest.approx((0.05839 - 0.05819) / 0.05839 + 1.5 * half)
    assert trust_badge(10_000, D, **kw).level == "solid"  # 1.5% spread
    assert trust_badge(8, D).level == "noise"
    d = t.to_dict()
    assert d["badge"] == "◐ indicative" and d["sentence"] == t.sentence()
    assert d["interval"] is None


def test_bad_arguments():
    with pytest.raises(DeffError, match="positive integers"):
        trust_badge(0, D)
    with pytest.raises(DeffError, match="positive integers"):
        trust_badge(10, 0)
    with pytest.raises(DeffError, match="Unknown similarity metric"):
        assess(100, 4, metric="euclid")
    with pytest.raises(DeffError, match="L >= 2"):
        assess(100, 4, layers=1)


def test_the_bootstrap_argument_is_a_count_or_a_result():
    """dc.trust(states, bootstrap=np.int64(20)) (or 2.5, "50", a dict) raised AttributeError
    'low' from reading it as a BootstrapResult; numpy's integer is now B, the rest a sentence."""
    states = dc.orthogonal_updates(n=32, d=8, layers=4, seed=0).states_with_h0()
    for bad in (2.5, "50", [1, 2], {"low": 0.1}):
        with pytest.raises(DeffError, match="bootstrap must be a number of replicates"):
            dc.trust(states, bootstrap=bad)
    same = dc.trust(states, bootstrap=np.int64(20), seed=1)
    assert same.interval == dc.trust(states, bootstrap=20, seed=1).interval is not None


# ---------------------------------------------------------------------------------------------
# dc.trust on states whose population value is known


def test_trust_of_sampled_states_is_solid_and_right_or_says_why_not():
    knobs = teaching.Knobs(L=8, h0=1.0, growth=1.1, rho=0.5)
    truth = dc.effective_depth(teaching.population_similarity("correlated", knobs)) / 8
    h = teaching.sample_states("correlated", knobs, 8000, 16, seed=0)  # h_1 .. h_8
    stack = np.concatenate([np.zeros_like(h[:1]) + h[:1] * 0.5, h])  # an h_0 in front
    t = dc.trust(stack, "unbiased_cka")
    assert t.layers == 8 and t.n == 8000 and t.d == 16
    assert t.point == pytest.approx(dc.effective_depth(dc.similarity_matrix(h, "unbiased_cka")) / 8)
    assert t.level == "solid" and abs(t.point / truth - 1) <= 0.02
    assert dc.trust(h, "unbiased_cka", h0=False).point == t.point  # an (L, N, d) stack
    lin = dc.trust(stack, "cka", bootstrap=20)
    lo, hi = lin.interval
    assert lin.corrected_by in ("unbiased_cka", "bootstrap") and lo < hi
    few = teaching.sample_states("correlated", knobs, 40, 64, seed=1)
    small = dc.trust(few, "cka", h0=False)
    assert small.level == "noise" and small.bias_material and small.layers == 8
    assert small.action == "switch to unbiased CKA"  # bias 25.7% > spread 23.7%
    assert "(bias 25.7%, spread 23.7%, the prior 1.5/√N)" in small.sentence()


# ---------------------------------------------------------------------------------------------
# the calibration harness, a tiny slice (the full grid: benchmarks/, table in BENCHMARKS.md)


def _harness():
    path = REPO / "benchmarks" / "bench_trust_calibration.py"
    spec = importlib.util.spec_from_file_location("bench_trust_calibration", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_calibration_harness_tiny_slice():
    h = _harness()
    results = h.run("tiny", 20)
    plain, boot = h.summarise(results["plain"]), h.summarise(results["bootstrap"])
    assert plain["datasets"] == 12 and boot["datasets"] == 6
    for summary in (plain, boot):
        assert h.goals_met(summary)
        counts = sum(r["datasets"] for r in summary["table"].values())
        assert counts == 2 * summary["datasets"]  # every dataset judged under both metrics
    # the judge itself: a hand-made row, 3% off, linear CKA biased by 40%
    row = {"N": 32, "d": 4, "L": 6, "truth": 0.25, "cka": 0.15, "unbiased_cka": 0.2575}
    j = h.judge(row, "unbiased_cka")
    assert j["error"] == pytest.approx(0.03) and j["level"] == "noise"  # N = 32: 11% spread
    assert h.judge(row, "cka")["level"] == "noise"
    assert "| unbiased_cka | noise |" in h.markdown(plain, "t")
    # the heavy-tailed grids: the same cases, the same truth, their own parts
    heavy = h.run("tiny", 10, tails=("multivariate_t",))
    assert set(heavy) == {"plain multivariate_t", "bootstrap multivariate_t"}
    assert [r["tails"] for r in heavy["plain multivariate_t"]] == ["multivariate_t"] * 12
    row = heavy["plain multivariate_t"][0]
    gauss = results["plain"][0]
    assert row["truth"] == gauss["truth"] and row["cka"] != gauss["cka"]
    assert "multivariate t3" in h.title_of("bootstrap multivariate_t", 10)
