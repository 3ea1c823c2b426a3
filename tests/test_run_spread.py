"""A run's measured spread reaches its trust level: the shipped default
holds a B = 100 bootstrap, so every displayed trust level of it uses that interval, never the
1.5/sqrt(N) prior alone; a bootstrap of another number, or a damaged one, is never used."""

from __future__ import annotations

import copy
import math

import pytest

from deffcore.statistics.trust_rule import assess
from deffcore.views.run import Run, load_snapshot
from deffcore.views.run_spread import checked_bootstrap, stored_bootstrap


@pytest.fixture(scope="module")
def snap() -> Run:
    return load_snapshot()


def test_the_shipped_default_trust_uses_its_stored_bootstrap(snap):
    boot = snap.data["measurement"]["bootstrap"]
    assert boot["B"] == 100
    stored = snap.stored_bootstrap("default", "cka")
    assert stored is not None and stored["low"] == boot["low"] and stored["B"] == 100
    h = snap.headline("default", "cka")
    unbiased = snap.headline("default", "unbiased_cka").deff_over_L
    got = snap.trust("default", "cka")
    assert got.interval == pytest.approx((boot["low"], boot["high"]))
    # the error by hand (SPEC 8): bias = the larger of |point - unbiased| / unbiased and
    # |point - replicate mean| / point; spread = the interval's half-width / point
    bias = max(
        abs(h.deff_over_L - unbiased) / unbiased, abs(h.deff_over_L - boot["mean"]) / h.deff_over_L
    )
    half = (boot["high"] - boot["low"]) / 2 / h.deff_over_L
    assert got.error == pytest.approx(bias + 1.5 * half)  # the half-width widened by 1.5
    assert got.corrected_by == "bootstrap"
    assert got.bias_corrected == pytest.approx(2 * h.deff_over_L - boot["mean"])
    assert "measured by the bootstrap" in got.sentence()
    # not the prior: without the stored interval the spread is 1.5 / sqrt(N)
    prior = assess(h.n, h.d_model, metric="cka", point=h.deff_over_L, layers=h.layers,
                   unbiased=unbiased)  # fmt: skip
    assert prior.interval is None and "the prior 1.5/√N" in prior.sentence()
    assert prior.error == pytest.approx(
        abs(h.deff_over_L - unbiased) / unbiased + 1.5 / math.sqrt(h.n)
    )
    assert got.error != pytest.approx(prior.error)
    # the stored CLI trust was computed the same way from the same interval
    cli = snap.data["measurement"]["trust"]
    assert cli["interval"] == pytest.approx(list(got.interval))


@pytest.mark.parametrize(
    ("pooling", "metric", "K"),
    [("no_pos0", "cka", None), ("default", "unbiased_cka", None), ("default", "cka", 5)],
)
def test_a_bootstrap_of_another_headline_is_never_used(snap, pooling, metric, K):
    bare = _without_paired(snap)  # the run's one stored bootstrap: the default's, linear CKA
    assert bare.stored_bootstrap(pooling, metric, K) is None
    t = bare.trust(pooling, metric, K)
    assert t.interval is None and "the prior 1.5/√N" in t.sentence()
    # with the run's paired bootstrap kept (SPEC 11.6), a headline it holds reads its own
    # replicates, never the default's interval
    own = snap.stored_bootstrap(pooling, metric, K)
    if own is not None:
        assert own["point"] == pytest.approx(snap.headline(pooling, metric).deff_over_L)
        default = bare.stored_bootstrap("default", "cka")
        assert (own["low"], own["high"]) != (default["low"], default["high"])


def _without_paired(snap: Run) -> Run:
    data = copy.deepcopy(snap.data)
    data.pop("paired", None)
    return Run.from_snapshot(data)


def _with(snap: Run, **changes) -> Run:
    """The snapshot with its stored bootstrap changed and no paired bootstrap to fall back on."""
    data = copy.deepcopy(snap.data)
    data.pop("paired", None)
    data["measurement"]["bootstrap"].update(changes)
    return Run.from_snapshot(data)


@pytest.mark.parametrize(
    "changes",
    [
        {"point": 0.07},  # another number's bootstrap
        {"low": "0.05"},
        {"high": float("nan")},
        {"low": 0.06, "high": 0.05},
        {"B": 1},
        {"B": True},
        {"samples": [0.05, "x"]},
        {"mean": None},
    ],
)
def test_a_damaged_or_foreign_bootstrap_is_ignored(snap, changes):
    view = _with(snap, **changes)
    assert view.stored_bootstrap("default", "cka") is None
    assert view.trust("default", "cka").interval is None


def test_checked_bootstrap_and_stored_bootstrap_on_plain_values():
    boot = {"point": 0.1, "mean": 0.1, "low": 0.09, "high": 0.11, "basic_low": 0.09,
            "basic_high": 0.11, "bias": 0.0, "ci": 0.95, "B": 20}  # fmt: skip
    assert checked_bootstrap(boot) == boot and checked_bootstrap([1]) is None
    m = {"metric": "cka", "bootstrap": boot}
    assert stored_bootstrap(m, pooling="default", metric="cka", point=0.1) == boot
    assert stored_bootstrap(m, pooling="default", metric="cka", point=0.1 * (1 + 2e-5)) is None
    assert stored_bootstrap(m, pooling="default", metric="unbiased_cka", point=0.1) is None
    assert stored_bootstrap(None, pooling="default", metric="cka", point=0.1) is None


def test_a_number_beyond_floats_range_makes_the_bootstrap_unusable_not_a_traceback():
    """Found by the schema's fuzz: `math.isfinite(10**400)` raises OverflowError."""
    good = {"point": 0.5, "mean": 0.5, "low": 0.4, "high": 0.6, "basic_low": 0.4,
            "basic_high": 0.6, "bias": 0.0, "ci": 0.95, "B": 10, "samples": [0.5] * 10}  # fmt: skip
    assert checked_bootstrap(good) == good
    assert checked_bootstrap({**good, "point": 10**400}) is None
    assert checked_bootstrap({**good, "samples": [0.5] * 9 + [10**400]}) is None
