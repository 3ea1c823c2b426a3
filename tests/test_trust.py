"""The trust badge (deffcore.trust): levels, thresholds at their edges, the one action."""

from __future__ import annotations

import pytest

from deffcore import trust
from deffcore.errors import DeffError
from deffcore.trust import trust_badge

D = 576  # SmolLM2's width


def test_eight_passages_are_noise_and_the_action_is_more_passages():
    t = trust_badge(8, D, metric="cka", value=0.9, unbiased_value=0.3)
    assert t.level == "noise"
    assert t.action == "use ≥ 2,304 passages"  # max(2,000, 4 x 576)
    assert t.badge == "○ noise"
    assert "far too few" in t.sentence()


@pytest.mark.parametrize("n", [4096, 10_000])
def test_paper_scale_run_is_solid(n):
    # a realistic N >= 4,096 run: linear and unbiased CKA agree within 1%
    t = trust_badge(n, D, metric="cka", value=0.300, unbiased_value=0.302)
    assert t.level == "solid"
    assert t.action is None and t.reasons == ()
    assert t.bias == pytest.approx(D / (n + D))
    assert not t.bias_material


def test_solid_needs_max_of_2000_and_4d_passages_exactly():
    assert trust.solid_n(576) == 2304
    assert trust.solid_n(64) == 2000
    assert trust.solid_n(1024) == 4096
    assert trust_badge(2304, 576, metric="cosine").level == "solid"
    below = trust_badge(2303, 576, metric="cosine")
    assert below.level == "indicative" and below.action == "use ≥ 2,304 passages"
    assert trust_badge(2000, 64, metric="unbiased_cka").level == "solid"
    assert trust_badge(1999, 64, metric="unbiased_cka").level == "indicative"


def test_noise_floor_is_32_passages_whatever_d():
    assert trust_badge(31, 2, metric="cosine").level == "noise"
    assert trust_badge(32, 2, metric="cosine").level == "indicative"


def test_default_run_at_n512_is_indicative_and_bias_not_material():
    # issue 12: switching to unbiased CKA moves the N = 512 default by 0.4%: not material
    t = trust_badge(512, D, metric="cka", value=0.2229, unbiased_value=0.2238)
    assert t.level == "indicative"
    assert not t.bias_material
    assert t.action == "use ≥ 2,304 passages"
    assert not any("unbiased" in r for r in t.reasons)


def test_material_bias_at_large_n_asks_for_unbiased_cka():
    t = trust_badge(4096, D, metric="cka", value=0.30, unbiased_value=0.33)  # 9.1% shift
    assert t.bias_material
    assert t.level == "indicative"
    assert t.action == "switch to unbiased CKA"
    assert "9.1%" in t.reasons[0]


def test_material_bias_beyond_half_is_noise():
    # N = 100 < d: bias 0.85, and it moves the number by 50%
    t = trust_badge(100, D, metric="cka", value=0.3, unbiased_value=0.6)
    assert t.level == "noise" and t.bias_material
    assert t.action == "use ≥ 2,304 passages"  # more passages fix bias and spread together


def test_bias_materiality_threshold_and_metrics():
    # 2% relative is the edge: 1.9% is not material, 2.1% is (either sign)
    assert not trust.bias_is_material(4096, D, "cka", 1.019, 1.0)
    assert trust.bias_is_material(4096, D, "cka", 1.021, 1.0)
    assert trust.bias_is_material(4096, D, "cka", 0.979, 1.0)
    # no comparison available: the bias itself decides (> 0.2)
    assert trust.bias_is_material(2000, D, "cka")  # 576/2576 = 0.224
    assert not trust.bias_is_material(2304, D, "cka")  # exactly 0.2
    # unbiased CKA and cosine have no d/(N+d) floor
    assert not trust.bias_is_material(8, D, "unbiased_cka")
    assert not trust.bias_is_material(8, D, "cosine")


def test_bootstrap_width_thresholds():
    base = dict(metric="cosine", value=0.5)
    assert trust_badge(5000, D, ci=(0.49, 0.51), **base).level == "solid"  # 4% wide
    wide = trust_badge(5000, D, ci=(0.48, 0.52), **base)  # 8%
    assert wide.level == "indicative" and wide.action == "use ≥ 10,000 passages"
    assert trust_badge(5000, D, ci=(0.4, 0.6), **base).level == "noise"  # 40%


def test_random_band_needs_seeds_and_distance():
    few = trust_badge(5000, D, metric="cosine", value=0.5, null_band=(0.1, 0.2), null_seeds=2)
    assert few.level == "indicative" and few.action == "add random seeds"
    apart = trust_badge(5000, D, metric="cosine", value=0.5, null_band=(0.1, 0.2), null_seeds=3)
    assert apart.level == "solid"
    inside = trust_badge(5000, D, metric="cosine", value=0.15, null_band=(0.1, 0.2), null_seeds=3)
    assert inside.level == "indicative" and inside.action is None
    assert "random-weight band" in inside.reasons[0]


def test_bad_input_is_a_deff_error():
    with pytest.raises(DeffError):
        trust_badge(0, D)
    with pytest.raises(DeffError):
        trust_badge(10, 0)
