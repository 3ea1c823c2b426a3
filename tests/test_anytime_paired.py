"""Live estimates with one paired bootstrap: the BOS answer at every mark."""

from __future__ import annotations

import numpy as np
import pytest

from deffcore.core.constants import EXTRACTED_POOLINGS
from deffcore.extraction.forward import PooledStates
from deffcore.lenses.bos_calibration import claim_is_right
from deffcore.measures.depth import effective_depth, gap_percent
from deffcore.measures.synthetic import position0_construction
from deffcore.statistics.anytime import estimate
from deffcore.statistics.bos_answer import answer_trust, position0_answer
from deffcore.statistics.paired import paired_bootstrap


def _pooled(c, k: int | None = None) -> PooledStates:
    h0 = np.zeros((1, *c.default.shape[1:]), np.float32)
    stacks = {
        p: np.concatenate([h0, c.default if p == "default" else c.no_pos0])
        for p in EXTRACTED_POOLINGS
    }
    k = k or c.default.shape[1]
    return PooledStates(
        pooled={p: x[:, :k] for p, x in stacks.items()},
        pos0_norm_ratio=np.ones(c.default.shape[0] + 1, np.float32),
        n_dropped_short=0,
        tokens=0,
    )


def test_an_estimate_carries_the_paired_answer_from_unbiased_replicates():
    c = position0_construction(768, 16, 6, h0=1.0, pos0=12.0, onset=4, seed=5)  # Δ_pop +26
    two = ("default", "no_pos0")
    est = estimate(_pooled(c), poolings=two, bootstrap=40, bootstrap_poolings=two, seed=3)
    a = est.position0
    assert a is not None and a["paired"] and a["B"] == 40
    used = a["metric"]
    # linear CKA's Δ is answered by unbiased CKA's replicates (position0.STAND_IN), as the page
    # answers it, whichever estimator the mark shows
    assert used == "unbiased_cka" and a["answered_with"] == "unbiased_cka"
    assert "unbiased CKA's numbers, on the same replicates" in a["sentence"]
    # the same answer as the decision on the same replicates, computed directly
    pb = paired_bootstrap(
        {p: _pooled(c).pooled[p][1:] for p in two}, metrics=("cka", "unbiased_cka"), B=40, seed=3
    )
    (gd, rd), (gn, rn) = pb.gap("default", used), pb.gap("no_pos0", used)
    levels = {p: answer_trust(pb, p, used, 16).level for p in two}  # the page's own judgement
    want = position0_answer(gd, gn, replicates=(rd, rn), trust_default=levels["default"],
                            trust_no_pos0=levels["no_pos0"], n=768)  # fmt: skip
    assert a["verdict"] == want.verdict and a["interval"] == pytest.approx(list(want.interval))
    asked = pb.gap("no_pos0", "cka")[0] - pb.gap("default", "cka")[0]  # linear CKA's Δ beside
    assert a["delta_asked"] == pytest.approx(asked) and a["delta"] != pytest.approx(asked)
    pops = [gap_percent(effective_depth(S), 6) for S in (c.S_default, c.S_no_pos0)]
    assert a["verdict"] in ("artefact", "masks") and claim_is_right(a["verdict"], *pops)
    assert est.answer == a["verdict"] and est.to_dict()["position0"] == a
    # the bootstrapped poolings' bands come from the same replicates
    res = pb.result("default", est.poolings["default"].metric)
    assert (est.poolings["default"].low, est.poolings["default"].high) == pytest.approx(
        (res.low, res.high)
    )
    # no bootstrap: no answer (nothing to pair)
    assert estimate(_pooled(c), poolings=two).position0 is None


def test_a_live_answer_asks_only_what_the_runs_data_can_give(tiny_dataset):
    """The live answer judges its numbers as the page does (`bos_answer.answer_trust`), so a
    noise-level "use ≥ n passages" is checked against the run's data (`supply`): the tiny
    corpus cannot give the passages asked, and the action says what would."""
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.inputs.supply import passages_action, supply
    from deffcore.statistics.bos_answer import live_answer
    from deffcore.statistics.trust_rule import assess

    spec = RunSpec("tiny-llama", None, tiny_dataset, 24, 16, 0, "float32", passages="windows")
    c = position0_construction(24, 16, 6, h0=1.0, pos0=2.0, onset=4, seed=1)
    states = {p: x[:, :24] for p, x in _pooled(c).pooled.items()}
    two = ("default", "no_pos0")
    pb = paired_bootstrap({p: states[p][1:] for p in two}, metrics=("cka", "unbiased_cka"),
                          B=40, seed=3)  # fmt: skip
    a = live_answer(pb, states, dict.fromkeys(two), "cka", None, 24, spec=spec)
    assert a["verdict"] == "cannot_tell" and a["trust"] == "noise"
    point = {p: pb.deff_over_L(p, "unbiased_cka")[0] for p in two}
    plain = {p: assess(24, 16, metric="unbiased_cka", point=point[p], layers=6,
                       interval=(pb.result(p, "unbiased_cka").low,
                                 pb.result(p, "unbiased_cka").high)) for p in two}  # fmt: skip
    noisy = next(t for t in plain.values() if t.level == "noise")
    assert noisy.action_n > supply(spec).available  # more than the tiny corpus gives
    assert a["action"] == passages_action(noisy.action_n, spec) != noisy.action
    assert "tiny_passages.txt gives" in a["action"]


# (n, d, pos0, K, seed): a stood-in artefact answer; noise (its action); K < L - 1 moving Δ;
# K = 2 where D_eff(2)'s trust is indicative and the full profile's is noise
ALIKE = [(64, 96, 8.0, None, 7), (24, 16, 2.0, None, 7), (96, 16, 6.0, 3, 7), (32, 16, 4.0, 2, 1)]


@pytest.mark.parametrize("n, d, pos0, K, seed", ALIKE)
def test_the_page_and_the_live_estimate_judge_one_bootstrap_alike(n, d, pos0, K, seed):
    """One judgement of the BOS answer's numbers (`bos_answer.answer_trust`): on the same
    paired bootstrap the page's answer (`bos_answer.position0_answer_for`, linear CKA stood in
    by unbiased CKA) and the live estimate's are one answer, verdict, Δ, interval, trust and
    action alike; at K < L - 1 both are D_eff(K)'s."""
    from deffcore.lenses.bos_calibration import pooled_view
    from deffcore.measures.similarity import similarity_matrix
    from deffcore.statistics.bos_answer import live_answer, position0_answer_for

    L = 6
    c = position0_construction(n, d, L, h0=1.0, pos0=pos0, onset=2, seed=seed)
    stacks = {"default": c.default, "no_pos0": c.no_pos0}
    pb = paired_bootstrap(stacks, metrics=("cka", "unbiased_cka"), B=40, seed=3)
    view = pooled_view({(p, "cka"): similarity_matrix(x, "cka") for p, x in stacks.items()},
                       L, n, d)  # fmt: skip
    page = position0_answer_for(view, "cka", K, paired=pb).to_dict()
    assert page["answered_with"] == "unbiased_cka"
    (gd, _), (gn, _) = pb.gap("default", "unbiased_cka", K), pb.gap("no_pos0", "unbiased_cka", K)
    assert page["delta"] == pytest.approx(gn - gd)
    worst = min(
        (answer_trust(pb, p, "unbiased_cka", d, K=K).level for p in stacks),
        key=("noise", "indicative", "solid").index,
    )
    assert page["trust"] == worst
    if K is None:  # the live estimates show the full profile's D_eff
        states = {p: np.concatenate([np.zeros((1, n, d), np.float32), x]) for p, x in
                  stacks.items()}  # fmt: skip
        live = live_answer(pb, states, dict.fromkeys(stacks), "cka", None, n)
        for field in ("verdict", "delta", "interval", "trust", "action", "delta_asked"):
            assert live[field] == pytest.approx(page[field]), field


def test_answer_trust_judges_the_paired_numbers_at_K():
    """The trust of one of the answer's numbers is the trust rule on the paired replicates'
    own point and percentile interval of D_eff(K)/L (not the full profile's)."""
    from deffcore.statistics.trust_rule import assess

    c = position0_construction(32, 16, 6, h0=1.0, pos0=4.0, onset=2, seed=1)
    pb = paired_bootstrap({"default": c.default, "no_pos0": c.no_pos0},
                          metrics=("unbiased_cka",), B=40, seed=3)  # fmt: skip
    for K in (2, None):
        t = answer_trust(pb, "default", "unbiased_cka", 16, K=K)
        point, res = (
            pb.deff_over_L("default", "unbiased_cka", K)[0],
            pb.result("default", "unbiased_cka", K),
        )
        assert t.point == point and t.interval == (res.low, res.high)
        want = assess(32, 16, metric="unbiased_cka", point=point, layers=6,
                      interval=(res.low, res.high))  # fmt: skip
        assert t.level == want.level and t.action == want.action
    assert answer_trust(pb, "default", "unbiased_cka", 16, K=2).level == "indicative"
    assert answer_trust(pb, "default", "unbiased_cka", 16).level == "noise"


def test_the_page_asks_only_what_the_runs_data_can_give_as_the_live_answer_does(tiny_dataset):
    """A noise-level answer's action is checked against the run's data on the page as live."""
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.lenses.bos_calibration import pooled_view
    from deffcore.measures.similarity import similarity_matrix
    from deffcore.statistics.bos_answer import live_answer, position0_answer_for

    spec = RunSpec("tiny-llama", None, tiny_dataset, 24, 16, 0, "float32", passages="windows")
    c = position0_construction(24, 16, 6, h0=1.0, pos0=2.0, onset=2, seed=7)
    stacks = {"default": c.default, "no_pos0": c.no_pos0}
    pb = paired_bootstrap(stacks, metrics=("cka", "unbiased_cka"), B=40, seed=3)
    view = pooled_view({(p, "cka"): similarity_matrix(x, "cka") for p, x in stacks.items()},
                       6, 24, 16)  # fmt: skip
    view.spec = spec
    page = position0_answer_for(view, "cka", paired=pb)
    states = {p: np.concatenate([np.zeros((1, 24, 16), np.float32), x]) for p, x in
              stacks.items()}  # fmt: skip
    live = live_answer(pb, states, dict.fromkeys(stacks), "cka", None, 24, spec=spec)
    assert page.verdict == live["verdict"] == "cannot_tell" and page.trust == "noise"
    assert page.action == live["action"] and "tiny_passages.txt gives" in page.action


def _live_parts(n: int = 64):
    """(states {pooling: (L+1, N, d) h_0 .. h_L}, estimates, L) of a small construction."""
    c = position0_construction(n, 8, 4, h0=1.0, pos0=3.0, onset=2, seed=1)
    states = _pooled(c).pooled
    return states, {p: object() for p in ("default", "no_pos0")}, c.default.shape[0]


def test_the_shared_bootstrap_pairs_h_1_to_h_l():
    """The states hold h_0 .. h_L; the bootstrap (like the run's) is of h_1 .. h_L: L layers."""
    from deffcore.statistics.bos_answer import shared_bootstrap

    states, _, L = _live_parts()
    pb = shared_bootstrap(states, ("default", "no_pos0"), "cka", B=4)
    assert pb.layers == L and pb.n == 64
    assert pb.has("default", "unbiased_cka") and pb.has("no_pos0", "cka")
    assert shared_bootstrap(states, ("default", "no_pos0"), "cka", B=1) is None


@pytest.mark.parametrize("noisy", ["default", "no_pos0"])
def test_a_noisy_number_gives_its_own_action(noisy, monkeypatch):
    """When one of the two numbers is noise, the live answer cannot tell and asks what that
    number's trust rule asks (whichever pooling it is)."""
    from types import SimpleNamespace

    from deffcore.statistics import bos_answer

    states, estimates, _ = _live_parts()
    pb = bos_answer.shared_bootstrap(states, ("default", "no_pos0"), "cka", B=8)

    def trust(paired, pooling, metric, d, spec=None, **where):
        level = "noise" if pooling == noisy else "solid"
        return SimpleNamespace(level=level, action=f"use ≥ {len(pooling)} passages")

    monkeypatch.setattr(bos_answer, "answer_trust", trust)
    a = bos_answer.live_answer(pb, states, estimates, "cka", None, 64)
    assert a["verdict"] == "cannot_tell" and a["trust"] == "noise"
    assert a["action"] == f"use ≥ {len(noisy)} passages" and a["action"] in a["sentence"]
