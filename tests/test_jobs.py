"""Background runs (deffcore.work.jobs): a job lands in the cache, reports progress, cancels cleanly
(leaving a partial entry that resumes, never a complete-looking one), and bad data is refused
before any model loads."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import deffcore.extraction.forward
import deffcore.runs.measure
from deffcore.core.errors import DeffError, TooFewPassagesError
from deffcore.extraction import cache
from deffcore.extraction import cache as entries
from deffcore.inputs.run_spec import RunSpec
from deffcore.runs import measure as preflight
from deffcore.runs.measure import measure
from deffcore.work import job_state, jobs

RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}


def spec_of(**overrides):
    """The RunSpec of RUN with `overrides`, built directly (run_spec's own checks are
    exercised through `jobs.plan`)."""
    run = {**RUN, **overrides}
    return RunSpec(
        model=run["model"],
        revision=None,
        dataset=run["dataset"],
        n=run["n"],
        max_tokens=run["max_tokens"],
        seed=run["seed"],
        dtype="float32",
        passages=run.get("passages", "documents"),
    )


def test_a_job_lands_in_the_cache_with_the_numbers_of_measure():
    spec = spec_of()
    job_id = jobs.start(spec, batch_size=4)  # 4 batches: a rate over the last 3
    st = jobs.wait(job_id, timeout=600)
    assert st.state == "done", st.error
    assert st.result_key == spec.key() and not st.from_cache
    assert st.done == st.total == 16
    # exact: the entry's mean tokens per passage x the passage rate over the batches
    assert st.tokens_per_s and st.tokens_per_s > 0 and st.tokens_exact
    m = jobs.load_result(st.result_key)
    direct = measure(**RUN)  # a cache hit: the job's entry
    assert direct.cached
    np.testing.assert_array_equal(m.similarity("default"), direct.similarity("default"))
    assert "done" in st.describe() and "16 passages" in st.describe()

    again = jobs.wait(jobs.start(spec), timeout=60)
    assert again.state == "done" and again.from_cache
    assert "served from the cache" in again.describe()


def test_progress_stages_and_rates(monkeypatch):
    seen = []
    real = job_state.status_of

    spec = spec_of(n=48, max_tokens=64, passages="windows")
    job_id = jobs.start(spec, batch_size=8)
    while (st := jobs.status(job_id)) and not st.finished:
        seen.append(real(job_state.JOBS[job_id]))
    st = jobs.wait(job_id, timeout=600)
    assert st.state == "done", st.error
    stages = [s.stage for s in seen]
    assert "loading model" in stages and "extracting" in stages
    assert stages.index("loading model") < stages.index("extracting")
    extracting = [s for s in seen if s.stage == "extracting"]
    assert all(0 < s.done <= 48 and s.total == 48 for s in extracting)
    rated = [s for s in extracting if s.tokens_per_s]
    assert rated, "no rate after several batches"
    # windows are exactly max_tokens long: the rate is exact, and ETA = remaining / rate
    assert all(s.tokens_exact for s in rated)
    assert all(s.eta_s is not None and s.eta_s >= 0 for s in rated)


def test_cancel_stops_and_leaves_no_complete_entry(gate):
    spec = spec_of(n=64, max_tokens=64)
    job_id = jobs.start(spec, batch_size=8)
    while jobs.status(job_id).stage != "loading model":
        jobs.wait(job_id, timeout=0.05)
    assert "loading model" in jobs.status(job_id).describe()
    assert jobs.cancel(job_id)
    gate.set()
    st = jobs.wait(job_id, timeout=600)
    assert st.state == "cancelled" and st.result_key is None
    assert cache.load(spec) is None  # nothing loads as a complete run
    assert all(r["status"] != "complete" for r in entries.list_runs() if r["key"] == spec.key())
    assert not jobs.cancel(job_id)  # already finished


def test_cancelled_after_a_batch_resumes_from_its_partial(cancel_after_first_batch):
    spec = spec_of(n=64, max_tokens=64)
    first = jobs.wait(jobs.start(spec, batch_size=8), timeout=600)
    assert first.state == "cancelled"
    partial = [r for r in entries.list_runs() if r["key"] == spec.key()]
    assert [r["status"] for r in partial] == ["partial"]
    assert jobs.partial_spec(spec.key()) == spec
    assert jobs.kept_passages(spec) == partial[0]["done_passages"] > 0

    cancel_after_first_batch()  # stop cancelling: the resumed job runs to the end
    resumed = jobs.wait(jobs.start(jobs.partial_spec(spec.key()), batch_size=8), timeout=600)
    assert resumed.state == "done", resumed.error
    assert resumed.resumed > 0
    fresh = deffcore.runs.measure.measure_spec(spec, use_cache=False, batch_size=8)
    np.testing.assert_array_equal(
        jobs.load_result(resumed.result_key).pooled.pooled["default"],
        fresh.pooled.pooled["default"],
    )


def test_queue_dedupe_and_cancelling_a_queued_job(gate):
    first = jobs.start(spec_of(n=20))
    assert jobs.start(spec_of(n=20)) == first  # same spec, same job
    second = jobs.start(spec_of(n=24))
    st = jobs.status(second)
    assert st.state == "queued" and st.ahead == 1
    assert "waiting for 1 run" in st.describe()
    assert [j.job_id for j in jobs.active_jobs()][-2:] == [first, second]
    assert jobs.cancel(second)
    assert jobs.status(second).state == "cancelled"  # at once: it never started
    gate.set()
    assert jobs.wait(first, timeout=600).state == "done"
    assert jobs.status("no-such-job") is None


# ---------------------------------------------------------------------------------------------
# checked before any model loads, naming the user's own file
# ---------------------------------------------------------------------------------------------


def test_empty_and_binary_files_are_refused_before_the_model(no_model, tmp_path):
    saved = tmp_path / ".uploads" / "0123456789abcdef_my passages.txt"
    saved.parent.mkdir()
    names = {str(saved): "my passages.txt"}
    for content in (b"", b"\x00\x01\x02\xff\xfe"):
        saved.write_bytes(content)
        for attempt in (
            lambda: jobs.start(spec_of(dataset=str(saved)), names=names),
            lambda: preflight.plan(**{**RUN, "metric": "cka", "dataset": str(saved)}, names=names),
        ):
            with pytest.raises(DeffError) as err:
                attempt()
            assert "my passages.txt" in str(err.value)
            assert "0123456789abcdef" not in str(err.value) and ".uploads" not in str(err.value)
    assert no_model == []


def test_n_beyond_the_dataset_and_missing_paths_are_refused_before_the_model(no_model, tmp_path):
    small = tmp_path / "five.txt"
    small.write_text("\n\n".join(f"passage number {i}" for i in range(5)))
    with pytest.raises(TooFewPassagesError, match=r"five\.txt"):
        jobs.start(spec_of(dataset=str(small), n=6))
    with pytest.raises(TooFewPassagesError, match=r"2,225|2225"):
        jobs.start(spec_of(n=5000))
    with pytest.raises(DeffError, match=r"no-such-file\.txt"):
        jobs.start(spec_of(dataset=str(tmp_path / "no-such-file.txt")))
    with pytest.raises(TooFewPassagesError, match="windows of 64 tokens"):
        jobs.start(spec_of(n=100_000, max_tokens=64, passages="windows"))  # BBC: 78,881
    with pytest.raises(TooFewPassagesError, match="yields 50 windows"):
        preflight.check(spec_of(n=51, passages="windows"), windows=50)  # a count the app knows
    with pytest.raises(DeffError, match="no-model-here"):
        jobs.start(spec_of(model=str(tmp_path / "no-model-here")))
    assert no_model == []


def test_a_tokenizer_error_of_the_window_count_is_said_before_the_model(no_model):
    # counting windows loads the tokenizer: its DeffError (a model not on this machine) is the
    # answer, said before the run is queued; only an unexpected error is left to the worker
    before = set(job_state.JOBS)
    with pytest.raises(DeffError, match="no-such-org/no-such-model"):
        jobs.start(spec_of(model="no-such-org/no-such-model", passages="windows"))
    assert set(job_state.JOBS) == before and no_model == []


def test_a_worker_failure_is_a_failed_job_with_its_message(monkeypatch, deff_cache_dir):
    def failing(*args, **kwargs):
        raise RuntimeError("CUDA error: device-side assert triggered")

    real = deffcore.runs.measure.extract_run
    monkeypatch.setattr(deffcore.runs.measure, "extract_run", failing)
    st = jobs.wait(jobs.start(spec_of(n=12)), timeout=600)
    assert st.state == "failed"
    assert st.error == (
        "The run failed unexpectedly (RuntimeError): CUDA error: device-side assert triggered"
    )
    # put back only the extraction: monkeypatch.undo() would also drop this test's
    # DEFF_CACHE_DIR, and the second run would land in the repository's cache/ folder
    monkeypatch.setattr(deffcore.runs.measure, "extract_run", real)
    st = jobs.wait(jobs.start(spec_of(n=12)), timeout=600)
    assert st.state == "done"  # the worker is alive
    assert (deff_cache_dir / st.result_key / "meta.json").is_file()  # in the test's cache


# ---------------------------------------------------------------------------------------------
# sweeps are jobs of the same registry and queue
# ---------------------------------------------------------------------------------------------

SWEEP = {"n": 8, "max_tokens": 16, "engine": "serial"}


def _cells(*seeds):
    from deffcore.work.sweep.cells import Cell

    return [Cell("tiny-llama", seed=s) for s in seeds]


def test_a_sweep_job_lands_its_cells_and_says_so():
    job_id = jobs.start_sweep(_cells(1, 2), **SWEEP)
    st = jobs.wait(job_id, timeout=600)
    assert st.state == "done" and st.kind == "sweep" and st.spec is None
    assert st.done == st.total == 2 and st.datasets == ("bbc-news",)
    assert st.describe() == "sweep done: 2 of 2 cells landed"
    snap = jobs.sweep_job(job_id)
    assert snap["landed"] == 2 and [r["status"] for r in snap["rows"]] == ["done", "done"]
    assert jobs.sweep_job("no-such-job") is None
    run = jobs.start(spec_of(n=12))
    assert jobs.sweep_job(run) is None  # a run is not a sweep
    assert jobs.wait(run, timeout=600).kind == "run"


def test_a_running_sweep_is_cancelled_before_its_next_cell(monkeypatch):
    import threading

    real = deffcore.runs.measure.extract_run
    inside, release, calls = threading.Event(), threading.Event(), []

    def held(*args, **kwargs):
        calls.append(1)
        inside.set()
        assert release.wait(600)
        return real(*args, **kwargs)  # asks should_stop before its first batch

    monkeypatch.setattr(deffcore.runs.measure, "extract_run", held)
    job_id = jobs.start_sweep(_cells(1, 2, 3), **SWEEP)
    assert inside.wait(600)
    assert jobs.cancel(job_id)
    assert "stopping after this cell" in jobs.status(job_id).describe()
    release.set()
    st = jobs.wait(job_id, timeout=600)
    assert st.state == "cancelled" and st.error is None
    assert calls == [1]  # the other cells never started
    assert jobs.sweep_job(job_id)["landed"] == 0
    assert not jobs.cancel(job_id)  # finished


def test_a_queued_sweep_is_cancelled_at_once(gate):
    run = jobs.start(spec_of(n=20))  # holds the worker at its model load
    job_id = jobs.start_sweep(_cells(1), **SWEEP)
    st = jobs.status(job_id)
    assert st.state == "queued" and st.ahead == 1
    assert [j.job_id for j in jobs.active_jobs()][-2:] == [run, job_id]
    assert jobs.cancel(job_id)
    assert jobs.status(job_id).state == "cancelled"
    gate.set()
    assert jobs.wait(run, timeout=600).state == "done"
    assert jobs.sweep_job(job_id)["landed"] == 0


def test_a_sweep_and_a_run_never_extract_at_the_same_time(monkeypatch):
    import threading
    import time

    real = deffcore.runs.measure.extract_run
    lock, now, peak, spans = threading.Lock(), [0], [0], []

    def counted(*args, **kwargs):
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        start = time.monotonic()
        try:
            time.sleep(0.2)  # room for a second extraction to overlap, if one could
            return real(*args, **kwargs)
        finally:
            with lock:
                now[0] -= 1
                spans.append((start, time.monotonic()))

    monkeypatch.setattr(deffcore.runs.measure, "extract_run", counted)
    sweep = jobs.start_sweep(_cells(4, 5), **SWEEP)
    run = jobs.start(spec_of(n=12, max_tokens=16))
    assert jobs.wait(sweep, timeout=600).state == "done"
    assert jobs.wait(run, timeout=600).state == "done"
    assert len(spans) == 3 and peak[0] == 1
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def test_a_sweep_is_checked_before_it_is_queued(no_model):
    from deffcore.work.sweep.cells import MAX_CELLS, Cell
    from deffcore.work.sweep.checks import SweepError

    before = set(job_state.JOBS)
    with pytest.raises(SweepError, match=f"at most {MAX_CELLS}"):
        jobs.start_sweep(_cells(*range(MAX_CELLS + 1)), **SWEEP)
    with pytest.raises(SweepError, match="no cells"):
        jobs.start_sweep([], **SWEEP)
    with pytest.raises(SweepError, match="Unknown norm intervention"):
        jobs.start_sweep([Cell("tiny-llama", intervention="no_such_norm")], **SWEEP)
    with pytest.raises(DeffError, match="n must be"):
        jobs.start_sweep(_cells(1), **{**SWEEP, "n": 2})
    with pytest.raises(SweepError, match="Unknown sweep engine"):
        jobs.start_sweep(_cells(1), **{**SWEEP, "engine": "fast"})
    assert set(job_state.JOBS) == before  # nothing was queued
    assert no_model == []


def test_a_background_sweep_fails_a_bad_cell_alone_and_refuses_a_bad_shared_option(
    tiny_dataset, tmp_path
):
    """The security sweep rule (tests/test_sweep_checks.py) holds for a queued sweep too: a
    cell whose model or dataset cannot be built fails alone with its sentence while the others
    land; a bad option every cell shares still refuses the sweep before it is queued."""
    from deffcore.work.sweep.cells import Cell

    cells = [
        Cell("tiny-llama", dataset=tiny_dataset),
        Cell("tiny-nope", dataset=tiny_dataset),  # an unknown tiny model
        Cell("tiny-gpt2", dataset=str(tmp_path / "missing.txt")),  # a missing dataset
    ]
    job_id = jobs.start_sweep(cells, **SWEEP)
    assert jobs.wait(job_id, timeout=600).state == "done"
    rows = jobs.sweep_job(job_id)["rows"]
    by_model = {r["model"]: r for r in rows}
    assert [by_model[c.model]["status"] for c in cells] == ["done", "failed", "failed"]
    assert "Unknown tiny model" in by_model["tiny-nope"]["error"]
    assert "does not exist" in by_model["tiny-gpt2"]["error"]
    before = set(job_state.JOBS)
    for bad in ({"seed": -1}, {"dtype": "float8"}, {"max_tokens": 1}):
        with pytest.raises(DeffError):
            jobs.start_sweep(cells, **{**SWEEP, **bad})
    assert set(job_state.JOBS) == before  # nothing was queued


def test_finished_sweeps_are_forgotten_like_runs(monkeypatch):
    import deffcore.work.sweep.runner

    def fails_fast(spec, device, batch_size=None, should_stop=None):
        return {"pooled": None, "error": "no model here", "worker": "test", "seconds": 0.0}

    monkeypatch.setattr(deffcore.work.sweep.runner, "compute_cell", fails_fast)
    monkeypatch.setattr(job_state, "KEEP_FINISHED", 1)
    first = jobs.start_sweep(_cells(11), **SWEEP)
    assert jobs.wait(first, timeout=60).state == "done"
    second = jobs.start_sweep(_cells(12), **SWEEP)
    assert jobs.wait(second, timeout=60).state == "done"
    assert jobs.sweep_job(second)["rows"][0]["error"] == "no model here"
    third = jobs.start_sweep(_cells(13), **SWEEP)  # starting it forgets the oldest finished
    assert jobs.sweep_job(first) is None and jobs.status(first) is None
    assert jobs.sweep_job(second) is not None
    jobs.wait(third, timeout=60)


def test_forget_finished_drops_only_finished_jobs():
    from deffcore.work import jobs

    done = jobs.start_task("forget-me", lambda progress, should_stop: {"ok": 1})
    assert jobs.wait(done, timeout=60).state == "done"
    assert jobs.forget_finished() >= 1
    assert jobs.status(done) is None and jobs.task_job("forget-me") is None
