"""AppTest of the BOS & controls page: the verdict, the evidence, BOS on/off, the inspector.

A module-scoped app measures `tiny-llama` on 16 BBC passages in a temporary DEFF_CACHE_DIR;
expected values come from the library (`measure`, `diagnose`, `bos_verdict`) on the same run,
read from the same cache, so the page is checked against deffcore.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import assert_clean, chart, plotly_array, trace
from streamlit.testing.v1 import AppTest

from deffcore.constants import POOLINGS

REPO = Path(__file__).resolve().parents[2]
PAGE = "pages/4_BOS_and_controls.py"
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def verdicts(at: AppTest) -> list[str]:
    return [e.value for e in (*at.success, *at.warning) if "BOS sensitivity" in e.value]


@pytest.fixture(scope="module")
def app(cache_dir, measurement):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300).run()
    at.radio(key="model_source").set_value("Packaged (offline)")
    at.run()
    at.selectbox(key="model_packaged").set_value(RUN["model"])
    at.number_input(key="n").set_value(RUN["n"])
    at.number_input(key="max_tokens").set_value(RUN["max_tokens"])
    at.number_input(key="seed").set_value(RUN["seed"])
    at.button(key="run").click()
    at.run()
    assert_clean(at)
    at.switch_page(PAGE)
    at.run()
    assert_clean(at)
    return at


def test_snapshot_offers_the_diagnostics_then_shows_them(cache_dir, monkeypatch):
    """The shipped default (no Measurement): a verdict from the controls it has, a button that
    computes the diagnostics (here a stand-in dict: the real pass needs SmolLM2), then the
    figures drawn from exactly those numbers."""
    from deffcore import diagnostics as dg
    from deffcore.snapshot import load_snapshot

    snap = load_snapshot()
    if snap is None:
        pytest.skip("deffcore/data/default_run.json is not generated yet")
    L = snap.layers
    ratio = [5.0] * 2 + [150.0 + layer for layer in range(L - 1)]
    fake = {
        "n_passages": 64,
        "massive_ratio": ratio,
        "massive_position": [0] * (L + 1),
        "massive_dim": [7] * (L + 1),
        "sink_fraction": [0.5] * L,
        "sink_scores": [[0.1, 0.9]] * L,
        "cached": False,
    }
    calls = []

    def fake_diagnose(spec, **kwargs):
        calls.append(spec)
        return fake

    monkeypatch.setattr(dg, "diagnose", fake_diagnose)
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300).run()
    at.switch_page(PAGE)
    at.run()
    assert_clean(at)
    assert len(verdicts(at)) == 1 and "massive activations not computed" in verdicts(at)[0]
    assert not calls  # nothing computed before the click
    at.button(key="bos_diagnose").click().run()
    assert_clean(at)
    assert calls and calls[0].model == snap.spec["model"] and calls[0].n == snap.spec["n"]
    (v,) = verdicts(at)
    assert "position 0 from layer 2" in v
    assert metric(at, "Massive at position 0") == "from layer 2"
    assert metric(at, "Sink heads") == "50% max"
    np.testing.assert_allclose(
        plotly_array(chart(at, "Massive activations")["data"][0]["y"]), ratio
    )
    np.testing.assert_allclose(
        plotly_array(chart(at, "Attention sinks")["data"][0]["y"]), [0.5] * L
    )


def test_verdict_and_evidence_match_the_library(app, measurement):
    from deffcore.diagnostics import bos_verdict, read_diagnostics

    at = app
    diag = read_diagnostics(measurement.spec)  # computed by the page, stored beside the run
    assert diag is not None and diag["n_passages"] == RUN["n"]
    want = bos_verdict(
        {p: measurement.summary(p).gap_pct for p in POOLINGS},
        massive_ratio=diag["massive_ratio"],
        massive_position=diag["massive_position"],
        sink_fraction=diag["sink_fraction"],
    )
    (v,) = verdicts(at)
    assert v == f"**BOS sensitivity:** {want.sentence}"
    assert metric(at, "Regime vs control") == ("depends" if want.regime_depends else "stable")
    assert metric(at, "Gap moves by") == f"{want.gap_move:.1f} pts"
    controls = chart(at, "Pooling controls")
    for pooling in POOLINGS:
        t = trace(controls, pooling)
        mine = [
            x for x, s in zip(plotly_array(t["x"]), t["customdata"], strict=True) if s == "this run"
        ]
        np.testing.assert_allclose(mine, [measurement.summary(pooling).gap_pct])
    np.testing.assert_allclose(
        plotly_array(chart(at, "Massive activations")["data"][0]["y"]), diag["massive_ratio"]
    )
    np.testing.assert_allclose(
        plotly_array(chart(at, "Attention sinks")["data"][0]["y"]), diag["sink_fraction"]
    )
    np.testing.assert_allclose(
        plotly_array(chart(at, "Position-0 norm ratio")["data"][0]["y"]),
        measurement.pooled.pos0_norm_ratio,
        rtol=1e-6,
    )


def test_passage_inspector_heatmap(app, measurement):
    from deffcore.diagnostics import read_diagnostics

    at = app
    ins = read_diagnostics(measurement.spec)["inspector"]
    at.selectbox(key="inspect_passage").set_value(3).run()
    assert_clean(at)
    fig = chart(at, "Token-state norms")
    heat = fig["data"][0]
    np.testing.assert_allclose(
        plotly_array(heat["z"]), np.log10(np.asarray(ins["token_norms"][3])), rtol=1e-6
    )
    assert list(heat["text"][0]) == [repr(t)[1:-1] for t in ins["tokens"][3]]
    marks = trace(fig, "largest |h_j| (feature j)")
    assert list(plotly_array(marks["x"])) == ins["max_position"][3]


def test_bos_add_versus_none_in_one_click(app):
    from deffcore.measurement import measure

    at = app
    at.button(key="bos_compare").click().run()
    assert_clean(at)
    for bos in ("add", "none"):
        m = measure(**RUN, bos=bos)
        assert m.cached  # the page's run, read back
        gap = m.summary("default").gap_pct
        assert metric(at, f"Gap to F_L, default (bos={bos})") == f"{gap:+.1f}%"
    fig = chart(at, "BOS on or off")
    labels = {y for t in fig["data"] for y in t["y"]}
    assert {"bos=add", "bos=none"} <= labels
    # tiny-llama's tokenizer adds a BOS: bos=add is the same token sequence as the default run
    default = measure(**RUN)
    np.testing.assert_allclose(
        measure(**RUN, bos="add").pooled.pooled["default"], default.pooled.pooled["default"]
    )
