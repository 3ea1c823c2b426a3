"""AppTest of the BOS & controls page: the one answer at once, the diagnostics in the
background, the evidence, BOS on/off of the current run, the inspector.

A module-scoped app opens a `tiny-llama` run on 16 BBC passages (measured into a temporary
DEFF_CACHE_DIR) through its URL (`?run=cached:<key>`); expected values come from the library
(`measure`, `diagnose`, `bos_verdict`, `position0_answer_for`) on the same run.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import assert_clean, chart, plain, plotly_array, trace
from streamlit.testing.v1 import AppTest

from deffcore.core.constants import POOLINGS
from deffcore.work import jobs

REPO = Path(__file__).resolve().parents[2]
PAGE = "pages/4_BOS_and_controls.py"
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def answers(at: AppTest) -> list[str]:
    boxes = (*at.success, *at.warning, *at.info)
    return [plain(e.value) for e in boxes if "position-0 artefact?" in e.value]


def verdicts(at: AppTest) -> list[str]:
    return [plain(e.value) for e in at.markdown if "Pooling controls and diagnostics" in e.value]


def open_page(run_ref: str | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    if run_ref:
        at.query_params["run"] = run_ref
    at.run()
    at.switch_page(PAGE)
    return at.run()


def wait_task(name: str) -> None:
    status = jobs.task_job(name)
    assert status is not None, f"no task {name}"
    done = jobs.wait(status.job_id, timeout=300)
    assert done.state == "done", done.error


@pytest.fixture(scope="module", autouse=True)
def _no_earlier_tasks():
    """Tasks are named by the run's key, and another module may have run this very spec's
    diagnostics in its own cache folder: this module starts from an empty registry."""
    jobs.forget_finished()


@pytest.fixture(scope="module")
def app(cache_dir, measurement):
    at = open_page(f"cached:{measurement.spec.key()}")
    assert_clean(at)
    wait_task(f"diagnostics:{measurement.spec.key()}")  # started in the background
    return at.run()


def test_the_answer_shows_before_the_diagnostics_and_no_model_loads(
    cache_dir, measurement, no_model, monkeypatch
):
    """The page's first script run draws the answer and the verdict while the diagnostic
    pass is held at its model load: nothing the page shows at once needs a model."""
    import deffcore.inputs.model
    from deffcore.lenses.diagnostics_store import diagnostics_path
    from deffcore.statistics.bos_answer import position0_answer_for
    from deffcore.views.run import Run

    diagnostics_path(measurement.spec).unlink(missing_ok=True)
    held, release = threading.Event(), threading.Event()
    real = deffcore.inputs.model.load_model

    def loader(*args, **kwargs):  # the diagnostic pass's load: held until the test ends
        held.set()
        assert release.wait(120), "the test never released the model load"
        return real(*args, **kwargs)

    monkeypatch.setattr(deffcore.inputs.model, "load_model", loader)
    try:
        at = open_page(f"cached:{measurement.spec.key()}")
        assert not at.exception
        want = position0_answer_for(Run.from_measurement(measurement), "cka")
        assert answers(at) == [f"**Is the gap a position-0 artefact?** {plain(want.sentence)}"]
        (v,) = verdicts(at)
        assert "massive activations not computed" in v
        assert held.wait(60)  # the pass is running in the background meanwhile
        bars = [p.proto.text for p in at.get("progress")]
        assert any("Diagnostics in the background" in t for t in bars), bars
        assert not no_model  # the measurement's own loader was never asked for
    finally:
        release.set()
        status = jobs.task_job(f"diagnostics:{measurement.spec.key()}")
        jobs.wait(status.job_id, timeout=60)


def test_a_live_run_pairs_its_answer_in_the_background(cache_dir, monkeypatch):
    """A run measured here has no paired bootstrap yet: the page answers at once, saying its
    interval is unpaired, with the pairing bar while one bootstrap of every pooling (B =
    ANSWER_B, the run's seed) is drawn in the background; when it lands the page reruns and the
    answer is the library's paired answer on exactly that bootstrap."""
    from deffcore.runs.measure import Measurement, measure
    from deffcore.statistics.bos_answer import ANSWER_B, position0_answer_for
    from deffcore.views.run import Run

    # a run of its own (no other test has paired it), without BOS so position 0 varies
    run = measure(**{**RUN, "seed": 3, "bos": "none"})
    held, release = threading.Event(), threading.Event()
    real = Measurement.paired_bootstrap

    def drawn(self, *args, progress=None, **kwargs):  # the background draw waits for the test
        if progress is not None:
            held.set()
            assert release.wait(120), "the test never released the paired bootstrap"
        return real(self, *args, progress=progress, **kwargs)

    monkeypatch.setattr(Measurement, "paired_bootstrap", drawn)
    name = f"paired:{run.spec.key()}:cka:{ANSWER_B}"
    try:
        at = open_page(f"cached:{run.spec.key()}")
        assert_clean(at)
        assert held.wait(60) and not jobs.task_job(name).finished
        unpaired = position0_answer_for(Run.from_measurement(run), "cka")
        assert not unpaired.paired
        assert answers(at) == [f"**Is the gap a position-0 artefact?** {plain(unpaired.sentence)}"]
        assert any("Without a paired bootstrap" in c.value for c in at.caption)
        bars = [p.proto.text for p in at.get("progress")]
        assert any("Pairing the interval" in t and f"B = {ANSWER_B}" in t for t in bars), bars
    finally:
        release.set()
    wait_task(name)
    at.run()
    assert_clean(at)
    # the same bootstrap, by hand: linear CKA and its stand-in, unbiased CKA (SPEC 15)
    real(run, metrics=("cka", "unbiased_cka"), B=ANSWER_B, seed=run.spec.seed)
    paired = position0_answer_for(Run.from_measurement(run), "cka")
    assert paired.paired and paired.B == ANSWER_B and paired.answered_with == "unbiased_cka"
    assert answers(at) == [f"**Is the gap a position-0 artefact?** {plain(paired.sentence)}"]
    words = f"both gaps on the same B = {ANSWER_B} multisets"  # "How this was decided"
    assert any(words in plain(c.value) for c in at.caption)
    assert not [p for p in at.get("progress") if "Pairing" in p.proto.text]


def test_every_delta_of_the_position0_comparison_is_the_answers(cache_dir):
    """The page says Δ = gap(no_pos0) − gap(default) once (SPEC 11.6): the answer box, "How
    this was decided" and the line of each control's paired move all give the run's one
    answer, its Δ and interval (unbiased CKA's replicates for linear CKA, named so in the line),
    never linear CKA's own paired move as another Δ of the same comparison."""
    import re

    from deffcore.runs.measure import measure
    from deffcore.statistics.bos_answer import ANSWER_B, run_answer
    from deffcore.views.run import Run

    run = measure(**{**RUN, "seed": 5, "bos": "none"})  # position 0 varies: its own control
    at = open_page(f"cached:{run.spec.key()}")
    wait_task(f"paired:{run.spec.key()}:cka:{ANSWER_B}")  # every pooling, in the background
    at.run()
    assert_clean(at)
    answer = run_answer(Run.from_measurement(jobs.load_result(run.spec.key())), "cka")  # as stored
    assert answer.paired and answer.answered_with == "unbiased_cka", answer
    lo, hi = answer.interval
    texts = [plain(e.value) for e in (*at.markdown, *at.caption, *at.success, *at.info)]
    (line,) = [t for t in texts if "Each control's move of the gap" in t]
    moves = re.findall(r"no_pos0 ([+-]\d+\.\d+) \[([+-]\d+\.\d+), ([+-]\d+\.\d+)\]", line)
    assert moves == [(f"{answer.delta:+.2f}", f"{lo:+.2f}", f"{hi:+.2f}")], line
    assert "(the BOS answer's Δ, unbiased CKA's replicates)" in line
    (box,) = answers(at)
    assert f"by {answer.delta:+.1f} points ({answer.ci:.0%} {lo:+.1f} to {hi:+.1f}" in box
    (how,) = [t for t in texts if "same B = " in t and "multisets" in t]  # "How this was decided"
    assert f"= {answer.delta:+.2f} points" in how and f"[{lo:+.2f}, {hi:+.2f}]" in how


def test_snapshot_offers_the_diagnostics_then_shows_them(cache_dir, monkeypatch):
    """A snapshot without its diagnostics (the shipped default's numbers, its extras left
    out, as an older or shared file; no Measurement): the answer at once, a button that
    computes the diagnostics in the background (a stand-in here: the real pass needs
    SmolLM2), then the figures drawn from exactly those numbers."""
    import explorer.views
    from deffcore.lenses import diagnostics_store
    from deffcore.views.run import Run, load_snapshot

    extras = ("diagnostics", "bos_on_off")
    snap = Run.from_snapshot({k: v for k, v in load_snapshot().data.items() if k not in extras})
    snap.source = "precomputed"
    monkeypatch.setattr(explorer.views, "default_snapshot", lambda: snap)
    monkeypatch.setattr(explorer.views, "precomputed_runs", lambda: [snap])
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
    monkeypatch.setattr(
        diagnostics_store, "diagnose", lambda spec, **kw: calls.append(spec) or fake
    )
    monkeypatch.setattr(diagnostics_store, "read_diagnostics", lambda spec: fake if calls else None)
    at = open_page()
    assert_clean(at)
    from deffcore.statistics.bos_answer import position0_answer_for

    # the shipped default reads "indicative": the calibrated answer is whatever the
    # library says of it, in words (today "cannot tell yet" with the action)
    want = position0_answer_for(snap, "cka")
    assert answers(at) == [f"**Is the gap a position-0 artefact?** {plain(want.sentence)}"]
    assert "massive activations not computed" in verdicts(at)[0]
    assert not calls  # nothing computed before the click
    at.button(key="bos_diagnose").click().run()
    wait_task(f"diagnostics:{diagnostics_store.spec_from_fields(snap.spec).key()}")
    at.run()
    assert_clean(at)
    assert calls and calls[0].model == snap.spec["model"] and calls[0].n == snap.spec["n"]
    (v,) = verdicts(at)
    assert "position 0 from layer 2" in v
    assert metric(at, "Massive at position 0") == "from layer 2"
    assert metric(at, "Sink heads") == "50% max"
    massive = chart(at, "Massive activations")
    np.testing.assert_allclose(plotly_array(massive["data"][0]["y"]), ratio)
    lo, hi = massive["layout"]["yaxis"]["range"]  # fitted to the data, not 1 .. 1e108
    assert 0.0 < lo < np.log10(5.0) and np.log10(180.0) < hi < 3.0
    np.testing.assert_allclose(
        plotly_array(chart(at, "Attention sinks")["data"][0]["y"]), [0.5] * L
    )


def test_verdict_and_evidence_match_the_library(app, measurement):
    from deffcore.lenses.diagnostics_store import read_diagnostics
    from deffcore.statistics.bos_answer import identical_controls
    from deffcore.statistics.verdict import bos_verdict, verdict_inputs

    at = app
    diag = read_diagnostics(measurement.spec)  # computed in the background, stored beside it
    assert diag is not None and diag["n_passages"] == RUN["n"]
    want = bos_verdict(
        {p: measurement.summary(p).gap_pct for p in POOLINGS},
        identical=identical_controls(measurement, "cka"),
        **verdict_inputs(diag),
    )
    (v,) = verdicts(at)
    assert v == f"**Pooling controls and diagnostics:** {plain(want.sentence)}"
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
    sinks = chart(at, "Attention sinks")
    np.testing.assert_allclose(plotly_array(sinks["data"][0]["y"]), diag["sink_fraction"])
    # beside ours, the papers' own definitions, named apart
    np.testing.assert_allclose(plotly_array(sinks["data"][1]["y"]), diag["gu_sink_fraction"])
    assert sinks["data"][1]["name"].startswith("Gu et al.") and "whole" in sinks["data"][1]["name"]
    sun = chart(at, "Massive activations by Sun et al.")
    np.testing.assert_allclose(plotly_array(sun["data"][0]["y"]), diag["sun_share"])
    gu_words = f"Gu et al.'s Sink₀.₃ over all blocks, whole passages: {diag['gu_sink_metric']:.1%}"
    assert any(gu_words in plain(c.value) for c in at.caption)
    at.radio(key="bos_gu_window").set_value("gu64_").run()
    first64 = chart(at, "Attention sinks")["data"][1]
    np.testing.assert_allclose(plotly_array(first64["y"]), diag["gu64_sink_fraction"])
    assert "first 64 tokens" in first64["name"]
    at.radio(key="bos_gu_window").set_value("gu_").run()
    np.testing.assert_allclose(
        plotly_array(chart(at, "Position-0 norm ratio")["data"][0]["y"]),
        measurement.pooled.pos0_norm_ratio,
        rtol=1e-6,
    )


def test_passage_inspector_heatmap(app, measurement):
    from deffcore.lenses.diagnostics_store import read_diagnostics

    at = app
    ins = read_diagnostics(measurement.spec)["inspector"]
    at.selectbox(key="inspect_passage").set_value(3).run()
    assert_clean(at)
    fig = chart(at, "Token-state norms")
    heat = fig["data"][0]
    np.testing.assert_allclose(
        plotly_array(heat["z"]), np.log10(np.asarray(ins["token_norms"][3])), rtol=1e-6
    )
    from deffcore.core.safe_text import plotly_text  # a passage's tokens are text, never HTML

    assert list(heat["text"][0]) == [plotly_text(repr(t)[1:-1]) for t in ins["tokens"][3]]
    assert fig["layout"]["yaxis"]["autorange"] == "reversed"  # layer 0 at the top
    marks = trace(fig, "largest |h_j| (feature j)")
    assert list(plotly_array(marks["x"])) == ins["max_position"][3]


def test_bos_on_off_acts_on_the_current_run_and_concludes(app, measurement):
    """The run panel names another model; the check measures the run on screen."""
    from deffcore.runs.measure import measure

    at = app
    at.switch_page("pages/7_Runs.py").run()  # the run panel's one page
    at.selectbox(key="model_packaged").set_value("smollm2-135m")  # not the current run
    at.run()
    at.switch_page(PAGE).run()
    button = at.button(key="bos_compare")
    assert "tiny-llama" in plain(button.label) and "smollm2" not in button.label
    button.click().run()
    spec = measurement.spec
    wait_task(f"bos-onoff:{spec.key()}:cka:{measurement.layers - 1}")  # the K slider: L-1
    at.run()
    assert_clean(at)
    for bos in ("add", "none"):
        m = measure(**RUN, bos=bos)
        assert m.cached  # the page's runs, read back: tiny-llama, not the run panel's smollm2
        gap = m.summary("default").gap_pct
        assert metric(at, f"Gap to F_L, default (bos={bos})") == f"{gap:+.1f}%"
    (conclusion,) = [e.value for e in (*at.success, *at.info) if "Conclusion" in e.value]
    assert conclusion.count(". ") == 0 and "removing the BOS moves the gap" in conclusion
    fig = chart(at, "BOS on or off")
    assert {"bos=add", "bos=none"} <= {y for t in fig["data"] for y in t["y"]}
