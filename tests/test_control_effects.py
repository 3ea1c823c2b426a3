"""Each control's move of the gap with its paired interval; regimes from the same bootstrap."""

from __future__ import annotations

import pytest

from deffcore.measures.controls import apply_pc_control
from deffcore.measures.depth import effective_depth, gap_percent
from deffcore.measures.synthetic import position0_construction
from deffcore.statistics.control_effects import control_effects, effect_sentence, regime_intervals
from deffcore.statistics.paired import paired_bootstrap
from deffcore.statistics.verdict import bos_verdict


def test_a_flip_needs_both_gaps_intervals():
    gaps = {"default": 9.5, "top1_pc": -1.5}
    assert bos_verdict(gaps).regime_depends  # by the ±1-point tolerance: a flip
    v = bos_verdict(gaps, intervals={"default": (7.0, 12.0), "top1_pc": (-4.0, 1.0)})
    assert not v.regime_depends and v.regimes["top1_pc"] == "at the reference"
    sure = bos_verdict(gaps, intervals={"default": (7.0, 12.0), "top1_pc": (-2.0, -1.2)})
    assert sure.regime_depends and sure.flipped == ["top1_pc"]


def test_control_effects_are_paired_differences_that_cover_the_truth():
    c = position0_construction(1024, 16, 6, h0=1.0, pos0=1.0, onset=2, seed=11)
    top1 = apply_pc_control(c.default, "top1_pc")
    pb = paired_bootstrap(
        {"default": c.default, "no_pos0": c.no_pos0, "top1_pc": top1}, B=60, seed=4
    )
    effects = control_effects(pb, "cka")
    assert set(effects) == {"no_pos0", "top1_pc"}
    e = effects["no_pos0"]
    want = pb.difference(("no_pos0", "cka"), ("default", "cka"))
    assert (e.delta, e.interval) == (want.delta, want.interval)
    pops = [gap_percent(effective_depth(S), 6) for S in (c.S_default, c.S_no_pos0)]
    lo, hi = e.interval
    assert lo <= pops[1] - pops[0] <= hi
    assert e.gap_interval == pytest.approx(regime_intervals(pb, "cka")["no_pos0"])
    assert "no_pos0" in effect_sentence(effects) and "B = 60" in effect_sentence(effects)
    assert control_effects(pb, "unbiased_cka") == {}  # not in this bootstrap


def test_the_metric_comparison_is_paired_when_the_run_has_both_metrics():
    from types import SimpleNamespace

    import numpy as np

    from deffcore.runs.tables import metric_difference

    c = position0_construction(256, 16, 6, pos0=1.0, seed=3)
    pb = paired_bootstrap({"default": c.default}, metrics=("cka", "unbiased_cka"), B=30, seed=1)
    d = metric_difference(SimpleNamespace(paired_bootstrap=lambda: pb))
    (pl, rl), (pu, ru) = pb.deff_over_L("default", "cka"), pb.deff_over_L("default", "unbiased_cka")
    assert d.delta == pytest.approx(pl - pu) and d.scale == "D_eff/L" and d.paired
    q = np.quantile(rl - ru, [0.025, 0.975])
    assert d.interval == pytest.approx((2 * (pl - pu) - q[1], 2 * (pl - pu) - q[0]))
    one = paired_bootstrap({"default": c.default}, metrics=("cka",), B=5)
    assert metric_difference(SimpleNamespace(paired_bootstrap=lambda: one)) is None
    assert metric_difference(SimpleNamespace(paired_bootstrap=lambda: None)) is None


def test_the_effect_line_says_no_pos0_as_the_bos_answer():
    """One Δ for one comparison (SPEC 11.6): with the run's BOS answer, the line gives no_pos0's
    move as the answer's Δ and interval (for linear CKA, unbiased CKA's replicates, named so),
    not linear CKA's own paired move; without a paired answer, each control's own."""
    from dataclasses import replace

    from deffcore.statistics.bos_answer import run_answer
    from deffcore.views.run import load_snapshot

    view = load_snapshot()
    pb = view.paired_bootstrap()
    answer = run_answer(view, "cka")
    assert answer.paired and answer.answered_with == "unbiased_cka"
    effects = control_effects(pb, "cka")
    own = effects["no_pos0"]
    lo, hi = answer.interval
    line = effect_sentence(effects, pb.ci, answer)
    said = f"no_pos0 {answer.delta:+.2f} [{lo:+.2f}, {hi:+.2f}] (the BOS answer's Δ, unbiased CKA's"
    assert said in line
    assert f"{own.delta:+.2f} [{own.interval[0]:+.2f}, {own.interval[1]:+.2f}]" not in line
    plain = f"no_pos0 {own.delta:+.2f} [{own.interval[0]:+.2f}, {own.interval[1]:+.2f}]"
    assert plain in effect_sentence(effects, pb.ci)
    unpaired = replace(answer, paired=False, interval=None)
    assert plain in effect_sentence(effects, pb.ci, unpaired)
