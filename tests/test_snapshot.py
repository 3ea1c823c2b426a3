"""A snapshot reads back as the run it was made from; the shipped default is consistent."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deffcore.constants import METRICS, POOLINGS
from deffcore.depth import effective_depth, gap_percent, lag_profile
from deffcore.snapshot import (
    DEFAULT_RUN_PATH,
    MeasurementView,
    SnapshotView,
    load_snapshot,
    run_label,
    snapshot,
)


@pytest.fixture(scope="module")
def tiny_measurement(tmp_path_factory):
    import os

    from deffcore.measurement import measure

    old = os.environ.get("DEFF_CACHE_DIR")
    os.environ["DEFF_CACHE_DIR"] = str(tmp_path_factory.mktemp("snap_cache"))
    try:
        yield measure(model="tiny-llama", n=12, max_tokens=24, random_seeds=(1, 2))
    finally:
        if old is None:
            os.environ.pop("DEFF_CACHE_DIR")
        else:
            os.environ["DEFF_CACHE_DIR"] = old


def test_round_trip_gives_the_same_numbers(tiny_measurement, tmp_path):
    m = tiny_measurement
    data = json.loads(json.dumps(snapshot(m, command="python -m deffcore measure ...")))
    snap, live = SnapshotView(data), MeasurementView(m)
    assert snap.layers == live.layers == 4 and snap.d_model == 64 and snap.n == m.n
    assert snap.key == live.key == m.spec.key()
    for pooling in POOLINGS:
        for metric in METRICS:
            np.testing.assert_allclose(
                snap.similarity(pooling, metric), m.similarity(pooling, metric), atol=1e-6
            )
        for K in (1, 2, None):
            a, b = snap.headline(pooling, "cka", K), live.headline(pooling, "cka", K)
            assert a.deff == pytest.approx(b.deff, abs=1e-5)
            assert a.gap_pct == pytest.approx(b.gap_pct, abs=1e-3)
        assert snap.update_depth(pooling, "cka")["deff_upd"] == pytest.approx(
            m.update_depth(pooling).deff_upd, abs=1e-5
        )
    np.testing.assert_allclose(snap.pos0_norm_ratio(), m.pooled.pos0_norm_ratio, atol=1e-6)
    band = snap.random_band("default", "cka")
    assert band["deff_over_L"] == pytest.approx(m.random_band()["deff_over_L"], abs=1e-6)
    # only the metric the CLI JSON was made with carries the per-pooling extras
    assert snap.update_depth("default", "cosine") is None
    assert snap.random_band("default", "cosine") == {}


def test_headline_is_the_engine_on_S(tiny_measurement):
    view = MeasurementView(tiny_measurement)
    S = tiny_measurement.similarity("token_normed", "cosine")
    h = view.headline("token_normed", "cosine", K=2)
    assert h.K == 2 and h.deff == effective_depth(S, K=2)
    assert h.gap_pct == gap_percent(h.deff, 4)
    assert h.rho1 == lag_profile(S)[0]
    assert h.cka_bias == pytest.approx(64 / (tiny_measurement.n + 64))
    ratios = tiny_measurement.pooled.pos0_norm_ratio
    assert (h.pos0_ratio, h.pos0_layer) == pytest.approx(
        (float(np.max(ratios)), int(np.argmax(ratios)))
    )
    assert view.headline("default", "cka", K=99).K == 3  # K is capped at L-1
    by_K = view.deff_over_L_by_K("default", "cka")
    assert list(by_K) == [1, 2, 3]
    assert by_K[3] == pytest.approx(tiny_measurement.summary().deff_over_L)


def test_other_format_is_rejected_and_missing_file_is_none(tmp_path):
    with pytest.raises(ValueError, match="format"):
        SnapshotView({"format": 999})
    assert load_snapshot(tmp_path / "none.json") is None


def test_run_label():
    spec = {"model": "m", "dataset": "d", "n": 5, "max_tokens": 7, "seed": 3}
    assert run_label(spec) == "m · d · N=5 · T=7 · seed 3"


@pytest.mark.skipif(not DEFAULT_RUN_PATH.exists(), reason="default_run.json not generated")
def test_shipped_default_run_is_small_and_consistent():
    assert DEFAULT_RUN_PATH.stat().st_size < 300_000
    snap = load_snapshot()
    assert snap.spec["model"] == "smollm2-135m" and snap.spec["dataset"] == "bbc-news"
    assert (snap.spec["n"], snap.spec["max_tokens"]) == (512, 128)
    assert (snap.layers, snap.d_model) == (30, 576)
    assert snap.command.startswith("python -m deffcore measure --model smollm2-135m")
    cli = snap.data["measurement"]
    for pooling in POOLINGS:
        S = snap.similarity(pooling, "cka")
        np.testing.assert_allclose(S, S.T, atol=1e-6)
        np.testing.assert_allclose(np.diag(S), 1.0, atol=1e-5)
        # the stored matrices and the CLI's JSON numbers agree
        assert snap.headline(pooling).deff == pytest.approx(
            cli["results"][pooling]["deff"], abs=1e-4
        )
