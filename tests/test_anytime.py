"""Anytime estimates (deffcore.statistics.anytime): a prefix of a run is that run, bit for bit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from run_helpers import window_spec

from deffcore.core.constants import EXTRACTED_POOLINGS, REGIME_TOLERANCE
from deffcore.core.errors import DeffError
from deffcore.extraction import cache as prefix
from deffcore.extraction import forward as batches
from deffcore.extraction.cache import PrefixRows, batch_rows, prefix_refusal, schedule
from deffcore.extraction.forward import PooledStates
from deffcore.inputs.texts import DatasetSpec
from deffcore.statistics import anytime
from deffcore.statistics.anytime import estimate, pooling_estimate, regime_fixed


def _same_estimate(a, b) -> None:
    da, db = a.to_dict(), b.to_dict()
    da.pop("elapsed_s"), db.pop("elapsed_s")
    assert da == db


def test_schedule_doubles_from_the_first_meaningful_look_in_whole_batches():
    # the first look is the trust rule's NOISE_MIN_N (fewer passages are noise whatever else)
    assert prefix.FIRST_ESTIMATE == 32
    assert schedule(512, 32) == [32, 64, 128, 256, 512]
    assert schedule(512, 48) == [48, 96, 144, 288, 512]  # 32, 64, 128, 256 rounded up to 48s
    assert schedule(100, 32) == [32, 64, 100]
    assert schedule(40, 32) == [32, 40]
    assert schedule(32, 32) == [32]
    assert schedule(4096, 256) == [256, 512, 1024, 2048, 4096]
    assert schedule(64, 1) == [32, 64]  # a 64-document run has a look before its end
    with pytest.raises(DeffError):
        schedule(0, 32)


def test_batch_rows_is_the_extractions_batch():
    assert batch_rows(128, "cpu") == batches.TOKEN_BUDGET["cpu"] // 128 == 32
    assert batch_rows(128, "cuda:0") == batches.TOKEN_BUDGET["cuda"] // 128
    assert batch_rows(128, "cpu", 7) == 7
    assert batch_rows(10_000, "cpu") == 1


def test_prefix_refusal_names_documents_and_streamed_data():
    data = DatasetSpec.parse
    assert prefix_refusal("windows", data("bbc-news")) is None
    assert prefix_refusal("packed", data("x.txt")) is None
    assert "documents mode" in prefix_refusal("documents", data("bbc-news"))
    assert "streamed" in prefix_refusal("windows", data("hf:a/b:train"))


def test_regime_fixed_needs_the_whole_band_in_one_regime():
    tol = REGIME_TOLERANCE
    assert regime_fixed(tol + 0.1, 30.0)  # below F_L
    assert regime_fixed(-30.0, -tol - 0.1)  # above F_L
    assert regime_fixed(-tol, tol)  # at the reference
    assert not regime_fixed(tol - 0.1, 30.0)  # could be at the reference
    assert not regime_fixed(-5.0, 5.0)
    assert not regime_fixed(None, 3.0)
    assert not regime_fixed(float("nan"), 3.0)


def test_prefix_estimates_equal_a_fresh_run_bit_for_bit(windows_dataset, every_batch):
    """The first 128 passages of a 256-run, as their batches land, are a 128-run: the same
    pooled rows, the same position-0 ratio, the same estimate, bit for bit."""
    from deffcore.runs.measure import measure_spec

    spec = window_spec(windows_dataset, 256)
    rows = PrefixRows(spec.n)
    measure_spec(spec, device="cpu", batch_size=32, tap=rows.add)
    assert rows.done >= 128  # every batch but the last was checkpointed
    prefix = rows.pooled(128, max_tokens=spec.max_tokens)
    fresh = measure_spec(replace(spec, n=128), device="cpu", batch_size=32, use_cache=False)
    for p in EXTRACTED_POOLINGS:
        assert np.array_equal(prefix.pooled[p], fresh.pooled.pooled[p]), p
    assert np.array_equal(prefix.pos0_norm_ratio, fresh.pooled.pos0_norm_ratio)
    assert prefix.tokens == fresh.pooled.tokens and np.array_equal(
        prefix.lengths, fresh.pooled.lengths
    )
    _same_estimate(estimate(prefix), estimate(fresh.pooled))
    # and a prefix is not the whole run: the 256-run's own estimate differs
    whole = measure_spec(spec, device="cpu", batch_size=32)
    assert estimate(whole.pooled).poolings["default"].deff_over_L != pytest.approx(
        estimate(prefix).poolings["default"].deff_over_L, abs=1e-9
    )


def test_prefix_rows_track_the_landed_prefix_only():
    rows = PrefixRows(6)
    L1, d = 3, 2

    def batch(slots):
        b = len(slots)
        data = {p: np.full((L1, b, d), float(slots[0]), np.float32) for p in EXTRACTED_POOLINGS}
        data["pos0_ratio"] = np.ones((L1, b), np.float32)
        return batches.SavedBatch(np.asarray(slots, np.int64), data, None)

    rows.add(batch([2, 3]))
    assert rows.done == 0  # 0 and 1 are missing
    rows.add(batch([0, 1]))
    assert rows.done == 4
    with pytest.raises(DeffError):
        rows.pooled(5, max_tokens=8)
    assert rows.pooled(4, max_tokens=8).pooled["default"][0, :, 0].tolist() == [0, 0, 2, 2]


def _walk(L: int, n: int, d: int, seed: int = 0) -> np.ndarray:
    """(L+1, N, d) h_0 .. h_L: a random walk over layers (h_0 first)."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.standard_normal((L + 1, n, d), dtype=np.float32), axis=0)


def test_unbiased_cka_is_shown_where_linear_ckas_bias_is_material():
    small = pooling_estimate(_walk(6, 64, 256))  # N << d: linear CKA's bias is large
    assert small.metric == "unbiased_cka"
    assert small.run_metric_deff_over_L != pytest.approx(small.deff_over_L, rel=0.02)
    large = pooling_estimate(_walk(6, 2048, 2))  # N >> d: linear CKA is fine
    assert large.metric == "cka"
    assert large.run_metric_deff_over_L == large.deff_over_L
    assert pooling_estimate(_walk(6, 64, 256), metric="unbiased_cka").metric == "unbiased_cka"


def test_bands_and_gaps_are_consistent():
    e = pooling_estimate(_walk(6, 512, 4))
    assert e.band == "error band"
    half = e.deff_over_L * e.error
    assert e.low == pytest.approx(e.deff_over_L - half) and e.high == pytest.approx(
        e.deff_over_L + half
    )
    assert e.gap_pct == pytest.approx(100 * (1 - e.deff / (2 * 6 / 7)))
    assert e.gap_low == pytest.approx(anytime.gap_of(e.high, 6))  # gap falls as D rises
    assert e.settle_gap_low == pytest.approx(anytime.gap_of(e.deff_over_L + half, 6))
    assert e.settle_gap_high == pytest.approx(anytime.gap_of(e.deff_over_L - half, 6))
    b = pooling_estimate(_walk(6, 512, 4), bootstrap=20, seed=1)
    assert b.band == "bootstrap 95%" and b.low < b.high
    # the verdict is settled against the rule's error (bias + spread), not the interval alone
    b_half = b.deff_over_L * b.error
    assert b.settle_gap_low == pytest.approx(anytime.gap_of(b.deff_over_L + b_half, 6))


def _pooled_from(states: np.ndarray, T: int = 16) -> PooledStates:
    n = states.shape[1]
    return PooledStates(
        pooled={p: states.copy() for p in EXTRACTED_POOLINGS},
        pos0_norm_ratio=np.ones(states.shape[0], np.float32),
        n_dropped_short=0,
        tokens=n * T,
        lengths=np.full(n, T, np.int64),
    )


def test_verdict_settles_when_every_band_is_in_one_regime():
    # h_0 large against the updates: D_eff far below F_L, a tight band at N = 2048
    rng = np.random.default_rng(3)
    h0 = 4.0 * rng.standard_normal((1, 2048, 4), dtype=np.float32)
    steps = np.cumsum(rng.standard_normal((6, 2048, 4), dtype=np.float32), axis=0)
    est = estimate(_pooled_from(np.concatenate([h0, h0 + steps])))
    assert est.verdict_settled and est.unsettled == ()
    assert all(e.regime_fixed for e in est.poolings.values())
    assert set(est.regimes.values()) == {"below"}
    # the same construction at N = 16 reads noise: nothing settles
    early = estimate(_pooled_from(np.concatenate([h0, h0 + steps])[:, :16]))
    assert not early.verdict_settled and "default" in early.unsettled


def test_estimate_needs_the_default_pooling():
    with pytest.raises(DeffError):
        estimate(_pooled_from(_walk(4, 64, 4)), poolings=("token_normed",))


@pytest.mark.parametrize("bootstrap", [None, 20])
def test_a_control_with_no_similarity_is_left_out_as_the_measured_run_leaves_it(bootstrap):
    """first_non_bos constant across passages (every passage starts with one token): no
    similarity, so the estimate has no such pooling (the measured run's `undefined`); the
    default's own failure is the run's and is raised."""
    pooled = _pooled_from(_walk(4, 256, 8))
    pooled.pooled["first_non_bos"][:] = pooled.pooled["first_non_bos"][:, :1]
    e = estimate(pooled, bootstrap=bootstrap, bootstrap_poolings=("default", "first_non_bos"))
    assert "first_non_bos" not in e.poolings and {"default", "no_pos0"} <= set(e.poolings)
    pooled.pooled["default"][:] = pooled.pooled["default"][:, :1]
    with pytest.raises(DeffError, match="undefined"):
        estimate(pooled)
