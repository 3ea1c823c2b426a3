"""The app's live estimates and plan line (explorer.live), as AppTest draws them."""

from __future__ import annotations

import numpy as np
from apptest_helpers import plain
from streamlit.testing.v1 import AppTest


def _status(estimates, **kw):
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.work import job_state

    spec = RunSpec("tiny-llama", None, "x.txt", 512, 16, 0, "float32", passages="windows")
    base = dict(
        job_id="j1",
        spec=spec,
        state="running",
        stage="extracting",
        done=128,
        total=512,
        tokens_per_s=None,
        tokens_exact=True,
        eta_s=None,
        elapsed_s=1.0,
        stage_elapsed_s=1.0,
        error=None,
        result_key=None,
        from_cache=False,
        resumed=0,
        cancel_requested=False,
        ahead=0,
        estimates=tuple(estimates),
    )
    return job_state.JobStatus(**{**base, **kw})


def _estimates():
    from deffcore.core.constants import EXTRACTED_POOLINGS
    from deffcore.extraction.forward import PooledStates
    from deffcore.statistics.anytime import estimate

    rng = np.random.default_rng(0)
    out = []
    for n in (64, 128):
        x = np.cumsum(rng.standard_normal((5, n, 64), dtype=np.float32), axis=0)
        pooled = PooledStates(
            pooled={p: x for p in EXTRACTED_POOLINGS},
            pos0_norm_ratio=np.ones(5, np.float32),
            n_dropped_short=0,
            tokens=n * 16,
            lengths=np.full(n, 16, np.int64),
        )
        out.append(estimate(pooled, bootstrap=12).to_dict())
    return out


def _panel(status):
    from explorer.live import live_panel

    live_panel(status)


def test_live_panel_shows_the_latest_estimate_its_trust_and_the_curve():
    est = _estimates()
    at = AppTest.from_function(_panel, args=(_status(est),)).run(timeout=60)
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["N of this estimate"] == "128"
    assert metrics["D_eff / L"] == f"{est[-1]['poolings']['default']['deff_over_L']:.4f}"
    assert metrics["Trust"].split()[-1] == est[-1]["poolings"]["default"]["level"]
    assert any("Estimated with" in c.value for c in at.caption)
    boxes = [x.value for x in [*at.info, *at.success]]
    assert any("Pooling controls" in x for x in boxes)
    # the BOS answer with its paired interval (no_pos0 equals default here: Δ = 0 exactly)
    answer = est[-1]["position0"]
    assert answer["paired"] and answer["verdict"] == "not_artefact"
    assert any(plain(x).startswith("Is the gap a position-0 artefact? At N = 128") for x in boxes)
    assert at.button(key="job_settle").label == "Stop when settled"
    assert len(at.get("plotly_chart")) == 1


def test_live_panel_before_the_first_estimate_and_for_documents():
    at = AppTest.from_function(_panel, args=(_status(()),)).run(timeout=60)
    assert any("first estimate appears once 32 passages" in c.value for c in at.caption)
    from deffcore.inputs.run_spec import RunSpec

    docs = RunSpec("tiny-llama", None, "x.txt", 64, 16, 0, "float32", passages="documents")
    at = AppTest.from_function(_panel, args=(_status((), spec=docs),)).run(timeout=60)
    captions = [c.value for c in at.caption]
    assert not any("No estimates before the end" in c for c in captions)
    assert any("first estimate appears once 32 passages" in c for c in captions)
    # no button, and no paragraph on stopping early: the box speaks of what the user asked for
    assert not any("Stopping early" in c or "stop early" in c for c in captions), captions
    assert not at.button
    with_estimates = AppTest.from_function(_panel, args=(_status(_estimates(), spec=docs),)).run(
        timeout=60
    )
    assert {m.label for m in with_estimates.metric} >= {"N of this estimate", "Trust"}
    tiny = RunSpec("tiny-llama", None, "x.txt", 24, 16, 0, "float32", passages="windows")
    at = AppTest.from_function(_panel, args=(_status((), spec=tiny),)).run(timeout=60)
    assert any("is its own first estimate" in c.value for c in at.caption)


def test_stopping_button_is_disabled_once_asked():
    at = AppTest.from_function(_panel, args=(_status(_estimates(), until="verdict"),)).run(
        timeout=60
    )
    button = at.button(key="job_settle")
    assert button.disabled and button.label == "Stopping when settled"


def _plan(settings):
    from explorer.plan_line import plan_caption

    plan_caption(settings)


def test_plan_line_beside_run_without_loading_a_model(monkeypatch):
    from deffcore.runs import priors
    from explorer import plan_line
    from explorer.settings import Settings

    monkeypatch.setattr(priors, "load_average", lambda: 3.0)  # one load for the app and the test
    # a plan of these settings (the run panel's defaults) drawn by an earlier test is kept for
    # 30 s, priced at that moment's load: this test prices its own
    plan_line._plan.clear()

    settings = Settings(
        model="smollm2-135m",
        revision=None,
        dataset="bbc-news",
        n=4096,
        max_tokens=128,
        seed=0,
        pooling="default",
        metric="cka",
        K=None,
        passages="windows",
    )
    at = AppTest.from_function(_plan, args=(settings,)).run(timeout=60)
    assert not at.exception
    (caption,) = at.caption
    line = plain(caption.proto.help)  # the planner's whole line on hover, a short one shown
    assert line.startswith("Plan: smollm2-135m on 4,096 passages x 128 tokens")
    assert "peak memory" in line
    # nothing measured in this fresh cache: the packaged model's prior for this class of
    # machine gives the time before the first run (SPEC 14, ETA), no button to measure it
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.runs.planner import human_time, plan_run

    found = priors.prior("smollm2-135m", "cpu")
    assert found.describe() in line
    spec = RunSpec("smollm2-135m", None, "bbc-news", 4096, 128, 0, "float32", passages="windows")
    plan = plan_run(spec, "cpu", calibrate="cached")
    assert plan.time_source == found.describe()  # test_run_priors checks its parts by hand
    shown = plain(caption.value)
    assert shown.startswith(f"Plan: 524,288 tokens · about {human_time(plan.seconds)} here · peak")
    assert not at.button


def test_plan_line_says_cached_for_a_run_the_cache_holds(cache_dir):
    """Settings already measured open at once: the line says so, not the plan's minutes (it
    did for 30 s after the run landed: the plan is cached, the cache is read afresh)."""
    from explorer.settings import Settings

    settings = Settings(model="tiny-llama", revision=None, dataset="bbc-news", n=8,
                        max_tokens=16, seed=0, pooling="default", metric="cka", K=None,
                        passages="windows")  # fmt: skip
    at = AppTest.from_function(_plan, args=(settings,)).run(timeout=60)
    assert not at.exception
    assert at.caption and "cached" not in at.caption[0].value
    from deffcore.runs.measure import measure

    measure(model="tiny-llama", dataset="bbc-news", n=8, max_tokens=16, seed=0,
            passages="windows")  # fmt: skip
    at.run(timeout=60)
    assert [c.value for c in at.caption] == ["Plan: cached — opens at once"]


def test_short_plan_of_a_model_of_unknown_size():
    from explorer.plan_line import short_plan

    plan = {"fits": True, "tokens": 4096, "seconds": None, "memory_bytes": {}, "disk_bytes": None}
    assert short_plan(plan) == "Plan: 4,096 tokens · time unknown · memory unknown"
    plan = {"fits": False, "refusal": "It needs 9 GiB; 8 GiB may be used."}
    assert short_plan(plan) == "Will not fit: It needs 9 GiB; 8 GiB may be used."
