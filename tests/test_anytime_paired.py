"""Live estimates with one paired bootstrap: the BOS answer at every mark (issue 26)."""

from __future__ import annotations

import numpy as np
import pytest

from deffcore.core.constants import EXTRACTED_POOLINGS
from deffcore.extraction.pooling import PooledStates
from deffcore.lenses.bos_calibration import claim_is_right
from deffcore.measures.depth import effective_depth, gap_percent
from deffcore.measures.synthetic import position0_construction
from deffcore.statistics.anytime import estimate
from deffcore.statistics.anytime_paired import answer_trust
from deffcore.statistics.paired import paired_bootstrap
from deffcore.statistics.position0 import position0_answer


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
    assert "Answered with unbiased CKA" in a["sentence"]
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
