"""The depth-use atlas's summary against hand computations (deffcore.measures.atlas, SPEC 16):
its intervals are the replicates' 95% percentiles (integers rounded outwards), the skip
effect's summary by hand (the diagonal empty, later_max the max), a shared atlas out of its
ranges refused. Hand-made rows, no model: these run in seconds, beside tests/test_atlas.py's
checks against the model's own computation."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from deffcore.measures.atlas import phase_point, summarize, summarize_skip


def _hand_rows(n: int = 40, L: int = 5, seed: int = 0):
    from deffcore.extraction.atlas import AtlasRows

    rng = np.random.default_rng(seed)
    r = rng.uniform(0.05, 1.0, size=(n, L)) * np.linspace(1.0, 0.2, L)
    ang = rng.uniform(0.0, 0.3, size=(n, L + 1, L + 1))
    ang = (ang + ang.transpose(0, 2, 1)) / 2
    ang[:, np.arange(L + 1), np.arange(L + 1)] = 0.0
    return AtlasRows(
        r=r, c=rng.uniform(-1, 1, size=(n, L)), bi=rng.uniform(0, 0.5, size=(n, L)),
        angular=ang, lengths=np.full(n, 8, dtype=np.int64),
    )  # fmt: skip


def test_the_default_interval_is_the_95_percent_percentile_of_the_replicates():
    """SPEC section 8: the replicates' 2.5% and 97.5% percentiles (a 90% interval, or one tail
    at 5%, is not it); integer statistics rounded outwards (floor, ceil)."""
    from deffcore.measures.atlas import resample_weights

    rows = _hand_rows()
    a = summarize(rows, B=60, seed=5)
    assert a.ci == 0.95
    reps = resample_weights(rows.n, 60, 5) @ rows.r
    low, high = a.intervals["relative_contribution"]
    np.testing.assert_allclose(low, np.quantile(reps, 0.025, axis=0))
    np.testing.assert_allclose(high, np.quantile(reps, 0.975, axis=0))
    phases = np.array([phase_point(x) for x in reps], dtype=np.float64)
    lo, hi = np.quantile(phases, [0.025, 0.975])
    assert tuple(a.intervals["phase_point"]) == (np.floor(lo), np.ceil(hi))


def test_integer_intervals_are_rounded_outwards():
    """Replicates of a phase point spread over 3 and 4: the percentiles fall between them, and
    the interval is [3, 4], never narrower."""
    from deffcore.measures.atlas import _integer_interval

    reps = np.array([3.0] * 50 + [4.0] * 50)
    lo, hi = _integer_interval(reps, 0.99)
    assert (lo, hi) == (3.0, 4.0)
    lo, hi = _integer_interval(np.linspace(2.0, 5.0, 101), 0.95)  # 2.075 .. 4.925
    assert (lo, hi) == (2.0, 5.0)


def test_the_second_half_is_blocks_after_floor_l_over_2():
    """bi_second_half: the mean BI of blocks floor(L/2)+1 .. L (L = 5: blocks 3, 4, 5)."""
    from deffcore.measures.atlas import _columns

    r = np.array([1.0, 1.0, 1.0, 1.0, 1.0])
    bi = np.array([0.9, 0.9, 0.1, 0.2, 0.3])
    cols = _columns(r, bi, np.zeros((6, 6)))
    assert cols["bi_second_half"] == pytest.approx(0.2)


def test_the_skip_summary_by_hand():
    """Two passages, L = 3: later is the mean over passages where l > s (NaN on and below the
    diagonal), later_max the max over passages (of their own max over tokens), kl the mean."""
    nan = np.nan
    later = np.array(
        [[[nan, 0.2, 0.4], [nan, nan, 0.6], [nan, nan, nan]],
         [[nan, 0.4, 0.0], [nan, nan, 0.2], [nan, nan, nan]]]
    )  # fmt: skip
    top = np.array(
        [[[nan, 0.5, 0.9], [nan, nan, 0.7], [nan, nan, nan]],
         [[nan, 0.8, 0.1], [nan, nan, 0.3], [nan, nan, nan]]]
    )  # fmt: skip
    kl = np.array([[0.1, 0.2, 0.3], [0.3, 0.0, 0.1]])
    eff = summarize_skip(later, top, kl, B=20)
    want = np.array([[nan, 0.3, 0.2], [nan, nan, 0.4], [nan, nan, nan]])
    np.testing.assert_allclose(eff.later, want)
    np.testing.assert_allclose(eff.later_max, [[nan, 0.8, 0.9], [nan, nan, 0.7], [nan, nan, nan]])
    np.testing.assert_allclose(eff.kl, [0.2, 0.1, 0.2])
    low, high = eff.intervals["later"]
    assert np.isnan(np.diagonal(low)).all() and np.isnan(np.diagonal(high)).all()
    assert eff.to_dict()["later"][0][0] is None  # the diagonal is stored as null


def _checked_atlas():
    from deffcore.measures.atlas import check_atlas_dict

    rows = _hand_rows(n=12, L=4)
    a = summarize(rows, B=10)
    nan = np.nan
    later = np.full((12, 4, 4), nan)
    later[:, 0, 1:] = 0.1
    a.skip_effect = summarize_skip(later, later, np.full((12, 4), 0.01), B=10)
    d = a.to_dict()
    assert check_atlas_dict(copy.deepcopy(d), 4) is not None
    return d, check_atlas_dict


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda d: d["angular_distance"][0].__setitem__(1, 1.5), "angular distance"),
        (lambda d: d.update(phase_point=5), "phase point"),
        (lambda d: d["skip_effect"].update(layers=5), "skip effect"),
        (lambda d: d.update(layers=5), "layer count"),
    ],
    ids=["angular 1.5", "phase point L+1", "skip effect of 5 blocks", "atlas of 5 blocks"],
)
def test_a_shared_atlas_out_of_its_ranges_is_refused(edit, said):
    """An atlas file of a 4-block run: the angular distance is a share of π (at most 1), the
    phase point a block index 0..L, the skip effect of the run's own L blocks."""
    from deffcore.measures.atlas import AtlasFileError

    d, check = _checked_atlas()
    edit(d)
    with pytest.raises(AtlasFileError, match=said):
        check(d, 4)
