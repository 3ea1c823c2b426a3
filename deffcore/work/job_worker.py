"""The one worker thread of background work: it takes queued jobs in order and runs each (a run
through `deffcore.runs.anytime_run.measure_live`; why and how: `deffcore.work.jobs`).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from deffcore.core.errors import DeffError, RunCancelled
from deffcore.runs.measure import display
from deffcore.work import job_state
from deffcore.work.job_state import FINISHED, ONE_OFF_STAGES, Job, model_of, passage_rate

_WORKER: threading.Thread | None = None


def ensure_worker() -> None:
    global _WORKER
    if _WORKER is None or not _WORKER.is_alive():
        _WORKER = threading.Thread(target=_work, name="deff-jobs", daemon=True)
        _WORKER.start()


def _work() -> None:
    while True:
        with job_state.JOBS_LOCK:
            while not job_state.QUEUE:
                job_state.WAKE.wait()
            job = job_state.JOBS[job_state.QUEUE.popleft()]
            job.state, job.started = "running", time.monotonic()
            _set_stage(
                job, "sweeping" if job.sweep else "starting" if job.task else "checking data"
            )
        if job.task is not None:
            _run_task(job)
        elif job.sweep is None:
            _run(job)
        else:
            _run_sweep(job)


def _set_stage(job: Job, stage: str) -> None:
    if stage != job.stage:
        now = time.monotonic()
        if job.stage in ONE_OFF_STAGES and stage not in FINISHED:  # it ended by working on
            from deffcore.runs.stage_times import record

            _set_load_part(job, "", now)
            record(job.stage, model_of(job), now - job.stage_started)
        job.stage, job.stage_started = stage, now


def _progress(job: Job):
    """measure's progress(done, total, stage) -> the job's fields."""

    def progress(done: int, total: int, stage: str) -> None:
        now = time.monotonic()
        with job_state.JOBS_LOCK:
            job.total = int(total)
            if stage == "extract" and job.first is None:  # the first batch began after this
                job.extract_from = job.signal or job.started
            job.signal = now
            if stage.startswith("assembling"):
                _set_stage(job, "assembling")
            elif stage.startswith("loading"):  # "loading <model>" or "loading <model>: <part>"
                _set_stage(job, "loading model")
                if ": " in stage:
                    _set_load_part(job, stage.rsplit(": ", 1)[1], now)
            elif stage.startswith("loaded "):  # the load ended: its time is the load's alone
                _set_stage(job, "preparing")
            elif stage == "cutting windows" and job.task is None:  # still preparing
                _set_stage(job, "preparing")
                job.prep_part = "cutting the token windows"
            elif stage == "resume":
                job.resumed = int(done)
                job.done = int(done)
            elif stage == "extract":
                _set_stage(job, "extracting")
                job.done = int(done)
                job.last = (now, int(done))
                if job.first is None:
                    job.first = job.last
            else:
                _set_stage(job, stage)
                if job.task is not None:  # a task's own steps count like passages
                    job.done, job.last = int(done), (now, int(done))
                    job.first = job.first or job.last

    return progress


def _measure(job: Job) -> Any:
    """The job's run with live estimates, each with the BOS answer's paired interval, and a
    stop when settled where its passages allow one (`deffcore.runs.anytime_run`)."""
    from deffcore.runs.anytime_run import measure_live
    from deffcore.statistics.stopping import StopRule, estimate_bootstrap

    options = {
        "metric": job.metric,
        "device": job.device,
        "batch_size": job.batch_size,
        "progress": _progress(job),
        "should_stop": job.cancel.is_set,
    }
    B, paired = estimate_bootstrap(StopRule("verdict"))  # what "Stop when settled" waits for

    def on_estimate(est: Any) -> None:
        with job_state.JOBS_LOCK:
            job.estimates.append(est.to_dict())

    live = measure_live(
        job.spec,
        **options,
        until=lambda: StopRule(job.until) if job.until else None,
        on_estimate=on_estimate,
        final_estimate=False,
        replay=False,
        bootstrap=B,
        bootstrap_poolings=paired,
    )
    with job_state.JOBS_LOCK:
        job.stopped_at = int(live.measurement.n) if live.stopped else None
    return live.measurement


def _expected(job: Job) -> Any:
    """The run's expected parts from its plan (`planner.expected_of`: a calibration, an observed
    run or the packaged model's prior; SPEC 14, ETA), None when the plan has no time. Never loads a
    model; a plan that cannot be made leaves the run without an ETA until its batches."""
    from deffcore.inputs.model import default_device
    from deffcore.runs.planner import expected_of, plan_run

    assert job.spec is not None
    try:
        plan = plan_run(job.spec, job.device or default_device(), batch_size=job.batch_size,
                        calibrate="cached")  # fmt: skip
        return expected_of(plan)
    except Exception:  # an ETA is a courtesy: the run goes on without one
        return None


def _run(job: Job) -> None:
    state, error = "failed", None
    expected = _expected(job)
    with job_state.JOBS_LOCK:
        job.expected = expected
    try:
        m = _measure(job)
        with job_state.JOBS_LOCK:
            job.result_key = m.spec.key()
            job.from_cache = bool(m.cached)
            job.done = job.total = int(m.n)
            job.resumed = int(getattr(m, "resumed_passages", 0) or 0)
            # exact mean tokens per passage x the passage rate over the extraction batches
            # (the model load is not in it); none when fewer than two batches ran here
            rate = passage_rate(job)
            if not m.cached and rate and m.pooled.tokens and m.n:
                job.final_tokens_per_s = float(m.pooled.tokens) / float(m.n) * rate
            ran = _observed_rate(job, m), time.monotonic() - (job.last or (0.0, 0))[0]
        if ran[0] is not None:  # the next plan of this model has a time (deffcore.runs.observed)
            from deffcore.runs.observed import record_run

            device = job.device or m.pooled.meta.get("device") or "cpu"
            record_run(m.spec, device, tokens_per_s=ran[0], numbers_s=ran[1], n=int(m.n))
        state = "done"
    except RunCancelled:
        state = "cancelled"
    except DeffError as err:
        error = display(str(err), job.names)
    except MemoryError:
        error = "The run ran out of memory; lower N or max tokens and try again."
    except Exception as err:  # any third-party failure ends the job, never the worker
        error = display(f"The run failed unexpectedly ({type(err).__name__}): {err}", job.names)
    _finish(job, state, error)


def _run_task(job: Job) -> None:
    """The worker's body for a task: its function, with progress and cancellation."""
    state, error = "failed", None
    try:
        result = job.task(_progress(job), job.cancel.is_set)
        with job_state.JOBS_LOCK:
            job.result = result
        state = "done"
    except RunCancelled:
        state = "cancelled"
    except DeffError as err:
        error = str(err)
    except MemoryError:
        error = "It ran out of memory."
    except Exception as err:  # the worker records every failure, never dies of one
        error = f"It failed unexpectedly ({type(err).__name__}): {err}"
    _finish(job, state, error)


def _run_sweep(job: Job) -> None:
    """The worker's body for a sweep job: its checked plan, cell after cell (or on Ray)."""
    from deffcore.work.sweep.cells import one_sentence
    from deffcore.work.sweep.runner import run_plan

    work = job.sweep
    assert work is not None

    def on_cell(row: dict[str, Any], landed: int, total: int) -> None:
        with job_state.JOBS_LOCK:
            work.rows.append(dict(row))
            job.done = landed

    state, error = "failed", None
    try:
        result = run_plan(work.plan, on_cell=on_cell, should_stop=job.cancel.is_set)
        with job_state.JOBS_LOCK:
            work.engine, work.address = result.engine, result.address
        state = "done"
    except RunCancelled:
        state = "cancelled"
    except Exception as err:  # the worker records every failure, never dies of one
        error = one_sentence(err)
    _finish(job, state, error)


def _finish(job: Job, state: str, error: str | None) -> None:
    with job_state.JOBS_LOCK:
        job.state, job.error, job.ended = state, error, time.monotonic()
        _set_stage(job, state)
        job_state.WAKE.notify_all()


def _set_load_part(job: Job, part: str, now: float) -> None:
    """The model load moved on to `part` ("" when it ended): the part before it is timed and
    kept for the next load's estimate (`stage_times`, as "loading model: <part>")."""
    if part == job.load_part:
        return
    if job.load_part:
        from deffcore.runs.stage_times import record

        seconds = now - job.load_part_started
        record(f"loading model: {job.load_part}", model_of(job), seconds)
        job.load_parts.append((job.load_part, seconds))
    job.load_part, job.load_part_started = part, now


def _observed_rate(job: Job, m: Any) -> float | None:
    """Tokens per second of a run that extracted here: the rate over its batches, else (one
    batch) its tokens over the time from the signal before its first batch to its last."""
    if job.final_tokens_per_s is not None:
        return job.final_tokens_per_s
    if m.cached or job.last is None or job.extract_from is None or not m.pooled.tokens:
        return None
    seconds = job.last[0] - job.extract_from
    return float(m.pooled.tokens) / seconds if seconds > 0 else None
