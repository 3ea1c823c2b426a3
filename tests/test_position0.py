"""The position-0 test on plain numbers (deffcore.statistics.bos_answer, SPEC 11.6 and 15): the
trust it carries, the passages a "cannot tell yet" asks for (computed here independently of the
module), the paired tolerance's floor and the unpaired verdict's side. No model, no run: these
run in milliseconds, beside tests/test_bos_answer.py's constructions and calibration."""

from __future__ import annotations

import numpy as np

from deffcore.statistics.bos_answer import POS0_MIN_POINTS, position0_answer


def _replicates(gd, gn, sd, B=200, seed=0, shared=2.0):
    """(gap_r(default), gap_r(no_pos0)): both move together by a shared part of size `shared`
    and differ by independent parts of size `sd` (the paired bootstrap of one run)."""
    rng = np.random.default_rng(seed)
    common = shared * rng.standard_normal(B)
    return gd + common + sd * rng.standard_normal(B), gn + common + sd * rng.standard_normal(B)


def test_the_answer_carries_the_worse_of_two_different_trust_levels():
    """The lower of the two numbers' trust levels, whichever number holds it: a noisy no_pos0
    beside a solid default is noise (no verdict), and the answer says so."""
    for default, no_pos0, worse in [
        ("solid", "noise", "noise"), ("noise", "solid", "noise"),
        ("indicative", "solid", "indicative"), ("solid", "indicative", "indicative"),
    ]:  # fmt: skip
        a = position0_answer(
            9.5, 10.0, band_default=0.1, band_no_pos0=0.1,
            trust_default=default, trust_no_pos0=no_pos0, noise_action="use ≥ 600 passages",
        )  # fmt: skip
        assert a.trust == worse, (default, no_pos0)
        assert a.verdict == ("cannot_tell" if worse == "noise" else "not_artefact")
    rd, rn = _replicates(9.5, 10.0, 0.1)
    paired = position0_answer(9.5, 10.0, replicates=(rd, rn), trust_default="solid",
                              trust_no_pos0="noise", noise_action="use ≥ 600 passages")  # fmt: skip
    assert paired.trust == "noise" and paired.verdict == "cannot_tell"
    assert paired.action == "use ≥ 600 passages"


def _basic_lower(point: float, reps: np.ndarray) -> float:
    """A paired margin's one-sided 97.5% lower bound, basic: 2 m - q_0.975 of its replicates."""
    return 2 * point - float(np.quantile(reps, 0.975))


def test_a_paired_cannot_tell_asks_for_the_passages_its_slowest_margin_needs():
    """Within T but not clearly: the margin T - Δ's half-width h = m - bound shrinks as
    1/sqrt(N), so it clears 0 at N' = n (h/m)^2, asked as the first doubling of n past it."""
    n = 100
    dr = 4.0 + np.linspace(-2.0, 2.0, 401)  # Δ_r around Δ = 4, the default gap sure (T_r = 5)
    rd = np.full(dr.size, 10.0)
    a = position0_answer(10.0, 14.0, replicates=(rd, rd + dr), n=n)
    assert a.verdict == "cannot_tell" and a.tolerance == 5.0
    margins = [(5.0 - 4.0, 5.0 - dr), (5.0 + 4.0, 5.0 + dr)]  # T - Δ, T + Δ and their replicates
    ratios = [((m - _basic_lower(m, r)) / m) ** 2 for m, r in margins]
    assert ratios[0] > 2  # the slow margin needs more than twice the passages, under 4 times
    assert ratios[0] < 4
    assert a.action == "use ≥ 400 passages" and a.action in a.sentence


def test_a_paired_cannot_tell_never_asks_for_the_passages_the_run_has():
    """A margin whose lower bound lies exactly on 0 needs n (h/m)^2 = n passages by the
    formula; the action asks for twice n, never the n it already has."""
    n = 100
    rd = np.full(50, 10.0)  # T_r = 5 in every replicate
    a = position0_answer(10.0, 14.0, replicates=(rd, rd + 3.0), n=n)  # T - Δ = 1, its bound 0
    assert _basic_lower(1.0, np.full(50, 2.0)) == 0.0
    assert a.verdict == "cannot_tell" and a.action == "use ≥ 200 passages"


def test_beyond_the_tolerance_on_an_unsettled_side_asks_for_twice_the_passages():
    """Δ is clearly beyond T, but the default gap's side of F_L is not settled (its replicates
    straddle 0 by more than the regime tolerance): cannot tell, use twice the passages."""
    rd = 0.5 + np.linspace(-3.0, 3.0, 401)  # |gap_r| < 4: T_r = 2 (the floor) everywhere
    a = position0_answer(0.5, 6.5, replicates=(rd, rd + 6.0), n=300)
    assert a.verdict == "cannot_tell" and "not settled" in a.sentence
    assert a.action == "use ≥ 600 passages"


def test_the_paired_tolerance_keeps_its_floor_in_every_replicate():
    """T_r = max(2, |gap_r|/2): a default gap near 0 (0.2 ± 0.1) has 2 points of room in every
    replicate, so Δ = 3 ± 0.2 is beyond it by about 1, and the gap grows without position 0
    (masks). Without the floor T_r ~ 0.1 would be read as T's bias and the basic bound would
    put Δ within T."""
    rd = 0.2 + np.linspace(-0.1, 0.1, 201)
    a = position0_answer(0.2, 3.2, replicates=(rd, rd + 3.0 + np.linspace(-0.2, 0.2, 201)))
    assert a.verdict == "masks" and a.tolerance == POS0_MIN_POINTS


def test_unpaired_beyond_the_tolerance_towards_f_l_is_an_artefact_away_masks():
    """Unpaired: the sign of Δ against the default gap's sign decides artefact or masks."""
    assert position0_answer(-20.0, -5.0, band_default=0.5, band_no_pos0=0.5).verdict == "artefact"
    assert position0_answer(-5.0, -20.0, band_default=0.5, band_no_pos0=0.5).verdict == "masks"


def test_unpaired_cannot_tell_sizes_the_bias_as_1_over_n():
    """The band's bias part shrinks as n/N', its spread part as sqrt(n/N'): a band that is all
    bias (3 points, room 1.25) clears at 4n (3/4 < 1.25 < 3/2), all spread at 8n."""
    bias = position0_answer(9.5, 13.0, band_default=1.5, band_no_pos0=1.5, n=100, bias_share=1.0)
    spread = position0_answer(9.5, 13.0, band_default=1.5, band_no_pos0=1.5, n=100)
    assert bias.action == "use ≥ 400 passages"  # 3 / 4 = 0.75 < 1.25; 3 / 2 = 1.5 is not
    assert spread.action == "use ≥ 800 passages"  # 3 / sqrt(8) = 1.06 < 1.25; / 2 = 1.5 is not
