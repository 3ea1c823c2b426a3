"""One-off stages with their own estimate (deffcore.runs.stage_times) and background tasks
(deffcore.work.jobs.start_task): progress from the first second."""

from __future__ import annotations

import threading

import pytest

from deffcore.core.files import cache_dir
from deffcore.runs import stage_times
from deffcore.work import jobs


def test_estimate_prior_then_this_machines_record(monkeypatch):
    from deffcore.runs import priors

    # the packaged model's prior for this class of machine (SPEC 14, ETA)
    prior = priors.stage_seconds("loading model", "gemma3-270m", "cpu")
    assert prior is not None and stage_times.estimate("loading model", "gemma3-270m") == prior
    monkeypatch.setattr(priors, "_table", dict)  # no measured prior: the reference machine's
    assert stage_times.estimate("loading model", "gemma3-270m") == 49.0
    assert stage_times.estimate("loading model", "tiny-llama") == stage_times.TINY_PRIOR_S
    assert stage_times.estimate("loading model", "EleutherAI/pythia-70m") is None
    stage_times.record("loading model", "gemma3-270m", 12.5)
    assert stage_times.estimate("loading model", "gemma3-270m") == 12.5
    stage_times.record("loading model", "gemma3-270m", float("nan"))  # ignored
    assert stage_times.estimate("loading model", "gemma3-270m") == 12.5


def test_a_stage_quicker_than_a_millisecond_is_still_this_machines_time():
    """A tiny model moves to the CPU in well under a millisecond on a fast machine: kept as
    the finest time, never rounded to 0 (which reads back as no estimate at all)."""
    stage_times.record("loading model: moving", "tiny-qwen3", 0.0004)
    assert stage_times.estimate("loading model: moving", "tiny-qwen3") == stage_times.RESOLUTION_S
    stage_times.record("loading model: moving", "tiny-qwen3", 0.0126)
    assert stage_times.estimate("loading model: moving", "tiny-qwen3") == 0.013


def test_a_damaged_file_is_ignored():
    cache_dir().mkdir(parents=True, exist_ok=True)
    (cache_dir() / stage_times.STAGE_FILE).write_text('{"loading model|x": "rm -rf"')
    assert stage_times.estimate("loading model", "x") is None
    (cache_dir() / stage_times.STAGE_FILE).write_text('{"loading model|x": -3, "a|b": "1"}')
    assert stage_times.estimate("loading model", "x") is None


def test_fraction_never_claims_done():
    assert stage_times.fraction(10, 20) == 0.5
    assert stage_times.fraction(50, 20) == stage_times.MAX_FRACTION
    assert stage_times.fraction(5, None) == 0.0


def test_a_task_shows_its_one_off_stage_with_an_estimate_then_its_steps():
    stage_times.record("loading model", "my-model", 40.0)
    loading, go_on, stepping, finish = (threading.Event() for _ in range(4))

    def task(progress, should_stop):
        progress(0, 4, "loading my-model")
        loading.set()
        go_on.wait(30)
        for i in range(1, 3):
            progress(i, 4, "diagnostics")
        stepping.set()
        finish.wait(30)
        return {"answer": 42}

    job_id = jobs.start_task("test-task", task, model="my-model")
    assert jobs.start_task("test-task", task) == job_id  # one task per name at a time
    assert loading.wait(30)
    st = jobs.status(job_id)
    assert (st.kind, st.stage, st.stage_estimate_s) == ("task", "loading model", 40.0)
    assert "of about 40 s" in st.describe() and 0.0 <= st.stage_fraction < 0.95
    go_on.set()
    assert stepping.wait(30)
    st = jobs.status(job_id)
    assert st.stage == "diagnostics" and st.done == 2 and st.stage_fraction == 0.5
    assert st.describe().startswith("diagnostics: 2 / 4")
    finish.set()
    done = jobs.wait(job_id, timeout=30)
    assert done.state == "done" and done.result == {"answer": 42}
    assert jobs.task_job("test-task").job_id == job_id
    # leaving the loading stage for work recorded this load's time
    assert stage_times.estimate("loading model", "my-model") != 40.0


def test_a_failing_task_keeps_its_sentence():
    from deffcore.core.errors import DeffError

    def task(progress, should_stop):
        raise DeffError("The diagnostics need a model with attention probabilities.")

    st = jobs.wait(jobs.start_task("failing-task", task), timeout=30)
    assert st.state == "failed" and st.error.startswith("The diagnostics need")


@pytest.mark.parametrize("spec", ["gemma3-270m", "smollm2-135m"])
def test_needs_assembly_only_for_gemma_before_its_file(spec):
    from deffcore.inputs.model import GEMMA3_FILE, needs_assembly

    assert needs_assembly(spec) == (spec == "gemma3-270m")
    (cache_dir() / "models").mkdir(parents=True, exist_ok=True)
    (cache_dir() / "models" / GEMMA3_FILE).write_bytes(b"x")
    assert not needs_assembly(spec)
